#!/usr/bin/env bash
# Prefill (TTFT) sweep of `dsv4 serve --backend cuda --synthetic-flash --layers 20` against the
# engine's step budget: for each "--max-tokens-per-step/--max-prefill-chunk" pair, one server, then
# `dsv4 bench` (random-ids completions, --max-tokens 1) at prompt lengths 128, 1K, 4K and 1 / 16 users.
# Usage: a folder with dsv4(.xz), tokenizer.json(.xz), blaslibs.tar.xz and this script; OUT= log folder.
# BUDGETS="512:512 2048:2048 8192:8192" (default; 8192:8192 is serve's cuda default), LENS, CONCS, MAX_CONTEXT (8192) override the sweep.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/prefill-bench}; mkdir -p "$OUT"
W=$(mktemp -d); cp "$D"/dsv4* "$D"/tokenizer.json* "$W"/; (cd "$W" && for f in *.xz; do [[ -f $f ]] && xz -d "$f"; done); chmod +x "$W"/dsv4
if ldd "$W/dsv4" | grep -q "not found"; then
    mkdir -p "$W/libs" && tar -C "$W/libs" -xJf "$D/blaslibs.tar.xz" && export LD_LIBRARY_PATH="$W/libs/lib:${LD_LIBRARY_PATH:-}"
fi
PYNCCL=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)
[[ -n "$PYNCCL" && -d "$PYNCCL/lib" ]] && export LD_LIBRARY_PATH="$PYNCCL/lib:${LD_LIBRARY_PATH:-}"
ldd "$W/dsv4" | grep "not found"
for B in ${BUDGETS:-512:512 2048:2048 8192:8192}; do
    step=${B%%:*}; chunk=${B##*:}
    "$W"/dsv4 serve --backend cuda --synthetic-flash --layers 20 --tokenizer "$W/tokenizer.json" --port 8123 \
        --max-context "${MAX_CONTEXT:-8192}" --max-running 16 --max-tokens-per-step "$step" --max-prefill-chunk "$chunk" \
        > "$OUT/serve_$step.log" 2>&1 &
    SP=$!
    T0=$(date +%s)
    for i in $(seq 240); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8123/health', timeout=2)" 2>/dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
    echo "budget $step/$chunk: server up after $(( $(date +%s) - T0 )) s"
    for len in ${LENS:-128 1024 4096}; do
        for c in ${CONCS:-1 16}; do
            n=$(( c == 1 ? 3 : c ))
            "$W"/dsv4 bench --url http://127.0.0.1:8123 --endpoint completions --dataset random-ids --input-len "$len" \
                --max-tokens 1 --conc "$c" --n "$n" --warmup 1 --iterations 1 --plot none \
                --out "$OUT/bench_${step}.jsonl" > "$OUT/bench_${step}_${len}_${c}.txt" 2>&1
            echo "  len $len conc $c rc=$? ($(( $(date +%s) - T0 )) s)"
            grep -E "^  -" "$OUT/bench_${step}_${len}_${c}.txt" | cut -c1-200
        done
    done
    kill $SP; wait $SP 2>/dev/null
    tail -3 "$OUT/serve_$step.log"
done
