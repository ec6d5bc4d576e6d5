/**
 * Push groups: checking a push request in the endpoint's web handler.
 *
 * A push group's messages are POSTed to its endpoint, each signed with the group's secret
 * (`QueueCore-Signature: v1=` and the HMAC-SHA256 of `{timestamp}.{body}`). `verifyPush` checks
 * the signature over the raw body and the timestamp's freshness, and returns the message.
 */

import { createHmac, timingSafeEqual } from 'node:crypto';
import { QueueCoreError } from './errors.js';
import type { PushMessage } from './models.js';

/** Five minutes: a push signed longer ago (or ahead) than this is refused as replayed. */
export const DEFAULT_PUSH_TOLERANCE_MS = 300_000;

/** A push request that did not come from QueueCore, or came too late: answer it 401. */
export class PushVerificationError extends QueueCoreError {
  constructor(code: 'INVALID_PUSH_SIGNATURE' | 'STALE_PUSH_TIMESTAMP', message: string) {
    super(code, message, 401, '');
  }
}

/** A request's headers: Node's `req.headers`, a fetch `Headers`, or a plain object. */
export type PushHeaders =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

/** `verifyPush` options: the tolerance (ms) and, for tests, the clock (ms since the epoch). */
export interface VerifyPushOptions {
  toleranceMs?: number;
  now?: number;
}

/**
 * The message of a push request, after checking that `QueueCore-Signature` is the group's
 * signature of this raw `body` and that `QueueCore-Timestamp` is within `toleranceMs` of now.
 * Throws `PushVerificationError` (`INVALID_PUSH_SIGNATURE` or `STALE_PUSH_TIMESTAMP`).
 */
export function verifyPush(
  secret: string,
  headers: PushHeaders,
  body: string | Uint8Array,
  options: VerifyPushOptions = {},
): PushMessage {
  const raw = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
  const signature = header(headers, 'queuecore-signature') ?? '';
  const timestamp = header(headers, 'queuecore-timestamp') ?? '';
  if (!/^\d+$/.test(timestamp)) throw new PushVerificationError('INVALID_PUSH_SIGNATURE', 'no QueueCore-Timestamp header');
  const digest = createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest('hex');
  const expected = Buffer.from(`v1=${digest}`);
  const given = Buffer.from(signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new PushVerificationError('INVALID_PUSH_SIGNATURE', "the signature is not the group's signature of this body");
  }
  const ageMs = (options.now ?? Date.now()) - Number(timestamp) * 1000;
  const toleranceMs = options.toleranceMs ?? DEFAULT_PUSH_TOLERANCE_MS;
  if (Math.abs(ageMs) > toleranceMs) {
    const when = ageMs > 0 ? `${Math.round(ageMs / 1000)} s ago` : `${Math.round(-ageMs / 1000)} s ahead`;
    throw new PushVerificationError('STALE_PUSH_TIMESTAMP', `signed ${when}, more than ${toleranceMs / 1000} s from now`);
  }
  const message = JSON.parse(raw.toString('utf8')) as Omit<PushMessage, 'event' | 'deliveryId'>;
  return {
    ...message,
    key: message.key ?? null,
    headers: message.headers ?? {},
    event: header(headers, 'queuecore-event') ?? 'message',
    deliveryId: header(headers, 'queuecore-delivery') ?? '',
  };
}

function header(headers: PushHeaders, name: string): string | undefined {
  if (typeof headers.get === 'function') return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}
