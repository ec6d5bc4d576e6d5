/** A message leased to a consumer, and what the consumer does for it. */

import type { Held } from './flow.js';
import { type Duration, messageIdOf } from './models.js';

/** A delivered message as the API sends it. */
export interface WireMessage {
  messageId?: string;
  id?: string;
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
  fairnessKey?: string;
  throttleKeys?: string[];
}

/** What a message asks of its consumer. */
export interface Settling {
  queueAck(message: Message, wait: boolean): Promise<void> | null;
  queueNack(message: Message, error: string | undefined, retryDelay: Duration | undefined, wait: boolean): Promise<boolean> | null;
  extendMessage(message: Message, ms: number): Promise<boolean>;
}

/** A message leased to this consumer: settle it with `ack()` or `nack()`. */
export class Message<T = unknown> implements Held {
  readonly messageId: string;
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
  /** Its fairness key, when it has one (fair groups schedule by it); else null. */
  readonly fairnessKey: string | null;
  /** Its throttle keys, when it has them; else null. */
  readonly throttleKeys: string[] | null;
  /** The member this message was leased to. */
  readonly memberId: string;
  /** @internal flow control and lease keeping */
  size = 0;
  /** @internal */
  arrived = 0;
  /** @internal when its lease ends, as far as the consumer knows (ms since the epoch) */
  deadline = 0;
  /** @internal its lease ended: its ack is never sent */
  lost = false;
  private done = false;

  constructor(
    wire: WireMessage,
    memberId: string,
    private readonly consumer: Settling,
  ) {
    this.messageId = messageIdOf(wire as unknown as Record<string, unknown>);
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
    this.fairnessKey = wire.fairnessKey ?? null;
    this.throttleKeys = wire.throttleKeys ?? null;
    this.memberId = memberId;
  }

  /** Whether it was acked or nacked through this object. */
  get settled(): boolean {
    return this.done;
  }

  /** @internal */
  markSettled(): void {
    this.done = true;
  }

  /**
   * Mark the message done, in the background: the ack goes with the next batch and this resolves
   * at once. A refusal (its lease ended) goes to the consumer's `error` listeners; to wait for the
   * verdict (exactly-once work), use `ackWithResult()`.
   */
  async ack(): Promise<void> {
    this.consumer.queueAck(this, false);
  }

  /** Mark the message done and wait for the verdict; AckRejectedError when its lease had ended. */
  async ackWithResult(): Promise<void> {
    await this.consumer.queueAck(this, true);
  }

  /** Fail it: retried after `retryDelay · 2^(attempt-1)`; resolves true when it was dead-lettered. */
  async nack(error?: string, options: { retryDelay?: Duration } = {}): Promise<boolean> {
    return (await this.consumer.queueNack(this, error, options.retryDelay, true)) ?? false;
  }

  /**
   * Keep the lease `ms` milliseconds from now (rounded up to whole seconds); false when it had
   * ended. Held messages are extended automatically; this is for a longer lease at once.
   */
  extend(ms = 30_000): Promise<boolean> {
    return this.consumer.extendMessage(this, ms);
  }
}
