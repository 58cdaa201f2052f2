#!/usr/bin/env bash
# Session 27 call 3 (issue 22): the filtered indexer after call 2, with the listed rows' scores kept in
# list order and ranked there (the second top-k over the list, not the whole row) and the filter
# decided per query block. 1. Indexer, top-k, batched-prefill and proxy GPU tests. 2. 12-layer proxy
# prefill, A = indexer_filter_min_rows=0, B = 2048 (default), C = 1024, alternated A B C A B C.
set -uo pipefail
O=$OUT/r3; mkdir -p $O
source scripts/unpack-bin.sh
pack() { (cd $OUT && tar czf s27r3.tgz r3); }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $O/smi.txt
timeout 200 $BIN/dsv4_cuda_tests --gtest_filter='CudaOpsEdge.*:CudaBatchedPrefill.*:CudaProxy.FastPrefill*:CudaRunner*:CudaFastE2e*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|op indexer filter|filtered indexer" $O/tests.txt | head -20
pack
PB=$BIN/dsv4-proxy-bench
declare -A CFG=([A]="--option indexer_filter_min_rows=0" [B]="" [C]="--option indexer_filter_min_rows=1024")
for r in 1 2; do for v in A B C; do
  timeout 60 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 8192,16384,32768 --prefill-users 1 --prefill-reps 1 ${CFG[$v]} --json $O/t1_${v}$r.json > $O/t1_${v}$r.txt 2>&1; a=$?
  timeout 60 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384 --prefill-users 16 --prefill-reps 1 --no-gemm-peak ${CFG[$v]} --json $O/t16_${v}$r.json > $O/t16_${v}$r.txt 2>&1; b=$?
  echo "== $v$r rc=$a,$b $(grep -o 'GEMM [0-9]* TFLOP/s' $O/t1_${v}$r.txt)"
  for f in t1 t16; do grep -A5 "^ prompt" $O/${f}_${v}$r.txt | grep -E "^ +[0-9]" | awk '{print $1"x"$2, $4, $9}' | tr '\n' ';'; done; echo
done; done
pack
timeout 60 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384 --prefill-users 1 --prefill-reps 1 --option op_profile=1 > $O/prof_B.txt 2>&1
echo "== prof B rc=$?"; grep -E "op profile,|routed experts|indexer scores|sparse_prefill|total" $O/prof_B.txt
pack; rm -rf $O
