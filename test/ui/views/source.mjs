// Browser test of the UI, source: The Source tab: a function's hottest lines, the link that reopens it, where symbols and sources come from (another build refused, a stripped binary named, source folders).
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { check, tableShows } from '../harness.mjs';

export async function openSource(t) {
  const { demo, context, page, matrix } = t;
  t.doing = "opening matrix_multiply's source";
  await matrix.first().click();
  await page.waitForFunction(() => location.hash.includes('tab=source') && location.hash.includes('file='), null, { timeout: 15000 });
  const focus = page.locator('#source tbody tr.focus');
  await focus.waitFor({ timeout: 15000 });
  const focusText = await focus.locator('td.code').textContent();
  check(/for \(int k|sum \+=/.test(focusText), `matrix_multiply's hottest line is its inner loop: "${focusText.trim()}"`);
  check(await page.locator('#source tbody tr.hot').count() === 1, 'the file\'s hottest line is marked');
  check((await page.locator('#source-file').inputValue()).endsWith('src/demo/demo.cpp'), 'the file chosen is demo.cpp');
  const heated = await page.locator('#source tbody tr[style*="background"]').count();
  check(heated >= 3, `several lines are heat-coloured (${heated})`);
  // Live, the lines update under a reader who scrolled away, who stays where they went.
  t.doing = "reading the rest of the file while the session is live";
  const opened = await page.evaluate(() => window.scrollY); // scrolled to the line
  await page.evaluate(() => window.scrollTo(0, 0));
  const before = Number(await page.locator('#tab-source').getAttribute('data-renders'));
  await page.waitForFunction((n) => Number(document.querySelector('#tab-source').dataset.renders) >= n + 5, before, { timeout: 20000 });
  const scrolled = await page.evaluate(() => window.scrollY);
  check(opened > 0 && scrolled === 0, `the Source tab scrolled away stays there across 5 live updates (scrollY ${opened} at the line, then ${scrolled})`);
  // Beside the lines, its machine code: the samples per instruction add up to the function's
  // own samples (as perf annotate reads them, from the same addresses).
  t.doing = "matrix_multiply's machine code";
  await page.waitForFunction(() => /matrix_multiply \d+$/.test(document.querySelector('#disasm-box').dataset.shows || ''), null, { timeout: 15000 });
  const code = await page.evaluate(() => [...document.querySelectorAll('#disasm tbody tr')].map((tr) => ({
    share: Number(tr.cells[1].textContent) || 0, text: tr.cells[3].textContent })));
  const sum = code.reduce((a, c) => a + c.share, 0);
  const hottest = code.reduce((a, c) => (c.share > a.share ? c : a), { share: 0 });
  check(code.length > 10 && Math.abs(sum - 100) < 0.5 && /mul|add|mov/.test(hottest.text),
    `matrix_multiply's machine code beside its lines: ${code.length} instructions, the samples on them ${sum.toFixed(1)} % of its own, the hottest "${hottest.text.trim()}"`);

  // Where it was called from: each call's line, a link that opens the caller's file there,
  // the line marked and naming the call.
  t.doing = "following a call site of matrix_multiply";
  const site = page.locator('#called-from a[data-call-site]').first();
  await site.waitFor({ timeout: 15000 });
  const call = await site.evaluate((a) => ({ fn: a.dataset.fn, file: a.dataset.file, line: Number(a.dataset.line) }));
  const link = page.url();
  await site.click();
  await page.waitForFunction(({ file, line }) => document.querySelector('#source-file').value === file &&
    document.querySelector(`#source tr#L${line}.focus`), call, { timeout: 15000 });
  const callText = await page.locator(`#source tr#L${call.line} td.code`).textContent();
  check(/matrix_multiply/.test(callText), `"called from" opens ${call.fn} at ${call.file.split('/').pop()}:${call.line}, the line marked and naming the call: "${callText.trim().slice(0, 120)}"`);

  // The same view from its link, in a fresh page.
  t.doing = "reopening the link";
  const again = await context.newPage();
  await again.goto(link);
  await again.locator('#source tbody tr.hot').waitFor({ timeout: 15000 });
  check(await again.locator('#tabs button.active').textContent() === 'Source', 'the link reopens the Source tab');
  check((await again.locator('#source-file').inputValue()).endsWith('demo.cpp'), 'and the same file');
  // Done with the first tab: every open tab holds a live stream (a browser keeps six connections
  // to a host, docs/api.md), so the test keeps open only the tabs it still uses.
  await page.close();
  Object.assign(t, { focus, again });
}

export async function anotherBuild(t) {
  const { build, bin, work, demo, collector, http, fetch, session, again, under, wz } = t;
  // A local binary that is not the build the agent reported: refused, and the Source tab says
  // what it looked at (the demo's own path under --sysroot / is the right build, and used).
  t.doing = "a local binary of another build";
  // Back to the first session's tab, in front as a user's would be (a tab behind others has
  // its timers throttled and draws nothing); the wizard's tab is done with.
  await again.bringToFront();
  await wz.close();
  const wrong = join(work, 'wrong', 'perfwire-demo');
  mkdirSync(dirname(wrong), { recursive: true });
  copyFileSync('/bin/true', wrong);
  const put = (body) => fetch(http + '/api/config', { method: 'PUT', body: JSON.stringify(body) });
  check((await put({ binaries: [wrong] })).ok, 'a binary under the browse root is accepted');
  check((await put({ toolchain_prefix: join(work, 'evil-') })).status === 400, 'a toolchain the collector did not find is refused');
  await again.goto(`${http}/#session=${session}&tab=source`);
  const demoRow = again.locator(`#symbol-files tr[data-module="${bin('demo/perfwire-demo')}"]`);
  await demoRow.locator('li', { hasText: 'another build' }).first().waitFor({ state: 'attached', timeout: 15000 });
  const refusedText = await demoRow.locator('li', { hasText: 'another build' }).first().textContent();
  check(refusedText.includes(wrong) && await demoRow.locator('td[data-origin="--sysroot"]').count() === 1,
    `a local binary of another build is refused and said so ("${refusedText.slice(0, 100)}…")`);
  await put({ binaries: [] });
  Object.assign(t, { put });
}

export async function strippedBinary(t) {
  const { build, bin, work, demo, http, fetch, session, again, sum, cpu, put } = t;
  // A stripped binary, recorded as a device would (perf with no symbols for it anywhere):
  // one [unknown] row until its unstripped build is given in the Source tab, then named.
  t.doing = "naming a stripped binary from the Source tab";
  const deviceBin = join(work, 'device', 'perfwire-demo');
  const localBin = join(work, 'unstripped', 'perfwire-demo');
  const perfHome = join(work, 'perf-home'); // perf's build-id cache would hold the demo
  for (const d of [dirname(deviceBin), dirname(localBin), perfHome]) mkdirSync(d, { recursive: true });
  copyFileSync(bin('demo/perfwire-demo'), localBin);
  check(spawnSync('strip', ['--strip-all', '-o', deviceBin, localBin]).status === 0, 'the demo is stripped');
  const perfEnv = { ...process.env, HOME: perfHome };
  const strippedData = join(work, 'stripped.data');
  spawnSync('perf', ['record', '-q', '-e', 'cpu-clock', '-F', '999', '-g', '-o', strippedData, '--', deviceBin, '1.5'], { env: perfEnv, stdio: 'ignore' });
  const strippedText = spawnSync('perf', ['script', '-i', strippedData, '-F', 'comm,tid,pid,time,event,period,ip,sym,symoff,dso'],
    { env: perfEnv, encoding: 'utf8', maxBuffer: 1 << 28 }).stdout;
  const beforeImport = new URLSearchParams(new URL(again.url()).hash.slice(1)).get('session');
  await again.locator('#tabs button[data-tab="sessions"]').click();
  await again.setInputFiles('#import-file', { name: 'stripped.txt', mimeType: 'text/plain', buffer: Buffer.from(strippedText) });
  await again.waitForFunction((old) => new URLSearchParams(location.hash.slice(1)).get('session') !== old, beforeImport, { timeout: 20000 });
  const strippedSession = new URLSearchParams(new URL(again.url()).hash.slice(1)).get('session');
  await tableShows(again, { session: strippedSession });
  const unknownShare = () => again.evaluate((m) => [...document.querySelectorAll('#functions tbody tr[data-function="[unknown]"]')]
    .filter((r) => r.querySelector('td.module')?.title === m).reduce((sum, r) => sum + parseFloat(r.cells[0].textContent), 0), deviceBin);
  const unnamed = await unknownShare();
  await again.locator('#tabs button[data-tab="source"]').click();
  const strippedRow = again.locator(`#symbol-files tr[data-module="${deviceBin}"]`);
  await strippedRow.waitFor({ timeout: 15000 });
  const saidBefore = await strippedRow.textContent();
  await again.evaluate(() => { document.querySelector('#source-settings').open = true; });
  await again.fill('#binary-path', localBin);
  await again.click('#binary-form button');
  await strippedRow.locator('td[data-origin="--binary"]').waitFor({ timeout: 15000 });
  await again.locator('#tabs button[data-tab="functions"]').click();
  await again.waitForFunction(() => document.querySelector('#functions tbody').textContent.includes('matrix_multiply'), null, { timeout: 15000 });
  const named = await unknownShare();
  check(unnamed > 50 && /only its dynamic symbols|not found/.test(saidBefore) && named < 2 &&
    await again.locator('#functions tbody tr', { hasText: 'hash_strings' }).count() > 0,
    `a stripped binary's frames are named once its unstripped build is given (${unnamed.toFixed(1)} % → ${named.toFixed(1)} % unnamed)`);
  // Where the device's names are poor, the whole module can be named here, and undone.
  await again.locator('#tabs button[data-tab="source"]').click();
  await strippedRow.locator('button[data-resymbolize][data-on="0"]').click();
  await strippedRow.locator('button[data-resymbolize][data-on="1"]').waitFor({ timeout: 15000 });
  const whole = (await (await fetch(http + '/api/config')).json()).resymbolize;
  await strippedRow.locator('button[data-resymbolize][data-on="1"]').click();
  await strippedRow.locator('button[data-resymbolize][data-on="0"]').waitFor({ timeout: 15000 });
  check(whole.length === 1 && whole[0] === deviceBin && (await (await fetch(http + '/api/config')).json()).resymbolize.length === 0,
    'a module can be named here whole from the Source tab, and undone');
  await put({ binaries: [] });
}

export async function sourceFolders(t) {
  const { work, http, fetch, again, put } = t;
  // Where the sources are, set from the Source tab: a folder under the browse root is kept,
  // one outside it is refused with the reason shown there.
  t.doing = "source folders from the Source tab";
  const srcDir = join(work, 'src-copy');
  mkdirSync(srcDir, { recursive: true });
  await again.click('#source-settings summary').catch(() => {});
  await again.evaluate(() => { document.querySelector('#source-settings').open = true; });
  await again.fill('#source-dir', srcDir);
  await again.evaluate(() => { document.querySelector('#source-settings-state').textContent = ''; }); // an earlier save's word
  await again.click('#source-dir-form button');
  await again.waitForFunction(() => /saved|must|outside|browse/.test(document.querySelector('#source-settings-state').textContent), null, { timeout: 10000 });
  const kept = (await (await fetch(http + '/api/config')).json()).source_dirs;
  await again.fill('#source-dir', '/etc');
  await again.evaluate(() => { document.querySelector('#source-settings-state').textContent = ''; }); // the first add's word
  await again.click('#source-dir-form button');
  await again.waitForFunction(() => /saved|must|outside|browse/.test(document.querySelector('#source-settings-state').textContent), null, { timeout: 10000 });
  const refusal = await again.locator('#source-settings-state').textContent();
  check(kept.includes(srcDir) && /browse|root|outside/.test(refusal) && !(await (await fetch(http + '/api/config')).json()).source_dirs.includes('/etc'),
    `a source folder is added from the Source tab, one outside the browse root refused ("${refusal}")`);
  await put({ source_dirs: [] });
}
