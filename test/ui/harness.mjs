// What the browser tests share (test/ui/ui_test.mjs, test/ui/tabs_test.mjs): the processes
// they start (all stopped at the end), bounded waits, checks that count failures, and the
// reading of Chromium's NetLog when a step fails.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

// Every process a test started, first to last: stopAll() ends them.
export const children = [];
let failed = 0;

// A process whose stderr is kept in `.log`.
export function start(cmd, args) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  child.log = '';
  child.stderr.on('data', (d) => { child.log += d; });
  // A program that cannot start fails the step that waits for it, and the servers already
  // started are still stopped (an unhandled 'error' would end the test and leave them).
  child.on('error', (e) => { child.log += `cannot start ${cmd}: ${e.message}
`; });
  children.push(child);
  return child;
}

// The first truthy answer of `fn`, asked every 200 ms for at most `ms`.
export async function until(what, fn, ms = 30000) {
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
export function tableShows(page, want, ms = 15000) {
  return page.waitForFunction((w) => {
    const shows = new URLSearchParams(document.querySelector('#functions').dataset.shows ?? '');
    if (!document.querySelector('#functions').dataset.shows) return false;
    return Object.entries(w).every(([k, v]) => (v === true ? shows.has(k) : shows.get(k) === v));
  }, want, { timeout: ms });
}

export const pct2 = (v) => Number(v).toFixed(2);

export function check(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failed++;
}
// Checks that failed so far, and one more for a step that threw.
export const failures = () => failed;
export const failStep = () => { failed++; };

// Ends every process started: SIGTERM, then SIGKILL for any still running half a second later.
export async function stopAll() {
  for (const c of [...children].reverse()) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}

// From Chromium's NetLog: each request the browser had begun and not ended when the test
// failed (at `at`, ms since the epoch), with the last things its network stack did for it,
// and any time a socket pool made a request wait.
export function unfinishedRequests(path, at) {
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
      out.push(`unfinished for ${((at - r.begun) / 1000).toFixed(1)} s: ${r.url.replace(/(token|code)=[^&]*/, '$1=…')} (last: ${r.steps.slice(-4).join(', ')})`);
  return out;
}
