// Browser test: twenty tabs of one headless Chromium on one collector, all live. A browser
// keeps six HTTP/1.1 connections per host for all its tabs; a page that held one for its live
// stream left none past the sixth tab. Each tab must stream over its own WebSocket, show the
// live session's function table, and follow its sample count as it grows.
//
//   node test/ui/tabs_test.mjs BUILD_DIR [tabs, default 20]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { check, failStep, failures, start, stopAll, until } from './harness.mjs';

const build = resolve(process.argv[2] || 'build');
const tabs = Number(process.argv[3] || 20);
const work = mkdtempSync(join(tmpdir(), 'perfwire-tabs-'));

let browser;
try {
  const demo = start(join(build, 'src/demo/perfwire-demo'), ['300']);
  const collector = start(join(build, 'src/collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1']);
  const signIn = await until('the collector', async () => collector.log.match(/UI and API on (http:\S+\?code=\S+)/)?.[1]);
  const http = new URL(signIn).origin;
  const token = readFileSync(join(work, 'sessions', '.http-token'), 'utf8').trim();
  const agentPort = collector.log.match(/agents on [^:]+:(\d+)/)[1];
  start(join(build, 'src/agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--pid', String(demo.pid)]);
  const session = await until('a live session with samples', async () => {
    const list = await (await fetch(`${http}/api/sessions`, { headers: { Authorization: `Bearer ${token}` } })).json();
    return list.find((s) => s.live && s.samples > 0)?.id;
  }, 60000);

  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const pages = [];
  const sockets = new Set();
  const errors = [];
  for (let i = 0; i < tabs; ++i) {
    const p = await context.newPage();
    p.on('websocket', (ws) => { if (ws.url().endsWith('/api/ws')) sockets.add(p); });
    p.on('pageerror', (e) => errors.push(e.message));
    pages.push(p);
  }
  await pages[0].goto(signIn); // the cookie, for every tab of the context
  await pages[0].waitForFunction(() => document.querySelector('#conn')?.textContent === 'live', null, { timeout: 15000 });
  // All of them open at once, each on the live session's function table.
  await Promise.all(pages.map((p) => p.goto(`${http}/#session=${session}&tab=functions`)));
  const shown = await Promise.all(pages.map((p) => p.waitForFunction((sid) =>
    document.querySelector('#conn').textContent === 'live' &&
    new URLSearchParams(document.querySelector('#functions').dataset.shows ?? '').get('session') === sid &&
    document.querySelectorAll('#functions tbody tr[data-function]').length > 0, session, { timeout: 30000 }).then(() => true, () => false)));
  check(shown.every(Boolean), `${tabs} tabs show the live session's function table (${shown.filter(Boolean).length} do)`);
  check(sockets.size === tabs, `every tab streams over its own WebSocket (${sockets.size} of ${tabs})`);

  // Live in every tab: each one's sample count grows without a reload.
  const samples = (p) => p.evaluate(() => Number((document.querySelector('#session-info').textContent.match(/(\d+) samples/) || [])[1] || 0));
  const before = await Promise.all(pages.map(samples));
  const grew = await Promise.all(pages.map((p, i) => p.waitForFunction((n) =>
    Number((document.querySelector('#session-info').textContent.match(/(\d+) samples/) || [])[1] || 0) > n, before[i], { timeout: 20000 })
    .then(() => true, () => false)));
  check(grew.every(Boolean), `every tab follows the session live (${grew.filter(Boolean).length} of ${tabs} saw its samples grow)`);
  // And a request from the last tab is answered at once: the tabs' streams hold no pooled connection.
  const t0 = Date.now();
  const status = await pages[tabs - 1].evaluate(async () => (await fetch('/api/targets')).status);
  check(status === 200 && Date.now() - t0 < 5000, `a request from tab ${tabs} is answered (${status} in ${Date.now() - t0} ms)`);
  check(errors.length === 0, `no script errors (${errors.join('; ')})`);
} catch (e) {
  console.log(`FAIL ${e.message.split('\n')[0]}`);
  failStep();
} finally {
  if (browser) await browser.close().catch(() => {});
  await stopAll();
  rmSync(work, { recursive: true, force: true });
}
console.log(failures() ? `tabs test: ${failures()} failed` : 'tabs test: all passed');
process.exit(failures() ? 1 : 0);
