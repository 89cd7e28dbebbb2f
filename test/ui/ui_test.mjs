// Browser test of the UI in Debian's headless Chromium, against a real collector, a real agent
// and real perf profiling the demo workload.
//
//   node test/ui/ui_test.mjs BUILD_DIR
//
// Checks: a live target is listed; its session's function table names the demo's hot
// functions; clicking one opens the Source tab on demo.cpp with the hot loop heat-coloured;
// the flame graph draws; the URL hash reopens the same view in a fresh page; a broken source
// request shows an error instead of a blank page. Every wait is bounded.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const build = resolve(process.argv[2] || 'build');
const bin = (p) => join(build, 'src', p);
const work = mkdtempSync(join(tmpdir(), 'perfwire-ui-'));
const netlog = process.env.PERFWIRE_UI_NETLOG || join(work, 'netlog.json');

// From Chromium's NetLog: each request the browser had begun and not ended when the test
// failed (at `at`, ms since the epoch), with the last things its network stack did for it,
// and any time a socket pool made a request wait.
function unfinishedRequests(path, at) {
  let d;
  const text = readFileSync(path, 'utf8');
  try { d = JSON.parse(text); } catch { try { d = JSON.parse(text.replace(/,\s*$/, '') + ']}'); } catch { return ['(the NetLog could not be read)']; } }
  const c = d.constants;
  const name = Object.fromEntries(Object.entries(c.logEventTypes).map(([k, v]) => [v, k]));
  const phase = Object.fromEntries(Object.entries(c.logEventPhase).map(([k, v]) => [v, k.replace('PHASE_', '').toLowerCase()]));
  const when = (e) => Number(e.time) + Number(c.timeTickOffset); // ms since the epoch
  const requests = new Map(), out = [];
  for (const e of d.events) {
    if (when(e) > at) continue; // the browser closing ends everything
    const what = name[e.type];
    if (/STALLED/.test(what)) out.push(`a socket pool stalled ${((at - when(e)) / 1000).toFixed(1)} s before the failure: ${what}`);
    if (e.source.type !== c.logSourceType.URL_REQUEST) continue;
    const r = requests.get(e.source.id) ?? { url: '', begun: when(e), ended: false, steps: [] };
    if (e.params?.url && !r.url) r.url = e.params.url;
    if (what === 'REQUEST_ALIVE' && phase[e.phase] === 'end') r.ended = true;
    r.steps.push(`${what}${phase[e.phase] === 'none' ? '' : ' ' + phase[e.phase]}`);
    requests.set(e.source.id, r);
  }
  for (const r of requests.values())
    if (!r.ended && r.url.startsWith('http'))
      out.push(`unfinished for ${((at - r.begun) / 1000).toFixed(1)} s: ${r.url.replace(/token=[^&]*/, 'token=…')} (last: ${r.steps.slice(-4).join(', ')})`);
  return out;
}
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
// Waits until the function table shows rows answered for `want` (session, tid, start, …; null
// means absent): the state a navigation or a filter produces, never rows that may already
// have been on screen before it.
function tableShows(page, want, ms = 15000) {
  return page.waitForFunction((w) => {
    const shows = new URLSearchParams(document.querySelector('#functions').dataset.shows ?? '');
    if (!document.querySelector('#functions').dataset.shows) return false;
    return Object.entries(w).every(([k, v]) => (v === true ? shows.has(k) : shows.get(k) === v));
  }, want, { timeout: ms });
}
const pct2 = (v) => Number(v).toFixed(2);
function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures++;
}

let browser;
const inflight = new Map(); // request -> when it was sent
const recent = []; // the last API requests answered, for a failure to show what came before
let httpPort = ''; // the collector's, for counting the browser's connections to it
let askDirectly = null;
let failedAt = 0; // when a step failed, for the NetLog to say what was under way then
let doing = 'starting'; // the step in progress, named in a failure
try {
  const demo = start(bin('demo/perfwire-demo'), ['300']);
  // The agents scripts/build-agents.sh wrote, offered on the landing page.
  const agentsDir = new URL('../../dist', import.meta.url).pathname;
  const collector = start(bin('collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1', '--agents-dir', agentsDir,
     '--browse-root', work]);
  const http = await until('the collector', async () => collector.log.match(/UI and API on (http:\/\/[^/]+)\//)?.[1]);
  httpPort = new URL(http).port;
  askDirectly = async (url) => { // the collector asked outside the browser, 5 s at most
    const t0 = Date.now();
    // The body is not read: a stream's connection is closed at once instead of left open.
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 5000);
    try { const r = await fetch(url, { signal: ac.signal }); return `${r.status} in ${Date.now() - t0} ms`; } catch (e) { return `no answer in ${Date.now() - t0} ms`; } finally { clearTimeout(timer); ac.abort(); }
  };
  // The link the collector prints signs a browser in; scripts send the token as a header.
  const signIn = collector.log.match(/UI and API on (http:\S+\?token=\S+)/)[1];
  const token = new URL(signIn).searchParams.get('token');
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
  doing = "signing in";
  const stranger = await browser.newPage();
  await stranger.goto(http + '/#tab=sessions');
  await stranger.locator('#sign-in').waitFor({ timeout: 10000 });
  check(/access token/.test(await stranger.locator('#sign-in').textContent()) &&
    (await stranger.evaluate(async () => (await fetch('/api/sessions')).status)) === 401,
    'without the access token the UI asks for it and the API answers 401');
  await stranger.fill('#sign-in-token', 'not-the-token-0123456789');
  await stranger.click('#sign-in button');
  await stranger.waitForLoadState('domcontentloaded');
  check((await stranger.context().cookies()).length === 0, 'a wrong token sets no cookie');
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
  const cookie = (await context.cookies()).find((c) => c.name === 'perfwire_token');
  check(page.url() === http + '/' && cookie?.httpOnly && cookie?.sameSite === 'Strict',
    `the printed link signs the browser in and leaves the token out of the address (${page.url()})`);
  page.on('pageerror', (e) => errors.push(e.message));
  // The collector's Content-Security-Policy must not block anything the UI itself does.
  const blocked = (m) => { if (m.type() === 'error' && /Content Security Policy/.test(m.text())) errors.push(m.text()); };
  page.on('console', blocked);
  doing = "the landing page";

  // Which agent a device needs, and how to start it.
  doing = "the add-a-target help";
  await page.click('#add-target summary');
  await page.locator('#agent-binaries tbody tr').first().waitFor({ timeout: 10000 });
  await page.fill('#at-machine', 'arm64');
  const archs = await page.locator('#agent-binaries tbody td:first-child').allTextContents();
  const fetchCmd = await page.locator('#at-commands pre.cmd').first().textContent();
  check(archs.join(',') === 'aarch64,armv7,python,s390x,x86_64' && (await page.locator('#at-file').textContent()) === '→ perfwire-agent-linux-aarch64' &&
    fetchCmd.includes('/api/agent-binaries/aarch64'), `a device's uname -m names its agent and the commands to get it there (agents: ${archs.join(', ')})`);
  const download = await fetch(`${http}/api/agent-binaries/aarch64`);
  const elf = Buffer.from(await download.arrayBuffer());
  check(download.ok && elf.subarray(0, 4).toString('latin1') === '\x7fELF' && elf[18] === 183, 'the aarch64 agent downloads from the collector (an ELF for machine 183, AArch64)');
  await page.fill('#at-machine', 'mips');
  check((await page.locator('#at-file').textContent()).startsWith('not built for mips'), 'an architecture without an agent says so');

  const target = page.locator('#targets tbody tr').first();
  await target.waitFor({ timeout: 20000 });
  check(await page.locator('#no-targets').isHidden(), 'a live target is listed');
  // The landing page refreshes with every live event: its rows stay the same elements (a
  // click pressed on a row and released on its replacement would be lost).
  doing = 'watching the landing page refresh';
  const sessionRow = page.locator('#sessions tbody tr').first();
  await sessionRow.waitFor({ timeout: 10000 });
  await page.evaluate(() => { for (const t of ['#targets', '#sessions']) document.querySelector(`${t} tbody tr`).perfwireMarked = true; });
  const samplesCell = sessionRow.locator('td').nth(5);
  const samplesBefore = await samplesCell.textContent();
  await page.waitForFunction((b) => document.querySelector('#sessions tbody tr td:nth-child(6)').textContent !== b, samplesBefore, { timeout: 20000 });
  const rowsKept = await page.evaluate(() => ['#targets', '#sessions'].map((t) => document.querySelector(`${t} tbody tr`).perfwireMarked === true));
  check(rowsKept.every(Boolean), `the live tables refresh in place (samples ${samplesBefore} → ${await samplesCell.textContent()}, rows kept: ${rowsKept.join(', ')})`);
  await target.click();
  // A loaded machine may deliver a first chunk with only a few samples: wait until the live
  // profile holds enough for every worker and for a heat map, as a user watching it would.
  doing = 'waiting for the live profile to fill';
  await page.waitForFunction(() => {
    const n = Number(document.querySelector('#session-info').textContent.match(/(\d+) samples/)?.[1] || 0);
    const names = document.querySelector('#functions tbody').textContent;
    return n >= 400 && names.includes('matrix_multiply') && names.includes('hash_strings');
  }, null, { timeout: 45000 }).catch(() => {});
  const matrix = page.locator('#functions tbody tr', { hasText: 'matrix_multiply' });
  check(await matrix.count() > 0 && await page.locator('#functions tbody tr', { hasText: 'hash_strings' }).count() > 0,
    `the function table names the demo's hot functions (${await page.locator('#session-info').textContent()})`);
  check(/session=[^&]+/.test(page.url()) && page.url().includes('tab=functions'), 'the session is in the URL');
  // The count and the rows read at once: a live table may gain a function between two reads.
  const [shownCount, shownRows] = await page.evaluate(() => [Number(document.querySelector('#functions-count').textContent.replace(/[^\d]/g, '')),
    document.querySelectorAll('#functions tbody tr[data-function]').length]);
  const session = new URLSearchParams(new URL(page.url()).hash.slice(1)).get('session');
  const apiCount = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions.length;
  // A live profile only gains functions: the count the page showed cannot exceed a later answer.
  check(shownCount >= shownRows && shownCount <= apiCount,
    `the table counts every function (${shownCount} counted, ${apiCount} in a later answer)`);

  doing = "opening matrix_multiply's source";
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
  doing = "reopening the link";
  const again = await context.newPage();
  await again.goto(link);
  await again.locator('#source tbody tr.hot').waitFor({ timeout: 15000 });
  check(await again.locator('#tabs button.active').textContent() === 'Source', 'the link reopens the Source tab');
  check((await again.locator('#source-file').inputValue()).endsWith('demo.cpp'), 'and the same file');
  // Done with the first tab: every open tab holds a live stream (a browser keeps six connections
  // to a host, docs/api.md), so the test keeps open only the tabs it still uses.
  await page.close();

  doing = "drawing the flame graph";
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

  // Right-click a frame: focus on its function (every stack through it, from it down) or hide
  // it from every stack; each shows as a chip whose ✕ undoes it.
  doing = "focusing and hiding in the flame graph";
  const depth1 = async () => {
    const b = await again.locator('#flame').boundingBox();
    await again.mouse.move(b.x + b.width / 2, b.y + 18 + 9);
    await again.locator('#flame-tip').waitFor({ timeout: 5000 });
    return { name: await again.locator('#flame-tip b').textContent(), x: b.x + b.width / 2, y: b.y + 18 + 9 };
  };
  const shapeShows = (want) => again.waitForFunction((w) => document.querySelector('#flame-shape').dataset.shows === w && Number(document.querySelector('#flame').dataset.boxes) > 0, want, { timeout: 15000 });
  const under = await depth1();
  await again.mouse.click(under.x, under.y, { button: 'right' });
  await again.locator('#flame-menu button[data-act="focus"]').click();
  await shapeShows(`${under.name}|`);
  const focusShare = Number((await again.locator('#flame-shape').textContent()).match(/\(([\d.]+) % of the total\)/)[1]);
  // A focus is by name, as pprof's is: a name several modules share ("[unknown]" where a
  // library's frames were not unwound) holds the stacks through any of them.
  const focusRows = (await (await fetch(`${http}/api/sessions/${session}/functions`)).json()).functions.filter((f) => f.name === under.name);
  const [most, sum] = [Math.max(0, ...focusRows.map((f) => f.total_pct)), focusRows.reduce((a, f) => a + f.total_pct, 0)];
  check(focusRows.length && focusShare > most - 5 && focusShare < sum + 5 && await again.locator('#flame-menu').isHidden() && (await depth1()).name === under.name,
    `focus on ${under.name}: the menu closes, the graph holds its stacks, ${focusShare} % (its total in the table: ${focusRows.map((f) => pct2(f.total_pct)).join(' + ')} %)`);
  await again.mouse.move(0, 0);
  // Redrawn with live data, the chip's share changes and its ✕ stays the same element.
  await again.evaluate(() => { document.querySelector('#flame-shape [data-unfocus]').perfwireMarked = true; });
  const shareText = () => again.locator('#flame-shape').textContent();
  const shareBefore = await shareText();
  await again.waitForFunction((b) => document.querySelector('#flame-shape').textContent !== b, shareBefore, { timeout: 20000 });
  const chipKept = await again.evaluate(() => document.querySelector('#flame-shape [data-unfocus]')?.perfwireMarked === true);
  check(chipKept, `the focus chip updates in place (${shareBefore.match(/[\d.]+ %/)?.[0]} → ${(await shareText()).match(/[\d.]+ %/)?.[0]})`);
  await again.locator('#flame-shape [data-unfocus]').click();
  await shapeShows('|');
  const top = await depth1();
  await again.mouse.click(top.x, top.y, { button: 'right' });
  await again.locator('#flame-menu button[data-act="hide"]').click();
  await shapeShows(`|${top.name}`);
  const afterHide = await depth1();
  check(afterHide.name !== top.name && /hidden/.test(await again.locator('#flame-shape').textContent()), `hiding ${top.name} takes it out of the graph (${afterHide.name} in its place)`);
  await again.mouse.move(0, 0);
  await again.locator('#flame-shape [data-unhide]').click();
  await shapeShows('|');

  // The profile's health: every check with its value; a failing one carries its fix.
  doing = "the profile-health panel";
  await again.waitForFunction(() => document.querySelector('#quality').dataset.shows && document.querySelectorAll('#quality-checks li').length >= 4, null, { timeout: 15000 });
  const health = await again.evaluate(() => [...document.querySelectorAll('#quality-checks li')].map((li) => ({
    id: li.dataset.check, status: li.className.replace('q-', ''), text: li.textContent.replace(/\s+/g, ' ').trim() })));
  const stacks = health.find((c) => c.id === 'truncated');
  check(health.find((c) => c.id === 'samples')?.text.includes('samples') && stacks &&
    (stacks.status === 'ok' || /--call-graph dwarf/.test(stacks.text)),
    `the profile-health panel answers each check (${health.map((c) => `${c.id} ${c.status}`).join(', ')})`);

  // The sandwich of hash_strings: its callers are the frames right above it in every stack,
  // as the collapsed export (an independent reading of the same profile) has them.
  doing = "the sandwich of hash_strings";
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
  check(expectedCaller && callerNames[0] === expectedCaller && await again.locator('#tabs button.active').textContent() === 'Callers',
    `the sandwich of hash_strings lists its real caller first (${callerNames[0]})`);

  // The Live Debug wizard against an agent waiting with --listen and a pairing code: the
  // Python agent, run by Debian's interpreter as a device with only python3 would run it, so
  // everything below (processes, perf check, file browser, live session, health) is its.
  doing = "the wizard's connect step";
  const code = '0123456789abcdef0123456789abcdef';
  const pythonAgent = new URL('../../src/agent/python/perfwire_agent.py', import.meta.url).pathname;
  const listener = start('/usr/bin/python3', [pythonAgent, '--listen', '--bind', '127.0.0.1', '--port', '0', '--token', code]);
  const listenPort = await until('the listening agent', async () => listener.log.match(/listening on [^:]+:(\d+)/)?.[1]);
  const wz = await context.newPage();
  wz.on('pageerror', (e) => errors.push(e.message));
  wz.on('console', blocked);
  await wz.goto(http + '/');
  await wz.click('#open-wizard');
  await wz.fill('#wz-port', listenPort);
  await wz.fill('#wz-token', 'not-the-code');
  await wz.click('#wz-connect');
  await wz.waitForFunction(() => document.querySelector('#wizard-error').textContent.length > 0, null, { timeout: 15000 });
  check(/pairing code|auth/i.test(await wz.locator('#wizard-error').textContent()), `a wrong pairing code is refused: "${await wz.locator('#wizard-error').textContent()}"`);
  await wz.fill('#wz-token', code);
  await wz.click('#wz-connect');
  doing = "the wizard's process list";
  await wz.fill('#wz-filter', 'perfwire-demo');
  const row = wz.locator(`#wz-processes tbody tr[data-pid="${demo.pid}"]`);
  await row.waitFor({ timeout: 20000 });
  check((await row.locator('td').nth(1).textContent()) === 'perfwire-demo', 'the process list shows the demo by name');
  doing = "the wizard's perf step";
  await row.click();
  await wz.locator('#wz-events input[name=event]').first().waitFor({ timeout: 30000 });
  check(/works/.test(await wz.locator('#wz-perf').textContent()), 'perf is verified on the device');
  const events = await wz.locator('#wz-events input[name=event]').evaluateAll((l) => l.map((i) => i.value));
  check(events.includes('cpu-clock') || events.includes('cycles'), `sampling events offered: ${events.join(', ')}`);
  const modes = await wz.locator('#wz-callgraph input[name=callgraph]').evaluateAll((l) => l.map((i) => `${i.value}${i.checked ? '*' : ''}`));
  check(modes.includes('fp*') && modes.includes('dwarf') && modes.includes('none'), `call-graph modes offered, the probe's checked: ${modes.join(', ')}`);
  doing = "the wizard's symbols step";
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
  check((await wz.locator('#wz-review').textContent()).includes('199 Hz') && (await wz.locator('#wz-review').textContent()).includes('frame pointers'),
    'the review shows the chosen rate and call-graph mode');
  doing = "starting from the wizard";
  await wz.click('#wz-start');
  await wz.waitForFunction(() => location.hash.startsWith('#session='), null, { timeout: 15000 });
  await tableShows(wz, { session: new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session') }, 30000);
  await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).first().waitFor({ timeout: 30000 });
  check(new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session')?.length > 0 &&
    await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).count() > 0,
    'starting lands on the live session, which fills with the demo\'s functions');

  // The session view of a live agent: controls, event selector, device health.
  doing = "the live session's controls";
  await wz.locator('#controls').waitFor({ timeout: 10000 });
  check((await wz.locator('#event option').allTextContents()).includes('cpu-clock'), 'the event selector lists cpu-clock');
  await wz.locator('#controls button[data-cmd="pause"]').click();
  await wz.waitForFunction(() => document.querySelector('#control-state').textContent.includes('paused'), null, { timeout: 20000 });
  check((await wz.locator('#control-state').textContent()).includes('paused'), 'pause reaches the agent, and the state shown follows');
  const enabled = () => wz.evaluate(() => [...document.querySelectorAll('#controls button[data-cmd]')].filter((b) => !b.hidden && !b.disabled).map((b) => b.dataset.cmd).join(','));
  check(await enabled() === 'resume,stop', `while paused only resume and stop are offered (${await enabled()})`);
  await wz.locator('#controls button[data-cmd="resume"]').click();
  await wz.waitForFunction(() => document.querySelector('#control-state').textContent.includes('profiling'), null, { timeout: 20000 });
  check((await wz.locator('#control-state').textContent()).includes('profiling') && await enabled() === 'pause,stop', 'resume reaches the agent; pause and stop are offered again');
  doing = "the device-health strip";
  await wz.waitForFunction(() => /%/.test(document.querySelector('#h-cpu').textContent) && document.querySelector('#h-cpu-line polyline'), null, { timeout: 20000 });
  const cpu = await wz.locator('#h-cpu').textContent();
  check(/^\d+ %$/.test(cpu) && await wz.locator('#h-cpu-line polyline').count() === 1, `device health shows CPU ${cpu} and a sparkline`);
  check((await wz.locator('#h-cores i').count()) >= 1, 'per-core bars are drawn');
  await wz.waitForFunction(() => document.querySelectorAll('#h-cpu-line polyline')[0]?.getAttribute('points').split(' ').length >= 2, null, { timeout: 20000 });
  doing = "selecting a time window";
  const box = await wz.locator('#h-cpu-line').boundingBox();
  await wz.mouse.move(box.x + 2, box.y + box.height / 2);
  await wz.mouse.down();
  await wz.mouse.move(box.x + box.width - 2, box.y + box.height / 2, { steps: 5 });
  await wz.mouse.up();
  await wz.waitForFunction(() => location.hash.includes('start=') && location.hash.includes('end='), null, { timeout: 5000 });
  const chosen = new URLSearchParams(new URL(wz.url()).hash.slice(1));
  check(Number(chosen.get('end')) > Number(chosen.get('start')), `dragging across the CPU chart selects a time window (${chosen.get('start')}–${chosen.get('end')} s)`);
  await tableShows(wz, { start: chosen.get('start'), end: chosen.get('end') });
  check(await wz.locator('#functions tbody tr[data-function]').count() > 0, 'the functions view answers for the window');

  // Sessions tab: import a real capture, compare it against the live session, delete it.
  doing = "importing on the Sessions tab";
  const liveSession = new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session');
  await wz.locator('#tabs button[data-tab="sessions"]').click();
  await wz.locator('#all-sessions tbody tr').first().waitFor({ timeout: 10000 });
  const capture = readFileSync(new URL('../collector/fixtures/callchain_fields.txt', import.meta.url));
  await wz.setInputFiles('#import-file', { name: 'capture.txt', mimeType: 'text/plain', buffer: capture });
  await wz.waitForFunction((live) => location.hash.includes('session=') && !location.hash.includes(live), liveSession, { timeout: 20000 });
  const imported = new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session');
  await tableShows(wz, { session: imported });
  check(imported !== liveSession && /_import$/.test(imported) &&
    await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).count() > 0, `an imported recording opens as session ${imported}`);
  doing = "comparing against a baseline";
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
  doing = "deleting the imported session";
  await wz.locator('#tabs button[data-tab="sessions"]').click();
  wz.once('dialog', (d) => d.accept());
  await wz.locator(`#all-sessions button[data-delete="${imported}"]`).click();
  await wz.waitForFunction(() => !location.hash.includes('session='), null, { timeout: 10000 });
  const left = await (await fetch(http + '/api/sessions')).json();
  check(!left.some((x) => x.id === imported) && left.some((x) => x.id === liveSession), 'deleting removes only that session');

  // Text from a newer perf (irq flags between the time and the period, PMU events, tracepoints)
  // imports; a line nothing can read is counted and shown, not dropped silently.
  doing = "importing perf 5.x+ header shapes";
  await wz.goto(`${http}/#session=${liveSession}&tab=sessions`);
  await wz.locator('#all-sessions tbody tr').first().waitFor({ timeout: 10000 });
  const shapes = readFileSync(new URL('../collector/fixtures/header_shapes.tsv', import.meta.url), 'utf8')
    .split('\n').filter((l) => l && !l.startsWith('#'))
    .map((l) => `${l.split('\t')[0]}\n\t 4005d6 table_leaf+0x4 (/bin/app)\n\n`).join('') +
    // A name that would read as "live" if its bidi override were obeyed.
    'app 7 1.000000: 1 cycles:\n\t 4005d6 \u202eevil+0x4 (/bin/app)\n\n' +
    // Code perf could not name, in a library it could: two addresses, one twice.
    ['15bc9', '15c00', '15bc9'].map((a) => `app 7 1.000000: 1 cycles:\n\t ${a} [unknown] (/usr/lib/liblzma.so.5)\n\t 4005d6 main+0x4 (/bin/app)\n\n`).join('') +
    'not perf output\n';
  await wz.setInputFiles('#import-file', { name: 'shapes.txt', mimeType: 'text/plain', buffer: Buffer.from(shapes) });
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
  // The nameless code of a library opens into the addresses its samples fell on.
  await wz.locator('#functions tbody tr[data-function="[unknown]"] button[data-expand]').click();
  await wz.locator('#functions tbody tr.sub').first().waitFor({ timeout: 10000 });
  const addressRows = await wz.locator('#functions tbody tr.sub td.name').allTextContents();
  check(addressRows.join(',') === 'liblzma.so.5+0x15bc9,liblzma.so.5+0x15c00',
    `a library's nameless code opens into its addresses, heaviest first (${addressRows.join(', ')})`);

  // A local binary that is not the build the agent reported: refused, and the Source tab says
  // what it looked at (the demo's own path on this machine is the right build, and used).
  doing = "a local binary of another build";
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
  check(refusedText.includes(wrong) && await demoRow.locator('td[data-origin="the device\'s path"]').count() === 1,
    `a local binary of another build is refused and said so ("${refusedText.slice(0, 100)}…")`);
  await put({ binaries: [] });

  // A stripped binary, recorded as a device would (perf with no symbols for it anywhere):
  // one [unknown] row until its unstripped build is given in the Source tab, then named.
  doing = "naming a stripped binary from the Source tab";
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

  // Back to the live session, its threads held back a while: the thread choice must not offer
  // the stripped recording's threads meanwhile (a thread id that session never had).
  doing = "switching sessions with the thread list late";
  let askedThreads, releaseThreads;
  const threadsAsked = new Promise((r) => { askedThreads = r; });
  const threadsHeld = new Promise((r) => { releaseThreads = r; });
  const ownThreads = (url) => url.pathname === `/api/sessions/${session}/threads`;
  await again.route(ownThreads, async (route) => { askedThreads(); await threadsHeld; await route.continue().catch(() => {}); });
  await again.goto(`${http}/#session=${session}&tab=source`);
  await Promise.race([threadsAsked, new Promise((_, no) => setTimeout(() => no(new Error('the session\'s threads were not asked for in 15 s')), 15000))]);
  const offeredMeanwhile = await again.evaluate(() => [...document.querySelector('#thread').options].map((o) => o.text));
  releaseThreads();
  await again.unroute(ownThreads);
  check(offeredMeanwhile.length === 1 && offeredMeanwhile[0] === 'all threads',
    `while a session's threads are fetched, the last session's are not offered (${offeredMeanwhile.join(', ')})`);
  await again.locator('#source tbody tr').first().waitFor({ timeout: 15000 });

  // Where the sources are, set from the Source tab: a folder under the browse root is kept,
  // one outside it is refused with the reason shown there.
  doing = "source folders from the Source tab";
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

  // The svg export on its own: clicking a frame zooms into it, "Reset zoom" goes back.
  // The thread filter: choosing a thread narrows the table; "all threads" clears it.
  doing = "filtering by thread";
  await again.goto(`${http}/#session=${session}&tab=functions`);
  // The choice must list this session's threads: the page showed the stripped recording's
  // just before, whose demo-hash thread has another id.
  const sessionThread = again.locator(`#thread[data-session="${session}"] option`, { hasText: 'demo-hash' }).first();
  await sessionThread.waitFor({ state: 'attached', timeout: 15000 });
  const hashThread = await sessionThread.getAttribute('value');
  await tableShows(again, { session, tid: null });
  await again.selectOption('#thread', hashThread);
  await tableShows(again, { session, tid: hashThread });
  const narrowedTop = await again.locator('#functions tbody tr[data-function]').first().getAttribute('data-function');
  const narrowed = await again.locator('#functions tbody tr[data-function]', { hasText: 'matrix_multiply' }).count();
  await again.selectOption('#thread', '');
  await tableShows(again, { session, tid: null });
  const widened = await again.locator('#functions tbody tr[data-function]', { hasText: 'matrix_multiply' }).count();
  check(narrowed === 0 && narrowedTop.includes('hash_strings') && widened > 0 && !again.url().includes('tid='),
    `choosing thread ${hashThread} (demo-hash) leaves only its functions, "all threads" brings the rest back`);

  doing = "zooming in the exported svg";
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

  doing = "switching the theme";
  const background = () => again.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await again.click('#theme'); // auto → light
  const light = await background();
  await again.click('#theme'); // light → dark
  const dark = await background();
  // DOMContentLoaded follows the module scripts; the page's own requests need not finish.
  await again.reload({ waitUntil: 'domcontentloaded' });
  await again.locator('#theme').waitFor({ timeout: 10000 });
  check(light === 'rgb(255, 255, 255)' && dark === 'rgb(18, 21, 28)' && await background() === dark &&
    (await again.locator('#theme').textContent()) === 'theme: dark', `the theme switches and is remembered (${light}, ${dark})`);

  // Many sessions stay usable: the landing page counts them and a search narrows them.
  doing = "searching sessions";
  await again.goto(http + '/');
  await again.locator('#sessions tbody tr').first().waitFor({ timeout: 10000 });
  const allCount = await again.locator('#sessions-count').textContent();
  await again.fill('#sessions-q', '_import');
  await again.waitForFunction(() => /match/.test(document.querySelector('#sessions-count').textContent), null, { timeout: 10000 });
  const found = await again.locator('#sessions tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.session));
  check(/^\d+ sessions?$/.test(allCount) && found.length > 0 && found.every((id) => id.includes('_import')),
    `the session list counts (${allCount}) and a search narrows it (${await again.locator('#sessions-count').textContent()})`);

  // A half-typed regex in the filter: said next to the box, the views keep showing everything.
  doing = "a half-typed filter";
  await again.goto(`${http}/#session=${session}&tab=flamegraph`);
  await again.waitForFunction(() => Number(document.querySelector('#flame').dataset.boxes) > 1, null, { timeout: 15000 });
  await again.fill('#filter', 'hash_(');
  await again.locator('#filter-error').waitFor({ timeout: 5000 });
  const said = await again.locator('#filter-error').textContent();
  const framesDrawn = Number(await again.locator('#flame').getAttribute('data-boxes'));
  await again.fill('#filter', 'hash_(s|x)');
  await again.locator('#filter-error').waitFor({ state: 'hidden', timeout: 5000 });
  check(framesDrawn > 1 && /incomplete pattern/.test(said), `an incomplete regex is said ("${said}"), and the flame graph stays drawn (${framesDrawn} frames)`);
  await again.fill('#filter', '');

  // A session id that does not exist: its error where the session would be, nothing of the
  // previous session left on screen; a valid session afterwards clears the error.
  doing = "an unknown session";
  await again.goto(`${http}/#session=${session}&tab=functions`);
  await tableShows(again, { session });
  await again.evaluate(() => { location.hash = 'session=nope&tab=functions'; });
  await again.locator('#view-error').waitFor({ timeout: 10000 });
  const leftover = await again.evaluate(() => ({
    title: document.querySelector('#session-title').textContent,
    info: document.querySelector('#session-info').textContent,
    cards: document.querySelector('#stat-cards').children.length,
    rows: document.querySelectorAll('#functions tbody tr').length,
    threads: document.querySelector('#thread').options.length,
    health: !document.querySelector('#health').hidden,
  }));
  check((await again.locator('#view-error').textContent()).includes('no session nope') && leftover.title === 'nope' &&
    !leftover.info && !leftover.cards && !leftover.rows && leftover.threads === 1 && !leftover.health, `an unknown session shows its error and nothing of the last one (${JSON.stringify(leftover)})`);
  await again.evaluate((id) => { location.hash = `session=${id}&tab=functions`; }, session);
  await tableShows(again, { session });
  await again.locator('#view-error').waitFor({ state: 'hidden', timeout: 10000 });
  check(await again.locator('#session-title').textContent() === session, 'a valid session afterwards clears the error');

  // The timeline of a two-phase workload: its thread's flame chart shows phase A, then B.
  doing = "the timeline";
  let phases = '';
  for (let i = 1; i <= 40; ++i)
    phases += `worker 7/7 ${(i / 4).toFixed(6)}: 1 cpu-clock:\n\t1 ${i <= 20 ? 'phase_a' : 'phase_b'} (/bin/app)\n\t2 main (/bin/app)\n\n`;
  const twoPhase = await (await fetch(http + '/api/sessions/import', { method: 'POST', body: phases })).json();
  await again.goto(`${http}/#session=${twoPhase.session_id}&tab=timeline&tid=7`);
  await again.waitForFunction(() => Number(document.querySelector('#chart').dataset.boxes) >= 3, null, { timeout: 15000 });
  const nameAt = async (fraction) => {
    const chartBox = await again.locator('#chart').boundingBox();
    await again.mouse.move(chartBox.x + chartBox.width * fraction, chartBox.y + 16 + 8);
    await again.locator('#chart-tip').waitFor({ timeout: 5000 });
    return again.locator('#chart-tip b').textContent();
  };
  const early = await nameAt(0.1), late = await nameAt(0.9);
  await again.mouse.move(0, 0);
  check(early === 'phase_a' && late === 'phase_b' && await again.locator('#lanes .lane').count() === 1,
    `the timeline's flame chart runs in time order: ${early} then ${late}`);
  // Dragging across the lane zooms into that window, shared with the other views.
  const laneBox = await again.locator('#lanes .lane canvas').boundingBox();
  await again.mouse.move(laneBox.x + laneBox.width * 0.6, laneBox.y + 9);
  await again.mouse.down();
  await again.mouse.move(laneBox.x + laneBox.width * 0.9, laneBox.y + 9, { steps: 4 });
  await again.mouse.up();
  await again.waitForFunction(() => /start=.*end=/.test(location.hash), null, { timeout: 5000 });
  await again.waitForFunction(() => / 7 [0-9.]+-[0-9.]+$/.test(document.querySelector('#tab-timeline').dataset.shows || ''), null, { timeout: 10000 });
  const zoomedEarly = await nameAt(0.25);
  await again.mouse.move(0, 0);
  check(zoomedEarly === 'phase_b', `dragging across a lane zooms into that window (it starts in ${zoomedEarly})`);
  await again.goto(`${http}/#session=${session}&tab=functions`);
  await tableShows(again, { session });

  // The collector out of reach: a tab click still switches the tab, and says why it is empty.
  doing = "the collector out of reach";
  await again.route('**/api/sessions/**', (r) => r.abort('connectionrefused'));
  await again.locator('#tabs button[data-tab="threads"]').click();
  // The state the click produces (a render already under way may fail first, on the old tab).
  await again.waitForFunction(() => !document.querySelector('#tab-threads').hidden && document.querySelector('#view-error').dataset.tab === 'threads' &&
    /cannot reach/.test(document.querySelector('#view-error').textContent), null, { timeout: 10000 }).catch(() => {});
  const opened = await again.evaluate(() => ({ hash: location.hash, threads: !document.querySelector('#tab-threads').hidden, functions: !document.querySelector('#tab-functions').hidden,
    failed: document.querySelector('#view-error').dataset.tab }));
  check(/cannot reach the collector/.test(await again.locator('#view-error').textContent()) && opened.threads && !opened.functions && opened.failed === 'threads',
    `a tab clicked while the collector is down opens and says so ("${await again.locator('#view-error').textContent()}", ${JSON.stringify(opened)})`);
  await again.unroute('**/api/sessions/**');
  await again.locator('#tabs button[data-tab="functions"]').click();
  await tableShows(again, { session });
  await again.locator('#view-error').waitFor({ state: 'hidden', timeout: 10000 });

  // Stop ends the run: the session is no longer live, and "start again" opens the next one.
  doing = "stopping and starting again";
  await again.locator('#controls button[data-cmd="stop"]').click();
  await again.locator('#controls button[data-cmd="start"]').waitFor({ timeout: 20000 });
  // The controls and the session's line are drawn by separate answers: wait for the line too.
  await again.waitForFunction(() => /ended/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 }).catch(() => {});
  const endedInfo = await again.locator('#session-info').textContent();
  check(!/\blive\b/.test(endedInfo) && /ended/.test(endedInfo) && await again.locator('#controls button[data-cmd="pause"]').isHidden(),
    `after stop the session reads as ended ("${endedInfo}") and "start again" is offered`);
  await again.locator('#controls button[data-cmd="start"]').click();
  await again.waitForFunction((old) => new URLSearchParams(location.hash.slice(1)).get('session') !== old, session, { timeout: 20000 });
  const next = new URLSearchParams(new URL(again.url()).hash.slice(1)).get('session');
  await again.waitForFunction(() => / live$/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 });
  check(next && next !== session, `"start again" opens the new run as session ${next}`);

  // Stacks cut short (the demo's libstdc++ has no frame pointers): one click records the same
  // process again with DWARF unwinding, and far more of the new run's stacks reach their start.
  doing = "restarting with dwarf";
  await again.waitForFunction(() => /call graphs: fp/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 });
  const restart = again.locator('#quality-action:not([hidden]) button[data-restart-callgraph="dwarf"]');
  await restart.waitFor({ state: 'attached', timeout: 30000 });
  if (!await again.locator('#quality').evaluate((d) => d.open)) await again.locator('#quality > summary').click(); // as a user opens the panel
  const cutShare = () => again.evaluate(() => {
    const m = document.querySelector('#quality-checks [data-check="truncated"]')?.textContent.match(/([\d.]+) % of the weight/);
    return document.querySelector('#quality').dataset.shows === new URLSearchParams(location.hash.slice(1)).get('session') && m ? Number(m[1]) : null;
  });
  const cutBefore = await cutShare();
  await restart.click();
  await again.waitForFunction((old) => new URLSearchParams(location.hash.slice(1)).get('session') !== old, next, { timeout: 30000 });
  await again.waitForFunction(() => /call graphs: dwarf/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 });
  // The share falls as the new run's samples arrive: the state the restart produces.
  await again.waitForFunction((b) => {
    const m = document.querySelector('#quality-checks [data-check="truncated"]')?.textContent.match(/([\d.]+) % of the weight/);
    return document.querySelector('#quality').dataset.shows === new URLSearchParams(location.hash.slice(1)).get('session') && m && Number(m[1]) < b / 2;
  }, cutBefore, { timeout: 60000 });
  const cutAfter = await cutShare();
  check(cutBefore >= 10 && cutAfter < cutBefore / 2, `restarting with dwarf: stacks cut short fall from ${cutBefore} % to ${cutAfter} %`);
  await again.goto(http + '/');
  const endedRow = again.locator(`#sessions tbody tr[data-session="${session}"]`);
  await endedRow.waitFor({ timeout: 10000 });
  const cells = await endedRow.locator('td').allTextContents();
  check(/perfwire-demo \d+/.test(cells[1]) && cells[3] === 'cpu-clock' && / s$/.test(cells[4]) && Number(cells[5].replace(/\D/g, '')) > 0 && cells[6] === 'saved',
    `a session row names its process, pid, event, duration and samples (${cells.join(' | ')})`);

  // A collector with a later agent build offers it on the landing page; one click updates the
  // agent, which restarts into it and comes back with the new version.
  doing = "updating an agent";
  const upd = join(work, 'update');
  for (const d of ['dist', 'bin']) mkdirSync(join(upd, d), { recursive: true });
  const later = join(upd, 'dist', 'perfwire-agent-linux-x86_64');
  copyFileSync(bin('agent/perfwire-agent-next'), later);
  writeFileSync(`${later}.sha256`, `${createHash('sha256').update(readFileSync(later)).digest('hex')}  perfwire-agent-linux-x86_64\n`);
  const laterVersion = spawnSync(later, ['--version'], { encoding: 'utf8' }).stdout.trim().split(' ')[1];
  writeFileSync(`${later}.version`, `${laterVersion}\n`);
  copyFileSync(bin('agent/perfwire-agent'), join(upd, 'bin', 'perfwire-agent'));
  const pairing = '00112233445566778899aabbccddeeff';
  // Updates are signed with the collector's key and checked with the same key on the device.
  const updKey = join(upd, 'update.key');
  writeFileSync(updKey, 'the fleet update key, 32 bytes..\n');
  const updColl = start(bin('collector/perfwire-collector'), ['--sessions-dir', join(upd, 'sessions'), '--http-port', '0', '--agent-port', '0',
    '--agent-bind', '127.0.0.1', '--agents-dir', join(upd, 'dist'), '--token', pairing, '--agent-update-key', updKey]);
  await until('the second collector', async () => updColl.log.match(/UI and API on http:\/\/[^/]+\//));
  const updAgents = updColl.log.match(/agents on [^:]+:(\d+)/)[1];
  // Its own browser context: the two collectors share a host, and so would their cookies.
  const updContext = await browser.newContext();
  const updPage = await updContext.newPage();
  updPage.on('pageerror', (e) => errors.push(e.message));
  await updPage.goto(updColl.log.match(/UI and API on (http:\S+\?token=\S+)/)[1]);
  // An agent given no key to check updates with: the later build is named, with why it cannot
  // be pushed, and no button.
  const keyless = start(join(upd, 'bin', 'perfwire-agent'), ['--server', `127.0.0.1:${updAgents}`, '--token', pairing]);
  const blockedNote = updPage.locator('#targets .update-blocked');
  await blockedNote.waitFor({ timeout: 20000 });
  const blockedText = await blockedNote.textContent();
  if (process.env.PERFWIRE_UI_SHOTS) await updPage.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'update-blocked.png') });
  check(/cannot update: .*--update-key/.test(blockedText) && await updPage.locator('#targets button[data-update-target]').count() === 0,
    `an agent without --update-key is shown why it cannot be updated ("${blockedText}")`);
  keyless.kill();
  await updPage.waitForFunction(() => !document.querySelector('#targets .update-blocked'), null, { timeout: 20000 });
  start(join(upd, 'bin', 'perfwire-agent'), ['--server', `127.0.0.1:${updAgents}`, '--token', pairing, '--update-key', updKey]);
  const offer = updPage.locator('#targets button[data-update-target]');
  await offer.waitFor({ timeout: 20000 });
  const offered = await offer.textContent();
  if (process.env.PERFWIRE_UI_SHOTS) await updPage.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'update-offered.png') });
  await offer.click();
  await updPage.waitForFunction(() => /agent updated from/.test(document.querySelector('#targets-result').textContent), null, { timeout: 30000 });
  const updatedRow = await updPage.waitForFunction((v) => [...document.querySelectorAll('#targets tbody tr')].find((tr) => tr.cells[2].textContent.includes(v) && !tr.querySelector('button')), laterVersion, { timeout: 30000 });
  if (process.env.PERFWIRE_UI_SHOTS) await updPage.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'update-done.png') });
  const agentCell = await updatedRow.evaluate((tr) => tr.cells[2].textContent);
  check(offered === `update to ${laterVersion}` && agentCell.includes(laterVersion),
    `"${offered}" updates the agent, which comes back as "${agentCell.trim()}" (${await updPage.locator('#targets-result').textContent()})`);
  await updContext.close();

  check(errors.length === 0, `no script errors (${errors.join('; ')})`);
} catch (e) {
  failedAt = Date.now();
  // The collector's side of its HTTP port, taken first: a listener's Recv-Q counts connections
  // not yet accepted, a connection's counts request bytes the collector has not read.
  const sockets = httpPort ? spawnSync('ss', ['-tanH', `( sport = :${httpPort} )`], { encoding: 'utf8' }).stdout?.trim() : '';
  const fds = (() => { try { return readdirSync(`/proc/${children[1].pid}/fd`).length; } catch { return '?'; } })();
  console.log(`FAIL while ${doing}: ${e.message.split('\n')[0]}`);
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
  for (const [r, t] of inflight) console.log(`  still pending after ${((now - t) / 1000).toFixed(1)} s: ${r.method()} ${r.url().replace(/token=[^&]*/, 'token=…')}${askDirectly && r.method() === 'GET' ? ` (asked directly: ${await askDirectly(r.url())})` : ''}`);
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
  failures++;
} finally {
  if (browser) await browser.close();
  if (failedAt && browser) for (const l of unfinishedRequests(netlog, failedAt)) console.log(`  network: ${l}`);
  for (const c of children.reverse()) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
}
console.log(failures ? `ui tests: ${failures} failed` : 'ui tests: all passed');
process.exit(failures ? 1 : 0);
