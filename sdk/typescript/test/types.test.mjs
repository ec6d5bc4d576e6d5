// The type definitions: the guide's calls compile, misuse does not (test/types/usage.ts).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { test } from 'node:test';

test('the published type definitions accept the guide and reject misuse', { timeout: 120_000 }, () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const project = new URL('./types/tsconfig.json', import.meta.url).pathname;
  const done = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
  assert.equal(done.status, 0, done.stdout + done.stderr);
});
