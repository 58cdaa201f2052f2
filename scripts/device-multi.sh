#!/usr/bin/env bash
# The 2-GPU run of expert-parallel decode (docs/design.md, "Parallelism over several GPUs"), in ONE
# device call of about 400 s on nvidia-h200-x2: the expert-parallel CUDA tests, the 43-layer Flash
# proxy decode benchmark over both GPUs, and an HTTP smoke check of `dsv4 serve --gpus 2` on the
# synthetic 43-layer Flash. Every stage runs under its own timeout; a failing stage does not stop
# the later ones. Results and logs under $OUT; a summary last.
#
# The GPU machine has no PCRE2 and no network, so binaries are built here and carried:
#   scripts/device-all.sh --build        # build-cuda -> build-all-bin/ (xz-compressed), then on the GPUs:
#   scripts/device-multi.sh [stages]     # with build-all-bin beside it
# Stages (default: all three): tests, proxy, serve. Knobs: TESTS_S (120), PROXY_S (180),
# PROXY_TIME_BUDGET (110), PROXY_BATCHES (1,2,4,8,16,32,64,128,256), PROXY_CONTEXTS (8192),
# PROXY_LAYERS (43), SERVE_S (100), SERVE_LAYERS (43), GPUS (2).
# NCCL: the binaries link libnccl.so.2 (NCCL 2.28.9 headers here); the python NCCL PyTorch ships
# (nvidia.nccl, 2.28.9) goes first on LD_LIBRARY_PATH when present, else the system libnccl.so.2.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 here, and the code forces it before NCCL init.
set -uo pipefail
cd "$(dirname "$0")/.."
# Binaries: the ones scripts/device-all.sh --build packs (build-all-bin, xz-compressed); unpacked here.
OUT=${OUT:-/tmp/device-multi}
mkdir -p "$OUT"
GPUS=${GPUS:-2}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
source scripts/unpack-bin.sh  # BIN unpacked; NCCL (NVLS off), BLAS, DSV4_GOLDEN_DIR, DSV4_GIT_SHA
{
    date -u
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem,power.limit --format=csv
    nvidia-smi topo -m
    echo "git sha (build): $DSV4_GIT_SHA"
    echo "python nccl: ${PYNCCL:-none}; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    for b in dsv4_multi_gpu_tests dsv4-proxy-bench; do
        echo "ldd $b:"; ldd "$BIN/$b" | grep -E "nccl|openblas|cudart|not found"
    done
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
SUMMARY=()
STAGES=("$@")
[[ ${#STAGES[@]} -eq 0 ]] && STAGES=(tests proxy serve)
for stage in "${STAGES[@]}"; do
    T0=$(date +%s)
    echo "================ $stage"
    case "$stage" in
    tests)
        # EpOneGpu.*: two ranks on GPU 0 through a host all-reduce (EP MoE math, eager);
        # MultiGpu.*: NCCL over 2 GPUs with decode graphs (tiny_quant golden + fast-MoE mid model).
        timeout "${TESTS_S:-120}" "$BIN"/dsv4_multi_gpu_tests --gtest_output=json:"$OUT/multi_gpu_tests.json" \
            > "$OUT/multi_gpu_tests.log" 2>&1
        rc=$?
        grep -E "^\[ +(OK|FAILED|SKIPPED) |^\[ep |^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|actual|rank [0-9]:|NCCL" \
            "$OUT/multi_gpu_tests.log" | head -60
        [[ $rc -eq 124 ]] && { echo "TIMED OUT after ${TESTS_S:-120} s; last lines:"; tail -n 15 "$OUT/multi_gpu_tests.log"; }
        SUMMARY+=("tests: rc=$rc ($(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/multi_gpu_tests.log" | tr '\n' ' ')) (124 = timed out)")
        ;;
    proxy)
        # The full Flash depth (43 layers) does not fit one H200 (dsv4 plan --gpus 1) but fits two.
        timeout "${PROXY_S:-180}" "$BIN"/dsv4-proxy-bench proxy-bench --gpus "$GPUS" --layers "${PROXY_LAYERS:-43}" \
            --batches "${PROXY_BATCHES:-1,2,4,8,16,32,64,128,256}" --contexts "${PROXY_CONTEXTS:-8192}" \
            --time-budget "${PROXY_TIME_BUDGET:-110}" --no-gemm-peak --json "$OUT/proxy43x$GPUS.json" \
            > "$OUT/proxy43x$GPUS.txt" 2>&1
        rc=$?
        tail -n 40 "$OUT/proxy43x$GPUS.txt"
        [[ $rc -eq 124 ]] && echo "TIMED OUT after ${PROXY_S:-180} s (points finished so far are in the table above)"
        SUMMARY+=("proxy (${PROXY_LAYERS:-43} layers, $GPUS GPUs): rc=$rc, $(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ ' "$OUT/proxy43x$GPUS.txt") points measured")
        ;;
    serve)
        # dsv4 serve --backend cuda --gpus 2 on the synthetic 43-layer Flash with the real tokenizer:
        # /health, /v1/models, one chat completion, one streamed, four concurrent; text is meaningless.
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        # --port 0: the server prints the port it got ("listening on http://127.0.0.1:PORT").
        "$SD"/dsv4 serve --backend cuda --gpus "$GPUS" --synthetic-flash --layers "${SERVE_LAYERS:-43}" \
            --tokenizer "$SD"/tokenizer.json --port 0 --max-running 8 > "$OUT/serve.log" 2>&1 &
        SP=$!
        timeout "$(( ${SERVE_S:-100} + 10 ))" python3 scripts/http-smoke.py --log "$OUT/serve.log" --pid "$SP" \
            --wait "$(( ${SERVE_S:-100} - 40 ))" > "$OUT/serve_check.txt" 2>&1
        rc=$?
        kill "$SP" 2>/dev/null
        for i in $(seq 1 20); do kill -0 "$SP" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$SP" 2>/dev/null
        wait "$SP" 2>/dev/null
        cat "$OUT/serve_check.txt"
        echo "-- serve.log (head, tail)"; head -n 8 "$OUT/serve.log" | cut -c1-300; tail -n 6 "$OUT/serve.log" | cut -c1-300
        rm -rf "$SD"
        SUMMARY+=("serve (synthetic ${SERVE_LAYERS:-43}-layer Flash, $GPUS GPUs): check rc=$rc, $(grep -c ': OK' "$OUT/serve_check.txt") OK, $(grep -c 'FAILED' "$OUT/serve_check.txt") FAILED; $(grep -m1 -o 'server up: [A-Za-z]*' "$OUT/serve_check.txt")")
        ;;
    *) echo "unknown stage '$stage'" ;;
    esac
    SUMMARY+=("  ($stage: $(( $(date +%s) - T0 )) s)")
done
echo "================ summary"
head -n 4 "$OUT/env.txt"
printf '%s\n' "${SUMMARY[@]}"
