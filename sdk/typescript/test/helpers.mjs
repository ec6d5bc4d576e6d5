// Shared by the tests: a client on the stack given by QUEUECORE_URL / QUEUECORE_API_KEY, unique names.
import { randomBytes } from 'node:crypto';
import { QueueCore } from '../dist/index.js';

/** A name no other test uses. */
export function unique(prefix = 't') {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

/** A client on the test stack. */
export function client(options = {}) {
  return new QueueCore({ timeout: 30_000, ...options });
}

/** Poll `check` until it returns a truthy value, or fail naming `what`. */
export async function eventually(check, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not true after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Resolve with the first `count` messages a started consumer acks, or fail after `timeoutMs`. */
export function collect(consumer, count, timeoutMs = 20_000, settle = (msg) => msg.ack()) {
  return new Promise((resolve, reject) => {
    const seen = [];
    const timer = setTimeout(() => reject(new Error(`got ${seen.length} of ${count} messages`)), timeoutMs);
    consumer.on('message', async (msg) => {
      await settle(msg);
      seen.push(msg);
      if (seen.length === count) {
        clearTimeout(timer);
        resolve(seen);
      }
    });
  });
}

/** Start `consumer`, and stop it when the test ends however it ends. */
export async function started(t, consumer) {
  t.after(() => consumer.stop());
  await consumer.start();
  return consumer;
}
