// UI responsiveness on a large profile: a collector with an imported session of ≥ 50 k
// functions and ≥ 100 k flame-graph nodes, driven in Debian's headless Chromium.
//
//   node bench/ui_scale.mjs [BUILD_DIR, default build] [functions, default 50000]
//
// Prints, for each interaction, the time from the user's action to the next painted frame
// (fetches included where the UI makes one), the longest main-thread task seen during it, and
// the API requests it made with their response bytes.
// Needs `npm ci` in test/ui (scripts/setup.sh --test does it) for playwright-core.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const require = createRequire(new URL('../test/ui/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const build = process.argv[2] || 'build';
const nfunc = Number(process.argv[3] || 50000);
const work = mkdtempSync(join(tmpdir(), 'perfwire-ui-scale-'));

// A capture whose flame graph has ~3 nodes per function: main → group → caller → function →
// one of two leaves. Every function is a leaf of some stack, so the function table holds all of them.
function capture() {
  const lines = [];
  const groups = 50, callers = 1000;
  for (let i = 0; i < 2 * nfunc; ++i) {
    const f = i % nfunc, leaf = Math.floor(i / nfunc) % 2;
    const t = (1000 + i * 0.0001).toFixed(6);
    lines.push(`synth 100/${100 + (i % 8)} ${t}: 1000000 cpu-clock:`,
      `\t  ${(0x10000 + leaf * 16).toString(16)} leaf_${leaf}+0x4 (/usr/lib/libsynth.so)`,
      `\t  ${(0x20000 + f * 16).toString(16)} ns::worker<int>::function_${f}(int)+0x8 (/usr/lib/libsynth.so)`,
      `\t  ${(0x30000 + (i % callers) * 16).toString(16)} caller_${i % callers}+0xc (/usr/bin/synth)`,
      `\t  ${(0x40000 + (i % groups) * 16).toString(16)} group_${i % groups}+0x10 (/usr/bin/synth)`,
      '\t  50000 main+0x14 (/usr/bin/synth)', '');
  }
  return lines.join('\n') + '\n';
}

const children = [];
function start(cmd, args) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  p.log = '';
  p.stdout.on('data', (d) => { p.log += d; });
  p.stderr.on('data', (d) => { p.log += d; });
  children.push(p);
  return p;
}
async function until(fn, ms = 60000) {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    const v = await fn();
    if (v) return v;
  }
  throw new Error('timed out');
}

let browser;
try {
  const file = join(work, 'synth.txt');
  writeFileSync(file, capture());
  const collector = start(join(build, 'src/collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1', '--import', file, '--http-auth', 'none']);
  const http = await until(() => collector.log.match(/UI and API on (http:\/\/[^/]+)\//)?.[1]);
  const session = (await (await fetch(http + '/api/sessions')).json())[0].id;

  // The API alone: answer time and size of the two big views.
  const api = {};
  for (const view of ['functions', 'flamegraph']) {
    const t0 = performance.now();
    const body = await (await fetch(`${http}/api/sessions/${session}/${view}`)).text();
    api[view] = { ms: performance.now() - t0, bytes: body.length, json: JSON.parse(body) };
  }
  let nodes = 0;
  const count = (n) => { ++nodes; for (const c of n.children || []) count(c); };
  count(api.flamegraph.json.root);
  console.log(`profile: ${api.functions.json.functions.length} functions, ${nodes} flame-graph nodes, ${2 * nfunc} samples`);
  for (const v of ['functions', 'flamegraph'])
    console.log(`api ${v.padEnd(12)} ${api[v].ms.toFixed(0).padStart(6)} ms  ${(api[v].bytes / 1048576).toFixed(1)} MiB`);

  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // What each interaction fetched from the API: requests and response bytes.
  const fetched = { requests: 0, bytes: 0 };
  page.on('requestfinished', async (r) => {
    if (!r.url().includes('/api/') || r.url().includes('/api/stream')) return;
    fetched.requests += 1;
    fetched.bytes += (await r.sizes().catch(() => ({ responseBodySize: 0 }))).responseBodySize;
  });
  await page.goto(http + '/');
  await page.evaluate(() => {
    window.longest = 0;
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.longest = Math.max(window.longest, e.duration); })
      .observe({ type: 'longtask' });
  });

  // One interaction: run `act` in the page, wait until `done` holds, then for the next frame.
  const results = [];
  async function measure(name, act, done) {
    await page.evaluate(() => { window.longest = 0; });
    fetched.requests = 0; fetched.bytes = 0;
    const t0 = Date.now();
    await page.evaluate(act);
    await page.waitForFunction(done, null, { timeout: 60000, polling: 'raf' });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r))));
    const ms = Date.now() - t0;
    await new Promise((r) => setTimeout(r, 100)); // let the long-task observer report
    const longest = await page.evaluate(() => window.longest);
    results.push({ name, ms, longest });
    console.log(`${name.padEnd(44)} ${String(ms).padStart(6)} ms   longest task ${longest.toFixed(0).padStart(5)} ms` +
      `   ${String(fetched.requests).padStart(2)} requests ${(fetched.bytes / 1048576).toFixed(2).padStart(6)} MiB`);
  }

  await measure('open the session (functions tab)', `location.hash = 'session=${session}&tab=functions'`,
    () => document.querySelectorAll('#functions tbody tr[data-function]').length > 20);
  await measure('sort by total %', () => document.querySelector('#functions th[data-sort="total_pct"]').click(),
    () => document.querySelector('#functions tbody tr td:nth-child(2)')?.textContent !== '');
  await measure('filter functions by regex', () => {
    const f = document.querySelector('#filter'); f.value = 'function_4999\\d'; f.dispatchEvent(new Event('input'));
  }, () => document.querySelectorAll('#functions tbody tr[data-function]').length === 10);
  await measure('clear the filter', () => {
    const f = document.querySelector('#filter'); f.value = ''; f.dispatchEvent(new Event('input'));
  }, () => document.querySelectorAll('#functions tbody tr[data-function]').length > 20);
  await measure('scroll to the end of the table', () => {
    const b = document.querySelector('#functions-scroll'); b.scrollTop = b.scrollHeight;
  }, () => document.querySelector('#functions-scroll').scrollTop > 0 && !document.querySelector('#functions tbody tr.spacer:last-child'));
  await measure('flame graph tab (fetch + draw)', () => document.querySelector('#tabs button[data-tab="flamegraph"]').click(),
    () => document.querySelectorAll('#crumbs span').length > 0 && !document.querySelector('#tab-flamegraph').hidden);
  await measure('hover a frame', () => {
    const c = document.querySelector('#flame'), r = c.getBoundingClientRect();
    c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + r.width / 2, clientY: r.top + 40, bubbles: true }));
  }, () => document.querySelector('#flame-tip').textContent.length > 0);
  await measure('search the flame graph by regex', () => {
    const f = document.querySelector('#filter'); f.value = 'group_1\\d'; f.dispatchEvent(new Event('input'));
  }, () => true);
  await measure('zoom into a frame', () => {
    const c = document.querySelector('#flame'), r = c.getBoundingClientRect();
    c.dispatchEvent(new MouseEvent('click', { clientX: r.left + r.width / 2, clientY: r.top + 30, bubbles: true }));
  }, () => location.hash.includes('zoom='));
  await measure('back to all (breadcrumb)', () => document.querySelector('#crumbs span[data-depth="0"]').click(),
    () => !location.hash.includes('zoom='));
  if (errors.length) throw new Error('script errors: ' + errors.join('; '));
  const worst = Math.max(...results.map((r) => r.ms));
  console.log(`slowest interaction: ${worst} ms`);
} catch (e) {
  console.log('FAIL: ' + e.message.split('\n')[0]);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const c of children) c.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}
