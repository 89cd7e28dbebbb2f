// api.js: every session and target URL the views ask for.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { exportUrl, fleetUrl, query, sessionUrl, targetUrl } from '../../../ui/api.js';

test('a query joins encoded text, URLSearchParams and objects, leaving empty values out', () => {
  assert.equal(query(), '');
  assert.equal(query('weight=period&tid=7', new URLSearchParams({ focus: 'a b' }), { function: 'x&y', module: null, width: 0 }),
    '?weight=period&tid=7&focus=a+b&function=x%26y&width=0');
  assert.equal(query('', null, {}), '');
});

test('session, export, target and fleet URLs', () => {
  assert.equal(sessionUrl('20261129_a b'), '/api/sessions/20261129_a%20b');
  assert.equal(sessionUrl('s1', 'flamegraph', 'weight=samples', { min_pct: 0.05 }), '/api/sessions/s1/flamegraph?weight=samples&min_pct=0.05');
  assert.equal(exportUrl('s1', 'pprof', 'tid=3'), '/api/sessions/s1/export?format=pprof&tid=3');
  assert.equal(targetUrl('t1/x', 'command'), '/api/targets/t1%2Fx/command');
  assert.equal(fleetUrl('functions', { limit: 50 }), '/api/fleet/functions?limit=50');
});
