/**
 * Settling in the background: acks, nacks and lease extensions, sent in batches.
 *
 * An ack is queued and its caller goes on (`ackWithResult` waits for the verdict). Queued acks
 * go in one request `ACK_LINGER_MS` after the first, at once when `urgent()` says the consumer is
 * starved (half its window waits for acks: the server leases it nothing more until they land),
 * and when the consumer stops. One flush is in flight or waiting at a time, and the next starts at
 * least `MIN_INTERVAL_MS` after the previous one, so a fast consumer spends a few consume requests
 * a second on acks, never one per message. Nacks ride in the same flushes (one request for many),
 * then extensions: after the acks queued before them, so an extension never names an offset whose
 * ack is on its way (which would split the range lease it belongs to on the server).
 *
 * A refused ack or nack is told to `report` once per request, whatever the number of ids.
 */

import { AckRejectedError, QueueCoreError } from './errors.js';
import { type Transport, sleep } from './http.js';
import { type Duration, durationWire } from './models.js';

export const ACK_LINGER_MS = 50;
export const MIN_INTERVAL_MS = 50;
const MAX_IDS = 1000;

interface Verdict<T> {
  resolve: (value: T) => void;
  reject: (error: Error) => void;
}

interface QueuedAck {
  ackId: string;
  verdict?: Verdict<void>;
}

interface QueuedNack {
  ackId: string;
  error: string;
  retryDelay?: Duration;
  verdict?: Verdict<boolean>;
}

interface QueuedExtend {
  ackIds: string[];
  seconds: number;
  verdict: Verdict<string[]>;
}

/** One error for the refused ids of a request of `total` ids. */
export function rejection(refused: [string, string][], total: number): AckRejectedError {
  const first = refused[0]?.[1] ?? 'the lease ended';
  const body = { rejected: refused.map(([ackId, reason]) => ({ ackId, reason })) };
  return new AckRejectedError('ACK_REJECTED', `${refused.length} of ${total} refused: ${first}`, 409, '', body);
}

/** Batches a consumer's acks, nacks and extensions into few requests. */
export class Settler {
  private acks: QueuedAck[] = [];
  private refused: [QueuedAck, string][] = [];
  private nacks: QueuedNack[] = [];
  private extends: QueuedExtend[] = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null; // a background flush on its way
  private chain: Promise<void> = Promise.resolve(); // flushes run one after the other
  private lastStart = 0;

  constructor(
    private readonly transport: Transport,
    private readonly path: (what: string) => string,
    private readonly report: (error: QueueCoreError) => void,
    private readonly urgent: (queuedAcks: number) => boolean,
  ) {}

  /** Settlements queued and not sent yet. */
  get pending(): number {
    return this.acks.length + this.refused.length + this.nacks.length + this.extends.length;
  }

  /** Queue an ack; with `wait`, a promise of its verdict (AckRejectedError when refused). */
  ack(ackId: string, wait: boolean): Promise<void> | null {
    const item: QueuedAck = { ackId };
    const promise = wait ? new Promise<void>((resolve, reject) => (item.verdict = { resolve, reject })) : null;
    this.acks.push(item);
    this.schedule(this.urgent(this.acks.length) ? 0 : ACK_LINGER_MS);
    return promise;
  }

  /** An ack or nack not worth sending (its lease is known to have ended): refused with the next flush. */
  refuse(ackId: string, reason: string, wait: boolean): Promise<never> | null {
    const item: QueuedAck = { ackId };
    const promise = wait ? new Promise<never>((resolve, reject) => (item.verdict = { resolve: resolve as () => void, reject })) : null;
    this.refused.push([item, reason]);
    this.schedule(ACK_LINGER_MS);
    return promise;
  }

  /** Queue a nack; with `wait`, a promise of whether it was dead-lettered. */
  nack(ackId: string, error: string, retryDelay: Duration | undefined, wait: boolean): Promise<boolean> | null {
    const item: QueuedNack = { ackId, error, retryDelay };
    const promise = wait ? new Promise<boolean>((resolve, reject) => (item.verdict = { resolve, reject })) : null;
    this.nacks.push(item);
    this.schedule(ACK_LINGER_MS);
    return promise;
  }

  /** Queue an extension, sent at once after the acks queued before it; the ids extended. */
  extend(ackIds: string[], seconds: number): Promise<string[]> {
    return new Promise((resolve, reject) => {
      this.extends.push({ ackIds, seconds, verdict: { resolve, reject } });
      this.schedule(0);
    });
  }

  /** Send everything queued now (after the flush in flight, if any). */
  flush(paced = false): Promise<void> {
    const next = this.chain.then(() => this.flushNow(paced));
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** Send what is queued and stop the timer. */
  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.flushing;
    await this.flush();
  }

  private schedule(delayMs: number): void {
    if (this.flushing !== null) return; // its end schedules the next for what is left
    if (this.timer !== null) {
      if (delayMs > 0) return;
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => this.fire(), delayMs);
  }

  private fire(): void {
    this.timer = null;
    this.flushing = this.flush(true)
      .catch((error) => this.report(error instanceof QueueCoreError ? error : new QueueCoreError('CLIENT_ERROR', String(error), null, '')))
      .finally(() => {
        this.flushing = null;
        if (this.extends.length > 0 || this.urgent(this.acks.length)) this.schedule(0);
        else if (this.pending > 0) this.schedule(ACK_LINGER_MS);
      });
  }

  private async flushNow(paced: boolean): Promise<void> {
    if (this.pending === 0) return;
    if (paced) {
      const waitMs = this.lastStart + MIN_INTERVAL_MS - Date.now();
      if (waitMs > 0) await sleep(waitMs);
    }
    this.lastStart = Date.now();
    const [acks, refused, nacks, extensions] = [this.acks, this.refused, this.nacks, this.extends];
    this.acks = [];
    this.refused = [];
    this.nacks = [];
    this.extends = [];
    await this.sendAcks(acks, refused);
    await this.sendNacks(nacks);
    await this.sendExtends(extensions);
  }

  private async sendAcks(acks: QueuedAck[], refused: [QueuedAck, string][]): Promise<void> {
    const refusals: [string, string][] = refused.map(([item, reason]) => [item.ackId, reason]);
    for (const [item, reason] of refused) item.verdict?.reject(rejection([[item.ackId, reason]], 1));
    for (let first = 0; first < acks.length; first += MAX_IDS) {
      refusals.push(...(await this.sendAckChunk(acks.slice(first, first + MAX_IDS))));
    }
    if (refusals.length > 0) this.report(rejection(refusals, acks.length + refused.length));
  }

  private async sendAckChunk(chunk: QueuedAck[]): Promise<[string, string][]> {
    const ackIds = [...new Set(chunk.map((item) => item.ackId))];
    let rejected: { ackId: string; reason: string }[];
    try {
      const answer = await this.transport.request<{ rejected: { ackId: string; reason: string }[] }>('POST', this.path('ack'), {
        json: { ackIds },
        idempotent: true,
      });
      rejected = answer.rejected ?? [];
    } catch (error) {
      if (!(error instanceof AckRejectedError)) {
        for (const item of chunk) item.verdict?.reject(error as Error);
        this.report(error as QueueCoreError);
        return [];
      }
      rejected = error.rejected;
    }
    const reasons = new Map(rejected.map((r) => [r.ackId, r.reason ?? 'the lease ended']));
    for (const item of chunk) {
      const reason = reasons.get(item.ackId);
      if (reason === undefined) item.verdict?.resolve();
      else item.verdict?.reject(rejection([[item.ackId, reason]], 1));
    }
    return [...reasons.entries()];
  }

  private async sendNacks(nacks: QueuedNack[]): Promise<void> {
    for (let first = 0; first < nacks.length; first += MAX_IDS) {
      const chunk = nacks.slice(first, first + MAX_IDS);
      const body = { nacks: chunk.map(nackWire) };
      let answer: { nacked: { ackId: string; deadLettered: boolean }[]; rejected: { ackId: string; reason: string }[] };
      try {
        answer = await this.transport.request('POST', this.path('nack'), { json: body, idempotent: false });
      } catch (error) {
        if (!(error instanceof AckRejectedError)) {
          for (const item of chunk) item.verdict?.reject(error as Error);
          this.report(error as QueueCoreError);
          continue;
        }
        answer = { nacked: [], rejected: error.rejected };
      }
      this.nacked(chunk, answer);
    }
  }

  private nacked(
    chunk: QueuedNack[],
    answer: { nacked: { ackId: string; deadLettered: boolean }[]; rejected: { ackId: string; reason: string }[] },
  ): void {
    const dead = new Map(answer.nacked.map((n) => [n.ackId, n.deadLettered]));
    const reasons = new Map(answer.rejected.map((r) => [r.ackId, r.reason ?? 'the lease ended']));
    for (const item of chunk) {
      const outcome = dead.get(item.ackId);
      if (outcome !== undefined) item.verdict?.resolve(outcome);
      else item.verdict?.reject(rejection([[item.ackId, reasons.get(item.ackId) ?? 'the lease ended']], 1));
    }
    if (reasons.size > 0) this.report(rejection([...reasons.entries()], chunk.length));
  }

  private async sendExtends(extensions: QueuedExtend[]): Promise<void> {
    for (const item of extensions) {
      try {
        const extended: string[] = [];
        for (let first = 0; first < item.ackIds.length; first += MAX_IDS) {
          const ackIds = item.ackIds.slice(first, first + MAX_IDS);
          const answer = await this.transport.request<{ extended: string[] }>('POST', this.path('extend'), {
            json: { ackIds, seconds: item.seconds },
            idempotent: true,
          });
          extended.push(...answer.extended);
        }
        item.verdict.resolve(extended);
      } catch (error) {
        item.verdict.reject(error as Error);
      }
    }
  }
}

function nackWire(item: QueuedNack): Record<string, unknown> {
  const wire: Record<string, unknown> = { ackId: item.ackId, error: item.error };
  if (item.retryDelay !== undefined) wire.retryDelay = durationWire(item.retryDelay);
  return wire;
}
