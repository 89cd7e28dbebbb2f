// format.js: pure formatting, the escaping that keeps hostile names inert above all.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { amount, attr, count, duration, esc, eventName, mib, pct, processOf, unitOf, visible } from '../../../ui/format.js';

test('esc makes markup text and shows the controls that hide or reorder text', () => {
  assert.equal(esc('<img src=x onerror=alert(1)>'), '&lt;img src=x onerror=alert(1)&gt;');
  assert.equal(attr('"a" & b'), '&quot;a&quot; &amp; b');
  assert.equal(visible('\u202eevil'), '⟨U+202E⟩evil');
  assert.equal(visible('a\u0000b\u200bc'), 'a⟨U+0000⟩b⟨U+200B⟩c');
  assert.equal(esc('tab\tand\nnewline'), 'tab\tand\nnewline'); // layout controls stay
});

test('amounts read in their unit', () => {
  assert.equal(amount(9.02e9, 'ns'), '9.02 s');
  assert.equal(amount(2.5e11, 'ns'), '250 s');
  assert.equal(amount(1.5e6, 'ns'), '1.5 ms');
  assert.equal(amount(1500, 'ns'), '2 µs');
  assert.equal(amount(12, 'ns'), '12 ns');
  assert.equal(amount(1.2e6, 'count'), '1.2 M');
  assert.equal(amount(15000, 'count'), '15.0 k');
  assert.equal(amount(undefined, 'count'), '0');
  assert.equal(unitOf({ weight: 'period', event: 'cpu-clock:pppH' }), 'ns');
  assert.equal(unitOf({ weight: 'samples', event: 'cpu-clock' }), 'count');
  assert.equal(unitOf({ weight: 'period', event: 'cycles' }), 'count');
});

test('durations, counts, sizes, percentages and event names', () => {
  assert.equal(duration(null), '');
  assert.equal(duration(41.42), '41.4 s');
  assert.equal(duration(125), '2 min 5 s');
  assert.equal(duration(5400), '1.5 h');
  assert.equal(count(null), '');
  assert.equal(count(0), '0');
  assert.equal(mib(1048576 * 3), '3.0');
  assert.equal(mib(1048576 * 300), '300');
  assert.equal(pct(12.345), '12.35');
  assert.equal(pct(undefined), '0.00');
  assert.equal(eventName('cpu-clock:pppH'), 'cpu-clock');
  assert.equal(eventName('cpu_core/cycles/'), 'cpu_core/cycles/');
});

test('a session reads as its process, its imported file, or the whole system profiled continuously', () => {
  assert.equal(processOf({ process: 'demo', pid: 12 }), 'demo <span class="muted">12</span>');
  assert.equal(processOf({ imported: true, source: '/tmp/<x>.data' }), '<span class="muted">import</span> &lt;x&gt;.data');
  assert.equal(processOf({ continuous: true, pid: null }), '<span class="muted">continuous</span> whole system');
  assert.equal(processOf({ continuous: true, pid: 7, process: 'p' }), 'p <span class="muted">7</span>');
});
