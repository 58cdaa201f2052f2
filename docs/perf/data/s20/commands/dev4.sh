#!/usr/bin/env bash
# Session 20 call 4: full GPU suites on the persistent expert rows; decode + prefill A/B (A: the old ws_bal row forced,
# B: default = persistent rows up to 16 rows per expert, C: B + decode_moe_gemm_min_tokens=64), alternated; op profile of B/C.
set -uo pipefail
O=$OUT/r4; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
OUT=$O/suite TESTS_FILTER="CudaFastOps.Moe*:CudaOpsEdge.Moe*:CudaBatchedPrefill.*:CudaProxy.*" PERF_FILTER="PerfMoe.*" timeout 300 scripts/device-all.sh tests > $O/tests.log 2>&1
grep -E "tests:" $O/tests.log | tail -3; grep -h "FAILED\|wgmma_pk_t32_s8" $O/suite/*.log | head -12
ARGS="--batches 64,128,192,256,384,512 --contexts 8192 --reps 10 --prefill-lens 128,512 --prefill-users 1,16 --prefill-reps 2"
A="--option moe_gemm_variant=moe_wgmma_pk_t128_s6_ws_bal"
C="--option decode_moe_gemm_min_tokens=64"
for r in 1 2; do
  timeout 100 $D/pb proxy-bench $ARGS $A > $O/a$r.txt 2>&1
  timeout 100 $D/pb proxy-bench $ARGS > $O/b$r.txt 2>&1
  timeout 100 $D/pb proxy-bench $ARGS $C > $O/c$r.txt 2>&1
  for v in a b c; do echo "$v$r: $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s ", $1, $3}') | $(grep -A4 '^ prompt' $O/$v$r.txt | tail -4 | awk '{printf "%sx%s:%s ", $1,$2,$4}')"; done
done
timeout 100 $D/pb proxy-bench --batches 64,128,256,512 --contexts 8192 --reps 10 $C --option moe_gemm_variant=moe_wgmma_pk_t32_s6_ws_pers > $O/d1.txt 2>&1
echo "d1 (s6): $(grep -E '^\s+[0-9]+\s+8192 ' $O/d1.txt | awk '{printf "%s:%s ", $1, $3}')"
timeout 100 $D/pb proxy-bench --batches 64,256,512 --contexts 8192 --reps 10 $C --option op_profile=1 > $O/cprof.txt 2>&1
grep -A4 "\[batch" $O/cprof.txt | grep -v "^--" | head -20
P="proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 --batches 256 --contexts 8192 --reps 1 --warmup 0 --no-gemm-peak"
timeout 120 /usr/local/cuda/bin/ncu --kernel-name regex:"moe_wgmma" --launch-count 2 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o $O/pers4 $D/pb $P > $O/ncu.log 2>&1
/usr/local/cuda/bin/ncu -i $O/pers4.ncu-rep --page details > $O/pers4_details.txt 2>&1
/usr/local/cuda/bin/ncu -i $O/pers4.ncu-rep --page source --csv --print-source sass > $O/pers4_src.csv 2>/dev/null; xz -9 $O/pers4_src.csv; rm -f $O/pers4.ncu-rep
grep -E "moe_wgmma|Duration|DRAM Throughput|Compute \(SM\)" $O/pers4_details.txt
tar -C $OUT -cf $OUT/r4.tar r4 && rm -rf $O
