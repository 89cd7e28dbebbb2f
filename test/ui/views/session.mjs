// Browser test of the UI, session: A session's header: the health checks, the agent's controls (pause, resume, stop, start again, restart with dwarf), the thread choice, errors of a session that does not exist or a collector out of reach.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, start, tableShows, until } from '../harness.mjs';

export async function healthChecks(t) {
  const { again } = t;
  // The profile's health: every check with its value; a failing one carries its fix.
  t.doing = "the profile-health panel";
  await again.waitForFunction(() => document.querySelector('#quality').dataset.shows && document.querySelectorAll('#quality-checks li').length >= 4, null, { timeout: 15000 });
  const health = await again.evaluate(() => [...document.querySelectorAll('#quality-checks li')].map((li) => ({
    id: li.dataset.check, status: li.className.replace('q-', ''), text: li.textContent.replace(/\s+/g, ' ').trim() })));
  const stacks = health.find((c) => c.id === 'truncated');
  check(health.find((c) => c.id === 'samples')?.text.includes('samples') && stacks &&
    (stacks.status === 'ok' || /--call-graph dwarf/.test(stacks.text)),
    `the profile-health panel answers each check (${health.map((c) => `${c.id} ${c.status}`).join(', ')})`);
  Object.assign(t, { health, stacks });
}

export async function controls(t) {
  const { session, again, wz } = t;
  // The session view of a live agent: controls, event selector, device health.
  t.doing = "the live session's controls";
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
}

export async function threadsLate(t) {
  const { http, fetch, session, again } = t;
  // Back to the live session, its threads held back a while: the thread choice must not offer
  // the stripped recording's threads meanwhile (a thread id that session never had). The page
  // may know this session's threads already (its store keeps a recent answer): those it may
  // offer, and nothing else.
  t.doing = "switching sessions with the thread list late";
  let askedThreads, releaseThreads;
  const threadsAsked = new Promise((r) => { askedThreads = r; });
  const threadsHeld = new Promise((r) => { releaseThreads = r; });
  const ownThreads = (url) => url.pathname === `/api/sessions/${session}/threads`;
  await again.route(ownThreads, async (route) => { askedThreads(); await threadsHeld; await route.continue().catch(() => {}); });
  await again.goto(`${http}/#session=${session}&tab=source`);
  const answered = again.waitForFunction((sid) => document.querySelector('#thread').dataset.session === sid, session, { timeout: 15000 });
  await Promise.race([threadsAsked, answered]);
  const offeredMeanwhile = await again.evaluate(() => [...document.querySelector('#thread').options].map((o) => [o.value, o.text]));
  releaseThreads();
  await again.unroute(ownThreads);
  const own = new Set((await (await fetch(`${http}/api/sessions/${session}/threads`)).json()).map((x) => String(x.tid)));
  check(offeredMeanwhile[0]?.[0] === '' && offeredMeanwhile.slice(1).every(([tid]) => own.has(tid)),
    `while a session's threads are fetched, no other session's are offered (${offeredMeanwhile.map(([, text]) => text).join(', ')})`);
  await again.locator('#source tbody tr').first().waitFor({ timeout: 15000 });
}

export async function threadFilter(t) {
  const { demo, http, session, again } = t;
  // The svg export on its own: clicking a frame zooms into it, "Reset zoom" goes back.
  // The thread filter: choosing a thread narrows the table; "all threads" clears it.
  t.doing = "filtering by thread";
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
}

export async function unknownSession(t) {
  const { http, session, again, health } = t;
  // A session id that does not exist: its error where the session would be, nothing of the
  // previous session left on screen; a valid session afterwards clears the error.
  t.doing = "an unknown session";
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
  const title = await again.locator('#session-title').textContent();
  check(/^perfwire-demo \(\d+\) on /.test(title) && title.endsWith(session), `a valid session afterwards clears the error, and is named by its process (${title})`);
}

export async function outOfReach(t) {
  const { collector, session, again } = t;
  // The collector out of reach: a tab click still switches the tab, and says why it is empty.
  t.doing = "the collector out of reach";
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
}

export async function frozenCollector(t) {
  const { collector, again } = t;
  // A collector stopped with its sockets open (SIGSTOP: as one hung) sends nothing, not even
  // its keep-alive: the page marks what it shows stale, and is live again once it answers.
  t.doing = 'a collector that stopped answering';
  await again.waitForFunction(() => document.querySelector('#conn').textContent === 'live', null, { timeout: 20000 });
  const stoppedAt = Date.now();
  collector.kill('SIGSTOP');
  try {
    await again.waitForFunction(() => /reconnecting/.test(document.querySelector('#conn').textContent) && document.body.dataset.offline === '1', null, { timeout: 45000 });
  } finally {
    collector.kill('SIGCONT');
  }
  const staleAfter = (Date.now() - stoppedAt) / 1000;
  await again.waitForFunction(() => document.querySelector('#conn').textContent === 'live' && !document.body.dataset.offline, null, { timeout: 30000 });
  check(staleAfter < 40, `a collector that stops answering is marked out of reach after ${staleAfter.toFixed(1)} s of silence, and live again once it answers`);
}

export async function stopAndStartAgain(t) {
  const { session, again, after } = t;
  // Stop ends the run: the session is no longer live, and "start again" opens the next one.
  t.doing = "stopping and starting again";
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
  Object.assign(t, { next });
}

export async function restartWithDwarf(t) {
  const { demo, http, session, again, stacks, row, cpu, next } = t;
  // Stacks cut short (the demo's libstdc++ has no frame pointers): one click records the same
  // process again with DWARF unwinding, and far more of the new run's stacks reach their start.
  t.doing = "restarting with dwarf";
  await again.waitForFunction(() => /call graphs: fp/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 });
  const restart = again.locator('#quality-action:not([hidden]) button[data-restart-callgraph="dwarf"]');
  await restart.waitFor({ state: 'attached', timeout: 30000 });
  // As a user opens the panel: the summary under the title, then the health checks in it.
  if (!await again.locator('#summary').evaluate((d) => d.open)) await again.locator('#summary > summary').click();
  if (!await again.locator('#quality').evaluate((d) => d.open)) await again.locator('#quality > summary').click();
  // Every stack cut short: inside the program, and only below it (the runtime's frames).
  const cutShare = () => again.evaluate(() => {
    const m = document.querySelector('#quality-checks [data-check="truncated"]')?.textContent.match(/([\d.]+) % of the weight(?:; ([\d.]+) % stop only below)?/);
    return document.querySelector('#quality').dataset.shows === new URLSearchParams(location.hash.slice(1)).get('session') && m ? Number(m[1]) + Number(m[2] || 0) : null;
  });
  const cutBefore = await cutShare();
  await restart.click();
  await again.waitForFunction((old) => new URLSearchParams(location.hash.slice(1)).get('session') !== old, next, { timeout: 30000 });
  await again.waitForFunction(() => /call graphs: dwarf/.test(document.querySelector('#session-info').textContent), null, { timeout: 20000 });
  // The share falls as the new run's samples arrive: the state the restart produces.
  await again.waitForFunction((b) => {
    const m = document.querySelector('#quality-checks [data-check="truncated"]')?.textContent.match(/([\d.]+) % of the weight(?:; ([\d.]+) % stop only below)?/);
    return document.querySelector('#quality').dataset.shows === new URLSearchParams(location.hash.slice(1)).get('session') && m && Number(m[1]) + Number(m[2] || 0) < b / 2;
  }, cutBefore, { timeout: 60000 });
  const cutAfter = await cutShare();
  check(cutBefore >= 10 && cutAfter < cutBefore / 2, `restarting with dwarf: stacks cut short fall from ${cutBefore} % to ${cutAfter} %`);
  await again.goto(http + '/');
  const endedRow = again.locator(`#sessions tbody tr[data-session="${session}"]`);
  await endedRow.waitFor({ timeout: 10000 });
  const cells = await endedRow.locator('td').allTextContents();
  check(/perfwire-demo \d+/.test(cells[1]) && cells[3] === 'cpu-clock' && / s$/.test(cells[4]) && Number(cells[5].replace(/\D/g, '')) > 0 && cells[6] === 'saved',
    `a session row names its process, pid, event, duration and samples (${cells.join(' | ')})`);
}

export async function overheadRate(t) {
  const { bin, http, fetch, agentPort, demo, again } = t;
  // An agent held to a budget it cannot meet at 999 Hz lowers its rate; the session says so in
  // a card, its title listing each change and why.
  t.doing = 'a session whose agent lowered its rate for --max-overhead';
  const agent = start(bin('agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--pid', String(demo.pid), '--frequency', '999', '--max-overhead', '0.2', '--duration', '1', '--state-dir', '', '--name', 'budget']);
  try {
    const changed = await until('a rate change in the session', async () => {
      const list = await (await fetch(`${http}/api/sessions`)).json();
      const s = list.find((x) => x.hostname === 'budget' && x.live);
      if (!s) return null;
      const meta = await (await fetch(`${http}/api/sessions/${encodeURIComponent(s.id)}`)).json();
      return meta.rate_changes?.length ? meta : null;
    }, 60000);
    await again.goto(`${http}/#session=${encodeURIComponent(changed.id)}&tab=functions`);
    const card = again.locator('[data-card="rate-changes"]');
    await card.waitFor({ timeout: 20000 });
    const text = await card.textContent();
    const title = await card.getAttribute('title');
    await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'rate-change.png') });
    const to = changed.rate_changes[changed.rate_changes.length - 1].to_hz;
    check(/sampling rate changed \d+ times?/.test(text) && text.includes(`${to} Hz`) && /from 999 Hz asked/.test(text) && /999 → \d+ Hz \(profiling cost [\d.]+ % of a core at 999 Hz, over --max-overhead 0\.20 %/.test(title),
      `an agent over its --max-overhead says so in the session: "${text}" ("${title.split('\n')[1]}")`);
  } finally {
    agent.kill('SIGTERM');
  }
}
