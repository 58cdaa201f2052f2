#!/usr/bin/env bash
# Everything the GPU machine is needed for, in as few device calls as possible: the `cuda` tests
# (CUDA runner and ops vs the CPU reference and the transformers goldens; kernel variants vs fp64),
# the Flash proxy decode benchmark through the CUDA runner (issue 7), and the transformers peer at
# the same depth with the ratio table. Results under $OUT; a short summary last.
#
# The GPU machine has no PCRE2 and no network, so binaries are built here and carried:
#   scripts/device-all.sh --build                    # here: build-cuda/ -> build-all-bin/
#   run(command="scripts/device-all.sh tests proxy", carry=["build-all-bin"], timeout_s=540)
#   run(command="scripts/device-all.sh peer", carry=["build-all-bin"], timeout_s=300)
# Stages: tests (dsv4_cuda_tests [TESTS_FILTER]: the op tests of every kernel variant and the runner tests), proxy (20-layer sweep, PROXY_TIME_BUDGET
# seconds, default 240), peer (3-layer proxy + transformers eager + tools/peer/ratio.py,
# PEER_TIME_BUDGET default 100), prefill (offline prefill points of the 20-layer proxy, PREFILL_*), sanitize (compute-sanitizer memcheck + racecheck on reduced shapes),
# sweep (served vs offline: scripts/gpu-serve-sweep.sh, SWEEP_PHASES), opprof (DSV4_OP_PROFILE per-op table, OPPROF_BATCHES), ncu (per-kernel table, NCU_BATCHES), serve (generate cuda vs cpu + HTTP serve --backend cuda), profile (nsys per-kernel table of the 3-layer proxy step, when nsys exists),
# prefill_ab (two builds alternated on prefill points, plus option runs; PREFILL_B_OPTS),
# constrain (issue 18: structured output and tool_choice through serve --backend cuda, scripts/gpu-constrain-check.py),
# ckpt (issue 14: write a CKPT_LAYERS-layer Flash checkpoint, cat it, serve --model it, chat + bench; scripts/gpu-ckpt-load.sh),
# overload / soak (issue 21: scripts/overload.sh, scripts/soak.sh against the synthetic Flash),
# fault (issue 21: a sticky CUDA error injected under `dsv4 serve --backend cuda`, scripts/gpu-fault-check.py),
# tune (issue 16: `dsv4 tune`, TUNE_ARGS, then proxy-bench with and without the file it wrote),
# tune_calibrate (issue 16 item 4: `dsv4 tune --calibrate`, TUNE_CAL_N),
# gemv_sweep (the dense GEMV's op tests and `dsv4 decode-bench`'s variant sweep; GEMV_SHAPES, GEMV_VARIANTS, GEMV_BATCHES).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build-all-bin}
if [[ "${1:-}" == "--build" ]]; then
    set -e
    cmake -S . -B build-cuda -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
    ninja -C build-cuda -j"${JOBS:-2}" dsv4_cuda_tests dsv4-proxy-bench dsv4 dsv4_multi_gpu_tests
    rm -rf "$BIN" && mkdir -p "$BIN"
    cp build-cuda/tests/kernels/cuda_runner/dsv4_cuda_tests \
        build-cuda/tools/dsv4/dsv4-proxy-bench build-cuda/tools/dsv4/dsv4 \
        build-cuda/tests/kernels/multi_gpu/dsv4_multi_gpu_tests "$BIN"/
    # The serve stage needs the tokenizer; the GPU machine has no network to fetch it.
    TOK=${DSV4_TOKENIZER:-.cache/tokenizer/tokenizer.json}
    [[ -f "$TOK" ]] && xz -9 -c "$TOK" > "$BIN"/tokenizer.json.xz
    strip "$BIN"/dsv4* || true
    # xz keeps the carried folder (plus the ~15 MB repository) under the 64 MiB carry limit; the
    # binaries are unpacked on the GPU machine before the first stage.
    xz -T2 -6 "$BIN"/dsv4 "$BIN"/dsv4-proxy-bench "$BIN"/dsv4_cuda_tests "$BIN"/dsv4_multi_gpu_tests
    tmp=$(mktemp -d) && mkdir -p "$tmp/lib"
    for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l && !f {print $NF; f = 1}')
        [[ -n "$p" ]] && cp -L "$p" "$tmp/lib/"
    done
    tar -C "$tmp" -cJf "$BIN/blaslibs.tar.xz" lib && rm -rf "$tmp"
    git rev-parse HEAD > "$BIN"/git_sha
    du -sh "$BIN"
    exit 0
fi
OUT=${OUT:-/tmp/device-all}
mkdir -p "$OUT"
source scripts/unpack-bin.sh  # BIN unpacked; NCCL, BLAS, DSV4_GOLDEN_DIR, DSV4_GIT_SHA
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv
    echo "git sha (build): $DSV4_GIT_SHA"
} > "$OUT/env.txt" 2>&1
SUMMARY=()
for stage in "$@"; do
    T0=$(date +%s)
    case "$stage" in
    tests)
        "$BIN"/dsv4_cuda_tests --gtest_filter="${TESTS_FILTER:-*}" --gtest_output=json:"$OUT/cuda_tests.json" \
            > "$OUT/cuda_tests.log" 2>&1
        rc1=$?
        SUMMARY+=("tests: dsv4_cuda_tests rc=$rc1 ($(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/cuda_tests.log" | tr '\n' ' '))")
        grep -E "^\[  FAILED|Failure|Expected|Which is|actual" "$OUT/cuda_tests.log" | head -40
        ;;
    proxy)
        "$BIN"/dsv4-proxy-bench proxy-bench --json "$OUT/proxy20.json" --time-budget "${PROXY_TIME_BUDGET:-240}" \
            ${PROXY_ARGS:-} > "$OUT/proxy20.txt" 2>&1
        SUMMARY+=("proxy (20 layers): rc=$?")
        tail -n 45 "$OUT/proxy20.txt"
        ;;
    peer)
        "$BIN"/dsv4-proxy-bench proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 \
            --batches "${PEER_BATCHES:-1,8,32,64}" --contexts 1024,8192 --json "$OUT/proxy3.json" \
            --time-budget 60 > "$OUT/proxy3.txt" 2>&1
        rc1=$?
        tail -n 20 "$OUT/proxy3.txt"
        PYTHONUNBUFFERED=1 timeout "$(( ${PEER_TIME_BUDGET:-100} + 60 ))" python3 tools/peer/transformers_decode.py \
            --layers 3 --layer-types sliding,csa,hca --hash-layers 1 \
            --points "${PEER_POINTS:-1x1024,8x1024,32x1024,64x1024,1x8192,8x8192}" --experts-impls grouped_mm \
            --time-budget-s "${PEER_TIME_BUDGET:-100}" --out "$OUT/peer_transformers.json" > "$OUT/peer.txt" 2>&1
        rc2=$?
        tail -n 15 "$OUT/peer.txt"
        python3 tools/peer/ratio.py --dsv4 "$OUT/proxy3.json" --peer "$OUT/peer_transformers.json" --md \
            > "$OUT/ratio.md" 2>&1
        cat "$OUT/ratio.md"
        SUMMARY+=("peer: proxy3 rc=$rc1, transformers rc=$rc2")
        ;;
    sanitize)
        # compute-sanitizer on reduced shapes: every op-level suite (old and fast kernels, row lists,
        # radix top-k, mHC workspace) plus one graph-replay runner test.
        if ! command -v compute-sanitizer > /dev/null; then
            SUMMARY+=("sanitize: compute-sanitizer not found")
        else
            F='CudaOps.*:CudaOpsPaged.*:CudaOpsEdge.*:CudaFastOps.*:RowLists.*:KvRows.*:CudaRunner.GraphReplayEqualsEager:CudaBatchedPrefill.*Small'
            timeout "${MEMCHECK_S:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN"/dsv4_cuda_tests \
                --gtest_filter="$F" > "$OUT/memcheck.log" 2>&1
            m=$?
            timeout "${RACECHECK_S:-180}" compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN"/dsv4_cuda_tests \
                --gtest_filter='CudaOps.Mhc*:CudaOps.Topk*:CudaOpsPaged.*:CudaOpsEdge.Indexer*:CudaOpsEdge.Topk*:RowLists.*' \
                > "$OUT/racecheck.log" 2>&1
            r=$?
            tail -n 3 "$OUT/memcheck.log" "$OUT/racecheck.log"
            SUMMARY+=("sanitize: memcheck rc=$m, racecheck rc=$r (124 = timed out)")
        fi
        ;;
    prefill)
        # Offline prefill on the 20-layer proxy (issue 22 item 3): tokens/s, TFLOP/s and % of the
        # cuBLAS bf16 GEMM peak measured in the same run, TTFT of the first prompt. PREFILL_A_OPTS
        # (e.g. "--option batched_prefill=0") adds a second run at PREFILL_A_LENS for comparison.
        "$BIN"/dsv4-proxy-bench proxy-bench --prefill-only --prefill-lens "${PREFILL_LENS:-128,1024,4096,16384}" \
            --prefill-users "${PREFILL_USERS:-1,16}" --prefill-reps "${PREFILL_REPS:-3}" ${PREFILL_ARGS:-} \
            --json "$OUT/prefill20.json" > "$OUT/prefill20.txt" 2>&1
        SUMMARY+=("prefill (20 layers): rc=$?")
        grep -A30 "^prefill:" "$OUT/prefill20.txt" | head -40
        if [[ -n "${PREFILL_A_OPTS:-}" ]]; then
            "$BIN"/dsv4-proxy-bench proxy-bench --prefill-only --prefill-lens "${PREFILL_A_LENS:-128,1024}" \
                --prefill-users 1 --prefill-reps "${PREFILL_REPS:-3}" --no-gemm-peak ${PREFILL_A_OPTS} \
                --json "$OUT/prefill20_a.json" > "$OUT/prefill20_a.txt" 2>&1
            SUMMARY+=("prefill A (${PREFILL_A_OPTS}): rc=$?")
            grep -A10 "^prefill:" "$OUT/prefill20_a.txt" | head -14
        fi
        ;;
    prefill_ab)
        # Prefill A/B of two builds (issue 22): $BIN/dsv4-proxy-bench-a.xz (A, e.g. the parent commit) and
        # the current dsv4-proxy-bench (B), alternated AB_ROUNDS times (default 2) over PREFILL_LENS
        # (one user), then PREFILL_B_OPTS runs (each a quoted set of --option flags, separated by ';') on B.
        xz -dc "$BIN"/dsv4-proxy-bench-a.xz > "$BIN"/dsv4-proxy-bench-a && chmod +x "$BIN"/dsv4-proxy-bench-a
        for ((i = 1; i <= ${AB_ROUNDS:-2}; ++i)); do
            for side in a b; do
                exe="$BIN"/dsv4-proxy-bench; [[ $side == a ]] && exe="$BIN"/dsv4-proxy-bench-a
                "$exe" proxy-bench --prefill-only --prefill-lens "${PREFILL_LENS:-1024,4096}" --prefill-users 1 \
                    --prefill-reps "${PREFILL_REPS:-3}" --no-gemm-peak --json "$OUT/pab_${side}$i.json" > "$OUT/pab_${side}$i.txt" 2>&1
                echo "== $side$i rc $?"; grep -A8 "^prefill:" "$OUT/pab_${side}$i.txt" | grep -E "^ +[0-9]+ +1 "
            done
        done
        IFS=';' read -ra BOPTS <<< "${PREFILL_B_OPTS:-}"
        for j in "${!BOPTS[@]}"; do
            "$BIN"/dsv4-proxy-bench proxy-bench --prefill-only --prefill-lens "${PREFILL_LENS:-1024,4096}" --prefill-users 1 \
                --prefill-reps "${PREFILL_REPS:-3}" --no-gemm-peak ${BOPTS[$j]} --json "$OUT/pab_opt$j.json" > "$OUT/pab_opt$j.txt" 2>&1
            echo "== B ${BOPTS[$j]} rc $?"; grep -A8 "^prefill:" "$OUT/pab_opt$j.txt" | grep -E "^ +[0-9]+ +1 "
        done
        SUMMARY+=("prefill_ab: rounds ${AB_ROUNDS:-2}, lens ${PREFILL_LENS:-1024,4096}")
        ;;
    overload|soak)
        # Issue 21 on the GPU: scripts/overload.sh (OVERLOAD_SECONDS, default 120, at 10x capacity) or
        # scripts/soak.sh (SOAK_MINUTES, default 8, at SOAK_CONC 256; SOAK_PREWARM=1: --prewarm) against the RELIABILITY_LAYERS-layer
        # (default 20) synthetic Flash; logs and verdict in $OUT/$stage.
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        GPU_SERVE=(--backend cuda --synthetic-flash --layers "${RELIABILITY_LAYERS:-20}" --tokenizer "$SD"/tokenizer.json)
        if [[ $stage == overload ]]; then
            scripts/overload.sh --seconds "${OVERLOAD_SECONDS:-120}" --max-running "${OVERLOAD_RUNNING:-64}" \
                --max-queued "${OVERLOAD_QUEUED:-128}" --bin "$SD" --out "$OUT/overload" -- "${GPU_SERVE[@]}"
        else
            scripts/soak.sh --minutes "${SOAK_MINUTES:-8}" --conc "${SOAK_CONC:-256}" ${SOAK_PREWARM:+--prewarm} \
                --bin "$SD" --out "$OUT/soak" \
                -- "${GPU_SERVE[@]}"
        fi
        SUMMARY+=("$stage: rc $? ($(head -1 "$OUT/$stage/verdict.txt" 2>/dev/null | cut -c1-200))")
        ;;
    fault)
        # Issue 21 item 5 through the real server: `dsv4 serve --backend cuda` with
        # --option fault_inject_step=FAULT_STEP (default 200) on the FAULT_LAYERS-layer (default 2)
        # synthetic Flash; a plain and a streaming request in flight (scripts/gpu-fault-check.py).
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        timeout 300 python3 scripts/gpu-fault-check.py "$SD"/dsv4 "$OUT/fault" --backend cuda --synthetic-flash \
            --layers "${FAULT_LAYERS:-2}" --tokenizer "$SD"/tokenizer.json --option fault_inject_step="${FAULT_STEP:-200}"
        SUMMARY+=("fault: rc $? ($(head -1 "$OUT/fault/verdict.txt" 2>/dev/null))")
        rm -rf "$SD"
        ;;
    serve)
        # dsv4 generate on cuda vs cpu (greedy text identical; exact f32 KV rows on cuda, since the default
        # fp8 rows follow the reference QAT numerics instead), then dsv4 serve --backend cuda over HTTP
        # (scripts/http-smoke.py). The built-in tiny model: the text is meaningless.
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        P="Write a haiku about the sea."
        DSV4_KV_ROWS=f32 "$SD"/dsv4 generate --backend cuda --tokenizer "$SD"/tokenizer.json --prompt "$P" --max-tokens 16 \
            > "$OUT/gen_cuda.txt" 2> "$OUT/gen_cuda.err"
        echo "generate cuda rc=$?"
        "$SD"/dsv4 generate --backend cpu --tokenizer "$SD"/tokenizer.json --prompt "$P" --max-tokens 16 \
            > "$OUT/gen_cpu.txt" 2> "$OUT/gen_cpu.err"
        echo "generate cpu rc=$?"
        cmp -s "$OUT/gen_cuda.txt" "$OUT/gen_cpu.txt" && echo "GREEDY TEXT IDENTICAL cuda == cpu" | tee "$OUT/serve_check.txt"
        "$SD"/dsv4 serve --backend cuda --tokenizer "$SD"/tokenizer.json --port 0 > "$OUT/serve.log" 2>&1 &
        SP=$!
        timeout 150 python3 scripts/http-smoke.py --log "$OUT/serve.log" --pid "$SP" --wait 120 >> "$OUT/serve_check.txt" 2>&1
        rc=$?
        kill "$SP" 2>/dev/null; wait "$SP" 2>/dev/null
        cut -c1-300 "$OUT/serve_check.txt"
        SUMMARY+=("serve: $(grep -c 'GREEDY TEXT IDENTICAL' "$OUT/serve_check.txt") identical-text line(s), http smoke rc=$rc ($(grep -c ': OK' "$OUT/serve_check.txt") OK)")
        rm -rf "$SD"
        ;;
    constrain)
        # Issue 18 on the GPU: structured output and enforced tool calls through serve --backend cuda on a
        # CONSTRAIN_LAYERS-layer synthetic Flash model (random weights: only the constraint makes the
        # answers well-formed), constrained and free requests concurrent (scripts/gpu-constrain-check.py).
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        "$SD"/dsv4 serve --backend cuda --synthetic-flash --layers "${CONSTRAIN_LAYERS:-2}" --tokenizer "$SD"/tokenizer.json \
            --port 0 --max-context 4096 > "$OUT/constrain_serve.log" 2>&1 &
        SP=$!
        URL=""
        for i in $(seq 1 180); do
            URL=$(grep -oE "listening on http://[0-9.]+:[0-9]+" "$OUT/constrain_serve.log" | head -1 | sed 's/listening on //')
            [[ -n "$URL" ]] && break
            kill -0 $SP 2>/dev/null || break
            sleep 1
        done
        rc=1
        if [[ -n "$URL" ]]; then
            timeout 420 python3 scripts/gpu-constrain-check.py "$URL" > "$OUT/constrain.log" 2>&1
            rc=$?
        fi
        kill $SP 2>/dev/null; wait $SP 2>/dev/null
        grep -E "^FAIL|^CONSTRAIN" "$OUT/constrain.log" | head -20
        SUMMARY+=("constrain: rc=$rc $(grep -E '^CONSTRAIN' "$OUT/constrain.log" 2>/dev/null)")
        rm -rf "$SD"
        ;;
    sweep)
        # Served vs offline on the 20-layer proxy (issue 23 item 4): scripts/gpu-serve-sweep.sh with
        # SWEEP_PHASES (default "offline decode prefill"); its other knobs pass through the environment.
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        # Only the offline phase runs dsv4-proxy-bench: a carried folder may leave it out.
        [[ -f "$BIN"/dsv4-proxy-bench ]] && cp "$BIN"/dsv4-proxy-bench "$SD"/
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        mkdir -p "$OUT/sweep"
        BIN="$SD" OUT="$OUT/sweep" PHASES="${SWEEP_PHASES:-offline decode prefill}" bash scripts/gpu-serve-sweep.sh \
            > "$OUT/sweep/sweep.log" 2>&1
        SUMMARY+=("sweep: rc=$?")
        grep -vE "^ +[0-9]+ +1024 " "$OUT/sweep/sweep.log" | tail -n 40
        ;;
    ckpt)
        # Issue 14: write a CKPT_LAYERS-layer (default 8, ~34 GB) synthetic Flash checkpoint to local disk,
        # cat it twice, serve it with --backend cuda --model DIR (load GB/s, peak RssAnon, pinned H2D
        # GB/s), one chat request, a short bench, delete it (scripts/gpu-ckpt-load.sh; ~2-4 min for 8
        # layers). Logs packed into $OUT/ckpt.tar.xz; the summary in $OUT/ckpt.log.
        SD=$(mktemp -d)
        xz -dc "$BIN"/dsv4.xz > "$SD"/dsv4 && chmod +x "$SD"/dsv4
        xz -dc "$BIN"/tokenizer.json.xz > "$SD"/tokenizer.json
        BIN="$SD" OUT="$OUT/ckpt" bash scripts/gpu-ckpt-load.sh > "$OUT/ckpt.log" 2>&1
        rc=$?
        grep -E "^\[phase\]|^ckpt|^only|shard .*GB/s" "$OUT/ckpt.log" | cut -c1-400
        SUMMARY+=("ckpt: rc=$rc; $(grep -E '^ckpt: load rate' "$OUT/ckpt.log")")
        rm -rf "$SD"
        ;;
    tune)
        # issue 16: `dsv4 tune` on the 20-layer proxy (TUNE_ARGS, default: the seed's decode-attention
        # experiment), tuning file, ledger JSONL and Markdown under $OUT/tune; then the tuning file
        # served: proxy-bench with --tuning FILE beside --tuning none at the tuned batches.
        mkdir -p "$OUT/tune"
        TD=$(mktemp -d) && xz -dc "$BIN"/dsv4.xz > "$TD"/dsv4 && chmod +x "$TD"/dsv4
        "$TD"/dsv4 tune ${TUNE_ARGS:---op sparse_decode --variants default-tile --split-kv-targets 0,128,256,512 --batches 1,8,64,256 --contexts 8192 --time-budget 360} \
            --out "$OUT/tune/tuning.json" --ledger "$OUT/tune/ledger.jsonl" --ledger-md "$OUT/tune/ledger.md" \
            > "$OUT/tune/tune.txt" 2>&1
        rc=$?
        SUMMARY+=("tune: rc=$rc ($(grep -c '"kept":true' "$OUT/tune/ledger.jsonl" 2>/dev/null) kept)")
        tail -n 40 "$OUT/tune/tune.txt"
        if [[ $rc == 0 && "${TUNE_CHECK:-1}" != 0 ]]; then
            for t in none "$OUT/tune/tuning.json"; do
                "$BIN"/dsv4-proxy-bench proxy-bench --no-gemm-peak --tuning "$t" --batches "${TUNE_CHECK_BATCHES:-1,8,64,256}" \
                    --contexts 8192 --reps 20 --json "$OUT/tune/check_$(basename "$t" .json).json" \
                    > "$OUT/tune/check_$(basename "$t" .json).txt" 2>&1
                echo "== proxy-bench --tuning $t: rc $?"
                grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ " "$OUT/tune/check_$(basename "$t" .json).txt" | awk '{print "   batch", $1, "ctx", $2, "step_ms", $3}'
            done
            # The serving path finds the file by itself: DSV4_TUNING_DIR holds it, `dsv4 serve` (a 2-layer
            # synthetic Flash: the same model shape key) logs which file it chose, then answers a chat.
            TDIR=$(mktemp -d) && cp "$OUT/tune/tuning.json" "$TDIR"/ && xz -dc "$BIN"/tokenizer.json.xz > "$TD"/tokenizer.json
            DSV4_TUNING_DIR="$TDIR" "$TD"/dsv4 serve --backend cuda --synthetic-flash --layers 2 --tokenizer "$TD"/tokenizer.json \
                --port 8150 > "$OUT/tune/serve.log" 2>&1 &
            SP=$!
            for i in $(seq 1 120); do
                python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:8150/health", timeout=2)' 2>/dev/null && break
                sleep 1
            done
            python3 -c 'import json, urllib.request as u; b = json.dumps({"model": "deepseek-v4", "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}]}).encode()
print(u.urlopen(u.Request("http://127.0.0.1:8150/v1/chat/completions", data=b,
    headers={"Content-Type": "application/json"}), timeout=60).read().decode())' > "$OUT/tune/serve_chat.json" 2>&1
            kill $SP 2>/dev/null; wait $SP 2>/dev/null
            echo "== serve with DSV4_TUNING_DIR:"; grep -iE "tuning" "$OUT/tune/serve.log" | head -8; head -c 300 "$OUT/tune/serve_chat.json"; echo
        fi
        ;;
    tune_calibrate)
        # issue 16 item 4: the tuner's statistics on this GPU: TUNE_CAL_N A/A comparisons and TUNE_CAL_N
        # against a step slowed by 12%, batch 8 / 8K on the 20-layer proxy (one call of ~6 minutes at 100).
        mkdir -p "$OUT/tune"
        TD=$(mktemp -d) && xz -dc "$BIN"/dsv4.xz > "$TD"/dsv4 && chmod +x "$TD"/dsv4
        timeout "${TUNE_CAL_TIMEOUT:-570}" "$TD"/dsv4 tune --calibrate "${TUNE_CAL_N:-100}" --slowdown 0.12 --batches 8 --contexts 8192 \
            --pairs "${TUNE_CAL_PAIRS:-8}" --reps "${TUNE_CAL_REPS:-5}" \
            --ledger "$OUT/tune/calibration.jsonl" --ledger-md "$OUT/tune/calibration.md" > "$OUT/tune/calibrate.txt" 2>&1
        SUMMARY+=("tune_calibrate: rc=$?")
        tail -n 12 "$OUT/tune/calibrate.txt"
        ;;
    gemv_sweep)
        # The dense GEMV's variants: their op tests (every variant against fp64, bit-identical relaunch),
        # then `dsv4 decode-bench`'s sweep of GEMV_SHAPES (decode matrices) x GEMV_VARIANTS x GEMV_BATCHES
        # against the copy bandwidth, f32 x as the runner gives it.
        "$BIN"/dsv4_cuda_tests --gtest_filter='*OpDenseGemv*:CudaFastOps.Linear*' > "$OUT/gemv_tests.log" 2>&1
        rc1=$?
        grep -E "^\[  (PASSED|FAILED)|Failure|Which is|not deterministic" "$OUT/gemv_tests.log" | head -20
        timeout "${GEMV_SWEEP_S:-200}" "$BIN"/dsv4 decode-bench --sections gemv_sweep \
            --gemv-sweep-shapes "${GEMV_SHAPES:-wo_b,wo_a,shared_w1,shared_w2,wq_a,wq_b,lm_head,wkv,idx_wq_b,router,csa_compressor}" \
            ${GEMV_VARIANTS:+--gemv-sweep-variants "$GEMV_VARIANTS"} --batches "${GEMV_BATCHES:-1,8,16,32,64,128,256}" \
            --reps 20 --rounds 2 --out "$OUT/gemv_sweep.json" > "$OUT/gemv_sweep.txt" 2>&1
        SUMMARY+=("gemv_sweep: tests rc=$rc1, sweep rc=$?")
        grep -E "copy|sweep|rror" "$OUT/gemv_sweep.txt" | grep -v "^  " | head -60
        ;;
    opprof)
        # Where the decode step goes, per op class (DSV4_OP_PROFILE=1: a second, event-marked capture).
        DSV4_OP_PROFILE=1 "$BIN"/dsv4-proxy-bench proxy-bench --batches "${OPPROF_BATCHES:-1,64}" \
            --contexts "${OPPROF_CONTEXTS:-8192}" --reps 5 --no-gemm-peak ${PROXY_ARGS:-} > "$OUT/opprof.txt" 2>&1
        SUMMARY+=("opprof: rc=$?")
        tail -n 70 "$OUT/opprof.txt"
        ;;
    ab)
        # A/B of two environments on the 20-layer proxy, alternating A B A B (AB_ROUNDS rounds):
        # AB_A / AB_B are space-separated VAR=value lists, AB_ARGS the proxy-bench points.
        for ((i = 1; i <= ${AB_ROUNDS:-2}; ++i)); do
            for side in A B; do
                envs=$([[ $side == A ]] && echo "${AB_A:-}" || echo "${AB_B:-}")
                env $envs "$BIN"/dsv4-proxy-bench proxy-bench --no-gemm-peak ${AB_ARGS:---batches 1,64 --contexts 8192 --reps 10} \
                    --json "$OUT/ab_${side}$i.json" > "$OUT/ab_${side}$i.txt" 2>&1
                echo "== $side$i ($envs): rc $?"
                grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ " "$OUT/ab_${side}$i.txt" | awk '{print "   batch", $1, "ctx", $2, "step_ms", $3, "p10", $4, "p90", $5}'
            done
        done
        SUMMARY+=("ab: A='${AB_A:-}' B='${AB_B:-}'")
        ;;
    ncu)
        # Per-kernel durations of the 3-layer proxy step (every graph node of one replay, plus the set-up
        # kernels, which the table names separately) with Nsight Compute; NCU_BATCHES, default "1 64".
        NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        if [[ -z "$NCU" ]]; then
            SUMMARY+=("ncu: not found")
        else
            for B in ${NCU_BATCHES:-1 64}; do
                DSV4_CUDA_GRAPHS=${NCU_GRAPHS:-1} timeout "${NCU_S:-150}" "$NCU" --graph-profiling node --metrics gpu__time_duration.sum --csv \
                    "$BIN"/dsv4-proxy-bench proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 \
                    --batches "$B" --contexts 8192 --reps 1 --warmup 0 --no-gemm-peak > "$OUT/ncu_b$B.csv" 2>&1
                echo "== ncu kernels, 3-layer proxy, batch $B, 8K (rc $?)"
                python3 tools/prof/ncu_summary.py "$OUT/ncu_b$B.csv" --top 45 | tee "$OUT/ncu_b$B.txt"
                xz -f "$OUT/ncu_b$B.csv"
            done
            SUMMARY+=("ncu: $NCU")
        fi
        ;;
    profile)
        # Per-kernel times of one decode step (3-layer proxy, batch 1 and 64 at 8K) with Nsight Systems.
        NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
        if [[ -z "$NSYS" ]]; then
            SUMMARY+=("profile: nsys not found")
        else
            for B in ${PROFILE_BATCHES:-1 64}; do
                "$NSYS" profile --cuda-graph-trace=node -o "$OUT/prof_b$B" --force-overwrite true \
                    "$BIN"/dsv4-proxy-bench proxy-bench --layers 3 --layer-types sliding,csa,hca --hash-layers 1 \
                    --batches "$B" --contexts 8192 --reps 5 --warmup 1 --no-gemm-peak > "$OUT/prof_b$B.log" 2>&1
                "$NSYS" stats --report cuda_gpu_kern_sum --format csv "$OUT/prof_b$B.nsys-rep" \
                    > "$OUT/kern_sum_b$B.csv" 2>/dev/null
                rm -f "$OUT/prof_b$B.nsys-rep" "$OUT/prof_b$B.sqlite"
                echo "== kernels, batch $B (top 25 by total time)"
                head -n 26 "$OUT/kern_sum_b$B.csv" | cut -c1-220
            done
            SUMMARY+=("profile: $NSYS")
        fi
        ;;
    *) echo "unknown stage '$stage'"; exit 2 ;;
    esac
    SUMMARY+=("  ($stage: $(( $(date +%s) - T0 )) s)")
done
echo "================ summary"
cat "$OUT/env.txt"
printf '%s\n' "${SUMMARY[@]}"
