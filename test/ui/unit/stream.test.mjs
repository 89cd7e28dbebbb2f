// stream.js: a WebSocket message read back as the event the SSE stream would have given.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KINDS, parseEvent } from '../../../ui/stream.js';

test('an event message reads as its kind and data', () => {
  assert.deepEqual(parseEvent('event: data_version\ndata: {"session_id":"s1","version":3}\n\n'),
    ['data_version', '{"session_id":"s1","version":3}']);
  assert.deepEqual(parseEvent('event: targets\ndata: []\n\n'), ['targets', '[]']);
});

test('a keep-alive comment is no event; data lines join as EventSource joins them', () => {
  assert.equal(parseEvent(': keep-alive\n\n'), null);
  assert.equal(parseEvent(''), null);
  assert.deepEqual(parseEvent('data: a\ndata: b\n\n'), ['message', 'a\nb']);
});

test('every kind the collector sends is listened for', () => {
  for (const k of ['status', 'targets', 'data_version', 'sessions', 'import', 'metrics']) assert.ok(KINDS.includes(k), k);
});
