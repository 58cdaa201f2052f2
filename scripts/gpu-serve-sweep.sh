#!/usr/bin/env bash
# Served vs offline on the 20-layer Flash proxy (issue 23 item 4), from one binary in one call:
#   offline  `proxy-bench` step at each concurrency (1K context): the denominator
#   decode   decode-heavy: 64-token random-id prompts, DECODE_TOKENS (1,024) outputs, ignore_eos, CONC levels,
#            greedy and temperature 1.0 (TEMPS)
#   prefill  prefill-heavy: PREFILL_INPUT (8,192)-token prompts, PREFILL_TOKENS (1,024) outputs, PREFILL_CONC
#   multiturn  `dsv4 bench multi-turn` (issue 17: 16 conversations x 8 turns, 2K shared system prompt)
#            against a server with the prefix cache and one with --no-prefix-cache (MULTITURN_ARGS)
#   overlap  A/B of the overlap scheduler: two servers of OVERLAP_LAYERS (8) layers, one with
#            --no-overlap-schedule, decode-heavy at OVERLAP_CONC with OVERLAP_TOKENS outputs, batches
#            alternated by `dsv4 bench --ab`
#   spec     A/B of MTP speculative decoding (issue 24): two servers of SPEC_LAYERS (8) layers, one with
#            --speculative-tokens SPEC_K (2) --speculative-max-batch 0, decode-heavy at SPEC_CONC, greedy
#            and temperature 1.0 (SPEC_TEMPS); with synthetic weights drafts are rarely accepted, so this
#            measures the machinery's cost at accept length ~1 (the accept counts come from /metrics);
#            SPEC_B_ARGS: the second server's extra arguments (default none: speculation off)
# `dsv4 serve --backend cuda --synthetic-flash --layers LAYERS` is driven by `dsv4 bench` (completions,
# closed loop, one wave of requests per level); the table comes from tools/bench/served_vs_offline.py.
# Usage, with dsv4 and dsv4-proxy-bench in BIN:
#   BIN=DIR OUT=DIR [PHASES="offline decode prefill"] [CONC=1,8,64,256,512] scripts/gpu-serve-sweep.sh
set -uo pipefail
BIN=${BIN:?folder holding dsv4 and dsv4-proxy-bench}; OUT=${OUT:-/tmp/serve-sweep}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")/.." && pwd)
PHASES=${PHASES:-offline decode prefill}
CONC=${CONC:-1,8,64,256,512}; TEMPS=${TEMPS:-0 1.0}; LAYERS=${LAYERS:-20}
DECODE_TOKENS=${DECODE_TOKENS:-1024}
PREFILL_CONC=${PREFILL_CONC:-1,8,64}; PREFILL_INPUT=${PREFILL_INPUT:-8192}; PREFILL_TOKENS=${PREFILL_TOKENS:-1024}
OVERLAP_CONC=${OVERLAP_CONC:-1,8,64}; OVERLAP_TOKENS=${OVERLAP_TOKENS:-256}; OVERLAP_ITER=${OVERLAP_ITER:-3}
SPEC_CONC=${SPEC_CONC:-1,8,32}; SPEC_K=${SPEC_K:-2}; SPEC_TOKENS=${SPEC_TOKENS:-128}; SPEC_ITER=${SPEC_ITER:-3}
SPEC_TEMPS=${SPEC_TEMPS:-0 1.0}
TOK=${TOKENIZER:-$BIN/tokenizer.json}
MAXRUN=$(echo "$CONC" | tr ',' '\n' | sort -n | tail -1)
SERVE_ARGS=${SERVE_ARGS:-}
has() { [[ " $PHASES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

# start_server NAME EXTRA_ARGS...: sets URL_<NAME>, PID_<NAME>
start_server() {
    local name=$1; shift
    "$BIN"/dsv4 serve --backend cuda --synthetic-flash --layers "${SERVER_LAYERS:-$LAYERS}" --tokenizer "$TOK" --port 0 \
        --max-running "$MAXRUN" --max-context 16384 $SERVE_ARGS "$@" > "$OUT/serve_$name.log" 2>&1 &
    local pid=$! url=""
    for i in $(seq 1 180); do
        url=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/serve_$name.log" | head -1 | sed 's/listening on //')
        [[ -n "$url" ]] && break
        kill -0 $pid 2>/dev/null || break
        sleep 1
    done
    [[ -z "$url" ]] && { echo "server $name did not start"; tail -20 "$OUT/serve_$name.log"; kill $pid 2>/dev/null; return 1; }
    eval "URL_$name=$url; PID_$name=$pid"
    stamp "server $name up at $url"
}
bench() {  # bench OUTNAME ARGS...
    local name=$1; shift
    timeout 600 "$BIN"/dsv4 bench --endpoint completions --dataset random-ids --ignore-eos --n-mult 1 --iterations "${ITER:-1}" \
        --warmup 0 --no-progress --plot none --out "$OUT/$name.jsonl" "$@" > "$OUT/$name.txt" 2>&1
    stamp "bench $name rc=$?"
}

if has offline; then
    "$BIN"/dsv4-proxy-bench proxy-bench --layers "$LAYERS" --batches "$CONC" --contexts 1024 --reps 10 --no-gemm-peak \
        --json "$OUT/offline.json" > "$OUT/offline.txt" 2>&1
    stamp "offline rc=$?"; grep -E "^ +[0-9]+ +1024 " "$OUT/offline.txt"
fi
if has decode || has prefill; then
    start_server main || exit 1
    # Capture every graph bucket before measuring (a short wave per level).
    bench warmup --url "$URL_main" --input-len 64 --max-tokens 8 --conc "$CONC"
    if has decode; then
        for t in $TEMPS; do
            bench "decode_t$t" --url "$URL_main" --input-len 64 --max-tokens "$DECODE_TOKENS" --temperature "$t" --conc "$CONC"
        done
    fi
    if has prefill; then
        bench prefill --url "$URL_main" --input-len "$PREFILL_INPUT" --max-tokens "$PREFILL_TOKENS" --conc "$PREFILL_CONC"
    fi
    curl -s "$URL_main/metrics" | grep -E "^dsv4_(engine_|engine_steps|step_)" > "$OUT/metrics_main.txt"
    kill "$PID_main"; wait "$PID_main" 2>/dev/null
fi
if has overlap; then
    # Two servers at once, each holding its weights: OVERLAP_LAYERS (8) layers and a fixed pool each.
    SERVER_LAYERS=${OVERLAP_LAYERS:-8} SERVE_ARGS="$SERVE_ARGS --n-pages 20000" start_server on || exit 1
    SERVER_LAYERS=${OVERLAP_LAYERS:-8} SERVE_ARGS="$SERVE_ARGS --n-pages 20000" start_server off --no-overlap-schedule || exit 1
    bench overlap_warmup --url "$URL_on" --ab "$URL_off" --input-len 64 --max-tokens 8 --conc "$OVERLAP_CONC"
    ITER=$OVERLAP_ITER bench overlap_ab --url "$URL_on" --ab "$URL_off" --input-len 64 --max-tokens "$OVERLAP_TOKENS" \
        --conc "$OVERLAP_CONC"
    grep -iE "faster|slower|no detectable|level|B/A" "$OUT/overlap_ab.txt" | head -30
    for n in on off; do curl -s "$(eval echo \$URL_$n)/metrics" | grep -E "^dsv4_engine_" > "$OUT/metrics_$n.txt"; done
    kill "$PID_on" "$PID_off"; wait 2>/dev/null
fi
if has spec; then
    SERVER_LAYERS=${SPEC_LAYERS:-8} SERVE_ARGS="$SERVE_ARGS --n-pages 20000" start_server spec \
        --speculative-tokens "$SPEC_K" --speculative-max-batch 0 || exit 1
    SERVER_LAYERS=${SPEC_LAYERS:-8} SERVE_ARGS="$SERVE_ARGS --n-pages 20000" start_server plain ${SPEC_B_ARGS:-} || exit 1
    bench spec_warmup --url "$URL_spec" --ab "$URL_plain" --input-len 64 --max-tokens 8 --conc "$SPEC_CONC"
    for t in $SPEC_TEMPS; do
        ITER=$SPEC_ITER bench "spec_ab_t$t" --url "$URL_spec" --ab "$URL_plain" --input-len 64 \
            --max-tokens "$SPEC_TOKENS" --temperature "$t" --conc "$SPEC_CONC"
        grep -iE "faster|slower|no detectable|level|B/A" "$OUT/spec_ab_t$t.txt" | head -20
    done
    for n in spec plain; do curl -s "$(eval echo \$URL_$n)/metrics" | grep -E "^dsv4_(engine|spec)_" > "$OUT/metrics_$n.txt"; done
    grep -E "^dsv4_spec_" "$OUT/metrics_spec.txt"
    kill "$PID_spec" "$PID_plain"; wait 2>/dev/null
fi
if has multiturn; then
    # Issue 17's multi-turn workload: 16 conversations x 8 turns over a 2K shared system prompt, 64-token
    # user turns, 128-token answers, with the prefix cache and without it (a server each, in turn).
    for mode in on off; do
        extra=""; [[ $mode == off ]] && extra="--no-prefix-cache"
        start_server "mt_$mode" $extra || exit 1
        timeout 600 "$BIN"/dsv4 bench multi-turn --url "$(eval echo \$URL_mt_$mode)" ${MULTITURN_ARGS:-} \
            --out "$OUT/multiturn_$mode.jsonl" --label "prefix cache $mode" > "$OUT/multiturn_$mode.txt" 2>&1
        stamp "multi-turn, cache $mode: rc=$?"; tail -n 11 "$OUT/multiturn_$mode.txt"
        curl -s "$(eval echo \$URL_mt_$mode)/metrics" | grep -E "^dsv4_(prefix_cache|cache_pages)" > "$OUT/metrics_mt_$mode.txt"
        kill "$(eval echo \$PID_mt_$mode)"; wait 2>/dev/null
    done
fi
runs=()
for t in $TEMPS; do [[ -f "$OUT/decode_t$t.jsonl" ]] && runs+=("decode-t$t=$OUT/decode_t$t.jsonl"); done
[[ -f "$OUT/prefill.jsonl" ]] && runs+=("prefill-8k=$OUT/prefill.jsonl")
if [[ -f "$OUT/offline.json" && ${#runs[@]} -gt 0 ]]; then
    python3 "$HERE/tools/bench/served_vs_offline.py" --offline "$OUT/offline.json" "${runs[@]}" | tee "$OUT/table.md"
fi
stamp done
