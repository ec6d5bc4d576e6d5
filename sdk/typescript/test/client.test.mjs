// The SDK against the real stack: topics, publishing, consuming, groups, offsets, DLQ, errors.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AuthenticationError,
  ConflictError,
  ConnectionError,
  NotFoundError,
  QueueCore,
  QueueCoreError,
  ValidationError,
} from '../dist/index.js';
import { client, collect, eventually, started, unique } from './helpers.mjs';

test('topics are created, listed, described, updated and deleted', async (t) => {
  const pq = client();
  const name = unique('orders');
  const topic = await pq.topics.create({ name, partitions: 2, retention: '1d', delivery: 'at-least-once' });
  assert.equal(topic.name, name);
  assert.equal(topic.partitions, 2);
  assert.equal(topic.delivery, 'at-least-once');
  assert.ok(topic.id);
  assert.ok((await pq.topics.list()).some((t) => t.name === name));
  const described = await pq.topics.describe(name);
  assert.equal(described.stats.depth, 0);
  assert.equal((await pq.topics.update(name, { partitions: 3 })).partitions, 3);
  await assert.rejects(pq.topics.create({ name }), (err) => err instanceof ConflictError && err.code === 'TOPIC_EXISTS');
  await pq.topics.delete(name);
  await assert.rejects(pq.topics.describe(name), (err) => err instanceof NotFoundError && err.status === 404);
});

test('errors are typed, with code, status and request id', async (t) => {
  const pq = client();
  const err = await pq.topics.describe(unique('missing')).catch((e) => e);
  assert.ok(err instanceof QueueCoreError);
  assert.equal(err.code, 'TOPIC_NOT_FOUND');
  assert.equal(err.status, 404);
  assert.match(err.requestId, /^req_/);
  const invalid = await pq.topics.create({ name: unique('bad'), partitions: 0 }).catch((e) => e);
  assert.ok(invalid instanceof ValidationError, String(invalid));
  const stranger = new QueueCore({ apiKey: 'pq_live_sk_' + 'x'.repeat(32), maxRetries: 0 });
  await assert.rejects(stranger.topics.list(), AuthenticationError);
});

test('a connection that cannot be made is retried, then fails as ConnectionError', async (t) => {
  const pq = new QueueCore({ apiKey: 'pq_live_sk_x', baseUrl: 'http://127.0.0.1:9', maxRetries: 1 });
  const started = Date.now();
  const err = await pq.health().catch((e) => e);
  assert.ok(err instanceof ConnectionError, String(err));
  assert.equal(err.code, 'CONNECTION_ERROR');
  assert.equal(err.status, null);
  assert.ok(Date.now() - started < 5_000);
});

test('health and readiness answer', async (t) => {
  const pq = client();
  assert.equal((await pq.health()).status, 'ok');
  assert.ok(await pq.ready());
});

test('publish is idempotent by default: the same key is stored once', async (t) => {
  const pq = client();
  const name = unique('pub');
  await pq.topics.create({ name, partitions: 1 });
  const first = await pq.publish(name, { type: 'order.created', amount: 9900 }, { key: 'ord_1' });
  assert.match(first.idempotencyKey, /^sdk_[0-9a-f]{32}$/);
  assert.equal(first.partition, 0);
  assert.equal(typeof first.latency, 'number');
  assert.ok(first.messageId);
  const again = await pq.publish(name, { type: 'order.created', amount: 9900 }, { idempotencyKey: first.idempotencyKey });
  assert.equal(again.offset, first.offset);
  assert.equal(again.messageId, first.messageId);
  const plain = new QueueCore({ idempotentPublish: false });
  assert.equal((await plain.publish(name, 1)).idempotencyKey, null);
  assert.equal((await pq.topics.describe(name)).stats.depth, 2);
});

test('a batch is stored as one, in order, with keys and headers', async (t) => {
  const pq = client();
  const name = unique('batch');
  await pq.topics.create({ name, partitions: 1 });
  const batch = await pq.publishBatch(name, [
    { type: 'order.created', amount: 4500 },
    QueueCore.message({ data: { type: 'order.updated' }, key: 'ord_1', headers: { source: 'web' } }),
    'plain text',
  ]);
  assert.equal(batch.count, 3);
  assert.deepEqual(batch.results.map((r) => r.offset), [0, 1, 2]);
  await assert.rejects(pq.publishBatch(name, []), RangeError);
  const consumer = pq.consume(name, { group: unique('g'), startFrom: 'earliest' });
  const got = collect(consumer, 3);
  await started(t, consumer);
  const messages = await got;
  await consumer.stop();
  assert.deepEqual(messages.map((m) => m.data), [{ type: 'order.created', amount: 4500 }, { type: 'order.updated' }, 'plain text']);
  assert.equal(messages[1].key, 'ord_1');
  assert.deepEqual(messages[1].headers, { source: 'web' });
  assert.deepEqual(messages.map((m) => m.messageId), batch.results.map((r) => r.messageId));
});

for (const mode of ['stream', 'pull']) {
  test(`a ${mode} consumer receives, acks, emits connected, and leaves the group on stop`, async (t) => {
    const pq = client();
    const name = unique(mode);
    const group = unique('g');
    await pq.topics.create({ name, partitions: 2 });
    const consumer = pq.consume(name, { group, startFrom: 'earliest', mode, waitMs: 1000 });
    const events = [];
    consumer.on('connected', (info) => events.push(['connected', info]));
    const got = collect(consumer, 5, 20_000, (msg) => msg.ackWithResult()); // acks landed before the lag is read
    await started(t, consumer);
    await Promise.all([1, 2, 3, 4, 5].map((n) => pq.publish(name, { n }, { key: `k${n}` })));
    const messages = await got;
    assert.deepEqual(messages.map((m) => m.data.n).sort(), [1, 2, 3, 4, 5]);
    assert.ok(messages.every((m) => m.settled && m.attempt === 1 && m.topic === name));
    assert.equal(events[0][0], 'connected');
    assert.equal(events[0][1].mode, mode);
    assert.deepEqual([...events[0][1].assignments].sort(), [0, 1]);
    const described = await pq.consumerGroups.describe(name, group);
    assert.equal(described.consumers, 1);
    assert.equal(described.lag, 0);
    await consumer.stop();
    assert.equal((await pq.consumerGroups.describe(name, group)).consumers, 0);
  });
}

test('nack retries, then dead-letters; the DLQ is inspected and replayed', async (t) => {
  const pq = client();
  const name = unique('dlq');
  const group = unique('g');
  await pq.topics.create({ name, partitions: 1 });
  const consumer = pq.consume(name, {
    group,
    startFrom: 'earliest',
    deadLetter: { maxRetries: 2, retryDelay: '100ms', alertThreshold: 100 },
  });
  const attempts = [];
  const deadLettered = [];
  consumer.on('message', async (msg) => {
    attempts.push(msg.attempt);
    deadLettered.push(await msg.nack('card declined'));
  });
  await started(t, consumer);
  const { messageId } = await pq.publish(name, { order: 1 });
  await eventually(() => deadLettered.includes(true), 20_000, 'dead-lettered');
  await consumer.stop();
  assert.deepEqual(attempts, [1, 2, 3]); // the first delivery and two retries
  const group1 = await pq.consumerGroups.describe(name, group);
  assert.equal(group1.config.deadLetter.maxRetries, 2);
  const page = await pq.dlq.inspect(name, { group, limit: 10 });
  assert.equal(page.depth, 1);
  assert.equal(page.messages[0].messageId, messageId);
  assert.equal(page.messages[0].error, 'card declined');
  assert.deepEqual(page.messages[0].data, { order: 1 });
  assert.equal(await pq.dlq.replay(name, group, { messageId }), 1);
  assert.equal((await pq.dlq.inspect(name, { group })).depth, 0);
  assert.equal(await pq.dlq.replayAll(name, group), 0);
  const summaries = await pq.consumerGroups.list(name);
  assert.deepEqual(summaries.map((g) => g.name), [group]);
});

test('a handler that throws has its message nacked with the error text', async (t) => {
  const pq = client();
  const name = unique('throws');
  const group = unique('g');
  await pq.topics.create({ name, partitions: 1 });
  const consumer = pq.consume(name, { group, startFrom: 'earliest', deadLetter: { maxRetries: 1, retryDelay: '100ms' } });
  const errors = [];
  consumer.on('error', (err) => errors.push(err));
  consumer.on('message', async () => {
    throw new Error('boom');
  });
  await started(t, consumer);
  await pq.publish(name, 'x');
  const page = await eventually(async () => {
    const p = await pq.dlq.inspect(name, { group });
    return p.depth === 1 && p;
  }, 20_000, 'dead letter');
  await consumer.stop();
  assert.equal(page.messages[0].error, 'Error: boom');
  assert.equal(errors[0].message, 'boom');
});

test('extend keeps a lease; an unacked message comes back after the ack timeout', async (t) => {
  const pq = client();
  const name = unique('extend');
  const group = unique('g');
  await pq.topics.create({ name, partitions: 1 });
  const consumer = pq.consume(name, { group, startFrom: 'earliest', ackTimeout: '10s', mode: 'pull', waitMs: 500 });
  const seen = [];
  consumer.on('message', async (msg) => {
    seen.push(msg.attempt);
    if (msg.attempt === 1) {
      assert.equal(await msg.extend(1000), true); // the lease now ends 1 s from now, not 10 s
      return; // not acked: delivered again once it ends
    }
    await msg.ack();
  });
  await started(t, consumer);
  await pq.publish(name, 'later');
  const published = Date.now();
  await eventually(() => seen.length >= 2, 8_000, 'redelivery before the 10 s ack timeout');
  await consumer.stop();
  assert.deepEqual(seen.slice(0, 2), [1, 2]);
  assert.ok(Date.now() - published < 8_000);
});

test('offsets are read, sought and reset; a reset needs the group empty', async (t) => {
  const pq = client();
  const name = unique('offsets');
  const group = unique('g');
  await pq.topics.create({ name, partitions: 1 });
  await pq.publishBatch(name, [1, 2, 3, 4, 5]);
  await pq.consumerGroups.configure(name, group, { startFrom: 'earliest' });
  assert.deepEqual(await pq.offsets.get(name, { group, partition: 0 }), { partition: 0, current: 0, latest: 5, lag: 5 });
  assert.equal((await pq.offsets.seek(name, { group, partition: 0, offset: 3 })).current, 3);
  const all = await pq.offsets.get(name, { group });
  assert.deepEqual(all.map((p) => p.current), [3]);
  assert.equal((await pq.offsets.reset(name, { group, to: 'latest' }))[0].current, 5);
  assert.equal((await pq.consumerGroups.resetOffsets(name, group, { to: 'earliest' }))[0].current, 0);
  const consumer = pq.consume(name, { group });
  const got = collect(consumer, 5);
  await started(t, consumer);
  await got;
  await assert.rejects(
    pq.offsets.reset(name, { group, to: 'earliest' }),
    (err) => err instanceof ConflictError && err.code === 'GROUP_HAS_ACTIVE_MEMBERS',
  );
  await consumer.stop();
});

test('a second member joining rebalances the first', async (t) => {
  const pq = client();
  const name = unique('rebalance');
  const group = unique('g');
  await pq.topics.create({ name, partitions: 2 });
  const first = pq.consume(name, { group, startFrom: 'earliest', sessionTimeout: '6s' });
  const rebalanced = [];
  first.on('rebalanced', (info) => rebalanced.push(info));
  first.on('message', (msg) => msg.ack());
  await started(t, first);
  assert.equal(first.assignments.length, 2);
  const second = pq.consume(name, { group });
  second.on('message', (msg) => msg.ack());
  await started(t, second);
  await eventually(() => rebalanced.length > 0, 15_000, 'rebalanced');
  assert.equal(first.assignments.length, 1);
  await Promise.all([first.stop(), second.stop()]);
});

test('the bench program publishes and consumes N messages and prints one JSON line', async (t) => {
  const { execFileSync } = await import('node:child_process');
  const pq = client();
  const name = unique('bench');
  await pq.topics.create({ name, partitions: 2 });
  const bench = new URL('../dist/bench.js', import.meta.url).pathname;
  for (const mode of ['publish-batch', 'consume-ack']) {
    const out = execFileSync(process.execPath, [bench, '--mode', mode, '--topic', name, '--messages', '250', '--batch', '100'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    const line = JSON.parse(out.trim());
    assert.equal(line.messages, 250);
    assert.ok(line.seconds > 0);
  }
  assert.equal((await pq.topics.describe(name)).stats.depth, 250);
  const [summary] = await pq.consumerGroups.list(name);
  assert.equal(summary.lag, 0); // the bench group acked all 250
});
