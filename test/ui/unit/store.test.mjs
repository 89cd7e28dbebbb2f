// store.js: the page's model, fed by stream events, and its cache of view answers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createStore, FLEET } from '../../../ui/store.js';

// A collector stand-in: counts what it is asked, answers with the path and a serial number.
function collector() {
  const asked = [];
  let serial = 0;
  return {
    asked,
    fetchJson: async (path) => { asked.push(path); if (path.includes('fail')) throw new Error('404'); return { path, serial: ++serial }; },
  };
}

test('targets come from the stream; null until it has said', () => {
  const s = createStore({ fetchJson: async () => ({}) });
  assert.equal(s.targets(), null);
  const told = [];
  s.subscribe((what) => told.push(what));
  s.setTargets([{ id: 't1', state: 'idle' }]);
  assert.deepEqual(s.targets(), [{ id: 't1', state: 'idle' }]);
  assert.deepEqual(told, ['targets']);
});

test('targets_changed replaces changed targets in place, adds new ones, drops those gone', () => {
  const s = createStore({ fetchJson: async () => ({}) });
  assert.equal(s.targetsChanged({ targets: [{ id: 't9' }], gone: [] }), false); // before the list
  assert.equal(s.targets(), null);
  s.setTargets([{ id: 't1', state: 'idle' }, { id: 't2', state: 'idle' }, { id: 't3', state: 'idle' }]);
  assert.equal(s.targetsChanged({ targets: [{ id: 't2', state: 'profiling' }, { id: 't4', state: 'idle' }], gone: ['t1'] }), true);
  assert.deepEqual(s.targets().map((t) => `${t.id} ${t.state}`), ['t2 profiling', 't3 idle', 't4 idle']);
  // a target that came and went between two ticks is only gone
  s.targetsChanged({ targets: [{ id: 't5', state: 'idle' }], gone: ['t5', 't3'] });
  assert.deepEqual(s.targets().map((t) => t.id), ['t2', 't4']);
  s.targetsChanged({ gone: ['nope'] }); // malformed or unknown: harmless
  assert.deepEqual(s.targets().map((t) => t.id), ['t2', 't4']);
});

test('a view is asked once per data version; a later version asks again', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson });
  const a = await s.view('s1', '/api/sessions/s1/functions?x');
  const b = await s.view('s1', '/api/sessions/s1/functions?x');
  assert.equal(a, b);
  assert.equal(c.asked.length, 1);
  assert.equal(s.dataChanged({ session_id: 's1', version: 3, samples: 300, chunks: 3, threads: 2, duration_sec: 1.5 }), true);
  const d = await s.view('s1', '/api/sessions/s1/functions?x');
  assert.notEqual(d.serial, a.serial);
  assert.equal(c.asked.length, 2);
  // another session's news does not touch it
  s.dataChanged({ session_id: 's2', version: 9 });
  await s.view('s1', '/api/sessions/s1/functions?x');
  assert.equal(c.asked.length, 2);
});

test('old or repeated news is not news; counts are what the stream said', () => {
  const s = createStore({ fetchJson: async () => ({}) });
  assert.equal(s.counts('s1'), null);
  assert.equal(s.dataChanged({ session_id: 's1', version: 5, samples: 500, chunks: 5, lost_samples: 1, threads: 3, duration_sec: 2.5 }), true);
  assert.equal(s.dataChanged({ session_id: 's1', version: 5, samples: 500 }), false);
  assert.equal(s.dataChanged({ session_id: 's1', version: 4, samples: 1 }), false);
  assert.equal(s.dataChanged({ version: 6 }), false);
  assert.deepEqual(s.counts('s1'), { version: 5, chunks: 5, samples: 500, lost_samples: 1, threads: 3, duration_sec: 2.5 });
});

test('two asks in flight share one request; a failure is not kept', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson });
  const [a, b] = await Promise.all([s.view('s1', '/q'), s.view('s1', '/q')]);
  assert.equal(a, b);
  assert.equal(c.asked.length, 1);
  await assert.rejects(s.view('s1', '/fail'));
  await assert.rejects(s.view('s1', '/fail'));
  assert.equal(c.asked.filter((p) => p === '/fail').length, 2);
});

test('the cache holds at most `limit` answers, the least recently used dropped', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson, limit: 3 });
  for (const p of ['/a', '/b', '/c']) await s.view('s1', p);
  await s.view('s1', '/a'); // used again: /b is now the oldest
  await s.view('s1', '/d');
  assert.equal(s.cached(), 3);
  await s.view('s1', '/a');
  await s.view('s1', '/c');
  assert.equal(c.asked.length, 4);
  await s.view('s1', '/b');
  assert.equal(c.asked.length, 5);
});

test('a forgotten session keeps nothing', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson });
  s.dataChanged({ session_id: 's1', version: 1 });
  await s.view('s1', '/x');
  await s.view('s2', '/x');
  s.forget('s1');
  assert.equal(s.counts('s1'), null);
  assert.equal(s.cached(), 1);
});

test('after a reset (the stream reopened) lower versions are news again and nothing is cached', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson });
  s.dataChanged({ session_id: 's1', version: 7 });
  await s.view('s1', '/x');
  s.reset();
  assert.equal(s.cached(), 0);
  assert.equal(s.dataChanged({ session_id: 's1', version: 1 }), true);
  await s.view('s1', '/x');
  assert.equal(c.asked.length, 2);
});

test('with a lag, an answer for an earlier version serves until it is that old', async () => {
  const c = collector();
  let clock = 1000;
  const s = createStore({ fetchJson: c.fetchJson, now: () => clock });
  const path = '/api/sessions/s1';
  await s.view('s1', path, { lag: 5000 });
  s.dataChanged({ session_id: 's1', version: 2 });
  clock += 4999;
  assert.equal((await s.view('s1', path, { lag: 5000 })).serial, 1, 'younger than the lag: kept');
  assert.equal((await s.view('s1', path)).serial, 2, 'without a lag: the new version is asked for');
  s.dataChanged({ session_id: 's1', version: 3 });
  clock += 5000;
  assert.equal((await s.view('s1', path, { lag: 5000 })).serial, 3, 'as old as the lag: asked again');
  assert.equal(c.asked.length, 3);
});

test('refresh drops the answers about one session, and keeps its counts and the others', async () => {
  const c = collector();
  const s = createStore({ fetchJson: c.fetchJson });
  s.dataChanged({ session_id: 's1', version: 4, samples: 10 });
  await s.view('s1', '/api/sessions/s1');
  await s.view('s2', '/api/sessions/s2');
  s.refresh('s1');
  assert.equal(s.counts('s1').samples, 10);
  assert.equal((await s.view('s1', '/api/sessions/s1')).serial, 3, 'asked again');
  assert.equal((await s.view('s2', '/api/sessions/s2')).serial, 2, 'another session: kept');
});

test('actions reach the views that subscribed, until they unsubscribe', () => {
  const s = createStore({ fetchJson: async () => ({}) });
  const callers = [], sources = [];
  const off = s.subscribe((what, detail) => { if (what === 'callers') callers.push(detail); });
  s.subscribe((what, detail) => { if (what === 'source') sources.push(detail); });
  s.act('callers', 'hash_strings');
  s.act('source', 'main');
  off();
  s.act('callers', 'never');
  assert.deepEqual(callers, ['hash_strings']);
  assert.deepEqual(sources, ['main']);
});

test('the status is the stream\'s: null until it says, told to subscribers, forgotten on reset', () => {
  const s = createStore({ fetchJson: async () => ({}) });
  const told = [];
  s.subscribe((what) => told.push(what));
  assert.equal(s.status(), null);
  s.setStatus({ version: '1', fleet: null, memory: { budget: 5 } });
  assert.equal(s.status().memory.budget, 5);
  assert.deepEqual(told, ['status']);
  s.reset();
  assert.equal(s.status(), null);
});

test('the fleet\'s answers are good for the lag, whatever the stream says', async () => {
  const c = collector();
  let clock = 0;
  const s = createStore({ fetchJson: c.fetchJson, now: () => clock });
  const path = '/api/fleet/devices?from=60';
  assert.equal((await s.view(FLEET, path, { lag: 10000 })).serial, 1);
  s.dataChanged({ session_id: 'any', version: 1 });
  clock += 9999;
  assert.equal((await s.view(FLEET, path, { lag: 10000 })).serial, 1, 'younger than the lag: kept');
  clock += 1;
  assert.equal((await s.view(FLEET, path, { lag: 10000 })).serial, 2, 'as old as the lag: asked again');
  clock += 60000; // no news from this collector: other collectors may have written
  assert.equal((await s.view(FLEET, path, { lag: 10000 })).serial, 3);
});
