#!/usr/bin/env bash
# GPU smoke check of a built dsv4 binary: generate on cuda vs cpu (greedy text must match), then
# serve --backend cuda over HTTP. Usage: copy build/tools/dsv4/dsv4 (objcopy --strip-debug) and
# .cache/tokenizer/tokenizer.json into a carried folder with this script and run it there.
cd "$(dirname "$0")"
set -x
nvidia-smi -L
ldd ./dsv4 | grep -i "not found"
# Exact f32 KV rows for the cuda/cpu text comparison (the default fp8 rows follow the reference QAT numerics instead).
DSV4_KV_ROWS=f32 ./dsv4 generate --backend cuda --tokenizer tokenizer.json --prompt "Write a haiku about the sea." --max-tokens 16 > gen_cuda.txt 2> gen_cuda.err; echo "gen cuda rc=$?"; cat gen_cuda.txt gen_cuda.err | tail -4
./dsv4 generate --backend cpu --tokenizer tokenizer.json --prompt "Write a haiku about the sea." --max-tokens 16 > gen_cpu.txt 2> gen_cpu.err; echo "gen cpu rc=$?"; tail -2 gen_cpu.err
cmp gen_cuda.txt gen_cpu.txt && echo "GREEDY TEXT IDENTICAL cuda == cpu"
./dsv4 serve --backend cuda --tokenizer tokenizer.json --port 8123 > serve.log 2>&1 &
SP=$!
python3 - <<'PY'
import json, time, urllib.request
base = "http://127.0.0.1:8123"
for i in range(120):
    try:
        urllib.request.urlopen(base + "/health", timeout=2).read(); break
    except Exception:
        time.sleep(1)
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=60).read().decode()
print("models:", urllib.request.urlopen(base + "/v1/models").read().decode()[:200])
r = json.loads(post("/v1/chat/completions", {"model": "deepseek-v4", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8, "temperature": 0}))
print("chat:", json.dumps(r)[:400])
s = post("/v1/chat/completions", {"model": "deepseek-v4", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}})
print("stream chunks:", s.count("data: "), "ends with DONE:", s.strip().endswith("[DONE]"))
m = urllib.request.urlopen(base + "/metrics").read().decode()
print("metrics lines:", [l for l in m.splitlines() if "pages" in l or "generated" in l][:6])
PY
kill $SP; wait $SP 2>/dev/null
tail -5 serve.log
cp gen_* serve.log $OUT/ 2>/dev/null
