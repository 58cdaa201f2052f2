#!/usr/bin/env python3
"""Served vs offline decode table (issue 23 item 4).

Reads the offline step of `dsv4 proxy-bench --json` (tokens/s per batch at each context) and the
JSON-lines records of `dsv4 bench --out` runs against `dsv4 serve` on the same model, and prints,
per workload file and concurrency level: the served output tok/s (mean over the level's iterations,
with min-max when there are several), the offline step's tok/s at the same batch and the nearest
context, their ratio, and TTFT / TPOT / ITL medians and p99s (means over iterations).

    served_vs_offline.py --offline offline.json [--context 1024] NAME=served.jsonl [NAME=...]
"""
import argparse
import json
import statistics


def offline_table(path, context):
    d = json.load(open(path))
    best = {}
    for p in d["points"]:
        b, c = p["batch"], p["context"]
        if b not in best or abs(c - context) < abs(best[b]["context"] - context):
            best[b] = p
    return {b: (p["tokens_per_s"], p["context"]) for b, p in best.items()}


def levels(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("side", "A") not in ("A", "a", None):
            continue
        out.setdefault(r["level"], []).append(r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--offline", required=True)
    ap.add_argument("--context", type=int, default=1024, help="context of the offline points to compare with")
    ap.add_argument("runs", nargs="+", help="NAME=served.jsonl")
    a = ap.parse_args()
    off = offline_table(a.offline, a.context)
    print("| workload | conc | served out tok/s | offline step tok/s (ctx) | ratio | TTFT med / p99 ms | "
          "TPOT med ms | ITL med / p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in a.runs:
        name, path = spec.split("=", 1)
        for lvl, recs in sorted(levels(path).items()):
            tok = [r["output_tok_s"] for r in recs]
            m = statistics.mean(tok)
            spread = f" ({min(tok):,.0f}-{max(tok):,.0f})" if len(tok) > 1 else ""
            mean = lambda k, q: statistics.mean(r[k][q] for r in recs if r.get(k) and r[k].get("count"))
            o = off.get(lvl)
            ratio = f"{m / o[0]:.2f}" if o else "-"
            ostr = f"{o[0]:,.0f} ({o[1]})" if o else "-"
            errs = sum(r.get("n_errors", 0) for r in recs)
            try:
                lat = (f"{mean('ttft_ms', 'median'):,.0f} / {mean('ttft_ms', 'p99'):,.0f} | "
                       f"{mean('tpot_ms', 'median'):.2f} | {mean('itl_ms', 'median'):.2f} / {mean('itl_ms', 'p99'):.1f}")
            except statistics.StatisticsError:
                lat = "- | - | -"
            print(f"| {name} | {lvl} | {m:,.0f}{spread} | {ostr} | {ratio} | {lat} | {errs} |")


if __name__ == "__main__":
    main()
