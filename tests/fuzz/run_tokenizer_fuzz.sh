#!/usr/bin/env bash
# Runs tokenizer_fuzz for a few seconds from a small seed corpus (ctest driver).
# Usage: run_tokenizer_fuzz.sh FUZZER REPO_ROOT SECONDS
set -euo pipefail
fuzzer=$1 repo=$2 seconds=$3
tok=${DSV4_TOKENIZER_JSON:-$repo/.cache/tokenizer/tokenizer.json}
if [ ! -f "$tok" ]; then
    echo "SKIP: no tokenizer.json at $tok (run scripts/get-tokenizer.sh)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
i=0
for s in "Hello, my dog is cute" "你好，世界！12345 ナルト" "<｜User｜>hi<｜Assistant｜><think>" \
         $'a\r\n\t  b' "👨‍👩‍👧‍👦 👍🏽 é" "1234567890" $'\xff\xfe\xc3'; do
    printf '%s' "$s" > "$work/corpus/seed$i"; i=$((i + 1))
done
DSV4_TOKENIZER_JSON=$tok "$fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$work/corpus"
