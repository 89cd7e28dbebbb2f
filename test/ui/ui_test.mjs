// Browser test of the UI in Debian's headless Chromium, against a real collector, a real agent
// and real perf profiling the demo workload.
//
//   node test/ui/ui_test.mjs BUILD_DIR
//
// This file starts them, signs a browser in and runs the steps in order; the steps are the
// views', one file per view under test/ui/views/ (landing, functions, source, flamegraph,
// session, sandwich, call tree, transforms, wizard, health, sessions, timeline, off-cpu), each step given the state the
// earlier ones left (the pages, the sessions they opened). A failure names the step, the
// requests still under way and what each open page showed. Every wait is bounded.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { check, children, failStep, failures, start, stopAll, unfinishedRequests, until } from './harness.mjs';
import * as calltree from './views/calltree.mjs';
import * as flamegraph from './views/flamegraph.mjs';
import * as functions from './views/functions.mjs';
import * as health from './views/health.mjs';
import * as landing from './views/landing.mjs';
import * as offcpu from './views/offcpu.mjs';
import * as sandwich from './views/sandwich.mjs';
import * as session from './views/session.mjs';
import * as sessions from './views/sessions.mjs';
import * as source from './views/source.mjs';
import * as timeline from './views/timeline.mjs';
import * as transforms from './views/transforms.mjs';
import * as wizard from './views/wizard.mjs';

const build = resolve(process.argv[2] || 'build');
const bin = (p) => join(build, 'src', p);
const work = mkdtempSync(join(tmpdir(), 'perfwire-ui-'));
const netlog = process.env.PERFWIRE_UI_NETLOG || join(work, 'netlog.json');

let browser;
const inflight = new Map(); // request -> when it was sent
const recent = []; // the last API requests answered, for a failure to show what came before
let httpPort = ''; // the collector's, for counting the browser's connections to it
let askDirectly = null;
let failedAt = 0; // when a step failed, for the NetLog to say what was under way then
// The steps, in order: each a view's (test/ui/views/), each given the state the earlier left.
const STEPS = [
  landing.addTarget,
  functions.liveTable,
  source.openSource,
  flamegraph.drawAndSearch,
  flamegraph.focusAndHide,
  session.healthChecks,
  sandwich.callersOf,
  calltree.treeTable,
  transforms.everyView,
  wizard.liveDebug,
  session.controls,
  health.deviceHealth,
  sessions.importCompareDelete,
  sessions.importShapes,
  source.anotherBuild,
  source.strippedBinary,
  session.threadsLate,
  source.sourceFolders,
  session.threadFilter,
  sessions.svgExport,
  sessions.compareReport,
  landing.theme,
  landing.searchSessions,
  functions.halfTypedFilter,
  session.unknownSession,
  timeline.lanesAndChart,
  timeline.linkOutage,
  offcpu.waitsEverywhere,
  session.outOfReach,
  session.stopAndStartAgain,
  session.restartWithDwarf,
  landing.updateAgent,
  landing.flightCapture,
  session.overheadRate,
  session.frozenCollector,
];
// The state the steps share, and the step in progress (named in a failure).
const t = { doing: 'starting' };
try {
  const demo = start(bin('demo/perfwire-demo'), ['300']);
  // The agents scripts/build-agents.sh wrote, offered on the landing page; on a checkout that
  // was only built, the collector offers its own build's agents (no --agents-dir).
  const agentsDir = new URL('../../dist', import.meta.url).pathname;
  const distBuilt = existsSync(join(agentsDir, 'perfwire-agent-linux-aarch64'));
  const collector = start(bin('collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1', ...(distBuilt ? ['--agents-dir', agentsDir] : []),
     '--browse-root', work, '--sysroot', '/']); // (the agent runs on this machine)
  const http = await until('the collector', async () => collector.log.match(/UI and API on (http:\/\/[^/]+)\//)?.[1]);
  httpPort = new URL(http).port;
  askDirectly = async (url) => { // the collector asked outside the browser, 5 s at most
    const t0 = Date.now();
    // The body is not read: a stream's connection is closed at once instead of left open.
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 5000);
    try { const r = await fetch(url, { signal: ac.signal }); return `${r.status} in ${Date.now() - t0} ms`; } catch (e) { return `no answer in ${Date.now() - t0} ms`; } finally { clearTimeout(timer); ac.abort(); }
  };
  // The link the collector prints signs one browser in; scripts send the token, kept beside
  // the sessions, as a header.
  const signIn = collector.log.match(/UI and API on (http:\S+\?code=\S+)/)[1];
  const token = readFileSync(join(work, 'sessions', '.http-token'), 'utf8').trim();
  const fetch = (url, opts = {}) => globalThis.fetch(url, { ...opts, headers: { ...opts.headers, Authorization: `Bearer ${token}` } });
  const agentPort = collector.log.match(/agents on [^:]+:(\d+)/)[1];
  start(bin('agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--pid', String(demo.pid), '--duration', '1']);

  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    // The browser's network log, always: a failure names where each unfinished request stood.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', `--log-net-log=${netlog}`,
      ...(process.env.PERFWIRE_UI_NETLOG ? ['--net-log-capture-mode=Everything'] : [])],
  });
  const errors = [];
  // Without the token the UI asks for it, and the API answers nothing.
  t.doing = "signing in";
  const stranger = await browser.newPage();
  await stranger.goto(http + '/#tab=sessions');
  await stranger.locator('#sign-in').waitFor({ timeout: 10000 });
  check(/access token/.test(await stranger.locator('#sign-in').textContent()) &&
    (await stranger.evaluate(async () => (await fetch('/api/sessions')).status)) === 401,
    'without the access token the UI asks for it and the API answers 401');
  await stranger.fill('#sign-in-token', 'not-the-token-0123456789');
  await stranger.click('#sign-in button');
  await stranger.locator('#sign-in-error:not(:empty)').waitFor({ timeout: 10000 });
  check((await stranger.context().cookies()).length === 0 &&
    /not this collector's access token/.test(await stranger.locator('#sign-in-error').textContent()),
    'a wrong token sets no cookie, and the form says why');
  // The right one signs in from the form: the token in a POST body, never in the address.
  await stranger.fill('#sign-in-token', token);
  await Promise.all([stranger.waitForEvent('load'), stranger.click('#sign-in button')]);
  await stranger.waitForFunction(() => ['live', 'signed out'].includes(document.querySelector('#conn')?.textContent), null, { timeout: 10000 });
  check((await stranger.context().cookies()).some((c) => c.name.startsWith('perfwire_token_') && c.httpOnly) &&
    !stranger.url().includes(token) && (await stranger.locator('#conn').textContent()) === 'live',
    `the sign-in form signs the browser in, the token never in an address (${stranger.url()})`);
  await stranger.close();
  // One browser context, signed in once by the printed link, for every page below.
  const context = await browser.newContext();
  // Requests under way, for a failure to name what was still pending (a page that cannot
  // load may be waiting behind the browser's 6 connections per host).
  context.on('request', (r) => inflight.set(r, Date.now()));
  // A closed page's requests end with it, though no event says so.
  context.on('page', (p) => p.on('close', () => {
    for (const r of inflight.keys()) if ((() => { try { return r.frame().page() === p; } catch { return false; } })()) inflight.delete(r);
  }));
  for (const done of ['requestfinished', 'requestfailed']) context.on(done, (r) => {
    const t = inflight.get(r);
    inflight.delete(r);
    if (t === undefined || !r.url().includes('/api/')) return;
    recent.push(`${done === 'requestfailed' ? 'failed' : 'done'} after ${((Date.now() - t) / 1000).toFixed(1)} s: ${r.method()} ${r.url().replace(/^https?:\/\/[^/]+/, '')}`);
    if (recent.length > 12) recent.shift();
  });
  const page = await context.newPage();
  await page.goto(signIn);
  const cookie = (await context.cookies()).find((c) => c.name.startsWith('perfwire_token_'));
  check(page.url() === http + '/' && cookie?.httpOnly && cookie?.sameSite === 'Strict',
    `the printed link signs the browser in and leaves the token out of the address (${page.url()})`);
  page.on('pageerror', (e) => errors.push(e.message));
  // The collector's Content-Security-Policy must not block anything the UI itself does.
  const blocked = (m) => { if (m.type() === 'error' && /Content Security Policy/.test(m.text())) errors.push(m.text()); };
  page.on('console', blocked);
  Object.assign(t, { build, bin, work, browser, demo, agentsDir, distBuilt, collector, http, signIn, token, fetch, agentPort, errors, stranger, context, page, cookie, blocked });
  for (const step of STEPS) await step(t);
  check(errors.length === 0, `no script errors (${errors.join('; ')})`);
} catch (e) {
  failedAt = Date.now();
  // The collector's side of its HTTP port, taken first: a listener's Recv-Q counts connections
  // not yet accepted, a connection's counts request bytes the collector has not read.
  const sockets = httpPort ? spawnSync('ss', ['-tanH', `( sport = :${httpPort} )`], { encoding: 'utf8' }).stdout?.trim() : '';
  const fds = (() => { try { return readdirSync(`/proc/${children[1].pid}/fd`).length; } catch { return '?'; } })();
  console.log(`FAIL while ${t.doing}: ${e.message.split('\n')[0]}`);
  console.log(`  the collector's HTTP sockets (${fds} open files):\n${(sockets || '(none)').split('\n').map((l) => '    ' + l.replace(/\s+/g, ' ')).join('\n')}`);
  // What Playwright was waiting for, and what each open page looked like.
  for (const l of e.message.split('\n').slice(1, 16)) if (l.trim()) console.log(`  ${l.trim()}`);
  for (const [i, p] of (browser?.contexts() ?? []).flatMap((c) => c.pages()).entries()) {
    const shot = join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), `failure-page-${i}.png`);
    const seen = await p.evaluate(() => `${document.visibilityState}, ${location.hash}`).catch((x) => x.message.split('\n')[0]);
    await p.screenshot({ path: shot, timeout: 5000 }).catch(() => {});
    console.log(`  open page ${i} (${seen}): ${shot}`);
  }
  const now = Date.now();
  for (const [r, t] of inflight) console.log(`  still pending after ${((now - t) / 1000).toFixed(1)} s: ${r.method()} ${r.url().replace(/(token|code)=[^&]*/, '$1=…')}${askDirectly && r.method() === 'GET' ? ` (asked directly: ${await askDirectly(r.url())})` : ''}`);
  // Open connections to the collector (Chrome keeps at most 6 per host), when ss is there.
  const ss = httpPort ? spawnSync('ss', ['-tnpH', 'state', 'established', `( dport = :${httpPort} )`], { encoding: 'utf8' }) : null;
  if (ss && ss.status === 0) {
    const by = {};
    for (const l of ss.stdout.split('\n').filter(Boolean)) { const p = l.match(/users:\(\("([^"]+)"/)?.[1] || '?'; by[p] = (by[p] || 0) + 1; }
    console.log(`  connections to the collector's HTTP port, by process: ${JSON.stringify(by)}`);
  }
  for (const r of recent) console.log(`  before: ${r}`);
  for (const [name, c] of [['collector', children[1]], ['agent', children[2]]])
    if (c?.log) console.log(`  the ${name}'s last lines:\n${c.log.trimEnd().split('\n').slice(-15).map((l) => '    ' + l).join('\n')}`);
  failStep();
} finally {
  if (browser) await browser.close();
  if (failedAt && browser) for (const l of unfinishedRequests(netlog, failedAt)) console.log(`  network: ${l}`);
  await stopAll();
  rmSync(work, { recursive: true, force: true });
}
console.log(failures() ? `ui tests: ${failures()} failed` : 'ui tests: all passed');
process.exit(failures() ? 1 : 0);
