// Browser test of the UI, sessions: The Sessions tab: import, compare against a baseline, delete; perf 5.x+ text; the svg export.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { check, tableShows } from '../harness.mjs';

export async function importCompareDelete(t) {
  const { collector, http, fetch, session, wz } = t;
  // Sessions tab: import a real capture, compare it against the live session, delete it.
  t.doing = "importing on the Sessions tab";
  const liveSession = new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session');
  await wz.locator('#tabs button[data-tab="sessions"]').click();
  await wz.locator('#all-sessions tbody tr').first().waitFor({ timeout: 10000 });
  const capture = readFileSync(new URL('../../collector/fixtures/callchain_fields.txt', import.meta.url));
  await wz.setInputFiles('#import-file', { name: 'capture.txt', mimeType: 'text/plain', buffer: capture });
  await wz.waitForFunction((live) => location.hash.includes('session=') && !location.hash.includes(live), liveSession, { timeout: 20000 });
  const imported = new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session');
  await tableShows(wz, { session: imported });
  check(imported !== liveSession && /_import$/.test(imported) &&
    await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).count() > 0, `an imported recording opens as session ${imported}`);
  t.doing = "comparing against a baseline";
  await wz.locator('#tabs button[data-tab="sessions"]').click();
  await wz.locator(`#all-sessions button[data-baseline="${liveSession}"]`).click();
  await tableShows(wz, { session: imported, baseline: liveSession });
  const deltas = await wz.locator('#functions tbody tr[data-function] td:nth-child(4)').allTextContents();
  const firstRow = (await wz.locator('#functions tbody tr[data-function]').first().locator('td').allTextContents()).map((t) => t.trim());
  // self %, total %, baseline, Δ self, Δ total: Δ self is self % minus the baseline's.
  const consistent = Math.abs(Number(firstRow[0]) - Number(firstRow[2]) - Number(firstRow[3])) < 0.011;
  check(deltas.length > 0 && deltas.every((d) => /^[+-]?\d+\.\d\d$/.test(d.trim())) && consistent && /^[+-]?\d+\.\d\d$/.test(firstRow[4]) &&
    (await wz.locator('#functions-count').textContent()).includes(`compared with ${liveSession}`),
    `functions gain baseline, Δ self and Δ total columns, and say what they compare with (${firstRow.slice(0, 5).join(' | ')})`);
  // Each Δ beyond its noise is shaded, the larger change the stronger (saturation); within
  // the noise it is grey text on no colour. Against a session of other functions (the call
  // tree's), every function here is a change: the API says which are beyond the noise.
  await wz.goto(`${http}/#session=${imported}&baseline=${t.treeSession}`);
  await tableShows(wz, { session: imported, baseline: t.treeSession });
  const api = (await (await fetch(`${http}/api/sessions/${imported}/functions?weight=period&baseline=${t.treeSession}&limit=200`)).json()).functions;
  const beyond = new Set(api.filter((r) => Math.abs(r.delta_self_pct) > r.noise_self_pct).map((r) => `${r.name}\u0000${r.module}`));
  const cells = await wz.locator('#functions tbody tr[data-function]').evaluateAll((trs) => trs.map((tr) => {
    const td = tr.querySelectorAll('td.delta')[0];
    const rgb = (td.style.background.match(/rgb\((\d+), (\d+), (\d+)\)/) || []).slice(1).map(Number);
    return { name: `${tr.dataset.function}\u0000${tr.querySelector('td.module').textContent}`, d: Math.abs(Number(td.textContent)), shaded: td.classList.contains('grew') || td.classList.contains('shrank'), sat: rgb.length ? Math.max(...rgb) - Math.min(...rgb) : 0 };
  }));
  const shaded = cells.filter((c) => c.shaded).sort((a, b) => a.d - b.d);
  check(shaded.length > 0 && cells.every((c) => c.shaded === beyond.has(c.name) && (c.shaded ? c.sat > 0 : c.sat === 0)) && shaded.every((c, k) => !k || c.sat >= shaded[k - 1].sat - 1),
    `a Δ beyond its noise is shaded as strongly as it changed, one within it is not (${shaded.length} shaded of ${cells.length}; ${shaded.slice(0, 1).concat(shaded.slice(-1)).map((c) => `${c.d}: chroma ${c.sat}`).join(', ')})`);
  await wz.goto(`${http}/#session=${imported}&baseline=${liveSession}`);
  await tableShows(wz, { session: imported, baseline: liveSession });
  // The flame graph compared: the baseline's own graph beside this one, this one coloured by
  // change, a frame within the noise grey, and every delta's noise band in the answer.
  t.doing = "the flame graph compared with a baseline";
  await wz.locator('#tabs button[data-tab="flamegraph"]').click();
  await wz.waitForFunction((b) => document.querySelector('#flame-panes').classList.contains('compared') && document.querySelector('#flame').dataset.baseline === b &&
    Number(document.querySelector('#flame-base').dataset.boxes) > 2 && Number(document.querySelector('#flame').dataset.boxes) > 2, liveSession, { timeout: 15000 });
  const diff = await (await fetch(`${http}/api/sessions/${imported}/flamegraph?baseline=${liveSession}&min_pct=0.5`)).json();
  const nodes = [];
  const walk = (n) => { for (const c of n.children || []) { nodes.push(c); walk(c); } };
  walk(diff.root);
  const banded = nodes.filter((n) => n.noise_pct > 0 && n.noise_pct < 50);
  check(nodes.length > 0 && banded.length === nodes.length && diff.baseline_samples > 0 && /within the noise/.test(await wz.locator('#flame-legend').textContent()),
    `the compared flame graph shows the baseline beside it; each of its ${nodes.length} frames has a noise band (${banded.slice(0, 3).map((n) => `${n.delta_pct.toFixed(2)} ± ${n.noise_pct.toFixed(2)}`).join(', ')})`);
  // A baseline holding a function this session lacks: it is a row (blue, its share gone) and a
  // frame of the compared flame graph (blue, as wide as its share was), not left out.
  t.doing = "comparing against a baseline with a function this session lacks";
  const gone = 'only_in_the_baseline';
  const baseText = Array.from({ length: 60 }, (_, i) => `app 7/7 ${1 + i / 100}: 1000000 cpu-clock:\n\t400 ${gone}+0x4 (/bin/app)\n\n`).join('');
  const withGone = (await (await fetch(`${http}/api/sessions/import?name=gone.txt`, { method: 'POST', body: baseText })).json()).session_id;
  await wz.goto(`${http}/#session=${imported}&baseline=${withGone}&sort=delta_self_pct&order=asc`);
  await tableShows(wz, { session: imported, baseline: withGone });
  const goneRow = wz.locator('#functions tbody tr[data-function]').first();
  const goneCells = (await goneRow.locator('td').allTextContents()).map((x) => x.trim());
  check(await goneRow.getAttribute('data-function') === gone && Number(goneCells[0]) === 0 && Number(goneCells[2]) === 100 && Number(goneCells[3]) === -100 &&
    await goneRow.locator('td.delta').first().evaluate((td) => td.classList.contains('shrank')),
    `a function of the baseline alone is the biggest shrink, a row of its own (${goneCells.slice(0, 5).join(' | ')} ${await goneRow.getAttribute('data-function')})`);
  await wz.locator('#tabs button[data-tab="flamegraph"]').click();
  // The graph drawn against this baseline, not the one still shown from before.
  await wz.waitForFunction((b) => Number(document.querySelector('#flame').dataset.boxes) > 2 && document.querySelector('#flame-panes').classList.contains('compared') &&
    document.querySelector('#flame').dataset.baseline === b, withGone, { timeout: 15000 });
  // Row 1 of the canvas (the root's children): the vanished frame is there, painted blue.
  const blue = await wz.locator('#flame').evaluate((c) => {
    const g = c.getContext('2d'), y = Math.round(27 * devicePixelRatio), row = g.getImageData(0, y, c.width, 1).data;
    let n = 0, first = -1;
    for (let x = 0; x < c.width; ++x) if (row[4 * x + 2] - row[4 * x] > 60) { ++n; if (first < 0) first = x / devicePixelRatio; }
    return { n: n / devicePixelRatio, first };
  });
  let tip = '';
  if (blue.first >= 0) {
    const box = await wz.locator('#flame').boundingBox();
    await wz.mouse.move(box.x + blue.first + 3, box.y + 27);
    tip = await wz.locator('#flame-tip').textContent();
  }
  check(blue.n > 100 && tip.includes(gone) && tip.includes('gone'), `the compared flame graph paints the baseline's frame blue, ${Math.round(blue.n)} px wide: "${tip.slice(0, 120)}"`);
  await fetch(`${http}/api/sessions/${withGone}`, { method: 'DELETE' });
  await wz.goto(`${http}/#session=${imported}&baseline=${liveSession}`);
  await tableShows(wz, { session: imported, baseline: liveSession });
  t.doing = "deleting the imported session";
  await wz.locator('#tabs button[data-tab="sessions"]').click();
  wz.once('dialog', (d) => d.accept());
  await wz.locator(`#all-sessions button[data-delete="${imported}"]`).click();
  await wz.waitForFunction(() => !location.hash.includes('session='), null, { timeout: 10000 });
  const left = await (await fetch(http + '/api/sessions')).json();
  check(!left.some((x) => x.id === imported) && left.some((x) => x.id === liveSession), 'deleting removes only that session');
  Object.assign(t, { liveSession });
}

export async function importShapes(t) {
  const { bin, collector, http, session, heaviest, code, wz, liveSession } = t;
  // Text from a newer perf (irq flags between the time and the period, PMU events, tracepoints)
  // imports; a line nothing can read is counted and shown, not dropped silently.
  t.doing = "importing perf 5.x+ header shapes";
  await wz.goto(`${http}/#session=${liveSession}&tab=sessions`);
  await wz.locator('#all-sessions tbody tr').first().waitFor({ timeout: 10000 });
  const shapes = readFileSync(new URL('../../collector/fixtures/header_shapes.tsv', import.meta.url), 'utf8')
    .split('\n').filter((l) => l && !l.startsWith('#'))
    .map((l) => `${l.split('\t')[0]}\n\t 4005d6 table_leaf+0x4 (/bin/app)\n\n`).join('') +
    // A name that would read as "live" if its bidi override were obeyed.
    'app 7 1.000000: 1 cycles:\n\t 4005d6 \u202eevil+0x4 (/bin/app)\n\n' +
    // Code perf could not name, in a library it could: two addresses, one twice.
    ['15bc9', '15c00', '15bc9'].map((a) => `app 7 1.000000: 1 cycles:\n\t ${a} [unknown] (/usr/lib/liblzma.so.5)\n\t 4005d6 main+0x4 (/bin/app)\n\n`).join('') +
    'not perf output\n';
  // Its file name holds a bidi override too: the tab's title shows it, never obeys it.
  await wz.setInputFiles('#import-file', { name: 'shapes\u202e.txt', mimeType: 'text/plain', buffer: Buffer.from(shapes) });
  await wz.waitForFunction(() => /_import/.test(new URLSearchParams(location.hash.slice(1)).get('session') || ''), null, { timeout: 20000 });
  const shapesSession = new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session');
  await tableShows(wz, { session: shapesSession });
  // The whole state the import produces, read in one go once it holds.
  const shapesState = () => wz.evaluate(() => [document.querySelectorAll('#functions tbody tr[data-function="table_leaf"]').length,
    document.querySelector('#event').value, document.querySelector('#session-skipped').textContent]);
  await wz.waitForFunction(() => document.querySelector('#event').value === 'cycles' &&
    document.querySelector('#session-skipped').textContent === '1 unreadable lines skipped' &&
    document.querySelectorAll('#functions tbody tr[data-function="table_leaf"]').length === 1, null, { timeout: 15000 }).catch(() => {});
  const [leafRows, shownEvent, skippedText] = await shapesState();
  check(leafRows === 1 && shownEvent === 'cycles' && skippedText === '1 unreadable lines skipped',
    `flags-field text imports from the UI (${leafRows} table_leaf rows, event ${shownEvent}, "${skippedText}")`);
  const shownNames = (await wz.locator('#functions tbody td.name').allTextContents()).map((n) => n.replace(/^⇅ /, ''));
  check(shownNames.includes('⟨U+202E⟩evil') && !shownNames.some((n) => n.includes('\u202e')),
    'a bidi override in a name is shown, not obeyed (⟨U+202E⟩evil)');
  const title = await wz.title();
  check(title.includes('shapes⟨U+202E⟩.txt') && !title.includes('\u202e'), `the tab's title shows a bidi override, never obeys it (${JSON.stringify(title)})`);
  // The nameless code of a library opens into the addresses its samples fell on.
  await wz.locator('#functions tbody tr[data-function="[unknown]"] button[data-expand]').click();
  await wz.locator('#functions tbody tr.sub').first().waitFor({ timeout: 10000 });
  const addressRows = await wz.locator('#functions tbody tr.sub td.name').allTextContents();
  check(addressRows.join(',') === 'liblzma.so.5+0x15bc9,liblzma.so.5+0x15c00',
    `a library's nameless code opens into its addresses, heaviest first (${addressRows.join(', ')})`);
}

export async function svgExport(t) {
  const { http, fetch, errors, context, session, again } = t;
  t.doing = "zooming in the exported svg";
  const svgText = await (await fetch(`${http}/api/sessions/${session}/export?format=svg`)).text();
  const svgPage = await context.newPage();
  svgPage.on('pageerror', (e) => errors.push(e.message));
  await svgPage.route('**/flame.svg', (r) => r.fulfill({ contentType: 'image/svg+xml', body: svgText }));
  await svgPage.goto(http + '/flame.svg');
  const frameWidth = (name) => svgPage.evaluate((n) => {
    const g = [...document.querySelectorAll('g.f')].find((x) => x.getAttribute('data-n') === n);
    return g && g.style.display !== 'none' ? Number(g.querySelector('rect').getAttribute('width')) : 0;
  }, name);
  const hashName = '(anonymous namespace)::hash_strings';
  const before = await frameWidth(hashName);
  await svgPage.locator(`g.f[data-n="${hashName}"] rect`).first().click({ force: true });
  const after = await frameWidth(hashName);
  const matrixShown = await frameWidth('(anonymous namespace)::matrix_multiply');
  await svgPage.click('#reset');
  check(before > 0 && before < 1000 && after > 1150 && matrixShown === 0 && await frameWidth(hashName) === before,
    `the svg export zooms into a frame and back (${before.toFixed(0)} → ${after.toFixed(0)} px)`);
  await svgPage.close();
  await again.bringToFront();
  Object.assign(t, { after });
}

// `perfwire compare` on two of the collector's saved sessions (by id, through its API): its diff
// flame graph, a file a CI job keeps, opens in the browser with its frames coloured.
export async function compareReport(t) {
  const { http, fetch, errors, context, build, token, work, again } = t;
  t.doing = 'opening the diff flame graph of perfwire compare';
  const saved = (await (await fetch(`${http}/api/sessions`)).json()).filter((s) => !s.live && s.samples > 0);
  check(saved.length >= 2, `two saved sessions to compare (${saved.length})`);
  if (saved.length < 2) return;
  const out = join(work, 'diff.svg');
  const r = spawnSync(join(build, 'src', 'collector', 'perfwire'),
    ['compare', '--url', http, '--token', token, '--svg', out, saved[1].id, saved[0].id], { encoding: 'utf8', timeout: 120000 });
  check([0, 1, 2].includes(r.status) && existsSync(out), `perfwire compare answers with a verdict and writes the svg (status ${r.status}: ${(r.stderr || '').trim()})`);
  if (!existsSync(out)) return;
  const svgPage = await context.newPage();
  svgPage.on('pageerror', (e) => errors.push(e.message));
  await svgPage.route('**/diff.svg', (x) => x.fulfill({ contentType: 'image/svg+xml', body: readFileSync(out, 'utf8') }));
  await svgPage.goto(http + '/diff.svg');
  const drawn = await svgPage.evaluate(() => ({
    frames: document.querySelectorAll('svg g rect').length,
    fills: [...new Set([...document.querySelectorAll('svg g rect')].map((x) => x.getAttribute('fill')))].length,
    width: document.querySelector('svg')?.getBoundingClientRect().width || 0,
  }));
  if (process.env.PERFWIRE_UI_SHOTS) await svgPage.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'compare-diff.png') });
  check(drawn.frames >= 3 && drawn.width >= 1000, `the diff flame graph opens in the browser (${drawn.frames} frames, ${drawn.fills} colours, ${drawn.width} px)`);
  await svgPage.close();
  await again.bringToFront();
}
