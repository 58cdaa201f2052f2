#!/usr/bin/env bash
# Session 30 call t3. (1) Tests: the variant loops of the SIMT split-KV attention (CudaOpsPaged) and of the
# grouped expert GEMM (CudaFastOps.Moe*) through check_variants (adds a relaunch for bit-identity), the op
# tests, and CudaProxy.DecodeQBf16* (decode_q_bf16: the same logits bit for bit, and the path taken).
# (2) decode_q_bf16 (issue 19 item 1: q's norm+RoPE write sparse_decode's bf16 q rows, no q_rows_bf16
# launch): A = 0, B = 1 (default), same binary, alternated A B A B, 20-layer proxy, 8K, batches 1, 8, 64.
# (3) The op profile at batch 1 and 8 (B). Carry: build-s30t (dsv4_cuda_tests), build-s30 (proxy-bench, BLAS).
set -uo pipefail
O=$OUT/t3; mkdir -p $O
pack() { (cd $OUT && tar czf s30t3.tgz t3); }
W=$(mktemp -d); xz -dc build-s30t/dsv4_cuda_tests.xz > $W/t; xz -dc build-s30/dsv4-proxy-bench.xz > $W/pb; chmod +x $W/t $W/pb
if ldd $W/t | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
export DSV4_GOLDEN_DIR=$PWD/tests/data/golden
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 170 $W/t --gtest_filter='CudaOpsPaged.*:CudaFastOps.*:*Op*:CudaProxy.DecodeQBf16*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|Which is|actual|not deterministic" $O/tests.txt | head -30
pack
for r in 1 2; do for v in 0 1; do
  timeout 100 $W/pb proxy-bench --layers 20 --batches 1,8,64 --contexts 8192 --reps 10 --warmup 2 --no-gemm-peak --option decode_q_bf16=$v --json $O/q${v}_$r.json > $O/q${v}_$r.txt 2>&1
  echo "== q$v run $r rc=$? $(grep -E '^ +(1|8|64) +8192' $O/q${v}_$r.txt | awk '{printf "b%s %s ms %s; ", $1, $3, $10}')"
done; done
pack
for b in 1 8; do
  timeout 60 $W/pb proxy-bench --layers 20 --batches $b --contexts 8192 --reps 5 --warmup 2 --no-gemm-peak --option op_profile=1 > $O/opprof_b$b.txt 2>&1
  echo "== opprof b$b rc=$?"
done
grep -B2 -A40 "op profile" $O/opprof_b1.txt | head -50
pack; rm -rf $O
