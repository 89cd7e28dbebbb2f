// UI responsiveness on a large profile: a collector with an imported session of ≥ 50 k
// functions and ≥ 100 k flame-graph nodes, driven in Debian's headless Chromium.
//
//   node bench/ui_scale.mjs [BUILD_DIR, default build] [functions, default 50000]
//
// Prints, for each interaction, the time from the user's action to the next painted frame
// (fetches included where the UI makes one), the longest main-thread task seen during it, and
// the API requests it made with their response bytes. Then the same profile made live (an
// agent's connection sends it, then a small chunk a second): per live update of each tab,
// the requests, the bytes fetched and the page's main-thread time.
// Needs `npm ci` in test/ui (scripts/setup.sh --test does it) for playwright-core.
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
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
function capture(from = 0, to = 2 * nfunc) {
  const lines = [];
  const groups = 50, callers = 1000;
  for (let i = from; i < to; ++i) {
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
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1', '--import', file, '--http-auth', 'none',
      ...(process.env.PERFWIRE_UI_DIR ? ['--ui-dir', process.env.PERFWIRE_UI_DIR] : [])]);
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
    console.log(`${name.padEnd(50)} ${String(ms).padStart(6)} ms   longest task ${longest.toFixed(0).padStart(5)} ms` +
      `   ${String(fetched.requests).padStart(2)} requests ${(fetched.bytes / 1048576).toFixed(2).padStart(6)} MiB`);
  }

  await measure('open the session (functions tab)', `location.hash = 'session=${session}&tab=functions'`,
    () => document.querySelectorAll('#functions tbody tr[data-function]').length > 20);
  await measure('sort by total %', () => document.querySelector('#functions th[data-sort="total_pct"]').click(),
    () => document.querySelector('#functions tbody tr td:nth-child(2)')?.textContent !== '');
  await measure('filter functions by name (the collector matches)', () => {
    const f = document.querySelector('#filter'); f.value = 'function_4999'; f.dispatchEvent(new Event('input'));
  }, () => document.querySelectorAll('#functions tbody tr[data-function]').length === 11);
  await measure('filter functions by regex (the page matches)', () => {
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
  await measure('call tree tab (fetch + draw)', () => document.querySelector('#tabs button[data-tab="calltree"]').click(),
    () => /^top-down/.test(document.querySelector('#tab-calltree').dataset.shows || ''));
  await measure('open a call tree row', () => {
    const closed = [...document.querySelectorAll('#calltree tr[data-path]')].find((tr) => !tr.classList.contains('open'));
    window.opened = document.querySelectorAll('#calltree tr.open').length;
    closed.click();
  }, () => document.querySelectorAll('#calltree tr.open').length > window.opened);
  await measure('callers and callees of leaf_0 (two flame graphs)', `location.hash = location.hash.replace(/tab=[^&]*/, 'tab=sandwich') + '&fn=leaf_0'`,
    () => document.querySelector('#tab-sandwich').dataset.shows === 'leaf_0' && Number(document.querySelector('#callers-flame').dataset.boxes) >= 1);
  const worst = Math.max(...results.map((r) => r.ms));
  console.log(`slowest interaction: ${worst} ms`);

  // Live: the same profile streamed by an agent's connection (text frames, as the protocol
  // allows), then 1000 more samples a second; each tab measured over ten updates.
  const agentPort = Number(collector.log.match(/agents on 127\.0\.0\.1:(\d+)/)?.[1]);
  const link = connect(agentPort, '127.0.0.1');
  await new Promise((r, j) => { link.once('connect', r); link.once('error', j); });
  const frame = (flag, text) => {
    const body = Buffer.from(text), head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 0); head[4] = flag;
    return new Promise((r) => link.write(Buffer.concat([head, body]), r));
  };
  await frame(3, JSON.stringify({ type: 'hello', version: 1, agent: 'perfwire', agent_version: '0.1.0', hostname: 'live-synth', pid: 100 }));
  const step = 20000;
  for (let i = 0; i < 2 * nfunc; i += step) await frame(0, capture(i, Math.min(2 * nfunc, i + step)));
  const liveId = await until(async () => (await (await fetch(http + '/api/sessions')).json()).find((x) => x.live)?.id);
  await until(async () => (await (await fetch(`${http}/api/sessions/${liveId}`)).json()).samples >= 2 * nfunc);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const metrics = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  await page.evaluate(() => { const f = document.querySelector('#filter'); f.value = ''; f.dispatchEvent(new Event('input')); });
  let sent = 2 * nfunc;
  const tabs = [['functions', () => document.querySelectorAll('#functions tbody tr[data-function]').length > 20],
    ['flamegraph', () => Number(document.querySelector('#flame')?.dataset.boxes || 0) > 100]];
  for (const [tab, ready, idle] of [...tabs, [tabs[0][0], tabs[0][1], true]]) {
    await page.evaluate((h) => { location.hash = h; }, `session=${liveId}&tab=${tab}`);
    await page.waitForFunction(ready, null, { timeout: 60000 });
    await new Promise((r) => setTimeout(r, 1500)); // the opening's own requests done
    fetched.requests = 0; fetched.bytes = 0;
    const profiling = process.env.PERFWIRE_BENCH_PROFILE && !idle;
    if (profiling) { await cdp.send('Profiler.enable'); await cdp.send('Profiler.start'); }
    const m0 = await metrics();
    const updates = 10;
    for (let u = 0; u < updates; ++u) {
      if (!idle) await frame(0, capture(sent, sent + 1000));
      sent += idle ? 0 : 1000;
      await new Promise((r) => setTimeout(r, 1000));
    }
    await new Promise((r) => setTimeout(r, 1500)); // the last update's render
    const m1 = await metrics();
    const per = (k) => (1000 * (m1[k] - m0[k]) / updates).toFixed(1);
    if (profiling) {
      // PERFWIRE_BENCH_PROFILE=1: where the page's time went, by function (self time).
      const { profile } = await cdp.send('Profiler.stop');
      const self = new Map(), dt = new Map();
      profile.samples.forEach((id, i) => dt.set(id, (dt.get(id) || 0) + (profile.timeDeltas[i] || 0)));
      for (const n of profile.nodes) {
        const k = `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').pop()}:${n.callFrame.lineNumber + 1}`;
        self.set(k, (self.get(k) || 0) + (dt.get(n.id) || 0));
      }
      for (const [k, us] of [...self].filter(([k]) => !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, 12))
        console.log(`    ${(us / 1000 / updates).toFixed(2).padStart(7)} ms  ${k}`);
    }
    console.log(`live ${(idle ? 'no update' : tab).padEnd(11)} per ${idle ? 'second' : 'update'}: ${(fetched.requests / updates).toFixed(1)} requests, ` +
      `${(fetched.bytes / updates / 1048576).toFixed(3)} MiB, main thread ${per('TaskDuration')} ms ` +
      `(script ${per('ScriptDuration')}, style ${per('RecalcStyleDuration')}, layout ${per('LayoutDuration')})`);
  }
  link.destroy();
  if (errors.length) throw new Error('script errors: ' + errors.join('; '));
} catch (e) {
  console.log('FAIL: ' + e.message.split('\n')[0]);
  if (process.env.PERFWIRE_BENCH_DEBUG) console.log(children.map((c) => c.log.slice(-3000)).join('\n'));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  for (const c of children) c.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}
