#!/usr/bin/env bash
# Session 29 call 1. (1) GPU tests: the graph_pdl review items (CudaGraphPdl: a hand-built graph's edges;
# the reduced-proxy PDL test and the max_batch check, never run before), the verify / speculative graph
# tests, and the filtered indexer's bound with the review's extreme-range fixes ported to main's kernel
# (CudaOpsEdge.Indexer*: lo <= exact <= hi on every row, keys and q over 2^-20..2^20; CudaBatchedPrefill:
# runner 5 took the filtered path). (2) E65 follow-up, 20-layer proxy decode at 8K, batches 1-64:
# A = graph_pdl=0, B = PDL at every batch, C = B without edges at cluster launches; A B C A B C.
# (3) The bound fix's cost: prefill 16K and 32K x 1 (12 layers), A = the kernel before the fix
# (dsv4-proxy-bench-a, build 3910392), B = after; A B A B.
set -uo pipefail
O=$OUT/r1; mkdir -p $O
pack() { (cd $OUT && tar czf s29r1.tgz r1); }
source scripts/unpack-bin.sh
xz -d -T0 $BIN/dsv4-proxy-bench-a.xz && chmod +x $BIN/dsv4-proxy-bench-a
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 200 $BIN/dsv4_cuda_tests --gtest_filter='CudaGraphPdl.*:CudaProxy.*:CudaVerify*:CudaSpec*:CudaOpsEdge.Indexer*:CudaBatchedPrefill.*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|graph_pdl|op indexer filter" $O/tests.txt | head -16
pack
ARGS="--batches 1,2,4,8,16,64 --contexts 8192 --reps 10 --no-gemm-peak"
for r in 1 2; do for v in a b c; do
  opt="--option graph_pdl=0"; [[ $v != a ]] && opt="--option graph_pdl=1 --option graph_pdl_max_batch=0"
  [[ $v == c ]] && opt="$opt --option graph_pdl_clusters=0"
  timeout 45 $BIN/dsv4-proxy-bench proxy-bench $ARGS $opt --json $O/$v$r.json > $O/$v$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s(%s) ", $1, $3, $11}')"
done; done
pack
for r in 1 2; do for v in A B; do
  PB=$BIN/dsv4-proxy-bench; [[ $v == A ]] && PB=$BIN/dsv4-proxy-bench-a
  timeout 60 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384,32768 --prefill-users 1 --prefill-reps 1 --json $O/p_${v}$r.json > $O/p_${v}$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -A4 '^ prompt' $O/p_${v}$r.txt | grep -E '^ +[0-9]' | awk '{printf "%sx%s %s ms %s; ", $1, $2, $4, $9}')"
done; done
pack; rm -rf $O
