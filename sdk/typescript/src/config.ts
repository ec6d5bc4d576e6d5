/** `pq.config`: the environment's runtime configuration (writes need the admin scope). */

import type { Transport } from './http.js';
import type { ConfigEntry } from './models.js';
import { path } from './resources.js';

/** Keys and values, e.g. `throttle.<key>.rate` and `throttle.<key>.burst`, seen by every replica within seconds. */
export class RuntimeConfig {
  constructor(private readonly transport: Transport) {}

  /** Set `key` (created or replaced). */
  set(key: string, value: string): Promise<ConfigEntry> {
    return this.transport.request('PUT', path('config', key), { json: { value }, idempotent: true });
  }

  /** The entry; NotFoundError (`CONFIG_KEY_NOT_FOUND`) when it is not set. */
  get(key: string): Promise<ConfigEntry> {
    return this.transport.request('GET', path('config', key), { idempotent: true });
  }

  /** The entries whose key starts with `prefix`, by key. */
  async list(prefix = ''): Promise<ConfigEntry[]> {
    const body = await this.transport.request<{ entries: ConfigEntry[] }>('GET', path('config'), {
      query: { prefix: prefix === '' ? undefined : prefix },
      idempotent: true,
    });
    return body.entries;
  }

  /** Remove `key`; NotFoundError when it is not set. */
  async delete(key: string): Promise<void> {
    await this.transport.request('DELETE', path('config', key), { idempotent: false });
  }
}
