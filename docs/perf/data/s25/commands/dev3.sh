#!/usr/bin/env bash
# Session 25 call 3: the speculative-decoding GPU tests after the fixes (CudaSpeculative.*, the device
# sampler's draft verdicts), then a served A/B of speculation on the CUDA backend (issue 24 items 2, 5):
# two 8-layer synthetic Flash servers side by side, A = --speculative-tokens 2 --speculative-max-batch 0,
# B = off, `dsv4 bench --ab` (ABBA pairs per level), greedy, 64-token prompts, 128 outputs, ignore_eos.
# Synthetic weights: drafts are almost never accepted, so A measures a verify cycle that emits one token.
set -uo pipefail
O=$OUT/r3; mkdir -p $O
source scripts/unpack-bin.sh
xz -dc build-all-bin/dsv4.xz > $BIN/dsv4 && chmod +x $BIN/dsv4
xz -dc build-all-bin/tokenizer.json.xz > $BIN/tokenizer.json
cat build-all-bin/git_sha build-all-bin/git_sha.note > $O/git_sha.txt 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
T0=$(date +%s)
timeout 120 $BIN/dsv4_cuda_tests --gtest_filter='CudaSpeculative.*:CudaSampleRows.Draft*:CudaOps.SplitArgmax*' > $O/tests.txt 2>&1
echo "tests rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  FAILED|^\[  PASSED|Failure|Expected|actual|^\[spec cuda (fast|\]|scripted\] small)|preemption" $O/tests.txt | head -30
start() {
  local n=$1; shift
  $BIN/dsv4 serve --backend cuda --synthetic-flash --layers 8 --tokenizer $BIN/tokenizer.json --port 0 --max-context 4096 --n-pages 20000 --max-running 64 "$@" > $O/serve_$n.log 2>&1 &
  eval "PID_$n=$!"
}
up() {
  local n=$1 u=""
  for i in $(seq 1 150); do u=$(grep -oE "listening on http://[0-9.]+:[0-9]+" $O/serve_$n.log | head -1 | sed 's/listening on //'); [[ -n "$u" ]] && break; sleep 1; done
  echo "$u"
}
start spec --speculative-tokens 2 --speculative-max-batch 0
start off
UA=$(up spec); UB=$(up off)
echo "servers: spec=$UA off=$UB ($(( $(date +%s) - T0 )) s)"
if [[ -n "$UA" && -n "$UB" ]]; then
  B="timeout 200 $BIN/dsv4 bench --endpoint completions --dataset random-ids --ignore-eos --warmup 0 --no-progress --plot none --input-len 64"
  $B --url $UA --ab $UB --max-tokens 8 --conc 1,8,32 --iterations 2 --n-mult 1 --out $O/warm.jsonl > $O/warm.txt 2>&1
  echo "warm rc=$? ($(( $(date +%s) - T0 )) s)"
  $B --url $UA --ab $UB --max-tokens 128 --conc 1,8,32 --iterations 4 --n-mult 1 --out $O/ab.jsonl > $O/ab.txt 2>&1
  echo "ab rc=$? ($(( $(date +%s) - T0 )) s)"; tail -22 $O/ab.txt
  curl -s $UA/metrics | grep -E "^dsv4_(spec|engine_steps|step_)" > $O/metrics_spec.txt; grep spec $O/metrics_spec.txt
  curl -s $UB/metrics | grep -E "^dsv4_(engine_steps|step_)" > $O/metrics_off.txt
else
  tail -5 $O/serve_spec.log $O/serve_off.log
fi
kill ${PID_spec:-} ${PID_off:-} 2>/dev/null; wait 2>/dev/null
cd $OUT && tar czf r3.tgz r3 && rm -rf r3
echo "total $(( $(date +%s) - T0 )) s"
