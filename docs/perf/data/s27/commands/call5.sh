#!/usr/bin/env bash
# Session 27 call 5 (issue 22, E63 follow-up): the bf16 bound pass with the next key tile's loads issued
# before the current tile's MMAs (139 registers, 3 CTAs per SM; was 104, 4). The filter's GPU tests on
# B, then A (e1f1468's proxy-bench) and B alternated A B A B: one-user 16K and 32K prompts, 12 layers.
set -uo pipefail
O=$OUT/r5; mkdir -p $O
source scripts/unpack-bin.sh
xz -dc build-all-bin/dsv4-proxy-bench-a.xz > $BIN/pb_a && chmod +x $BIN/pb_a
pack() { (cd $OUT && tar czf s27r5.tgz r5); }
timeout 60 $BIN/dsv4_cuda_tests --gtest_filter='CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|op indexer filter" $O/tests.txt | head
pack
for r in 1 2; do for v in a b; do
  pb=$BIN/pb_a; [[ $v == b ]] && pb=$BIN/dsv4-proxy-bench
  timeout 45 $pb proxy-bench --layers 12 --prefill-only --prefill-lens 16384,32768 --prefill-users 1 --prefill-reps 1 --no-gemm-peak --json $O/t_${v}$r.json > $O/t_${v}$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -A3 '^ prompt' $O/t_${v}$r.txt | grep -E '^ +[0-9]' | awk '{print $1"x"$2, $4}' | tr '\n' ';')"
done; done
pack; rm -rf $O
