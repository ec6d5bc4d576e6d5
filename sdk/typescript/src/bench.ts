/**
 * `node dist/bench.js --mode publish-batch|consume-ack --topic T --messages N --batch B`
 * (QUEUECORE_API_KEY / QUEUECORE_URL in the environment) prints `{"messages": N, "seconds": S}`.
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

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string' },
      topic: { type: 'string' },
      messages: { type: 'string', default: '5000' },
      batch: { type: 'string', default: '100' },
      delivery: { type: 'string', default: 'stream' },
    },
  });
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
