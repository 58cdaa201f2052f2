#!/usr/bin/env bash
# Session 27 call 2 (issue 22): the filtered indexer scores (indexer_filter.h).
# 1. The indexer and batched-prefill GPU tests (filtered path == full path, bit for bit).
# 2. 12-layer proxy prefill, A = indexer_filter_min_rows=0 (every row scored in FP64), B = 2048 (the
#    default), C = 1024; alternated A B C A B C; then the op profile of a 16K prompt under B.
# 3. The rest of dsv4_cuda_tests in what time is left.
set -uo pipefail
O=$OUT/r2; mkdir -p $O
source scripts/unpack-bin.sh
pack() { (cd $OUT && tar czf s27r2.tgz r2); }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $O/smi.txt
timeout 120 $BIN/dsv4_cuda_tests --gtest_filter='CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests_filter.txt 2>&1
echo "== filter tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|op indexer|filtered indexer" $O/tests_filter.txt | head -20
pack
PB=$BIN/dsv4-proxy-bench
P="proxy-bench --layers 12 --prefill-only --prefill-lens 4096,8192,16384 --prefill-users 1,16 --prefill-reps 1"
declare -A CFG=([A]="--option indexer_filter_min_rows=0" [B]="" [C]="--option indexer_filter_min_rows=1024")
for r in 1 2; do for v in A B C; do
  timeout 100 $PB $P ${CFG[$v]} --json $O/t_${v}$r.json > $O/t_${v}$r.txt 2>&1; echo "== $v$r rc=$? $(grep -o 'GEMM [0-9]* TFLOP/s' $O/t_${v}$r.txt)"
  grep -A7 "^ prompt" $O/t_${v}$r.txt | tail -6 | awk '{print $1"x"$2, $4, $9}' | tr '\n' ';'; echo
done; done
pack
timeout 60 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384 --prefill-users 1 --prefill-reps 1 --option op_profile=1 > $O/prof_B.txt 2>&1
echo "== prof B rc=$?"; grep -E "op profile,|routed experts|indexer scores|sparse_prefill|total" $O/prof_B.txt
pack
timeout 250 $BIN/dsv4_cuda_tests --gtest_filter='-CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests_rest.txt 2>&1
echo "== rest of the suite rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran" $O/tests_rest.txt | head -20
pack; rm -rf $O
