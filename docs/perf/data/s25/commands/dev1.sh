#!/usr/bin/env bash
# Session 25 call 1: every CUDA test (CudaSpeculative.*, CudaOps.SplitArgmax*, QRowsBf16, AttnOutRows,
# MoeEpLocalize among them: never run before); split argmax A = --option split_argmax=0, B = 1, alternated
# twice, batches 1, 8, 64 at 8K with the verify n = 2 step and the MTP draft graph; then a served smoke of
# `dsv4 serve --backend cuda --speculative-tokens 2` on a 4-layer synthetic Flash (issue 24 item 3, issue 19).
set -uo pipefail
O=$OUT/r1; mkdir -p $O
source scripts/unpack-bin.sh
xz -dc build-all-bin/dsv4.xz > $BIN/dsv4 && chmod +x $BIN/dsv4
xz -dc build-all-bin/tokenizer.json.xz > $BIN/tokenizer.json
cat build-all-bin/git_sha > $O/git_sha.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
T0=$(date +%s)
timeout 300 $BIN/dsv4_cuda_tests --gtest_output=json:$O/tests.json > $O/tests.txt 2>&1
echo "tests rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  FAILED|^\[  PASSED|tests ran|Failure|Expected|Which is|actual" $O/tests.txt | head -40
grep -E "^\[spec|CudaSpeculative|SplitArgmax" $O/tests.txt | grep -E "OK|FAILED|spec" | head -20
for r in 1 2; do
 for s in A B; do
  v=0; [[ $s == B ]] && v=1
  timeout 100 $BIN/dsv4-proxy-bench proxy-bench --batches 1,8,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2 --mtp-draft --no-gemm-peak --option split_argmax=$v --json $O/am_$s$r.json > $O/am_$s$r.txt 2>&1
  echo "== $s$r rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "^ +(1|8|64) +8192 " $O/am_$s$r.txt | head -3; grep -A8 "^verify steps" $O/am_$s$r.txt | grep -E "^ +[0-9]+ +8192" ; grep -iE "draft" $O/am_$s$r.txt | tail -4
 done
done
# verify steps and the MTP draft graph at batch 128 and 256 (E59 stopped at 64): where speculation stops paying
timeout 150 $BIN/dsv4-proxy-bench proxy-bench --batches 128,256 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3 --mtp-draft --no-gemm-peak --json $O/v_hi.json > $O/v_hi.txt 2>&1
echo "== v_hi rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "^ +(128|256) +8192 " $O/v_hi.txt | head -2; grep -A8 "^verify steps" $O/v_hi.txt | grep -E "^ +[0-9]+ +8192"; grep -iE "draft" $O/v_hi.txt | tail -4
# served smoke: speculation on (k = 2) on a 4-layer synthetic Flash
$BIN/dsv4 serve --backend cuda --synthetic-flash --layers 4 --tokenizer $BIN/tokenizer.json --port 0 --max-context 4096 --speculative-tokens 2 > $O/serve_spec.log 2>&1 &
PID=$!
URL=""; for i in $(seq 1 120); do URL=$(grep -oE "listening on http://[0-9.]+:[0-9]+" $O/serve_spec.log | head -1 | sed 's/listening on //'); [[ -n "$URL" ]] && break; kill -0 $PID 2>/dev/null || break; sleep 1; done
echo "serve up: $URL ($(( $(date +%s) - T0 )) s)"
if [[ -n "$URL" ]]; then
 timeout 120 $BIN/dsv4 bench --url $URL --endpoint completions --dataset random-ids --ignore-eos --n-mult 1 --iterations 1 --warmup 0 --no-progress --plot none --input-len 64 --max-tokens 128 --conc 1,8 --out $O/spec_bench.jsonl > $O/spec_bench.txt 2>&1
 echo "bench rc=$?"; tail -12 $O/spec_bench.txt
 curl -s $URL/metrics | grep -E "^dsv4_spec" | tee $O/spec_metrics.txt
fi
kill $PID 2>/dev/null; wait $PID 2>/dev/null; tail -5 $O/serve_spec.log
echo "total $(( $(date +%s) - T0 )) s"
