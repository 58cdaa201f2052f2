// Regenerates src/tokenizer/onig_unicode_delta.inc: for each general category the pre-tokenizer
// regexes use (L, M, N, P, S), the code points the reference's regex engine (Oniguruma inside
// tokenizers@0.23.2, a newer Unicode version) puts in the category but PCRE2 (Unicode of the
// Debian build) does not. Oniguruma is asked directly through a Split pre-tokenizer.
// Usage: node gen_unicode_delta.js TOKENIZER_JSON > onig_sets.json, then gen_unicode_delta.py.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tools', 'npm', 'node_modules', 'tokenizers'));

const base = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
base.added_tokens = [];
const out = {};
// "s" is \s, recorded so the ctest can check our spelled-out whitespace class too.
for (const cat of ['L', 'M', 'N', 'P', 'S', 's']) {
  const regex = cat === 's' ? '\\s' : `\\p{${cat}}`;
  base.pre_tokenizer = { type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false };
  const pre = Tokenizer.fromString(JSON.stringify(base)).getPreTokenizer();
  const members = [];
  // Chunks keep strings moderate; every code point except surrogates, each followed by U+0001
  // (a control character, in none of the categories) so a match is exactly one code point.
  for (let lo = 0; lo < 0x110000; lo += 0x10000) {
    let s = '';
    for (let cp = lo; cp < lo + 0x10000; ++cp) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      s += String.fromCodePoint(cp) + '\u0001';
    }
    for (const [piece] of pre.preTokenizeString(s)) {
      const cps = [...piece];
      if (cps.length === 1 && piece !== '\u0001') members.push(cps[0].codePointAt(0));
    }
  }
  out[cat] = members;
}
process.stdout.write(JSON.stringify(out));
