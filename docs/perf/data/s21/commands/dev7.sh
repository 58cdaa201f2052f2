#!/usr/bin/env bash
# Session 21 call 7: verify steps with the expert GEMM from 128 tokens (default: moe_gemm_min_tokens for
# steps that are not decode-only) vs from 256 (the decode threshold), A B A B in one call (issue 24).
set -uo pipefail
O=$OUT/r7; mkdir -p $O
D=$(mktemp -d); xz -dc build-all-bin/dsv4-proxy-bench.xz > $D/pb; chmod +x $D/pb
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
if ldd $D/pb | grep -q "not found"; then tar -C $D -xJf build-all-bin/blaslibs.tar.xz; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH; fi
cat build-all-bin/git_sha > $O/git_sha.txt
for r in 1 2; do
  for v in A B; do
    opt=""; [[ $v == B ]] && opt="--option moe_gemm_min_tokens=256"
    timeout 100 $D/pb proxy-bench --batches 32,64,128 --contexts 8192 --reps 10 --warmup 2 --verify-tokens 2,3,4 --no-gemm-peak $opt --json $O/$v$r.json > $O/$v$r.txt 2>&1
    echo "$v$r rc=$?"
    grep -A13 "^ batch    ctx   n" $O/$v$r.txt | awk '{print $1,$2,$3,$4,$9}' | tr '\n' ';'; echo
  done
done
tar -C $OUT -cf $OUT/r7.tar r7 && rm -rf $O
