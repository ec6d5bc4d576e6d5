/**
 * `publish` one message at a time, sent together: concurrent calls share batch requests.
 *
 * Each call joins its topic's waiting messages. They go in one request once `maxMessages` or
 * `maxBytes` are waiting, or `linger` ms after the first, whichever comes first. One request per
 * topic is in flight at a time, so the messages of one key keep their order; what arrives meanwhile
 * goes in the next request as soon as the answer is in.
 *
 * Each caller gets its own result or its own error. A lone message goes to `POST …/messages`,
 * several to `…/messages/batch`, which is atomic: when the server refuses a batch for a message's
 * content (400, 413, 422) nothing of it was stored, so it is split in halves and sent again until
 * the offending message stands alone. Idempotency keys make every repeat safe.
 */

import { QueueCoreError } from './errors.js';
import type { Transport } from './http.js';
import type { OutgoingMessage, PublishBatching, PublishResult } from './models.js';
import { messageIdOf } from './models.js';
import { path } from './resources.js';

const CONTENT_REFUSALS = new Set([400, 413, 422]);

/** Where an unknown outcome is settled by its idempotency key (or the error rethrown). */
export type Resolve = (topic: string, key: string | null, unknown: QueueCoreError) => Promise<PublishResult>;

interface Waiting {
  wire: OutgoingMessage;
  body: string;
  resolve: (result: PublishResult) => void;
  reject: (error: Error) => void;
}

interface TopicQueue {
  waiting: Waiting[];
  size: number;
  timer: NodeJS.Timeout | null;
  sending: Promise<void> | null;
}

/** Coalesces single publishes into batch requests, per topic. */
export class Publisher {
  private readonly linger: number;
  private readonly maxMessages: number;
  private readonly maxBytes: number;
  private readonly topics = new Map<string, TopicQueue>();

  constructor(
    private readonly transport: Transport,
    settings: PublishBatching,
    private readonly resolveUnknown: Resolve,
  ) {
    this.linger = settings.linger ?? 5;
    this.maxMessages = settings.maxMessages ?? 1000;
    this.maxBytes = settings.maxBytes ?? 1_048_576;
    if (!(this.linger >= 0 && this.linger <= 1000)) throw new RangeError('publishBatching.linger must be 0 to 1000 ms');
    if (!(this.maxMessages >= 1 && this.maxMessages <= 1000)) throw new RangeError('publishBatching.maxMessages must be 1 to 1000');
    if (!(this.maxBytes >= 1)) throw new RangeError('publishBatching.maxBytes must be positive');
  }

  /** Send `wire` with the messages published meanwhile; its own result or error. */
  publish(topic: string, wire: OutgoingMessage): Promise<PublishResult> {
    const body = JSON.stringify(wire);
    return new Promise((resolve, reject) => {
      let queue = this.topics.get(topic);
      if (queue === undefined) {
        queue = { waiting: [], size: 0, timer: null, sending: null };
        this.topics.set(topic, queue);
      }
      queue.waiting.push({ wire, body, resolve, reject });
      queue.size += Buffer.byteLength(body);
      this.kick(topic, queue);
    });
  }

  /** Send everything waiting now, and wait for the answers. */
  async flush(): Promise<void> {
    for (const [topic, queue] of this.topics) if (queue.sending === null) this.start(topic, queue);
    await Promise.allSettled([...this.topics.values()].map((q) => q.sending));
  }

  private kick(topic: string, queue: TopicQueue): void {
    if (queue.sending !== null) return; // its end sends what waits
    const full = queue.waiting.length >= this.maxMessages || queue.size >= this.maxBytes;
    if (full || this.linger === 0) this.start(topic, queue);
    else queue.timer ??= setTimeout(() => this.start(topic, queue), this.linger);
  }

  private start(topic: string, queue: TopicQueue): void {
    if (queue.timer !== null) clearTimeout(queue.timer);
    queue.timer = null;
    if (queue.sending === null && queue.waiting.length > 0) queue.sending = this.drain(topic, queue);
  }

  private async drain(topic: string, queue: TopicQueue): Promise<void> {
    try {
      while (queue.waiting.length > 0) await this.send(topic, this.take(queue));
    } finally {
      queue.sending = null;
      if (queue.waiting.length === 0) this.topics.delete(topic);
    }
  }

  /** The oldest waiting messages that fit one request. */
  private take(queue: TopicQueue): Waiting[] {
    const batch: Waiting[] = [];
    let size = 0;
    while (queue.waiting.length > 0 && batch.length < this.maxMessages) {
      const bytes = Buffer.byteLength(queue.waiting[0]!.body);
      if (batch.length > 0 && size + bytes > this.maxBytes) break;
      batch.push(queue.waiting.shift()!);
      size += bytes;
    }
    queue.size -= size;
    return batch;
  }

  /** One request for `batch`; every caller settled, whatever happens. */
  private async send(topic: string, batch: Waiting[]): Promise<void> {
    try {
      if (batch.length === 1) await this.sendOne(topic, batch[0]!);
      else await this.sendMany(topic, batch);
    } catch (error) {
      if (batch.length > 1 && error instanceof QueueCoreError && CONTENT_REFUSALS.has(error.status ?? 0)) {
        const half = Math.floor(batch.length / 2);
        await this.send(topic, batch.slice(0, half));
        await this.send(topic, batch.slice(half));
        return;
      }
      for (const item of batch) item.reject(error as Error);
    }
  }

  private async sendOne(topic: string, item: Waiting): Promise<void> {
    const key = item.wire.idempotencyKey ?? null;
    let answer: Record<string, unknown>;
    try {
      answer = await this.transport.request('POST', path('topics', topic, 'messages'), { body: item.body, idempotent: key !== null });
    } catch (error) {
      if (!isUnknown(error)) throw error;
      return this.settleUnknown(topic, item, error);
    }
    item.resolve(result(answer, answer.latency as number, key));
  }

  private async sendMany(topic: string, batch: Waiting[]): Promise<void> {
    const body = `{"messages":[${batch.map((item) => item.body).join(',')}]}`;
    const idempotent = batch.every((item) => item.wire.idempotencyKey !== undefined);
    let answer: { latency: number; results: Record<string, unknown>[] };
    try {
      answer = await this.transport.request('POST', path('topics', topic, 'messages', 'batch'), { body, idempotent });
    } catch (error) {
      if (!isUnknown(error)) throw error;
      for (const item of batch) await this.settleUnknown(topic, item, error);
      return;
    }
    batch.forEach((item, i) => item.resolve(result(answer.results[i]!, answer.latency, item.wire.idempotencyKey ?? null)));
  }

  /** A message whose outcome is unknown, looked up by its idempotency key. */
  private async settleUnknown(topic: string, item: Waiting, unknown: QueueCoreError): Promise<void> {
    try {
      item.resolve(await this.resolveUnknown(topic, item.wire.idempotencyKey ?? null, unknown));
    } catch (error) {
      item.reject(error as Error);
    }
  }
}

function isUnknown(error: unknown): error is QueueCoreError {
  return error instanceof QueueCoreError && error.code === 'PUBLISH_OUTCOME_UNKNOWN';
}

function result(stored: Record<string, unknown>, latency: number, key: string | null): PublishResult {
  return {
    messageId: messageIdOf(stored),
    offset: stored.offset as number,
    partition: stored.partition as number,
    timestamp: stored.timestamp as string,
    latency,
    idempotencyKey: key,
  };
}
