#!/usr/bin/env bash
# Session 28 call 1 (issue 22): the branch wip/indexer-bounds-ldmatrix (cbc1489): the filter's GPU
# tests and the batched-prefill tests on its build (B), then A (9fe6eee's proxy-bench, main's bound pass:
# 5422fcd changed only operand spacing in its PTX) and B alternated A B A B at one-user 16K and 32K
# prompts, 12 layers. (dsv4 itself stays home: the carry limit.)
set -uo pipefail
O=$OUT/r1; mkdir -p $O
S=$PWD
source scripts/unpack-bin.sh
xz -dc $S/build-all-bin/dsv4-proxy-bench-a.xz > $BIN/pb_a && chmod +x $BIN/pb_a
pack() { (cd $OUT && tar czf s28r1.tgz r1); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 90 $BIN/dsv4_cuda_tests --gtest_filter='CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|filter|bound" $O/tests.txt | head -20
pack
for r in 1 2; do for v in a b; do
  pb=$BIN/pb_a; [[ $v == b ]] && pb=$BIN/dsv4-proxy-bench
  timeout 60 $pb proxy-bench --layers 12 --prefill-only --prefill-lens 16384,32768 --prefill-users 1 --prefill-reps 1 --no-gemm-peak --json $O/t_${v}$r.json > $O/t_${v}$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -A3 '^ prompt' $O/t_${v}$r.txt | grep -E '^ +[0-9]' | awk '{print $1"x"$2, $4}' | tr '\n' ';')"
done; done
pack
pack; rm -rf $O
