// screen_latency: how soon what a program does shows on the screen of a user of the live view,
// with the real agents, the real perf, the real collector on loopback and the real UI in Debian's
// headless Chromium. bench/live_latency measures the same against the HTTP API; this one adds
// what the page adds: the live stream's notices, the page's once-a-second live render, its
// fetches and the function table's drawing.
//
//   first   a start (perf's capability probe done by an earlier start, on a process of its own,
//           so excluded): from the start command's answer until the page, opened on the
//           session's functions tab, shows a sample. "Shows a sample" means: the function table
//           holds a function's row (#functions tbody tr[data-function]), the first moment the tab
//           the user looks at has something to say. (The header's "N samples" comes in the same
//           render, a fetch earlier; it is recorded too, printed with PERFWIRE_BENCH_DEBUG=1.)
//           The page is open on the collector's landing page before the start and goes to
//           #session=ID&tab=functions as soon as the start's answer names the session, as the
//           UI's own "start again" does.
//   switch  perfwire-switcher spins in hot_00, hot_01, … for a fixed time each and prints each
//           switch's wall-clock instant; the figure is the time from a switch until the function
//           table first has a row for the new function. The table is sorted by self % (of the
//           whole session) and only its top rows are in the DOM (those in view and 10 more: 40 in
//           the 1280×720 window used here), so a new function shows once its self share, growing
//           from nothing, puts it among those top rows. (With this workload the table holds 15-50
//           functions, most of them callers with no self time, which sort below any function with
//           a sample: in practice a new function is in the top rows from the first render that has
//           it. The row may then still be below the part of the table in view, which is only a
//           few rows in this window: PERFWIRE_BENCH_DEBUG=1 prints, per switch, when it was in
//           view too, or '-' if it never was before the end.)
//           A MutationObserver on #functions tbody records Date.now() inside the page when each
//           name is first seen (the page and this script share the machine's clock); the paint
//           follows within a frame. Only switches after the first sample was shown count.
//
// Where the time goes: the agent's chunks (about every 1/3 s) and the collector, as
// live_latency measures them, then the page's live render, at most twice a second: a switch
// waits up to half a second more for the next one.
//
// Each agent flavour (the C++ agent, the Python agent) runs with its default settings
// (--duration 8, 99 Hz), with a collector of its own; p50/p95/max over the switches.
//
//   node bench/screen_latency.mjs [BUILD_DIR, default build] [switches per agent, default 20]
//                                 [ms per function, default 1500]
//
// Needs perf usable by this user (root, or a low perf_event_paranoid), /usr/bin/chromium,
// /usr/bin/python3, and `npm ci` in test/ui (scripts/setup.sh --test does it) for
// playwright-core. PERFWIRE_UI_DIR: serve the UI from that folder instead of the collector's
// embedded copy. Every step gives up after 60 s; the processes it started are ended and its
// temporary folder removed, also on failure.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(new URL('../test/ui/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const build = resolve(process.argv[2] || 'build');
const clamp = (x, lo, hi, dflt) => (Number.isFinite(x) ? Math.min(hi, Math.max(lo, Math.trunc(x))) : dflt);
const switchCount = clamp(Number(process.argv[3] || 20), 1, 30, 20);
const msPer = clamp(Number(process.argv[4] || 1500), 200, 10000, 1500);
const STEP = 60000; // ms any one step may take
const debug = !!process.env.PERFWIRE_BENCH_DEBUG;
const work = mkdtempSync(join(tmpdir(), 'perfwire-screen-latency-'));

const flavours = [
  { name: 'cpp', exe: join(build, 'src/agent/perfwire-agent'), args: [] },
  { name: 'python', exe: '/usr/bin/python3',
    args: [fileURLToPath(new URL('../src/agent/python/perfwire_agent.py', import.meta.url))] },
];

// Children, each the leader of a process group of its own (detached), so that what it starts
// (perf under an agent) is ended with it.
const children = [];
function start(cmd, args) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  p.log = ''; p.out = '';
  p.stdout.on('data', (d) => { p.log += d; p.out += d; });
  p.stderr.on('data', (d) => { p.log += d; });
  p.exited = new Promise((r) => p.once('exit', r));
  p.once('error', (e) => { p.log += `cannot start ${cmd}: ${e.message}\n`; });
  children.push(p);
  return p;
}
const running = (p) => p.pid && p.exitCode === null && p.signalCode === null;
const signal = (p, sig) => { try { process.kill(-p.pid, sig); } catch { /* gone already */ } };
// SIGTERM, then SIGKILL if it has not gone within 3 s.
async function stop(p) {
  if (!running(p)) return;
  signal(p, 'SIGTERM');
  const gone = await Promise.race([p.exited.then(() => true), sleep(3000).then(() => false)]);
  if (!gone) { signal(p, 'SIGKILL'); await Promise.race([p.exited, sleep(3000)]); }
}
// Interrupted or failing hard: no process or folder of this run outlives it.
function lastResort() {
  for (const p of children) if (running(p)) signal(p, 'SIGKILL');
  rmSync(work, { recursive: true, force: true });
}
process.once('exit', lastResort);
for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { lastResort(); process.exit(130); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, ms = STEP) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(50)) {
    const v = await fn();
    if (v) return v;
  }
  throw new Error(`timed out (${ms / 1000} s): ${what}`);
}
async function getJson(url) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(10000) });
    return r.ok ? await r.json() : null;
  } catch { return null; }
}
// A command relayed to the agent, as the UI sends it; its answer, or a throw with the reason.
async function command(http, target, body) {
  const r = await fetch(`${http}/api/targets/${encodeURIComponent(target)}/command`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(STEP),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`command ${JSON.stringify(body)}: ${r.status} ${text}`);
  return JSON.parse(text);
}

// The switches perfwire-switcher announced so far ("<k> <wall-clock ns>" lines): k → ms (to the µs:
// a double holds today's ns only to ~256 ns, so they are cut to µs as integers first).
function switches(text) {
  const out = new Map();
  for (const m of text.matchAll(/^(\d+) (\d+)$/gm)) out.set(Number(m[1]), Number(BigInt(m[2]) / 1000n) / 1000);
  return out;
}
// A line of the table: the agent, then the figures, right-aligned.
const line = (agent, ...figures) => [agent.padEnd(12), ...figures.map((x) => String(x).padStart(9))].join(' ');
const name = (k) => `hot_${String(k).padStart(2, '0')}`;
const at = (v, q) => (v.length ? [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(q * v.length))] : -1);

// Installed in the page: when each hot_NN first has a row in the function table, when the
// table first has any function's row, and when the header first counts a sample (Date.now()).
// For the debug output: when each hot_NN's row was first inside the table's visible box.
function observe() {
  const bench = { rows: {}, inView: {}, firstRow: 0, firstCount: 0 };
  window.bench = bench;
  const tbody = document.querySelector('#functions tbody'), info = document.querySelector('#session-info');
  const box = document.querySelector('#functions-scroll');
  const look = () => {
    const now = Date.now();
    for (const tr of tbody.querySelectorAll('tr[data-function]')) {
      if (!bench.firstRow) bench.firstRow = now;
      const name = tr.dataset.function;
      if (!/^hot_\d\d$/.test(name) || !tr.textContent.includes(name)) continue;
      if (!(name in bench.rows)) bench.rows[name] = now;
      if (!(name in bench.inView)) {
        const r = tr.getBoundingClientRect(), b = box.getBoundingClientRect();
        if (r.top >= b.top && r.bottom <= Math.min(b.bottom, innerHeight)) bench.inView[name] = now;
      }
    }
    if (!bench.firstCount && Number(info.textContent.match(/(\d+) samples/)?.[1] || 0) > 0) bench.firstCount = now;
  };
  const all = { childList: true, subtree: true, characterData: true, attributes: true };
  new MutationObserver(look).observe(tbody, all);
  new MutationObserver(look).observe(info, all);
}

async function run(browser, f) {
  const dir = join(work, f.name);
  const collector = start(join(build, 'src/collector/perfwire-collector'),
    ['--sessions-dir', join(dir, 'sessions'), '--agent-port', '0', '--agent-bind', '127.0.0.1',
      '--http-port', '0', '--http-bind', '127.0.0.1', '--http-auth', 'none',
      ...(process.env.PERFWIRE_UI_DIR ? ['--ui-dir', process.env.PERFWIRE_UI_DIR] : [])]);
  const agentPort = await until('the collector\'s agent port',
    () => collector.log.match(/agents on 127\.0\.0\.1:(\d+)/)?.[1], 10000);
  const http = await until('the collector\'s HTTP address',
    () => collector.log.match(/UI and API on (http:\/\/127\.0\.0\.1:\d+)\//)?.[1], 10000);
  const agent = start(f.exe, [...f.args, '--server', `127.0.0.1:${agentPort}`]);
  const target = await until(`${f.name}: an idle target`, async () => {
    const t = (await getJson(`${http}/api/targets`))?.[0];
    return t?.state === 'idle' && t.id;
  });

  // The probe, once, on a switcher of its own that stays in hot_00: a slow probe (the Python
  // agent's takes up to ~10 s) leaves all of the measured switcher's functions to the run.
  const probed = start(join(build, 'bench/perfwire-switcher'), [String(2 * STEP), '1']);
  await command(http, target, { cmd: 'start', args: { pid: probed.pid } });
  await command(http, target, { cmd: 'stop' });
  await stop(probed);
  await sleep(500);

  // Enough functions for the first-sample run and the switches.
  const switcher = start(join(build, 'bench/perfwire-switcher'),
    [String(msPer), String(Math.min(40, switchCount + 8))]);
  await until('the switcher\'s first switch', () => switches(switcher.out).size > 0, 10000);
  const startCmd = { cmd: 'start', args: { pid: switcher.pid } };

  // The page, on the collector's landing page, live; then the start, and the session opened.
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  try {
    await page.goto(http + '/', { timeout: STEP });
    await page.waitForFunction(() => document.querySelector('#conn')?.textContent === 'live', null,
      { timeout: STEP });
    await page.evaluate(observe);

    const answer = await command(http, target, startCmd);
    const tStart = Date.now();
    const session = answer.session_id || await until(`${f.name}: the session's id`, async () =>
      (await getJson(`${http}/api/targets`))?.find((t) => t.id === target)?.session_id);
    await page.evaluate((h) => { location.hash = h; }, `session=${encodeURIComponent(session)}&tab=functions`);
    const tHash = Date.now();
    const shown = await until(`${f.name}: a sample on screen`,
      () => page.evaluate(() => window.bench.firstRow && window.bench));
    const first = shown.firstRow - tStart;

    // Switches from the first sample on screen, each to a function the session has not had.
    const give = Date.now() + (switchCount + 3) * msPer + STEP;
    let due = [], seen = {};
    for (;;) {
      seen = (await page.evaluate(() => window.bench)).rows;
      due = [...switches(switcher.out)].filter(([, t]) => t > shown.firstRow).slice(0, switchCount);
      const done = due.filter(([k]) => seen[name(k)]);
      if (due.length === switchCount && done.length === switchCount) break;
      if (!running(switcher) && due.length < switchCount)
        throw new Error(`${f.name}: the switcher ended after ${due.length} switches past the first sample`);
      if (Date.now() > give) {
        const missing = due.filter(([k]) => !seen[name(k)]).map(([k]) => name(k));
        throw new Error(`${f.name}: ${due.length} switches, functions never in the table: ${missing.join(' ') || '-'}`);
      }
      await sleep(100);
    }
    const lag = due.map(([k, t]) => Math.round(seen[name(k)] - t));
    await command(http, target, { cmd: 'stop' }).catch(() => {});
    if (errors.length) throw new Error(`${f.name}: script errors in the page: ${errors.join('; ')}`);
    console.log(line(f.name, first, at(lag, 0.5), at(lag, 0.95), Math.max(...lag)));
    if (debug) {
      const b = await page.evaluate(() => window.bench);
      const end = await page.evaluate(() => {
        const box = document.querySelector('#functions-scroll').getBoundingClientRect();
        const rows = [...document.querySelectorAll('#functions tbody tr[data-function]')];
        const inView = rows.filter((tr) => {
          const r = tr.getBoundingClientRect();
          return r.top >= box.top && r.bottom <= Math.min(box.bottom, innerHeight);
        });
        const count = document.querySelector('#functions-count').textContent;
        return `${count}, ${rows.length} rows in the DOM, ${inView.length} in view`;
      });
      console.log(`  hash set ${tHash - tStart} ms after the answer; ` +
        `header counted a sample at ${shown.firstCount - tStart} ms`);
      console.log(`  at the end: ${end}`);
      console.log(`  per switch, row in the DOM / row in view: ${due.map(([k, t], i) =>
        `${name(k)} ${lag[i]}/${b.inView[name(k)] ? Math.round(b.inView[name(k)] - t) : '-'}`).join(', ')}`);
    }
  } finally {
    await page.close().catch(() => {});
    for (const p of [switcher, agent, collector]) await stop(p);
  }
}

let browser;
try {
  console.log(`sample-to-screen latency, ms (${switchCount} switches, ${msPer} ms apart): first = start's answer → ` +
    'first function row in the page\'s table; p50/p95/max = switch → new function\'s row in the table');
  console.log(line('agent', 'first', 'p50', 'p95', 'max'));
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    timeout: STEP,
  });
  for (const f of flavours) await run(browser, f);
} catch (e) {
  console.log('FAIL: ' + e.message.split('\n')[0]);
  for (const p of children) if (p.log) console.error(`--- ${p.spawnargs.join(' ')}\n${p.log.slice(-3000)}`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  for (const p of children) await stop(p);
  rmSync(work, { recursive: true, force: true });
}
