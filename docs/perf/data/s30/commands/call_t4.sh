#!/usr/bin/env bash
# Session 30 call t4 (run twice: the first run's binaries were linked from objects compiled against two versions
# of cuda_runner_impl.h, see docs/developing.md; data t4/ is that failed run, t5/ the rebuilt one): call t3 cut
# to the device time left. (1) The tests of this session's unrun changes:
# CudaOpsPaged.SplitKv* and CudaFastOps.*Moe* (their variant loops through check_variants, with a relaunch
# for bit-identity) and CudaProxy.DecodeQBf16* (the same logits bit for bit, the path taken). (2)
# decode_q_bf16 A = 0, B = 1 alternated A B A B, 20-layer proxy, 8K, batches 1 and 8. (3) The op profile
# at batch 1 (B). Carry: build-s30t (dsv4_cuda_tests), build-s30 (proxy-bench, BLAS).
set -uo pipefail
O=$OUT/${RUN:-t4}; mkdir -p $O
pack() { (cd $OUT && tar czf s30${RUN:-t4}.tgz ${RUN:-t4}); }
W=$(mktemp -d); xz -dc build-s30t/dsv4_cuda_tests.xz > $W/t; xz -dc build-s30/dsv4-proxy-bench.xz > $W/pb; chmod +x $W/t $W/pb
if ldd $W/t | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
export DSV4_GOLDEN_DIR=$PWD/tests/data/golden
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 100 $W/t --gtest_filter='CudaOpsPaged.SplitKv*:CudaFastOps.*Moe*:CudaProxy.DecodeQBf16*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|Which is|actual|not deterministic|^\[       OK" $O/tests.txt | head -30
pack
for r in 1 2; do for v in 0 1; do
  timeout 60 $W/pb proxy-bench --layers 20 --batches 1,8 --contexts 8192 --reps 10 --warmup 2 --no-gemm-peak --option decode_q_bf16=$v --json $O/q${v}_$r.json > $O/q${v}_$r.txt 2>&1
  echo "== q$v run $r rc=$? $(grep -E '^ +(1|8) +8192' $O/q${v}_$r.txt | awk '{printf "b%s %s ms %s; ", $1, $3, $10}')"
done; done
pack
timeout 50 $W/pb proxy-bench --layers 20 --batches 1 --contexts 8192 --reps 5 --warmup 2 --no-gemm-peak --option op_profile=1 > $O/opprof_b1.txt 2>&1
echo "== opprof rc=$?"; grep -A40 "op profile" $O/opprof_b1.txt | head -45
pack; rm -rf $O
