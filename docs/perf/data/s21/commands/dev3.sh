#!/usr/bin/env bash
# Session 21 call 3: GPU suites on the MTP-reference build; verify steps of n = k + 1 tokens per sequence
# beside the one-token step on the 20-layer proxy at 8K (issue 24 item 5).
set -uo pipefail
O=$OUT/r3; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
timeout 200 $D/pb proxy-bench --batches 1,8,32,64 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3,4 --json $O/verify.json > $O/verify.txt 2>&1
echo "bench rc=$?"
grep -A30 "^verify steps" $O/verify.txt | head -32
grep -B2 -A6 "^ batch" $O/verify.txt | head -12
OUT=$O/suite timeout 300 scripts/device-all.sh tests > $O/tests.txt 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|tests ran" $O/tests.txt | tail -8
tar -C $OUT -cf $OUT/r3.tar r3 && rm -rf $O
