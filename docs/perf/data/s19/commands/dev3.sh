#!/usr/bin/env bash
# Session 19 call 3: tests of the indexer/sparse_prefill changes; A/B prefill; ncu of the new kernels.
set -uo pipefail
O=$OUT/r3; mkdir -p $O
NCU=/usr/local/cuda/bin/ncu
D=$(mktemp -d)
for v in a b; do f=build-all-bin/dsv4-proxy-bench$([[ $v == a ]] && echo -a).xz; xz -dc $f > $D/pb_$v; chmod +x $D/pb_$v; done
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb_b | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
mv build-all-bin/dsv4-proxy-bench-a.xz $D/ 2>/dev/null || true
OUT=$O/suite PERF_FILTER='PerfSparsePrefill.*:PerfSparseDecode.*' TESTS_FILTER='CudaBatchedPrefill.*:CudaOpsPaged.*:CudaOpsEdge.*:CudaProxy.*:CudaOps.*:CudaSample*:CudaRunner*:CudaEngine*' timeout 240 scripts/device-all.sh tests > $O/tests.log 2>&1
grep -E "PASSED|FAILED|tests:" $O/tests.log | tail -8
P="proxy-bench --prefill-only --prefill-lens 2048,4096 --prefill-users 1,16 --prefill-reps 2"
for r in 1 2; do for v in a b; do
  timeout 100 $D/pb_$v $P > $O/p_${v}$r.txt 2>&1; echo "== $v$r"; grep -A6 "^ prompt" $O/p_${v}$r.txt | tail -5
done; done
timeout 60 $D/pb_b proxy-bench --prefill-only --prefill-lens 4096 --option op_profile=1 > $O/opprof_b.txt 2>&1
PB="proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --prefill-only --prefill-lens 4096 --prefill-users 1 --prefill-reps 1 --no-gemm-peak"
for v in a b; do
timeout 100 $NCU --kernel-name regex:"sparse_prefill_kernel|indexer_score_dmma16|indexer_topk" --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv $D/pb_$v $PB > $O/ncu_$v.csv 2>&1
python3 tools/prof/ncu_summary.py $O/ncu_$v.csv > $O/ncu_$v.txt 2>&1; cat $O/ncu_$v.txt | head -8
done
xz -f $O/*.csv
tar -C $OUT -cf $OUT/r3.tar r3 && rm -rf $O
