// Helpers shared by the end-to-end test files: start `dsv4 serve`, raw HTTP on fresh
// connections, /metrics as numbers, and polling a condition (tests wait on conditions, not time).
// Env: DSV4_BIN (dsv4 executable), DSV4_TOKENIZER (tokenizer.json).
'use strict';
const http = require('node:http');
const { spawn } = require('node:child_process');

const BIN = process.env.DSV4_BIN;
const TOK = process.env.DSV4_TOKENIZER;

// Starts `dsv4 serve --port 0 ...` and resolves once it prints its address.
function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ['serve', '--port', '0', '--tokenizer', TOK, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error('server did not start: ' + out + err)), 120000);
    proc.stderr.on('data', (d) => (err += d));
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/([\d.]+):(\d+)/);
      if (m) {
        clearTimeout(timer);
        const port = Number(m[2]);
        resolve({
          proc,
          port,
          base: `http://127.0.0.1:${port}`,
          stop: () =>
            new Promise((res) => {
              if (proc.exitCode !== null) return res(proc.exitCode);
              proc.on('exit', (code) => res(code));
              proc.kill('SIGTERM');
            }),
          alive: () => proc.exitCode === null && proc.signalCode === null,
        });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}: ${err}`)));
  });
}

// One request on a fresh connection. Resolves {status, headers, body}.
function raw(port, { method = 'POST', path: p, headers = {}, body, timeoutMs = 60000 }) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path: p, headers, agent: false },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

function postJson(port, p, obj) {
  return raw(port, { path: p, headers: { 'content-type': 'application/json' }, body: JSON.stringify(obj) });
}

function sseEvents(body) {
  return body.split('\n\n').filter((s) => s.startsWith('data: ')).map((s) => s.slice(6));
}

async function metrics(port) {
  const r = await raw(port, { method: 'GET', path: '/metrics' });
  const m = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [k, v] = line.split(' ');
    m[k] = Number(v);
  }
  return m;
}

async function waitFor(pred, ms = 5000) {
  const t0 = Date.now();
  for (;;) {
    if (await pred()) return true;
    if (Date.now() - t0 > ms) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
}

module.exports = { startServer, raw, postJson, sseEvents, metrics, waitFor };
