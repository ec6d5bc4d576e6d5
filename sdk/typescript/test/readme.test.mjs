// The README's JavaScript examples run as written: joined in order, as one ES module.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { NotFoundError } from '../dist/index.js';
import { client } from './helpers.mjs';

const README = new URL('../README.md', import.meta.url);

/** The ```js blocks of the README but the import/require one of Install. */
function examples() {
  const blocks = [...readFileSync(README, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.filter((block) => !block.includes("require('@queuecore/sdk')"));
}

test('the README examples run as written', { timeout: 120_000 }, async () => {
  const pq = client();
  await pq.topics.delete('order.events').catch((err) => assert.ok(err instanceof NotFoundError)); // a rerun
  const blocks = examples();
  assert.ok(blocks.length >= 3, 'the README has its examples');
  // Inside the package directory, so `@queuecore/sdk` resolves to this package.
  const dir = mkdtempSync(new URL('./.readme-', import.meta.url).pathname);
  try {
    const file = `${dir}/examples.mjs`;
    writeFileSync(file, blocks.join('\n'));
    const output = execFileSync(process.execPath, [file], { encoding: 'utf8', timeout: 100_000 });
    assert.match(output, /TOPIC_NOT_FOUND 404 req_/);
    assert.match(output, /connected csr_/);
    assert.match(output, /\{ status: 'ok' \}/);
    assert.match(output, /push\.test order\.events 1 \{ test: true/); // the handler verified it
    assert.match(output, /test push delivered: true 204/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  await assert.rejects(pq.topics.describe('order.events'), NotFoundError); // the tour cleaned up
});
