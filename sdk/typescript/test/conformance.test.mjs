// Runs every scenario of ../conformance/scenarios.json through the SDK's public API
// (the file, its placeholders, matchers and ops are described in ../conformance/README.md).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { AckRejectedError, LeaseExpiredError, QueueCore, QueueCoreError, verifyPush } from '../dist/index.js';

const FILE = new URL('../../conformance/scenarios.json', import.meta.url);
const { scenarios } = JSON.parse(readFileSync(FILE, 'utf8'));
const TIMEOUT_MS = 10_000;
const SCENARIO_MS = 90_000;
const CONNECTION_EVENTS = ['connected', 'disconnected', 'reconnecting', 'rebalanced'];

for (const scenario of scenarios) {
  test(`conformance: ${scenario.name}`, { timeout: SCENARIO_MS }, async () => {
    const run = randomBytes(8).toString('hex').slice(0, 8);
    const clients = {
      own: new QueueCore({ timeout: TIMEOUT_MS }),
      invalidKey: new QueueCore({ apiKey: 'pq_live_sk_' + '0'.repeat(32), timeout: TIMEOUT_MS }),
    };
    if (process.env.QUEUECORE_DEVELOPER_API_KEY) {
      clients.developer = new QueueCore({ apiKey: process.env.QUEUECORE_DEVELOPER_API_KEY, timeout: TIMEOUT_MS });
    }
    const saved = {};
    for (const [index, step] of scenario.steps.entries()) {
      const where = `${scenario.name} step ${index} (${step.op})`;
      const args = rewrite(step.args ?? {}, run, saved);
      const expect = rewrite(step.expect, run, saved);
      const outcome = await perform(clients[step.as ?? 'own'], step.op, args);
      if ('result' in expect) {
        if (outcome.error) assert.fail(`${where}: expected a result, got ${outcome.error.code}: ${outcome.error.message}`);
        check(expect.result, outcome.result, where);
        for (const [name, path] of Object.entries(step.save ?? {})) saved[name] = dig(outcome.result, path);
      } else {
        if (!outcome.error) assert.fail(`${where}: expected an error, got ${JSON.stringify(outcome.result)}`);
        const { code, message, status, requestId } = outcome.error;
        check(expect.error, { code, message, status, requestId }, where);
      }
    }
  });
}

/** `{result}` (plain JSON) or `{error}` (a QueueCoreError); anything else is a bug and throws. */
async function perform(pq, op, args) {
  try {
    return { result: JSON.parse(JSON.stringify(await OPS[op](pq, args))) };
  } catch (error) {
    if (error instanceof QueueCoreError) return { error };
    throw error;
  }
}

const OPS = {
  health: (pq) => pq.health(),
  'topics.create': (pq, a) => pq.topics.create(a),
  'topics.list': (pq) => pq.topics.list(),
  'topics.describe': (pq, a) => pq.topics.describe(a.name),
  'topics.delete': (pq, a) => pq.topics.delete(a.name),
  publish: (pq, a) =>
    pq.publish(a.topic, a.data, { key: a.key, idempotencyKey: a.idempotencyKey, fairnessKey: a.fairnessKey, throttleKeys: a.throttleKeys }),
  publishBatch: (pq, a) => pq.publishBatch(a.topic, a.messages.map((m) => QueueCore.message(m))),
  consume,
  publishConcurrently,
  consumeAcking: (pq, a) => consumeCounting(pq, a, (msg) => msg.ack()),
  consumeSlowly: (pq, a) =>
    consumeCounting(pq, a, async (msg) => {
      await new Promise((resolve) => setTimeout(resolve, a.handlerMs));
      await msg.ack();
    }),
  consumeWithStall,
  'dlq.inspect': (pq, a) => pq.dlq.inspect(a.topic, a.group, { limit: a.limit }),
  'dlq.replay': async (pq, a) => ({ replayed: await pq.dlq.replay(a.topic, a.group, a.messageId) }),
  'dlq.replayAll': async (pq, a) => ({ replayed: await pq.dlq.replayAll(a.topic, a.group, { count: a.count }) }),
  'offsets.get': (pq, a) => pq.offsets.get(a.topic, a.group, a.partition),
  'offsets.seek': (pq, a) => pq.offsets.seek(a.topic, a.group, a.partition, a.offset),
  'offsets.reset': (pq, a) => pq.offsets.reset(a.topic, a.group, a.to),
  'groups.list': (pq, a) => pq.consumerGroups.list(a.topic),
  'groups.describe': (pq, a) => pq.consumerGroups.describe(a.topic, a.group),
  'groups.reset': (pq, a) => pq.consumerGroups.resetOffsets(a.topic, a.group, a.to),
  'groups.configure': async (pq, a) => {
    const settings = {
      startFrom: a.startFrom,
      deadLetter: a.deadLetter,
      rotateSecret: a.rotateSecret,
      fairness: a.fairness,
      onFailure: a.onFailure,
    };
    if ('push' in a) settings.push = a.push;
    const group = await pq.consumerGroups.configure(a.topic, a.group, settings);
    return { ...group, pushSecret: group.pushSecret ?? null };
  },
  'groups.testPush': (pq, a) => pq.consumerGroups.testPush(a.topic, a.group),
  'push.verify': async (_, a) =>
    verifyPush(a.secret, a.headers, a.body, { now: a.now * 1000, toleranceMs: (a.toleranceS ?? 300) * 1000 }),
  'groups.stats': (pq, a) => pq.consumerGroups.stats(a.topic, a.group),
  'config.set': (pq, a) => pq.config.set(a.key, a.value),
  'config.get': (pq, a) => pq.config.get(a.key),
  'config.list': (pq, a) => pq.config.list(a.prefix),
  'config.delete': async (pq, a) => {
    await pq.config.delete(a.key);
    return { deleted: true };
  },
};

/** The `consume` op: handle `count` deliveries with their actions, stop, report them and the events. */
async function consume(pq, a) {
  const consumer = pq.consume(a.topic, a.group, {
    mode: a.mode,
    startFrom: a.startFrom,
    deadLetter: a.deadLetter,
    waitMs: 1000,
  });
  const events = [];
  for (const name of CONNECTION_EVENTS) consumer.on(name, () => events.push(name));
  const handled = [];
  let done;
  const finished = new Promise((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    if (handled.length >= a.count) return;
    const action = a.actions[Math.min(handled.length, a.actions.length - 1)];
    const entry = { messageId: msg.messageId, topic: msg.topic, partition: msg.partition, offset: msg.offset, data: msg.data, key: msg.key, attempt: msg.attempt };
    if (msg.fairnessKey !== null) entry.fairnessKey = msg.fairnessKey;
    handled.push(entry);
    if (action === 'ack') await msg.ack();
    else if (action === 'nack') await msg.nack(a.error);
    else if (action === 'extend+ack') {
      entry.extended = await msg.extend(30_000);
      await msg.ack();
    }
    if (handled.length === a.count) done();
  });
  const timeoutMs = a.timeoutMs ?? 20_000;
  let timer;
  try {
    await consumer.start();
    await Promise.race([
      finished,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`consume: ${handled.length} of ${a.count} messages in ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    await consumer.stop();
  }
  handled.sort((x, y) => x.partition - y.partition || x.offset - y.offset || x.attempt - y.attempt);
  return { messages: handled, events };
}

/** `count` publishes at once; what was stored, and how many HTTP requests carried them. */
async function publishConcurrently(pq, a) {
  let requests = 0;
  const realFetch = globalThis.fetch;
  globalThis.fetch = (url, init) => {
    if (init?.method === 'POST' && /\/messages(\/batch)?$/.test(new URL(url).pathname)) requests += 1;
    return realFetch(url, init);
  };
  let outcomes;
  try {
    const calls = Array.from({ length: a.count }, (_, n) => pq.publish(a.topic, { n }, { key: `k${n % a.keys}` }));
    outcomes = await Promise.allSettled(calls);
  } finally {
    globalThis.fetch = realFetch;
  }
  const stored = outcomes.map((o, n) => [n, o]).filter(([, o]) => o.status === 'fulfilled');
  const byKey = new Map();
  for (const [n, o] of stored) byKey.set(n % a.keys, [...(byKey.get(n % a.keys) ?? []), o.value.offset]);
  const ordered = [...byKey.values()].every((offsets) => offsets.every((o, i) => i === 0 || o > offsets[i - 1]));
  const distinct = new Set(stored.map(([, o]) => `${o.value.partition}:${o.value.offset}`)).size;
  return { stored: stored.length, distinct, ordered, requests };
}

/** A default consumer doing `work` for each message until `count` distinct messages; what it saw. */
async function consumeCounting(pq, a, work) {
  const consumer = pq.consume(a.topic, a.group, { startFrom: a.startFrom, ackTimeout: a.ackTimeout, deadLetter: a.deadLetter });
  const seen = new Map();
  const errors = [];
  consumer.on('error', (err) => errors.push(err));
  let done;
  const finished = new Promise((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    seen.set(msg.messageId, (seen.get(msg.messageId) ?? 0) + 1);
    await work(msg);
    if (seen.size >= a.count) done();
  });
  let timer;
  try {
    await consumer.start();
    await Promise.race([
      finished,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${seen.size} of ${a.count} messages in time; errors ${errors.map((e) => e.message)}`)), a.timeoutMs ?? 20_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    await consumer.stop();
  }
  const deliveries = [...seen.values()].reduce((x, y) => x + y, 0);
  const refused = errors.filter((e) => e.code === 'ACK_REJECTED').length;
  return { acked: seen.size, handled: seen.size, duplicates: deliveries - seen.size, refused };
}

/** The first message held `stallMs` (past its lease) before its ack; the rest acked at once. */
async function consumeWithStall(pq, a) {
  const flowControl = { maxMessages: a.maxMessages, maxLeaseExtension: milliseconds(a.maxLeaseExtension) };
  const consumer = pq.consume(a.topic, a.group, { startFrom: a.startFrom, ackTimeout: a.ackTimeout, flowControl });
  const seen = [];
  const errors = [];
  let staleAckRefused = false;
  consumer.on('error', (err) => errors.push(err));
  let done;
  const finished = new Promise((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    if (seen.length >= a.count) return;
    seen.push([msg.data, msg.attempt]);
    if (seen.length === 1) {
      await new Promise((resolve) => setTimeout(resolve, a.stallMs));
      try {
        await msg.ackWithResult();
      } catch (err) {
        if (!(err instanceof AckRejectedError)) throw err;
        staleAckRefused = err.message.includes('lease had ended');
      }
    } else {
      await msg.ack();
    }
    if (seen.length === a.count) done();
  });
  let timer;
  try {
    await consumer.start();
    await Promise.race([
      finished,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${seen.length} of ${a.count} messages in time: ${JSON.stringify(seen)}`)), a.timeoutMs ?? 20_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    await consumer.stop();
  }
  return { seen, staleAckRefused, leaseExpiredReported: errors.some((e) => e instanceof LeaseExpiredError) };
}

/** A duration as the API spells it (`"500ms"`, `"1s"`) in milliseconds, as the SDK takes it. */
function milliseconds(duration) {
  const [, amount, unit] = /^(\d+)(ms|s|m|h)$/.exec(duration);
  return Number(amount) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[unit];
}

/** `$word` → `word-<run>` in strings; a string that is exactly `@name` → the saved value. */
function rewrite(value, run, saved) {
  if (typeof value === 'string') {
    if (/^@\w+$/.test(value)) {
      const name = value.slice(1);
      assert.ok(name in saved, `nothing saved as ${name}`);
      return saved[name];
    }
    return value.replace(/\$([A-Za-z0-9]+)/g, (_, word) => `${word}-${run}`);
  }
  if (Array.isArray(value)) return value.map((v) => rewrite(v, run, saved));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, rewrite(v, run, saved)]));
  }
  return value;
}

/** The value at a dotted path (numeric parts index arrays). */
function dig(value, path) {
  return path.split('.').reduce((v, part) => (v == null ? undefined : v[part]), value);
}

/** Fail naming where and why when `actual` does not match the expectation `m`. */
function check(m, actual, where) {
  const why = mismatch(m, actual, '$');
  if (why) assert.fail(`${where}: ${why}\n  actual: ${JSON.stringify(actual)}`);
}

/** Why `value` does not match `m`, or null when it does. */
function mismatch(m, value, at) {
  if (Array.isArray(m)) {
    if (!Array.isArray(value) || value.length !== m.length) return `${at}: expected an array of ${m.length}, got ${JSON.stringify(value)}`;
    for (let i = 0; i < m.length; i++) {
      const why = mismatch(m[i], value[i], `${at}[${i}]`);
      if (why) return why;
    }
    return null;
  }
  if (m !== null && typeof m === 'object') {
    const keys = Object.keys(m);
    if (keys.length === 1 && keys[0].startsWith('$')) return matcher(keys[0], m[keys[0]], value, at);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return `${at}: expected an object, got ${JSON.stringify(value)}`;
    for (const key of keys) {
      if (!(key in value)) return `${at}.${key}: missing`;
      const why = mismatch(m[key], value[key], `${at}.${key}`);
      if (why) return why;
    }
    return null;
  }
  return m === value ? null : `${at}: expected ${JSON.stringify(m)}, got ${JSON.stringify(value)}`;
}

function matcher(kind, operand, value, at) {
  switch (kind) {
    case '$startsWith':
      return typeof value === 'string' && value.startsWith(operand) ? null : `${at}: ${JSON.stringify(value)} does not start with ${operand}`;
    case '$contains':
      return typeof value === 'string' && value.includes(operand) ? null : `${at}: ${JSON.stringify(value)} does not contain ${operand}`;
    case '$type':
      return typeOf(value) === operand ? null : `${at}: expected a ${operand}, got ${typeOf(value)}`;
    case '$includes':
      if (!Array.isArray(value)) return `${at}: expected an array`;
      for (const wanted of operand) {
        if (!value.some((v) => mismatch(wanted, v, at) === null)) return `${at}: nothing matches ${JSON.stringify(wanted)}`;
      }
      return null;
    case '$excludes':
      if (!Array.isArray(value)) return `${at}: expected an array`;
      for (const unwanted of operand) {
        if (value.some((v) => mismatch(unwanted, v, at) === null)) return `${at}: something matches ${JSON.stringify(unwanted)}`;
      }
      return null;
    case '$atMost':
      return typeof value === 'number' && value <= operand ? null : `${at}: ${JSON.stringify(value)} is not at most ${operand}`;
    case '$atLeast':
      return typeof value === 'number' && value >= operand ? null : `${at}: ${JSON.stringify(value)} is not at least ${operand}`;
    default:
      return `${at}: unknown matcher ${kind}`;
  }
}

function typeOf(value) {
  if (value === null) return 'null';
  return Array.isArray(value) ? 'array' : typeof value;
}
