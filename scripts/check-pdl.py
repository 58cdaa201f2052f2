#!/usr/bin/env python3
"""Checks that every CUDA kernel in src/, tests/ and tools/ starts with dev::pdl_begin().

Why: with RuntimeOptions::graph_pdl the runner turns a graph's kernel-to-kernel edges into
programmatic ones, so a kernel's CTAs may start while its predecessor still runs; a kernel that
reads or writes memory before griddepcontrol.wait (kernels/cuda/common/pdl.cuh) would race with it.
The runner recognises dsv4's kernels by the namespace in their mangled names, and tests and tools are
in that namespace too, so their kernels are held to the same rule.
Prints each kernel whose first statement is something else and exits 1; exits 0 when all comply.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
bad, n = [], 0
paths = [p for d in ("src", "tests", "tools") for p in (root / d).rglob("*")]
for path in sorted(paths):
    if path.suffix not in (".cu", ".cuh", ".h", ".cpp", ".hpp", ".inl") or path.name == "pdl.cuh" or not path.is_file():
        continue
    text = path.read_text()
    for m in re.finditer(r"__global__", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if "//" in text[line_start:m.start()]:
            continue  # a comment
        depth, k = 0, m.end()
        while k < len(text):  # the body's brace, past the parameter list (or a declaration's ';')
            c = text[k]
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and c in ";{":
                break
            k += 1
        if k >= len(text) or text[k] == ";":
            continue
        n += 1
        body = text[k + 1:].lstrip()
        if not body.startswith("dev::pdl_begin();"):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{path.relative_to(root)}:{line}")
if bad:
    print("check-pdl: these kernels do not start with dev::pdl_begin() (kernels/cuda/common/pdl.cuh says why):")
    print("\n".join("  " + b for b in bad))
    sys.exit(1)
print(f"check-pdl: {n} kernels, each starts with dev::pdl_begin()")
