// End-to-end: a device fault in a step (issue 21 item 5), on the fake model's stand-in for a sticky
// CUDA error (`--option fault_inject_step=N`). The requests in flight get a 500 or an SSE error event
// naming the fault, and `dsv4 serve` exits by itself with status 3 and one "fatal" line on stderr,
// in bounded time (the supervisor restarts it). /health and /ready during that window are covered
// by tests/server/engine_fault_test.cpp (here the process may already be gone).
// Env: as server_e2e.cjs.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { startServer, postJson, sseEvents, metrics, waitFor } = require('./serve_util.cjs');

test('a device fault fails the running requests (500, SSE error) and the server exits 3 with one fatal line',
  { timeout: 120000 }, async (t) => {
    // 20 ms steps: step 50 comes about a second after start, long after both requests are admitted.
    const srv = await startServer(['--model', 'fake', '--fake-step-delay-us', '20000', '--option', 'fault_inject_step=50',
      '--max-context', '16384']);
    t.after(() => srv.stop());
    let stderr = '';
    srv.proc.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise((r) => srv.proc.on('exit', (code, sig) => r({ code, sig, at: Date.now() })));
    const long = { prompt: 'a long one', max_tokens: 8000, ignore_eos: true };
    const plain = postJson(srv.port, '/v1/completions', long);
    const stream = postJson(srv.port, '/v1/completions', { ...long, stream: true });
    assert.ok(await waitFor(async () => (await metrics(srv.port)).dsv4_requests_running === 2), 'never admitted');

    const p = await plain;
    const answered = Date.now();
    assert.equal(p.status, 500, p.body);
    assert.match(JSON.parse(p.body).error.message, /model step failed: injected device fault at step 50/);
    const s = await stream;
    assert.equal(s.status, 200);
    const events = sseEvents(s.body);
    assert.equal(events[events.length - 1], '[DONE]');
    assert.match(JSON.parse(events[events.length - 2]).error.message, /injected device fault/);

    const e = await exited;
    assert.deepEqual({ code: e.code, sig: e.sig }, { code: 3, sig: null });
    assert.ok(e.at - answered < 15000, `exited ${e.at - answered} ms after the failed replies`);
    const fatal = stderr.split('\n').filter((l) => l.includes('dsv4 serve: fatal'));
    assert.equal(fatal.length, 1, stderr);
    assert.match(fatal[0], /injected device fault at step 50/);
    assert.match(fatal[0], /exiting with status 3/);
  });
