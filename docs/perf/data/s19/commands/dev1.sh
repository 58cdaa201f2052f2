#!/usr/bin/env bash
# Session 19 call 1: unverified tests of 1de9ea6; ncu of the 4K prefill (3-layer proxy) kernels.
set -uo pipefail
O=$OUT; mkdir -p $O/r1
NCU=/usr/local/cuda/bin/ncu
D=$(mktemp -d); cp build-all-bin/dsv4-proxy-bench.xz $D/ && xz -d $D/dsv4-proxy-bench.xz && chmod +x $D/dsv4-proxy-bench
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/dsv4-proxy-bench | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
PB="$D/dsv4-proxy-bench proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --prefill-only --prefill-lens 4096 --prefill-users 1 --prefill-reps 1 --no-gemm-peak"
( OUT=$O/r1/suite SKIP_PERF_OPS=1 TESTS_FILTER='CudaOps.Mhc*:CudaOpsEdge.Indexer*:CudaOpsPaged.*:CudaBatchedPrefill.*:CudaOps.*Indexer*' timeout 200 scripts/device-all.sh tests > $O/r1/tests.log 2>&1 ) &
TP=$!
# per-kernel durations of one 4K prefill (warm-up + 1 rep; 3 layers)
timeout 170 $NCU --metrics gpu__time_duration.sum --csv $PB > $O/r1/ncu_dur.csv 2>&1
python3 tools/prof/ncu_summary.py $O/r1/ncu_dur.csv --top 45 > $O/r1/ncu_dur.txt 2>&1
wait $TP
# detailed: sparse_prefill (CSA layer, tokens 2048-3071), indexer scores + top-k (same block)
for k in "sparse_prefill_kernel 6" "indexer_score_dmma16_kernel 2" "indexer_topk_kernel 2"; do
  set -- $k
  timeout 150 $NCU --kernel-name regex:$1 --launch-skip $2 --launch-count 1 --cache-control none \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section SourceCounters --section WarpStateStats -o $O/r1/$1 $PB > $O/r1/$1.log 2>&1
  $NCU -i $O/r1/$1.ncu-rep --page details > $O/r1/$1_details.txt 2>&1
  $NCU -i $O/r1/$1.ncu-rep --page source --csv --print-source sass > $O/r1/$1_source.csv 2>&1
  rm -f $O/r1/$1.ncu-rep
done
xz -f $O/r1/*.csv
tar -C $O -cf $O/r1.tar r1 && rm -rf $O/r1
