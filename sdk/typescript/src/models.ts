/** What the API takes and returns (its JSON is camelCase already, so the SDK keeps it). */

/** `'500ms'`, `'30s'`, `'5m'`, `'1h'`, or a number of milliseconds. */
export type Duration = string | number;

export type Delivery = 'exactly-once' | 'at-least-once';
export type StartFrom = 'earliest' | 'latest';
/** Where a reset moves a group: the first or last retained message, or an offset. */
export type ResetTo = StartFrom | number;

/** A topic's counters (from `topics.describe` only). */
export interface TopicStats {
  depth: number;
  inFlight: number;
  activeConsumers: number;
  consumerGroups: number;
}

/** A topic. */
export interface Topic {
  id: string;
  name: string;
  partitions: number;
  retention: string;
  delivery: Delivery;
  latencyClass: string;
  status: 'active' | 'deleting';
  createdAt: string;
  stats?: TopicStats;
  /** The topic's Lua hook (`function on_enqueue(msg)`), when it has one. */
  onEnqueue?: string;
}

/** `topics.create`: only `name` is required. */
export interface CreateTopic {
  name: string;
  retention?: string;
  delivery?: Delivery;
  partitions?: number;
  latencyClass?: string;
  /** A Lua hook setting messages' fairness key, weight and throttle keys (422 `INVALID_HOOK` unless it compiles). */
  onEnqueue?: string;
}

/** `topics.update`: partitions only grow. */
export interface UpdateTopic {
  partitions?: number;
  retention?: string;
  latencyClass?: string;
  /** A new onEnqueue hook; null removes it. */
  onEnqueue?: string | null;
}

/** One message of `publishBatch` with a key, headers or idempotency key. */
export interface OutgoingMessage {
  data: unknown;
  key?: string;
  headers?: Record<string, string>;
  idempotencyKey?: string;
  /** A fair group's scheduling key (`""` is a key). */
  fairnessKey?: string;
  /** Up to 8 throttle keys: in a fair group, each must have a token for delivery. */
  throttleKeys?: string[];
}

/** `publish` options. */
export interface PublishOptions {
  key?: string;
  headers?: Record<string, string>;
  /** A fair group's scheduling key. */
  fairnessKey?: string;
  /** Throttle keys, each needing a token for delivery in a fair group. */
  throttleKeys?: string[];
  /** Given, it is sent as is; otherwise one is generated when publishing is idempotent. */
  idempotencyKey?: string;
}

/** Where a published message was stored, once durable. */
export interface PublishResult {
  messageId: string;
  offset: number;
  partition: number;
  timestamp: string;
  /** Server-side milliseconds. */
  latency: number;
  /** The key the message was published with (generated unless given), or null. */
  idempotencyKey: string | null;
}

/** One message of a batch, in request order. */
export interface BatchItem {
  messageId: string;
  offset: number;
  partition: number;
  /** When it was stored (a repeated idempotency key: the original's). */
  timestamp: string;
}

/** A batch committed as one: all of its messages were stored, or none. */
export interface BatchResult {
  count: number;
  latency: number;
  results: BatchItem[];
}

/** One consumer group of a topic. */
export interface GroupSummary {
  name: string;
  consumers: number;
  lag: number;
  deadLetters: number;
}

/** A partition in a group: its owner (member id), committed offset and lag. */
export interface PartitionState {
  id: number;
  consumer: string | null;
  offset: number;
  lag: number;
}

/** A member (consumer) of a group. */
export interface Member {
  id: string;
  clientId: string;
  generationId: number;
  lastHeartbeatAt: string;
}

/** Retries before dead-lettering, the backoff base, the DLQ depth that alerts. */
export interface DeadLetterPolicy {
  maxRetries?: number;
  retryDelay?: Duration;
  alertThreshold?: number;
}

/** Where a push group's messages go, as the API reports it (the secret only as a hint). */
export interface PushSettings {
  endpoint: string;
  maxInFlight: number;
  timeout: string;
  ordered: boolean;
  secretHint: string;
}

/**
 * `consumerGroups.configure({ push })`: deliver the group to `endpoint` (https), at most
 * `maxInFlight` POSTs at once (1 to 1000, default 10), each failing after `timeout` (default
 * 30 s, up to 10 min); `ordered`: one at a time per key.
 */
export interface PushConfig {
  endpoint: string;
  maxInFlight?: number;
  timeout?: Duration;
  ordered?: boolean;
}

/** What a push group's endpoint answered a test push. */
export interface PushTestResult {
  delivered: boolean;
  statusCode: number | null;
  error: string | null;
  elapsedMs: number;
}

/** A message a push request carries, once `verifyPush` checked it. */
export interface PushMessage {
  messageId: string;
  topic: string;
  group: string;
  partition: number;
  offset: number;
  attempt: number;
  /** When it was published (ISO 8601). */
  timestamp: string;
  key: string | null;
  headers: Record<string, string>;
  data: unknown;
  /** `'message'`, or `'push.test'` for a test push. */
  event: string;
  /** New for every attempt; `messageId` is the same on each. */
  deliveryId: string;
  /** `'base64'` for a Kafka producer's value that was not JSON. */
  encoding?: string;
}

/** A group's settings as the API reports them; `push` for a push group. */
export interface GroupConfig {
  startFrom: StartFrom;
  ackTimeout: string;
  maxInFlight: number;
  sessionTimeout: string;
  deadLetter: DeadLetterPolicy;
  push?: PushSettings | null;
  /** Set when the group is fair. */
  fairness?: Fairness;
  /** The group's Lua hook (`function on_failure(msg)`), when it has one. */
  onFailure?: string;
  [key: string]: unknown;
}

/** A fair group's deficit round robin: weights per fairness key (1-1000), other keys' weight, quantum. */
export interface Fairness {
  weights?: Record<string, number>;
  defaultWeight?: number;
  quantum?: number;
}

/** A group's stats: depth, in flight, consumers, fairness keys, throttle keys, hook failures. */
export interface GroupStats {
  depth: number;
  inFlight: number;
  activeConsumers: number;
  activeFairnessKeys: number;
  quantum: number;
  /** Each fairness key: pending messages (in the look-ahead windows), deficit, weight. */
  perKey: { key: string; pending: number; deficit: number; weight: number }[];
  /** Each throttle key of the environment with a rate: tokens now, rate, burst. */
  perThrottle: { key: string; tokens: number; ratePerSecond: number; burst: number }[];
  hookErrors: number;
}

/** A key of the environment's runtime configuration. */
export interface ConfigEntry {
  key: string;
  value: string;
}

/** `consumerGroups.configure`: settings not given keep their current value. */
export interface GroupSettings {
  startFrom?: StartFrom;
  ackTimeout?: Duration;
  maxInFlight?: number;
  sessionTimeout?: Duration;
  deadLetter?: DeadLetterPolicy;
  /** Make it a push group (`null`: push off; not given: unchanged). */
  push?: PushConfig | null;
  /** A new signing secret (in `pushSecret` of the answer, once). */
  rotateSecret?: boolean;
  /** Make the group fair (`{}` takes the defaults); null turns fairness off. */
  fairness?: Fairness | null;
  /** The group's onFailure Lua hook; null removes it. */
  onFailure?: string | null;
}

/** A consumer group: members, partition owners, committed offsets, lag and settings. */
export interface Group {
  name: string;
  topic: string;
  consumers: number;
  generationId: number;
  partitions: PartitionState[];
  members: Member[];
  config: GroupConfig;
  /** The depth of its dead-letter queue. */
  deadLetters: number;
  /** Messages not yet done, over every partition (computed by the SDK). */
  lag: number;
  /** The push signing secret: only from the configure call that made it (keep it then). */
  pushSecret?: string;
}

/** A group's committed offset on a partition, the partition's end, and the lag between. */
export interface PartitionOffset {
  partition: number;
  current: number;
  latest: number;
  lag: number;
}

/** A message that exhausted its retries: the original, why it failed, when, how often. */
export interface DeadLetter {
  messageId: string;
  topic: string;
  partition: number;
  offset: number;
  data: unknown;
  key: string | null;
  headers: Record<string, string>;
  timestamp: string;
  error: string;
  attempts: number;
  firstDeliveredAt: string;
  deadAt: string;
  fairnessKey?: string;
  throttleKeys?: string[];
}

/** Dead letters oldest first, the queue's depth, and the cursor of the next page. */
export interface DeadLetterPage {
  messages: DeadLetter[];
  depth: number;
  nextAfter: string | null;
}

/** A membership: who this consumer is in its group, and its partitions. */
export interface Membership {
  memberId: string;
  generationId: number;
  assignments: number[];
  heartbeatIntervalMs: number;
  /** The member's window: the server leases it no more unsettled messages. */
  maxInFlight?: number;
  /** How long a delivered message stays leased unless extended. */
  ackTimeoutMs?: number;
  /** The topic's delivery: on exactly-once an ack after the lease ended is refused. */
  delivery?: Delivery;
}

/** How concurrent `publish` calls share requests (`new QueueCore({ publishBatching })`). */
export interface PublishBatching {
  /** Milliseconds a topic's first waiting message waits for company (default 5, at most 1000). */
  linger?: number;
  /** Messages per request at most (default and most: 1000; 1 sends each alone). */
  maxMessages?: number;
  /** Encoded bytes per request at most (default 1 MiB). */
  maxBytes?: number;
}

/** What one consumer holds at most, and how long it keeps a lease (`consume(…, { flowControl })`). */
export interface FlowControl {
  /** Messages received and not settled at once (default: 10 per handler, `concurrency`). */
  maxMessages?: number;
  /** Their encoded size at most (default 100 MiB). */
  maxBytes?: number;
  /** Milliseconds after its arrival that a held message's lease stops being extended (default 60 min). */
  maxLeaseExtension?: number;
}

/** Messages a consumer holds per handler when `FlowControl.maxMessages` is not given. */
export const PREFETCH_PER_HANDLER = 10;

/** The id of a message, whichever spelling the server used (`id` or `messageId`). */
export function messageIdOf(body: Record<string, unknown>): string {
  return String(body.messageId ?? body.id);
}

/** A wire duration: strings as given, numbers as whole milliseconds. */
export function durationWire(value: Duration): string | number {
  return typeof value === 'string' ? value : Math.round(value);
}
