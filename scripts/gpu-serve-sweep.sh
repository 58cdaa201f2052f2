#!/usr/bin/env bash
# Served vs offline decode on the 20-layer Flash proxy (issue 23 item 4, decode-heavy part): the offline
# step (`proxy-bench`, 1K context) and `dsv4 serve --backend cuda --synthetic-flash` driven by `dsv4 bench`
# (completions, 64-token random-id prompts, ignore_eos, MAX_TOKENS outputs) at the same batch sizes,
# greedy and temperature 1.0, from one binary in one call. Usage, with dsv4 + dsv4-proxy-bench in BIN:
#   BIN=DIR OUT=DIR [CONC=1,8,64,256] [MAX_TOKENS=128] scripts/gpu-serve-sweep.sh
set -uo pipefail
BIN=${BIN:?folder holding dsv4 and dsv4-proxy-bench}; OUT=${OUT:-/tmp/serve-sweep}; mkdir -p "$OUT"
CONC=${CONC:-1,8,64,256}; MAXT=${MAX_TOKENS:-128}; TOK=${TOKENIZER:-$BIN/tokenizer.json}
MAXRUN=$(echo "$CONC" | tr ',' '\n' | sort -n | tail -1)
"$BIN"/dsv4-proxy-bench proxy-bench --batches "$CONC" --contexts 1024 --reps 10 --no-gemm-peak \
    --json "$OUT/offline.json" > "$OUT/offline.txt" 2>&1
echo "offline rc=$?"; grep -E "^ +[0-9]+ +1024 " "$OUT/offline.txt"
"$BIN"/dsv4 serve --backend cuda --synthetic-flash --layers 20 --tokenizer "$TOK" --port 0 --max-running "$MAXRUN" \
    > "$OUT/serve.log" 2>&1 &
SP=$!
URL=""
for i in $(seq 1 90); do
    URL=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/serve.log" | head -1 | sed 's/listening on //')
    [[ -n "$URL" ]] && break
    kill -0 $SP 2>/dev/null || break
    sleep 1
done
[[ -z "$URL" ]] && { echo "server did not start"; tail -20 "$OUT/serve.log"; kill $SP 2>/dev/null; exit 1; }
for t in 0 1.0; do
    timeout 240 "$BIN"/dsv4 bench --url "$URL" --endpoint completions --dataset random-ids --input-len 64 --ignore-eos \
        --max-tokens "$MAXT" --temperature $t --conc "$CONC" --n-mult 1 --iterations 1 --no-progress --plot none \
        --out "$OUT/served_t$t.jsonl" > "$OUT/served_t$t.txt" 2>&1
    echo "== served, temperature $t (rc=$?)"; grep -E "^ +- +[0-9]+ " "$OUT/served_t$t.txt"
done
kill $SP; wait $SP 2>/dev/null
