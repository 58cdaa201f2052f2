#!/usr/bin/env bash
# gemm-x call 1: ncu on dense_gemm_kc (default variants, f32 x) for wo_b / wq_b at T = 64, 256;
# SASS of the kc object; then a short f32-x vs bf16-x sweep of the defaults.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in *.xz; do [[ -f "$f" ]] && xz -dc "$f" > "${f%.xz}" && chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/env.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" | tee -a "$OUT/env.txt"
(command -v cuobjdump && cuobjdump -sass kc.o > kc.sass && xz -c kc.sass > "$OUT/kc.sass.xz") 2>&1 | tail -2
mkdir -p reps
for sh in wo_b wq_b; do for B in 64 256; do
  DSV4_GEMV_SWEEP_SHAPES=$sh DSV4_GEMV_SWEEP=none timeout 60 "$NCU" --clock-control none --set full \
    --import-source no -k regex:dense_gemm_kc -c 1 -f -o reps/${sh}_$B \
    ./dsv4-decode-bench decode-bench --sections gemv_sweep --batches $B --reps 1 --rounds 1 --out /tmp/x.json > reps/${sh}_$B.log 2>&1
  echo "ncu $sh $B rc $?"; tail -2 reps/${sh}_$B.log
  "$NCU" --import reps/${sh}_$B.ncu-rep --page details --print-details all >> "$OUT/details.txt" 2>&1
  "$NCU" --import reps/${sh}_$B.ncu-rep --page raw --csv > reps/${sh}_$B.raw.csv 2>&1
done; done
tar czf "$OUT/reps.tgz" reps/*.ncu-rep reps/*.raw.csv reps/*.log
grep -E "Duration|Throughput|Registers|Achieved Occ|Theoretical Occ|Block Limit|Issue Slots Busy|Executed Ipc|No Eligible|Warp Cycles Per Issued|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/details.txt" | head -120
export DSV4_GEMV_SWEEP_SHAPES=wo_b,wq_b,wo_a DSV4_GEMV_SWEEP=none
timeout 60 ./dsv4-decode-bench decode-bench --sections gemv_sweep --batches 8,64,256 --reps 20 --rounds 2 --out "$OUT/f32.json" > "$OUT/f32.log" 2>&1
DSV4_GEMV_SWEEP_XBF16=1 timeout 60 ./dsv4-decode-bench decode-bench --sections gemv_sweep --batches 8,64,256 --reps 20 --rounds 2 --out "$OUT/bf16.json" > "$OUT/bf16.log" 2>&1
grep -h "copy\|sweep" "$OUT/f32.log" "$OUT/bf16.log"
