// Browser test of the UI, transforms: a module collapsed from the flame graph's menu reshapes
// the function table, the call tree and the timeline's chart alike, checked against the
// collapsed export reshaped here; its chip's ✕ undoes it everywhere.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { check, tableShows } from '../harness.mjs';

export async function everyView(t) {
  const { http, fetch, again } = t;
  t.doing = 'transforms across the views';
  // main → compress → deflate (a library's) → cb (the program's, called back) 3 samples,
  // main → compress → deflate 4, main → work 3.
  const lib = '/usr/lib/libz.so.1';
  const module = { main: '/bin/app', cb: '/bin/app', work: '/bin/app', compress: lib, deflate: lib };
  let text = '', i = 0;
  const add = (frames, n) => {
    for (let k = 0; k < n; ++k) text += `app 9/9 ${(++i / 10).toFixed(6)}: 1 cpu-clock:\n${frames.map((f) => `\t1 ${f} (${module[f]})\n`).join('')}\n`;
  };
  add(['cb', 'deflate', 'compress', 'main'], 3); add(['deflate', 'compress', 'main'], 4); add(['work', 'main'], 3);
  const imp = await (await fetch(`${http}/api/sessions/import?name=transforms.txt`, { method: 'POST', body: text })).json();
  // The oracle: the collapsed export's stacks with the library's frames made one, then self
  // and total (once per stack) per name.
  const collapsed = await (await fetch(`${http}/api/sessions/${imp.session_id}/export?format=collapsed&weight=samples`)).text();
  const want = new Map();
  let all = 0;
  for (const line of collapsed.trim().split('\n')) {
    const cut = line.lastIndexOf(' '), w = Number(line.slice(cut + 1));
    const frames = line.slice(0, cut).split(';').map((f) => (module[f] === lib ? '[libz.so.1]' : f))
      .filter((f, k, a) => !(k && f === '[libz.so.1]' && a[k - 1] === f));
    all += w;
    const row = (f) => want.get(f) || want.set(f, { self: 0, total: 0 }).get(f);
    for (const f of new Set(frames)) row(f).total += w;
    row(frames[frames.length - 1]).self += w;
  }
  const asPct = (n) => Number((100 * n / all).toFixed(2));
  // Right-click the library's frame (the widest under main) and collapse its module.
  await again.goto(`${http}/#session=${imp.session_id}&tab=flamegraph&weight=samples`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 3, null, { timeout: 15000 });
  const b = await again.locator('#flame').boundingBox();
  await again.mouse.click(b.x + b.width * 0.3, b.y + 2 * 18 + 9, { button: 'right' });
  await again.locator('#flame-menu button[data-act="collapse"]').click();
  await again.waitForFunction((m) => document.querySelector('#flame').dataset.shape === `|||${m}|`, lib, { timeout: 15000 });
  const chip = await again.locator('#transform-chips').textContent();
  check(/collapsed libz\.so\.1/.test(chip) && new URLSearchParams(await again.evaluate(() => location.hash.slice(1))).get('collapse') === lib,
    `"collapse its module" puts the library in the URL and a chip above the views (${chip.trim()})`);
  // The function table of the reshaped stacks.
  await again.locator('#tabs button[data-tab="functions"]').click();
  await tableShows(again, { session: imp.session_id, collapse: lib });
  const rows = await again.evaluate(() => [...document.querySelectorAll('#functions tbody tr[data-function]')].map((tr) => ({
    name: tr.dataset.function, self: Number(tr.cells[0].textContent), total: Number(tr.cells[1].textContent) })));
  const agree = [...want].every(([name, w]) => rows.some((r) => r.name === name && r.self === asPct(w.self) && r.total === asPct(w.total)));
  check(agree && rows.length === want.size && !rows.some((r) => r.name === 'deflate'),
    `the function table holds the library as one row, as the reshaped export has it (${rows.map((r) => `${r.name} ${r.self}/${r.total}`).join(', ')})`);
  // Its export, focused on the library too, from the menu above the views: a download holding
  // the stacks as shown.
  t.doing = 'exporting the focused, collapsed view';
  await again.goto(`${http}/#session=${imp.session_id}&tab=functions&weight=samples&collapse=${encodeURIComponent(lib)}&focus=${encodeURIComponent('[libz.so.1]')}`);
  await tableShows(again, { session: imp.session_id, focus: '[libz.so.1]' });
  const [download] = await Promise.all([again.waitForEvent('download', { timeout: 15000 }), again.selectOption('#export', 'collapsed')]);
  const file = await download.path().then((p) => import('node:fs').then((fs) => fs.readFileSync(p, 'utf8')));
  const exported = file.trim().split('\n');
  check(download.suggestedFilename().startsWith('transforms.txt-') && exported.length === 2 && exported.every((l) => l.startsWith('[libz.so.1]') && !/deflate|compress|main|work/.test(l)),
    `the export of the focused, collapsed view downloads as ${download.suggestedFilename()}, holding only its stacks (${exported.join(' | ')})`);
  await again.goto(`${http}/#session=${imp.session_id}&tab=functions&weight=samples&collapse=${encodeURIComponent(lib)}`);
  await tableShows(again, { session: imp.session_id, collapse: lib, focus: null });
  // The timeline's chart: the same frames.
  const chartAnswer = again.waitForResponse((r) => r.url().includes('/timeline?') && r.url().includes('collapse=') && r.url().includes('tid=9'), { timeout: 15000 });
  await again.goto(`${http}/#session=${imp.session_id}&tab=timeline&weight=samples&collapse=${encodeURIComponent(lib)}&lane=9`);
  const chart = (await (await chartAnswer).json()).chart;
  const names = chart.frames.map((f) => f.name);
  check(names.includes('[libz.so.1]') && !names.includes('deflate') && !names.includes('compress'),
    `the timeline's flame chart shows the collapsed library too (${names.join(', ')})`);
  // Its ✕ undoes it for every view.
  await again.locator('#transform-chips [data-uncollapse]').click();
  await again.locator('#tabs button[data-tab="functions"]').click();
  await tableShows(again, { session: imp.session_id, collapse: null });
  const back = await again.evaluate(() => [...document.querySelectorAll('#functions tbody tr[data-function]')].map((tr) => tr.dataset.function));
  check(back.includes('deflate') && !back.includes('[libz.so.1]') && !(await again.evaluate(() => location.hash)).includes('collapse'),
    `the chip's ✕ shows the library's functions again (${back.join(', ')})`);
}
