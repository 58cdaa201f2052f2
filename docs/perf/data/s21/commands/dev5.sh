#!/usr/bin/env bash
# Session 21 call 5: verify points again with the draft step counting the served path's overhead (review
# of E57), batches 1-128 at 8K (issue 24 item 5).
set -uo pipefail
O=$OUT/r5; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
cat build-all-bin/git_sha > $O/git_sha.txt
timeout 240 $D/pb proxy-bench --batches 1,8,32,64,128 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 4,2,3 --json $O/verify.json > $O/verify.txt 2>&1
echo "bench rc=$?"
grep -A30 "^verify steps" $O/verify.txt | head -30
grep "^ceilings" $O/verify.txt
tar -C $OUT -cf $OUT/r5.tar r5 && rm -rf $O
