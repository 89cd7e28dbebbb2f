// Browser test of the Fleet view: a throwaway ClickHouse, a collector writing to it that
// profiles two agents continuously (nobody presses start), and the view in headless Chromium.
// The numbers it shows are checked against an oracle: the collector's own sessions of each
// device (samples, and a function's inclusive samples summed over their function tables).
//
//   node test/ui/fleet_test.mjs BUILD_DIR [SCREENSHOT_DIR]
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { check, failStep, failures, start, stopAll, until } from './harness.mjs';

const build = resolve(process.argv[2] || 'build');
const shots = process.argv[3] ? resolve(process.argv[3]) : null;
const work = mkdtempSync(join(tmpdir(), 'perfwire-fleet-'));

// The TCP port process `pid` listens on (ClickHouse is given port 0 and says nothing).
function listeningPort(pid) {
  const inodes = new Set();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    const link = (() => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return ''; } })();
    const m = link.match(/^socket:\[(\d+)\]$/);
    if (m) inodes.add(m[1]);
  }
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[3] === '0A' && inodes.has(f[9])) return parseInt(f[1].split(':')[1], 16);
  }
  return null;
}

function startClickHouse() {
  const d = join(work, 'clickhouse');
  mkdirSync(d);
  writeFileSync(join(d, 'config.xml'), `<?xml version="1.0"?><yandex><logger><level>warning</level><log>${d}/server.log</log>`
    + `<errorlog>${d}/error.log</errorlog><console>0</console></logger><http_port>0</http_port><listen_host>127.0.0.1</listen_host>`
    + `<path>${d}/data/</path><tmp_path>${d}/tmp/</tmp_path><user_files_path>${d}/files/</user_files_path>`
    + `<users_config>${d}/users.xml</users_config><default_profile>default</default_profile>`
    + '<default_database>default</default_database><mark_cache_size>5368709</mark_cache_size></yandex>\n');
  writeFileSync(join(d, 'users.xml'), '<?xml version="1.0"?><yandex><profiles><default/></profiles><users><default><password></password>'
    + '<networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users><quotas><default/></quotas></yandex>\n');
  return start('clickhouse-server', [`--config-file=${d}/config.xml`]);
}

let browser;
try {
  const clickhouse = startClickHouse();
  const chPort = await until('ClickHouse listening', async () => listeningPort(clickhouse.pid));
  await until('ClickHouse answering', async () => (await fetch(`http://127.0.0.1:${chPort}/?query=SELECT%201`)).ok);
  start(join(build, 'src/demo/perfwire-demo'), ['120']); // the load the agents profile
  const collector = start(join(build, 'src/collector/perfwire-collector'),
    ['--sessions-dir', join(work, 'sessions'), '--http-port', '0', '--agent-port', '0', '--agent-bind', '127.0.0.1',
      '--clickhouse', `http://127.0.0.1:${chPort}`, '--continuous', '49', '--continuous-session', '4']);
  const signIn = await until('the collector', async () => collector.log.match(/UI and API on (http:\S+\?code=\S+)/)?.[1]);
  const http = new URL(signIn).origin;
  const headers = { Authorization: `Bearer ${readFileSync(join(work, 'sessions', '.http-token'), 'utf8').trim()}` };
  const get = async (path) => { const r = await fetch(`${http}${path}`, { headers }); if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`); return r.json(); };
  const agentPort = collector.log.match(/agents on [^:]+:(\d+)/)[1];
  const agents = ['board-a', 'board-b'].map((name) => start(join(build, 'src/agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--name', name]));
  // Profiled without anyone pressing start, in sessions of 4 seconds: a few of each.
  await until('two sessions of each device', async () => {
    const list = await get('/api/sessions');
    return ['board-a', 'board-b'].every((d) => list.filter((s) => s.hostname === d && s.continuous).length >= 2);
  }, 60000);
  for (const a of agents) a.kill('SIGTERM');
  // Everything the sessions hold is in ClickHouse: the oracle stands still from here.
  const sessions = await until('every session ended and written', async () => {
    const list = await get('/api/sessions');
    const status = await get('/api/status');
    const held = list.reduce((n, s) => n + s.samples, 0);
    return !list.some((s) => s.live) && status.fleet.written_samples === held && list;
  }, 60000);
  const oracle = {};
  for (const s of sessions) {
    const o = (oracle[s.hostname] ??= { samples: 0, fn: 0 });
    o.samples += s.samples;
    const table = await get(`/api/sessions/${s.id}/functions?weight=samples&limit=1000000`);
    o.fn += table.functions.filter((f) => f.name === '(anonymous namespace)::matrix_multiply').reduce((n, f) => n + f.total, 0);
  }

  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(signIn);
  await page.waitForFunction(() => !document.querySelector('#fleet-link').hidden, null, { timeout: 15000 });
  await page.click('#fleet-link');
  const rows = async () => page.$$eval('#fleet-devices tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent.trim())));
  await page.waitForFunction(() => document.querySelectorAll('#fleet-devices tbody tr').length === 2 && Number(document.querySelector('#fleet-flame').dataset.boxes) > 0, null, { timeout: 15000 });
  const num = (text) => Number(String(text).replace(/[^\d]/g, ''));
  const shown = Object.fromEntries((await rows()).map((r) => [r[0], num(r[1])]));
  check(shown['board-a'] === oracle['board-a'].samples && shown['board-b'] === oracle['board-b'].samples,
    `each device's samples as its sessions hold them (shown ${JSON.stringify(shown)}, sessions ${JSON.stringify(oracle)})`);
  const top = await page.$$eval('#fleet-functions tbody tr', (trs) => trs.length);
  check(top > 5, `the functions table lists the fleet's functions (${top} rows)`);
  if (shots) await page.screenshot({ path: join(shots, 'fleet.png') });

  // A function chosen: each device's samples through it, as the sessions' tables count them.
  await page.click('#fleet-functions tr[data-fn="(anonymous namespace)::matrix_multiply"]');
  await page.waitForFunction(() => /matrix_multiply/.test(document.querySelector('#fleet-fn-head').textContent) &&
    document.querySelector('#fleet-devices tbody tr td:nth-child(4)').textContent.trim() !== '', null, { timeout: 15000 });
  const through = Object.fromEntries((await rows()).map((r) => [r[0], num(r[3].split('(')[0])]));
  check(through['board-a'] === oracle['board-a'].fn && through['board-b'] === oracle['board-b'].fn,
    `each device's samples through matrix_multiply as the sessions count them (shown ${JSON.stringify(through)})`);
  check(new URLSearchParams(new URL(page.url()).hash.slice(1)).get('fn') === '(anonymous namespace)::matrix_multiply', 'the function is in the URL');

  // One device, compared with the period before (nothing then: every frame grew).
  await page.click('#fleet-devices input[data-device="board-b"]');
  await page.waitForFunction(() => /1 of 2 devices/.test(document.querySelector('#fleet-shown').textContent), null, { timeout: 15000 });
  await page.selectOption('#fleet-compare', 'before');
  await page.waitForFunction(() => /points/.test(document.querySelector('#fleet-delta-head').textContent) && /grew/.test(document.querySelector('#fleet-flame-legend').textContent), null, { timeout: 15000 });
  const samplesText = await page.textContent('#fleet-samples');
  check(num(samplesText.split(' samples')[0]) === oracle['board-b'].fn, `the flame graph of one device through one function holds its samples (${samplesText})`);
  if (shots) await page.screenshot({ path: join(shots, 'fleet-compare.png') });

  // A reload shows the same choice.
  await page.reload();
  await page.waitForFunction(() => /1 of 2 devices/.test(document.querySelector('#fleet-shown')?.textContent ?? '') && document.querySelector('#fleet-compare').value === 'before', null, { timeout: 15000 });
  check(true, 'a reload keeps devices, function and comparison');
  // ClickHouse gone: the view says so, the collector keeps serving.
  clickhouse.kill('SIGKILL');
  await page.selectOption('#fleet-compare', '');
  await page.waitForFunction(() => !document.querySelector('#view-error').hidden && /ClickHouse/.test(document.querySelector('#view-error').textContent), null, { timeout: 40000 });
  check(true, `a ClickHouse that is gone is said (${(await page.textContent('#view-error')).slice(0, 120)})`);
  check(errors.length === 0, `no script errors (${errors.join('; ')})`);
} catch (e) {
  console.log(`FAIL ${e.message.split('\n')[0]}`);
  failStep();
} finally {
  if (browser) await browser.close().catch(() => {});
  await stopAll();
  rmSync(work, { recursive: true, force: true });
}
console.log(failures() ? `fleet test: ${failures()} failed` : 'fleet test: all passed');
process.exit(failures() ? 1 : 0);
