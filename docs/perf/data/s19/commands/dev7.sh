#!/usr/bin/env bash
# Session 19 call 7: full GPU suites; prefill table; query-block options; served TTFT.
set -uo pipefail
O=$OUT/r7; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
OUT=$O/suite timeout 300 scripts/device-all.sh tests > $O/tests.log 2>&1
grep -E "tests:" $O/tests.log | tail -3; grep -h "FAILED" $O/suite/*.log | head
timeout 120 $D/pb proxy-bench --prefill-only --prefill-lens 128,1024,2048,4096 --prefill-users 1,16 --prefill-reps 2 > $O/table.txt 2>&1
grep -B1 -A9 "^ prompt" $O/table.txt | tail -10
for r in 1 2; do for qb in 1024 4096; do
 timeout 60 $D/pb proxy-bench --prefill-only --prefill-lens 4096 --prefill-users 1,16 --prefill-reps 2 --no-gemm-peak --option prefill_query_block=$qb > $O/qb${qb}_$r.txt 2>&1
 echo "qb $qb r$r: $(grep -A3 '^ prompt' $O/qb${qb}_$r.txt | tail -2 | awk '{print $1,$2,$4}' | tr '\n' ' ')"
done; done
T=$(mktemp -d); cp build-all-bin/dsv4.xz build-all-bin/tokenizer.json.xz build-all-bin/blaslibs.tar.xz scripts/gpu-prefill-bench.sh $T/
OUT=$O/ttft BUDGETS=8192:4096 LENS="128 1024 8192" CONCS=1 MAX_CONTEXT=16384 timeout 200 bash $T/gpu-prefill-bench.sh > $O/ttft.log 2>&1
tail -8 $O/ttft.log
tar -C $OUT -cf $OUT/r7.tar r7 && rm -rf $O
