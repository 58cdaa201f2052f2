#!/usr/bin/env bash
# Session 29 call 6: served TTFT on the 20-layer proxy (issue 22's table) on an H100: call 3's server did not
# fit at 90% memory use, so --gpu-memory-utilization 0.97. Prompts 128 / 1K / 8K, one user. Carry: build-ttft.
set -uo pipefail
O=$OUT/r6; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
sed 's/--layers 20/--layers 20 --gpu-memory-utilization 0.97/' build-ttft/gpu-prefill-bench.sh > build-ttft-run.sh
cp build-ttft/dsv4.xz build-ttft/tokenizer.json.xz build-ttft/blaslibs.tar.xz . 2>/dev/null
OUT=$O/ttft20 BUDGETS=8192:8192 LENS="128 1024 8192" CONCS=1 MAX_CONTEXT=16384 timeout 240 bash build-ttft-run.sh
(cd $OUT && tar czf s29r6.tgz r6); rm -rf $O
