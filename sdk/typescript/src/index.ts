/** `@queuecore/sdk`: the TypeScript / Node.js client of QueueCore. */

export { QueueCore, Outgoing, VERSION, newIdempotencyKey, type QueueCoreOptions } from './client.js';
export {
  Consumer,
  Message,
  type ConnectionInfo,
  type ConsumeOptions,
  type ConsumerEvents,
} from './consumer.js';
export * from './errors.js';
export type { Logger } from './http.js';
export type * from './models.js';
export { SseParser, type SseEvent } from './sse.js';
