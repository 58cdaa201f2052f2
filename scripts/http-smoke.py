#!/usr/bin/env python3
"""HTTP smoke check of a running `dsv4 serve` (the one check the device scripts share).

Waits for the server (its log's "listening on http://HOST:PORT" line, or --base), then checks
/v1/models, one chat completion, one streamed chat completion, --concurrent plain completions at
once, and /metrics. Prints one line per check ("name: OK (...)" or "name: FAILED ..."); the exit
status is the number of failed checks (1 when the server never came up).

  python3 scripts/http-smoke.py --log serve.log --pid 1234 [--wait 100] [--concurrent 4]
"""
import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.request


def wait_for_server(args):
    deadline = time.time() + args.wait
    t0 = time.time()
    while time.time() < deadline:
        if args.pid:
            try:
                os.kill(args.pid, 0)
            except OSError:
                print("SERVER EXITED before listening (see its log)")
                return None
        base = args.base
        if not base and args.log and os.path.exists(args.log):
            m = re.search(r"listening on (http://[0-9.]+:[0-9]+)", open(args.log, errors="replace").read())
            base = m.group(1) if m else None
        if base:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                print("server up: True after %.0f s (%s)" % (time.time() - t0, base))
                return base
            except Exception:
                pass
        time.sleep(1)
    print("server up: False after %.0f s" % (time.time() - t0))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", help="the server's log (its 'listening on' line gives the address)")
    ap.add_argument("--base", help="the server's address instead, e.g. http://127.0.0.1:8000")
    ap.add_argument("--pid", type=int, default=0, help="the server's process id: stop waiting when it exits")
    ap.add_argument("--wait", type=float, default=100, help="seconds to wait for /health")
    ap.add_argument("--concurrent", type=int, default=4, help="plain completions sent at once")
    args = ap.parse_args()
    base = wait_for_server(args)
    if not base:
        return 1
    failed = 0

    def post(path, body, timeout=60):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=timeout).read().decode()

    def check(name, f):
        nonlocal failed
        try:
            t = time.time()
            r = f()
            print("%s: OK (%.2f s) %s" % (name, time.time() - t, r[:300].replace("\n", " ")))
        except Exception as e:  # a failed check is reported, the others still run
            failed += 1
            print("%s: FAILED %r" % (name, e))

    check("models", lambda: urllib.request.urlopen(base + "/v1/models", timeout=10).read().decode())
    chat = {"model": "deepseek-v4", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16,
            "temperature": 0}
    check("chat", lambda: post("/v1/chat/completions", chat))

    def stream():
        s = post("/v1/chat/completions", dict(chat, stream=True, stream_options={"include_usage": True}))
        if not s.strip().endswith("[DONE]"):
            raise RuntimeError("stream did not end with [DONE]")
        return "chunks=%d" % s.count("data: ")
    check("stream", stream)

    res = [None] * args.concurrent

    def one(i):
        try:
            r = json.loads(post("/v1/completions", {"model": "deepseek-v4", "prompt": "Count %d:" % i,
                                                    "max_tokens": 24, "temperature": 0.7}))
            res[i] = r["usage"]["completion_tokens"]
        except Exception as e:
            res[i] = repr(e)

    def concurrent():
        th = [threading.Thread(target=one, args=(i,)) for i in range(args.concurrent)]
        [x.start() for x in th]
        [x.join() for x in th]
        if not all(isinstance(r, int) for r in res):
            raise RuntimeError(str(res))
        return "completion tokens %s" % res
    check("concurrent x%d" % args.concurrent, concurrent)
    check("metrics", lambda: " | ".join(
        line for line in urllib.request.urlopen(base + "/metrics", timeout=10).read().decode().splitlines()
        if "generated" in line or "running" in line or "pages" in line))
    return failed


if __name__ == "__main__":
    sys.exit(main())
