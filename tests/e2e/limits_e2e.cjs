// End-to-end tests of what slow or stuck clients and shutdown can do to `dsv4 serve` (issue 21
// item 5): a reader that stops reading, a slowloris, and a drain that runs out of time. Each
// waits on server metrics, never on a fixed delay, so a loaded machine only makes it slower.
// Env: as server_e2e.cjs.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const { startServer, raw, postJson, metrics, waitFor } = require('./serve_util.cjs');

// Held pages, not counting the prefix cache's (an idle cache is their only owner).
const livePages = (m) => m.dsv4_cache_pages_used - m.dsv4_prefix_cache_pages;

// Sends a streaming request on a raw socket and never reads the reply. top_logprobs makes each
// event ~2 KB, so the socket buffers (a few MB on loopback) fill within seconds.
function neverReader(port) {
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  const body = JSON.stringify({ messages: [{ role: 'user', content: 'never read' }], max_tokens: 100000,
    ignore_eos: true, stream: true, logprobs: true, top_logprobs: 20 });
  s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  s.pause();
  return s;
}

async function stuckReaderIsDropped(t, limitArgs) {
  const srv = await startServer(['--model', 'fake', '--max-context', '131072', '--n-pages', '9000', ...limitArgs]);
  t.after(() => srv.stop());
  const base = await metrics(srv.port);
  const stuck = neverReader(srv.port);
  t.after(() => stuck.destroy());
  assert.ok(await waitFor(async () => (await metrics(srv.port)).dsv4_requests_running === 1), 'never admitted');
  // Other clients are served while it sits there (the engine never waits on a socket).
  const others = await Promise.all([...Array(4)].map((_, i) =>
    postJson(srv.port, '/v1/completions', { prompt: 'other ' + i, max_tokens: 3 })));
  for (const r of others) assert.equal(r.status, 200, r.body);
  // Counted on the connection's strand as it closes, so 0 here means it was still open.
  assert.equal((await metrics(srv.port)).dsv4_http_slow_readers_total, 0, 'dropped before the others were served');
  // Then it is closed, its request cancelled and its pages returned.
  let m = null;
  const dropped = await waitFor(async () => {
    m = await metrics(srv.port);
    return m.dsv4_http_slow_readers_total === 1 && m.dsv4_requests_aborted_total === base.dsv4_requests_aborted_total + 1 &&
      m.dsv4_requests_running === 0 && livePages(m) === livePages(base);
  }, 60000);
  assert.ok(dropped, `slow readers ${m.dsv4_http_slow_readers_total}, aborted ${m.dsv4_requests_aborted_total}, ` +
    `running ${m.dsv4_requests_running}, pages ${livePages(m)} (idle ${livePages(base)})`);
  assert.equal((await raw(srv.port, { method: 'GET', path: '/health' })).status, 200);
  assert.equal((await postJson(srv.port, '/v1/completions', { prompt: 'after', max_tokens: 2 })).status, 200);
}

test('a client that never reads its stream is closed at the write-buffer cap; others are served meanwhile',
  { timeout: 120000 }, async (t) => {
    // The write timeout stays at its 60 s default, so only the 64 KiB cap can close it in time.
    await stuckReaderIsDropped(t, ['--max-write-buffer-bytes', '65536']);
  });

test('a client that stops taking bytes is closed after --write-timeout-s; others are served meanwhile',
  { timeout: 120000 }, async (t) => {
    // A 1 GiB cap would take minutes to fill: only the write timeout can close it in time.
    await stuckReaderIsDropped(t, ['--write-timeout-s', '1', '--max-write-buffer-bytes', String(1 << 30)]);
  });

// Connects and writes `head`, then one byte of `drip` every 100 ms until the server closes.
function trickle(port, head, drip) {
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  s.on('data', () => {});
  const closed = new Promise((r) => s.on('close', r));
  let timer = null;
  s.on('connect', () => {
    s.write(head);
    timer = setInterval(() => s.write(drip), 100);
  });
  closed.then(() => clearInterval(timer));
  return { socket: s, closed, isClosed: () => s.destroyed };
}

test('slowloris: requests trickled in are closed after --request-timeout-s; idle keep-alive and other clients are not',
  { timeout: 120000 }, async (t) => {
    const srv = await startServer(['--model', 'fake', '--request-timeout-s', '2', '--idle-timeout-s', '300']);
    t.after(() => srv.stop());
    const idle = net.connect(srv.port, '127.0.0.1');
    idle.on('error', () => {});
    t.after(() => idle.destroy());
    const slowHead = trickle(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ', 'a');
    const slowBody = trickle(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Content-Length: 1000\r\n\r\n{"prompt":"', 'a');
    t.after(() => { slowHead.socket.destroy(); slowBody.socket.destroy(); });
    // The metrics connection counts too: wait until the server holds all three of ours.
    assert.ok(await waitFor(async () => (await metrics(srv.port)).dsv4_http_connections_open >= 4), 'connections not taken');
    const ok = await postJson(srv.port, '/v1/completions', { prompt: 'meanwhile', max_tokens: 3 });
    assert.equal(ok.status, 200, ok.body);
    assert.ok(!slowHead.isClosed() && !slowBody.isClosed(), 'a slow request was closed before another was served');
    await Promise.all([slowHead.closed, slowBody.closed]);
    // The timer closes the socket before the read handler counts the timeout: poll for the count.
    let m = null;
    assert.ok(await waitFor(async () => (m = await metrics(srv.port)).dsv4_http_request_timeouts_total === 2),
      `request timeouts counted: ${m && m.dsv4_http_request_timeouts_total}`);
    assert.ok(!idle.destroyed, 'the idle connection was closed with the slow ones');
  });

test('SIGTERM past --drain-timeout-s: what is left gets a 500 or an error event, exit 0', { timeout: 120000 }, async (t) => {
  const srv = await startServer(['--model', 'fake', '--fake-token-delay-us', '2000', '--drain-timeout-s', '1',
    '--max-context', '8192']);
  const exited = new Promise((r) => srv.proc.on('exit', (code, sig) => r({ code, sig })));
  t.after(() => srv.stop());
  const long = { prompt: 'a long one', max_tokens: 8000, ignore_eos: true };
  const plain = postJson(srv.port, '/v1/completions', long);
  const stream = postJson(srv.port, '/v1/completions', { ...long, stream: true });
  assert.ok(await waitFor(async () => (await metrics(srv.port)).dsv4_requests_running === 2), 'never admitted');
  srv.proc.kill('SIGTERM');
  const p = await plain;
  assert.equal(p.status, 500, p.body);
  assert.match(JSON.parse(p.body).error.message, /shutting down/);
  const s = await stream;
  assert.equal(s.status, 200);
  const events = s.body.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
  assert.equal(events[events.length - 1], '[DONE]');
  assert.match(JSON.parse(events[events.length - 2]).error.message, /shutting down/);
  assert.deepEqual(await exited, { code: 0, sig: null });
});
