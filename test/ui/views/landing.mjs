// Browser test of the UI, landing: The landing page: targets and their agents (and their updates), the sessions list and its search, the add-a-target help, the theme.
// Steps run in order by test/ui/ui_test.mjs, which passes each the state the earlier ones left (t).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, start, until } from '../harness.mjs';

export async function addTarget(t) {
  const { collector, http, fetch, page } = t;
  t.doing = "the landing page";

  // Which agent a device needs, and how to start it.
  t.doing = "the add-a-target help";
  await page.click('#add-target summary');
  await page.locator('#agent-binaries tbody tr').first().waitFor({ timeout: 10000 });
  // With scripts/build-agents.sh's dist/: every architecture; else this build's own agent.
  const [machine, arch, elfMachine, all] = t.distBuilt ? ['arm64', 'aarch64', 183, 'aarch64,armv7,python,s390x,x86_64'] : ['x86_64', 'x86_64', 62, 'python,x86_64'];
  await page.fill('#at-machine', machine);
  const archs = await page.locator('#agent-binaries tbody td:first-child').allTextContents();
  const fetchCmd = await page.locator('#at-commands pre.cmd').first().textContent();
  check(archs.join(',') === all && (await page.locator('#at-file').textContent()) === `→ perfwire-agent-linux-${arch}` &&
    fetchCmd.includes(`/api/agent-binaries/${arch}`), `a device's uname -m names its agent and the commands to get it there (agents: ${archs.join(', ')}${t.distBuilt ? '' : ', this build\'s own: no dist/'})`);
  const download = await fetch(`${http}/api/agent-binaries/${arch}`);
  const elf = Buffer.from(await download.arrayBuffer());
  check(download.ok && elf.subarray(0, 4).toString('latin1') === '\x7fELF' && elf[18] === elfMachine, `the ${arch} agent downloads from the collector (an ELF for machine ${elfMachine})`);
  await page.fill('#at-machine', 'mips');
  check((await page.locator('#at-file').textContent()).startsWith('not built for mips'), 'an architecture without an agent says so');

  const target = page.locator('#targets tbody tr').first();
  await target.waitFor({ timeout: 20000 });
  check(await page.locator('#no-targets').isHidden(), 'a live target is listed');
  // The landing page refreshes with every live event: its rows stay the same elements (a
  // click pressed on a row and released on its replacement would be lost).
  t.doing = 'watching the landing page refresh';
  const sessionRow = page.locator('#sessions tbody tr').first();
  await sessionRow.waitFor({ timeout: 10000 });
  await page.evaluate(() => { for (const t of ['#targets', '#sessions']) document.querySelector(`${t} tbody tr`).perfwireMarked = true; });
  const samplesCell = sessionRow.locator('td').nth(5);
  const samplesBefore = await samplesCell.textContent();
  await page.waitForFunction((b) => document.querySelector('#sessions tbody tr td:nth-child(6)').textContent !== b, samplesBefore, { timeout: 20000 });
  const rowsKept = await page.evaluate(() => ['#targets', '#sessions'].map((t) => document.querySelector(`${t} tbody tr`).perfwireMarked === true));
  check(rowsKept.every(Boolean), `the live tables refresh in place (samples ${samplesBefore} → ${await samplesCell.textContent()}, rows kept: ${rowsKept.join(', ')})`);
  await target.click();
  Object.assign(t, { target });
}

export async function theme(t) {
  const { again } = t;
  t.doing = "switching the theme";
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
}

export async function searchSessions(t) {
  const { http, session, again } = t;
  // Many sessions stay usable: the landing page counts them and a search narrows them.
  t.doing = "searching sessions";
  await again.goto(http + '/');
  await again.locator('#sessions tbody tr').first().waitFor({ timeout: 10000 });
  const allCount = await again.locator('#sessions-count').textContent();
  await again.fill('#sessions-q', '_import');
  await again.waitForFunction(() => /match/.test(document.querySelector('#sessions-count').textContent), null, { timeout: 10000 });
  const found = await again.locator('#sessions tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.session));
  check(/^\d+ sessions?$/.test(allCount) && found.length > 0 && found.every((id) => id.includes('_import')),
    `the session list counts (${allCount}) and a search narrows it (${await again.locator('#sessions-count').textContent()})`);
}

export async function updateAgent(t) {
  const { bin, work, browser, collector, http, token, errors, blocked, target, next } = t;
  // A collector with a later agent build offers it on the landing page; one click updates the
  // agent, which restarts into it and comes back with the new version.
  t.doing = "updating an agent";
  const upd = join(work, 'update');
  for (const d of ['dist', 'bin']) mkdirSync(join(upd, d), { recursive: true });
  const later = join(upd, 'dist', 'perfwire-agent-linux-x86_64');
  copyFileSync(bin('agent/perfwire-agent-next'), later);
  writeFileSync(`${later}.sha256`, `${createHash('sha256').update(readFileSync(later)).digest('hex')}  perfwire-agent-linux-x86_64\n`);
  const laterVersion = spawnSync(later, ['--version'], { encoding: 'utf8' }).stdout.trim().split(' ')[1];
  writeFileSync(`${later}.version`, `${laterVersion}\n`);
  copyFileSync(bin('agent/perfwire-agent'), join(upd, 'bin', 'perfwire-agent'));
  const pairing = '00112233445566778899aabbccddeeff';
  // Updates are signed with the collector's Ed25519 key (made at its --agent-update-key) and
  // checked on the device with the public half it prints. This collector serves its UI over
  // HTTPS (--http-tls, implying TLS on the agent link) with a self-signed key.
  const updKey = join(upd, 'update.key');
  const updColl = start(bin('collector/perfwire-collector'), ['--sessions-dir', join(upd, 'sessions'), '--http-port', '0', '--agent-port', '0',
    '--agent-bind', '127.0.0.1', '--agents-dir', join(upd, 'dist'), '--token', pairing, '--agent-update-key', updKey, '--http-tls']);
  await until('the second collector', async () => updColl.log.match(/UI and API on https:\/\/[^/]+\//));
  const updAgents = updColl.log.match(/agents on [^:]+:(\d+)/)[1];
  const updPubkey = updColl.log.match(/--update-pubkey (ed25519:\S+)/)[1];
  const updPin = updColl.log.match(/TLS with the key (sha256:[0-9a-f]{64})/)[1];
  // Its own browser context: the two collectors share a host, and so would their cookies. The
  // browser is told to take the self-signed certificate, as a user who checked its pin does.
  const updContext = await browser.newContext({ ignoreHTTPSErrors: true });
  const updPage = await updContext.newPage();
  updPage.on('pageerror', (e) => errors.push(e.message));
  await updPage.goto(updColl.log.match(/UI and API on (https:\S+\?code=\S+)/)[1]);
  const cookies = await updContext.cookies();
  check(updPage.url().startsWith('https://') && cookies.some((c) => c.name.startsWith('perfwire_token_') && c.secure && c.httpOnly),
    `the UI over HTTPS signs in with a Secure, HttpOnly cookie (${updPage.url()})`);
  // An agent given no key to check updates with, on a plain link: the later build is named,
  // with why it cannot be pushed, and no button.
  const keyless = start(join(upd, 'bin', 'perfwire-agent'), ['--server', `127.0.0.1:${updAgents}`, '--token', pairing]);
  const blockedNote = updPage.locator('#targets .update-blocked');
  await blockedNote.waitFor({ timeout: 20000 });
  const blockedText = await blockedNote.textContent();
  if (process.env.PERFWIRE_UI_SHOTS) await updPage.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS, 'update-blocked.png') });
  check(/cannot update: .*--update-pubkey/.test(blockedText) && await updPage.locator('#targets button[data-update-target]').count() === 0
    && await updPage.locator('#targets .link-plain').count() === 1,
    `an agent without --update-pubkey on a plain link is shown why it cannot be updated, and that its link is plain ("${blockedText}")`);
  keyless.kill();
  await updPage.waitForFunction(() => !document.querySelector('#targets .update-blocked'), null, { timeout: 20000 });
  // The agent the UI's commands describe: it pins this collector's key and takes its updates.
  start(join(upd, 'bin', 'perfwire-agent'), ['--server', `127.0.0.1:${updAgents}`, '--token', pairing, '--tls-pin', updPin, '--update-pubkey', updPubkey]);
  await updPage.locator('#targets .link-tls').waitFor({ timeout: 20000 });
  const lockTitle = await updPage.locator('#targets .link-tls').getAttribute('title');
  check(lockTitle.includes(updPin), `a TLS agent's row says its link is encrypted and which key it pinned ("${lockTitle}")`);
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
}

export async function flightCapture(t) {
  const { bin, http, fetch, agentPort, demo, again } = t;
  // A flight recorder on the demo: armed, its row offers "capture now", which opens a session
  // of the seconds it held, said to be the collector's capture.
  t.doing = 'a flight recorder captured from its row';
  const recorder = start(bin('agent/perfwire-agent'), ['--server', `127.0.0.1:${agentPort}`, '--pid', String(demo.pid), '--flight-recorder', '6', '--after', '2', '--trigger-load', '100000:5', '--state-dir', '', '--name', 'recorder']);
  try {
    await again.goto(`${http}/`);
    const row = again.locator('#targets tr', { hasText: 'recorder' });
    const button = row.locator('[data-capture-target]');
    await button.waitFor({ timeout: 30000 });
    const rowText = await row.textContent();
    // The row says what the window holds as it fills (the agent's metrics), and what fires it.
    await again.waitForFunction(() => [...document.querySelectorAll('#targets tr')].some((tr) => /recorder/.test(tr.textContent) && /holds [5-9] of 6 s/.test(tr.textContent)), null, { timeout: 30000 });
    const held = await row.locator('.flight').textContent();
    const fires = await row.locator('.flight').getAttribute('title');
    const before = new Set((await (await fetch(`${http}/api/sessions`)).json()).map((s) => s.id));
    await button.click();
    const captured = await until('the capture\'s session', async () => {
      const list = await (await fetch(`${http}/api/sessions`)).json();
      return list.find((s) => !before.has(s.id) && s.capture && !s.live);
    }, 30000);
    await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'flight-capture.png') });
    check(/holds [5-9] of 6 s · \d+ KiB of 16 MiB/.test(held) && /load ≥ 100000 for 5 s; capture now; SIGUSR1/.test(fires),
      `an armed flight recorder's row says what it holds ("${held}") and what fires it ("${fires}")`);
    check(/flight recorder armed/.test(rowText) && captured.capture.trigger === 'asked by the collector' && captured.capture.window_s >= 5 && captured.duration_sec >= 6,
      `"capture now" on an armed flight recorder opens a session of the ${captured.capture.window_s.toFixed(1)} s it held and the 2 s after (${captured.duration_sec.toFixed(1)} s in all)`);
    // Its timeline marks the moment it fired: the window held before it, the seconds after.
    await again.goto(`${http}/#session=${encodeURIComponent(captured.id)}&tab=timeline`);
    await again.waitForFunction(() => document.querySelector('#ruler')?.dataset.capture, null, { timeout: 30000 });
    const mark = Number(await again.locator('#ruler').getAttribute('data-capture'));
    const markTitle = await again.locator('#ruler').getAttribute('title');
    await again.screenshot({ path: join(process.env.PERFWIRE_UI_SHOTS || tmpdir(), 'flight-timeline.png') });
    check(Math.abs(mark - captured.capture.window_s) < 0.1 && mark > 4 && mark < captured.duration_sec && /trigger fired at [\d.]+ s \(asked by the collector\)/.test(markTitle),
      `the capture's timeline marks its firing at ${mark} s of ${captured.duration_sec.toFixed(1)} ("${markTitle}")`);
  } finally {
    recorder.kill('SIGTERM');
  }
}
