#!/usr/bin/env bash
# gemm-kchunk device call: the dense GEMV op tests (every variant vs fp64 CPU, determinism), the
# dispatcher tests if carried, then the gemv sweep (old heuristic vs new vs every K-chunk variant,
# f32 x as in the runtime). Binaries are xz-compressed (the carried folder must stay small).
# Setup here: build dsv4_cuda_tests and dsv4-decode-bench (dsv4_cuda_tests links OpenBLAS:
# libopenblas.so.0, libgfortran.so.5, libquadmath.so.0 xz-ed into lib/), strip, `xz` them into
# /work/main/.gpu/<name>/ next to a copy of this script and `git rev-parse HEAD > git_sha`; then run(command="cd .gpu/<name> && ./gemv-sweep-device.sh", carry=[".gpu/<name>"]).
# Env: SHAPES, VARIANTS, BATCHES, TEST_S, BENCH_S override the defaults below.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in *.xz lib/*.xz; do [[ -f "$f" ]] && xz -dc "$f" > "${f%.xz}" && chmod +x "${f%.xz}"; done
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}  # dsv4_cuda_tests links OpenBLAS (lib/*.so.*.xz)
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; echo "git sha: $(cat git_sha)"; } | tee "$OUT/env.txt"
timeout ${TEST_S:-50} ./dsv4_cuda_tests --gtest_filter='*OpDenseGemv*' --gtest_output=json:"$OUT/tests.json" > "$OUT/tests.log" 2>&1
echo "op tests rc $?"
grep -E "^\[  |Failure|rel_l2|Expected|Which is|Trace|dense_g|deterministic" "$OUT/tests.log" | grep -v "^\[ RUN\|^\[       OK" | head -40
timeout 30 ./dsv4_cuda_tests --gtest_filter='CudaFastOps.Linear*' > "$OUT/cuda_tests.log" 2>&1
echo "cuda tests rc $?"; grep -E "^\[  |Failure|op fast linear" "$OUT/cuda_tests.log" | head -30
SHAPES=${SHAPES:-wo_b,wo_a,shared_w1,shared_w2,wq_a,wq_b,lm_head,wkv,idx_wq_b,router,csa_compressor}
VARIANTS=${VARIANTS:-dense_gemm_kc.bt32_bh32_w4_s2.sm90,dense_gemm_kc.bt32_bh16_w4_s2.sm90,dense_gemm_kc.bt64_bh32_w4_s2.sm90,dense_gemm_kc.bt64_bh16_w4_s2.sm90,dense_gemm_kc.bt32_bh16_w8_s2.sm90,dense_gemm_kc.bt64_bh16_w8_s2.sm90}
timeout ${BENCH_S:-100} ./dsv4-decode-bench decode-bench --sections gemv_sweep --gemv-sweep-shapes "$SHAPES" --gemv-sweep-variants "$VARIANTS" --batches ${BATCHES:-1,8,16,32,64,128,256} --reps 20 --rounds 2 --out "$OUT/decode_bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc $?"
grep -E "copy|sweep|rror" "$OUT/bench.log" | grep -v "^  " | head -80
