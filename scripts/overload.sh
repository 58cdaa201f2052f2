#!/usr/bin/env bash
# Open-loop overload test of `dsv4 serve` (issue 21 item 3). Capacity is the request rate the server
# sustains closed-loop at --max-running concurrency; then `dsv4 bench --request-rate` sends Poisson
# arrivals at FACTOR x capacity for SECONDS, and the verdict checks:
#   - every request sent got an answer: a completion, or 429/503 with Retry-After (none lost, none
#     left hanging: n_ok + n_refused == n_requests, n_unanswered == 0);
#   - admitted requests' TTFT p99 under the bound the queue limits imply (README, "Overload"): an
#     admitted request waits behind at most max-queued queued and max-running running ones, so it
#     starts within ceil(Q / R) turnovers of the running batch: bound = (ceil(Q / R) + 1) x the E2E
#     p99 of the capacity run (skipped with --no-timing, as in CI: timings are not tested there);
#   - afterwards the server answers /health with 200 and, once its prefix cache is flushed, holds no
#     page and no request.
#
# Usage: scripts/overload.sh [--seconds 120] [--factor 10] [--max-running 8] [--max-queued 16]
#                            [--max-tokens 16] [--input-len 32] [--no-timing] [--bin DIR] [--out DIR]
#                            [-- serve arguments]
#   serve arguments default to the CPU tiny model (`--model tiny`); on a GPU e.g.
#   `-- --backend cuda --synthetic-flash --layers 20`.
# Writes DIR/capacity.jsonl, DIR/overload.jsonl (dsv4 bench records), DIR/serve.log and
# DIR/verdict.txt; exits 1 when the verdict fails.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=120 FACTOR=10 R=8 Q=16 MAX_TOKENS=16 INPUT_LEN=32 TIMING=1 BIN=build/tools/dsv4 OUT=/tmp/dsv4-overload
PORT=${OVERLOAD_PORT:-8133}
SERVE_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --factor) FACTOR=$2; shift 2 ;;
    --max-running) R=$2; shift 2 ;;
    --max-queued) Q=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --input-len) INPUT_LEN=$2; shift 2 ;;
    --no-timing) TIMING=0; shift ;;
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --) shift; SERVE_ARGS=("$@"); break ;;
    *) echo "overload.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ ${#SERVE_ARGS[@]} -eq 0 ]] && SERVE_ARGS=(--model tiny)
mkdir -p "$OUT"
rm -f "$OUT/capacity.jsonl" "$OUT/overload.jsonl"
URL=http://127.0.0.1:$PORT
# HTTP through python3 (already a dependency): prints the body; fails on errors.
http() { python3 -c 'import sys, urllib.request as u; r = u.urlopen(u.Request(sys.argv[2], method=sys.argv[1], data=b"" if sys.argv[1] == "POST" else None), timeout=10); sys.stdout.write(r.read().decode())' "$@"; }
"$BIN"/dsv4 serve --port "$PORT" --max-running "$R" --max-queued "$Q" "${SERVE_ARGS[@]}" > "$OUT/serve.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null' EXIT
for _ in $(seq 300); do http GET "$URL/health" > /dev/null 2>&1 && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
http GET "$URL/health" > /dev/null 2>&1 || { echo "overload.sh: the server did not come up (see $OUT/serve.log)" >&2; exit 1; }
bench() {
    "$BIN"/dsv4 bench --url "$URL" --endpoint completions --dataset random-words --input-len "$INPUT_LEN" \
        --max-tokens "$MAX_TOKENS" --ignore-eos --plot none --no-progress "$@"
}
# Capacity: closed loop at max-running (one warm-up wave, then 4 x R requests).
bench --conc "$R" --n $((4 * R)) --warmup 1 --iterations 1 --seed 1 --out "$OUT/capacity.jsonl" > "$OUT/capacity.txt" 2>&1
CAP=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["req_s"])' "$OUT/capacity.jsonl") ||
    { echo "overload.sh: no capacity record (see $OUT/capacity.txt)" >&2; exit 1; }
RATE=$(python3 -c "print(f'{$FACTOR * $CAP:.3f}')")
N=$(python3 -c "import math; print(max(1, math.ceil($FACTOR * $CAP * $SECONDS_RUN)))")
echo "capacity $CAP req/s at concurrency $R; overload: $RATE req/s for ${SECONDS_RUN} s ($N requests)"
# The cap on requests in flight is far above what the server admits (R + Q): refusals come back fast,
# so arrivals stay open-loop; the per-request timeout is long enough that only a hang trips it.
bench --request-rate "$RATE" --conc 1024 --n "$N" --warmup 0 --iterations 1 --seed 2 --timeout 600 \
    --out "$OUT/overload.jsonl" > "$OUT/overload.txt" 2>&1
echo "bench rc $?" >> "$OUT/overload.txt"
sleep 1
HEALTH=$(python3 -c 'import sys, urllib.request as u, urllib.error as e
try: print(u.urlopen(sys.argv[1], timeout=10).status)
except e.HTTPError as x: print(x.code)
except Exception: print(0)' "$URL/health")
http POST "$URL/flush_cache" > /dev/null 2>&1
sleep 1
M=$(http GET "$URL/metrics" 2>/dev/null)
metric() { awk -v m="$2" '$1 == m {print $2}' <<< "$1"; }
python3 - "$OUT" "$R" "$Q" "$N" "$TIMING" "$HEALTH" "$(metric "$M" dsv4_cache_pages_used)" \
    "$(metric "$M" dsv4_requests_running)" "$(metric "$M" dsv4_requests_waiting)" << 'EOF' | tee "$OUT/verdict.txt"
import json, math, sys
out, R, Q, N, timing, health, pages, running, waiting = sys.argv[1:10]
R, Q, N = int(R), int(Q), int(N)
cap = json.loads(open(f"{out}/capacity.jsonl").readline())
try:
    over = json.loads(open(f"{out}/overload.jsonl").readline())
except (OSError, ValueError):
    over = {}
sent, ok = over.get("n_requests", 0), over.get("n_ok", 0)
refused, no_retry, unanswered = over.get("n_refused", 0), over.get("n_refused_no_retry_after", 0), over.get("n_unanswered", 0)
bound = (math.ceil(Q / R) + 1) * cap["e2e_ms"]["p99"]
ttft_p99 = over.get("ttft_ms", {}).get("p99", float("nan"))
checks = {
    f"all {N} requests sent": sent == N,
    "every request answered: completed or refused (429/503)": sent > 0 and ok + refused == sent and unanswered == 0,
    "every refusal carries Retry-After": no_retry == 0,
    "some requests admitted, some refused (the load was an overload)": ok > 0 and refused > 0,
    "/health 200 afterwards": health == "200",
    "pages back after flush (dsv4_cache_pages_used 0)": pages == "0",
    "no request running or waiting at the end": running == "0" and waiting == "0",
}
if timing == "1":
    checks[f"admitted TTFT p99 {ttft_p99:.1f} ms < bound {bound:.1f} ms"] = ttft_p99 < bound
print(f"overload: capacity {cap['req_s']:.2f} req/s at concurrency {R} (E2E p99 {cap['e2e_ms']['p99']:.1f} ms); "
      f"sent {sent}, completed {ok}, refused {refused} ({no_retry} without Retry-After), unanswered {unanswered}, "
      f"other errors {over.get('n_errors', 0) - refused - unanswered}; admitted TTFT median "
      f"{over.get('ttft_ms', {}).get('median', float('nan')):.1f} ms, p99 {ttft_p99:.1f} ms (bound (ceil(Q/R) + 1) x E2E p99 = {bound:.1f} ms)")
for k, v in checks.items(): print(f"  {'ok  ' if v else 'FAIL'} {k}")
sys.exit(0 if all(checks.values()) else 1)
EOF
