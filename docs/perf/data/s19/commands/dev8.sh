#!/usr/bin/env bash
# Session 19 call 8: E52's build (a) and this session's (b) alternated over the prefill table.
set -uo pipefail
O=$OUT/r8; mkdir -p $O
D=$(mktemp -d)
for v in a b; do f=build-all-bin/dsv4-proxy-bench$([[ $v == a ]] && echo -a).xz; xz -dc $f > $D/pb_$v; chmod +x $D/pb_$v; done
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb_b | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
P="proxy-bench --prefill-only --prefill-lens 128,1024,2048,4096 --prefill-users 1,16 --prefill-reps 2"
for r in 1 2; do for v in a b; do
  timeout 110 $D/pb_$v $P > $O/t_${v}$r.txt 2>&1; echo "== $v$r $(grep -o 'GEMM [0-9]* TFLOP/s' $O/t_${v}$r.txt)"; grep -A9 "^ prompt" $O/t_${v}$r.txt | tail -8 | awk '{print $1,$2,$4,$9}' | tr '\n' ';'; echo
done; done
tar -C $OUT -cf $OUT/r8.tar r8 && rm -rf $O
