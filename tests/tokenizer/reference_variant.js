// A variant of the official tokenizer.json that exercises added-token flags the official file
// does not use (lstrip, rstrip), plus the texts and reference ids to check them with.
// Usage: node reference_variant.js TOKENIZER_JSON OUT_TOKENIZER_JSON OUT_REFERENCE_JSON
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tools', 'npm', 'node_modules', 'tokenizers'));

const [tokPath, outTok, outRef] = process.argv.slice(2);
const j = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
const flags = { '<think>': { lstrip: true, rstrip: true }, '<｜User｜>': { lstrip: true },
  '<｜end▁of▁sentence｜>': { rstrip: true }, '</think>': { rstrip: true } };
for (const a of j.added_tokens) Object.assign(a, flags[a.content] || {});
fs.writeFileSync(outTok, JSON.stringify(j));

const texts = ['a  <think>  b', 'x\n\n<think>\n\ny', '  <｜User｜>  hi', '<｜end▁of▁sentence｜>   \n q', ' <think><think> ',
  '\u3000<｜User｜>\u00a0', 'a<think>b', '</think>\u2028\u0085 tail', 'no tokens here', '<think>', '   ', '\t<｜User｜>\t</think>\t'];
(async () => {
  const tok = Tokenizer.fromFile(outTok);
  const out = [];
  for (const [i, text] of texts.entries()) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    out.push({ name: `strip_variant/${i}`, text, ids, decoded: await tok.decode(ids, false),
      decoded_skip: await tok.decode(ids, true), lossy: true });
  }
  fs.writeFileSync(outRef, JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
