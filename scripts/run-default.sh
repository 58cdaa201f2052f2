#!/usr/bin/env bash
# The README's first command: install dependencies, build, and generate from the built-in tiny
# model on the CPU with a real prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
./build/tools/dsv4/dsv4 generate "$@"
