#!/usr/bin/env bash
# A series of `dsv4 bench --ab` comparisons against two local servers (issue 16 item 4): how often
# the comparison claims a difference when there is none (A/A), or finds one that is there
# (detection), measured on this machine rather than assumed. Starts two `dsv4 serve` instances on
# free ports, then runs --families comparisons one after the other, each
#   dsv4 bench --url A --ab B --conc LEVELS --iterations PAIRS --n N --max-tokens T --seed i
# (a family of levels, PAIRS ABBA pairs of batches per level, new prompts per family), keeps every
# run's JSON lines and table, and tallies them with `dsv4 bench series`: the share of families
# with any faster/slower verdict and of levels faster/slower, each with its 95% Wilson interval.
#
# Usage: scripts/bench-ab-series.sh [--families 100] [--conc 1,2,4] [--iterations 4] [--n 4]
#            [--max-tokens 8] [--input-len 8] [--bin DIR] [--out DIR]
#            [--serve-a "ARGS"] [--serve-b "ARGS"] [--same-server] [-- more bench arguments]
#   Both servers run the built-in tiny model on the CPU unless --serve-a/--serve-b give other
#   `dsv4 serve` arguments; A/A is the default (the same arguments on both sides). Two processes
#   of one build need not be equally fast (docs/perf/ledger.md E39), so --same-server runs one
#   server and sends A and B to it: the A/A of the statistics alone. Detection, with B's fake
#   model 12% slower per token:
#     scripts/bench-ab-series.sh --serve-a "--model fake --fake-token-delay-us 2000" \
#         --serve-b "--model fake --fake-token-delay-us 2240" --out /tmp/detect
# Writes DIR/family-NNN.jsonl and DIR/family-NNN.txt (each comparison's records and output),
# DIR/families.csv (per family: seed, start time, wall seconds, the load average at its start),
# DIR/serve-a.log, DIR/serve-b.log, DIR/params.txt, and the tally in DIR/series.txt and
# DIR/series.json. Exits non-zero when a server does not come up or a comparison fails.
set -uo pipefail
cd "$(dirname "$0")/.."
FAMILIES=100 CONC=1,2,4 ITERATIONS=4 N=4 MAX_TOKENS=8 INPUT_LEN=8 BIN=build/tools/dsv4 OUT=/tmp/dsv4-ab-series
SERVE_A="" SERVE_B="" SAME=0 BENCH_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --families) FAMILIES=$2; shift 2 ;;
    --conc) CONC=$2; shift 2 ;;
    --iterations) ITERATIONS=$2; shift 2 ;;
    --n) N=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --input-len) INPUT_LEN=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --serve-a) SERVE_A=$2; shift 2 ;;
    --serve-b) SERVE_B=$2; shift 2 ;;
    --same-server) SAME=1; shift ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    *) echo "bench-ab-series.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
rm -f "$OUT"/family-*.jsonl "$OUT"/family-*.txt

# Starts `dsv4 serve --port 0 ARGS` with its output in $2 and sets URL_$3 from the address it prints.
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done' EXIT
start_server() {
    local args=$1 log=$2 side=$3
    # shellcheck disable=SC2086  # the arguments are a word list on purpose
    "$BIN"/dsv4 serve --port 0 $args > "$log" 2>&1 &
    PIDS+=($!)
    local pid=$! addr=""
    for _ in $(seq 240); do
        addr=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | head -1 | sed 's/listening on //')
        [[ -n "$addr" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    [[ -n "$addr" ]] || { echo "bench-ab-series.sh: server $side did not come up (see $log)" >&2; exit 1; }
    printf -v "URL_$side" '%s' "$addr"
}
start_server "$SERVE_A" "$OUT/serve-a.log" A
if [[ $SAME == 1 ]]; then
    URL_B=$URL_A SERVE_B="(the same server as A)"
else
    start_server "$SERVE_B" "$OUT/serve-b.log" B
fi

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "git: $(git rev-parse --short=12 HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(uncommitted changes)')"
    echo "host: $(hostname), $(nproc) cores"
    echo "A: $URL_A dsv4 serve ${SERVE_A:-(tiny model)}"
    echo "B: $URL_B dsv4 serve ${SERVE_B:-(tiny model)}"
    echo "families: $FAMILIES; per family: dsv4 bench --url A --ab B --conc $CONC --iterations $ITERATIONS" \
         "--n $N --max-tokens $MAX_TOKENS --input-len $INPUT_LEN --seed i ${BENCH_ARGS[*]}"
} > "$OUT/params.txt"
cat "$OUT/params.txt"

echo "family,seed,start_utc,wall_s,loadavg_1m" > "$OUT/families.csv"
for ((i = 0; i < FAMILIES; i++)); do
    f=$(printf '%s/family-%03d' "$OUT" "$i")
    t0=$(date +%s.%N)
    start=$(date -u +%H:%M:%S)
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$BIN"/dsv4 bench --url "$URL_A" --ab "$URL_B" --conc "$CONC" --iterations "$ITERATIONS" --n "$N" \
        --max-tokens "$MAX_TOKENS" --input-len "$INPUT_LEN" --seed "$i" --plot none --no-progress \
        --out "$f.jsonl" "${BENCH_ARGS[@]}" > "$f.txt" 2>&1 ||
        { echo "bench-ab-series.sh: family $i failed (see $f.txt)" >&2; exit 1; }
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    echo "$i,$i,$start,$wall,$load" >> "$OUT/families.csv"
    verdicts=$(grep -cE '  (faster|slower)$' "$f.txt")
    echo "family $((i + 1))/$FAMILIES: ${wall} s, load $load, levels with a verdict: $verdicts"
done
"$BIN"/dsv4 bench series "$OUT"/family-*.jsonl --json "$OUT/series.json" > "$OUT/series.txt" ||
    { echo "bench-ab-series.sh: dsv4 bench series failed" >&2; exit 1; }
sed -n '/ famil\(y\|ies\) (/,$p' "$OUT/series.txt"
