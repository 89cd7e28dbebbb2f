// Browser test of the UI, call tree: the Call tree tab's rows, top-down and bottom-up, checked against the collapsed export.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { check } from '../harness.mjs';

export async function treeTable(t) {
  const { http, fetch, again } = t;
  t.doing = 'the call tree table';
  // main → work → leaf (6 samples), main → work (2), main → other (2): known shares.
  let text = '', i = 0;
  const add = (frames, n) => {
    for (let k = 0; k < n; ++k) text += `app 9/9 ${(++i / 10).toFixed(6)}: 1 cpu-clock:\n${frames.map((f) => `\t1 ${f} (/bin/app)\n`).join('')}\n`;
  };
  add(['leaf', 'work', 'main'], 6); add(['work', 'main'], 2); add(['other', 'main'], 2);
  const imp = await (await fetch(`${http}/api/sessions/import?name=${encodeURIComponent('tree <b>.txt')}`, { method: 'POST', body: text })).json();
  // The oracle: each call path's share of the samples, from the collapsed export.
  const collapsed = await (await fetch(`${http}/api/sessions/${imp.session_id}/export?format=collapsed&weight=samples`)).text();
  const share = new Map();
  let all = 0;
  for (const line of collapsed.trim().split('\n')) {
    const cut = line.lastIndexOf(' '), frames = line.slice(0, cut).split(';'), w = Number(line.slice(cut + 1));
    all += w;
    for (let k = 1; k <= frames.length; ++k) share.set(frames.slice(0, k).join('>'), (share.get(frames.slice(0, k).join('>')) || 0) + w);
  }
  const want = (path) => Number((100 * (share.get(path) || 0) / all).toFixed(2));
  await again.goto(`${http}/#session=${imp.session_id}&tab=calltree&weight=samples`);
  const rows = async (shows) => {
    await again.waitForFunction((s) => (document.querySelector('#tab-calltree').dataset.shows || '').startsWith(s), shows, { timeout: 15000 });
    return again.evaluate(() => [...document.querySelectorAll('#calltree tbody tr[data-path]')].map((tr) => ({
      path: tr.dataset.path.split('\u001f').join('>'), total: Number(tr.cells[0].textContent), self: Number(tr.cells[1].textContent) })));
  };
  const top = await rows('top-down');
  const expected = ['main', 'main>work', 'main>work>leaf', 'main>other'];
  check(top.map((r) => r.path).join(',') === expected.join(',') && top.every((r) => r.total === want(r.path))
    && top.find((r) => r.path === 'main>work').self === 20,
  `the call tree opens the heaviest path, each row's total as the collapsed export has it (${top.map((r) => `${r.path} ${r.total}/${r.self}`).join(', ')})`);
  const title = await again.locator('#session-title').textContent();
  check(title.startsWith('tree <b>.txt · cpu-clock'), `an import is named by its file, its markup shown as text (${title})`);
  // A click closes a row; bottom-up lists the sampled functions by their own samples.
  await again.locator('#calltree tr[data-path="main\u001fwork"]').click();
  const closed = await rows('top-down 3');
  check(closed.map((r) => r.path).join(',') === 'main,main>work,main>other', `a click closes a row (${closed.map((r) => r.path).join(', ')})`);
  await again.locator('#tree-inverted').check();
  const bottom = await rows('bottom-up');
  const first = bottom.filter((r) => !r.path.includes('>'));
  const named = first.map((r) => `${r.path} ${r.total}`);
  check(named[0] === 'leaf 60' && named.slice(1).sort().join(',') === 'other 20,work 20' && /inverted=1/.test(await again.evaluate(() => location.hash)),
    `bottom-up: each sampled function by its own samples, in the URL (${first.map((r) => `${r.path} ${r.total}`).join(', ')})`);
  await again.locator('#tree-inverted').uncheck();
  Object.assign(t, { treeSession: imp.session_id });
}
