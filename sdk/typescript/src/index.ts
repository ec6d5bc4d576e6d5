/** `@queuecore/sdk`: the TypeScript / Node.js client of QueueCore. */

export { DEFAULT_LOGGER, QueueCore, Outgoing, VERSION, newIdempotencyKey, regionalUrl, type QueueCoreOptions } from './client.js';
export {
  Consumer,
  Message,
  type ConnectionInfo,
  type ConsumeOptions,
  type ConsumerEvents,
} from './consumer.js';
export * from './errors.js';
export { DEFAULT_PUSH_TOLERANCE_MS, PushVerificationError, verifyPush, type PushHeaders, type VerifyPushOptions } from './push.js';
export type { Logger } from './http.js';
export type { InspectOptions } from './resources.js';
export { RuntimeConfig } from './config.js';
export type * from './models.js';
export { SseParser, type SseEvent } from './sse.js';
