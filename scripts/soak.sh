#!/usr/bin/env bash
# Soak test of `dsv4 serve` (issue 21 item 4): a steady closed-loop load for a fixed time, the
# server's resident memory (and, with --backend cuda, its GPU memory) sampled every 10 s, then the
# verdict: no request failed, memory flat after the warm-up (growth of the last minute's median
# over the first post-warm-up minute's below 1%), and every KV/state page back once the prefix
# cache is flushed.
#
# Usage: scripts/soak.sh [--minutes 30] [--conc 512] [--warmup-min 2] [--max-tokens 64] [--prewarm]
#                        [--bin DIR] [--out DIR] [-- serve arguments]
#   --prewarm: before the timed load, one short wave at each concurrency 1, 2, 4, ... up to --conc, so
#   that many batch sizes the load will produce have been seen once (with the CUDA runner's power-of-two
#   graph buckets, all of them): memory created on a shape's first use is then not counted as growth.
#   serve arguments default to the fake model (no compute: the server, scheduler and HTTP paths
#   alone): --model fake --fake-step-delay-us 2000. For the CPU tiny model pass `-- --model tiny`;
#   on a GPU, e.g. `-- --backend cuda --synthetic-flash --layers 20`.
# Writes DIR/samples.csv (t_s, rss_kib, gpu_mib, running, waiting, pages_used), DIR/bench.jsonl (one
# record per bench batch), DIR/serve.log and DIR/verdict.txt; exits 1 when the verdict fails.
set -uo pipefail
cd "$(dirname "$0")/.."
MINUTES=30 CONC=512 WARMUP_MIN=2 MAX_TOKENS=64 PREWARM=0 BIN=build/tools/dsv4 OUT=/tmp/dsv4-soak PORT=${SOAK_PORT:-8131}
SERVE_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --minutes) MINUTES=$2; shift 2 ;;
    --conc) CONC=$2; shift 2 ;;
    --warmup-min) WARMUP_MIN=$2; shift 2 ;;
    --max-tokens) MAX_TOKENS=$2; shift 2 ;;
    --prewarm) PREWARM=1; shift ;;
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; SERVE_ARGS=("$@"); break ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ ${#SERVE_ARGS[@]} -eq 0 ]] && SERVE_ARGS=(--model fake --fake-step-delay-us 2000)
mkdir -p "$OUT"
URL=http://127.0.0.1:$PORT
# HTTP through python3, already a dependency: prints the body, fails on errors.
http() { python3 -c 'import sys, urllib.request as u; r = u.urlopen(u.Request(sys.argv[2], method=sys.argv[1], data=b"" if sys.argv[1] == "POST" else None), timeout=10); sys.stdout.write(r.read().decode())' "$@"; }
"$BIN"/dsv4 serve --port "$PORT" --max-running "$CONC" "${SERVE_ARGS[@]}" > "$OUT/serve.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null; [[ -n "${BP:-}" ]] && kill $BP 2>/dev/null' EXIT
for _ in $(seq 300); do http GET "$URL/health" > /dev/null 2>&1 && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
http GET "$URL/health" > /dev/null 2>&1 || { echo "soak.sh: the server did not come up (see $OUT/serve.log)" >&2; exit 1; }

# Value of metric $2 in the /metrics text $1.
metric() { awk -v m="$2" '$1 == m {print $2}' <<< "$1"; }
gpu_mib() {
    command -v nvidia-smi > /dev/null || { echo 0; return; }
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
        awk -F', ' -v p="$SP" '$1 == p {print $2; f = 1} END {if (!f) print 0}'
}
if [[ $PREWARM == 1 ]]; then
    c=1
    while :; do
        "$BIN"/dsv4 bench --url "$URL" --endpoint completions --dataset random-words --input-len 64 \
            --max-tokens "$MAX_TOKENS" --ignore-eos --conc "$c" --n "$c" --warmup 0 --iterations 1 --seed 999 \
            --plot none --no-progress --out "$OUT/prewarm.jsonl" > /dev/null 2>> "$OUT/bench.err" ||
            echo "prewarm bench rc $? at concurrency $c" >> "$OUT/bench.err"
        [[ $c -ge $CONC ]] && break
        c=$(( 2 * c > CONC ? CONC : 2 * c ))
    done
    echo "prewarm: one wave at each concurrency up to $CONC done" >> "$OUT/bench.err"
fi
# The load: back-to-back closed-loop batches of 4 x CONC requests until the time is up.
SECS=$(awk -v m="$MINUTES" 'BEGIN {printf "%d", m * 60}')
END_T=$(( $(date +%s) + SECS ))
rm -f "$OUT/bench.jsonl"
(
    i=0
    while [[ $(date +%s) -lt $END_T ]]; do  # bench --out rewrites its file: one per batch, appended here
        "$BIN"/dsv4 bench --url "$URL" --endpoint completions --dataset random-words --input-len 64 \
            --max-tokens "$MAX_TOKENS" --ignore-eos --conc "$CONC" --n $(( 4 * CONC )) --warmup 0 --iterations 1 \
            --seed $i --plot none --no-progress --out "$OUT/batch.jsonl" > /dev/null 2>> "$OUT/bench.err" ||
            echo "bench rc $?" >> "$OUT/bench.err"
        cat "$OUT/batch.jsonl" >> "$OUT/bench.jsonl" 2>/dev/null
        i=$((i + 1))
    done
) &
BP=$!
T0=$(date +%s)
echo "t_s,rss_kib,gpu_mib,running,waiting,pages_used" > "$OUT/samples.csv"
while kill -0 $BP 2>/dev/null; do
    kill -0 $SP 2>/dev/null || { echo "soak.sh: the server exited during the soak" >&2; break; }
    TS=$(date +%s)
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$SP/status)
    M=$(http GET "$URL/metrics" 2>/dev/null)
    echo "$(( TS - T0 )),$rss,$(gpu_mib),$(metric "$M" dsv4_requests_running),$(metric "$M" dsv4_requests_waiting),$(metric "$M" dsv4_cache_pages_used)" \
        >> "$OUT/samples.csv"
    sleep $(( 10 - ($(date +%s) - TS) > 0 ? 10 - ($(date +%s) - TS) : 0 ))
done
wait $BP
BP=
sleep 2
http POST "$URL/flush_cache" > /dev/null 2>&1
sleep 1
M=$(http GET "$URL/metrics" 2>/dev/null)
PAGES=$(metric "$M" dsv4_cache_pages_used) RUNNING=$(metric "$M" dsv4_requests_running) ALIVE=1
kill -0 $SP 2>/dev/null || ALIVE=0
python3 - "$OUT" "$WARMUP_MIN" "${PAGES:-missing}" "${RUNNING:-missing}" "$ALIVE" << 'EOF' | tee "$OUT/verdict.txt"
import csv, json, statistics, sys
out, warm_min, pages, running, alive = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "1"
rows = [r for r in csv.DictReader(open(f"{out}/samples.csv"))]
recs = [json.loads(l) for l in open(f"{out}/bench.jsonl")] if __import__("os").path.exists(f"{out}/bench.jsonl") else []
sent = sum(r["n_requests"] for r in recs); ok = sum(r["n_ok"] for r in recs); err = sum(r["n_errors"] for r in recs)
post = [r for r in rows if float(r["t_s"]) >= warm_min * 60]
def med(rs, key): return statistics.median(float(r[key] or 0) for r in rs) if rs else 0.0
first, last = post[:6], post[-6:]
growth = lambda k: (med(last, k) - med(first, k)) / med(first, k) * 100 if med(first, k) > 0 else 0.0
g_rss, g_gpu = growth("rss_kib"), growth("gpu_mib")
checks = {
    "server alive": alive,
    "requests sent > 0": sent > 0,
    "0 errors": err == 0 and ok == sent,
    "RSS growth < 1% after warm-up": len(post) >= 12 and g_rss < 1.0,
    "GPU memory growth < 1% after warm-up": len(post) >= 12 and g_gpu < 1.0,
    "pages back after flush (dsv4_cache_pages_used 0)": pages == "0",
    "no request running at the end": running == "0",
}
print(f"soak: {len(rows)} samples, {len(recs)} bench batches, {sent} requests sent, {ok} ok, {err} errors")
print(f"RSS first post-warm-up minute {med(first, 'rss_kib') / 1024:.1f} MiB -> last minute {med(last, 'rss_kib') / 1024:.1f} MiB ({g_rss:+.2f}%); "
      f"GPU {med(first, 'gpu_mib'):.0f} -> {med(last, 'gpu_mib'):.0f} MiB ({g_gpu:+.2f}%)")
for k, v in checks.items(): print(f"  {'ok  ' if v else 'FAIL'} {k}")
sys.exit(0 if all(checks.values()) else 1)
EOF
