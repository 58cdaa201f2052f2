#!/usr/bin/env bash
# Session 23 call 1: the GPU suites and the serve stage (generate cuda vs cpu, serve over HTTP) on main
# (owed since 04d353e: E58's rule and the max_step_tokens rename never ran on a GPU).
set -uo pipefail
O=$OUT/r1; mkdir -p $O
cat build-all-bin/git_sha > $O/git_sha.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $O/smi.txt
export LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__)+"/lib")' 2>/dev/null):${LD_LIBRARY_PATH:-}
OUT=$O/suite timeout 330 scripts/device-all.sh tests > $O/tests.txt 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|tests ran|SUMMARY|rc" $O/tests.txt | tail -12
OUT=$O/serve timeout 230 scripts/device-all.sh serve > $O/serve.txt 2>&1
echo "serve rc=$?"
tail -15 $O/serve.txt
tar -C $OUT -cf $OUT/r1.tar r1 && rm -rf $O
