#!/usr/bin/env bash
# Session 29 call 1 (= session 28 call 3, not run then) (issue 19 item 2): graph_pdl follow-up. Call 2: batch 1 -2.7%, batch 8 +2.9%, 64 equal.
# Hypothesis: early-launched CTAs of the split-K cluster GEMMs (dense_gemm_kc, used from a few tokens)
# are the batch-8 loss. (1) CudaProxy.* (the reduced-proxy PDL test fixed: f32/bf16 rows; the
# graph_pdl_max_batch check) and the verify / speculative graph tests; (2) the 20-layer proxy decode
# step at 8K, batches 1-64: A = graph_pdl=0, B = graph_pdl=1 at every batch (graph_pdl_max_batch=0),
# C = B without edges at cluster launches (graph_pdl_clusters=0), alternated A B C A B C.
set -uo pipefail
O=$OUT/r1; mkdir -p $O
pack() { (cd $OUT && tar czf s29r1.tgz r1); }
source scripts/unpack-bin.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
timeout 100 $BIN/dsv4_cuda_tests --gtest_filter='CudaGraphPdl.*:CudaProxy.*:CudaVerify*:CudaSpec*' > $O/tests.txt 2>&1
echo "== tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|graph_pdl|programmatic" $O/tests.txt | head -12
pack
ARGS="--batches 1,2,4,8,16,64 --contexts 8192 --reps 10 --no-gemm-peak"
for r in 1 2; do for v in a b c; do
  opt="--option graph_pdl=0"; [[ $v != a ]] && opt="--option graph_pdl=1 --option graph_pdl_max_batch=0"
  [[ $v == c ]] && opt="$opt --option graph_pdl_clusters=0"
  timeout 45 $BIN/dsv4-proxy-bench proxy-bench $ARGS $opt --json $O/$v$r.json > $O/$v$r.txt 2>&1
  echo "== $v$r rc=$? $(grep -E '^\s+[0-9]+\s+8192 ' $O/$v$r.txt | awk '{printf "%s:%s(%s) ", $1, $3, $11}')"
done; done
pack
# (3) served TTFT at serve's default step budget (8192 tokens, ledger E62), prompts 128 / 1K / 8K, one user
cp scripts/gpu-prefill-bench.sh $BIN/
OUT=$O/ttft BUDGETS=8192:8192 LENS="128 1024 8192" CONCS=1 MAX_CONTEXT=16384 timeout 180 bash $BIN/gpu-prefill-bench.sh
pack; rm -rf $O
