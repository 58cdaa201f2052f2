#!/usr/bin/env bash
# Session 29 call 3: served TTFT (issue 22 item 3) at serve's default step budget (8,192 tokens, ledger E62),
# `dsv4 serve --backend cuda --synthetic-flash --layers 20`, prompts of 128, 1K and 8K tokens, one user,
# `dsv4 bench --max-tokens 1` (three requests each). Carry: build-ttft (dsv4, tokenizer, BLAS libraries,
# scripts/gpu-prefill-bench.sh).
set -uo pipefail
O=$OUT/r3; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
OUT=$O/ttft BUDGETS=8192:8192 LENS="128 1024 8192" CONCS=1 MAX_CONTEXT=16384 timeout 240 bash build-ttft/gpu-prefill-bench.sh
(cd $OUT && tar czf s29r3.tgz r3); rm -rf $O
