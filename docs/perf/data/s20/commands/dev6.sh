#!/usr/bin/env bash
# Session 20 call 6: full GPU suites on the final build; decode + prefill A/B (A: ws_bal forced, B: default = persistent
# s8 rows on decode steps only, S: the s10 persistent row forced), alternated twice.
set -uo pipefail
O=$OUT/r6; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
OUT=$O/suite timeout 240 scripts/device-all.sh tests > $O/tests.log 2>&1
grep -E "tests:" $O/tests.log | tail -2; grep -h "FAILED\|GroupedSelection" $O/suite/*.log | head -8
ARGS="--batches 64,128,256,384,512 --contexts 8192 --reps 10 --prefill-lens 128,512 --prefill-users 1 --prefill-reps 2"
A="--option moe_gemm_variant=moe_wgmma_pk_t128_s6_ws_bal"
S="--option moe_gemm_variant=moe_wgmma_pk_t32_s10_ws_pers"
for r in 1 2; do
  timeout 45 $D/pb proxy-bench $ARGS $A --json $O/a$r.json > $O/a$r.txt 2>&1
  timeout 45 $D/pb proxy-bench $ARGS --json $O/b$r.json > $O/b$r.txt 2>&1 || break
  timeout 45 $D/pb proxy-bench $ARGS $S > $O/s$r.txt 2>&1
  for v in a b s; do echo "$v$r: $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s(%s) ", $1, $3, $11}') | $(grep -A2 '^ prompt' $O/$v$r.txt | tail -2 | awk '{printf "%sx%s:%s ", $1,$2,$4}')"; done
done
tar -C $OUT -cf $OUT/r6.tar r6 && rm -rf $O
