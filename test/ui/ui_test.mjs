// Browser test of the UI in Debian's headless Chromium, against a real collector, a real agent
// and real perf profiling the demo workload.
//
//   node test/ui/ui_test.mjs BUILD_DIR
//
// Checks: a live target is listed; its session's function table names the demo's hot
// functions; clicking one opens the Source tab on demo.cpp with the hot loop heat-coloured;
// the flame graph draws; the URL hash reopens the same view in a fresh page; a broken source
// request shows an error instead of a blank page. Every wait is bounded.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const build = resolve(process.argv[2] || 'build');
const bin = (p) => join(build, 'src', p);
const work = mkdtempSync(join(tmpdir(), 'perfwire-ui-'));
const children = [];
let failures = 0;

function start(cmd, args) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  child.log = '';
  child.stderr.on('data', (d) => { child.log += d; });
  children.push(child);
  return child;
}
async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

let browser;
try {
  const demo = start(bin('demo/perfwire-demo'), ['60']);
  const collector = start(bin('collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1']);
  const http = await until('the collector', async () => collector.log.match(/UI and API on (http:\/\/[^/]+)\//)?.[1]);
  const agentPort = collector.log.match(/agents on [^:]+:(\d+)/)[1];
  start(bin('agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--pid', String(demo.pid), '--duration', '1']);

  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(http + '/');

  const target = page.locator('#targets tbody tr').first();
  await target.waitFor({ timeout: 20000 });
  check(await page.locator('#no-targets').isHidden(), 'a live target is listed');
  await target.click();
  const matrix = page.locator('#functions tbody tr', { hasText: 'matrix_multiply' });
  await matrix.first().waitFor({ timeout: 30000 });
  check(await page.locator('#functions tbody tr', { hasText: 'hash_strings' }).count() > 0,
    'the function table names the demo\'s hot functions');
  check(/session=[^&]+/.test(page.url()) && page.url().includes('tab=functions'), 'the session is in the URL');

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

  // The same view from its link, in a fresh page.
  const link = page.url();
  const again = await browser.newPage();
  await again.goto(link);
  await again.locator('#source tbody tr.hot').waitFor({ timeout: 15000 });
  check(await again.locator('#tabs button.active').textContent() === 'Source', 'the link reopens the Source tab');
  check((await again.locator('#source-file').inputValue()).endsWith('demo.cpp'), 'and the same file');

  await again.locator('#tabs button[data-tab="flamegraph"]').click();
  await again.waitForFunction(() => document.querySelector('#flame').height > 20, null, { timeout: 15000 });
  check(true, 'the flame graph draws');

  // The Live Debug wizard against an agent waiting with --listen and a pairing code.
  const code = '0123456789abcdef0123456789abcdef';
  const listener = start(bin('agent/perfwire-agent'), ['--listen', '--bind', '127.0.0.1', '--port', '0', '--token', code]);
  const listenPort = await until('the listening agent', async () => listener.log.match(/listening on [^:]+:(\d+)/)?.[1]);
  const wz = await browser.newPage();
  wz.on('pageerror', (e) => errors.push(e.message));
  await wz.goto(http + '/');
  await wz.click('#open-wizard');
  await wz.fill('#wz-port', listenPort);
  await wz.fill('#wz-token', 'not-the-code');
  await wz.click('#wz-connect');
  await wz.waitForFunction(() => document.querySelector('#wizard-error').textContent.length > 0, null, { timeout: 15000 });
  check(/pairing code|auth/i.test(await wz.locator('#wizard-error').textContent()), `a wrong pairing code is refused: "${await wz.locator('#wizard-error').textContent()}"`);
  await wz.fill('#wz-token', code);
  await wz.click('#wz-connect');
  await wz.fill('#wz-filter', 'perfwire-demo');
  const row = wz.locator(`#wz-processes tbody tr[data-pid="${demo.pid}"]`);
  await row.waitFor({ timeout: 20000 });
  check(true, 'the process list shows the demo');
  await row.click();
  await wz.locator('#wz-events input[name=event]').first().waitFor({ timeout: 30000 });
  check(/works/.test(await wz.locator('#wz-perf').textContent()), 'perf is verified on the device');
  const events = await wz.locator('#wz-events input[name=event]').evaluateAll((l) => l.map((i) => i.value));
  check(events.includes('cpu-clock') || events.includes('cycles'), `sampling events offered: ${events.join(', ')}`);
  await wz.click('#wz-perf-next');
  await wz.click('#wizard [data-browse="wz-source"]');
  await wz.locator('#wz-browser [data-use]').first().waitFor({ timeout: 10000 });
  check(await wz.locator('#wz-browser [data-dir], #wz-browser [data-use]').count() > 1, 'the file browser lists a folder');
  await wz.locator('#wz-browser button[data-use]').click();
  check((await wz.locator('#wz-source').inputValue()).length > 0, 'a folder chosen in the browser fills the field');
  await wz.fill('#wz-source', '');
  await wz.click('#wz-symbols-next');
  await wz.fill('#wz-frequency', '199');
  await wz.click('#wz-rate-next');
  check((await wz.locator('#wz-review').textContent()).includes('199 Hz'), 'the review shows the chosen rate');
  await wz.click('#wz-start');
  await wz.waitForFunction(() => location.hash.startsWith('#session='), null, { timeout: 15000 });
  await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).first().waitFor({ timeout: 30000 });
  check(true, 'starting lands on the live session, which fills with the demo\'s functions');

  // A session id that does not exist: an error message, not a silent blank page.
  await again.goto(http + '/#session=nope&tab=source');
  await again.waitForFunction(() => document.querySelector('#conn').textContent.startsWith('error'), null, { timeout: 10000 });
  check(true, 'an unknown session shows an error');
  check(errors.length === 0, `no script errors (${errors.join('; ')})`);
} catch (e) {
  console.log(`FAIL ${e.message}`);
  failures++;
} finally {
  if (browser) await browser.close();
  for (const c of children.reverse()) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
}
console.log(failures ? `ui tests: ${failures} failed` : 'ui tests: all passed');
process.exit(failures ? 1 : 0);
