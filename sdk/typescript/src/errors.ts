/**
 * One error hierarchy for everything the API (or the network) can answer.
 *
 * Every error carries the server's `code`, `message`, HTTP `status` and the `requestId` to quote
 * to support. Network failures have no status; their `requestId` is the id the SDK sent, which
 * the server logs too.
 */

/** The `{"error": {...}}` body of a failed request, as far as the SDK reads it. */
export interface ErrorBody {
  error?: { code?: string; message?: string; status?: number; requestId?: string; details?: unknown[] };
  rejected?: { ackId: string; reason: string }[];
  [key: string]: unknown;
}

/** Base of every error thrown by the SDK. */
export class QueueCoreError extends Error {
  /** The server's error code, e.g. `TOPIC_NOT_FOUND`, or `CONNECTION_ERROR` / `TIMEOUT`. */
  readonly code: string;
  /** The HTTP status; null when no answer was received. */
  readonly status: number | null;
  /** The request id to quote to support. */
  readonly requestId: string;
  /** The whole error body, when there was one. */
  readonly body: ErrorBody;

  constructor(code: string, message: string, status: number | null, requestId: string, body: ErrorBody = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.requestId = requestId;
    this.body = body;
  }

  /** Per-field validation details, when the server sent any. */
  get details(): unknown[] {
    return this.body.error?.details ?? [];
  }
}

/** 401: the API key is missing, malformed, unknown, revoked or expired. */
export class AuthenticationError extends QueueCoreError {}
/** 403: the key lacks the scope (publish, consume, admin) this call needs. */
export class PermissionDeniedError extends QueueCoreError {}
/** 404: no such topic, group, member or message in the key's environment. */
export class NotFoundError extends QueueCoreError {}
/** 409: the request conflicts with the resource's current state. */
export class ConflictError extends QueueCoreError {}

/** 409 `ACK_REJECTED`: no ack id could be settled (lease expired, superseded or unknown). */
export class AckRejectedError extends ConflictError {
  /** `[{ackId, reason}]` for every id the server refused. */
  get rejected(): { ackId: string; reason: string }[] {
    return this.body.rejected ?? [];
  }
}

/**
 * `LEASE_EXPIRED`: held messages whose leases ended before they were settled. Reported to the
 * consumer's `error` listeners, never thrown by a call: on an exactly-once topic such messages
 * are not handed out and their acks are not sent; the group delivers them again.
 */
export class LeaseExpiredError extends QueueCoreError {}

/** 400 / 422: a field is missing or out of range, or a tier quota was exceeded. */
export class ValidationError extends QueueCoreError {}
/** 413: a message is larger than the tier allows. */
export class PayloadTooLargeError extends QueueCoreError {}

/** 429: the key used up its per-second budget (retried automatically up to `maxRetries`). */
export class RateLimitedError extends QueueCoreError {
  /** `Retry-After` in seconds, when the server sent it. */
  retryAfterS: number | null = null;
}

/** 5xx: QueueCore could not serve a valid request. */
export class ServerError extends QueueCoreError {}
/** 503: a backing service is unreachable; safe calls are retried automatically. */
export class UnavailableError extends ServerError {}
/** The request failed on the network: no answer was received. */
export class ConnectionError extends QueueCoreError {}
/** The request timed out. */
export class TimeoutError extends ConnectionError {}

type ErrorClass = new (
  code: string,
  message: string,
  status: number | null,
  requestId: string,
  body?: ErrorBody,
) => QueueCoreError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: ValidationError,
  429: RateLimitedError,
  503: UnavailableError,
};

/** The HTTP status of codes that arrive without one (SSE `error` events). */
const STATUS_BY_CODE: Record<string, number> = {
  INVALID_API_KEY: 401,
  FORBIDDEN: 403,
  MEMBER_NOT_FOUND: 404,
  GROUP_NOT_FOUND: 404,
  TOPIC_NOT_FOUND: 404,
  SERVICE_UNAVAILABLE: 503,
};

/** The error class for a code and status. */
export function errorClass(code: string, status: number): ErrorClass {
  if (code === 'ACK_REJECTED') return AckRejectedError;
  return BY_STATUS[status] ?? (status >= 500 ? ServerError : QueueCoreError);
}

/** `Retry-After` in seconds (QueueCore sends the delta-seconds form). */
export function retryAfterS(headers: Headers): number | null {
  const value = headers.get('retry-after');
  if (value === null) return null;
  const seconds = Number(value);
  return Number.isFinite(seconds) ? Math.max(seconds, 0) : null;
}

/** Build the error for a failed response from its status, headers and body text. */
export function errorFromResponse(
  status: number,
  statusText: string,
  headers: Headers,
  text: string,
  sentRequestId: string,
): QueueCoreError {
  const body = parseObject(text);
  const error = body.error ?? {};
  const code = String(error.code ?? `HTTP_${status}`);
  const message = String(error.message ?? (statusText || 'request failed'));
  const requestId = String(error.requestId ?? headers.get('x-request-id') ?? sentRequestId);
  const Kind = errorClass(code, status);
  const result = new Kind(code, message, status, requestId, body);
  if (result instanceof RateLimitedError) result.retryAfterS = retryAfterS(headers);
  return result;
}

/** Build the error for an SSE `error` event `{code, message}`. */
export function errorFromEvent(data: { code?: string; message?: string }, requestId: string): QueueCoreError {
  const code = String(data.code ?? 'SERVICE_UNAVAILABLE');
  const status = STATUS_BY_CODE[code] ?? 503;
  const Kind = errorClass(code, status);
  return new Kind(code, String(data.message ?? 'the stream ended'), status, requestId, { error: data });
}

function parseObject(text: string): ErrorBody {
  try {
    const parsed: unknown = JSON.parse(text);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as ErrorBody) : {};
  } catch {
    return {};
  }
}
