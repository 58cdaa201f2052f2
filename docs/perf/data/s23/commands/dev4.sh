#!/usr/bin/env bash
# Session 23 call 4: every CUDA test (the MTP block on the GPU, CudaMtp / CudaMtpGolden, and verify graphs,
# CudaVerifyGraphs, among them); verify steps A = --option verify_graphs=0 (eager), B = default (graphs),
# alternated twice, batches 1-64 at 8K, n = 2, 3, 4; then B with --mtp-draft (the draft step measured as
# the synthetic MTP block's graph) (issue 24 items 3 and 5).
set -uo pipefail
O=$OUT/r4; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; xz -dc build-all-bin/dsv4_cuda_tests.xz > $D/ct; chmod +x $D/pb $D/ct
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
DSV4_GOLDEN_DIR=$PWD/tests/data/golden timeout 280 $D/ct > $O/tests.txt 2>&1
echo "tests rc=$?"; grep -E "^\[verify|^\[cuda mtp|CudaSpecState|^\[golden-gpu mtp|FAILED|PASSED|tests ran" $O/tests.txt | head -30
for r in 1 2; do
 for s in A B; do
  opt=""; [[ $s == A ]] && opt="--option verify_graphs=0"
  timeout 90 $D/pb proxy-bench --batches 1,8,32,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3,4 --no-gemm-peak $opt --json $O/v_$s$r.json > $O/v_$s$r.txt 2>&1
  echo "== $s$r rc=$?"; grep -A18 "^verify steps" $O/v_$s$r.txt | grep -E "^ +[0-9]+ +8192"
 done
done
timeout 100 $D/pb proxy-bench --batches 1,8,32,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3 --mtp-draft --no-gemm-peak --json $O/v_mtp.json > $O/v_mtp.txt 2>&1
echo "== mtp rc=$?"; grep -A12 "^verify steps" $O/v_mtp.txt | grep -E "^ +[0-9]+ +8192"; grep -i "mtp" $O/v_mtp.txt | head -3
tar -C $OUT -cf $OUT/r4.tar r4 && rm -rf $O
