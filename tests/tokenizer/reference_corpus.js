// Builds the tokenizer comparison corpus (every prompt in the shared prompt files plus a
// generated adversarial corpus) and runs it through the reference tokenizer (npm
// tokenizers@0.23.2). Writes JSON: [{name, text | bytes_b64, ids, decoded, decoded_skip}].
// Usage: node reference_corpus.js TOKENIZER_JSON PROMPTS_DIR OUT_JSON [--bench]
// With --bench: prints the reference's encode throughput and writes the texts to OUT_JSON as JSONL.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

const [tokPath, promptsDir, outPath] = process.argv.slice(2);
const bench = process.argv.includes('--bench');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tools', 'npm', 'node_modules', 'tokenizers'));

function promptCorpus(dir) {
  const items = [];
  const share = path.join(dir, 'sharegpt_v3_filtered_500.json');
  if (fs.existsSync(share)) {
    JSON.parse(fs.readFileSync(share, 'utf8')).forEach((conv, i) => {
      (conv.conversations || []).forEach((turn, j) => {
        if (typeof turn.value === 'string') items.push({ name: `sharegpt/${i}/${j}`, text: turn.value });
      });
    });
  }
  const mt = path.join(dir, 'mt_bench_question.jsonl');
  if (fs.existsSync(mt)) {
    fs.readFileSync(mt, 'utf8').split('\n').filter(Boolean).forEach((line, i) => {
      const q = JSON.parse(line);
      (q.turns || []).forEach((t, j) => items.push({ name: `mt_bench/${i}/${j}`, text: t }));
      (q.reference || []).forEach((t, j) => items.push({ name: `mt_bench/${i}/ref${j}`, text: t }));
    });
  }
  const he = path.join(dir, 'HumanEval.jsonl.gz');
  if (fs.existsSync(he)) {
    zlib.gunzipSync(fs.readFileSync(he)).toString('utf8').split('\n').filter(Boolean).forEach((line, i) => {
      const p = JSON.parse(line);
      for (const k of ['prompt', 'canonical_solution', 'test']) {
        if (typeof p[k] === 'string') items.push({ name: `humaneval/${i}/${k}`, text: p[k] });
      }
    });
  }
  return items;
}

// Deterministic PRNG so the corpus is the same on every machine.
function rng(seed) {
  let s = seed >>> 0;
  return () => { s = (s * 1664525 + 1013904223) >>> 0; return s / 4294967296; };
}

function adversarialCorpus() {
  const t = [];
  const add = (name, text) => t.push({ name: `adv/${name}`, text });
  add('empty', '');
  // B17 and B18 strings (regression-cases.md).
  ['rfid501.go', '7', '12', '123', '1234', '1234567', '0.0001', '2026-08-26', 'v4.0.31', '١٢٣', '３４５', 'x=10000;']
    .forEach((s, i) => add(`b17/${i}`, s));
  ['hello world', '  two leading spaces', 'tab\there', 'line1\nline2', '中文 与 English', '<｜User｜>hi<｜Assistant｜>']
    .forEach((s, i) => add(`b18/${i}`, s));
  for (let n = 1; n <= 10; ++n) {
    const d = '1234567890'.slice(0, n);
    add(`digits/${n}`, d);
    add(`digits_ctx/${n}`, `a${d}b ${d}. x${d}y`);
    add(`digits_sp/${n}`, ` ${d} `);
  }
  add('numbers_misc', '²³¹ ⅫⅣ ½¾ ١٢٣٤٥ ۱۲۳ ०१२३ ３４５６ 𝟙𝟚𝟛 ①②③ 0x1F 3.14159 1e-10 -42 +7 1,000,000');
  add('cjk_kana', '東京タワーはTokyo Towerです。ひらがなカタカナ漢字mix123テスト、ｶﾀｶﾅ半角。中文English混合；日本語の文章。');
  add('cjk_edges', '一龥龦 ぀ゟ゠ヿㇰ 々〆 㐀 𠀀 가나다 한국어텍스트abc');
  add('emoji', '👨‍👩‍👧‍👦 family 👍🏽 👩🏾‍💻 🏳️‍🌈 ❤️ 🇯🇵🇺🇸 ok 👋🏽 家族 🇯🇵 é 😀😃😄 #️⃣ 1️⃣');
  add('combining', 'e\u0301 a\u0308\u0304 n\u0303o Z͑ͫ̓ͪ̂ͫ̽͏̴̙̤̞͉͚̯̞̠͍A̴̵̜̰͔ͫ͗͢L̠ͨͧͩ͘G̴̻͈͍͔̹̑͗̎̅͛́ ̀ \u0301start क्षि தமிழ் ﷺ');
  add('spaces', ' ');
  for (const n of [1, 2, 3, 4, 7, 16, 33]) {
    add(`spaces/${n}`, ' '.repeat(n));
    add(`spaces_mid/${n}`, `a${' '.repeat(n)}b`);
    add(`spaces_end/${n}`, `word${' '.repeat(n)}`);
    add(`spaces_nl/${n}`, `x${' '.repeat(n)}\n${' '.repeat(n)}y`);
  }
  add('tabs', '\tindent\n\t\tdouble\t \tmixed \t\n\t');
  add('crlf', 'a\r\nb\r\n\r\nc\rd\n\re  \r\n  f\r\n');
  add('newlines', '\n\n\n x \n\n  \n');
  add('unicode_spaces', 'a\u00a0b\u3000c\u2003d\u2028e\u2029f\u0085g\u000bh\u000ci\u200bj\ufeffk\u180el\u1680m\u202fn\u205fo');
  add('controls', '\u0000\u0001\u001c\u001d\u001e\u001f\u007f\u0080\u009f end');
  add('punct', '!!! ??? ... --- ((( ))) "quoted" \'single\' `code` ~~~ @user #tag $5 %d ^_^ &amp; *bold* [link](url) {json} |pipe| \\back /path/to/file.txt <html> a+b=c');
  add('punct_letters', '.Hello ,world !Yes ?No -flag --long-flag =value :key ;semi @mention #hashtag');
  add('code', 'def f(x):\n    return x**2  # square\n\nfor i in range(10):\n\tprint(f"{i}: {f(i)}")\n');
  add('code_c', 'int main(int argc, char** argv) {\n  std::vector<int> v{1,2,3};\n  return v.size() > 0 ? 0 : -1;\n}\n');
  add('special_all', '<｜begin▁of▁sentence｜>hello<｜User｜>hi<｜Assistant｜><think>x</think>done<｜end▁of▁sentence｜>');
  add('special_partial', '<｜User <｜User｜｜> ｜User｜ <｜Assistant <think </think <｜end▁of▁sentence');
  add('special_dsml', '<｜DSML｜invoke name="x"> ｜DSML｜｜DSML｜ <dsml:tool> </dsml:tool> <|EOT|> <｜tool▁calls▁begin｜>');
  add('special_overlap', '<｜/table>｜ <｜/table>｜> <｜table｜><｜tr｜><｜td｜>x<｜/td｜><｜/tr｜> <<｜User｜>> <｜<｜User｜>｜>');
  add('special_adjacent', '<think></think><think></think>  <｜User｜>  <｜User｜>\n<｜Assistant｜>\n');
  add('special_placeholder', '<｜place▁holder▁no▁0｜><｜place▁holder▁no▁799｜><｜image｜><｜ref｜>x<｜/ref｜>');
  add('long_a', 'a'.repeat(10000));
  add('long_ab', 'ab'.repeat(5000));
  add('long_space', ' '.repeat(5000) + 'x');
  add('long_digits', '9'.repeat(3001));
  add('long_emoji', '🙂'.repeat(1000));
  add('long_cjk', '漢字'.repeat(2000));
  add('long_crlf', '\r\n'.repeat(3000));
  add('long_newlines', '\n'.repeat(3000) + ' \n'.repeat(2000));
  add('long_punct', '!'.repeat(5000) + '.,;'.repeat(1000));
  add('long_words', 'ab '.repeat(3000) + 'é'.repeat(3000));
  const r = rng(17);
  let word = '';
  for (let i = 0; i < 20000; ++i) word += String.fromCharCode(97 + Math.floor(r() * 26));
  add('long_random_word', word);
  add('url', 'https://example.com/path?q=1&r=two#frag mailto:someone@example.org');
  add('unicode_15_16', ' \u{1FAE8}! x\u{1FAE9} \u{1F6DC}\u{1F6DC} 𱍐𱍑 \u{2EBF0}a \u{11F04}\u{11F00}\u{11F34} ' +
    '\u{10D40}\u{10D41}\u{10D42}\u{10D43} \u2FFC\u2FFD \u0CF3 \u{11F43}. \u{323B0}');
  add('mixed_scripts', 'Привет мир Γειά σου κόσμε שלום עולם مرحبا بالعالم नमस्ते ไทย Việt Nam');
  add('apostrophes', "don't I'm we'll they've she'd it's DON'T O'Brien rock'n'roll");
  // Random strings from a pool that mixes every character class the regexes distinguish.
  const pool = ['a', 'Z', 'é', 'ß', 'ж', 'ع', '中', '字', 'カ', 'ひ', 'ｶ', '한', ' ', ' ', '  ', '\t', '\n', '\r', '\r\n',
    '\u00a0', '\u3000', '\u0085', '0', '7', '٣', '³', '.', ',', '!', '?', '-', '_', '"', "'", '(', ')', '<', '>', '$', '+',
    '€', '©', '…', '「', '」', '，', '。', '\u0301', '\u0308', '👍', '🏽', '\u200d', '👩', '\ufe0f', '🇯', '🇵', '<｜User｜>',
    '<think>', '｜DSML｜', '｜', '▁', 'Ġ', '\u200b', '\u180e', 'ab', 'Hello', 'ing', '123', '\u001f',
    '\u2028', '\u00ad', '\u061c', '\ufe0f', '\ue000', '𝔸', '𠀀', '々', '〇', '㊀', '™', '‿', 'ـ', 'ᄀ', 'ㄱ', '\u0085',
    '\u000b', '\u000c', '\u2009', '\u202f', '\u0300', '\u20dd', 'Ⅻ', '¼', '𝟘', 'ǅ', 'ʰ', '\u1dc0', '\ufffd', '\uffff',
    // Assigned after Unicode 14 (PCRE2 10.42's tables): emoji, CJK Ext. H/I, Kawi, Garay digits.
    '\u{1FAE8}', '\u{1FAE9}', '\u{1F6DC}', '\u{31350}', '\u{2EBF0}', '\u{11F04}', '\u{11F00}', '\u{10D40}', '\u2FFC',
    '\u{1E4F0}', '\u0CF3', '\u{11F43}', '\u{323B0}'];
  for (let i = 0; i < 3000; ++i) {
    const n = 1 + Math.floor(r() * 24);
    let s = '';
    for (let k = 0; k < n; ++k) s += pool[Math.floor(r() * pool.length)];
    add(`random/${i}`, s);
  }
  return t;
}

// Byte strings that are not valid UTF-8; the reference sees them as Node decodes them
// (each maximal ill-formed subpart -> U+FFFD), which is our documented behaviour.
function invalidUtf8Corpus() {
  const cases = [
    [0x61, 0xff, 0x62], [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xed, 0xa0, 0x80, 0x61], [0xc0, 0xaf],
    [0xe0, 0x80, 0xaf], [0xf4, 0x90, 0x80, 0x80], [0x80, 0x80, 0x20, 0xbf], [0xf0, 0x9f, 0x98, 0x41, 0x42],
    [0x3c, 0xef, 0xbd, 0x9c, 0x55, 0x73, 0x65, 0x72, 0xef, 0xbd, 0x9c, 0xfe, 0x3e], [0x31, 0x32, 0xf8, 0x33, 0x34],
  ];
  return cases.map((b, i) => ({ name: `invalid_utf8/${i}`, bytes: Buffer.from(b) }));
}

async function main() {
  const tok = Tokenizer.fromFile(tokPath);
  const items = [...promptCorpus(promptsDir), ...adversarialCorpus()];
  if (bench) {
    // Single-threaded throughput of the reference on the prompt corpus: sequential calls
    // (run with RAYON_NUM_THREADS=1; one encode call at a time, best of 5 warm passes).
    const texts = promptCorpus(promptsDir).map((x) => x.text);
    const bytes = texts.reduce((a, s) => a + Buffer.byteLength(s), 0);
    for (const s of texts) await tok.encode(s, null, { addSpecialTokens: false });  // warm-up
    // cpu_seconds counts every thread of the process (the binding runs encode on libuv's pool),
    // which is steadier than wall time on a loaded machine.
    let best = Infinity, bestCpu = Infinity, tokens = 0;
    for (let rep = 0; rep < 5; ++rep) {
      const t0 = process.hrtime.bigint();
      const c0 = process.cpuUsage();
      tokens = 0;
      for (const s of texts) tokens += (await tok.encode(s, null, { addSpecialTokens: false })).getIds().length;
      const c = process.cpuUsage(c0);
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
      bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
    }
    console.log(JSON.stringify({ texts: texts.length, bytes, tokens, seconds: +best.toFixed(6),
      cpu_seconds: +bestCpu.toFixed(6), mb_per_s: +(bytes / best / 1e6).toFixed(3),
      tokens_per_s: Math.round(tokens / best) }));
    // The same texts as JSONL, for `dsv4 tokenize --bench --file`.
    fs.writeFileSync(outPath, texts.map((text) => JSON.stringify({ text })).join('\n') + '\n');
    return;
  }
  const out = [];
  for (const it of [...items, ...invalidUtf8Corpus()]) {
    const text = it.bytes ? it.bytes.toString('utf8') : it.text;
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const rec = { name: it.name, ids, decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) };
    if (it.bytes) rec.bytes_b64 = it.bytes.toString('base64'); else rec.text = it.text;
    out.push(rec);
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`reference_corpus: ${out.length} texts, ${out.reduce((a, r) => a + r.ids.length, 0)} tokens -> ${outPath}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
