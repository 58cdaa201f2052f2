#!/usr/bin/env bash
# The README's test command: install dependencies, build, run every test (CUDA tests skip
# cleanly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
