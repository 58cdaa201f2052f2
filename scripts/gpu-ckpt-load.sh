#!/usr/bin/env bash
# Issue 14 on the GPU machine, in one lease (its disk is wiped between leases): write an N-layer
# synthetic Flash checkpoint in the official layout to local disk (with the tokenizer copied in),
# read its shards with `cat` twice (the second with a warm page cache: the plain read rate), start
# `dsv4 serve --backend cuda --model DIR` (the path a user's download takes; its [load] line gives
# the load rate, peak RssAnon and the pinned host-to-device rate measured in the same run), send one
# chat request, run a short `dsv4 bench`, stop the server and delete the checkpoint. Each phase is
# timed; the last lines are the summary. Logs under $OUT, packed into $OUT.tar.xz at the end.
# Usage (scripts/device-all.sh ckpt does this): BIN=DIR holding dsv4 and tokenizer.json,
#   BIN=DIR OUT=DIR [CKPT_LAYERS=8] [CKPT_PARENT=$TMPDIR or /tmp] [CKPT_DIR=DIR] [CKPT_THREADS=0] \
#   [CKPT_SERVE_ARGS="--gpus 2"] [CKPT_CONC=1,8] [CKPT_N=8] [CKPT_KEEP=0] scripts/gpu-ckpt-load.sh
# Size: ~2.1 GB (embedding + head) + ~3.6 GB per layer and for the mtp.0 block: 8 layers ~34 GB. When
# the disk has less room, the layer count is lowered to what fits (with a message).
set -uo pipefail
BIN=${BIN:?folder holding dsv4 and tokenizer.json}
OUT=${OUT:-/tmp/ckpt-load}
mkdir -p "$OUT"
L=${CKPT_LAYERS:-8}
PARENT=${CKPT_PARENT:-${TMPDIR:-/tmp}}
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", (s > 0) ? b / 1e9 / s : 0 }'; }  # GB/s
T_ALL=$(now)
T=$T_ALL
PHASES=()
# phase NAME NOTE: the time since the previous phase ended, printed and kept for the summary.
phase() {
    PHASES+=("$(printf '%-8s %7s s  %s' "$1" "$(since "$T")" "$2")")
    echo "[phase] ${PHASES[-1]}"
    T=$(now)
}

# On every exit: the server stopped, the checkpoint deleted (unless CKPT_KEEP=1), $OUT packed.
DIR=""
SP=""
finish() {
    [[ -n "$SP" ]] && kill "$SP" 2>/dev/null && wait "$SP" 2>/dev/null
    [[ -n "$DIR" && "${CKPT_KEEP:-0}" != 1 ]] && rm -rf "$DIR"
    tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")" && rm -rf "$OUT"
}
trap finish EXIT

nproc; free -g | head -2
df -h "$PARENT" | tee "$OUT/df.txt"
AVAIL=$(df -B1 --output=avail "$PARENT" | tail -1 | tr -d ' ')
FIT=$(awk -v a="$AVAIL" 'BEGIN { n = int((a - 3e9 - 2.12e9 - 3.6e9) / 3.6e9); if (n < 0) n = 0; print n }')
if (( FIT < L )); then
    echo "only $((AVAIL / 1000000000)) GB free under $PARENT: $FIT layer(s) fit, not $L"
    L=$FIT
fi
if (( L < 1 )); then echo "ckpt: no room for a checkpoint under $PARENT"; exit 3; fi
DIR=${CKPT_DIR:-$PARENT/dsv4-flash-$L}
rm -rf "$DIR"
phase setup "$L layers into $DIR"

t0=$(now)
"$BIN"/dsv4 make-checkpoint --synthetic-flash --layers "$L" --out "$DIR" --threads "${CKPT_THREADS:-0}" \
    > "$OUT/make.log" 2>&1
RC_MAKE=$?
WRITE_S=$(since "$t0")
cp "$BIN"/tokenizer.json "$DIR"/ 2>/dev/null
BYTES=$(stat -c %s "$DIR"/*.safetensors 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }')
SHARDS=$(ls "$DIR"/*.safetensors 2>/dev/null | wc -l)
phase write "rc=$RC_MAKE, $(rate "$BYTES" 1) GB in $SHARDS shards, $(rate "$BYTES" "$WRITE_S") GB/s"
cat "$OUT/make.log"
[[ $RC_MAKE -ne 0 ]] && { echo "ckpt: make-checkpoint failed"; exit 1; }
timeout 300 sync
phase sync "dirty pages flushed to disk"

CAT_S=()
for i in 1 2; do
    t0=$(now)
    cat "$DIR"/*.safetensors > /dev/null
    CAT_S+=("$(since "$t0")")
    phase "cat$i" "$(rate "$BYTES" "${CAT_S[-1]}") GB/s"
done

"$BIN"/dsv4 serve --backend "${CKPT_BACKEND:-cuda}" --model "$DIR" --port 0 ${CKPT_SERVE_ARGS:-} > "$OUT/serve.log" 2>&1 &
SP=$!
URL=""
for i in $(seq 1 300); do
    URL=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/serve.log" | head -1 | sed 's/listening on //')
    [[ -n "$URL" ]] && break
    kill -0 $SP 2>/dev/null || break
    sleep 0.5
done
LOAD=$(grep -E "^\[load\] loaded" "$OUT/serve.log" | head -1)
phase serve "start to listening; $LOAD"
if [[ -z "$URL" ]]; then
    echo "ckpt: the server did not start"; tail -30 "$OUT/serve.log"
    exit 1
fi

BODY='{"messages": [{"role": "user", "content": "Write a haiku about the sea."}], "max_tokens": 16}'
if command -v curl > /dev/null; then
    curl -s -m 120 "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d "$BODY" > "$OUT/chat.json"
else  # python3's urllib where curl is missing
    python3 -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1] + "/v1/chat/completions", data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
print(u.urlopen(r, timeout=120).read().decode())' "$URL" "$BODY" > "$OUT/chat.json" 2>&1
fi
CHAT=$(grep -q '"choices"' "$OUT/chat.json" && grep -q '"finish_reason"' "$OUT/chat.json" && echo ok || echo FAILED)
phase chat "$CHAT: $(head -c 300 "$OUT/chat.json")"

timeout 240 "$BIN"/dsv4 bench --url "$URL" --conc "${CKPT_CONC:-1,8}" --n "${CKPT_N:-8}" --max-tokens 32 \
    --iterations 1 --no-progress --plot none --out "$OUT/bench.jsonl" > "$OUT/bench.txt" 2>&1
RC_BENCH=$?
cat "$OUT/bench.txt"
phase bench "rc=$RC_BENCH"

kill -TERM "$SP"; wait "$SP" 2>/dev/null
SP=""
phase stop "server drained and exited"
if [[ "${CKPT_KEEP:-0}" != 1 ]]; then rm -rf "$DIR"; fi
phase delete "checkpoint removed (CKPT_KEEP=1 keeps it)"

# Summary: the load rate against the warm read rate and the pinned H2D rate of the same run.
LOAD_GBS=$(echo "$LOAD" | sed -nE 's/.* s \(([0-9.]+) GB\/s\);.*/\1/p')
H2D_GBS=$(echo "$LOAD" | sed -nE 's/.*pinned H2D ([0-9.]+) GB\/s.*/\1/p')
CAT_GBS=$(rate "$BYTES" "${CAT_S[1]}")
{
    echo "================ ckpt summary"
    printf '%s\n' "${PHASES[@]}"
    echo "ckpt: $L layers, $(rate "$BYTES" 1) GB in $SHARDS shards written in ${WRITE_S} s ($(rate "$BYTES" "$WRITE_S") GB/s, $(nproc) cores)"
    echo "ckpt: cat (warm) ${CAT_GBS} GB/s; load ${LOAD_GBS:-?} GB/s; pinned H2D ${H2D_GBS:-?} GB/s"
    awk -v l="${LOAD_GBS:-0}" -v c="$CAT_GBS" -v h="${H2D_GBS:-0}" 'BEGIN {
        m = (h > 0 && h < c) ? h : c
        printf "ckpt: load rate = %.0f%% of the lower of cat and H2D (%.2f GB/s; target >= 70%%)\n", (m > 0) ? 100 * l / m : 0, m }'
    echo "ckpt: $LOAD"
    echo "ckpt: chat $CHAT; bench rc=$RC_BENCH: $(grep -E '^ +- +[0-9]+ ' "$OUT/bench.txt" | awk '{printf "conc %s %s out tok/s; ", $2, $5}')"
    echo "ckpt: total $(since "$T_ALL") s"
} | tee "$OUT/summary.txt"
