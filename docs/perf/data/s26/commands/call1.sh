#!/usr/bin/env bash
# Session 26, GPU call 1 (run from the repository root on the GPU machine, build-all-bin carried):
# speculative decoding's, the device sampler's and the sampled engine tests (the acceptance rule
# changed) and the dense GEMM dispatch (the split-K epilogue written once), the served A/B of
# speculation on vs off (scripts/gpu-serve-sweep.sh, phase spec), then verify steps n = 2, 3 beside the one-token step at batch 64-256 on the 20-layer proxy at 8K (the
# batch above which speculation stops paying). Everything under $OUT/s26 comes back as one archive.
ROOT=$OUT; D=$ROOT/s26; mkdir -p "$D"
OUT=$D SKIP_PERF_OPS=1 TESTS_FILTER='CudaSpeculative.*:CudaSampleRows.*:CudaSampling*:CudaEngine*:CudaFastOps.Linear*' \
    SWEEP_PHASES=spec SPEC_CONC=${SPEC_CONC:-1,8,32} scripts/device-all.sh tests sweep 2>&1 | tail -40
grep -E "^\[  (PASSED|FAILED)|^\[spec|^\[sample" "$D"/cuda_tests.log | head -30
source scripts/unpack-bin.sh
timeout "${VERIFY_TIMEOUT:-170}" "$BIN"/dsv4-proxy-bench proxy-bench --layers 20 --batches 64,128,256 --contexts 8192 \
    --reps 5 --warmup 2 --verify-tokens 2,3 --mtp-draft --no-gemm-peak --json "$D"/verify.json > "$D"/verify.txt 2>&1
echo "verify rc=$?"; tail -25 "$D"/verify.txt
cd "$ROOT" && tar czf s26.tgz s26 && rm -rf s26
