#!/usr/bin/env bash
# Session 30: the hand-written variant loops of the SIMT split-KV attention (CudaOpsPaged) and the
# grouped expert GEMM (CudaFastOps.Moe*) now through check_variants (which adds a relaunch for
# bit-identity); the op tests again; then the op profile of the 20-layer decode step at batch 1 and 8
# (8K context) for issue 19. Carry: build-s30t (dsv4_cuda_tests), build-s30 (proxy-bench, BLAS).
set -uo pipefail
O=$OUT/t2; mkdir -p $O
W=$(mktemp -d); xz -dc build-s30t/dsv4_cuda_tests.xz > $W/t; xz -dc build-s30/dsv4-proxy-bench.xz > $W/pb; chmod +x $W/t $W/pb
if ldd $W/t | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
export DSV4_GOLDEN_DIR=$PWD/tests/data/golden
nvidia-smi --query-gpu=name --format=csv,noheader > $O/gpu.txt
timeout 200 $W/t --gtest_filter='CudaOpsPaged.*:CudaFastOps.*:*Op*' > $O/op_tests.txt 2>&1
echo "== op tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|Which is|actual|not deterministic|Trace|op_test" $O/op_tests.txt | head -30
(cd $OUT && tar czf s30t2.tgz t2)
for b in 1 8; do
  timeout 120 $W/pb proxy-bench --layers 20 --batches $b --contexts 8192 --reps 10 --warmup 2 --no-gemm-peak --option op_profile=1 > $O/opprof_b$b.txt 2>&1
  echo "== opprof b$b rc=$?"; grep -A45 "op profile" $O/opprof_b$b.txt | head -50
done
(cd $OUT && tar czf s30t2.tgz t2); rm -rf $O
