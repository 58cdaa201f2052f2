#!/usr/bin/env bash
# gemm-x call 2: PerfDenseGemv (every variant, kc2 included, vs fp64; determinism), the A/B sweep
# (old / new heuristic + kc and kc2 columns, f32 x, ABBA over 2 rounds), ncu on kc2 at wo_b T = 64.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in *.xz; do [[ -f "$f" ]] && xz -dc "$f" > "${f%.xz}" && chmod +x "${f%.xz}"; done
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; cat git_sha; } | tee "$OUT/env.txt"
timeout ${TEST_S:-60} ./dsv4_perf_ops_tests --gtest_filter='PerfDenseGemv*' > "$OUT/tests.log" 2>&1
echo "perf tests rc $?"
grep -E "^\[  |Failure|rel_l2|Expected|Which is|Trace|dense_g|deterministic" "$OUT/tests.log" | grep -v "^\[ RUN\|^\[       OK" | head -30
export DSV4_GEMV_SWEEP_SHAPES=${SHAPES:-wo_b,wo_a,wq_b,shared_w1,lm_head}
export DSV4_GEMV_SWEEP=${VARIANTS:-dense_gemm_kc.bt32_bh16_w4_s2.sm90,dense_gemm_kc.bt64_bh16_w4_s2.sm90,dense_gemm_kc.bt64_bh32_w4_s2.sm90,dense_gemm_kc2.bt32_bh16_w4_s2.sm90,dense_gemm_kc2.bt64_bh16_w4_s2.sm90,dense_gemm_kc2.bt32_bh16_w8_s2.sm90,dense_gemm_kc2.bt64_bh16_w8_s2.sm90,dense_gemm_kc2.bt64_bh32_w4_s2.sm90}
timeout ${BENCH_S:-150} ./dsv4-decode-bench decode-bench --sections gemv_sweep --batches ${BATCHES:-8,32,64,128,256} --reps 20 --rounds 2 --out "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1
echo "bench rc $?"
grep -E "^copy|^sweep" "$OUT/sweep.log" | head -40
if [[ -n "$NCU_V" ]]; then
  DSV4_GEMV_SWEEP_SHAPES=wo_b DSV4_GEMV_SWEEP=$NCU_V timeout 60 /usr/local/cuda/bin/ncu --clock-control none \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section InstructionStats \
    -k regex:${NCU_K:-dense_gemm_kc2} -c 1 ./dsv4-decode-bench decode-bench --sections gemv_sweep --batches 64 --reps 1 --rounds 1 --out /tmp/x.json > "$OUT/ncu_kc2.txt" 2>&1
  grep -E "Duration|Issue Slots|Executed Ipc A|No Eligible|Registers|Achieved Occ|Instructions Executed  |Eligible Warps|Stall (Wait|Short|Long|Barrier|Math)" "$OUT/ncu_kc2.txt" | head -24
fi
