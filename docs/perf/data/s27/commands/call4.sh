#!/usr/bin/env bash
# Session 27 call 4: the whole dsv4_cuda_tests on the final build (filter decided per eager block,
# its four launches marked apart), then where a 32K prompt's last step spends the filtered
# indexer's time (12-layer proxy, one user, op profile).
set -uo pipefail
O=$OUT/r4; mkdir -p $O
source scripts/unpack-bin.sh
pack() { (cd $OUT && tar czf s27r4.tgz r4); }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $O/smi.txt
timeout 60 $BIN/dsv4-proxy-bench proxy-bench --layers 12 --prefill-only --prefill-lens 32768 --prefill-users 1 --prefill-reps 1 --no-gemm-peak --option op_profile=1 > $O/prof_B.txt 2>&1
echo "== prof rc=$?"; grep -E "op profile,|routed experts|indexer|sparse_prefill|total" $O/prof_B.txt
pack
timeout 330 $BIN/dsv4_cuda_tests > $O/tests.txt 2>&1
echo "== suite rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests? ran" $O/tests.txt | head -20
pack; rm -rf $O
