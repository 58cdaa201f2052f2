#!/usr/bin/env bash
# Session 19 call 10: review fixes (wgmma pins, store_share self-check, topk_rows 256 threads, tests); B3 vs B5.
set -uo pipefail
O=$OUT/r10; mkdir -p $O
NCU=/usr/local/cuda/bin/ncu
D=$(mktemp -d)
for v in a b; do f=build-all-bin/dsv4-proxy-bench$([[ $v == a ]] && echo -a).xz; xz -dc $f > $D/pb_$v; chmod +x $D/pb_$v; done
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb_b | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
OUT=$O/suite PERF_FILTER='PerfSparsePrefill.*:PerfSparseDecode.*' TESTS_FILTER='CudaBatchedPrefill.*:CudaProxy.*' timeout 200 scripts/device-all.sh tests > $O/tests.log 2>&1
grep -E "tests:" $O/tests.log | tail -2; grep -h "FAILED\|Failure" $O/suite/*.log | head
P="proxy-bench --prefill-only --prefill-lens 4096 --prefill-users 1,16 --prefill-reps 2 --no-gemm-peak"
for r in 1; do for v in a b; do
  timeout 60 $D/pb_$v $P > $O/p_${v}$r.txt 2>&1; echo "== $v$r $(grep -A3 '^ prompt' $O/p_${v}$r.txt | tail -2 | awk '{print $1,$2,$4}' | tr '\n' ' ')"
done; done
PB="proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --prefill-only --prefill-lens 4096 --prefill-users 1 --prefill-reps 1 --no-gemm-peak"
for v in a b; do
timeout 60 $NCU --kernel-name regex:"sparse_prefill_kernel" --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv $D/pb_$v $PB > $O/ncu_$v.csv 2>&1
python3 tools/prof/ncu_summary.py $O/ncu_$v.csv > $O/ncu_$v.txt 2>&1; head -3 $O/ncu_$v.txt | tail -1
done
xz -f $O/*.csv
tar -C $OUT -cf $OUT/r10.tar r10 && rm -rf $O
