#!/usr/bin/env bash
# ctest driver for the exactness comparison: the reference (node + npm tokenizers) encodes the
# corpus, then dsv4_tokenizer_reference_check compares. Exit 77 (ctest "skipped") only when
# the reference package or the tokenizer file is not installed.
# Usage: run_reference_check.sh CHECK_BIN REPO_ROOT PROMPTS_DIR OUT_JSON
set -euo pipefail
check_bin=$1 repo=$2 prompts=$3 out=$4
tok=${DSV4_TOKENIZER_JSON:-$repo/.cache/tokenizer/tokenizer.json}
if [ ! -d "$repo/tools/npm/node_modules/tokenizers" ]; then
    echo "SKIP: reference tokenizer not installed (run scripts/install-deps.sh: npm install in tools/npm)"
    exit 77
fi
if [ ! -f "$tok" ]; then
    echo "SKIP: no tokenizer.json at $tok (run scripts/get-tokenizer.sh)"
    exit 77
fi
if [ ! -d "$prompts" ]; then
    echo "WARNING: prompt directory $prompts missing; comparing the generated corpus only"
fi
RAYON_NUM_THREADS=1 node "$repo/tests/tokenizer/reference_corpus.js" "$tok" "$prompts" "$out"
# Oniguruma's category sets for every code point, to check our PCRE2 classes against.
node "$repo/tests/tokenizer/gen_unicode_delta.js" "$tok" > "$out.onig_sets.json"
"$check_bin" "$tok" "$out" "$out.onig_sets.json"
# Added-token flags the official file does not use (lstrip/rstrip), on a modified copy.
node "$repo/tests/tokenizer/reference_variant.js" "$tok" "$out.variant_tokenizer.json" "$out.variant.json"
"$check_bin" "$out.variant_tokenizer.json" "$out.variant.json"
