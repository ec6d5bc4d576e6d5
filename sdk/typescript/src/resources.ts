/** `pq.topics`, `pq.consumerGroups`, `pq.offsets` and `pq.dlq`. */

import { NotFoundError } from './errors.js';
import type { Transport } from './http.js';
import {
  type CreateTopic,
  type DeadLetter,
  type DeadLetterPage,
  type Group,
  type GroupSettings,
  type GroupStats,
  type GroupSummary,
  type PartitionOffset,
  type PushConfig,
  type PushTestResult,
  type ResetTo,
  type Topic,
  type UpdateTopic,
  durationWire,
  messageIdOf,
} from './models.js';

/** `/v1/…` with each segment percent-encoded (names may hold any character). */
export function path(...segments: string[]): string {
  return '/v1/' + segments.map((s) => encodeURIComponent(s)).join('/');
}

/** `/v1/topics/{topic}/groups/{group}/…`. */
export function groupPath(topic: string, group: string, ...rest: string[]): string {
  return path('topics', topic, 'groups', group, ...rest);
}

/** The topics of the API key's environment (admin scope to change them). */
export class Topics {
  constructor(private readonly transport: Transport) {}

  /** Create a topic; ConflictError (`TOPIC_EXISTS`) when the name is taken. */
  create(topic: CreateTopic): Promise<Topic> {
    // Not idempotent: a create whose answer was lost would be refused as TOPIC_EXISTS.
    return this.transport.request('POST', path('topics'), { json: defined(topic), idempotent: false });
  }

  /** Every active topic, by name. */
  async list(): Promise<Topic[]> {
    const body = await this.transport.request<{ topics: Topic[] }>('GET', path('topics'), { idempotent: true });
    return body.topics;
  }

  /** One topic with its stats; NotFoundError when it does not exist. */
  describe(name: string): Promise<Topic> {
    return this.transport.request('GET', path('topics', name), { idempotent: true });
  }

  /** Raise the partition count, change retention or latency class. */
  update(name: string, changes: UpdateTopic): Promise<Topic> {
    return this.transport.request('PATCH', path('topics', name), { json: defined(changes), idempotent: true });
  }

  /** Delete a topic: its name is free at once, its data is removed in the background. */
  delete(name: string): Promise<Topic> {
    // Not retried after a lost answer: the repeat would report the deleted topic as missing.
    return this.transport.request('DELETE', path('topics', name), { idempotent: false });
  }
}

/** Where a group is in each partition, and moving it. The guide's object forms are accepted too. */
export class Offsets {
  constructor(private readonly transport: Transport) {}

  /** One partition's `current`, `latest` and `lag`; every partition's without `partition`. */
  get(topic: string, group: string, partition: number): Promise<PartitionOffset>;
  get(topic: string, group: string): Promise<PartitionOffset[]>;
  get(topic: string, where: { group: string; partition: number }): Promise<PartitionOffset>;
  get(topic: string, where: { group: string }): Promise<PartitionOffset[]>;
  async get(
    topic: string,
    groupOrWhere: string | { group: string; partition?: number },
    partitionArg?: number,
  ): Promise<PartitionOffset | PartitionOffset[]> {
    const { group, partition } = typeof groupOrWhere === 'string' ? { group: groupOrWhere, partition: partitionArg } : groupOrWhere;
    const body = await this.transport.request<Record<string, unknown>>('GET', groupPath(topic, group, 'offsets'), {
      query: { partition },
      idempotent: true,
    });
    if (partition !== undefined) return partitionOffset(body, partition);
    return (body.partitions as Record<string, unknown>[]).map((p) => partitionOffset(p));
  }

  /** Deliver `partition` from `offset` on (admin scope); its in-flight leases are dropped. */
  seek(topic: string, group: string, partition: number, offset: number): Promise<PartitionOffset>;
  seek(topic: string, where: { group: string; partition: number; offset: number }): Promise<PartitionOffset>;
  async seek(
    topic: string,
    groupOrWhere: string | { group: string; partition: number; offset: number },
    partitionArg?: number,
    offsetArg?: number,
  ): Promise<PartitionOffset> {
    const where =
      typeof groupOrWhere === 'string' ? { group: groupOrWhere, partition: partitionArg as number, offset: offsetArg as number } : groupOrWhere;
    const body = await this.transport.request<Record<string, unknown>>(
      'POST',
      groupPath(topic, where.group, 'offsets', 'seek'),
      { json: { partition: where.partition, offset: where.offset }, idempotent: true },
    );
    return partitionOffset(body, where.partition);
  }

  /** Move every partition (admin scope); ConflictError while the group has members. */
  reset(topic: string, group: string, to: ResetTo): Promise<PartitionOffset[]>;
  reset(topic: string, where: { group: string; to: ResetTo }): Promise<PartitionOffset[]>;
  async reset(topic: string, groupOrWhere: string | { group: string; to: ResetTo }, toArg?: ResetTo): Promise<PartitionOffset[]> {
    const where = typeof groupOrWhere === 'string' ? { group: groupOrWhere, to: toArg as ResetTo } : groupOrWhere;
    const body = await this.transport.request<{ partitions: Record<string, unknown>[] }>(
      'POST',
      groupPath(topic, where.group, 'offsets', 'reset'),
      { json: { to: where.to }, idempotent: true },
    );
    return body.partitions.map((p) => partitionOffset(p));
  }
}

/** The consumer groups of a topic. */
export class ConsumerGroups {
  constructor(
    private readonly transport: Transport,
    private readonly offsets: Offsets,
  ) {}

  /** `[{name, consumers, lag, deadLetters}]`; `consumers` counts live members only. */
  list(topic: string): Promise<GroupSummary[]> {
    return this.transport.request('GET', path('topics', topic, 'groups'), { idempotent: true });
  }

  /** Members, partition owners, committed offsets, lag and settings. */
  async describe(topic: string, group: string): Promise<Group> {
    return withLag(await this.transport.request<Group>('GET', groupPath(topic, group), { idempotent: true }));
  }

  /**
   * Create or change a group (admin scope); settings not given keep their current value.
   * The API replaces a group's whole configuration, so the SDK reads it and sends it back changed.
   */
  async configure(topic: string, group: string, settings: GroupSettings): Promise<Group> {
    const current = await this.currentConfig(topic, group);
    const body = mergedConfig(current, settings);
    return withLag(await this.transport.request<Group>('PUT', groupPath(topic, group), { json: body, idempotent: true }));
  }

  /** Send a signed `push.test` event to a push group's endpoint now (admin scope): what it answered. */
  testPush(topic: string, group: string): Promise<PushTestResult> {
    return this.transport.request('POST', groupPath(topic, group, 'push', 'test'), { idempotent: false });
  }

  /** Depth, in flight, consumers; a fair group's keys; the environment's throttle keys; hook failures. */
  stats(topic: string, group: string): Promise<GroupStats> {
    return this.transport.request('GET', groupPath(topic, group, 'stats'), { idempotent: true });
  }

  /** Delete a group with its members and committed offsets (admin scope). */
  async delete(topic: string, group: string): Promise<void> {
    await this.transport.request('DELETE', groupPath(topic, group), { idempotent: false });
  }

  /** Move every partition to `'earliest'`, `'latest'` or an offset (no members allowed). */
  resetOffsets(topic: string, group: string, to: ResetTo | { to: ResetTo }): Promise<PartitionOffset[]> {
    return this.offsets.reset(topic, group, typeof to === 'object' ? to.to : to);
  }

  private async currentConfig(topic: string, group: string): Promise<Record<string, unknown>> {
    try {
      return (await this.describe(topic, group)).config;
    } catch (error) {
      if (error instanceof NotFoundError && error.code === 'GROUP_NOT_FOUND') return {};
      throw error;
    }
  }
}

/** A page of a DLQ: up to `limit` (default 100) entries after the message id `after`. */
export interface InspectOptions {
  limit?: number;
  after?: string;
}

/**
 * A group's dead-letter queue: inspect (consume scope), replay (admin scope). Every call takes
 * `(topic, group, …)`; the guide's forms (`inspect(topic, { group, limit })`, `replay(topic,
 * group, { messageId })`) are accepted too.
 */
export class DeadLetters {
  constructor(private readonly transport: Transport) {}

  /** Up to `limit` dead letters oldest first, after the message id `after`. */
  inspect(topic: string, group: string, options?: InspectOptions): Promise<DeadLetterPage>;
  inspect(topic: string, options: InspectOptions & { group: string }): Promise<DeadLetterPage>;
  async inspect(topic: string, groupOrOptions: string | (InspectOptions & { group: string }), more: InspectOptions = {}): Promise<DeadLetterPage> {
    const options = typeof groupOrOptions === 'string' ? { ...more, group: groupOrOptions } : groupOrOptions;
    const body = await this.transport.request<{ messages: Record<string, unknown>[]; depth: number; nextAfter: string | null }>(
      'GET',
      groupPath(topic, options.group, 'dlq'),
      { query: { limit: options.limit, after: options.after }, idempotent: true },
    );
    const messages = body.messages.map((m) => ({ ...m, messageId: messageIdOf(m) }) as unknown as DeadLetter);
    return { messages, depth: body.depth, nextAfter: body.nextAfter ?? null };
  }

  /** Every dead letter of the queue, page by page. */
  async *messages(topic: string, group: string, options: { pageSize?: number } = {}): AsyncGenerator<DeadLetter> {
    let after: string | undefined;
    for (;;) {
      const page = await this.inspect(topic, group, { limit: options.pageSize ?? 100, after });
      for (const message of page.messages) yield message;
      if (page.nextAfter === null) return;
      after = page.nextAfter;
    }
  }

  /** Deliver one dead letter to the group again, as attempt 1; resolves to 1. */
  async replay(topic: string, group: string, messageId: string | { messageId: string }): Promise<number> {
    const id = typeof messageId === 'string' ? messageId : messageId.messageId;
    // Not retried after a lost answer: the repeat would be refused as already replayed.
    const body = await this.transport.request<{ replayed: number }>('POST', groupPath(topic, group, 'dlq', id, 'replay'), {
      idempotent: false,
    });
    return body.replayed;
  }

  /** Deliver the dead letters to the group again, oldest first: all, or at most `count`; resolves to how many. */
  async replayAll(topic: string, group: string, options: { count?: number } = {}): Promise<number> {
    const body = await this.transport.request<{ replayed: number }>('POST', groupPath(topic, group, 'dlq', 'replay'), {
      json: options.count === undefined ? undefined : { count: options.count },
      idempotent: false,
    });
    return body.replayed;
  }
}

/** The group's current settings with the given ones on top (camelCase, as the API takes them). */
export function mergedConfig(current: Record<string, unknown>, settings: GroupSettings): Record<string, unknown> {
  const changes = defined({
    startFrom: settings.startFrom,
    ackTimeout: settings.ackTimeout === undefined ? undefined : durationWire(settings.ackTimeout),
    maxInFlight: settings.maxInFlight,
    sessionTimeout: settings.sessionTimeout === undefined ? undefined : durationWire(settings.sessionTimeout),
  });
  const dead = settings.deadLetter ?? {};
  const deadChanges = defined({
    maxRetries: dead.maxRetries,
    retryDelay: dead.retryDelay === undefined ? undefined : durationWire(dead.retryDelay),
    alertThreshold: dead.alertThreshold,
  });
  const known = (current.deadLetter as Record<string, unknown> | undefined) ?? {};
  // What GET shows of push (its secret's hint) is not what PUT takes: left out, push stays.
  // fairness and onFailure are kept by the server unless given (null turns them off).
  const { push: shown, fairness: _fairness, onFailure: _onFailure, ...kept } = current;
  const hooks = defined({ fairness: settings.fairness, onFailure: settings.onFailure });
  const body: Record<string, unknown> = { ...kept, ...changes, ...hooks, deadLetter: { ...known, ...deadChanges } };
  if (settings.push !== undefined) {
    body.push = settings.push === null ? null : pushWire(settings.push, settings.rotateSecret);
  } else if (settings.rotateSecret) {
    if (!shown) throw new TypeError('not a push group: give push to rotate its secret');
    const { secretHint: _, ...pushKept } = shown as Record<string, unknown>;
    body.push = { ...pushKept, rotateSecret: true };
  }
  return body;
}

/** The `push` object of a group's PUT. */
export function pushWire(push: PushConfig, rotateSecret = false): Record<string, unknown> {
  return defined({
    endpoint: push.endpoint,
    maxInFlight: push.maxInFlight ?? 10,
    timeout: durationWire(push.timeout ?? '30s'),
    ordered: push.ordered ?? false,
    rotateSecret: rotateSecret || undefined,
  });
}

function withLag(group: Group): Group {
  return { ...group, lag: group.partitions.reduce((sum, p) => sum + p.lag, 0) };
}

function partitionOffset(body: Record<string, unknown>, partition?: number): PartitionOffset {
  return {
    partition: Number(partition ?? body.partition),
    current: Number(body.current),
    latest: Number(body.latest),
    lag: Number(body.lag),
  };
}

/** `value` without its undefined fields. */
export function defined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
