#!/usr/bin/env bash
# Session 21 call 8: prefill steps of 128-255 tokens with the expert GEMM from 128 tokens (default) vs from
# 256, A B A B in one call (does E57's verify finding hold for short prompts? issue 22 TTFT).
set -uo pipefail
O=$OUT/r8; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
for r in 1 2; do
  for v in A B; do
    opt=""; [[ $v == B ]] && opt="--option moe_gemm_min_tokens=256"
    timeout 100 $D/pb proxy-bench --prefill-only --prefill-lens 128,192,255,256,512 --prefill-users 1,2 --prefill-reps 5 --no-gemm-peak $opt --json $O/$v$r.json > $O/$v$r.txt 2>&1
    echo "$v$r rc=$?"
    grep -A11 "^ prompt  users" $O/$v$r.txt | awk '{print $1,$2,$4,$5,$6}' | tr '\n' ';'; echo
  done
done
tar -C $OUT -cf $OUT/r8.tar r8 && rm -rf $O
