// state.js: the URL hash read and changed through its one table of keys.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { apply, KEYS, parse } from '../../../ui/state.js';

test('an empty hash reads as the defaults', () => {
  const s = parse('');
  assert.equal(s.session, null);
  assert.equal(s.tab, 'functions');
  assert.equal(s.inverted, false);
  assert.deepEqual(Object.keys(s).sort(), Object.keys(KEYS).sort());
});

test('every key reads back what apply wrote, with or without the #', () => {
  const hash = apply('', { session: 's1', tab: 'flamegraph', tid: 42, inverted: true, hide: 'a;b', fn: 'operator<' });
  for (const h of [hash, `#${hash}`]) {
    const s = parse(h);
    assert.equal(s.session, 's1');
    assert.equal(s.tab, 'flamegraph');
    assert.equal(s.tid, '42');
    assert.equal(s.inverted, true);
    assert.equal(s.hide, 'a;b');
    assert.equal(s.fn, 'operator<');
  }
});

test('null, empty and false remove a key; unknown keys are kept, not read', () => {
  let h = apply('wizard&session=s1&zoom=main', { zoom: null, inverted: false, tab: '' });
  assert.equal(new URLSearchParams(h).has('zoom'), false);
  assert.equal(new URLSearchParams(h).has('wizard'), true);
  assert.equal(parse(h).tab, 'functions');
  assert.equal('wizard' in parse(h), false);
  h = apply(h, { event: 'cpu-clock' });
  assert.equal(parse(h).event, 'cpu-clock');
});

test("opening another session drops the last one's function, zoom, window and filters", () => {
  const before = apply('', { session: 'a', tab: 'source', fn: 'hot', zoom: 'main;hot', start: '1', end: '2', tid: '7', focus: 'f', hide: 'h', baseline: 'b', inverted: true, event: 'cycles' });
  const after = parse(apply(before, { session: 'b' }));
  assert.equal(after.session, 'b');
  assert.equal(after.tab, 'source'); // the tab is not the session's
  for (const k of Object.keys(KEYS).filter((k) => KEYS[k].session)) assert.equal(after[k], KEYS[k].kind === 'bool' ? false : null, k);
  // ... unless the change sets them itself
  assert.equal(parse(apply(before, { session: 'b', fn: 'cold' })).fn, 'cold');
  // the same session again keeps them
  assert.equal(parse(apply(before, { session: 'a', tab: 'functions' })).fn, 'hot');
});

test('values with the URL syntax survive the round trip', () => {
  const odd = 'std::map<int, std::string>::operator[](int const&) & = #?%';
  assert.equal(parse(apply('', { fn: odd })).fn, odd);
});

test('the weight is kept across sessions and reads as period when absent', () => {
  assert.equal(parse('').weight, 'period');
  assert.equal(parse('weight=samples').weight, 'samples');
  assert.equal(parse(apply('session=a&weight=samples&tid=3', { session: 'b' })).weight, 'samples');
});

test('the Fleet view\'s state: a flag key that reads as present, its choices beside it', () => {
  const s = parse('#fleet&devices=a,b&range=0&compare=before');
  assert.equal(s.fleet, true);
  assert.equal(s.devices, 'a,b');
  assert.equal(s.range, '0');
  assert.equal(parse('#fleet').range, '3600');
  assert.equal(parse('session=x').fleet, false);
  assert.equal(apply('fleet&devices=a', { compare: 'build', base_build: 'ab12' }), 'fleet&devices=a&compare=build&base_build=ab12');
  assert.equal(apply('', { fleet: true, fn: 'main' }), 'fleet&fn=main');
  assert.equal(apply('fleet&devices=a', { fleet: false, devices: null }), '');
});
