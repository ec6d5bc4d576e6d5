/** `QueueCore`: the client object, publishing, health, and the entry points to every resource. */

import { randomUUID } from 'node:crypto';
import { RuntimeConfig } from './config.js';
import { Consumer, type ConsumeOptions } from './consumer.js';
import { QueueCoreError } from './errors.js';
import { type Logger, Transport } from './http.js';
import type { BatchResult, OutgoingMessage, PublishBatching, PublishOptions, PublishResult } from './models.js';
import { messageIdOf } from './models.js';
import { Publisher } from './publisher.js';
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
  /**
   * Where the SDK writes what it does, one line per event; `console` fits. By default warnings
   * (consumer errors nobody listens to) go to `console.warn` and nothing else is written.
   */
  logger?: Logger;
  /**
   * Fills the `{region}` placeholder of the base URL (`baseUrl` or `QUEUECORE_URL`), e.g.
   * `https://{region}.queuecore.example.com`; a base URL without it cannot take a region.
   */
  region?: string;
  /** Give every published message an idempotency key when none is given (default true). */
  idempotentPublish?: boolean;
  /** How concurrent `publish` calls share requests (linger 5 ms, 1000 messages, 1 MiB). */
  publishBatching?: PublishBatching;
}

/** The default logger: warnings and errors to the console, one line each; nothing else. */
export const DEFAULT_LOGGER: Logger = {
  warn: (message) => console.warn(message),
  error: (message) => console.error(message),
};

/** The base URL with its `{region}` placeholder filled; an error when they do not fit together. */
export function regionalUrl(base: string, region: string | undefined): string {
  const placeholder = base.includes('{region}');
  if (region === undefined) {
    if (placeholder) throw new Error(`the base URL ${base} has a {region} placeholder: pass region`);
    return base;
  }
  if (!/^[a-z0-9-]+$/.test(region)) throw new Error(`region must be lowercase letters, digits and '-', not ${JSON.stringify(region)}`);
  if (!placeholder) throw new Error(`region ${region} given, but the base URL ${base} has no {region} placeholder to fill`);
  return base.replaceAll('{region}', region);
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
  readonly config: RuntimeConfig;
  private readonly transport: Transport;
  private readonly idempotentPublish: boolean;
  private readonly publisher: Publisher;

  constructor(options: QueueCoreOptions = {}) {
    const apiKey = options.apiKey ?? process.env.QUEUECORE_API_KEY;
    if (!apiKey) throw new Error('no API key: pass apiKey or set QUEUECORE_API_KEY');
    this.baseUrl = regionalUrl(options.baseUrl ?? process.env.QUEUECORE_URL ?? DEFAULT_BASE_URL, options.region);
    this.idempotentPublish = options.idempotentPublish ?? true;
    this.transport = new Transport({
      apiKey,
      baseUrl: this.baseUrl,
      timeoutMs: options.timeout ?? DEFAULT_TIMEOUT_MS,
      maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
      logger: options.logger ?? DEFAULT_LOGGER,
      userAgent: `queuecore-sdk-typescript/${VERSION} node/${process.versions.node}`,
    });
    this.topics = new Topics(this.transport);
    this.offsets = new Offsets(this.transport);
    this.consumerGroups = new ConsumerGroups(this.transport, this.offsets);
    this.dlq = new DeadLetters(this.transport);
    this.config = new RuntimeConfig(this.transport);
    this.publisher = new Publisher(this.transport, options.publishBatching ?? {}, (topic, key, unknown) =>
      this.resolveUnknown(topic, key, unknown),
    );
  }

  /** Send the publishes waiting for their batch and wait for them (call before exiting). */
  async close(): Promise<void> {
    await this.publisher.flush();
  }

  /** `GET /healthz`: the API process answers. */
  health(): Promise<{ status: string }> {
    return this.transport.request('GET', '/healthz', { idempotent: true });
  }

  /** `GET /readyz`: PostgreSQL, S3 and Redis checks; UnavailableError when one fails. */
  ready(): Promise<Record<string, unknown>> {
    return this.transport.request('GET', '/readyz', { idempotent: true });
  }

  /**
   * Publish one message (any JSON value); resolves once it is durable. Calls made meanwhile go in
   * the same batch request (`publishBatching`); each gets its own result or its own error.
   */
  publish(topic: string, data: unknown, options: PublishOptions = {}): Promise<PublishResult> {
    const message = this.outgoing({ data, ...options });
    return this.publisher.publish(topic, message);
  }

  /** Where the message published with `idempotencyKey` is stored; NotFoundError when it is not. */
  async findPublished(topic: string, idempotencyKey: string): Promise<PublishResult> {
    const stored = await this.transport.request<Record<string, unknown>>(
      'GET',
      path('topics', topic, 'messages', 'by-idempotency-key', idempotencyKey),
      { idempotent: true },
    );
    return {
      messageId: messageIdOf(stored),
      offset: stored.offset as number,
      partition: stored.partition as number,
      timestamp: stored.timestamp as string,
      latency: 0,
      idempotencyKey,
    };
  }

  /** An unknown publish outcome settled by its key: where it was stored, or the error. */
  private async resolveUnknown(topic: string, key: string | null, unknown: QueueCoreError): Promise<PublishResult> {
    if (key === null) throw unknown;
    try {
      return await this.findPublished(topic, key);
    } catch {
      throw unknown;
    }
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
      timestamp: r.timestamp as string,
    }));
    return { count: answer.count, latency: answer.latency, results };
  }

  /** A batch item with a key, headers or idempotency key (a plain item is always data). */
  static message(message: OutgoingMessage): Outgoing {
    return new Outgoing(message);
  }

  /**
   * A consumer in `group`; it configures the group and joins on `start()`. The guide's form,
   * `consume(topic, { group, ... })`, is the same call.
   */
  consume(topic: string, group: string, options?: ConsumeOptions): Consumer;
  consume(topic: string, options: ConsumeOptions & { group: string }): Consumer;
  consume(topic: string, groupOrOptions: string | (ConsumeOptions & { group: string }), more: ConsumeOptions = {}): Consumer {
    const options = typeof groupOrOptions === 'string' ? { ...more, group: groupOrOptions } : groupOrOptions;
    const group = options.group;
    if (typeof group !== 'string' || group === '') throw new TypeError('consume needs a group');
    const { startFrom, ackTimeout, maxInFlight, deadLetter } = options;
    const settings = defined({ startFrom, ackTimeout, maxInFlight, deadLetter });
    const configure = async (): Promise<void> => {
      if (Object.keys(settings).length > 0) await this.consumerGroups.configure(topic, group, settings);
    };
    return new Consumer(this.transport, topic, group, options, { configure });
  }

  private outgoing(message: OutgoingMessage): OutgoingMessage {
    const wire: OutgoingMessage = { data: message.data };
    if (message.key !== undefined) wire.key = message.key;
    if (message.headers !== undefined && Object.keys(message.headers).length > 0) wire.headers = message.headers;
    if (message.fairnessKey !== undefined) wire.fairnessKey = message.fairnessKey;
    if (message.throttleKeys !== undefined) wire.throttleKeys = message.throttleKeys;
    const key = message.idempotencyKey ?? (this.idempotentPublish ? newIdempotencyKey() : undefined);
    if (key !== undefined) wire.idempotencyKey = key;
    return wire;
  }
}

/** A batch item carrying options, made by `QueueCore.message(...)`. */
export class Outgoing {
  constructor(readonly message: OutgoingMessage) {}
}
