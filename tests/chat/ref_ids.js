// Reference token ids for the chat goldens: reads one JSON string per line on stdin and prints
// its ids (no special tokens added) as a JSON array per line. Uses npm tokenizers@0.23.2 from
// tools/npm (run `npm ci` there first).
const path = require('path');
const fs = require('fs');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tools', 'npm', 'node_modules', 'tokenizers'));

(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const lines = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
  for (const line of lines) {
    const enc = await tok.encode(JSON.parse(line), null, { addSpecialTokens: false });
    console.log(JSON.stringify(Array.from(enc.getIds())));
  }
})();
