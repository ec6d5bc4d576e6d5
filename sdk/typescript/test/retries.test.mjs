// Retries through a fault-injecting proxy in front of the real API: what is retried, after how
// long, with which request id and idempotency key, and what is not retried.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { QueueCore, RateLimitedError, TimeoutError, UnavailableError } from '../dist/index.js';
import { client, unique } from './helpers.mjs';

/**
 * A proxy to QUEUECORE_URL. `fault(req, body)` picks, per request: undefined (relay),
 * {status, retryAfter} (answer that instead, not forwarded), 'lose' (forward, then drop the
 * connection before answering) or {delayMs} (forward, answer late).
 */
async function proxy(fault) {
  const seen = [];
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const entry = { method: req.method, url: req.url, requestId: req.headers['x-request-id'], body: body.toString(), at: Date.now() };
    seen.push(entry);
    const action = fault(entry, seen);
    if (action?.status) {
      const error = { code: action.status === 429 ? 'RATE_LIMITED' : 'SERVICE_UNAVAILABLE', message: 'injected', status: action.status, requestId: entry.requestId };
      const headers = { 'content-type': 'application/json', ...(action.retryAfter ? { 'retry-after': String(action.retryAfter) } : {}) };
      res.writeHead(action.status, headers).end(JSON.stringify({ error }));
      return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    const answer = await fetch(process.env.QUEUECORE_URL + req.url, { method: req.method, headers, body: body.length ? body : undefined });
    const text = await answer.text();
    if (action === 'lose') return req.socket.destroy(); // the work is done; its answer never arrives
    if (action?.delayMs) await new Promise((resolve) => setTimeout(resolve, action.delayMs));
    if (res.destroyed) return;
    res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' }).end(text);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  const close = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  return { url, seen, close };
}

const first = (method, path) => (entry, seen) =>
  entry.method === method && entry.url.startsWith(path) && seen.filter((e) => e.method === method && e.url.startsWith(path)).length === 1;

test('a 429 is retried after its Retry-After, with the same request id, even for a create', async (t) => {
  const name = unique('rl');
  const p = await proxy((entry, seen) => (first('POST', '/v1/topics')(entry, seen) ? { status: 429, retryAfter: 1 } : undefined));
  t.after(p.close);
  const logged = [];
  const pq = client({ baseUrl: p.url, logger: { info: (line) => logged.push(line) } });
  const topic = await pq.topics.create({ name, partitions: 1 });
  assert.equal(topic.name, name);
  assert.equal(logged.length, 1);
  assert.match(logged[0], /retry 1\/3 of POST \/v1\/topics .*RATE_LIMITED \(request req_/);
  assert.ok(!logged[0].includes(process.env.QUEUECORE_API_KEY), 'the key is never logged');
  assert.ok(!JSON.stringify(pq).includes(process.env.QUEUECORE_API_KEY), 'nor serialised with the client');
  const creates = p.seen.filter((e) => e.method === 'POST');
  assert.equal(creates.length, 2);
  assert.equal(creates[0].requestId, creates[1].requestId);
  assert.ok(creates[1].at - creates[0].at >= 1000, 'waited out Retry-After');
  const noRetries = client({ baseUrl: p.url, maxRetries: 0 });
  p.seen.length = 0;
  const err = await noRetries.topics.create({ name: unique('rl') }).catch((e) => e);
  assert.ok(err instanceof RateLimitedError);
  assert.equal(err.retryAfterS, 1);
});

test('a publish whose answer was lost is retried with its idempotency key and stored once', async (t) => {
  const name = unique('lost');
  await client().topics.create({ name, partitions: 1 });
  const p = await proxy((entry, seen) => (first('POST', `/v1/topics/${name}/messages`)(entry, seen) ? 'lose' : undefined));
  t.after(p.close);
  const result = await client({ baseUrl: p.url }).publish(name, { charge: 100 });
  const sent = p.seen.filter((e) => e.method === 'POST').map((e) => JSON.parse(e.body).idempotencyKey);
  assert.equal(sent.length, 2);
  assert.equal(sent[0], sent[1]);
  assert.equal(sent[0], result.idempotencyKey);
  assert.equal((await client().topics.describe(name)).stats.depth, 1);
});

test('a 503 is retried for a batch with keys, but not for a topic create', async (t) => {
  const name = unique('svc');
  await client().topics.create({ name, partitions: 1 });
  const p = await proxy((entry) => (entry.url === '/v1/topics' || (entry.url.endsWith('/batch') && p.seen.length === 1) ? { status: 503 } : undefined));
  t.after(p.close);
  const pq = client({ baseUrl: p.url });
  const batch = await pq.publishBatch(name, [1, 2]);
  assert.equal(batch.count, 2);
  assert.equal(p.seen.filter((e) => e.url.endsWith('/batch')).length, 2);
  await assert.rejects(pq.topics.create({ name: unique('svc') }), UnavailableError);
  assert.equal(p.seen.filter((e) => e.url === '/v1/topics').length, 1);
});

test('a call slower than the timeout fails as TimeoutError; a create is not sent twice', async (t) => {
  const p = await proxy((entry) => (entry.method === 'POST' ? { delayMs: 1500 } : undefined));
  t.after(p.close);
  const pq = new QueueCore({ baseUrl: p.url, timeout: 300 });
  const started = Date.now();
  const err = await pq.topics.create({ name: unique('slow') }).catch((e) => e);
  assert.ok(err instanceof TimeoutError, String(err));
  assert.equal(err.code, 'TIMEOUT');
  assert.ok(Date.now() - started < 1200);
  assert.equal(p.seen.length, 1);
});

test('a consumer falls back to long-poll pulls when the server has no event stream', async (t) => {
  const name = unique('nostream');
  await client().topics.create({ name, partitions: 1 });
  const p = await proxy((entry) => (entry.url.split('?')[0].endsWith('/stream') ? { status: 404 } : undefined));
  t.after(p.close);
  const pq = client({ baseUrl: p.url });
  const consumer = pq.consume(name, { group: unique('g'), startFrom: 'earliest', waitMs: 500 });
  const modes = [];
  consumer.on('connected', (info) => modes.push(info.mode));
  const acked = [];
  consumer.on('message', async (msg) => {
    await msg.ack();
    acked.push(msg.data);
  });
  t.after(() => consumer.stop());
  await consumer.start();
  await pq.publishBatch(name, ['a', 'b']);
  const deadline = Date.now() + 15_000;
  while (acked.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  await consumer.stop();
  assert.deepEqual(acked, ['a', 'b']);
  assert.deepEqual(modes, ['pull']);
  assert.equal(consumer.deliveryMode, 'pull');
  assert.ok(p.seen.some((e) => e.url.endsWith('/pull')));
});
