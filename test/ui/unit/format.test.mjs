// format.js: pure formatting, the escaping that keeps hostile names inert above all.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { amount, attr, count, counterTotal, deltaCell, diffColour, duration, esc, eventName, largestChange, mib, NOISE_FILL, moduleHue, pct, processOf, sessionName, tickStep, unitOf, visible, zoomWindow } from '../../../ui/format.js';

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
  // A flight recorder's capture says what fired it, its text escaped.
  const captured = processOf({ process: 'demo', pid: 12, capture: { trigger: 'log: <b>watchdog</b>', window_s: 19.6 } });
  assert.match(captured, /captured: log: &lt;b&gt;watchdog&lt;\/b&gt;<\/span>$/);
  assert.match(captured, /title="a flight recorder's capture: log: &lt;b&gt;watchdog&lt;\/b&gt;; 20 s held before it"/);
});

test('sessions are named by what they are: process (pid) on host, an import by its file', () => {
  assert.equal(sessionName({ process: 'demo', pid: 12, hostname: 'board', event_types: ['cpu-clock:pppH'], duration_sec: 65 }),
    'demo (12) on board · cpu-clock · 1 min 5 s');
  assert.equal(sessionName({ imported: true, source: '/home/me/slow.perf.data', event_types: ['cycles'] }), 'slow.perf.data · cycles');
  assert.equal(sessionName({ continuous: true, hostname: 'r1' }), 'whole system on r1');
  assert.equal(sessionName({ pid: 7 }), 'process (7)'); // nothing sampled yet
});

test('counter totals make the rate perf would print over the whole session', () => {
  assert.deepEqual(counterTotal({ value: 3000, unit: 'msec' }, 1.5), { shown: '3 s', rate: '2.00 CPUs utilized' });
  assert.deepEqual(counterTotal({ value: 2000, unit: '' }, 2), { shown: '2,000', rate: '1,000/s' });
  assert.equal(counterTotal({ value: 5, unit: '' }, 0).rate, '');
});

test('a module has one hue everywhere, from its file name; the usual ones apart', () => {
  assert.equal(moduleHue('/usr/lib/x86_64-linux-gnu/libc.so.6'), moduleHue('/lib/libc.so.6'));
  assert.equal(moduleHue('/bin/app'), moduleHue('/bin/app'));
  const usual = ['/bin/app', 'libc.so.6', '[kernel.kallsyms]', 'libstdc++.so.6', 'ld-linux-x86-64.so.2', 'perfwire-demo'].map(moduleHue);
  for (const h of usual) assert.ok(h >= 0 && h < 360);
  assert.ok(new Set(usual).size >= 5, usual.join(' '));
});

test('diff colours: grey within the noise, deeper in proportion to the change', () => {
  assert.equal(diffColour(0.3, 0.5, 4), NOISE_FILL);
  assert.equal(diffColour(-0.3, 0.5, 4), NOISE_FILL);
  const light = (c) => Number(c.match(/,(\d+)%\)$/)[1]);
  const small = diffColour(-0.4, 0.1, 2), large = diffColour(-2, 0.1, 2);
  assert.match(small, /^hsl\(220,/); // shrank: blue
  assert.match(diffColour(1, 0.1, 2), /^hsl\(0,/); // grew: red
  assert.ok(light(large) < light(small), `${small} is lighter than ${large}`);
  assert.notEqual(small, large);
});

test('one scale for every compared view: the largest change beyond its noise', () => {
  // A change within its noise never sets the scale, however large; none counts as 0.05 points.
  assert.equal(largestChange([[-3, 4], [1.5, 0.2], [-2, 0.5], [0.04, undefined], [null, 1]]), 2);
  assert.equal(largestChange([]), 0);
  const cell = deltaCell(-2, 0.5, 2, 'baseline "a" → b');
  assert.match(cell, /class="num delta shrank"/);
  assert.match(cell, />-2\.00<\/td>$/);
  assert.match(cell, /title="baseline &quot;a&quot; → b"/); // escaped
  assert.match(deltaCell(0.3, 0.5, 2, 'x'), /class="num delta muted".*title="x, within the noise">\+0\.30</);
});

test('the time axis: ticks 1, 2 or 5 apart, zoom about the pointer within the session', () => {
  assert.equal(tickStep(18, 1200), 2);
  assert.equal(tickStep(0.3, 1000), 0.05);
  assert.equal(tickStep(100, 300), 50);
  assert.deepEqual(zoomWindow(0, 10, 0.5, 0.5, 10), { start: 2.5, end: 7.5 });
  assert.deepEqual(zoomWindow(0, 10, 0, 0.5, 10), { start: 0, end: 5 });
  assert.equal(zoomWindow(2, 8, 0.5, 2, 10), null); // out past the whole session
  const w = zoomWindow(8, 10, 1, 0.5, 10);
  assert.ok(w.end <= 10 && Math.abs(w.end - w.start - 1) < 1e-9);
});
