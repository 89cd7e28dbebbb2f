// Browser test of the UI, flamegraph: The flame graph: drawing, tooltip, search, bottom-up, focus and hide.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { join } from 'node:path';
import { check, pct2 } from '../harness.mjs';

export async function drawAndSearch(t) {
  const { http, fetch, session, again } = t;
  t.doing = "drawing the flame graph";
  await again.locator('#tabs button[data-tab="flamegraph"]').click();
  // A canvas is 150 px high before anything is drawn: wait for the boxes the draw reports.
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 3, null, { timeout: 15000 });
  const drawn = await again.evaluate(() => [Number(document.querySelector('#flame').dataset.boxes), document.querySelector('#flame').height]);
  check(drawn[0] > 3 && drawn[1] > 20, `the flame graph draws (${drawn[0]} boxes)`);
  if (process.env.PERFWIRE_UI_SHOTS) await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'flamegraph.png') });
  // Hovering the widest frame under the root shows its total and self in the event's unit.
  const flameBox = await again.locator('#flame').boundingBox();
  await again.mouse.move(flameBox.x + flameBox.width / 2, flameBox.y + 18 + 9);
  await again.locator('#flame-tip').waitFor({ timeout: 5000 });
  const tipText = await again.locator('#flame-tip').textContent();
  check(/total .*(s|ms|µs) \(\d+\.\d\d %\) · self/.test(tipText), `a frame's tooltip gives total and self in time ("${tipText.replace(/\s+/g, ' ').slice(0, 90)}…")`);
  // "/" searches; the graph says how much the matches hold.
  await again.mouse.move(0, 0);
  await again.keyboard.press('/');
  await again.keyboard.type('hash_strings');
  await again.waitForFunction(() => /matched \d+\.\d\d %/.test(document.querySelector('#flame-legend').textContent), null, { timeout: 5000 });
  const matchedShare = Number((await again.locator('#flame-legend').textContent()).match(/matched (\d+\.\d\d) %/)[1]);
  const hashRow = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions.find((f) => f.name.endsWith('::hash_strings'));
  check(matchedShare > 0 && Math.abs(matchedShare - hashRow.total_pct) < 5,
    `"/" searches the flame graph: hash_strings matched ${matchedShare} % (its total in the table: ${pct2(hashRow.total_pct)} %)`);
  await again.fill('#filter', '');
  await again.keyboard.press('Escape');
  // Bottom-up: the widest frame under the root is the function with most self time.
  await again.check('#inverted');
  // The drawing the switch produces (the forward graph already had boxes).
  await again.waitForFunction(() => document.querySelector('#flame').dataset.inverted === '1' && Number(document.querySelector('#flame').dataset.boxes) > 3, null, { timeout: 15000 });
  const invBox = await again.locator('#flame').boundingBox();
  await again.mouse.move(invBox.x + 4, invBox.y + 18 + 9);
  await again.locator('#flame-tip').waitFor({ timeout: 5000 });
  const heaviest = await again.locator('#flame-tip b').textContent();
  // The session is live: samples arrive between the drawing and the table asked for here, so
  // two functions of nearly equal self time may trade places; the one drawn first must hold
  // (within the same 5 points as the checks above) the most self time.
  const bySelf = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions;
  const drawnFirst = bySelf.find((f) => f.name === heaviest);
  check(drawnFirst && bySelf[0].self_pct - drawnFirst.self_pct < 5,
    `bottom-up, the heaviest sampled function comes first (${heaviest}, ${pct2(drawnFirst?.self_pct ?? 0)} % self; the table's first: ${bySelf[0].name}, ${pct2(bySelf[0].self_pct)} %)`);
  await again.mouse.move(0, 0);
  await again.uncheck('#inverted');
  await again.waitForFunction(() => !location.hash.includes('inverted=1') && document.querySelector('#flame').dataset.inverted === '', null, { timeout: 15000 });
  Object.assign(t, { drawn, heaviest });
}

export async function focusAndHide(t) {
  const { http, fetch, session, focus, again } = t;
  // Right-click a frame: focus on its function (every stack through it, from it down) or hide
  // it from every stack; each shows as a chip whose ✕ undoes it.
  t.doing = "focusing and hiding in the flame graph";
  const depth1 = async () => {
    const b = await again.locator('#flame').boundingBox();
    await again.mouse.move(b.x + b.width / 2, b.y + 18 + 9);
    await again.locator('#flame-tip').waitFor({ timeout: 5000 });
    return { name: await again.locator('#flame-tip b').textContent(), x: b.x + b.width / 2, y: b.y + 18 + 9 };
  };
  // The graph drawn for the transforms wanted (focus|merged|collapsed|recursion), and the
  // chips above every view saying them.
  const shapeShows = (want) => again.waitForFunction((w) => document.querySelector('#flame').dataset.shape === w && Number(document.querySelector('#flame').dataset.boxes) > 0
    && document.querySelector('#transforms').dataset.shows === w, want, { timeout: 15000 });
  const under = await depth1();
  await again.mouse.click(under.x, under.y, { button: 'right' });
  await again.locator('#flame-menu button[data-act="focus"]').click();
  await shapeShows(`${under.name}||||`);
  const legendShare = async () => Number((await again.locator('#flame-legend').textContent()).match(/stacks through .*: ([\d.]+) % of the total/)[1]);
  const focusShare = await legendShare();
  // A focus is by name, as pprof's is: a name several modules share ("[unknown]" where a
  // library's frames were not unwound) holds the stacks through any of them.
  const focusRows = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions.filter((f) => f.name === under.name);
  const [most, sum] = [Math.max(0, ...focusRows.map((f) => f.total_pct)), focusRows.reduce((a, f) => a + f.total_pct, 0)];
  check(focusRows.length && focusShare > most - 5 && focusShare < sum + 5 && await again.locator('#flame-menu').isHidden() && (await depth1()).name === under.name,
    `focus on ${under.name}: the menu closes, the graph holds its stacks, ${focusShare} % (its total in the table: ${focusRows.map((f) => pct2(f.total_pct)).join(' + ')} %)`);
  await again.mouse.move(0, 0);
  // Redrawn with live data, the share changes and the chip's ✕ stays the same element.
  await again.evaluate(() => { document.querySelector('#transform-chips [data-unfocus]').perfwireMarked = true; });
  const shareText = () => again.locator('#flame-legend').textContent();
  const shareBefore = await shareText();
  await again.waitForFunction((b) => document.querySelector('#flame-legend').textContent !== b, shareBefore, { timeout: 20000 });
  const chipKept = await again.evaluate(() => document.querySelector('#transform-chips [data-unfocus]')?.perfwireMarked === true);
  check(chipKept, `the focus chip stays in place while the graph is redrawn (${shareBefore.match(/[\d.]+ %/)?.[0]} → ${(await shareText()).match(/[\d.]+ %/)?.[0]})`);
  await again.locator('#transform-chips [data-unfocus]').click();
  await shapeShows('||||');
  const top = await depth1();
  await again.mouse.click(top.x, top.y, { button: 'right' });
  await again.locator('#flame-menu button[data-act="hide"]').click();
  await shapeShows(`|${top.name}|||`);
  const afterHide = await depth1();
  check(afterHide.name !== top.name && /merged/.test(await again.locator('#transform-chips').textContent()), `merging ${top.name} into its callers takes it out of the graph (${afterHide.name} in its place)`);
  await again.mouse.move(0, 0);
  await again.locator('#transform-chips [data-unhide]').click();
  await shapeShows('||||');
  Object.assign(t, { under, sum });
}
