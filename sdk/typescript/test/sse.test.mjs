// The SSE parser: events split anywhere between chunks come out whole; comments are skipped.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { SseParser } from '../dist/index.js';

const STREAM = ': keepalive\n\nid: a1\nevent: message\ndata: {"n":1}\n\nevent: error\r\ndata: {"code":"MEMBER_NOT_FOUND"}\r\n\r\ndata: line one\ndata: line two\n\n';
const EXPECTED = [
  { event: 'message', data: '{"n":1}' },
  { event: 'error', data: '{"code":"MEMBER_NOT_FOUND"}' },
  { event: 'message', data: 'line one\nline two' },
];

test('events come out whole however the stream is cut into chunks', () => {
  for (let size = 1; size <= STREAM.length; size++) {
    const parser = new SseParser();
    const events = [];
    for (let at = 0; at < STREAM.length; at += size) events.push(...parser.feed(STREAM.slice(at, at + size)));
    assert.deepEqual(events, EXPECTED, `chunks of ${size}`);
  }
});

test('an event is not dispatched before its blank line', () => {
  const parser = new SseParser();
  assert.deepEqual(parser.feed('event: message\ndata: {}\n'), []);
  assert.deepEqual(parser.feed('\n'), [{ event: 'message', data: '{}' }]);
});

test('the CommonJS build exports the same API as the ESM one', async () => {
  const require = createRequire(import.meta.url);
  const cjs = require('../dist/cjs/index.js');
  const esm = await import('../dist/index.js');
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
  assert.equal(typeof cjs.QueueCore, 'function');
  assert.ok(new cjs.NotFoundError('X', 'm', 404, 'req_1') instanceof cjs.QueueCoreError);
});
