// Compiled (never run) by types.test.mjs: the guide's calls type-check against the published
// declarations, and misuse does not.
import {
  type DeadLetterPage,
  type Group,
  type Message,
  type PartitionOffset,
  type PublishResult,
  type PushMessage,
  type PushTestResult,
  QueueCore,
  QueueCoreError,
  verifyPush,
} from '@queuecore/sdk';

export async function guide(pq: QueueCore): Promise<void> {
  const topic = await pq.topics.create({ name: 'order.events', retention: '30d', delivery: 'exactly-once', partitions: 6 });
  const name: string = topic.name;
  const result: PublishResult = await pq.publish(name, { type: 'order.created' }, { key: 'ord_1' });
  const offset: number = result.offset;
  const batch = await pq.publishBatch(name, [{ a: 1 }, QueueCore.message({ data: 2, key: 'k' })]);
  const latency: number = batch.latency + offset;
  const consumer = pq.consume(name, { group: 'g', startFrom: 'latest', deadLetter: { maxRetries: 5, retryDelay: '30s', alertThreshold: 100 } });
  consumer.on('message', async (msg: Message) => {
    const partition: number = msg.partition + latency;
    if (partition < 0) await msg.nack('why');
    await msg.extend(60);
    await msg.ack();
  });
  consumer.on('error', (err: Error) => console.error(err.message));
  consumer.on('rebalanced', ({ generationId, assignments }) => console.log(generationId + assignments.length));
  await consumer.start();
  await consumer.stop();
  const group: Group = await pq.consumerGroups.describe(name, 'g');
  const one: PartitionOffset = await pq.offsets.get(name, { group: group.name, partition: 0 });
  const all: PartitionOffset[] = await pq.offsets.get(name, { group: 'g' });
  await pq.offsets.seek(name, { group: 'g', partition: 0, offset: one.current + all.length });
  await pq.consumerGroups.resetOffsets(name, 'g', { to: 'earliest' });
  const page: DeadLetterPage = await pq.dlq.inspect(name, { group: 'g', limit: 10 });
  await pq.dlq.replay(name, 'g', { messageId: page.messages[0]?.messageId ?? '' });
  await pq.dlq.replayAll(name, 'g');
  try {
    await pq.health();
  } catch (err) {
    if (err instanceof QueueCoreError) console.log(err.code, err.status, err.requestId);
  }
}

export async function push(pq: QueueCore, headers: Record<string, string>, body: Buffer): Promise<void> {
  const group = await pq.consumerGroups.configure('order.events', 'fn', {
    push: { endpoint: 'https://fn.example.com/queuecore', maxInFlight: 10, timeout: 30_000, ordered: true },
  });
  const secret: string | undefined = group.pushSecret;
  const hint: string | undefined = group.config.push?.secretHint;
  const tested: PushTestResult = await pq.consumerGroups.testPush('order.events', 'fn');
  await pq.consumerGroups.configure('order.events', 'fn', { rotateSecret: true });
  await pq.consumerGroups.configure('order.events', 'fn', { push: null });
  const message: PushMessage = verifyPush(secret ?? '', headers, body, { toleranceMs: 60_000 });
  console.log(hint, tested.delivered, tested.statusCode, message.messageId, message.event);
  // @ts-expect-error a push endpoint is required
  await pq.consumerGroups.configure('order.events', 'fn', { push: { maxInFlight: 5 } });
}

export function construct(): QueueCore {
  return new QueueCore({ apiKey: process.env.QUEUECORE_API_KEY, region: 'us-east-1', timeout: 5000, maxRetries: 3, logger: console });
}

export async function misuse(pq: QueueCore): Promise<void> {
  // @ts-expect-error timeout is a number of milliseconds
  new QueueCore({ timeout: '5s' });
  // @ts-expect-error a topic is created from options, not a bare name
  await pq.topics.create('order.events');
  // @ts-expect-error a consumer needs its group
  pq.consume('order.events', { startFrom: 'latest' });
  // @ts-expect-error startFrom is earliest or latest
  pq.consume('order.events', { group: 'g', startFrom: 'middle' });
  // @ts-expect-error no such event
  pq.consume('order.events', { group: 'g' }).on('mesage', () => undefined);
}
