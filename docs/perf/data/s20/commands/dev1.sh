#!/usr/bin/env bash
# Session 20 call 1: decode op profiles at 64/256/512 (8K); prefill 8K and 16K at 1 and 16 users; ncu kernel times of a 3-layer decode step at batch 256.
set -uo pipefail
O=$OUT/r1; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
timeout 150 $D/pb proxy-bench --batches 1,8,64,128,256,512 --contexts 8192 --reps 10 --option op_profile=1 --json $O/dec.json > $O/dec.txt 2>&1
grep -A12 "^ batch\|% floor" $O/dec.txt | head -30
timeout 150 $D/pb proxy-bench --prefill-only --prefill-lens 8192,16384 --prefill-users 1,16 --prefill-reps 1 --json $O/pf.json > $O/pf.txt 2>&1
grep -A6 "^ prompt" $O/pf.txt | tail -7
timeout 150 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv $D/pb proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --batches 256 --contexts 8192 --reps 1 --warmup 0 --no-gemm-peak > $O/ncu256.csv 2> $O/ncu256.err
wc -l $O/ncu256.csv; tail -3 $O/ncu256.err
xz -9 $O/ncu256.csv
tar -C $OUT -cf $OUT/r1.tar r1 && rm -rf $O
