/**
 * Consuming in a group: membership, heartbeats, SSE push (long-poll pull as the fallback),
 * ack / nack / extend, and a graceful stop that leaves the group.
 *
 * A consumer joins on `start()` and heartbeats every `heartbeatIntervalMs`; told `shouldRejoin`
 * (a new generation) it rejoins with its member id and emits `rebalanced`. A member the server
 * reports gone (`404 MEMBER_NOT_FOUND`: evicted after a pause longer than its session timeout)
 * is replaced by a fresh join; messages received under the old member are dropped, because
 * their leases ended with it and the group delivers them again. After an outage the consumer
 * heartbeats before it reconnects, so a member the server evicted meanwhile rejoins at once.
 *
 * A pull or a stream is never retried blindly: a delivery whose answer is lost has still leased
 * its messages to this member. They come back after the group's ack timeout as `attempt + 1`.
 */

import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import {
  AckRejectedError,
  ConnectionError,
  NotFoundError,
  QueueCoreError,
  RateLimitedError,
  ServerError,
  errorFromEvent,
} from './errors.js';
import { type Transport, backoffMs, sleep } from './http.js';
import { type DeadLetterPolicy, type Duration, type Membership, type StartFrom, durationWire, messageIdOf } from './models.js';
import { groupPath } from './resources.js';
import { SseParser } from './sse.js';

export const STREAM_READ_TIMEOUT_MS = 45_000; // the server writes at least every 15 s on an idle stream
export const STOP_TIMEOUT_MS = 30_000; // how long stop() waits for running handlers
const MAX_BATCH_SIZE = 1000;
const MAX_WAIT_MS = 30_000;
const ACK_BATCH = 100;
const MEMBER_GONE = 'MEMBER_NOT_FOUND';
const QUEUECORE_404 = new Set([MEMBER_GONE, 'GROUP_NOT_FOUND', 'TOPIC_NOT_FOUND']);

/** `pq.consume(topic, options)`. */
export interface ConsumeOptions {
  /** The consumer group to join. */
  group: string;
  /** Group settings applied before joining (admin scope); those not given are kept. */
  startFrom?: StartFrom;
  ackTimeout?: Duration;
  maxInFlight?: number;
  deadLetter?: DeadLetterPolicy;
  /** This member's session timeout. */
  sessionTimeout?: Duration;
  /** `'stream'` (the default): Server-Sent Events, falling back to `'pull'` (long-poll) when unavailable. */
  mode?: 'stream' | 'pull';
  /** Messages per pull (pull mode). */
  batchSize?: number;
  /** How long a pull waits for a message, in ms (pull mode). */
  waitMs?: number;
  /** Handlers run at once (1: one message at a time, in order). */
  concurrency?: number;
  /** How this member is named in `describe` (default `hostname:pid`). */
  clientId?: string;
}

/** What `connected`, `rebalanced` and `reconnecting` carry. */
export interface ConnectionInfo {
  memberId: string;
  generationId: number;
  assignments: number[];
  mode: 'stream' | 'pull';
}

/** The consumer's events and their arguments. */
export interface ConsumerEvents {
  message: [message: Message];
  error: [error: Error];
  connected: [info: ConnectionInfo];
  disconnected: [error: QueueCoreError];
  reconnecting: [retry: { attempt: number; delayMs: number }];
  rebalanced: [info: ConnectionInfo];
  stopped: [];
}

interface WireMessage {
  id?: string;
  messageId?: string;
  topic: string;
  partition: number;
  offset: number;
  data: unknown;
  key: string | null;
  headers: Record<string, string>;
  timestamp: string;
  attempt: number;
  ackId: string;
  encoding?: string;
}

/** A message leased to this consumer: settle it with `ack()` or `nack()`. */
export class Message<T = unknown> {
  readonly id: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly data: T;
  readonly key: string | null;
  readonly headers: Record<string, string>;
  readonly timestamp: string;
  /** 1 on first delivery, then one more per redelivery. */
  readonly attempt: number;
  readonly ackId: string;
  /** `"base64"` when `data` is the base64 of a non-JSON value a Kafka client produced; else null. */
  readonly encoding: string | null;
  /** The member this message was leased to. */
  readonly memberId: string;
  private done = false;

  constructor(
    wire: WireMessage,
    memberId: string,
    private readonly consumer: Consumer,
  ) {
    this.id = messageIdOf(wire as unknown as Record<string, unknown>);
    this.topic = wire.topic;
    this.partition = wire.partition;
    this.offset = wire.offset;
    this.data = wire.data as T;
    this.key = wire.key ?? null;
    this.headers = wire.headers ?? {};
    this.timestamp = wire.timestamp;
    this.attempt = wire.attempt;
    this.ackId = wire.ackId;
    this.encoding = wire.encoding ?? null;
    this.memberId = memberId;
  }

  /** The same as `id`. */
  get messageId(): string {
    return this.id;
  }

  /** Whether it was acked or nacked through this object. */
  get settled(): boolean {
    return this.done;
  }

  /** Mark the message done; AckRejectedError when its lease expired or was superseded. */
  async ack(): Promise<void> {
    await this.consumer.ackId(this.ackId);
    this.done = true;
  }

  /** Fail it: retried after `retryDelay · 2^(attempt-1)`; resolves true when it was dead-lettered. */
  async nack(error?: string, options: { retryDelay?: Duration } = {}): Promise<boolean> {
    const dead = await this.consumer.nackId(this.ackId, error, options.retryDelay);
    this.done = true;
    return dead;
  }

  /** Keep the lease `seconds` from now; false when it had already ended. */
  async extend(seconds = 30): Promise<boolean> {
    const extended = await this.consumer.extendIds([this.ackId], seconds);
    return extended.includes(this.ackId);
  }
}

/** Hooks the client gives a consumer (to configure its group before joining). */
export interface ConsumerHooks {
  configure(): Promise<void>;
}

interface PendingAck {
  resolve: () => void;
  reject: (error: Error) => void;
}

/** A member of a consumer group: `on('message', …)`, then `await start()`; `await stop()` to leave. */
export class Consumer extends EventEmitter {
  readonly topic: string;
  readonly group: string;
  readonly clientId: string;
  private mode: 'stream' | 'pull';
  private readonly batchSize: number;
  private readonly waitMs: number;
  private readonly concurrency: number;
  private membership: Membership | null = null;
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private readonly stopping = new AbortController();
  private streamAbort: AbortController | null = null;
  private loop: Promise<void> | null = null;
  private heartbeats: Promise<void> | null = null;
  private joining: Promise<void> | null = null;
  private stopped: Promise<void> | null = null;
  private connected = false;
  private failures = 0;
  private readonly running = new Set<Promise<void>>();
  private acks = new Map<string, PendingAck[]>();
  private ackFlush: Promise<void> | null = null;

  constructor(
    private readonly transport: Transport,
    topic: string,
    private readonly options: ConsumeOptions,
    private readonly hooks: ConsumerHooks,
  ) {
    super();
    this.topic = topic;
    this.group = options.group;
    this.mode = options.mode ?? 'stream';
    this.batchSize = options.batchSize ?? 10;
    this.waitMs = options.waitMs ?? 10_000;
    this.concurrency = options.concurrency ?? 1;
    this.clientId = (options.clientId ?? `${hostname()}:${process.pid}`).slice(0, 200);
    if (!(this.batchSize >= 1 && this.batchSize <= MAX_BATCH_SIZE)) throw new RangeError(`batchSize must be 1 to ${MAX_BATCH_SIZE}`);
    if (!(this.waitMs >= 0 && this.waitMs <= MAX_WAIT_MS)) throw new RangeError(`waitMs must be 0 to ${MAX_WAIT_MS}`);
    if (!(this.concurrency >= 1)) throw new RangeError('concurrency must be at least 1');
  }

  override on<E extends keyof ConsumerEvents>(event: E, listener: (...args: ConsumerEvents[E]) => unknown): this;
  override on(event: string | symbol, listener: (...args: any[]) => unknown): this {
    return super.on(event, listener);
  }

  override once<E extends keyof ConsumerEvents>(event: E, listener: (...args: ConsumerEvents[E]) => unknown): this;
  override once(event: string | symbol, listener: (...args: any[]) => unknown): this {
    return super.once(event, listener);
  }

  /** The current member id (null before joining). */
  get memberId(): string | null {
    return this.membership?.memberId ?? null;
  }

  /** The partitions assigned at the last join or rejoin. */
  get assignments(): number[] {
    return this.membership?.assignments ?? [];
  }

  /** The delivery in use: `'stream'`, or `'pull'` (asked for, or fallen back to). */
  get deliveryMode(): 'stream' | 'pull' {
    return this.mode;
  }

  /** Configure the group (when settings were given), join it, and start delivering to `message` listeners. */
  async start(): Promise<void> {
    if (this.listenerCount('message') === 0) throw new Error("add a 'message' listener before start()");
    if (this.state !== 'new') throw new Error('this consumer was started already; make a new one');
    this.state = 'running';
    try {
      await this.hooks.configure();
      this.membership = await this.joinRequest(null);
    } catch (error) {
      this.state = 'stopped';
      throw error;
    }
    this.heartbeats = this.heartbeatLoop();
    this.loop = this.deliveryLoop();
  }

  /**
   * Stop receiving, let running handlers finish (up to `timeoutMs`), send pending acks, and
   * leave the group: its partitions and unsettled messages go to the other members at once.
   */
  async stop(timeoutMs = STOP_TIMEOUT_MS): Promise<void> {
    this.stopped ??= this.shutDown(timeoutMs);
    return this.stopped;
  }

  private async shutDown(timeoutMs: number): Promise<void> {
    const started = this.state === 'running';
    this.state = 'stopping';
    this.stopping.abort();
    if (started) {
      const waited = new AbortController();
      await Promise.race([Promise.allSettled([...this.running]), sleep(timeoutMs, waited.signal)]);
      waited.abort();
      await this.ackFlush;
      await Promise.allSettled([this.loop, this.heartbeats]);
      await this.leave();
    }
    this.state = 'stopped';
    this.emit('stopped');
  }

  // --- delivery ---------------------------------------------------------------------------

  private async deliveryLoop(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      try {
        if (this.failures > 0) await this.heartbeat(); // after an outage: still a member? rejoin if not
        if (this.mode === 'stream') await this.streamOnce();
        else await this.pullOnce();
      } catch (error) {
        try {
          await this.recover(error);
        } catch (fatal) {
          this.report(fatal);
          void this.stop();
          return;
        }
      }
    }
  }

  private async pullOnce(): Promise<void> {
    const membership = this.current();
    const body = await this.transport.request<{ messages: WireMessage[] }>(
      'POST',
      this.path('members', membership.memberId, 'pull'),
      {
        json: { maxMessages: this.batchSize, waitMs: this.waitMs },
        idempotent: false,
        timeoutMs: this.transport.timeoutMs + this.waitMs,
        signal: this.stopping.signal,
      },
    );
    this.markConnected();
    for (const wire of body.messages) await this.dispatch(new Message(wire, membership.memberId, this));
  }

  private async streamOnce(): Promise<void> {
    const membership = this.current();
    const abort = new AbortController();
    const stop = (): void => abort.abort();
    this.stopping.signal.addEventListener('abort', stop, { once: true });
    this.streamAbort = abort;
    try {
      const response = await this.openStream(membership.memberId, abort.signal);
      if (response === null) return;
      this.markConnected();
      await this.readStream(response, membership.memberId, abort);
    } finally {
      this.stopping.signal.removeEventListener('abort', stop);
      this.streamAbort = null;
      abort.abort();
    }
  }

  /** The opened stream, or null after switching to pull because the server offers none. */
  private async openStream(memberId: string, signal: AbortSignal): Promise<Response | null> {
    try {
      const response = await this.transport.stream(this.path('members', memberId, 'stream'), signal);
      if ((response.headers.get('content-type') ?? '').startsWith('text/event-stream')) return response;
      await response.body?.cancel();
    } catch (error) {
      const noStream =
        error instanceof QueueCoreError &&
        ((error.status === 404 && !QUEUECORE_404.has(error.code)) || [405, 406, 501].includes(error.status ?? 0));
      if (!noStream) throw error;
    }
    this.transport.logger.warn?.(`queuecore consumer ${this.topic}/${this.group}: no SSE stream, pulling instead`);
    this.mode = 'pull';
    return null;
  }

  private async readStream(response: Response, memberId: string, abort: AbortController): Promise<void> {
    const requestId = response.headers.get('x-request-id') ?? '';
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    let idle = setTimeout(() => abort.abort(), STREAM_READ_TIMEOUT_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        clearTimeout(idle);
        if (done) break;
        idle = setTimeout(() => abort.abort(), STREAM_READ_TIMEOUT_MS);
        for (const event of parser.feed(decoder.decode(value, { stream: true }))) {
          if (event.event === 'error') throw errorFromEvent(JSON.parse(event.data), requestId);
          if (event.event === 'message') await this.dispatch(new Message(JSON.parse(event.data), memberId, this));
        }
      }
    } catch (error) {
      if (error instanceof QueueCoreError || this.stopping.signal.aborted) throw error;
      const why = abort.signal.aborted ? 'no data for 45 s' : String((error as Error).message ?? error);
      throw new ConnectionError('CONNECTION_ERROR', `the stream broke: ${why}`, null, requestId);
    } finally {
      clearTimeout(idle);
      reader.releaseLock();
    }
    if (!this.stopping.signal.aborted) {
      throw new ConnectionError('CONNECTION_ERROR', 'the stream ended', null, requestId);
    }
  }

  /** Run the listeners for `message` (at most `concurrency` at once); drops a lost member's messages. */
  private async dispatch(message: Message): Promise<void> {
    while (this.running.size >= this.concurrency) await Promise.race(this.running);
    if (this.stopping.signal.aborted || message.memberId !== this.memberId) return;
    const task = this.handle(message).finally(() => this.running.delete(task));
    this.running.add(task);
    if (this.concurrency === 1) await task;
  }

  private async handle(message: Message): Promise<void> {
    try {
      for (const listener of this.listeners('message')) await listener(message);
    } catch (error) {
      this.report(error);
      if (!message.settled) await this.nackQuietly(message, error);
    }
  }

  private async nackQuietly(message: Message, error: unknown): Promise<void> {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    try {
      await message.nack(text.slice(0, 4096));
    } catch (nackError) {
      this.report(nackError);
    }
  }

  /** Rejoin when the member is gone, back off on transient errors, throw the rest. */
  private async recover(error: unknown): Promise<void> {
    if (this.stopping.signal.aborted) return;
    if (error instanceof QueueCoreError && error.code === MEMBER_GONE) {
      await this.rejoin(this.memberId);
      return;
    }
    const transient = error instanceof ConnectionError || error instanceof ServerError || error instanceof RateLimitedError;
    if (!transient) throw error;
    if (this.connected) {
      this.connected = false;
      this.emit('disconnected', error);
    }
    this.failures += 1;
    const delayMs = backoffMs(Math.min(this.failures, 4));
    this.emit('reconnecting', { attempt: this.failures, delayMs });
    await sleep(delayMs, this.stopping.signal);
  }

  private markConnected(): void {
    this.failures = 0;
    if (this.connected) return;
    this.connected = true;
    this.emit('connected', this.info());
  }

  // --- settling ---------------------------------------------------------------------------

  /** Ack one message; acks made together go in one request. */
  ackId(ackId: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiting = this.acks.get(ackId) ?? [];
      waiting.push({ resolve, reject });
      this.acks.set(ackId, waiting);
      if (this.acks.size >= ACK_BATCH) void this.flushAcks();
      else if (this.ackFlush === null) this.ackFlush = new Promise((done) => setImmediate(() => void this.flushAcks().then(done)));
    });
  }

  /** `POST …/ack` for many ids: resolves to those refused, with the reason. */
  async ack(messages: Message[]): Promise<Message[]> {
    const settled = await Promise.allSettled(messages.map((m) => m.ack()));
    return messages.filter((_, i) => settled[i]?.status === 'rejected');
  }

  private async flushAcks(): Promise<void> {
    const batch = this.acks;
    this.acks = new Map();
    this.ackFlush = null;
    if (batch.size === 0) return;
    let rejected = new Map<string, string>();
    try {
      const answer = await this.transport.request<{ acked: string[]; rejected: { ackId: string; reason: string }[] }>(
        'POST',
        this.path('ack'),
        { json: { ackIds: [...batch.keys()] }, idempotent: true },
      );
      rejected = new Map(answer.rejected.map((r) => [r.ackId, r.reason]));
    } catch (error) {
      if (!(error instanceof AckRejectedError)) {
        for (const waiting of batch.values()) for (const w of waiting) w.reject(error as Error);
        return;
      }
      rejected = new Map(error.rejected.map((r) => [r.ackId, r.reason]));
      for (const id of batch.keys()) if (!rejected.has(id)) rejected.set(id, 'unknown');
    }
    for (const [id, waiting] of batch) {
      const reason = rejected.get(id);
      for (const w of waiting) {
        if (reason === undefined) w.resolve();
        else w.reject(new AckRejectedError('ACK_REJECTED', `the ack was refused: ${reason}`, 409, '', { rejected: [{ ackId: id, reason }] }));
      }
    }
  }

  /** `POST …/nack`; whether the message went to the dead-letter queue. */
  async nackId(ackId: string, error: string | undefined, retryDelay: Duration | undefined): Promise<boolean> {
    const body: Record<string, unknown> = { ackId, error: error ?? '' };
    if (retryDelay !== undefined) body.retryDelay = durationWire(retryDelay);
    // Not retried after a lost answer: a repeated nack is refused, its lease having ended.
    const answer = await this.transport.request<{ deadLettered: boolean }>('POST', this.path('nack'), {
      json: body,
      idempotent: false,
    });
    return answer.deadLettered;
  }

  /** `POST …/extend`: the ids whose leases now end `seconds` from now. */
  async extendIds(ackIds: string[], seconds: number): Promise<string[]> {
    const answer = await this.transport.request<{ extended: string[] }>('POST', this.path('extend'), {
      json: { ackIds, seconds },
      idempotent: true,
    });
    return answer.extended;
  }

  // --- membership -------------------------------------------------------------------------

  private async joinRequest(memberId: string | null): Promise<Membership> {
    const body: Record<string, unknown> = { clientId: this.clientId };
    if (memberId !== null) body.memberId = memberId;
    if (this.options.sessionTimeout !== undefined) body.sessionTimeout = durationWire(this.options.sessionTimeout);
    // A rejoin with our id is idempotent; a first join would leave a second member behind.
    return this.transport.request<Membership>('POST', this.path('members'), { json: body, idempotent: memberId !== null });
  }

  /** Rejoin with our id (`lost` null: a new generation), or as a new member when `lost` is gone. */
  private async rejoin(lost: string | null): Promise<void> {
    while (this.joining !== null) await this.joining;
    const current = this.membership;
    if (this.stopping.signal.aborted || current === null) return;
    if (lost !== null && current.memberId !== lost) return; // replaced already
    this.joining = this.replace(current, lost !== null).finally(() => {
      this.joining = null;
    });
    await this.joining;
  }

  private async replace(current: Membership, lost: boolean): Promise<void> {
    let next: Membership;
    try {
      next = await this.joinRequest(lost ? null : current.memberId);
    } catch (error) {
      if (!(error instanceof NotFoundError && error.code === MEMBER_GONE)) throw error;
      next = await this.joinRequest(null);
    }
    this.membership = next;
    if (next.memberId !== current.memberId) this.streamAbort?.abort(); // the old member's stream
    this.transport.logger.info?.(
      `queuecore consumer ${this.topic}/${this.group} rejoined as ${next.memberId} (partitions ${next.assignments.join(',')})`,
    );
    this.emit('rebalanced', this.info());
  }

  private async heartbeatLoop(): Promise<void> {
    for (;;) {
      await sleep(this.current().heartbeatIntervalMs, this.stopping.signal);
      if (this.stopping.signal.aborted) return;
      try {
        await this.heartbeat();
      } catch (error) {
        if (!this.stopping.signal.aborted) this.report(error);
      }
    }
  }

  private async heartbeat(): Promise<void> {
    const memberId = this.current().memberId;
    let answer: { shouldRejoin: boolean };
    try {
      answer = await this.transport.request('POST', this.path('members', memberId, 'heartbeat'), {
        idempotent: true,
        signal: this.stopping.signal,
      });
    } catch (error) {
      if (!(error instanceof NotFoundError && error.code === MEMBER_GONE)) throw error;
      await this.rejoin(memberId);
      return;
    }
    if (answer.shouldRejoin) await this.rejoin(null);
  }

  private async leave(): Promise<void> {
    const membership = this.membership;
    if (membership === null) return;
    try {
      await this.transport.request('DELETE', this.path('members', membership.memberId), { idempotent: true });
    } catch (error) {
      // Gone already, or the server evicts it after its session timeout.
      if (!(error instanceof NotFoundError)) this.report(error);
    }
  }

  // --- helpers ----------------------------------------------------------------------------

  private current(): Membership {
    if (this.membership === null) throw new Error('the consumer has not joined its group');
    return this.membership;
  }

  private info(): ConnectionInfo {
    const m = this.current();
    return { memberId: m.memberId, generationId: m.generationId, assignments: m.assignments, mode: this.mode };
  }

  private path(...rest: string[]): string {
    return groupPath(this.topic, this.group, ...rest);
  }

  /** Tell the `error` listeners; without any, log it (an unheard `error` event would throw). */
  private report(error: unknown): void {
    const err = error instanceof Error ? error : new Error(String(error));
    if (this.listenerCount('error') > 0) this.emit('error', err);
    else this.transport.logger.warn?.(`queuecore consumer ${this.topic}/${this.group}: ${err.message}`);
  }
}
