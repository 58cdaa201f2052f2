#!/usr/bin/env python3
"""Per-kernel time table from an `ncu --csv --metrics gpu__time_duration.sum` log.

Usage: ncu_summary.py LOG.csv [--top N]
Groups the profiled launches by kernel name (template arguments kept, parameter list dropped),
prints launches, total and mean microseconds and the share, largest first. Non-CSV lines that
ncu or the profiled program print are skipped.
"""
import argparse
import csv
import io
import sys
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    lines = [l for l in open(args.log, errors="replace") if l.startswith('"')]
    if not lines:
        print("no ncu CSV rows in", args.log)
        return 1
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0] if "(" in r["Kernel Name"] else r["Kernel Name"]
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        tot[name] += v * scale
        cnt[name] += 1
    total = sum(tot.values())
    print(f"{'kernel':<70} {'launches':>8} {'total_us':>10} {'mean_us':>9} {'share':>6}")
    for name, t in sorted(tot.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{name[:70]:<70} {cnt[name]:>8} {t:>10.1f} {t / cnt[name]:>9.2f} {100 * t / total:>5.1f}%")
    print(f"{'all kernels':<70} {sum(cnt.values()):>8} {total:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
