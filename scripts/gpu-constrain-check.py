#!/usr/bin/env python3
"""Structured output and enforced tool calls through a running `dsv4 serve --backend cuda`.

The served model is random (synthetic weights), so every well-formed answer is the constraint's
doing: json_schema / json_object / guided_json documents must parse and meet the schema, and
tool_choice required / named must return valid calls. Constrained and free requests run
concurrently so the GPU sampler and the host-masked rows share steps (overlapped scheduling on).
Prints one line per check and `CONSTRAIN OK n/m` last; exits 1 if any check failed.

Usage: gpu-constrain-check.py BASE_URL   (e.g. http://127.0.0.1:8124); stdlib only.
"""
import json
import sys
import threading
import urllib.request

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8124"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, "three"]}},
          "required": ["ok", "n"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "set_mode", "strict": True, "parameters": {
        "type": "object", "properties": {"mode": {"enum": ["fast", "slow"]}, "on": {"type": "boolean"}},
        "required": ["mode", "on"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}},
]
results = []
lock = threading.Lock()


def post(path, body, timeout=300):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def record(name, ok, detail=""):
    with lock:
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name} {detail[:300]}", flush=True)


def schema_ok(text):
    try:
        d = json.loads(text)
    except ValueError:
        return False
    return (isinstance(d, dict) and isinstance(d.get("ok"), bool) and d.get("n") in (1, 2, "three")
            and set(d) == {"ok", "n"})


def call_ok(c):
    try:
        a = json.loads(c["function"]["arguments"])
    except ValueError:
        return False
    if c["function"]["name"] == "ping":
        return a == {}
    return c["function"]["name"] == "set_mode" and a.get("mode") in ("fast", "slow") and isinstance(a.get("on"), bool)


def user(text):
    return [{"role": "user", "content": text}]


def json_schema_case(seed, temperature):
    st, body = post("/v1/chat/completions", {"messages": user("hello"), "temperature": temperature, "seed": seed,
                                             "max_tokens": 160, "response_format": {"type": "json_schema",
                                             "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}})
    ch = json.loads(body)["choices"][0] if st == 200 else {}
    text = ch.get("message", {}).get("content", "")
    record(f"json_schema seed={seed} t={temperature}", st == 200 and ch.get("finish_reason") == "stop" and
           schema_ok(text), f"{st} {ch.get('finish_reason')} {text!r}")


def streamed_case(seed):
    st, body = post("/v1/chat/completions", {"messages": user("hi"), "temperature": 1.0, "seed": seed, "stream": True,
                                             "max_tokens": 160, "response_format": {"type": "json_schema",
                                             "json_schema": {"name": "answer", "schema": SCHEMA}}})
    text, finish = "", None
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            c = json.loads(line[6:])
            for ch in c.get("choices", []):
                text += (ch.get("delta") or {}).get("content") or ""
                finish = ch.get("finish_reason") or finish
    record(f"streamed json_schema seed={seed}", st == 200 and finish == "stop" and schema_ok(text), f"{finish} {text!r}")


def json_object_case(seed):
    st, body = post("/v1/chat/completions", {"messages": user("hi"), "temperature": 1.0, "seed": seed,
                                             "max_tokens": 64, "response_format": {"type": "json_object"}})
    ch = json.loads(body)["choices"][0] if st == 200 else {}
    text = ch.get("message", {}).get("content", "")
    ok = st == 200
    if ok and ch.get("finish_reason") == "stop":
        try:
            ok = isinstance(json.loads(text), dict)
        except ValueError:
            ok = False
    elif ok:
        ok = ch.get("finish_reason") == "length" and text.lstrip().startswith("{")
    record(f"json_object seed={seed}", ok, f"{ch.get('finish_reason')} {text!r}")


def guided_completion_case(seed):
    st, body = post("/v1/completions", {"prompt": "x", "max_tokens": 160, "temperature": 1.0, "seed": seed,
                                        "guided_json": SCHEMA})
    ch = json.loads(body)["choices"][0] if st == 200 else {}
    record(f"guided_json completions seed={seed}", st == 200 and ch.get("finish_reason") == "stop" and
           schema_ok(ch.get("text", "")), f"{ch.get('finish_reason')} {ch.get('text')!r}")


def tool_required_case(seed):
    st, body = post("/v1/chat/completions", {"messages": user("go"), "tools": TOOLS, "tool_choice": "required",
                                             "temperature": 1.0, "seed": seed, "max_tokens": 1500})
    ch = json.loads(body)["choices"][0] if st == 200 else {}
    calls = ch.get("message", {}).get("tool_calls") or []
    record(f"tool_choice required seed={seed}", st == 200 and ch.get("finish_reason") == "tool_calls" and
           len(calls) >= 1 and all(call_ok(c) for c in calls), f"{len(calls)} calls {json.dumps(calls)[:200]}")


def tool_named_case(seed):
    st, body = post("/v1/chat/completions", {"messages": user("go"), "tools": TOOLS, "temperature": 1.0, "seed": seed,
                                             "max_tokens": 400, "parallel_tool_calls": False,
                                             "tool_choice": {"type": "function", "function": {"name": "set_mode"}}})
    ch = json.loads(body)["choices"][0] if st == 200 else {}
    calls = ch.get("message", {}).get("tool_calls") or []
    record(f"tool_choice named seed={seed}", st == 200 and ch.get("finish_reason") == "tool_calls" and
           len(calls) == 1 and calls[0]["function"]["name"] == "set_mode" and call_ok(calls[0]), json.dumps(calls)[:200])


def free_case(seed):
    st, body = post("/v1/chat/completions", {"messages": user("free text"), "temperature": 1.0, "seed": seed,
                                             "max_tokens": 64})
    record(f"unconstrained seed={seed}", st == 200, body[:120])


cases = []
for s in range(4):
    cases += [(json_schema_case, s, 0.0), (json_schema_case, s, 1.0), (streamed_case, s), (json_object_case, s),
              (guided_completion_case, s), (tool_required_case, s), (tool_named_case, s), (free_case, s),
              (free_case, 100 + s)]
threads = [threading.Thread(target=f, args=a) for f, *a in cases]
for t in threads:
    t.start()
for t in threads:
    t.join()
bad_st, bad_body = post("/v1/chat/completions", {"messages": user("x"), "response_format": {"type": "json_schema",
                        "json_schema": {"name": "p", "schema": {"type": "string", "pattern": "^a"}}}})
record("unsupported schema keyword is a 400", bad_st == 400 and "pattern" in bad_body, bad_body)
print(f"CONSTRAIN {'OK' if all(results) else 'FAILED'} {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
