#!/usr/bin/env bash
# Session 30 call 2: served prefill on the 20-layer proxy (issue 22): TTFT at one user for 128, 1K and 8K
# prompts at serve's default step budget (8,192), then concurrency 64 with 1,024-token prompts arriving
# (closed loop, 128 output tokens each, as E48/E52): ITL p99 against the TPOT median. Carry: build-s30.
set -uo pipefail
O=$OUT/r2; mkdir -p $O
pack() { (cd $OUT && tar czf s30r2.tgz r2); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt
cp scripts/gpu-prefill-bench.sh build-s30/
OUT=$O/ttft BUDGETS=8192:8192 LENS="128 1024 8192" CONCS=1 MAX_CONTEXT=16384 timeout 250 bash build-s30/gpu-prefill-bench.sh
pack
W=$(mktemp -d); xz -dc build-s30/dsv4.xz > $W/dsv4; xz -dc build-s30/tokenizer.json.xz > $W/tokenizer.json; chmod +x $W/dsv4
if ldd $W/dsv4 | grep -q "not found"; then tar -C $W -xJf build-s30/blaslibs.tar.xz && export LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-}; fi
$W/dsv4 serve --backend cuda --synthetic-flash --layers 20 --tokenizer $W/tokenizer.json --port 8124 --max-context 4096 --max-running 64 > $O/serve64.log 2>&1 &
SP=$!
for i in $(seq 200); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8124/health', timeout=2)" 2>/dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
echo "server up after $i s"
timeout 200 $W/dsv4 bench --url http://127.0.0.1:8124 --endpoint completions --dataset random-ids --input-len 1024 --max-tokens 128 --ignore-eos --conc 64 --n 192 --warmup 1 --iterations 1 --plot none --out $O/conc64.jsonl > $O/conc64.txt 2>&1
echo "== conc64 rc=$?"; grep -E "^  -" $O/conc64.txt | cut -c1-220
kill $SP; wait $SP 2>/dev/null
pack; rm -rf $O
