#!/usr/bin/env bash
# The Flash proxy decode benchmark through the CUDA runner (`dsv4 proxy-bench`), one GPU-machine
# call: the CudaProxy tests (synthetic weights, context fill, graph == eager, finite logits), then
# the sweep (batches 1..512 x contexts 1K/8K/32K at 20 layers by default). Writes under $OUT:
# env.txt, tests.log, proxy_bench.json, proxy_bench.txt (the table).
#
# The GPU machine has no PCRE2, so binaries are built here (the standalone dsv4-proxy-bench needs
# no tokenizer) and carried:
#   scripts/proxy-bench.sh --build            # here: builds into build-proxy-bin/ (BIN= to change)
#   run(command="scripts/proxy-bench.sh", carry=["build-proxy-bin"], timeout_s=420)
# Extra arguments go to proxy-bench, e.g. `scripts/proxy-bench.sh --layers 4 --batches 1,64`.
# PROXY_TIME_BUDGET (seconds, default 300) bounds the sweep: later points are skipped, not cut.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build-proxy-bin}
if [[ "${1:-}" == "--build" ]]; then
    cmake -S . -B build-proxy -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
    ninja -C build-proxy -j"${JOBS:-2}" dsv4-proxy-bench dsv4_cuda_tests
    mkdir -p "$BIN"
    cp build-proxy/tools/dsv4/dsv4-proxy-bench build-proxy/tests/kernels/cuda_runner/dsv4_cuda_tests "$BIN"/
    strip "$BIN"/dsv4-proxy-bench "$BIN"/dsv4_cuda_tests || true
    # Shared libraries the GPU machine may lack (OpenBLAS of the CPU reference, linked by both),
    # xz-compressed: OpenBLAS alone is 36 MB.
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lib"
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l && !f {print $NF; f = 1}')
        [[ -n "$p" ]] && cp -L "$p" "$tmp/lib/"
    done
    tar -C "$tmp" -cJf "$BIN/blaslibs.tar.xz" lib
    rm -rf "$tmp"
    git rev-parse HEAD > "$BIN"/git_sha
    ls -la "$BIN"
    exit 0
fi
OUT=${OUT:-/tmp/proxy-out}
mkdir -p "$OUT"
if ldd "$BIN/dsv4-proxy-bench" | grep -q "not found" && [[ -f "$BIN/blaslibs.tar.xz" ]]; then
    LIBDIR=$(mktemp -d)
    tar -C "$LIBDIR" -xJf "$BIN/blaslibs.tar.xz"
    export LD_LIBRARY_PATH="$LIBDIR/lib:${LD_LIBRARY_PATH:-}"
fi
export DSV4_GIT_SHA=$(cat "$BIN"/git_sha 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv
    echo "git sha: $DSV4_GIT_SHA"
} | tee "$OUT/env.txt"
echo "== tests: CudaProxy (label cuda)"
set +e
"$BIN"/dsv4_cuda_tests --gtest_filter='CudaProxy.*' > "$OUT/tests.log" 2>&1
TRC=$?
set -e
grep -E "^\[proxy|OK \]|FAILED|PASSED|Failure|Expected|Which is" "$OUT/tests.log" | head -30
if [[ $TRC -ne 0 ]]; then
    echo "CudaProxy tests FAILED (rc $TRC): no benchmark numbers from this build"
    exit 1
fi
echo "== proxy-bench"
"$BIN"/dsv4-proxy-bench proxy-bench --json "$OUT/proxy_bench.json" --time-budget "${PROXY_TIME_BUDGET:-300}" "$@" 2>&1 |
    tee "$OUT/proxy_bench.txt" | tail -n 80
