#!/usr/bin/env python3
"""Join dsv4's proxy-bench JSON with tools/peer/transformers_decode.py's JSON on (batch, context)
and print decode step times and the speed ratio (transformers step ms / dsv4 step ms).

    python3 tools/peer/ratio.py --dsv4 dsv4_proxy.json --peer peer_transformers.json [--md] [--json-out F]

Robust to missing points (printed as '-' with the reason) and to the exact field names of the
dsv4 file: a record list is looked for at the top level or under points/records/results/rows/
benchmarks/sweep; batch under batch/batch_size/B; context under context/ctx/context_len/...; the
step time under step_ms_median/median_ms/step_ms/... (a dict is read at median/p50; fields ending in
_us are converted). --dsv4-field names the step-time field explicitly (dotted path allowed).
If both files state their depth and the depths differ, the ratio is taken on per-layer time
(step / depth) and marked so. Exit status 0 even when nothing joins (the table says why).
"""

import argparse
import json
import sys

LIST_KEYS = ("points", "records", "results", "rows", "benchmarks", "sweep", "data")
BATCH_KEYS = ("batch", "batch_size", "B", "bs")
CONTEXT_KEYS = ("context", "ctx", "context_len", "context_length", "ctx_len", "L", "seq_len", "prefill")
DEPTH_KEYS = ("depth", "layers", "n_layers", "num_layers", "num_hidden_layers")
STEP_KEYS_MS = ("step_ms_median", "median_step_ms", "median_ms", "step_median_ms", "decode_step_ms",
                "step_ms", "ms_median", "ms", "time_ms")
STEP_KEYS_US = ("step_us_median", "median_step_us", "median_us", "step_us", "us_median", "us")


def load(path):
    with open(path) as f:
        return json.load(f)


def records_of(doc):
    """(list of point records, top-level dict or {})."""
    if isinstance(doc, list):
        return doc, {}
    if not isinstance(doc, dict):
        return [], {}
    for k in LIST_KEYS:
        v = doc.get(k)
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return v, doc
        if isinstance(v, dict):  # e.g. {"points": {"1x1024": {...}}}
            vals = [x for x in v.values() if isinstance(x, dict)]
            if vals:
                return vals, doc
    for v in doc.values():  # any list of dicts that look like points
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v) and \
                any(first_int(x, BATCH_KEYS) is not None for x in v):
            return v, doc
    return [], doc


def first_int(rec, keys):
    for k in keys:
        v = rec.get(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            return int(v)
        if isinstance(v, str):
            t = v.strip().lower()
            try:
                return int(t[:-1]) * 1024 if t.endswith("k") else int(t)
            except ValueError:
                continue
    return None


def pick(v):
    if isinstance(v, dict):
        for k in ("median", "p50", "med", "value"):
            if isinstance(v.get(k), (int, float)):
                return float(v[k])
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def dotted(rec, path):
    cur = rec
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def step_field(rec, field=None):
    """(raw value, scale to ms) of the step-time field, or (None, None)."""
    if field:
        scale = 1e-3 if ("_us" in field or field.endswith(".us")) else 1.0
        return dotted(rec, field), scale
    for keys, scale in ((STEP_KEYS_MS, 1.0), (STEP_KEYS_US, 1e-3)):
        for k in keys:
            if pick(rec.get(k)) is not None:
                return rec[k], scale
    return None, None


def step_ms(rec, field=None):
    v, scale = step_field(rec, field)
    v = pick(v)
    return None if v is None else v * scale


def spread_ms(rec, field=None):
    """(p10, p90) in ms: from p10_ms/p90_ms-style siblings or from the step field's dict."""
    for lo, hi in (("p10_ms", "p90_ms"), ("step_ms_p10", "step_ms_p90")):
        if isinstance(rec.get(lo), (int, float)) and isinstance(rec.get(hi), (int, float)):
            return float(rec[lo]), float(rec[hi])
    v, scale = step_field(rec, field)
    if isinstance(v, dict) and isinstance(v.get("p10"), (int, float)) and isinstance(v.get("p90"), (int, float)):
        return v["p10"] * scale, v["p90"] * scale
    return None


def status_ok(rec):
    if rec.get("skipped"):
        return False
    s = rec.get("status", "ok")
    return s in ("ok", "pass", "passed", True, None)


def depth_of(rec, top):
    d = first_int(rec, DEPTH_KEYS)
    return d if d is not None else first_int(top, DEPTH_KEYS)


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def join(ddoc, pdoc, dsv4_field=None, want_impls=None):
    """Rows joined on (batch, context): dsv4 ms, and per peer experts implementation its ms and the
    ratio. Returns (rows, impls, drecs, dtop, precs, ptop)."""
    drecs, dtop = records_of(ddoc)
    precs, ptop = records_of(pdoc)

    dsv4 = {}    # (b, l) -> (ms, depth, rec)
    dsv4_bad = {}
    for r in drecs:
        b, l = first_int(r, BATCH_KEYS), first_int(r, CONTEXT_KEYS)
        if b is None or l is None:
            continue
        ms = step_ms(r, dsv4_field)
        if not status_ok(r) or ms is None:
            dsv4_bad[(b, l)] = str(r.get("skip_reason") or r.get("skipped") or r.get("reason") or r.get("status")
                                   or "no step time")
            continue
        dsv4[(b, l)] = (ms, depth_of(r, dtop), spread_ms(r, dsv4_field))

    peer = {}    # (impl, b, l) -> rec
    impls = []
    for r in precs:
        b, l = first_int(r, BATCH_KEYS), first_int(r, CONTEXT_KEYS)
        if b is None or l is None:
            continue
        impl = str(r.get("experts_impl", "default"))
        if impl not in impls:
            impls.append(impl)
        peer[(impl, b, l)] = r
    if want_impls:
        impls = list(want_impls)

    keys = sorted({k for k in dsv4} | set(dsv4_bad) | {(b, l) for (_, b, l) in peer})
    rows = []
    for b, l in keys:
        row = {"batch": b, "context": l}
        d = dsv4.get((b, l))
        row["dsv4_ms"] = d[0] if d else None
        row["dsv4_depth"] = d[1] if d else None
        row["dsv4_p10_p90"] = list(d[2]) if d and d[2] else None
        if not d:
            row["dsv4_missing"] = dsv4_bad.get((b, l), "no dsv4 point")
        for impl in impls:
            r = peer.get((impl, b, l))
            key = f"hf_{impl}"
            if r is None or not status_ok(r) or step_ms(r) is None:
                row[key + "_ms"] = None
                row[key + "_missing"] = ("no peer point" if r is None
                                         else f"{r.get('status')}: {r.get('skip_reason', '')}"[:120])
                row[key + "_ratio"] = None
                continue
            ms = step_ms(r)
            row[key + "_ms"] = ms
            sp = spread_ms(r)
            row[key + "_p10_p90"] = list(sp) if sp else None
            pdepth = depth_of(r, ptop)
            ratio, per_layer = None, False
            if d:
                if d[1] and pdepth and d[1] != pdepth:
                    ratio = (ms / pdepth) / (d[0] / d[1])
                    per_layer = True
                else:
                    ratio = ms / d[0]
            row[key + "_ratio"] = ratio
            row[key + "_ratio_per_layer"] = per_layer
        rows.append(row)

    return rows, impls, drecs, dtop, precs, ptop


def selftest():
    """The join on small built-in documents in both files' shapes; exit status 1 on a mismatch."""
    ddoc = {"layers": 3, "points": [
        {"batch": 1, "context": 1024, "step_us": {"median": 1000.0, "p10": 990.0, "p90": 1010.0}},
        {"batch": 8, "context": 8192, "step_us": {"median": 2000.0}},
        {"batch": 64, "context": 8192, "skipped": "time budget"}]}
    pdoc = {"depth": 3, "records": [
        {"batch": 1, "context": 1024, "experts_impl": "grouped_mm", "status": "ok", "median_ms": 30.0,
         "p10_ms": 29.0, "p90_ms": 31.0},
        {"batch": 1, "context": 1024, "experts_impl": "eager", "status": "ok", "median_ms": 40.0},
        {"batch": 8, "context": 8192, "experts_impl": "grouped_mm", "status": "skipped", "skip_reason": "budget"},
        {"batch": 32, "context": 1024, "experts_impl": "eager", "status": "ok", "median_ms": 50.0}]}
    rows, impls, *_ = join(ddoc, pdoc)
    by = {(r["batch"], r["context"]): r for r in rows}
    checks = [
        (impls == ["grouped_mm", "eager"], "implementations in file order"),
        (abs(by[(1, 1024)]["dsv4_ms"] - 1.0) < 1e-9, "dsv4 step_us.median converted to ms"),
        (by[(1, 1024)]["dsv4_p10_p90"] == [0.99, 1.01], "dsv4 spread from step_us p10/p90"),
        (abs(by[(1, 1024)]["hf_grouped_mm_ratio"] - 30.0) < 1e-9, "ratio = peer / dsv4"),
        (abs(by[(1, 1024)]["hf_eager_ratio"] - 40.0) < 1e-9, "ratio per implementation"),
        (by[(8, 8192)]["hf_grouped_mm_ratio"] is None and "budget" in by[(8, 8192)]["hf_grouped_mm_missing"],
         "skipped peer point has no ratio and says why"),
        (by[(64, 8192)]["dsv4_ms"] is None and by[(64, 8192)]["dsv4_missing"] == "time budget",
         "skipped dsv4 point says why"),
        (by[(32, 1024)]["dsv4_missing"] == "no dsv4 point" and by[(32, 1024)]["hf_eager_ms"] == 50.0,
         "peer-only point kept"),
    ]
    ddoc2 = {"points": [{"batch": 1, "context": "1K", "layers": 6, "step_ms_median": 2.0}]}
    rows2, *_ = join(ddoc2, pdoc)
    r2 = {(r["batch"], r["context"]): r for r in rows2}[(1, 1024)]
    checks.append((r2["hf_grouped_mm_ratio_per_layer"] and abs(r2["hf_grouped_mm_ratio"] - 30.0) < 1e-9,
                   "different depths compare per-layer time"))
    bad = [msg for ok, msg in checks if not ok]
    for msg in bad:
        print("FAIL:", msg)
    print(f"ratio.py selftest: {len(checks) - len(bad)}/{len(checks)} passed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description="dsv4 vs transformers decode step ratio")
    ap.add_argument("--dsv4", help="dsv4 proxy-bench JSON")
    ap.add_argument("--peer", help="tools/peer/transformers_decode.py JSON")
    ap.add_argument("--dsv4-field", default=None, help="dsv4 step-time field (dotted path), if not auto-found")
    ap.add_argument("--impls", default=None, help="peer experts implementations to show (default: all present)")
    ap.add_argument("--md", action="store_true", help="print a Markdown table")
    ap.add_argument("--json-out", default=None, help="also write the joined rows as JSON")
    ap.add_argument("--selftest", action="store_true", help="check the join on built-in samples and exit")
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    if not args.dsv4 or not args.peer:
        ap.error("--dsv4 and --peer are required")

    try:
        ddoc = load(args.dsv4)
    except (OSError, ValueError) as e:
        print(f"warning: cannot read dsv4 JSON {args.dsv4}: {e}", file=sys.stderr)
        ddoc = {}
    try:
        pdoc = load(args.peer)
    except (OSError, ValueError) as e:
        print(f"warning: cannot read peer JSON {args.peer}: {e}", file=sys.stderr)
        pdoc = {}
    want = [x.strip() for x in args.impls.split(",") if x.strip()] if args.impls else None
    rows, impls, drecs, dtop, precs, ptop = join(ddoc, pdoc, args.dsv4_field, want)

    head = ["batch", "context", "dsv4 ms (p10-p90)"]
    for impl in impls:
        head += [f"HF[{impl}] ms (p10-p90)", f"ratio[{impl}]"]
    lines = []
    for row in rows:
        if row["dsv4_ms"] is None:
            dcell = f"- ({row.get('dsv4_missing', '')})"[:60]
        else:
            sp = row.get("dsv4_p10_p90")
            dcell = fmt(row["dsv4_ms"]) + (f" ({sp[0]:.3f}-{sp[1]:.3f})" if sp else "")
        cells = [str(row["batch"]), str(row["context"]), dcell]
        for impl in impls:
            key = f"hf_{impl}"
            if row.get(key + "_ms") is None:
                cells += [f"- ({row.get(key + '_missing', '')[:48]})", "-"]
                continue
            sp = row.get(key + "_p10_p90")
            cells.append(fmt(row[key + "_ms"]) + (f" ({sp[0]:.3f}-{sp[1]:.3f})" if sp else ""))
            r = row.get(key + "_ratio")
            cells.append("-" if r is None else f"{r:.1f}x" + (" (per layer)" if row.get(key + "_ratio_per_layer") else ""))
        lines.append(cells)

    meta = []
    if ptop:
        meta.append(f"peer: transformers {ptop.get('transformers')}, torch {ptop.get('torch')}, {ptop.get('gpu')}, "
                    f"depth {ptop.get('depth')} {ptop.get('layer_types')}, attention {ptop.get('attn_impl')}")
    if dtop:
        meta.append("dsv4: " + ", ".join(f"{k} {dtop[k]}" for k in ("git_sha", "gpu", "depth", "layers", "layer_types")
                                         if k in dtop))
    if not drecs:
        meta.append(f"dsv4: no point records found in {args.dsv4}")
    if not precs:
        meta.append(f"peer: no point records found in {args.peer}")
    for m in meta:
        print(m)
    if args.md:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for c in lines:
            print("| " + " | ".join(c) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(head)]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for c in lines:
            print("  ".join(x.rjust(w) for x, w in zip(c, widths)))
    print("ratio = transformers step ms / dsv4 step ms (same batch, context, depth); > 1 means dsv4 is faster")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "meta": meta}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
