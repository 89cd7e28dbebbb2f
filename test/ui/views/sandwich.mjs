// Browser test of the UI, sandwich: The Callers tab: a function's callers, checked against the collapsed export.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { check, tableShows } from '../harness.mjs';

export async function callersOf(t) {
  const { http, fetch, session, again } = t;
  // The sandwich of hash_strings: its callers are the frames right above it in every stack,
  // as the collapsed export (an independent reading of the same profile) has them.
  t.doing = "the sandwich of hash_strings";
  await again.evaluate(() => { location.hash = location.hash.replace(/tab=[^&]*/, 'tab=functions'); });
  await tableShows(again, { session });
  await again.locator('#functions tbody tr', { hasText: 'hash_strings' }).first().locator('button[data-sandwich]').click();
  await again.waitForFunction(() => /hash_strings/.test(document.querySelector('#tab-sandwich').dataset.shows || ''), null, { timeout: 15000 });
  const callerNames = await again.locator('#callers tbody td.name').allTextContents();
  const collapsed = await (await fetch(`${http}/api/sessions/${session}/export?format=collapsed`)).text();
  const byCaller = new Map();
  for (const line of collapsed.split('\n')) {
    const cut = line.lastIndexOf(' '), frames = line.slice(0, cut).split(';'), w = Number(line.slice(cut + 1));
    const i = frames.findIndex((f) => f.endsWith('::hash_strings'));
    if (i > 0) byCaller.set(frames[i - 1], (byCaller.get(frames[i - 1]) || 0) + w);
  }
  const expectedCaller = [...byCaller].sort((a, b) => b[1] - a[1])[0]?.[0];
  // Its callers as a flame graph: the function on top, its heaviest caller right under it.
  await again.waitForFunction(() => Number(document.querySelector('#callers-flame').dataset.boxes) >= 2, null, { timeout: 15000 });
  const flameBox = await again.locator('#callers-flame').boundingBox();
  await again.mouse.move(flameBox.x + 5, flameBox.y + 18 + 9);
  await again.locator('#callers-tip').waitFor({ timeout: 5000 });
  const under = await again.locator('#callers-tip b').textContent();
  await again.mouse.move(0, 0);
  check(under === expectedCaller, `the callers' flame graph has its heaviest caller under the function (${under})`);
  check(expectedCaller && callerNames[0] === expectedCaller && await again.locator('#tabs button.active').textContent() === 'Callers',
    `the sandwich of hash_strings lists its real caller first (${callerNames[0]})`);
}
