#!/usr/bin/env bash
# Session 20 call 3: ncu of the expert GEMMs at decode batch 256 (3-layer proxy, 8K): ws_bal (forced) vs persistent (default).
set -uo pipefail
O=$OUT/r3; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
NCU=/usr/local/cuda/bin/ncu
P="proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --batches 256 --contexts 8192 --reps 1 --warmup 0 --no-gemm-peak"
for v in ws pers; do
  X=""; [[ $v == ws ]] && X="--option moe_gemm_variant=moe_wgmma_pk_t128_s6_ws_bal"
  timeout 200 $NCU --kernel-name regex:"moe_wgmma" --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SourceCounters --section LaunchStats --import-source no -o $O/$v $D/pb $P $X > $O/$v.log 2>&1
  $NCU -i $O/$v.ncu-rep --page details > $O/${v}_details.txt 2>&1
  $NCU -i $O/$v.ncu-rep --page source --csv --print-source sass > $O/${v}_src.csv 2>/dev/null; xz -9 $O/${v}_src.csv
  grep -E "moe_wgmma|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots|Eligible|Active Warps|No Eligible|Warp Cycles Per Issued" $O/${v}_details.txt | head -30
  rm -f $O/$v.ncu-rep
done
tar -C $OUT -cf $OUT/r3.tar r3 && rm -rf $O
