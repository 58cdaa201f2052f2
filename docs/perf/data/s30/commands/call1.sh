#!/usr/bin/env bash
# Session 30 call 1 (H200 asked for: issue 22's targets are stated on one H200). Build 33783b5.
# (1) The 20-layer prefill table (issue 22 item 3): proxy-bench --prefill-only, prompts 128 to 16K, 1 and 16
# users, with the cuBLAS bf16 GEMM peak measured in the same run. (2) The 20-layer decode step at batches
# 1, 8, 64, 256 at 8K context with the copy and pure-read bandwidth of the same run (issues 19, 15).
# Carry: build-s30 (dsv4-proxy-bench, dsv4, tokenizer, BLAS libraries).
set -uo pipefail
O=$OUT/r1; mkdir -p $O
pack() { (cd $OUT && tar czf s30r1.tgz r1); }
W=$(mktemp -d); xz -dc build-s30/dsv4-proxy-bench.xz > $W/pb; chmod +x $W/pb
if ldd $W/pb | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $O/gpu.txt; cat $O/gpu.txt
timeout 260 $W/pb proxy-bench --layers 20 --prefill-only --prefill-lens 128,1024,2048,4096,8192,16384 --prefill-users 1,16 --prefill-reps 1 --json $O/prefill.json > $O/prefill.txt 2>&1
echo "== prefill rc=$?"; grep -A16 '^ prompt' $O/prefill.txt | head -20; grep -i "peak" $O/prefill.txt | head -3
pack
timeout 280 $W/pb proxy-bench --layers 20 --batches 1,8,64,256 --contexts 8192 --reps 10 --warmup 2 --no-gemm-peak --json $O/decode.json > $O/decode.txt 2>&1
echo "== decode rc=$?"; tail -25 $O/decode.txt
pack; rm -rf $O
