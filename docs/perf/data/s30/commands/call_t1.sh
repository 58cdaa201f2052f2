#!/usr/bin/env bash
# Session 30: the CUDA test binary with the op-test harness (issue 25 item 2: op_*_test.cpp through
# check_variants, the fp64 references in kernels/ref/fp64.h), the op tests first, then the whole suite.
# Carry: build-s30t (dsv4_cuda_tests), build-s30 (BLAS libraries).
set -uo pipefail
O=$OUT/t1; mkdir -p $O
W=$(mktemp -d); xz -dc build-s30t/dsv4_cuda_tests.xz > $W/t; chmod +x $W/t
if ldd $W/t | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
export DSV4_GOLDEN_DIR=$PWD/tests/data/golden
nvidia-smi --query-gpu=name --format=csv,noheader > $O/gpu.txt
timeout 200 $W/t --gtest_filter='*Op*:RefFp64*:CudaFastOps.*' > $O/op_tests.txt 2>&1
echo "== op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|Which is|actual|not deterministic" $O/op_tests.txt | head -30
(cd $OUT && tar czf s30t1.tgz t1)
timeout 330 $W/t --gtest_filter='-*Op*:CudaFastOps.*' > $O/all_tests.txt 2>&1
echo "== rest rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" $O/all_tests.txt | head -30
(cd $OUT && tar czf s30t1.tgz t1); rm -rf $O
