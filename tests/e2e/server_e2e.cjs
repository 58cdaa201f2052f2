// End-to-end tests of `dsv4 serve` on loopback, driven by the official `openai` npm client
// and by raw HTTP (node:http). Most servers run the deterministic `fake` model whose outputs
// are scripted per prompt (SCRIPTED fixture), so streaming, stop strings, reasoning and tool
// calls can be checked exactly; one test talks to the default built-in tiny model.
// Regression cases: B11, B20-B23, B27-B29, B31 (docs/regression-cases.md).
// Env: DSV4_BIN (dsv4 executable), DSV4_TOKENIZER (tokenizer.json); NODE_PATH finds the
// pinned npm packages (tools/npm/node_modules).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const OpenAI = require('openai');
const { Tokenizer } = require('tokenizers');
const { startServer, raw, postJson, sseEvents, metrics, waitFor } = require('./serve_util.cjs');

const TOK = process.env.DSV4_TOKENIZER;
const MODEL = 'deepseek-v4';

const tokenizer = Tokenizer.fromFile(TOK);
async function ids(text) {
  return (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
}

const SCRIPTS = {
  SCRIPT_EMOJI: 'ok 👋🏽 家族 🇯🇵 é',
  SCRIPT_STOP: 'red orange yellow green',
  SCRIPT_PLEAS: 'Type: pleas',
  SCRIPT_THINK: 'plan A</think>Answer: 42',
  SCRIPT_TOOL:
    'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n' +
    '<｜DSML｜parameter name="city" string="true">Zürich</｜DSML｜parameter>\n' +
    '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
    '</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
};

async function writeRules() {
  const rules = [];
  for (const [trigger, out] of Object.entries(SCRIPTS))
    rules.push({ trigger: await ids(trigger), output: await ids(out) });
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-e2e-')), 'rules.json');
  fs.writeFileSync(file, JSON.stringify(rules));
  return file;
}

const userMsg = (content) => [{ role: 'user', content }];

test('dsv4 serve end to end', { timeout: 600000 }, async (t) => {
  const rules = await writeRules();
  const srv = await startServer(['--model', 'fake', '--fake-rules', rules, '--max-context', '512',
    '--max-running', '64']);
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  t.after(() => srv.stop());

  await t.test('health, models, metrics', async () => {
    const h = await raw(srv.port, { method: 'GET', path: '/health' });
    assert.equal(h.status, 200);
    const models = await client.models.list();
    assert.equal(models.data[0].id, MODEL);
    const m = await metrics(srv.port);
    for (const k of ['dsv4_requests_running', 'dsv4_requests_waiting', 'dsv4_cache_pages_used',
      'dsv4_cache_pages_free', 'dsv4_preemptions_total', 'dsv4_generation_tokens_total',
      'dsv4_time_to_first_token_seconds_count', 'dsv4_time_per_output_token_seconds_count'])
      assert.ok(k in m, 'metric ' + k);
  });

  await t.test('chat, stream and not, UTF-8 across tokens (B20)', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_EMOJI'), temperature: 0 });
    assert.equal(r.choices[0].message.content, SCRIPTS.SCRIPT_EMOJI);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
    const stream = await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_EMOJI'),
      stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        const d = c.delta.content || '';
        assert.ok(!d.includes('\uFFFD'), 'replacement character in a delta');
        text += d;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, SCRIPTS.SCRIPT_EMOJI);
    assert.equal(finish, 'stop');
    assert.deepEqual(usage, r.usage);
    // Cut by max_tokens inside a multi-token character: still valid JSON and no U+FFFD mid-text.
    const cut = await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_EMOJI'), max_tokens: 3 });
    assert.equal(cut.choices[0].finish_reason, 'length');
  });

  await t.test('stop strings across tokens, hold-back flushed at EOS (B23)', async () => {
    for (const stream of [false, true]) {
      const get = async (script, stop) => {
        if (!stream) {
          const r = await client.chat.completions.create({ model: MODEL, messages: userMsg(script), stop });
          return [r.choices[0].message.content, r.choices[0].finish_reason];
        }
        let text = '';
        let fin = null;
        for await (const ch of await client.chat.completions.create({ model: MODEL, messages: userMsg(script), stop, stream: true }))
          for (const c of ch.choices) { text += c.delta.content || ''; fin = c.finish_reason || fin; }
        return [text, fin];
      };
      assert.deepEqual(await get('SCRIPT_STOP', ['orange yellow']), ['red ', 'stop']);
      assert.deepEqual(await get('SCRIPT_STOP', ['ow gr']), ['red orange yell', 'stop']);
      assert.deepEqual(await get('SCRIPT_STOP', ['green', 'yellow']), ['red orange ', 'stop']);
      assert.deepEqual(await get('SCRIPT_PLEAS', ['please stop']), ['Type: pleas', 'stop']);
    }
  });

  await t.test('reasoning_content in thinking mode (B22)', async () => {
    const body = { model: MODEL, messages: userMsg('SCRIPT_THINK'), thinking: { type: 'enabled' } };
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].message.reasoning_content, 'plan A');
    assert.equal(r.choices[0].message.content, 'Answer: 42');
    let reasoning = '';
    let content = '';
    for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
      for (const c of ch.choices) { reasoning += c.delta.reasoning_content || ''; content += c.delta.content || ''; }
    assert.equal(reasoning, 'plan A');
    assert.equal(content, 'Answer: 42');
    const cut = await client.chat.completions.create({ ...body, max_tokens: 2 });
    assert.equal(cut.choices[0].finish_reason, 'length');
    assert.ok(!cut.choices[0].message.content);
    assert.ok('plan A'.startsWith(cut.choices[0].message.reasoning_content));
  });

  await t.test('tool calls, stream and not (B21)', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
      parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }];
    const r = await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_TOOL'), tools, tool_choice: 'auto' });
    const msg = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(msg.tool_calls.length, 1);
    assert.equal(msg.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Zürich', days: 3 });
    assert.ok((msg.content || '').startsWith('Let me check.'));
    const calls = [];
    let content = '';
    let fin = null;
    for await (const ch of await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_TOOL'), tools, stream: true })) {
      for (const c of ch.choices) {
        content += c.delta.content || '';
        fin = c.finish_reason || fin;
        for (const tc of c.delta.tool_calls || []) {
          if (!calls[tc.index]) { assert.ok(tc.function.name, 'name comes first'); calls[tc.index] = { name: tc.function.name, args: '' }; }
          calls[tc.index].args += tc.function.arguments || '';
        }
      }
    }
    assert.equal(fin, 'tool_calls');
    assert.equal(content, msg.content || '');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.equal(calls[0].args, msg.tool_calls[0].function.arguments);
  });

  await t.test('completions: text and token-id prompts, logprobs, n', async () => {
    const a = await client.completions.create({ model: MODEL, prompt: 'SCRIPT_STOP', max_tokens: 10, temperature: 0 });
    assert.equal(a.choices[0].text, SCRIPTS.SCRIPT_STOP);
    const b = await client.completions.create({ model: MODEL, prompt: await ids('SCRIPT_STOP'), max_tokens: 10, logprobs: 3 });
    assert.equal(b.choices[0].text, SCRIPTS.SCRIPT_STOP);
    assert.equal(b.choices[0].logprobs.tokens.length, 4);
    for (const lp of b.choices[0].logprobs.token_logprobs) assert.ok(Number.isFinite(lp));
    let text = '';
    for await (const ch of await client.completions.create({ model: MODEL, prompt: 'SCRIPT_STOP', max_tokens: 10, stream: true }))
      for (const c of ch.choices) text += c.text;
    assert.equal(text, SCRIPTS.SCRIPT_STOP);
    const n = await client.completions.create({ model: MODEL, prompt: 'hello there', max_tokens: 5, n: 3, temperature: 1, seed: 7 });
    assert.equal(n.choices.length, 3);
    const again = await client.completions.create({ model: MODEL, prompt: 'hello there', max_tokens: 5, n: 3, temperature: 1, seed: 7 });
    assert.deepEqual(again.choices.map((c) => c.text), n.choices.map((c) => c.text));
    const lp = await client.chat.completions.create({ model: MODEL, messages: userMsg('hi'), max_tokens: 4, logprobs: true, top_logprobs: 5 });
    for (const e of lp.choices[0].logprobs.content) {
      assert.ok(Number.isFinite(e.logprob));
      assert.equal(e.top_logprobs.length, 5);
      for (const tl of e.top_logprobs) assert.ok(Number.isFinite(tl.logprob));
    }
  });

  await t.test('bad requests get 4xx OpenAI errors and the server stays healthy (B11, B27, B28)', async () => {
    const chat = '/v1/chat/completions';
    const bodies = ['[]', '[1,2]', 'true', 'null', '123', '"x"', '{', '', '{"messages":"hi"}',
      '{"messages":[]}', '{"messages":[{"role":"wizard","content":"x"}]}',
      '{"messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}',
      '{"messages":[{"role":"user","content":"x"}],"tools":5}',
      '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","schema":{}}}',
      '{"messages":[{"role":"user","content":"x"}],"temperature":5}',
      '{"messages":[{"role":"user","content":"x"}],"top_p":0}',
      '{"messages":[{"role":"user","content":"x"}],"n":0}',
      '{"messages":[{"role":"user","content":"x"}],"max_tokens":0}',
      '{"messages":[{"role":"user","content":"x"}],"top_logprobs":50,"logprobs":true}',
      '{"messages":[{"role":"user","content":"x"}],"stream":"yes"}',
      '{"messages":[{"role":"user","content":"x"}],"max_tokens":1e30}',
      JSON.stringify({ messages: Array.from({ length: 10000 }, () => ({ role: 'nobody', content: 1 })) }),
      '['.repeat(100000)];
    for (const body of bodies) {
      const r = await raw(srv.port, { path: chat, headers: { 'content-type': 'application/json' }, body });
      assert.ok([400, 415, 422].includes(r.status), `status ${r.status} for ${body.slice(0, 60)}`);
      assert.ok(r.body.length < 65536);
      const e = JSON.parse(r.body).error;
      assert.ok(e && typeof e.message === 'string' && e.type, body.slice(0, 60));
    }
    const bad = Buffer.from([0x7b, 0x22, 0x6d, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]);  // {"m\xff\xfe":1}
    let r = await raw(srv.port, { path: chat, headers: { 'content-type': 'application/json' }, body: bad });
    assert.equal(r.status, 400);
    r = await raw(srv.port, { path: chat, body: JSON.stringify({ messages: userMsg('x') }) });
    assert.equal(r.status, 415);
    r = await postJson(srv.port, chat, { model: 'gpt-4', messages: userMsg('x') });
    assert.equal(r.status, 404);
    assert.equal(JSON.parse(r.body).error.code, 'model_not_found');
    r = await postJson(srv.port, '/v1/completions', { prompt: [1, 2, 129280], max_tokens: 2 });
    assert.equal(r.status, 400);  // B11
    r = await postJson(srv.port, '/v1/completions', { prompt: [5, -1], max_tokens: 2 });
    assert.equal(r.status, 400);
    // B28: context 512. ctx-1 with one output token works; ctx, ctx+1, 2ctx are refused.
    r = await postJson(srv.port, '/v1/completions', { prompt: Array(511).fill(300), max_tokens: 1 });
    assert.equal(r.status, 200);
    for (const len of [512, 513, 1024]) {
      for (const stream of [false, true]) {
        r = await postJson(srv.port, '/v1/completions', { prompt: Array(len).fill(300), stream });
        assert.equal(r.status, 400);
        assert.equal(JSON.parse(r.body).error.code, 'context_length_exceeded');
      }
    }
    r = await postJson(srv.port, '/v1/completions', { prompt: Array(502).fill(300), max_tokens: 100 });
    assert.equal(r.status, 400);
    r = await raw(srv.port, { method: 'GET', path: '/nope' });
    assert.equal(r.status, 404);
    r = await raw(srv.port, { method: 'GET', path: chat });
    assert.equal(r.status, 405);
    assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
    const ok = await client.chat.completions.create({ model: MODEL, messages: userMsg('SCRIPT_STOP') });
    assert.equal(ok.choices[0].message.content, SCRIPTS.SCRIPT_STOP);
    assert.ok(srv.alive());
  });
});

test('client disconnect aborts and frees pages (B29)', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--fake-step-delay-us', '3000', '--max-context', '8192']);
  t.after(() => srv.stop());
  const base = await metrics(srv.port);
  const long = { prompt: 'tell me a long story', max_tokens: 4000, ignore_eos: true };
  // (a) streaming: close after 5 chunks; (b) non-streaming: close after 300 ms; (c) 100 each.
  const streamAndDrop = () => new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions',
      headers: { 'content-type': 'application/json' }, agent: false }, (res) => {
      let n = 0;
      res.on('data', () => { if (++n === 5) { req.destroy(); resolve(); } });
      res.on('end', resolve);
    });
    req.on('error', resolve);
    req.end(JSON.stringify({ ...long, stream: true }));
  });
  const waitAndDrop = () => new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/completions',
      headers: { 'content-type': 'application/json' }, agent: false }, () => {});
    req.on('error', () => {});
    req.end(JSON.stringify(long));
    setTimeout(() => { req.destroy(); resolve(); }, 300);
  });
  await streamAndDrop();
  await waitAndDrop();
  await Promise.all([...Array(100)].map(streamAndDrop).concat([...Array(100)].map(waitAndDrop)));
  const settled = await waitFor(async () => {
    const m = await metrics(srv.port);
    // Pages back in the pool, apart from those the prefix cache holds (idle, it is their only owner).
    return m.dsv4_cache_pages_used - m.dsv4_prefix_cache_pages === base.dsv4_cache_pages_used - base.dsv4_prefix_cache_pages &&
      m.dsv4_requests_running === 0 && m.dsv4_requests_waiting === 0;
  }, 3000);
  const m = await metrics(srv.port);
  assert.ok(settled, `pages used ${m.dsv4_cache_pages_used} (cache ${m.dsv4_prefix_cache_pages}), running ${m.dsv4_requests_running}`);
  assert.equal(m.dsv4_cache_pages_free + m.dsv4_prefix_cache_pages, base.dsv4_cache_pages_free + base.dsv4_prefix_cache_pages);
  const g1 = m.dsv4_generation_tokens_total;
  await new Promise((r) => setTimeout(r, 200));
  assert.equal((await metrics(srv.port)).dsv4_generation_tokens_total, g1, 'generation continued');
  // Normal requests that complete issue no aborts.
  const aborted = m.dsv4_requests_aborted_total;
  await Promise.all([...Array(20)].map(() => postJson(srv.port, '/v1/completions', { prompt: 'hi', max_tokens: 3 })));
  assert.equal((await metrics(srv.port)).dsv4_requests_aborted_total, aborted);
});

test('overload answers 429 promptly and every request gets a reply (B31)', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--fake-step-delay-us', '20000', '--max-running', '1',
    '--max-queued', '1', '--io-threads', '2']);
  t.after(() => srv.stop());
  const fire = (i) => postJson(srv.port, '/v1/completions', { prompt: 'x' + i, max_tokens: 2, stream: i % 2 === 0 });
  const results = await Promise.all([...Array(12)].map((_, i) => fire(i)));
  const burst = await Promise.all([...Array(500)].map((_, i) => fire(i)));
  let ok = 0;
  let busy = 0;
  for (const r of results.concat(burst)) {
    if (r.status === 200) ok++;
    else {
      assert.equal(r.status, 429);
      assert.equal(r.headers['retry-after'], '1');
      assert.ok(JSON.parse(r.body).error.message);
      busy++;
    }
  }
  assert.equal(ok + busy, 512);
  assert.ok(ok >= 2 && busy > 0, `ok ${ok} busy ${busy}`);
});

test('/ready: 503 while the waiting queue is full, 200 again when it drains; /health stays 200', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--fake-step-delay-us', '20000', '--max-running', '1',
    '--max-queued', '1']);
  t.after(() => srv.stop());
  const ready = async () => (await raw(srv.port, { method: 'GET', path: '/ready' })).status;
  assert.equal(await ready(), 200);
  const a = postJson(srv.port, '/v1/completions', { prompt: 'a', max_tokens: 40, ignore_eos: true });
  await waitFor(async () => (await metrics(srv.port)).dsv4_requests_running === 1);
  const b = postJson(srv.port, '/v1/completions', { prompt: 'b', max_tokens: 2 });
  assert.ok(await waitFor(async () => (await ready()) === 503), '/ready never reported the full queue');
  assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
  assert.equal((await a).status, 200);
  assert.equal((await b).status, 200);
  assert.ok(await waitFor(async () => (await ready()) === 200));
});

test('/health stays responsive during a long prefill', { timeout: 120000 }, async (t) => {
  // 1 ms per prefill token: each 1000-token step keeps the engine thread busy for a second.
  const srv = await startServer(['--model', 'fake', '--fake-token-delay-us', '1000',
    '--max-tokens-per-step', '1000', '--max-prefill-chunk', '1000']);
  t.after(() => srv.stop());
  const long = postJson(srv.port, '/v1/completions', { prompt: Array(3000).fill(300), max_tokens: 1 });
  await new Promise((r) => setTimeout(r, 200));
  let worst = 0;
  for (let i = 0; i < 10; i++) {
    const t0 = Date.now();
    const h = await raw(srv.port, { method: 'GET', path: '/health' });
    assert.equal(h.status, 200);
    worst = Math.max(worst, Date.now() - t0);
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(worst < 500, `slowest /health ${worst} ms`);
  assert.equal((await long).status, 200);
});

test('/tokenize and /detokenize (as vLLM serves them)', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--max-context', '512']);
  t.after(() => srv.stop());
  const text = 'Hello, 世界! tokenize me';
  const r = await postJson(srv.port, '/tokenize', { model: MODEL, prompt: text });
  assert.equal(r.status, 200, r.body);
  const j = JSON.parse(r.body);
  assert.deepEqual(j.tokens, Array.from(await ids(text)));
  assert.equal(j.count, j.tokens.length);
  assert.equal(j.max_model_len, 512);
  const d = await postJson(srv.port, '/detokenize', { model: MODEL, tokens: j.tokens });
  assert.equal(d.status, 200, d.body);
  assert.equal(JSON.parse(d.body).prompt, text);
  // The chat form renders the conversation as /v1/chat/completions would: more tokens than the text.
  const c = await postJson(srv.port, '/tokenize', { messages: userMsg(text) });
  assert.equal(c.status, 200, c.body);
  assert.ok(JSON.parse(c.body).count > j.count);
  for (const [p, body] of [['/detokenize', { tokens: [1, -5] }], ['/detokenize', { tokens: 'x' }],
    ['/detokenize', { tokens: [1e9] }], ['/tokenize', { prompt: 5 }], ['/tokenize', { messages: 'hi' }]]) {
    const e = await postJson(srv.port, p, body);
    assert.equal(e.status, 400, `${p} ${JSON.stringify(body)}: ${e.body}`);
    assert.ok(JSON.parse(e.body).error.message.length > 0);
  }
  assert.equal((await raw(srv.port, { method: 'GET', path: '/tokenize' })).status, 405);
});

test('--api-key: Bearer token on /v1 and /tokenize; /health and /metrics open unless guarded', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--api-key', 'sekret-123']);
  t.after(() => srv.stop());
  const good = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'sekret-123', maxRetries: 0 });
  const bad = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'sekret-12', maxRetries: 0 });
  assert.equal((await good.models.list()).data[0].id, MODEL);
  const r = await good.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 2 });
  assert.ok(r.choices[0].text !== undefined);
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  await assert.rejects(bad.chat.completions.create({ model: MODEL, messages: userMsg('x') }), (e) => e.status === 401);
  const none = await postJson(srv.port, '/v1/completions', { prompt: 'hi', max_tokens: 1 });
  assert.equal(none.status, 401);
  assert.equal(JSON.parse(none.body).error.code, 'invalid_api_key');
  assert.equal(none.headers['www-authenticate'], 'Bearer');
  assert.equal((await postJson(srv.port, '/tokenize', { prompt: 'x' })).status, 401);
  assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
  assert.equal((await raw(srv.port, { method: 'GET', path: '/metrics' })).status, 200);
  const guarded = await startServer(['--model', 'fake', '--api-key', 'k', '--guard-health-metrics']);
  t.after(() => guarded.stop());
  assert.equal((await raw(guarded.port, { method: 'GET', path: '/health' })).status, 401);
  assert.equal((await raw(guarded.port, { method: 'GET', path: '/health',
    headers: { authorization: 'Bearer k' } })).status, 200);
});

test('/health answers 503 while a step stalls the engine, 200 when idle again', { timeout: 120000 }, async (t) => {
  // One 6,000-token step at 1 ms per token keeps the engine thread in one step for 6 s; the stall
  // threshold is 1 s, so /health must report it within the step (polled, so a slow machine only
  // shortens the window). Idle before and after: 200 (an idle engine is not a stalled one).
  const srv = await startServer(['--model', 'fake', '--fake-token-delay-us', '1000', '--health-stall-s', '1',
    '--max-tokens-per-step', '8000', '--max-prefill-chunk', '8000', '--max-context', '8192']);
  t.after(() => srv.stop());
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
  const long = postJson(srv.port, '/v1/completions', { prompt: Array(6000).fill(300), max_tokens: 1 });
  let h = null;
  const seen = await waitFor(async () => {
    h = await raw(srv.port, { method: 'GET', path: '/health' });
    return h.status === 503;
  }, 5500);
  assert.ok(seen, `no 503 during a 6 s step: last ${h && h.status} ${h && h.body}`);
  assert.equal(JSON.parse(h.body).status, 'stalled');
  assert.equal((await long).status, 200);
  // The reply can reach us a moment before the engine thread marks the step done: poll.
  assert.ok(await waitFor(async () => (await raw(srv.port, { method: 'GET', path: '/health' })).status === 200));
});

test('limits: 413 body, 431 headers, 503 over the connection cap, idle connections closed', { timeout: 120000 }, async (t) => {
  const net = require('node:net');
  const srv = await startServer(['--model', 'fake', '--max-body-bytes', '1000', '--max-header-bytes', '2000',
    '--max-connections', '4', '--idle-timeout-s', '3']);
  t.after(() => srv.stop());
  const big = await raw(srv.port, { path: '/v1/completions', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'x'.repeat(2000), max_tokens: 1 }) });
  assert.equal(big.status, 413, big.body);
  const hdr = await raw(srv.port, { method: 'GET', path: '/health', headers: { 'x-pad': 'y'.repeat(3000) } });
  assert.equal(hdr.status, 431, hdr.body);
  const ok = await postJson(srv.port, '/v1/completions', { prompt: 'hi', max_tokens: 1 });
  assert.equal(ok.status, 200, ok.body);
  // Four idle connections fill the cap; the fifth is answered 503 and closed.
  const idle = [];  // {closed: a promise of the ms from connect to the server closing it}
  for (let i = 0; i < 4; i++) {
    const s = net.connect(srv.port, '127.0.0.1');
    s.on('error', () => {});
    await new Promise((r) => s.on('connect', r));
    const t0 = Date.now();
    idle.push({ closed: new Promise((r) => s.on('close', () => r(Date.now() - t0))) });  // listening from the start
  }
  // The server counts a connection once its I/O thread has taken it: poll until the cap shows.
  let over = null;
  assert.ok(await waitFor(async () => {
    // A short timeout per poll: one stuck poll must not use up the test's time (it fails instead).
    over = await raw(srv.port, { method: 'GET', path: '/health', timeoutMs: 3000 }).catch((e) => ({ status: String(e) }));
    return over.status === 503;
  }), `never refused over the cap: ${over && over.status}`);
  assert.equal(over.headers['retry-after'], '1');
  // The idle timeout closes the four; then the server takes connections again. It is 3 s, not 1: the
  // polls above must reach the server while the four are still open, and a loaded CI machine once took
  // longer than 1 s from the fourth connect to the first poll (every poll then answered 200).
  let timer = null;
  const closed = await Promise.race([
    Promise.all(idle.map((c) => c.closed)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('idle connections not closed in 30 s')), 30000); }),
  ]);
  clearTimeout(timer);
  assert.ok(closed.every((ms) => ms < 10000), `idle connections closed after ${closed} ms`);
  assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
});

test('SIGTERM drains: admitted requests finish, new ones are refused, exit 0', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--fake-token-delay-us', '2000', '--drain-timeout-s', '30']);
  const exited = new Promise((r) => srv.proc.on('exit', (code, sig) => r({ code, sig })));
  t.after(() => srv.stop());
  const inflight = postJson(srv.port, '/v1/completions', { prompt: 'hello', max_tokens: 300, ignore_eos: true,
    temperature: 0 });
  assert.ok(await waitFor(async () => (await metrics(srv.port)).dsv4_requests_running === 1), 'never admitted');
  srv.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 150));
  let refused = false;
  try {
    refused = (await postJson(srv.port, '/v1/completions', { prompt: 'late', max_tokens: 1 })).status === 503;
  } catch (e) {
    refused = true;  // the listening socket is closed: connection refused
  }
  assert.ok(refused, 'a request after SIGTERM was served');
  const r = await inflight;
  assert.equal(r.status, 200, r.body);
  const j = JSON.parse(r.body);
  assert.equal(j.choices[0].finish_reason, 'length');
  assert.equal(j.usage.completion_tokens, 300);
  assert.deepEqual(await exited, { code: 0, sig: null });
});

test('1000 concurrent streaming requests: none lost', { timeout: 300000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--max-running', '256', '--max-queued', '2000',
    '--max-tokens-per-step', '2048']);
  t.after(() => srv.stop());
  const N = 1000;
  let maxOpen = 0;
  const poll = setInterval(async () => {
    try { maxOpen = Math.max(maxOpen, (await metrics(srv.port)).dsv4_http_connections_open); } catch {}
  }, 100);
  const one = (i) => postJson(srv.port, '/v1/completions', { prompt: `request ${i}`, max_tokens: 16, stream: true,
    temperature: 0, ignore_eos: true });
  const t0 = Date.now();
  const rs = await Promise.all([...Array(N)].map((_, i) => one(i)));
  clearInterval(poll);
  let done = 0;
  let rejected = 0;
  for (const r of rs) {
    if (r.status === 200) {
      const ev = sseEvents(r.body);
      assert.equal(ev[ev.length - 1], '[DONE]');
      let text = '';
      for (const e of ev.slice(0, -1)) for (const c of JSON.parse(e).choices) text += c.text;
      done++;
    } else {
      assert.ok([429, 503].includes(r.status));
      rejected++;
    }
  }
  assert.equal(done + rejected, N);
  const m = await metrics(srv.port);
  console.log(`# burst: ${done} completed, ${rejected} rejected in ${Date.now() - t0} ms; ` +
    `max open connections seen ${maxOpen}; pages used after ${m.dsv4_cache_pages_used}`);
  assert.ok(await waitFor(async () => {
    const x = await metrics(srv.port);
    return x.dsv4_cache_pages_used === x.dsv4_prefix_cache_pages;
  }, 3000));
});

test('prefix cache: a repeated prompt reports cached tokens, salts keep tenants apart, a flush empties it', { timeout: 60000 }, async (t) => {
  const srv = await startServer(['--model', 'fake']);
  t.after(() => srv.stop());
  const prompt = [...Array(100)].map((_, i) => 100 + i);  // the fake model's blocks are 16 tokens
  const ask = async (extra) => {
    const r = await postJson(srv.port, '/v1/completions', { prompt, max_tokens: 4, temperature: 0, ignore_eos: true,
      return_token_ids: true, ...extra });
    assert.equal(r.status, 200, r.body);
    return JSON.parse(r.body);
  };
  const a = await ask({});
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(a.choices[0].token_ids.length, 4);
  const b = await ask({});
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, 96);  // whole 16-token blocks, at least one token left
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.deepEqual(b.choices[0].token_ids, a.choices[0].token_ids);
  const s1 = await ask({ cache_salt: 'tenant-1' });
  assert.equal(s1.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(s1.choices[0].text, a.choices[0].text);
  assert.equal((await ask({ cache_salt: 'tenant-1' })).usage.prompt_tokens_details.cached_tokens, 96);
  const bad = await postJson(srv.port, '/v1/completions', { prompt, max_tokens: 1, cache_salt: 5 });
  assert.equal(bad.status, 400);
  let m = await metrics(srv.port);
  assert.ok(m.dsv4_prefix_cache_hit_tokens_total >= 192 && m.dsv4_prefix_cache_pages > 0);
  assert.equal((await postJson(srv.port, '/flush_cache', {})).status, 200);
  assert.ok(await waitFor(async () => {
    m = await metrics(srv.port);
    return m.dsv4_prefix_cache_pages === 0 && m.dsv4_cache_pages_used === 0;
  }, 3000), `after the flush: cache pages ${m.dsv4_prefix_cache_pages}, used ${m.dsv4_cache_pages_used}`);
  assert.equal((await ask({})).usage.prompt_tokens_details.cached_tokens, 0);
});

test('default tiny model answers an openai chat', { timeout: 300000 }, async (t) => {
  let srv;
  try {
    srv = await startServer(['--max-context', '256']);
  } catch (e) {
    if (/unknown model|not available|Unimplemented/i.test(String(e))) return t.skip(String(e));
    throw e;
  }
  t.after(() => srv.stop());
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  const a = await client.chat.completions.create({ model: MODEL, messages: userMsg('Hello!'), max_tokens: 6, temperature: 0 });
  const b = await client.chat.completions.create({ model: MODEL, messages: userMsg('Hello!'), max_tokens: 6, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.completion_tokens, 6);
  let text = '';
  for await (const ch of await client.chat.completions.create({ model: MODEL, messages: userMsg('Hello!'), max_tokens: 6, temperature: 0, stream: true }))
    for (const c of ch.choices) text += c.delta.content || '';
  assert.equal(text, a.choices[0].message.content);
  // logit_bias +100 on one token makes every greedy output that token; an id outside the
  // vocabulary is a 400 naming the field.
  const forced = (await ids(' yes'))[0];
  const f = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 4, temperature: 0,
    logit_bias: { [String(forced)]: 100 }, logprobs: 0 });
  assert.equal(f.choices[0].logprobs.tokens.length, 4);
  assert.deepEqual(f.choices[0].text, ' yes'.repeat(4));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 1,
    logit_bias: { '99999999': 5 } }), (e) => e.status === 400 && /logit_bias/.test(e.message));
});

test('structured output: json_schema, json_object and guided_json give JSON that parses; bad schemas are 400', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake']);
  t.after(() => srv.stop());
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { enum: [1, 2, 'three'] } },
    required: ['ok', 'n'], additionalProperties: false };
  const check = (text) => {
    const d = JSON.parse(text);
    assert.equal(typeof d.ok, 'boolean', text);
    assert.ok([1, 2, 'three'].includes(d.n), text);
    assert.deepEqual(Object.keys(d).sort(), ['n', 'ok'], text);
  };
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.create({ model: MODEL, messages: userMsg('hello'), temperature, seed: 7,
      max_tokens: 96, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } } });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    check(r.choices[0].message.content);
    // Streamed: the deltas put together are the same kind of document.
    const stream = await client.chat.completions.create({ model: MODEL, messages: userMsg('hello'), temperature, seed: 7,
      max_tokens: 96, stream: true, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } } });
    let text = '', finish = null;
    for await (const c of stream) {
      if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content;
      if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
    }
    assert.equal(finish, 'stop');
    check(text);
  }
  // vLLM's guided_json on /v1/completions; json_object mode ends with an object or reports length.
  const g = await postJson(srv.port, '/v1/completions', { prompt: 'x', max_tokens: 96, temperature: 1, seed: 3, guided_json: schema });
  assert.equal(g.status, 200, g.body);
  const gc = JSON.parse(g.body).choices[0];
  assert.equal(gc.finish_reason, 'stop', gc.text);
  check(gc.text);
  for (let seed = 0; seed < 4; seed++) {
    const o = await client.chat.completions.create({ model: MODEL, messages: userMsg('hi'), temperature: 1, seed,
      max_tokens: 64, response_format: { type: 'json_object' } });
    const c = o.choices[0];
    if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
    else assert.equal(c.finish_reason, 'length');
  }
  const bad = await postJson(srv.port, '/v1/chat/completions', { messages: userMsg('x'), response_format:
    { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a' } } } });
  assert.equal(bad.status, 400);
  const err = JSON.parse(bad.body).error;
  assert.equal(err.param, 'response_format');
  assert.match(err.message, /'pattern'/);
  const bad2 = await postJson(srv.port, '/v1/completions', { prompt: 'x', guided_json: '{not json' });
  assert.equal(bad2.status, 400);
});

test('tool_choice required / a named function / parallel_tool_calls are enforced', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake']);
  t.after(() => srv.stop());
  const client = new OpenAI({ baseURL: srv.base + '/v1', apiKey: 'none', maxRetries: 0 });
  const tools = [
    { type: 'function', function: { name: 'set_mode', strict: true, parameters: { type: 'object',
      properties: { mode: { enum: ['fast', 'slow'] }, on: { type: 'boolean' } }, required: ['mode', 'on'],
      additionalProperties: false } } },
    { type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: {},
      additionalProperties: false } } },
  ];
  const checkCall = (c) => {
    const a = JSON.parse(c.function.arguments);
    if (c.function.name === 'ping') return;
    assert.equal(c.function.name, 'set_mode');
    assert.ok(['fast', 'slow'].includes(a.mode), c.function.arguments);
    assert.equal(typeof a.on, 'boolean', c.function.arguments);
  };
  for (let seed = 0; seed < 3; seed++) {
    // A random model keeps adding calls while they are allowed: room for a few.
    const r = await client.chat.completions.create({ model: MODEL, messages: userMsg('go'), tools, tool_choice: 'required',
      temperature: 1, seed, max_tokens: 1500 });
    const ch = r.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch.message));
    assert.ok(ch.message.tool_calls.length >= 1);
    ch.message.tool_calls.forEach(checkCall);
    const named = await client.chat.completions.create({ model: MODEL, messages: userMsg('go'), tools, temperature: 1,
      seed, max_tokens: 400, tool_choice: { type: 'function', function: { name: 'set_mode' } }, parallel_tool_calls: false });
    const nc = named.choices[0];
    assert.equal(nc.finish_reason, 'tool_calls', JSON.stringify(nc.message));
    assert.equal(nc.message.tool_calls.length, 1);
    assert.equal(nc.message.tool_calls[0].function.name, 'set_mode');
    checkCall(nc.message.tool_calls[0]);
  }
  const none = await client.chat.completions.create({ model: MODEL, messages: userMsg('go'), tools, tool_choice: 'none',
    max_tokens: 8 });
  assert.ok(!none.choices[0].message.tool_calls || none.choices[0].message.tool_calls.length === 0);
  const bad = await postJson(srv.port, '/v1/chat/completions', { messages: userMsg('x'), tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } });
  assert.equal(bad.status, 400);
  assert.equal(JSON.parse(bad.body).error.param, 'tool_choice');
  const badStrict = await postJson(srv.port, '/v1/chat/completions', { messages: userMsg('x'), tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object',
      properties: { s: { type: 'string', minLength: 3 } } } } }] });
  assert.equal(badStrict.status, 400);
  assert.match(JSON.parse(badStrict.body).error.message, /'minLength'/);
});
