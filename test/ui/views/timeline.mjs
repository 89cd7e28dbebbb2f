// Browser test of the UI, timeline: The Timeline tab: a two-phase workload's thread lanes and flame chart, a window dragged across them.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, start, tableShows, until } from '../harness.mjs';

export async function lanesAndChart(t) {
  const { bin, http, fetch, session, again, cpu } = t;
  // The timeline of a two-phase workload: its thread's flame chart shows phase A, then B.
  t.doing = "the timeline";
  let phases = '';
  for (let i = 1; i <= 40; ++i)
    phases += `worker 7/7 ${(i / 4).toFixed(6)}: 1 cpu-clock:\n\t1 ${i <= 20 ? 'phase_a' : 'phase_b'} (/bin/app)\n\t2 main (/bin/app)\n\n`;
  const twoPhase = await (await fetch(http + '/api/sessions/import', { method: 'POST', body: phases })).json();
  await again.goto(`${http}/#session=${twoPhase.session_id}&tab=timeline&tid=7`);
  await again.waitForFunction(() => Number(document.querySelector('#chart').dataset.boxes) >= 3, null, { timeout: 15000 });
  const nameAt = async (fraction) => {
    const chartBox = await again.locator('#chart').boundingBox();
    await again.mouse.move(chartBox.x + chartBox.width * fraction, chartBox.y + 16 + 8);
    await again.locator('#chart-tip').waitFor({ timeout: 5000 });
    return again.locator('#chart-tip b').textContent();
  };
  const early = await nameAt(0.1), late = await nameAt(0.9);
  await again.mouse.move(0, 0);
  check(early === 'phase_a' && late === 'phase_b' && await again.locator('#lanes .lane').count() === 1,
    `the timeline's flame chart runs in time order: ${early} then ${late}`);
  // The pointer on the lane shows what the thread ran there: its commonest stack, leaf last.
  const laneBox = await again.locator('#lanes .lane canvas').boundingBox();
  const laneLeaves = async (from, to) => { // the leaves the tip names, the pointer swept across
    const seen = new Set();
    for (let x = laneBox.x + laneBox.width * from; x < laneBox.x + laneBox.width * to; x += 3) {
      await again.mouse.move(x, laneBox.y + 9);
      const leaf = await again.evaluate(() => !document.querySelector('#lane-tip').hidden && document.querySelector('#lane-tip li.here')?.firstChild.textContent.trim());
      if (leaf) seen.add(leaf);
    }
    return [...seen];
  };
  const laneEarly = await laneLeaves(0.02, 0.45), laneLate = await laneLeaves(0.55, 0.98);
  await again.mouse.move(0, 0);
  check(laneEarly.join() === 'phase_a' && laneLate.join() === 'phase_b' && await again.locator('#lane-tip').isHidden(),
    `the pointer on a lane shows the thread's stack there (${laneEarly} early, ${laneLate} late)`);
  // Dragging across the lane zooms into that window, shared with the other views.
  await again.mouse.move(laneBox.x + laneBox.width * 0.6, laneBox.y + 9);
  await again.mouse.down();
  await again.mouse.move(laneBox.x + laneBox.width * 0.9, laneBox.y + 9, { steps: 4 });
  await again.mouse.up();
  await again.waitForFunction(() => /start=.*end=/.test(location.hash), null, { timeout: 5000 });
  await again.waitForFunction(() => / 7 [0-9.]+-[0-9.]+$/.test(document.querySelector('#tab-timeline').dataset.shows || ''), null, { timeout: 10000 });
  const zoomedEarly = await nameAt(0.25);
  await again.mouse.move(0, 0);
  check(zoomedEarly === 'phase_b', `dragging across a lane zooms into that window (it starts in ${zoomedEarly})`);
  // The window is said above every view, the Functions tab's too, counted, and its ✕ undoes it.
  t.doing = 'the window on the Functions tab';
  await again.locator('#tabs button[data-tab="functions"]').click();
  await again.waitForFunction(() => !document.querySelector('#scope').hidden && document.querySelector('#scope [data-scope="window"]') &&
    /\d+ of \d+ samples/.test(document.querySelector('#scope-count').textContent), null, { timeout: 10000 });
  const windowChip = (await again.locator('#scope [data-scope="window"]').textContent()).trim();
  const counted = await again.locator('#scope-count').textContent();
  const inWindow = Number(counted.split(' of ')[0]);
  const rowsInWindow = await again.evaluate(() => [...document.querySelectorAll('#functions tbody tr[data-function]')].map((tr) => tr.dataset.function));
  check(inWindow > 0 && inWindow < 40 && !rowsInWindow.includes('phase_a') && /in this window/.test(await again.locator('#session-info').textContent()),
    `a window shows on the Functions tab ("${windowChip}", ${counted}; rows ${rowsInWindow.join(', ')})`);
  await again.locator('#scope [data-scope="window"] button').click();
  await again.waitForFunction(() => !/start=/.test(location.hash) && !document.querySelector('#scope [data-scope="window"]'), null, { timeout: 10000 });
  // Back to the window, on the Timeline.
  await again.goBack();
  await again.waitForFunction(() => /start=.*end=/.test(location.hash), null, { timeout: 5000 });
  await again.locator('#tabs button[data-tab="timeline"]').click();
  await again.waitForFunction(() => / 7 [0-9.]+-[0-9.]+$/.test(document.querySelector('#tab-timeline').dataset.shows || ''), null, { timeout: 10000 });
  // The wheel zooms about the pointer: the window shrinks around the time under it, one URL
  // change once the wheel rests; turned the other way it widens again.
  const windowOf = () => again.evaluate(() => { const p = new URLSearchParams(location.hash.slice(1)); return [Number(p.get('start')), Number(p.get('end'))]; });
  const [s0, e0] = await windowOf();
  const wheelAt = async (fraction, dy, times) => {
    const box = await again.locator('#lanes .lane canvas').boundingBox();
    await again.mouse.move(box.x + box.width * fraction, box.y + 9);
    const before = await again.evaluate(() => location.hash);
    for (let k = 0; k < times; ++k) await again.mouse.wheel(0, dy);
    await again.waitForFunction((b) => location.hash !== b, before, { timeout: 5000 });
    await again.waitForFunction(() => / 7 [0-9.]+-[0-9.]+$/.test(document.querySelector('#tab-timeline').dataset.shows || '') && document.querySelector('#tab-timeline').dataset.shows.endsWith(`${new URLSearchParams(location.hash.slice(1)).get('start')}-${new URLSearchParams(location.hash.slice(1)).get('end')}`), null, { timeout: 10000 });
    return windowOf();
  };
  const pivot = s0 + (e0 - s0) * 0.25;
  // One notch at a time (notches further apart than the rest the UI waits for are two zooms).
  const [s1, e1] = await wheelAt(0.25, -100, 1);
  // 0.8 of the span, the time under the pointer still a quarter in.
  const kept = Math.abs(s1 + (e1 - s1) * 0.25 - pivot) < (e0 - s0) * 0.02;
  check(Math.abs((e1 - s1) / (e0 - s0) - 0.8) < 0.02 && kept,
    `the wheel zooms in about the pointer (${s0.toFixed(2)}–${e0.toFixed(2)} s → ${s1.toFixed(2)}–${e1.toFixed(2)} s, ${pivot.toFixed(2)} s kept under it)`);
  const [s2, e2] = await wheelAt(0.25, 100, 1);
  check(e2 - s2 > e1 - s1, `and out again (${s2.toFixed(2)}–${e2.toFixed(2)} s)`);
  await again.mouse.move(0, 0);
  await again.goto(`${http}/#session=${session}&tab=functions`);
  await tableShows(again, { session });
}

// A link that drops mid-run (a relay reset, then 3 s of refusals): the run goes on on the
// device; its session says how long the link was down and the timeline marks when.
export async function linkOutage(t) {
  const { bin, http, fetch, demo, agentPort, again, session } = t;
  t.doing = 'a link that drops mid-run';
  const pairs = new Set();
  let refuseUntil = 0;
  const relay = net.createServer((device) => {
    if (Date.now() < refuseUntil) { device.resetAndDestroy(); return; }
    const collector = net.connect(Number(agentPort), '127.0.0.1');
    const pair = [device, collector];
    pairs.add(pair);
    for (const [from, to] of [[device, collector], [collector, device]]) {
      from.pipe(to);
      from.on('error', () => to.destroy());
      from.on('close', () => { to.destroy(); pairs.delete(pair); });
    }
  });
  await new Promise((r) => relay.listen(0, '127.0.0.1', r));
  const agent = start(bin('agent/perfwire-agent'), ['--server', `127.0.0.1:${relay.address().port}`, '--pid', String(demo.pid), '--duration', '1', '--name', 'flaky-link']);
  try {
    const target = async () => (await (await fetch(http + '/api/targets')).json()).find((x) => x.hostname === 'flaky-link');
    const first = await until('the flaky link\'s session', async () => {
      const x = await target();
      return x?.session_id && (await (await fetch(`${http}/api/sessions/${x.session_id}`)).json()).samples > 20 && x;
    });
    refuseUntil = Date.now() + 3000;
    for (const [a, b] of pairs) { a.resetAndDestroy(); b.resetAndDestroy(); }
    await until('the run back in its session', async () => { const x = await target(); return x && x.id !== first.id && x.session_id === first.session_id; }, 40000);
    await new Promise((r) => setTimeout(r, 2000)); // live data behind the backlog
    await again.goto(`${http}/#session=${first.session_id}&tab=timeline`);
    await again.waitForFunction(() => Number(document.querySelector('#ruler')?.dataset.gaps) >= 1, null, { timeout: 15000 });
    const card = await again.locator('[data-card="link-gaps"]').textContent({ timeout: 10000 });
    check(/link down 1 time/.test(card) && /\d/.test(card),
      `a dropped link: one session, the outage in its cards ("${card.trim().replace(/\s+/g, ' ')}") and marked on the timeline`);
    await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'link-outage.png') });
    // Back where the steps after this one expect the page.
    await again.goto(`${http}/#session=${session}&tab=functions`);
    await tableShows(again, { session });
  } finally {
    agent.kill('SIGTERM');
    for (const [a, b] of pairs) { a.destroy(); b.destroy(); }
    relay.close();
  }
}
