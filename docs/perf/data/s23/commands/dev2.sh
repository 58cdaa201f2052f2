#!/usr/bin/env bash
# Session 23 call 2: E58's landed rule on the GPU (A = --option decode_moe_gemm_min_tokens=128, the pre-rule
# kernels of verify steps; B = main), alternated twice; op profiles of 8K and 16K prefill at one user and of
# the batch-256 decode step (issues 22, 15).
set -uo pipefail
O=$OUT/r2; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
for r in 1 2; do
 for s in A B; do
  opt=""; [[ $s == A ]] && opt="--option decode_moe_gemm_min_tokens=128"
  timeout 100 $D/pb proxy-bench --batches 32,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3,4 --no-gemm-peak $opt --json $O/v_$s$r.json > $O/v_$s$r.txt 2>&1
  echo "== $s$r rc=$?"; grep -A12 "^verify steps" $O/v_$s$r.txt | head -12
 done
done
timeout 150 $D/pb proxy-bench --prefill-only --prefill-lens 8192,16384 --prefill-users 1 --prefill-reps 1 --option op_profile=1 --json $O/pf_prof.json > $O/pf_prof.txt 2>&1
echo "pf rc=$?"
timeout 90 $D/pb proxy-bench --batches 256 --contexts 8192 --reps 10 --option op_profile=1 --no-gemm-peak --json $O/dec_prof.json > $O/dec_prof.txt 2>&1
echo "dec rc=$?"
tar -C $OUT -cf $OUT/r2.tar r2 && rm -rf $O
