#!/usr/bin/env bash
# Session 20 call 5: the 4-consumer persistent rows (104 registers): MoE tests, then decode + prefill A/B alternated.
set -uo pipefail
O=$OUT/r5; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb; xz -dc build-all-bin/dsv4_cuda_tests.xz > $D/ct; chmod +x $D/ct
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
timeout 60 $D/ct --gtest_filter="CudaFastOps.Moe*:CudaOpsEdge.Moe*:CudaBatchedPrefill.*" > $O/tests.log 2>&1; echo "tests rc=$?"
grep -E "PASSED|FAILED|_pers T=300" $O/tests.log | head -8
if ! grep -q "PASSED" $O/tests.log; then tar -C $OUT -cf $OUT/r5.tar r5; exit 1; fi
ARGS="--batches 64,128,256,384,512 --contexts 8192 --reps 10 --prefill-lens 128,512 --prefill-users 1 --prefill-reps 2"
A="--option moe_gemm_variant=moe_wgmma_pk_t128_s6_ws_bal"
C="--option decode_moe_gemm_min_tokens=64"
for r in 1 2; do
  timeout 45 $D/pb proxy-bench $ARGS $A > $O/a$r.txt 2>&1
  timeout 45 $D/pb proxy-bench $ARGS > $O/b$r.txt 2>&1 || break
  timeout 45 $D/pb proxy-bench $ARGS $C > $O/c$r.txt 2>&1
  for v in a b c; do echo "$v$r: $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s ", $1, $3}') | $(grep -A2 '^ prompt' $O/$v$r.txt | tail -2 | awk '{printf "%sx%s:%s ", $1,$2,$4}')"; done
done
timeout 45 $D/pb proxy-bench --batches 64,256,512 --contexts 8192 --reps 10 $C --option op_profile=1 > $O/cprof.txt 2>&1
grep -A3 "\[batch" $O/cprof.txt | grep -v "^--" | head -12
tar -C $OUT -cf $OUT/r5.tar r5 && rm -rf $O
