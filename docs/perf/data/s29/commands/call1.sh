#!/usr/bin/env bash
# Session 29 call 1. (1) GPU tests: the graph_pdl review items (CudaGraphPdl: a hand-built graph's edges;
# the reduced-proxy PDL test and the max_batch check, never run before; Flash shapes with a third runner
# that prefetches GEMV weights into L2), the verify / speculative graph tests, the filtered indexer's
# bound with the review's extreme-range fixes ported to main's kernel (CudaOpsEdge.Indexer*: lo <= exact
# <= hi on every row, keys and q over 2^-20..2^20; CudaBatchedPrefill: runner 5 took the filtered path),
# and every dense GEMV variant with and without the L2 prefetch (PerfDenseGemv, bit-identical).
# (2) 20-layer proxy decode at 8K, batches 1, 8, 64; variants alternated twice:
#   a = graph_pdl=0; b = default (PDL in the batch-1 graphs); c = PDL in every graph; d = c without
#   edges at cluster launches (E65's batch-8 loss: the split-K clusters?); e = b + gemv_prefetch_l2;
#   f = c + gemv_prefetch_l2.
set -uo pipefail
O=$OUT/r1; mkdir -p $O
pack() { (cd $OUT && tar czf s29r1.tgz r1); }
source scripts/unpack-bin.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 200 $BIN/dsv4_cuda_tests --gtest_filter='CudaGraphPdl.*:CudaProxy.*:CudaVerify*:CudaSpec*:CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|graph_pdl|op indexer filter" $O/tests.txt | head -16
timeout 60 $BIN/dsv4_perf_ops_tests --gtest_filter='PerfDenseGemv.*' > $O/perf_gemv.txt 2>&1
echo "== perf gemv rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED" $O/perf_gemv.txt | head -8
pack
ARGS="--batches 1,8,64 --contexts 8192 --reps 10 --no-gemm-peak"
declare -A V=([a]="--option graph_pdl=0" [b]="" [c]="--option graph_pdl_max_batch=0"
  [d]="--option graph_pdl_max_batch=0 --option graph_pdl_clusters=0" [e]="--option gemv_prefetch_l2=1"
  [f]="--option graph_pdl_max_batch=0 --option gemv_prefetch_l2=1")
for r in 1 2; do for v in a b c d e f; do
  timeout 40 $BIN/dsv4-proxy-bench proxy-bench $ARGS ${V[$v]} --json $O/$v$r.json > $O/$v$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s(%s) ", $1, $3, $11}')"
done; done
pack; rm -rf $O
