#!/usr/bin/env bash
# The README's first command: install dependencies, build, and generate from the built-in tiny
# model on the CPU with a real prompt (chat-formatted). Extra arguments go to `dsv4 generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
if [ $# -eq 0 ]; then
    set -- --prompt "Explain in one paragraph what a mixture-of-experts language model is." --max-tokens 32
fi
./build/tools/dsv4/dsv4 generate "$@"
