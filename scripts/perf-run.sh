#!/usr/bin/env bash
# One GPU-machine call: ceilings, CUDA op tests (every variant vs the CPU reference), then the
# Flash-shape decode benchmarks. Writes logs/JSON under $OUT and prints a short table last.
#
# Binaries come prebuilt in build-perf-bin/ (build here with scripts/perf-run.sh --build, then
# `run` with carry ["build-perf-bin"]): the GPU machine has no PCRE2, so the full project does
# not configure there. Usage on the GPU machine:
#   scripts/perf-run.sh [decode-bench flags...]      e.g. --sections attn,moe --batches 1,64
# Env DSV4_MOE_SWEEP=<comma-separated canonical names> limits the moe_sweep section to those variants.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build-perf-bin
if [[ "${1:-}" == "--build" ]]; then
    cmake -S . -B build-perf -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    ninja -C build-perf -j"${JOBS:-2}" dsv4_perf_ops_tests dsv4-decode-bench
    mkdir -p "$BIN"
    cp build-perf/tests/kernels/perf_ops/dsv4_perf_ops_tests build-perf/tools/dsv4/dsv4-decode-bench "$BIN"/
    strip "$BIN"/* || true
    git rev-parse HEAD > "$BIN"/git_sha
    ls -la "$BIN"
    exit 0
fi
OUT=${OUT:-/tmp/perf-out}
mkdir -p "$OUT"
export DSV4_GIT_SHA=$(cat "$BIN"/git_sha 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv
    echo "git sha: $DSV4_GIT_SHA"
} | tee "$OUT/env.txt"
echo "== tests (label cuda: every op x variant vs CPU reference)"
set +e
"$BIN"/dsv4_perf_ops_tests --gtest_output=json:"$OUT/tests.json" > "$OUT/tests.log" 2>&1
TRC=$?
set -e
tail -n 25 "$OUT/tests.log"
SECTIONS=()
if [[ $TRC -ne 0 ]]; then
    # Honest numbers only: an op whose CPU comparison failed in this run is not benchmarked.
    echo "TESTS FAILED (rc $TRC); failing ops are left out of the benchmark"
    grep -E "Failure|FAILED|Expected|Which is|rel_l2|max_abs|Value of" "$OUT/tests.log" | head -40
    keep=""
    grep -q "FAILED  \] PerfSparseDecode" "$OUT/tests.log" || keep+="attn,attn_sweep,"
    grep -q "FAILED  \] PerfMoe" "$OUT/tests.log" || keep+="moe,moe_sweep,"
    grep -q "FAILED  \] PerfDenseGemv" "$OUT/tests.log" || keep+="gemv,gemv_sweep,"
    [[ -z "$keep" ]] && exit 1
    SECTIONS=(--sections "${keep%,}")
fi
echo "== decode-bench"
"$BIN"/dsv4-decode-bench decode-bench --out "$OUT/decode_bench.json" "${SECTIONS[@]}" "$@" 2>&1 | tee "$OUT/bench.log" | tail -n 220
