// Browser test of the UI, off-CPU: a real recording with --off-cpu of threads that nap, block
// on a pipe and spin (test/workloads/waits.cpp), imported; its waits in the function table and
// the flame graph, the wall view, and the timeline's wait spans.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, start, tableShows, until } from '../harness.mjs';

export async function waitsEverywhere(t) {
  const { build, bin, http, fetch, again, session } = t;
  t.doing = 'recording waits with --off-cpu';
  const work = start(join(build, 'test/workloads/perfwire-waits'), ['60']);
  await new Promise((r) => setTimeout(r, 300)); // its threads named and waiting
  const out = join(tmpdir(), `perfwire-ui-waits-${process.pid}.txt`);
  const agent = start(bin('agent/perfwire-agent'), ['--output', out, '--pid', String(work.pid), '--off-cpu', '--duration', '2', '--state-dir', '']);
  await until('the off-cpu recording', async () => agent.exitCode !== null, 60000);
  work.kill('SIGTERM');
  check(agent.exitCode === 0 && existsSync(out), `the agent records waits with --off-cpu (${agent.log.trim().split('\n').pop()})`);
  const text = readFileSync(out);
  rmSync(out, { force: true });
  const imp = await (await fetch(http + '/api/sessions/import?name=waits.txt', { method: 'POST', body: text })).json();
  const id = imp.session_id;

  t.doing = 'the off-cpu function table';
  await again.goto(`${http}/#session=${id}&tab=functions&event=off-cpu`);
  await tableShows(again, { session: id, event: 'off-cpu' });
  const rowsOf = () => again.evaluate(() => [...document.querySelectorAll('#functions tbody tr[data-function]')].map((tr) => tr.dataset.function));
  const options = await again.locator('#event option').allTextContents();
  const waitRows = await rowsOf();
  const info = await again.locator('#session-info').textContent();
  check(options.includes('off-cpu') && options.includes('wall') && waitRows.includes('[sleeping]') && waitRows.some((n) => n.startsWith('clock_nanosleep')) && !waitRows.includes('spin_a_while'),
    `the event choice holds off-cpu and wall, and off-cpu lists where threads waited (${waitRows.slice(0, 6).join(', ')}; ${info.trim().slice(0, 80)})`);

  t.doing = 'the off-cpu flame graph';
  await again.goto(`${http}/#session=${id}&tab=flamegraph&event=off-cpu`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 5, null, { timeout: 15000 });
  const flame = await (await fetch(`${http}/api/sessions/${id}/flamegraph?event=off-cpu`)).json();
  const names = [];
  const walk = (n) => { names.push(n.name); for (const c of n.children || []) walk(c); };
  walk(flame.root);
  check(names.includes('[sleeping]') && names.some((n) => n.startsWith('clock_nanosleep')) && flame.total > 1e9,
    `the off-cpu flame graph draws the waits, ${(flame.total / 1e9).toFixed(1)} s of them, topped by their kind`);

  t.doing = 'the wall view';
  await again.goto(`${http}/#session=${id}&tab=functions&event=wall`);
  await tableShows(again, { session: id, event: 'wall' });
  const wallRows = await rowsOf();
  check(wallRows.includes('[sleeping]') && wallRows.some((n) => n.endsWith('spin_a_while')),
    `the wall view holds on-CPU work and waits together (${wallRows.slice(0, 6).join(', ')})`);

  t.doing = 'the timeline\'s waits';
  await again.goto(`${http}/#session=${id}&tab=timeline`);
  await again.waitForFunction(() => /waiting:/.test(document.querySelector('#timeline-info').textContent) && document.querySelectorAll('#lanes .lane').length >= 3, null, { timeout: 15000 });
  const napper = again.locator('#lanes .lane', { hasText: 'napper' }).locator('canvas');
  const box = await napper.boundingBox();
  await again.mouse.move(box.x + box.width * 0.5, box.y + 9);
  await again.locator('#lane-tip').waitFor({ timeout: 5000 });
  const tip = await again.locator('#lane-tip').textContent();
  await again.mouse.move(0, 0);
  check(/waiting here: sleeping/.test(tip), `a napping thread's lane shows it waiting, and why ("${tip.replace(/\s+/g, ' ').slice(0, 90)}")`);
  await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'off-cpu-timeline.png') });
  await again.goto(`${http}/#session=${id}&tab=flamegraph&event=off-cpu`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 5, null, { timeout: 15000 });
  await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'off-cpu-flame.png') });

  t.doing = 'dropping a kind of wait';
  // Bottom-up, the kinds of wait are the first frames: the widest dropped from its menu.
  await again.goto(`${http}/#session=${id}&tab=flamegraph&event=off-cpu&inverted=1`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 3, null, { timeout: 15000 });
  const fb = await again.locator('#flame').boundingBox();
  await again.mouse.move(fb.x + fb.width / 2, fb.y + 18 + 9);
  await again.locator('#flame-tip').waitFor({ timeout: 5000 });
  const kind = await again.locator('#flame-tip b').textContent();
  await again.mouse.click(fb.x + fb.width / 2, fb.y + 18 + 9, { button: 'right' });
  await again.locator('#flame-menu button[data-act="drop"]').click();
  await again.waitForFunction((k) => document.querySelector('#flame').dataset.shape === `||${k}||` && document.querySelector('#transforms').dataset.shows === `||${k}||`, kind, { timeout: 15000 });
  const whole = (await (await fetch(`${http}/api/sessions/${id}/flamegraph?event=off-cpu`)).json()).total;
  const kept = (await (await fetch(`${http}/api/sessions/${id}/flamegraph?event=off-cpu&drop=${encodeURIComponent(kind)}`)).json()).total;
  const chip = await again.locator('#transform-chips').textContent();
  check(/^\[/.test(kind) && /dropped/.test(chip) && kept < whole && new URL(again.url()).hash.includes('drop='),
    `dropping ${kind} leaves its waits out, the total too (${(whole / 1e9).toFixed(2)} s → ${(kept / 1e9).toFixed(2)} s), said by a chip and kept in the URL`);
  await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'off-cpu-drop.png') });
  await again.locator('#transform-chips [data-undrop]').click();
  await again.waitForFunction(() => document.querySelector('#flame').dataset.shape === '||||', null, { timeout: 15000 });

  t.doing = 'the wall timeline';
  // Wall: a lane is when the thread ran, its waits the spans under it; a wait still shows
  // the stack it waited in.
  await again.goto(`${http}/#session=${id}&tab=timeline&event=wall`);
  await again.waitForFunction(() => /waiting:/.test(document.querySelector('#timeline-info').textContent) && document.querySelectorAll('#lanes .lane').length >= 3, null, { timeout: 15000 });
  const wallTimeline = await (await fetch(`${http}/api/sessions/${id}/timeline?event=wall&width=200`)).json();
  const napLane = wallTimeline.threads.find((l) => l.comm === 'napper');
  const ranShare = napLane.activity.reduce((a, x) => a + x, 0) / napLane.weight;
  const wallBox = await again.locator('#lanes .lane', { hasText: 'napper' }).locator('canvas').boundingBox();
  await again.mouse.move(wallBox.x + wallBox.width * 0.5, wallBox.y + 9);
  await again.locator('#lane-tip').waitFor({ timeout: 5000 });
  const wallTip = await again.locator('#lane-tip').textContent();
  await again.mouse.move(0, 0);
  check(ranShare < 0.2 && /waiting here: sleeping/.test(wallTip) && /stack/.test(wallTip),
    `in the wall view a napper's lane is when it ran (${(100 * ranShare).toFixed(1)} % of its wall time) and its tip says where it waited ("${wallTip.replace(/\s+/g, ' ').slice(0, 110)}")`);
  // Back where the steps after this one expect the page.
  await again.goto(`${http}/#session=${session}&tab=functions`);
  await tableShows(again, { session });
}
