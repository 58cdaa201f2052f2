// Measures how many concurrent streaming requests a running `dsv4 serve` sustains: opens N
// streaming /v1/completions requests at once (one connection each), and reports how many
// completed with [DONE], how many were refused (429/503), how many failed otherwise, the
// peak of open connections the server reported, and TTFT/total-time percentiles.
// Usage: node concurrency_probe.cjs PORT N [max_tokens]
'use strict';
const http = require('node:http');

const [port, n, maxTokens] = [Number(process.argv[2]), Number(process.argv[3] || 2000), Number(process.argv[4] || 16)];

function metrics() {
  return new Promise((resolve) => {
    http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
      let b = '';
      res.on('data', (d) => (b += d));
      res.on('end', () => {
        const m = {};
        for (const l of b.split('\n')) if (l && !l.startsWith('#')) { const [k, v] = l.split(' '); m[k] = Number(v); }
        resolve(m);
      });
    }).on('error', () => resolve({}));
  });
}

function one(i) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    let ttft = null;
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent: false,
      headers: { 'content-type': 'application/json' } }, (res) => {
      let body = '';
      res.on('data', (d) => { if (ttft === null) ttft = Date.now() - t0; body += d; });
      res.on('end', () => resolve({ status: res.statusCode, done: body.includes('data: [DONE]'), ttft, total: Date.now() - t0 }));
    });
    req.on('error', (e) => resolve({ status: 0, error: String(e) }));
    req.end(JSON.stringify({ prompt: `probe request ${i}`, max_tokens: maxTokens, stream: true, ignore_eos: true, temperature: 0 }));
  });
}

(async () => {
  let peak = 0;
  const poll = setInterval(async () => { const m = await metrics(); peak = Math.max(peak, m.dsv4_http_connections_open || 0); }, 50);
  const t0 = Date.now();
  const rs = await Promise.all([...Array(n)].map((_, i) => one(i)));
  clearInterval(poll);
  const ok = rs.filter((r) => r.status === 200 && r.done);
  const refused = rs.filter((r) => r.status === 429 || r.status === 503).length;
  const pct = (a, p) => a.length ? a.sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))] : NaN;
  const m = await metrics();
  console.log(JSON.stringify({ requested: n, completed: ok.length, refused, failed: n - ok.length - refused,
    peak_open_connections: peak, wall_ms: Date.now() - t0,
    ttft_ms_p50: pct(ok.map((r) => r.ttft), 0.5), ttft_ms_p99: pct(ok.map((r) => r.ttft), 0.99),
    total_ms_p50: pct(ok.map((r) => r.total), 0.5), total_ms_p99: pct(ok.map((r) => r.total), 0.99),
    pages_used_after: m.dsv4_cache_pages_used, generated_tokens: m.dsv4_generation_tokens_total }));
})();
