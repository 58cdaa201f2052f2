"""Shared by the golden generator's modules: the elapsed-time log and a tensor difference.

Part of tools/golden/make_golden.py (see its docstring)."""

import time

T0 = time.time()


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


def maxdiff(a, b):
    return float((a.float() - b.float()).abs().max())
