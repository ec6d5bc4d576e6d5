/**
 * What a consumer holds: flow control, and keeping the leases of what it holds.
 *
 * A message is held from its arrival until it is acked or nacked (or dropped): buffered or in a
 * listener. The consumer asks the server for no more than fits: the member's window
 * (`maxMessages`) is the server's bound, and `maxBytes` is kept by narrowing that window while the
 * held messages are too large.
 *
 * Leases. A message arrives leased for the group's ack timeout. While it is held, the keeper
 * extends it before it expires, in one request for all that are due (after the acks queued
 * before), up to `maxLeaseExtension` after its arrival. On an exactly-once topic a message whose
 * lease ended (an extension refused, or its deadline passed) is never handed out, and its ack or
 * nack is not sent: the server would refuse it, and the message is delivered again anyway.
 */

import type { Settler } from './settle.js';

/** A lease this close to its end counts as ended (an ack would arrive late). */
export const SAFETY_MS = 250;
const MIN_TICK_MS = 50;
const MAX_TICK_MS = 5000;
const MIN_EXTENSION_S = 10;

/** The lease bookkeeping of one held message. */
export interface Held {
  readonly ackId: string;
  size: number;
  arrived: number;
  deadline: number;
  lost: boolean;
}

/** The messages a consumer holds, their size, and their leases. */
export class Holdings {
  ackTimeoutMs = 30_000;
  exactlyOnce = true;
  private readonly held = new Map<string, Held>();
  private bytes = 0;
  private narrowed = false;
  private roomWaiters: (() => void)[] = [];

  constructor(
    public window: number,
    private readonly maxBytes: number,
    private readonly maxExtensionMs: number,
    private readonly settler: Settler,
    private readonly lost: (count: number, why: string) => void,
    private readonly setWindow: (window: number) => void,
  ) {}

  /** Messages held now. */
  get size(): number {
    return this.held.size;
  }

  /** Messages that still fit (0 while the bytes are over their bound). */
  get free(): number {
    return this.bytes >= this.maxBytes ? 0 : Math.max(this.window - this.held.size, 0);
  }

  /** Resolves once a message fits (or at once when one does). */
  room(): Promise<void> {
    if (this.free > 0) return Promise.resolve();
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /** A message arrived: held, leased for the ack timeout from now. */
  add(message: Held, size: number): void {
    const now = Date.now();
    message.size = size;
    message.arrived = now;
    message.deadline = now + this.ackTimeoutMs;
    this.held.set(message.ackId, message);
    this.bytes += size;
    this.changed();
  }

  /** A message settled or dropped: no longer held or kept. */
  release(message: Held): void {
    if (this.held.get(message.ackId) !== message) return;
    this.held.delete(message.ackId);
    this.bytes -= message.size;
    this.changed();
  }

  /** Forget everything held (the member is gone: its leases ended). */
  releaseAll(): void {
    for (const message of [...this.held.values()]) {
      message.lost = true;
      this.release(message);
    }
  }

  /** Whether `message` may still be handed out or settled. */
  usable(message: Held): boolean {
    if (message.lost) return false;
    return !this.exactlyOnce || Date.now() < message.deadline - SAFETY_MS;
  }

  private changed(): void {
    if (this.free > 0) for (const wake of this.roomWaiters.splice(0)) wake();
    const over = this.bytes >= this.maxBytes;
    if (over !== this.narrowed) {
      this.narrowed = over; // bytes bound: the server's window follows what is held
      this.setWindow(over ? Math.max(this.held.size, 1) : this.window);
    }
  }

  // --- the keeper -------------------------------------------------------------------------

  /** Milliseconds between two looks at the leases. */
  get tickMs(): number {
    return Math.min(Math.max(this.ackTimeoutMs / 4, MIN_TICK_MS), MAX_TICK_MS);
  }

  /**
   * How long each extension leases a held message, in seconds: the ack timeout, at least 10 s,
   * so that a short ack timeout does not make the keeper race the clock on a busy machine.
   */
  get extensionS(): number {
    return Math.max(Math.ceil(this.ackTimeoutMs / 1000), MIN_EXTENSION_S);
  }

  /** One extension request for every held message whose lease ends within half an extension. */
  async extendDue(): Promise<void> {
    const now = Date.now();
    const horizon = now + Math.max((this.ackTimeoutMs * 3) / 4, (this.extensionS * 1000) / 2);
    const due: Held[] = [];
    const ended: Held[] = [];
    for (const message of this.held.values()) {
      if (message.lost || message.deadline > horizon) continue;
      if (now - message.arrived >= this.maxExtensionMs || message.deadline <= now) ended.push(message);
      else due.push(message);
    }
    if (ended.length > 0 && this.exactlyOnce) this.lose(ended, 'its lease ended before it was settled');
    const byLength = new Map<number, Held[]>(); // never leased past arrival + maxLeaseExtension
    for (const message of due) {
      const leftS = (message.arrived + this.maxExtensionMs - now) / 1000;
      const seconds = Math.min(this.extensionS, Math.max(1, Math.ceil(leftS)));
      byLength.set(seconds, [...(byLength.get(seconds) ?? []), message]);
    }
    for (const [seconds, messages] of byLength) await this.extend(messages, seconds);
  }

  /** Extend these leases by `seconds` from now; the ack ids extended. */
  async extend(messages: Held[], seconds: number): Promise<string[]> {
    const chosen = messages.filter((m) => !m.lost);
    if (chosen.length === 0) return [];
    await this.settler.flush(); // the acks queued before go first: no split range leases
    const sentAt = Date.now();
    const extended = await this.settler.extend(
      chosen.map((m) => m.ackId),
      seconds,
    );
    const granted = new Set(extended);
    for (const message of chosen) if (granted.has(message.ackId)) message.deadline = sentAt + seconds * 1000;
    const refused = chosen.filter((m) => !granted.has(m.ackId) && this.held.has(m.ackId));
    if (refused.length > 0 && this.exactlyOnce) this.lose(refused, 'the server refused to extend its lease');
    return extended;
  }

  /** Leases that ended: the server no longer counts these messages, nor does the window. */
  private lose(messages: Held[], why: string): void {
    for (const message of messages) {
      message.lost = true;
      this.release(message);
    }
    this.lost(messages.length, why);
  }
}
