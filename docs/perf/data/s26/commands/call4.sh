#!/usr/bin/env bash
# Session 26, GPU call 4: the rest of dsv4_cuda_tests (build fd8b8d2), i.e. everything calls 1-2 did
# not run, so that the whole suite has run on this session's code.
ROOT=$OUT; D=$ROOT/s26; mkdir -p "$D"
OUT=$D SKIP_PERF_OPS=1 \
    TESTS_FILTER='-CudaSpeculative.*:CudaVerifyGraphs.*:CudaMtp*:CudaSampleRows.*:CudaSampling*:CudaEngine*' \
    timeout 230 scripts/device-all.sh tests 2>&1 | tail -15
grep -E "^\[  (PASSED|FAILED)" "$D"/cuda_tests.log | head
cd "$ROOT" && tar czf s26.tgz s26 && rm -rf s26
