#!/usr/bin/env bash
# Session 26, GPU call 2: the speculative cycle's draft work as CUDA graphs (option spec_graphs).
# Tests: CudaSpeculative (graphed steps take the new graphs), CudaVerifyGraphs, CudaMtp. Served, two
# 8-layer servers each time (scripts/gpu-serve-sweep.sh, phase spec, greedy): (a) speculation with
# spec_graphs on (A) vs off (B), concurrency 1, 8, 32; (b) speculation with spec_graphs on (A) vs
# speculation off (B), concurrency 1-32.
ROOT=$OUT; D=$ROOT/s26; mkdir -p "$D"
OUT=$D SKIP_PERF_OPS=1 TESTS_FILTER='CudaSpeculative.*:CudaVerifyGraphs.*:CudaMtp*' scripts/device-all.sh tests 2>&1 | tail -12
grep -E "^\[  (PASSED|FAILED)|^\[spec" "$D"/cuda_tests.log | head -30
mkdir -p "$D"/a "$D"/b
OUT=$D/a SWEEP_PHASES=spec SPEC_TEMPS=0 SPEC_CONC=1,8,32 SPEC_B_ARGS="--speculative-tokens 2 --speculative-max-batch 0 --option spec_graphs=0" \
    scripts/device-all.sh sweep 2>&1 | grep -E "^ +[0-9]+ +[0-9]|dsv4_spec|rc=" | head -20
OUT=$D/b SWEEP_PHASES=spec SPEC_TEMPS=0 SPEC_CONC=1,4,8,16,32 scripts/device-all.sh sweep 2>&1 | grep -E "^ +[0-9]+ +[0-9]|dsv4_spec|rc=" | head -20
cd "$ROOT" && tar czf s26.tgz s26 && rm -rf s26
