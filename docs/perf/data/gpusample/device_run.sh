#!/bin/bash
# gpusample device run: CUDA sampling tests, then serve + bench (greedy vs temperature 1.0).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gs-out}; mkdir -p "$OUT"
W=$(mktemp -d)
for f in dsv4 dsv4_cuda_tests tokenizer.json; do xz -dc "$D/$f.xz" > "$W/$f"; chmod +x "$W/$f"; done
if ldd "$W/dsv4_cuda_tests" | grep -q "not found"; then
    mkdir -p "$W/blas" && tar -C "$W/blas" -xJf "$D/blaslibs.tar.xz"; export LD_LIBRARY_PATH="$W/blas/lib:${LD_LIBRARY_PATH:-}"
fi
export DSV4_GOLDEN_DIR="$PWD/tests/data/golden"
T0=$(date +%s)
timeout 80 "$W/dsv4_cuda_tests" --gtest_filter='CudaSampleRows*:CudaSampling.*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E "^\[  PASSED|^\[  FAILED|^\[ +OK|\[sample_rows\]|\[perf sample_rows\]|\[device sampling\]|\[engine cuda" "$OUT/tests.log" | head -40
grep -E "Failure|Expected|Which is|actual|device [0-9]+ host" "$OUT/tests.log" | head -30
[[ "${SKIP_BENCH:-0}" == 1 ]] && exit 0
"$W/dsv4" serve --backend cuda --synthetic-flash --layers 20 --tokenizer "$W/tokenizer.json" --port 0 --max-running 64 \
    > "$OUT/serve.log" 2>&1 &
SP=$!
URL=""
for i in $(seq 1 60); do
    URL=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/serve.log" | head -1 | sed 's/listening on //')
    [[ -n "$URL" ]] && python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$URL" 2>/dev/null && break
    URL=""; sleep 1
done
echo "server up after $(( $(date +%s) - T0 )) s: ${URL:-NO}"
[[ -z "$URL" ]] && { tail -20 "$OUT/serve.log"; kill $SP; exit 1; }
B=(--url "$URL" --endpoint completions --dataset random-ids --input-len 32 --ignore-eos --max-tokens 256 --no-progress --plot none)
# Graphs for every batch bucket captured before anything is measured (both temperatures use them).
"$W/dsv4" bench "${B[@]/256/16}" --conc 64 --n 64 --warmup 0 --iterations 1 > "$OUT/warm.txt" 2>&1
for t in 0 1.0; do
    "$W/dsv4" bench "${B[@]}" --temperature $t --conc 1 --n 3 --warmup 1 --iterations 1 --out "$OUT/bench_c1_t$t.jsonl" > "$OUT/bench_c1_t$t.txt" 2>&1
    "$W/dsv4" bench "${B[@]}" --temperature $t --conc 64 --n 64 --warmup 0 --iterations 1 --out "$OUT/bench_c64_t$t.jsonl" > "$OUT/bench_c64_t$t.txt" 2>&1
    echo "== temperature $t ($(( $(date +%s) - T0 )) s)"; cat "$OUT/bench_c1_t$t.txt" "$OUT/bench_c64_t$t.txt" | grep -vE "^\s*$" | tail -14
done
kill $SP; wait $SP 2>/dev/null
cat "$OUT"/bench_*.jsonl > "$OUT/bench_all.jsonl"; rm -f "$OUT"/bench_c*.jsonl
echo "total $(( $(date +%s) - T0 )) s"
