#!/usr/bin/env bash
# Session 27 call 1 (issue 22 item 2): the prefill step budget and chunk size by measurement.
# A = 8192-token steps / 4096-token chunks (serve's cuda default since E23, chosen under the per-token
# path), B = 16384 / 8192, C = 16384 / 16384; alternated A B C A B C on a 12-layer proxy (a 16K-token
# step's workspace beside 20 layers does not fit an 80 GB H100); then op profiles of the first and last
# step of one 16K prompt under A and B.
set -uo pipefail
O=$OUT/r1; mkdir -p $O
source scripts/unpack-bin.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $O/smi.txt
PB=$BIN/dsv4-proxy-bench
P="proxy-bench --layers 12 --prefill-only --prefill-lens 2048,4096,8192,16384 --prefill-users 1,16 --prefill-reps 1"
declare -A CFG=([A]="--prefill-step 8192 --prefill-chunk 4096" [B]="--prefill-step 16384 --prefill-chunk 8192" [C]="--prefill-step 16384 --prefill-chunk 16384")
for r in 1 2; do for v in A B C; do
  timeout 150 $PB $P ${CFG[$v]} --json $O/t_${v}$r.json > $O/t_${v}$r.txt 2>&1; echo "== $v$r rc=$? $(grep -o 'GEMM [0-9]* TFLOP/s' $O/t_${v}$r.txt)"
  grep -A9 "^ prompt" $O/t_${v}$r.txt | tail -8 | awk '{print $1"x"$2, $4, $9}' | tr '\n' ';'; echo
done; done
for v in A B; do
  timeout 100 $PB proxy-bench --layers 12 --prefill-only --prefill-lens 16384 --prefill-users 1 --prefill-reps 1 ${CFG[$v]} --option op_profile=1 > $O/prof_$v.txt 2>&1
  echo "== prof $v rc=$?"; grep -E "op profile,|routed experts|indexer|sparse_prefill|total" $O/prof_$v.txt
done
cd $OUT && tar czf s27r1.tgz r1 && rm -rf r1
