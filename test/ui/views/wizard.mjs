// Browser test of the UI, wizard: The Live Debug wizard, against the Python agent waiting with --listen and a pairing code.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, start, tableShows, until } from '../harness.mjs';

export async function liveDebug(t) {
  const { bin, browser, demo, http, token, errors, context, blocked, session } = t;
  // The Live Debug wizard against an agent waiting with --listen and a pairing code: the
  // Python agent, run by Debian's interpreter as a device with only python3 would run it, so
  // everything below (processes, perf check, file browser, live session, health) is its.
  t.doing = "the wizard's connect step";
  const code = '0123456789abcdef0123456789abcdef';
  const pythonAgent = new URL('../../../src/agent/python/perfwire_agent.py', import.meta.url).pathname;
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
  t.doing = "the wizard's process list";
  await wz.fill('#wz-filter', 'perfwire-demo');
  const row = wz.locator(`#wz-processes tbody tr[data-pid="${demo.pid}"]`);
  await row.waitFor({ timeout: 20000 });
  check((await row.locator('td').nth(1).textContent()) === 'perfwire-demo', 'the process list shows the demo by name');
  t.doing = "the wizard's perf step";
  await row.click();
  await wz.locator('#wz-events input[name=event]').first().waitFor({ timeout: 30000 });
  check(/works/.test(await wz.locator('#wz-perf').textContent()), 'perf is verified on the device');
  const events = await wz.locator('#wz-events input[name=event]').evaluateAll((l) => l.map((i) => i.value));
  check(events.includes('cpu-clock') || events.includes('cycles'), `sampling events offered: ${events.join(', ')}`);
  const modes = await wz.locator('#wz-callgraph input[name=callgraph]').evaluateAll((l) => l.map((i) => `${i.value}${i.checked ? '*' : ''}`));
  check(modes.includes('fp*') && modes.includes('dwarf') && modes.includes('none'), `call-graph modes offered, the probe's checked: ${modes.join(', ')}`);
  const offWhy = await wz.locator('#wz-offcpu-why').textContent();
  check(!(await wz.locator('#wz-offcpu').isDisabled()) && offWhy === '', `off-CPU is offered where the device can record the switches ("${offWhy}")`);
  await wz.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'wizard-perf.png') });
  t.doing = "the wizard's symbols step";
  await wz.click('#wz-perf-next');
  await wz.click('#wizard [data-browse="wz-source"]');
  await wz.locator('#wz-browser [data-use]').first().waitFor({ timeout: 10000 });
  check(await wz.locator('#wz-browser [data-dir], #wz-browser [data-use]').count() > 1, 'the file browser lists a folder');
  await wz.locator('#wz-browser button[data-use]').click();
  check((await wz.locator('#wz-source').inputValue()).length > 0, 'a folder chosen in the browser fills the field');
  await wz.fill('#wz-source', '');
  await wz.click('#wz-symbols-next');
  await wz.fill('#wz-frequency', '199');
  // A flight recorder, chosen then reviewed: what it keeps and what fires it; then left off.
  check(await wz.locator('#wz-flight-box').isHidden(), 'the flight recorder\'s settings wait for it to be chosen');
  await wz.check('#wz-flight');
  await wz.fill('#wz-flight-window', '30');
  await wz.fill('#wz-trigger-cpu', '80');
  await wz.fill('#wz-trigger-process', 'watchdog');
  await wz.click('#wz-rate-next');
  const flightReview = await wz.locator('#wz-review').textContent();
  check(/keeps the last 30 s, sends them and 10 s more when the process uses 80 % of a core, or a process watchdog starts or exits, or you press capture now/.test(flightReview),
    `the review says what the flight recorder keeps and what fires it ("${flightReview.match(/flight recorder(.*)/)?.[1]}")`);
  await wz.click('#wizard [data-back="rate"]');
  await wz.uncheck('#wz-flight');
  await wz.click('#wz-rate-next');
  check((await wz.locator('#wz-review').textContent()).includes('199 Hz') && (await wz.locator('#wz-review').textContent()).includes('frame pointers') && (await wz.locator('#wz-review').textContent()).includes('off: everything is sent as it is recorded'),
    'the review shows the chosen rate and call-graph mode');
  t.doing = "starting from the wizard";
  // The start button leaves the pointer where the live table comes: its rows hold their places
  // while the pointer rests there, and a function first sampled later still comes in, below
  // them. The table's first answer is made such a first chunk's, without the hottest function.
  let firstAnswer = null;
  await wz.route(/\/api\/sessions\/[^/]+\/functions\?/, async (route) => {
    if (firstAnswer) return route.continue();
    const response = await route.fetch();
    const d = await response.json();
    const kept = d.functions.filter((f) => !/matrix_multiply/.test(f.name));
    firstAnswer = kept.map((f) => f.name);
    await route.fulfill({ response, json: { ...d, functions: kept, count: d.count - (d.functions.length - kept.length), matched: d.matched - (d.functions.length - kept.length) } });
  });
  await wz.click('#wz-start');
  await wz.waitForFunction(() => location.hash.startsWith('#session='), null, { timeout: 15000 });
  await tableShows(wz, { session: new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session') }, 30000);
  const hovered = await wz.locator('#functions-scroll').evaluate((e) => e.matches(':hover'));
  await wz.mouse.wheel(0, 100000); // to the table's end, the pointer still on it
  await wz.locator('#functions tbody tr', { hasText: 'matrix_multiply' }).first().waitFor({ timeout: 30000 });
  const shown = await wz.locator('#functions tbody tr[data-function]').evaluateAll((l) => l.map((tr) => tr.dataset.function));
  check(new URLSearchParams(new URL(wz.url()).hash.slice(1)).get('session')?.length > 0 && shown.some((n) => /matrix_multiply/.test(n)),
    'starting lands on the live session, which fills with the demo\'s functions');
  const before = shown.slice(0, shown.findIndex((n) => /matrix_multiply/.test(n)));
  check(hovered && firstAnswer?.length > 0 && before.length > 0 && JSON.stringify(firstAnswer.slice(-before.length)) === JSON.stringify(before),
    `a function first sampled while the pointer rests on the table comes in after the ${firstAnswer?.length} rows shown, which keep their places (${await wz.locator('#functions-held').count() ? await wz.locator('#functions-held').textContent() : 'no order held'})`);
  await wz.unroute(/\/api\/sessions\/[^/]+\/functions\?/);
  await wz.mouse.move(1, 1);
  Object.assign(t, { code, wz, row });
}
