/**
 * `node dist/bench.js --mode publish-batch|consume-ack --topic T --messages N --batch B`
 * (QUEUECORE_API_KEY / QUEUECORE_URL in the environment) prints `{"messages": N, "seconds": S}`.
 * `--mode keep-publish|keep-ack|keep-slow [--handler-ms M]` runs the keeping-up programs with
 * default settings (N concurrent publishes; a handler acking each of N; the same after M ms).
 *
 * publish-batch: N small messages in batches of B, one request after another.
 * consume-ack: a fresh group reads the topic from its start over the event stream; each message
 * is acked by its handler, B handlers at once (so acks go B to a request). N must be there.
 * `--delivery pull` consumes by long-poll pulls of B instead.
 */

import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { QueueCore } from './index.js';

async function publishBatch(pq: QueueCore, topic: string, count: number, batch: number): Promise<number> {
  const started = performance.now();
  for (let sent = 0; sent < count; sent += batch) {
    const size = Math.min(batch, count - sent);
    await pq.publishBatch(topic, Array.from({ length: size }, (_, i) => ({ n: sent + i, type: 'bench' })));
  }
  return (performance.now() - started) / 1000;
}

async function consumeAck(pq: QueueCore, topic: string, count: number, batch: number, mode: 'stream' | 'pull'): Promise<number> {
  const group = `bench-${randomBytes(4).toString('hex')}`;
  const consumer = pq.consume(topic, { group, startFrom: 'earliest', concurrency: batch, mode, batchSize: batch });
  let acked = 0;
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    await msg.ack();
    if (++acked === count) done();
  });
  consumer.on('error', (err) => console.error(`bench consumer error: ${err.message}`));
  const started = performance.now();
  await consumer.start();
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await consumer.stop();
  return seconds;
}

/** `count` concurrent `publish` calls (default settings): seconds and HTTP publish requests. */
async function keepPublish(topic: string, count: number): Promise<Record<string, number>> {
  let requests = 0;
  const realFetch = globalThis.fetch;
  globalThis.fetch = (url, init) => {
    if (init?.method === 'POST' && /\/messages(\/batch)?$/.test(new URL(String(url)).pathname)) requests += 1;
    return realFetch(url, init);
  };
  const pq = new QueueCore();
  const started = performance.now();
  await Promise.all(Array.from({ length: count }, (_, n) => pq.publish(topic, { n })));
  return { seconds: (performance.now() - started) / 1000, requests };
}

/** A default consumer whose handler (after `handlerMs`) acks each message, until `count` distinct ones. */
async function keepConsume(topic: string, count: number, handlerMs: number): Promise<Record<string, number>> {
  const pq = new QueueCore();
  const consumer = pq.consume(topic, 'keep', { startFrom: 'earliest' });
  const seen = new Map<string, number>();
  let refused = 0;
  consumer.on('error', (err) => {
    if ((err as { code?: string }).code === 'ACK_REJECTED') refused += ((err as { rejected?: unknown[] }).rejected ?? [1]).length;
  });
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    seen.set(msg.messageId, (seen.get(msg.messageId) ?? 0) + 1);
    if (handlerMs > 0) await new Promise((resolve) => setTimeout(resolve, handlerMs));
    await msg.ack();
    if (seen.size >= count) done();
  });
  const started = performance.now();
  await consumer.start();
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await consumer.stop();
  const deliveries = [...seen.values()].reduce((a, b) => a + b, 0);
  return { seconds, refused, duplicates: deliveries - seen.size };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string' },
      topic: { type: 'string' },
      messages: { type: 'string', default: '5000' },
      batch: { type: 'string', default: '100' },
      delivery: { type: 'string', default: 'stream' },
      'handler-ms': { type: 'string', default: '0' },
    },
  });
  const keeping = { 'keep-publish': true, 'keep-ack': true, 'keep-slow': true } as Record<string, boolean>;
  if (values.mode !== undefined && keeping[values.mode] && values.topic) {
    const count = Number(values.messages);
    const figures =
      values.mode === 'keep-publish'
        ? await keepPublish(values.topic, count)
        : await keepConsume(values.topic, count, values.mode === 'keep-slow' ? Number(values['handler-ms']) : 0);
    console.log(JSON.stringify({ messages: count, ...figures }));
    return;
  }
  const count = Number(values.messages);
  const batch = Number(values.batch);
  if (!values.topic || !(count > 0) || !(batch >= 1 && batch <= 1000)) {
    throw new Error('usage: bench.js --mode publish-batch|consume-ack --topic T --messages N --batch 1..1000');
  }
  const pq = new QueueCore();
  let seconds: number;
  if (values.mode === 'publish-batch') seconds = await publishBatch(pq, values.topic, count, batch);
  else if (values.mode === 'consume-ack') seconds = await consumeAck(pq, values.topic, count, batch, values.delivery === 'pull' ? 'pull' : 'stream');
  else throw new Error(`unknown --mode ${values.mode}`);
  console.log(JSON.stringify({ messages: count, seconds: Number(seconds.toFixed(4)) }));
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
