#!/usr/bin/env bash
# Session 20 call 7: ncu of the kept persistent expert GEMM (four consumer warpgroups) at decode batch 256 (3-layer proxy, 8K).
set -uo pipefail
O=$OUT/r7; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
NCU=/usr/local/cuda/bin/ncu
P="proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --batches 256 --contexts 8192 --reps 1 --warmup 0 --no-gemm-peak"
timeout 100 $NCU --kernel-name regex:"moe_wgmma_persist" --launch-count 2 --section SpeedOfLight --section WarpStateStats --section SourceCounters --import-source no -o $O/p4 $D/pb $P > $O/ncu.log 2>&1
$NCU -i $O/p4.ncu-rep --page details > $O/p4_details.txt 2>&1
$NCU -i $O/p4.ncu-rep --page source --csv --print-source sass > $O/p4_src.csv 2>/dev/null; xz -9 $O/p4_src.csv; rm -f $O/p4.ncu-rep
grep -E "moe_wgmma|Duration|DRAM Throughput|Compute \(SM\)|Warp Cycles Per Issued" $O/p4_details.txt
tar -C $OUT -cf $OUT/r7.tar r7 && rm -rf $O
