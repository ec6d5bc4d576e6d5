/**
 * Consuming in a group: membership, flow control, leases kept, settling in the background.
 *
 * A consumer joins on `start()` with its window: the most messages it holds at once
 * (`flowControl.maxMessages`, by default 10 per listener slot, `concurrency`). The server leases
 * the member no more than that, so a slow consumer is never handed a backlog it cannot work
 * through in time. Messages arrive over Server-Sent Events (long-poll pulls, asking only for what
 * fits, when the server offers no stream or with `mode: 'pull'`) into a buffer the listeners take
 * from. While a message is held its lease is extended before it expires (`flow.ts`); acks, nacks
 * and extensions are batched (`settle.ts`).
 *
 * Told `shouldRejoin` (a new generation) it rejoins with its member id and emits `rebalanced`. A
 * member the server reports gone (`404 MEMBER_NOT_FOUND`) is replaced by a fresh join; messages
 * received under the old member are dropped, because their leases ended with it. A pull or a
 * stream is never retried blindly: a delivery whose answer is lost has still leased its messages
 * to this member; they come back after the group's ack timeout as `attempt + 1`.
 */

import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import {
  ConnectionError,
  LeaseExpiredError,
  NotFoundError,
  QueueCoreError,
  RateLimitedError,
  ServerError,
  errorFromEvent,
} from './errors.js';
import { Holdings } from './flow.js';
import { type Transport, backoffMs, sleep } from './http.js';
import { Message, type Settling, type WireMessage } from './message.js';
import {
  type DeadLetterPolicy,
  type Duration,
  type FlowControl,
  type Membership,
  PREFETCH_PER_HANDLER,
  type StartFrom,
  durationWire,
} from './models.js';
import { groupPath } from './resources.js';
import { Settler } from './settle.js';
import { SseParser } from './sse.js';

export { Message } from './message.js';

export const STREAM_READ_TIMEOUT_MS = 45_000; // the server writes at least every 15 s on an idle stream
export const STOP_TIMEOUT_MS = 30_000; // how long stop() waits for running handlers
const MAX_BATCH_SIZE = 1000;
const MAX_WAIT_MS = 30_000;
const MEMBER_GONE = 'MEMBER_NOT_FOUND';
const QUEUECORE_404 = new Set([MEMBER_GONE, 'GROUP_NOT_FOUND', 'TOPIC_NOT_FOUND']);
const STALE = 'its lease had ended before the ack or nack (the message is delivered again)';

/** `pq.consume(topic, group, options)`. */
export interface ConsumeOptions {
  /** The consumer group to join (or give it as `consume`'s second argument). */
  group?: string;
  /** Group settings applied before joining (admin scope); those not given are kept. */
  startFrom?: StartFrom;
  ackTimeout?: Duration;
  maxInFlight?: number;
  deadLetter?: DeadLetterPolicy;
  /** This member's session timeout. */
  sessionTimeout?: Duration;
  /** `'stream'` (the default): Server-Sent Events, falling back to `'pull'` (long-poll) when unavailable. */
  mode?: 'stream' | 'pull';
  /** Messages per pull at most (pull mode). */
  batchSize?: number;
  /** How long a pull waits for a message, in ms (pull mode). */
  waitMs?: number;
  /** Listeners run at once (1: one message at a time, in order). */
  concurrency?: number;
  /** What the consumer holds at most, and how long it keeps a lease. */
  flowControl?: FlowControl;
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

/** Hooks the client gives a consumer (to configure its group before joining). */
export interface ConsumerHooks {
  configure(): Promise<void>;
}

/** A member of a consumer group: `on('message', …)`, then `await start()`; `await stop()` to leave. */
export class Consumer extends EventEmitter implements Settling {
  readonly topic: string;
  readonly group: string;
  readonly clientId: string;
  private mode: 'stream' | 'pull';
  private readonly batchSize: number;
  private readonly waitMs: number;
  private readonly concurrency: number;
  private readonly window: number;
  private membership: Membership | null = null;
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private readonly stopping = new AbortController();
  private streamAbort: AbortController | null = null;
  private tasks: Promise<void>[] = [];
  private joining: Promise<void> | null = null;
  private stopped: Promise<void> | null = null;
  private connected = false;
  private failures = 0;
  private serverWindow: number | null = null;
  private readonly running = new Set<Promise<void>>();
  private readonly buffer: Message[] = [];
  private wakeDispatch: (() => void) | null = null;
  private readonly settler: Settler;
  private readonly holdings: Holdings;

  constructor(
    private readonly transport: Transport,
    topic: string,
    group: string,
    private readonly options: ConsumeOptions,
    private readonly hooks: ConsumerHooks,
  ) {
    super();
    this.topic = topic;
    this.group = group;
    this.mode = options.mode ?? 'stream';
    this.batchSize = options.batchSize ?? 10;
    this.waitMs = options.waitMs ?? 10_000;
    this.concurrency = options.concurrency ?? 1;
    this.clientId = (options.clientId ?? `${hostname()}:${process.pid}`).slice(0, 200);
    if (!(this.batchSize >= 1 && this.batchSize <= MAX_BATCH_SIZE)) throw new RangeError(`batchSize must be 1 to ${MAX_BATCH_SIZE}`);
    if (!(this.waitMs >= 0 && this.waitMs <= MAX_WAIT_MS)) throw new RangeError(`waitMs must be 0 to ${MAX_WAIT_MS}`);
    if (!(this.concurrency >= 1)) throw new RangeError('concurrency must be at least 1');
    const flow = options.flowControl ?? {};
    this.window = flow.maxMessages ?? Math.min(PREFETCH_PER_HANDLER * this.concurrency, 100_000);
    if (!(this.window >= 1 && this.window <= 100_000)) throw new RangeError('flowControl.maxMessages must be 1 to 100000');
    this.settler = new Settler(
      transport,
      (what) => this.path(what),
      (error) => this.report(error),
      (queued) => queued >= Math.max(1, Math.floor(this.holdings.window / 2)),
    );
    this.holdings = new Holdings(
      this.window,
      flow.maxBytes ?? 100 * 1024 * 1024,
      flow.maxLeaseExtension ?? 3_600_000,
      this.settler,
      (count, why) => this.reportLost(count, why),
      (window) => void this.narrow(window),
    );
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

  /** Messages received and not settled yet (buffered or in listeners). */
  get held(): number {
    return this.holdings.size;
  }

  /** Configure the group (when settings were given), join it, and start delivering to `message` listeners. */
  async start(): Promise<void> {
    if (this.listenerCount('message') === 0) throw new Error("add a 'message' listener before start()");
    if (this.state !== 'new') throw new Error('this consumer was started already; make a new one');
    this.state = 'running';
    try {
      await this.hooks.configure();
      this.membership = this.joined(await this.joinRequest(null));
      this.serverWindow = this.window;
    } catch (error) {
      this.state = 'stopped';
      throw error;
    }
    this.tasks = [this.heartbeatLoop(), this.intakeLoop(), this.dispatchLoop(), this.keeperLoop()];
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
    this.wakeDispatch?.();
    if (started) {
      const waited = new AbortController();
      await Promise.race([Promise.allSettled([...this.running]), sleep(timeoutMs, waited.signal)]);
      waited.abort();
      await this.settler.close().catch((error) => this.report(error));
      await Promise.allSettled(this.tasks);
      await this.leave();
    }
    this.state = 'stopped';
    this.emit('stopped');
  }

  // --- delivery ---------------------------------------------------------------------------

  private async intakeLoop(): Promise<void> {
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

  private arrive(message: Message, size: number): void {
    this.holdings.add(message, size);
    this.buffer.push(message);
    this.wakeDispatch?.();
  }

  private async pullOnce(): Promise<void> {
    await Promise.race([this.holdings.room(), sleep(MAX_WAIT_MS, this.stopping.signal)]);
    if (this.stopping.signal.aborted || this.holdings.free === 0) return;
    const membership = this.current();
    const body: Record<string, unknown> = { maxMessages: Math.max(1, Math.min(this.batchSize, this.holdings.free)), waitMs: this.waitMs };
    if (this.serverWindow !== this.window) body.maxInFlight = this.window;
    const answer = await this.transport.request<{ messages: WireMessage[] }>('POST', this.path('members', membership.memberId, 'pull'), {
      json: body,
      idempotent: false,
      timeoutMs: this.transport.timeoutMs + this.waitMs,
      signal: this.stopping.signal,
    });
    this.serverWindow = this.window;
    this.markConnected();
    for (const wire of answer.messages) {
      this.arrive(new Message(wire, membership.memberId, this), JSON.stringify(wire.data).length + (wire.key?.length ?? 0));
    }
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
      this.serverWindow = this.window;
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
      const response = await this.transport.stream(this.path('members', memberId, 'stream'), signal, { maxInFlight: this.window });
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
          if (event.event === 'message') this.arrive(new Message(JSON.parse(event.data), memberId, this), event.data.length);
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

  /** Hand buffered messages to the listeners, at most `concurrency` at once, in order. */
  private async dispatchLoop(): Promise<void> {
    let dropped = 0;
    while (!this.stopping.signal.aborted) {
      const message = this.buffer.shift();
      if (message === undefined) {
        if (dropped > 0) this.reportLost(dropped, 'their leases ended while buffered');
        dropped = 0;
        await new Promise<void>((resolve) => (this.wakeDispatch = resolve));
        this.wakeDispatch = null;
        continue;
      }
      if (message.memberId !== this.memberId || !this.holdings.usable(message)) {
        this.holdings.release(message);
        if (message.memberId === this.memberId) dropped += 1;
        continue;
      }
      while (this.running.size >= this.concurrency) await Promise.race(this.running);
      if (this.stopping.signal.aborted) return;
      const task = this.handle(message).finally(() => this.running.delete(task));
      this.running.add(task);
      if (this.concurrency === 1) await task;
    }
  }

  /** Run the listeners; a throw nacks the message, a return without settling lets it go. */
  private async handle(message: Message): Promise<void> {
    try {
      for (const listener of this.listeners('message')) await listener(message);
      if (!message.settled) this.holdings.release(message); // no longer kept: back after its lease
    } catch (error) {
      this.report(error);
      if (!message.settled) {
        const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        this.queueNack(message, text.slice(0, 4096), undefined, false);
      }
    }
  }

  private async keeperLoop(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      await sleep(this.holdings.tickMs, this.stopping.signal);
      if (this.stopping.signal.aborted) return;
      try {
        await this.holdings.extendDue();
      } catch (error) {
        this.report(error); // the next tick tries again
      }
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

  /** @internal Queue a message's ack; with `wait`, a promise of the verdict. */
  queueAck(message: Message, wait: boolean): Promise<void> | null {
    const stale = this.holdings.exactlyOnce && !this.holdings.usable(message);
    this.settle(message);
    return stale ? this.settler.refuse(message.ackId, STALE, wait) : this.settler.ack(message.ackId, wait);
  }

  /** @internal Queue a message's nack; with `wait`, a promise of whether it was dead-lettered. */
  queueNack(message: Message, error: string | undefined, retryDelay: Duration | undefined, wait: boolean): Promise<boolean> | null {
    const stale = this.holdings.exactlyOnce && !this.holdings.usable(message);
    this.settle(message);
    if (stale) return this.settler.refuse(message.ackId, STALE, wait);
    return this.settler.nack(message.ackId, error ?? '', retryDelay, wait);
  }

  /** @internal Extend one message's lease `ms` from now; whether it was extended. */
  async extendMessage(message: Message, ms: number): Promise<boolean> {
    const seconds = Math.max(1, Math.ceil(ms / 1000));
    return (await this.holdings.extend([message], seconds)).includes(message.ackId);
  }

  /** Ack many messages, waiting for the verdicts: resolves to those refused. */
  async ack(messages: Message[]): Promise<Message[]> {
    const settled = await Promise.allSettled(messages.map((m) => m.ackWithResult()));
    return messages.filter((_, i) => settled[i]?.status === 'rejected');
  }

  private settle(message: Message): void {
    message.markSettled();
    this.holdings.release(message);
  }

  private reportLost(count: number, why: string): void {
    const text = `${count} message(s) dropped, ${why}; the group delivers them again`;
    this.report(new LeaseExpiredError('LEASE_EXPIRED', text, null, ''));
  }

  // --- membership -------------------------------------------------------------------------

  private async joinRequest(memberId: string | null): Promise<Membership> {
    const body: Record<string, unknown> = { clientId: this.clientId, maxInFlight: this.window };
    if (memberId !== null) body.memberId = memberId;
    if (this.options.sessionTimeout !== undefined) body.sessionTimeout = durationWire(this.options.sessionTimeout);
    // A rejoin with our id is idempotent; a first join would leave a second member behind.
    return this.transport.request<Membership>('POST', this.path('members'), { json: body, idempotent: memberId !== null });
  }

  /** Tell the holdings what the join answered: the lease length, the delivery, the window. */
  private joined(membership: Membership): Membership {
    this.holdings.ackTimeoutMs = membership.ackTimeoutMs ?? 30_000;
    this.holdings.exactlyOnce = (membership.delivery ?? 'exactly-once') === 'exactly-once';
    this.holdings.window = Math.min(this.window, membership.maxInFlight ?? this.window);
    return membership;
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
    this.membership = this.joined(next);
    if (next.memberId !== current.memberId) {
      this.holdings.releaseAll(); // their leases ended with the old member
      this.streamAbort?.abort(); // the old member's stream
    }
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

  /** One heartbeat (the lease budget, not the consume budget); with `window`, a new window too. */
  private async heartbeat(window?: number): Promise<void> {
    const memberId = this.current().memberId;
    let answer: { shouldRejoin: boolean; ackTimeoutMs?: number };
    try {
      answer = await this.transport.request('POST', this.path('members', memberId, 'heartbeat'), {
        json: window === undefined ? undefined : { maxInFlight: window },
        idempotent: true,
        signal: this.stopping.signal,
      });
    } catch (error) {
      if (!(error instanceof NotFoundError && error.code === MEMBER_GONE)) throw error;
      await this.rejoin(memberId);
      return;
    }
    if (answer.ackTimeoutMs !== undefined) this.holdings.ackTimeoutMs = answer.ackTimeoutMs;
    if (answer.shouldRejoin) await this.rejoin(null);
  }

  /** Set the member's window now (the bytes held went over their bound, or back under). */
  private async narrow(window: number): Promise<void> {
    if (this.membership === null || this.stopping.signal.aborted) return;
    try {
      await this.heartbeat(window);
    } catch (error) {
      this.report(error);
    }
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

  /** Tell the `error` listeners; without any, one line to the logger (an unheard `error` event would throw). */
  private report(error: unknown): void {
    const err = error instanceof Error ? error : new Error(String(error));
    if (this.listenerCount('error') > 0) this.emit('error', err);
    else this.transport.logger.warn?.(`queuecore consumer ${this.topic}/${this.group}: ${err.message}`);
  }
}
