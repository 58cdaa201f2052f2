#!/usr/bin/env bash
# Single-threaded encode throughput, ours vs the reference (npm tokenizers@0.23.2), on the same
# texts: every prompt in ../shared/data/prompts. Prints one JSON line per implementation and round.
# Usage: tools/bench-tokenizer.sh [BUILD_DIR] [PROMPTS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prompts=${2:-../shared/data/prompts}
tok=${DSV4_TOKENIZER_JSON:-.cache/tokenizer/tokenizer.json}
corpus=$(mktemp --suffix=.jsonl)
trap 'rm -f "$corpus"' EXIT
# Rounds alternate between the two so that load changes on a shared machine hit both alike;
# compare the best round of each.
for round in $(seq "${ROUNDS:-3}"); do
    echo -n "round $round reference (tokenizers@0.23.2, node, sequential encode calls): "
    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
        node tests/tokenizer/reference_corpus.js "$tok" "$prompts" "$corpus" --bench
    echo -n "round $round dsv4 (dsv4 tokenize --bench, one thread):                     "
    "$build/tools/dsv4/dsv4" tokenize --tokenizer "$tok" --bench --file "$corpus"
done
