/**
 * The HTTP layer: native `fetch`, request ids, timeouts, error mapping and retries.
 *
 * A request is sent again, up to `maxRetries` times, when:
 * - the server answered 429 (the rate limiter refuses before anything runs): after `Retry-After`
 *   plus up to 20 % jitter, else exponential backoff with full jitter;
 * - the connection could not be made (nothing was sent): exponential backoff;
 * - the server answered 503 (or a proxy 502/504), or the answer was lost (timeout, reset), and
 *   the request is marked `idempotent`: repeating it cannot do the work twice.
 * Every attempt of one call carries the same `X-Request-Id`, which the server adopts.
 */

import { randomInt } from 'node:crypto';
import { ConnectionError, QueueCoreError, TimeoutError, errorFromResponse, retryAfterS } from './errors.js';

/** Where the SDK writes what it does; `console` fits. Every method is optional. */
export interface Logger {
  debug?(message: string, ...args: unknown[]): void;
  info?(message: string, ...args: unknown[]): void;
  warn?(message: string, ...args: unknown[]): void;
  error?(message: string, ...args: unknown[]): void;
}

export const BACKOFF_BASE_MS = 500;
export const BACKOFF_MAX_MS = 8000;
const RETRY_AFTER_JITTER = 0.2;
const GATEWAY_UNAVAILABLE = new Set([502, 503, 504]);
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** Codes of `fetch` failures where the connection was never made, so nothing was sent. */
const NOTHING_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/** `req_` + 24 random base62 characters, the server's own format. */
export function newRequestId(): string {
  let id = 'req_';
  for (let i = 0; i < 24; i++) id += ALPHABET[randomInt(ALPHABET.length)];
  return id;
}

/** Full-jitter exponential backoff for the `attempt`-th retry (0-based), in ms. */
export function backoffMs(attempt: number): number {
  return Math.random() * Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** attempt);
}

/** Resolve after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** One call's options. */
export interface RequestOptions {
  /** Whether repeating the request after a lost answer is harmless. */
  idempotent: boolean;
  json?: unknown;
  /** A body already encoded as JSON, sent as is (instead of `json`). */
  body?: string;
  query?: Record<string, string | number | undefined | null>;
  timeoutMs?: number;
  /** Ends the call early (e.g. a consumer stopping); it then fails with a ConnectionError. */
  signal?: AbortSignal;
}

/** Transport settings. */
export interface TransportOptions {
  apiKey: string;
  baseUrl: string;
  timeoutMs: number;
  maxRetries: number;
  logger: Logger;
  userAgent: string;
}

type Outcome = { response: Response; text: string } | { failure: unknown; timedOut: boolean };

/** Sends requests with the key, retries what is safe, throws mapped errors. */
export class Transport {
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly logger: Logger;
  private readonly baseUrl: string;
  /** A true private field: the key never shows in console.log or JSON.stringify of a client. */
  readonly #headers: Record<string, string>;

  constructor(options: TransportOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs;
    this.maxRetries = options.maxRetries;
    this.logger = options.logger;
    this.#headers = { Authorization: `Bearer ${options.apiKey}`, 'User-Agent': options.userAgent };
  }

  /** Send with retries; the decoded JSON body (undefined when empty) or a thrown QueueCoreError. */
  async request<T = unknown>(method: string, path: string, options: RequestOptions): Promise<T> {
    const requestId = newRequestId();
    const url = this.url(path, options.query);
    for (let attempt = 0; ; attempt++) {
      const outcome = await this.attempt(method, url, requestId, options);
      if ('response' in outcome && outcome.response.status < 400) {
        return (outcome.text === '' ? undefined : JSON.parse(outcome.text)) as T;
      }
      const error = this.error(outcome, method, path, requestId);
      if (attempt >= this.maxRetries || options.signal?.aborted || !retryable(outcome, options.idempotent)) {
        throw error;
      }
      const delayMs = delayFor(outcome, attempt);
      this.logger.info?.(
        `queuecore retry ${attempt + 1}/${this.maxRetries} of ${method} ${path} in ${Math.round(delayMs)}ms after ${error.code} (request ${requestId})`,
      );
      await sleep(delayMs, options.signal);
    }
  }

  /**
   * Open a streamed GET (SSE). Only its opening is retried, on 429 or when nothing was sent.
   * The caller reads `response.body` and aborts `signal` to close it.
   */
  async stream(path: string, signal: AbortSignal, query?: RequestOptions['query']): Promise<Response> {
    const requestId = newRequestId();
    const url = this.url(path, query);
    for (let attempt = 0; ; attempt++) {
      const opened = new AbortController();
      const abort = (): void => opened.abort();
      signal.addEventListener('abort', abort, { once: true });
      const timer = setTimeout(() => opened.abort(new DOMException('timed out', 'TimeoutError')), this.timeoutMs);
      let outcome: Outcome;
      try {
        const response = await fetch(url, {
          method: 'GET',
          headers: { ...this.#headers, Accept: 'text/event-stream', 'X-Request-Id': requestId },
          signal: opened.signal,
        });
        clearTimeout(timer);
        if (response.status < 400) return response; // `signal` still closes its body
        outcome = { response, text: await response.text() };
      } catch (failure) {
        clearTimeout(timer);
        outcome = { failure, timedOut: isTimeout(opened.signal) };
      }
      signal.removeEventListener('abort', abort);
      const error = this.error(outcome, 'GET', path, requestId);
      if (attempt >= this.maxRetries || signal.aborted || !retryable(outcome, false)) throw error;
      await sleep(delayFor(outcome, attempt), signal);
    }
  }

  private url(path: string, query?: RequestOptions['query']): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) params.set(name, String(value));
    }
    const search = params.toString();
    return `${this.baseUrl}${path}${search ? `?${search}` : ''}`;
  }

  private async attempt(method: string, url: string, requestId: string, options: RequestOptions): Promise<Outcome> {
    const controller = new AbortController();
    const abort = (): void => controller.abort();
    options.signal?.addEventListener('abort', abort, { once: true });
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const timer = setTimeout(() => controller.abort(new DOMException('timed out', 'TimeoutError')), timeoutMs);
    const headers: Record<string, string> = { ...this.#headers, 'X-Request-Id': requestId };
    const body = options.body ?? (options.json === undefined ? undefined : JSON.stringify(options.json));
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    try {
      const response = await fetch(url, { method, headers, body, signal: controller.signal });
      return { response, text: await response.text() };
    } catch (failure) {
      return { failure, timedOut: isTimeout(controller.signal) };
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', abort);
    }
  }

  private error(outcome: Outcome, method: string, path: string, requestId: string): QueueCoreError {
    if ('response' in outcome) {
      const { response, text } = outcome;
      return errorFromResponse(response.status, response.statusText, response.headers, text, requestId);
    }
    const detail = describe(outcome.failure);
    if (outcome.timedOut) return new TimeoutError('TIMEOUT', `${method} ${path}: timed out`, null, requestId);
    return new ConnectionError('CONNECTION_ERROR', `${method} ${path}: ${detail}`, null, requestId);
  }
}

function isTimeout(signal: AbortSignal): boolean {
  return signal.aborted && signal.reason instanceof DOMException && signal.reason.name === 'TimeoutError';
}

function retryable(outcome: Outcome, idempotent: boolean): boolean {
  if ('response' in outcome) {
    const status = outcome.response.status;
    return status === 429 || (GATEWAY_UNAVAILABLE.has(status) && idempotent);
  }
  return idempotent || (!outcome.timedOut && NOTHING_SENT.has(failureCode(outcome.failure) ?? ''));
}

function delayFor(outcome: Outcome, attempt: number): number {
  const toldS = 'response' in outcome ? retryAfterS(outcome.response.headers) : null;
  if (toldS === null) return backoffMs(attempt);
  return toldS * 1000 * (1 + Math.random() * RETRY_AFTER_JITTER);
}

/** The system error code under a `fetch failed` TypeError (undici puts it in `cause`). */
export function failureCode(failure: unknown): string | undefined {
  let current: unknown = failure;
  for (let depth = 0; depth < 4 && current !== null && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('E')) return code;
    const errors = (current as { errors?: unknown[] }).errors; // AggregateError (IPv4 + IPv6)
    if (Array.isArray(errors) && errors.length > 0) current = errors[0];
    else current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

function describe(failure: unknown): string {
  const code = failureCode(failure);
  const message = failure instanceof Error ? failure.message : String(failure);
  return code ? `${message} (${code})` : message;
}
