#!/usr/bin/env bash
# Session 21 call 6: op profiles of verify steps (n = 2, 4) and of the one-token decode graph at batch 1 and
# 64, 8K (where item 3's verify step loses time; issue 24).
set -uo pipefail
O=$OUT/r6; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
timeout 200 $D/pb proxy-bench --batches 1,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,4 --option op_profile=1 --no-gemm-peak --json $O/verify_prof.json > $O/verify_prof.txt 2>&1
echo "bench rc=$?"
grep -n "op profile" $O/verify_prof.txt | head
tar -C $OUT -cf $OUT/r6.tar r6 && rm -rf $O
