#!/usr/bin/env bash
# Session 28 call 2 (issue 19 item 2): programmatic dependent launch in the decode graphs. Build: main +
# every kernel starting with dev::pdl_begin() + RuntimeOptions::graph_pdl. (1) Every CUDA test and
# perf-op test on this build (all kernels changed; graph_pdl on by default, so every graph test runs
# with it), incl. CudaProxy.ProgrammaticGraphEdges*; (2) the 20-layer proxy decode step at 8K, A =
# --option graph_pdl=0 (the same binary), B = default (on), alternated A B A B A B.
set -uo pipefail
O=$OUT/r2; mkdir -p $O
pack() { (cd $OUT && tar czf s28r2.tgz r2); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
OUT=$O/suite timeout 300 scripts/device-all.sh tests > $O/tests.log 2>&1
echo "== tests rc=$?"; grep -E "tests:|PASSED|FAILED" $O/tests.log | tail -6; grep -h "FAILED\|graph_pdl\|flash shapes" $O/suite/*.log 2>/dev/null | head -12
pack
source scripts/unpack-bin.sh
ARGS="--batches 1,8,64,256 --contexts 8192 --reps 10 --no-gemm-peak"
for r in 1 2 3; do for v in a b; do
  opt=""; [[ $v == a ]] && opt="--option graph_pdl=0"
  timeout 42 $BIN/dsv4-proxy-bench proxy-bench $ARGS $opt --json $O/$v$r.json > $O/$v$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s(%s) ", $1, $3, $11}')"
done; done
pack; rm -rf $O
