#!/usr/bin/env python3
"""A real device fault through `dsv4 serve --backend cuda` (issue 21 item 5).

Starts the server with `--option fault_inject_step=N` (step N launches a kernel that stores through a
null pointer: a sticky CUDA error), sends one plain and one streaming completion that are both running
when step N comes, and checks what a supervisor and the clients see:
  - the plain request gets HTTP 500 whose error names the failed step and the CUDA error;
  - the stream ends with an error event, then [DONE];
  - /health answers 503 while the process is still up (when it is still up to be asked);
  - the process exits by itself with status 3, within 15 s of the failed replies, with one
    "dsv4 serve: fatal" line on stderr.
Usage: gpu-fault-check.py DSV4_BINARY OUT_DIR [serve arguments...]
Writes OUT_DIR/serve.log and OUT_DIR/verdict.txt (first line PASS or FAIL); exits 1 on FAIL.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

MODEL = "deepseek-v4"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url, method="GET", body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # connection refused or reset: the process is gone
        return None, repr(e)


def main():
    binary, out = sys.argv[1], sys.argv[2]
    serve_args = sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(out, "serve.log"), "w")
    cmd = [binary, "serve", "--port", str(port)] + serve_args
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    lines = [f"command: {' '.join(cmd)}"]
    for _ in range(600):
        if request(base + "/health", timeout=2)[0] == 200 or proc.poll() is not None:
            break
        time.sleep(0.5)
    if request(base + "/health", timeout=2)[0] != 200:
        proc.kill()
        lines.insert(0, "FAIL: the server did not come up")
        open(os.path.join(out, "verdict.txt"), "w").write("\n".join(lines) + "\n")
        return 1

    results = {}
    body = {"model": MODEL, "prompt": "a long one", "max_tokens": 4000, "ignore_eos": True}

    def send(name, extra):
        results[name] = request(base + "/v1/completions", "POST", {**body, **extra})
        results[name + "_at"] = time.time()

    threads = [threading.Thread(target=send, args=("plain", {})),
               threading.Thread(target=send, args=("stream", {"stream": True}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    answered = max(results.get("plain_at", time.time()), results.get("stream_at", time.time()))
    health = request(base + "/health", timeout=2)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "still running after 30 s"
    exited = time.time()
    log.close()
    serve_log = open(os.path.join(out, "serve.log"), errors="replace").read()
    fatal = [l for l in serve_log.splitlines() if "dsv4 serve: fatal" in l]

    ok = True
    ps, pb = results.get("plain", (None, ""))
    lines.append(f"plain: HTTP {ps}: {pb[:400]}")
    ok &= ps == 500 and "model step failed" in pb
    ss, sb = results.get("stream", (None, ""))
    events = [l[len("data: "):] for l in sb.splitlines() if l.startswith("data: ")]
    err = next((e for e in reversed(events) if e.startswith("{") and '"error"' in e), "")
    lines.append(f"stream: HTTP {ss}, {len(events)} events, last two: {events[-2:] if events else []}")
    ok &= ss == 200 and bool(events) and events[-1] == "[DONE]" and bool(err)
    lines.append(f"/health after the replies: {health[0]} {health[1][:200]}")
    ok &= health[0] in (503, None)  # None: the process had already exited
    lines.append(f"exit status: {code}, {exited - answered:.1f} s after the last reply")
    ok &= code == 3 and exited - answered < 15
    lines.append(f"fatal lines: {len(fatal)}: {fatal[:2]}")
    ok &= len(fatal) == 1
    lines.insert(0, "PASS" if ok else "FAIL")
    open(os.path.join(out, "verdict.txt"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
