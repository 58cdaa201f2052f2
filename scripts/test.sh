#!/usr/bin/env bash
# The README's test command: install dependencies, build, run every test (CUDA tests skip
# cleanly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
# Formatting first: it takes seconds and says which files to run scripts/check-format.sh --fix on.
./scripts/check-format.sh
# Every CUDA kernel waits for its predecessor first (graph_pdl may start it early).
python3 scripts/check-pdl.py
./scripts/build.sh

# clang's build-fuzz dir holds the libFuzzer targets and the host-side suites under sanitizers
# (tests/sanitize; DSV4_SANITIZE=0 skips them): the parser unit tests and the engine / sampler /
# prefix-cache / structured-output / request-validation / constrain suites and the HTTP server on a
# loopback socket, all on the fake runner, under ASan + UBSan; the Engine's loop thread, the HTTP
# server's io threads and the bench client against its in-test server under TSan.
# Measured on 2 cores with another build running (clean build-fuzz, ninja -j2): build 2m31s parser,
# +2m51s server, +3m03s thread (about 9 CPU-minutes for the two), plus about 1m30s and 2m15s for
# the HTTP layer; runs 2s, 12s, 17s (18s and 33s with both cores also busy). Left out: the CPU
# reference model (OpenBLAS) and tests/e2e built on it, the CUDA runners. Each fuzz target then runs briefly: new inputs go to
# build-fuzz/corpus, the committed seeds stay read-only. DSV4_FUZZ_SECONDS=0 skips fuzzing.
if command -v clang++ >/dev/null; then
    cmake -S . -B build-fuzz -G Ninja -DDSV4_FUZZ=ON -DDSV4_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
    if [ "${DSV4_SANITIZE:-1}" != 0 ]; then
        cmake --build build-fuzz --target parser_sanitize_tests server_sanitize_tests thread_sanitize_tests \
            -j "${JOBS:-$(nproc)}"
        build-fuzz/tests/sanitize/parser_sanitize_tests --gtest_brief=1
        build-fuzz/tests/sanitize/server_sanitize_tests --gtest_brief=1
        build-fuzz/tests/sanitize/thread_sanitize_tests --gtest_brief=1
    fi
fi
if [ "${DSV4_FUZZ_SECONDS:-30}" != 0 ] && command -v clang++ >/dev/null; then
    cmake --build build-fuzz --target safetensors_header_fuzz tokenizer_fuzz openai_request_fuzz output_parser_fuzz \
        config_fuzz safetensors_index_fuzz -j "${JOBS:-$(nproc)}"
    # Inputs that once crashed a target (tests/fuzz/known_crashes/NAME-*) run first, each once: a
    # fixed crash coming back fails here in seconds, whatever the fuzzing finds.
    replay_known_crashes() {
        local inputs=(tests/fuzz/known_crashes/"$1"-*)
        [ -e "${inputs[0]}" ] || return 0
        "build-fuzz/tests/fuzz/$1_fuzz" "${inputs[@]}"
    }
    replay_known_crashes safetensors_header
    mkdir -p build-fuzz/corpus/safetensors
    build-fuzz/tests/fuzz/safetensors_header_fuzz -max_total_time="${DSV4_FUZZ_SECONDS:-30}" -print_final_stats=1 \
        -dict=tests/fuzz/safetensors.dict build-fuzz/corpus/safetensors tests/fuzz/corpus/safetensors
    # OpenAI request bodies (chat and completions) and the chat renderer (issue 21 item 2).
    replay_known_crashes openai_request
    mkdir -p build-fuzz/corpus/openai_request
    build-fuzz/tests/fuzz/openai_request_fuzz -max_total_time="${DSV4_FUZZ_SECONDS:-30}" -print_final_stats=1 \
        build-fuzz/corpus/openai_request tests/fuzz/corpus/openai_request
    # The DSML / reasoning output parser, config.json and model.safetensors.index.json (issue 21 item 2).
    for t in output_parser config safetensors_index; do
        replay_known_crashes "$t"
        mkdir -p "build-fuzz/corpus/$t"
        dict=()
        [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
        "build-fuzz/tests/fuzz/${t}_fuzz" -max_total_time="${DSV4_FUZZ_SECONDS:-30}" -print_final_stats=1 \
            "${dict[@]}" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t"
    done
    # Tokenizer encoder (skips, exit 77, when .cache/tokenizer/tokenizer.json is missing).
    tests/fuzz/run_tokenizer_fuzz.sh build-fuzz/tests/fuzz/tokenizer_fuzz . "${DSV4_FUZZ_SECONDS:-30}" || [ $? -eq 77 ]
fi

# The test suite last, so its summary closes the output.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
