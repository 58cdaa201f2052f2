#!/usr/bin/env bash
# Session 29 call 2. (1) CudaGraphPdl with its test race fixed (call 1: the edges as expected, but later
# replays differed from the eager run: the host-to-device cudaMemcpy of x may return before its DMA lands
# and raced with the graph on a non-blocking stream; now cudaMemcpyAsync on that stream), and the
# filtered-indexer tests again. (2) The bound fix's cost: prefill 16K and 32K x 1 (12 layers), A = the
# kernel before the fix (dsv4-proxy-bench-a, build 3910392), B = after (this build); A B A B, then the
# op profile of the last step of a 32K prompt under B.
set -uo pipefail
O=$OUT/r2; mkdir -p $O
pack() { (cd $OUT && tar czf s29r2.tgz r2); }
source scripts/unpack-bin.sh
xz -d -T0 $BIN/dsv4-proxy-bench-a.xz && chmod +x $BIN/dsv4-proxy-bench-a
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 100 $BIN/dsv4_cuda_tests --gtest_filter='CudaGraphPdl.*:CudaOpsEdge.Indexer*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|rep [0-9]" $O/tests.txt | head -12
pack
for r in 1 2; do for v in A B; do
  PB=$BIN/dsv4-proxy-bench; [[ $v == A ]] && PB=$BIN/dsv4-proxy-bench-a
  timeout 70 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384,32768 --prefill-users 1 --prefill-reps 1 --json $O/p_${v}$r.json > $O/p_${v}$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -A4 '^ prompt' $O/p_${v}$r.txt | grep -E '^ +[0-9]' | awk '{printf "%sx%s %s ms %s; ", $1, $2, $4, $9}')"
done; done
pack
timeout 70 $BIN/dsv4-proxy-bench proxy-bench --layers 12 --prefill-only --prefill-lens 32768 --prefill-users 1 --prefill-reps 1 --no-gemm-peak --option op_profile=1 > $O/prof_B.txt 2>&1
echo "== prof rc=$?"; grep -E "op profile,|indexer|total" $O/prof_B.txt | head -16
pack; rm -rf $O
