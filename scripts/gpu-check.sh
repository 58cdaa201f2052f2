#!/usr/bin/env bash
# CUDA backend (issue 6) check in ONE GPU-machine call: the `cuda` tests (ops vs the CPU
# reference, the CUDA runner vs RefRunner and the transformers goldens, graph replay == eager),
# compute-sanitizer memcheck on a reduced run, and `dsv4 generate --backend cuda` when the tool
# was built. Logs under $OUT, a short summary last.
#
# The GPU machine has no PCRE2 (the full project does not configure there), so binaries are built
# here and carried:
#   scripts/gpu-check.sh --build          # here: build-cuda/ -> build-cuda-bin/ (+ the BLAS libs)
#   run(command="scripts/gpu-check.sh", carry=["build-cuda-bin"])
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=build-cuda-bin
if [[ "${1:-}" == "--build" ]]; then
    set -e
    cmake -S . -B build-cuda -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
    ninja -C build-cuda -j"${JOBS:-2}" dsv4_cuda_tests ${EXTRA_TARGETS:-}
    mkdir -p "$BIN/lib"
    cp build-cuda/tests/kernels/cuda_runner/dsv4_cuda_tests "$BIN"/
    if [[ -x build-cuda/tools/dsv4/dsv4 ]]; then cp build-cuda/tools/dsv4/dsv4 "$BIN"/; fi
    strip "$BIN"/dsv4_cuda_tests "$BIN"/dsv4 2>/dev/null || true
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
        cp -L "$(ldconfig -p | awk -v l=$l '$1 == l {print $NF; exit}')" "$BIN/lib/" || true
    done
    git rev-parse HEAD > "$BIN/git_sha"
    ls -la "$BIN"
    exit 0
fi
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export DSV4_GOLDEN_DIR="$PWD/tests/data/golden"
# Use the carried BLAS only when the machine lacks it.
if ldd "$BIN/dsv4_cuda_tests" | grep -q "not found"; then export LD_LIBRARY_PATH="$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}"; fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    echo "git sha (build): $(cat $BIN/git_sha 2>/dev/null)"
} > "$OUT/env.txt" 2>&1
T0=$(date +%s)
"$BIN"/dsv4_cuda_tests --gtest_output=json:"$OUT/cuda_tests.json" > "$OUT/cuda_tests.log" 2>&1
TRC=$?
T1=$(date +%s)
MRC=skipped
RRC=skipped
if command -v compute-sanitizer >/dev/null; then
    timeout "${MEMCHECK_S:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN"/dsv4_cuda_tests \
        --gtest_filter='CudaOps.*:CudaOpsPaged.*:CudaRunner.GraphReplayEqualsEager' > "$OUT/memcheck.log" 2>&1
    MRC=$?
    timeout "${RACECHECK_S:-120}" compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN"/dsv4_cuda_tests \
        --gtest_filter='CudaOps.Mhc*:CudaOps.Topk*:CudaOpsPaged.*' > "$OUT/racecheck.log" 2>&1
    RRC=$?
fi
T2=$(date +%s)
GRC=skipped
if [[ -x "$BIN/dsv4" ]]; then
    timeout 60 "$BIN"/dsv4 generate --backend cuda --max-tokens 16 --prompt "Hello" > "$OUT/generate.log" 2>&1
    GRC=$?
fi
echo "================ summary"
cat "$OUT/env.txt"
grep -E "^\[(op|runner|engine|golden-gpu|perf)" "$OUT/cuda_tests.log"
grep -E "^decode attention|^  [ *] " "$OUT/cuda_tests.log" | head -8
grep -E "Failure|FAILED|Expected|Which is" "$OUT/cuda_tests.log" | head -30
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/cuda_tests.log"
echo "tests rc=$TRC ($((T1 - T0)) s); memcheck rc=$MRC ($((T2 - T1)) s): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" 2>/dev/null | tail -1)"
echo "racecheck rc=$RRC: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" 2>/dev/null | tail -1)"
echo "generate rc=$GRC"; tail -5 "$OUT/generate.log" 2>/dev/null
exit $TRC
