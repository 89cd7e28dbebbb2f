// views/landing.js: which targets the landing page lists, in which order, and how many.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentArch, pickTargets } from '../../../ui/views/landing.js';

const fleet = Array.from({ length: 200 }, (_, i) => ({
  id: `t${i + 1}`, hostname: `board-${String(i).padStart(3, '0')}`, agent: 'perfwire', peer: `10.0.${i % 4}.${i}:4000`,
  state: i % 10 === 0 ? 'idle' : 'profiling', pid: 1000 + i, session_id: i % 10 === 0 ? null : `s${i}`, connected_at: 1000 + i,
}));
const samples = (t) => (t.session_id ? Number(t.session_id.slice(1)) * 10 : 0);

test('200 targets: a page at a time, with the total', () => {
  const r = pickTargets(fleet, { limit: 50, samples });
  assert.equal(r.shown.length, 50);
  assert.equal(r.total, 200);
  assert.equal(r.all, 200);
  assert.equal(r.shown[0].id, 't200'); // busiest first
  assert.ok(r.shown.every((t, i) => i === 0 || samples(r.shown[i - 1]) >= samples(t)));
});

test('search matches host, id, address and pid, in any case', () => {
  assert.deepEqual(pickTargets(fleet, { q: 'BOARD-01', samples }).shown.map((t) => t.hostname).sort(),
    Array.from({ length: 10 }, (_, i) => `board-01${i}`));
  assert.equal(pickTargets(fleet, { q: 't17' }).total, 11); // t17, t170…t179
  assert.equal(pickTargets(fleet, { q: '10.0.3.' }).total, 50);
  assert.equal(pickTargets(fleet, { q: '1042' }).shown[0].id, 't43');
  assert.equal(pickTargets(fleet, { q: 'nothing like it' }).total, 0);
});

test('sorts: by state (profiling first), by host, newest first', () => {
  const byState = pickTargets(fleet, { sort: 'state' }).shown;
  assert.equal(byState[0].state, 'profiling');
  assert.equal(byState.at(-1).state, 'idle');
  assert.equal(pickTargets(fleet, { sort: 'host' }).shown[0].hostname, 'board-000');
  assert.equal(pickTargets(fleet, { sort: 'newest' }).shown[0].id, 't200');
});

test('uname -m names the agent to fetch', () => {
  assert.equal(agentArch('armv7l'), 'armv7');
  assert.equal(agentArch(' AARCH64 '), 'aarch64');
  assert.equal(agentArch('mips'), null);
});
