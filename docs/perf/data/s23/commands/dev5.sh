#!/usr/bin/env bash
# Session 23 call 5: where the MTP block's draft step goes at batch 1 and 64 (op profile of its graph;
# E59 measured it 49% above the head + one-layer estimate at batch 1) (issue 24 item 5).
set -uo pipefail
O=$OUT/r5; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
timeout 150 $D/pb proxy-bench --batches 1,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2 --mtp-draft --no-gemm-peak --option op_profile=1 --json $O/mtp_prof.json > $O/mtp_prof.txt 2>&1
echo "rc=$?"; grep -A30 "MTP draft, batch" $O/mtp_prof.txt | head -70
tar -C $OUT -cf $OUT/r5.tar r5 && rm -rf $O
