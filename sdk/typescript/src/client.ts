/** `QueueCore`: the client object, publishing, health, and the entry points to every resource. */

import { randomUUID } from 'node:crypto';
import { Consumer, type ConsumeOptions } from './consumer.js';
import { type Logger, Transport } from './http.js';
import type { BatchResult, OutgoingMessage, PublishOptions, PublishResult } from './models.js';
import { messageIdOf } from './models.js';
import { ConsumerGroups, DeadLetters, Offsets, Topics, defined, path } from './resources.js';

export const VERSION = '0.1.0';
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';
export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_RETRIES = 3;
export const MAX_BATCH = 1000;

/** `new QueueCore(options)`; every option is optional. */
export interface QueueCoreOptions {
  /** Default: `process.env.QUEUECORE_API_KEY`. */
  apiKey?: string;
  /** Default: `process.env.QUEUECORE_URL`, else `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** Per-request timeout in ms (default 30000). */
  timeout?: number;
  /** Retries of one call where a retry is safe (default 3). */
  maxRetries?: number;
  /** Receives retries, rejoins and consumer errors nobody listens to; `console` fits. */
  logger?: Logger;
  /** Accepted as in the guide's examples; a self-hosted QueueCore is where `baseUrl` says. */
  region?: string;
  /** Give every published message an idempotency key when none is given (default true). */
  idempotentPublish?: boolean;
}

/** A fresh idempotency key for one message: `sdk_` + 32 hex characters. */
export function newIdempotencyKey(): string {
  return `sdk_${randomUUID().replace(/-/g, '')}`;
}

/** A client of one QueueCore environment (the API key's). */
export class QueueCore {
  readonly baseUrl: string;
  readonly topics: Topics;
  readonly offsets: Offsets;
  readonly consumerGroups: ConsumerGroups;
  readonly dlq: DeadLetters;
  private readonly transport: Transport;
  private readonly idempotentPublish: boolean;

  constructor(options: QueueCoreOptions = {}) {
    const apiKey = options.apiKey ?? process.env.QUEUECORE_API_KEY;
    if (!apiKey) throw new Error('no API key: pass apiKey or set QUEUECORE_API_KEY');
    this.baseUrl = options.baseUrl ?? process.env.QUEUECORE_URL ?? DEFAULT_BASE_URL;
    this.idempotentPublish = options.idempotentPublish ?? true;
    this.transport = new Transport({
      apiKey,
      baseUrl: this.baseUrl,
      timeoutMs: options.timeout ?? DEFAULT_TIMEOUT_MS,
      maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
      logger: options.logger ?? {},
      userAgent: `queuecore-sdk-typescript/${VERSION} node/${process.versions.node}`,
    });
    this.topics = new Topics(this.transport);
    this.offsets = new Offsets(this.transport);
    this.consumerGroups = new ConsumerGroups(this.transport, this.offsets);
    this.dlq = new DeadLetters(this.transport);
  }

  /** `GET /healthz`: the API process answers. */
  health(): Promise<{ status: string }> {
    return this.transport.request('GET', '/healthz', { idempotent: true });
  }

  /** `GET /readyz`: PostgreSQL, S3 and Redis checks; UnavailableError when one fails. */
  ready(): Promise<Record<string, unknown>> {
    return this.transport.request('GET', '/readyz', { idempotent: true });
  }

  /** Publish one message (any JSON value); resolves once it is durable. */
  async publish(topic: string, data: unknown, options: PublishOptions = {}): Promise<PublishResult> {
    const message = this.outgoing({ data, ...options });
    const answer = await this.transport.request<Record<string, unknown>>('POST', path('topics', topic, 'messages'), {
      json: message,
      idempotent: message.idempotencyKey !== undefined,
    });
    return {
      messageId: messageIdOf(answer),
      offset: answer.offset as number,
      partition: answer.partition as number,
      timestamp: answer.timestamp as string,
      latency: answer.latency as number,
      idempotencyKey: message.idempotencyKey ?? null,
    };
  }

  /**
   * Publish up to 1000 messages atomically: all get offsets in one commit, or none.
   * Each item is the message's data, unless `{ message: OutgoingMessage }` wrapping is used via
   * `QueueCore.message(...)` to give a key, headers or idempotency key.
   */
  async publishBatch(topic: string, messages: readonly unknown[]): Promise<BatchResult> {
    const wire = messages.map((item) => this.outgoing(item instanceof Outgoing ? item.message : { data: item }));
    if (wire.length < 1 || wire.length > MAX_BATCH) throw new RangeError(`a batch holds 1 to ${MAX_BATCH} messages, not ${wire.length}`);
    const answer = await this.transport.request<{ count: number; latency: number; results: Record<string, unknown>[] }>(
      'POST',
      path('topics', topic, 'messages', 'batch'),
      { json: { messages: wire }, idempotent: wire.every((m) => m.idempotencyKey !== undefined) },
    );
    const results = answer.results.map((r) => ({
      messageId: messageIdOf(r),
      offset: r.offset as number,
      partition: r.partition as number,
    }));
    return { count: answer.count, latency: answer.latency, results };
  }

  /** A batch item with a key, headers or idempotency key (a plain item is always data). */
  static message(message: OutgoingMessage): Outgoing {
    return new Outgoing(message);
  }

  /** A consumer in `options.group`; it configures the group and joins on `start()`. */
  consume(topic: string, options: ConsumeOptions): Consumer {
    const { startFrom, ackTimeout, maxInFlight, deadLetter } = options;
    const settings = defined({ startFrom, ackTimeout, maxInFlight, deadLetter });
    const configure = async (): Promise<void> => {
      if (Object.keys(settings).length > 0) await this.consumerGroups.configure(topic, options.group, settings);
    };
    return new Consumer(this.transport, topic, options, { configure });
  }

  private outgoing(message: OutgoingMessage): OutgoingMessage {
    const wire: OutgoingMessage = { data: message.data };
    if (message.key !== undefined) wire.key = message.key;
    if (message.headers !== undefined && Object.keys(message.headers).length > 0) wire.headers = message.headers;
    const key = message.idempotencyKey ?? (this.idempotentPublish ? newIdempotencyKey() : undefined);
    if (key !== undefined) wire.idempotencyKey = key;
    return wire;
  }
}

/** A batch item carrying options, made by `QueueCore.message(...)`. */
export class Outgoing {
  constructor(readonly message: OutgoingMessage) {}
}
