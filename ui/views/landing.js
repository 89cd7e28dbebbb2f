// The landing page: the live targets (with their agents' updates), the sessions newest first
// with a search, and "Add a target": which agent a device needs (from its `uname -m`), how to
// get it there and how to start it in each of its three modes, with the binaries this
// collector can hand out.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { attr, count, duration, esc, mib as mibOf, processOf, eventsOf, started } from '../format.js';
import { api, sessionPage, targetUrl } from '../api.js';
import { $, syncRows } from '../util.js';

// uname -m -> the agent built for it (dist/perfwire-agent-linux-<arch>).
export function agentArch(machine) {
  const m = machine.trim().toLowerCase();
  if (m === 'aarch64' || m === 'arm64') return 'aarch64';
  if (m === 'armv7l' || m === 'armv8l' || m === 'armv7' || m === 'armhf') return 'armv7';
  if (m === 'x86_64' || m === 'amd64') return 'x86_64';
  if (m === 's390x') return 's390x';
  return null;
}

let binaries = [];
let shownCommands = ''; // the add-target commands drawn, redrawn only when they change

const loopback = (h) => h === 'localhost' || h === '::1' || h === '[::1]' || /^127\./.test(h);

function commands(arch) {
  const file = `perfwire-agent-linux-${arch}`;
  const b = binaries.find((x) => x.arch === arch);
  const status = store.status() ?? {}; // the stream's
  const agentPort = (status.agent_listener || ':9999').split(':').pop();
  const collector = loopback(location.hostname) ? 'COLLECTOR' : location.hostname;
  const fetchCmd = loopback(location.hostname)
    ? `# on this machine: fetch it, then copy it over\ncurl -fo ${file} ${location.origin}/api/agent-binaries/${arch}\nscp ${file} root@DEVICE:/tmp/perfwire-agent`
    : `# on the device\ncurl -fo /tmp/perfwire-agent ${location.origin}/api/agent-binaries/${arch}`;
  // This collector asks agents that dial in for its enrollment token (kept in a file here).
  const enroll = status.enrollment ? 'PERFWIRE_ENROLL_TOKEN=TOKEN ' : '';
  const enrollNote = status.enrollment ? ` (TOKEN: the enrollment token in ${status.enrollment_file} on this machine)` : '';
  // The agent pins this collector's key: the link is encrypted and nobody else can stand in.
  const pin = status.tls_pin ? ` --tls-pin ${status.tls_pin}` : '';
  const updates = status.update_pubkey ? ` --update-pubkey ${status.update_pubkey}` : '';
  const linkNote = status.tls_pin ? ' over TLS, pinned to this collector\'s key' : ' (plain TCP: start the collector with --tls to encrypt it)';
  const block = (title, text) => `<p>${title}</p><pre class="cmd">${esc(text)}</pre><button data-copy>copy</button>`;
  return block('1. Get it onto the device', fetchCmd) +
    block('2. Check it and make it executable', `cd /tmp && echo "${b?.sha256 || 'SHA256'}  perfwire-agent" | sha256sum -c && chmod +x perfwire-agent`) +
    block(`3. Start it: stream to this collector (the device reaches it)${esc(linkNote)}${esc(enrollNote)}`, `${enroll}/tmp/perfwire-agent --server ${collector}:${agentPort}${pin}${updates} --pid PID`) +
    block('… or wait for this collector to dial in (Live Debug), behind NAT use ssh -R', `/tmp/perfwire-agent --listen --port 9999${status.tls_pin ? ' --tls' : ''}   # prints a pairing code${status.tls_pin ? ' and its key' : ''}`) +
    block('… or record on the device and import the file on the Sessions tab', '/tmp/perfwire-agent --output /tmp/profile.txt --pid PID --rounds 3');
}

function show() {
  const machine = $('#at-machine').value;
  const arch = machine ? agentArch(machine) : binaries[0]?.arch;
  const built = arch && binaries.some((b) => b.arch === arch);
  $('#at-file').textContent = !machine ? '' : built ? `→ perfwire-agent-linux-${arch}` : `not built for ${machine}${arch ? ` (${arch}): run scripts/build-agents.sh ${arch}` : ''}; agents here: ${binaries.map((b) => b.arch).join(', ') || 'none'}. A device with python3 can run the Python agent instead: ${binaries.some((b) => b.arch === 'python') ? `curl -fo perfwire_agent.py ${location.origin}/api/agent-binaries/python` : 'copy src/agent/python/perfwire_agent.py'} and start it with the same flags`;
  $('#at-file').className = !machine || built ? 'muted' : 'warn';
  const html = built ? commands(arch) : '';
  if (html !== shownCommands) $('#at-commands').innerHTML = shownCommands = html; // ("copied" stays)
}

async function renderAgentHelp() {
  binaries = (await api('/api/agent-binaries')).binaries;
  $('#agent-binaries tbody').innerHTML = binaries.map((b) => `<tr><td>${esc(b.arch)}</td>
    <td><a href="${esc(b.download)}" download>${esc(b.file)}</a></td><td>${(b.size / 1048576).toFixed(1)} MiB</td><td class="muted sha">${esc(b.sha256)}</td></tr>`).join('');
  $('#no-agent-binaries').hidden = binaries.length > 0;
  show();
}

let app; // {rerender, showError}
let sessionsShown = 100;
let targetsShown = 50;
let helped = false;
const updating = new Set(); // targets being updated: no second update button meanwhile

// A push under way, as the collector reports it (any tab sees it): the bytes sent, then the
// agent's own checks before it restarts.
const updateProgress = (u) => (u.applying ? `installing ${esc(u.version)}…`
  : `updating to ${esc(u.version)}… ${u.size ? Math.floor((100 * u.sent) / u.size) : 0}%`);

// What fires a flight recorder, in words (its agent's --trigger-* or the start's).
const levelWords = (spec, unit) => { const [v, hold] = String(spec).split(':'); return `${v}${unit}${hold ? ` for ${hold} s` : ''}`; };
const TRIGGER_WORDS = {
  cpu: (v) => `process CPU ≥ ${levelWords(v, ' % of a core')}`,
  memory: (v) => `memory in use ≥ ${levelWords(v, ' %')}`,
  load: (v) => `load ≥ ${levelWords(v, '')}`,
  log: (v) => { const i = String(v).indexOf(':'); return `a line of ${v.slice(0, i)} matching ${v.slice(i + 1)}`; },
  process: (v) => `process ${v} starting or exiting`,
  file: (v) => `${v} touched`,
};
export const triggerWords = (triggers) => Object.entries(triggers || {}).map(([k, v]) => (TRIGGER_WORDS[k] ? TRIGGER_WORDS[k](v) : `${k} ${v}`));

const size = (b) => (b < 1048576 ? `${Math.round(b / 1024)} KiB` : `${mibOf(b)} MiB`);

// A flight recorder's window as its agent last said: seconds and memory held, what fires it.
function flightOf(t) {
  const f = t.flight;
  if (!f || (t.state !== 'armed' && t.state !== 'profiling')) return '';
  const fires = [...triggerWords(f.triggers), 'capture now', 'SIGUSR1'];
  const short = f.cut_for_room ? ` <span class="warn" title="its --flight-memory-mb let ${attr(f.cut_for_room)} chunks go before they were ${attr(Math.round(f.window_s))} s old: the window held is shorter than asked">memory-bound</span>` : '';
  const problem = f.log_problem ? ` <span class="warn">${esc(f.log_problem)}</span>` : '';
  const held = t.state === 'armed'
    ? `holds ${Math.round(f.held_s)} of ${Math.round(f.window_s)} s · ${size(f.held_bytes)} of ${size(f.memory_bytes)}`
    : `capturing${f.last_fired ? `: ${esc(f.last_fired)}` : ''}`;
  return ` <span class="flight" title="${attr(`fires on: ${fires.join('; ')}${f.captures ? `; ${f.captures} captures so far` : ''}`)}">${held}</span>${short}${problem}`;
}

function targetRow(t) {
  const update = t.updating ? ` <span class="muted">${updateProgress(t.updating)}</span>`
    : updating.has(t.id) ? ' <span class="muted">updating…</span>'
    : t.update && t.update_blocked ? ` <span class="muted update-blocked" title="${attr(t.update_blocked)}">${esc(t.update)} available; cannot update: ${esc(t.update_blocked)}</span>`
    : t.update ? ` <button data-update-target="${attr(t.id)}" data-version="${attr(t.update)}" title="this collector has agent ${attr(t.update)} for this device, signed with its --agent-update-key or sent over the agent's pinned TLS link: the agent checks it, replaces itself and restarts">update to ${esc(t.update)}</button>`
    : '';
  // Whether the link is encrypted, and which key was pinned (the agent's own check decides).
  const l = t.link || {};
  const link = l.encrypted
    ? ` <span class="link-tls" title="${attr(`${l.tls || 'TLS'}${l.pinned ? `, key pinned: ${l.pinned}` : ''}`)}">encrypted (${esc(l.tls || 'TLS')})</span>`
    : ' <span class="muted link-plain" title="plain TCP: profiles and commands cross the network readable (collector --tls, agent --tls-pin)">plain TCP</span>';
  // A flight recorder holds its last seconds on the device: "capture now" sends them.
  const armed = flightOf(t) + (t.state === 'armed' ? ` <button data-capture-target="${attr(t.id)}" title="send what the flight recorder holds (its last seconds), then --after seconds more, as a session of its own">capture now</button>` : '');
  // Back after its link was down: what the device kept comes first, live data behind it.
  const c = t.catching_up;
  const behind = c && c.chunks ? ` <span class="catching-up" title="the device kept recording while its link was down (${attr(Math.round((c.bytes || 0) / 1024))} KiB held): it sends that first, live data behind it">catching up: ${count(c.chunks_left)} of ${count(c.chunks)} chunks left</span>` : '';
  return `<tr class="link" data-session="${attr(t.session_id || t.last_session_id || '')}">
    <td>${esc(t.id)}</td><td>${esc(t.hostname ?? '')}</td><td>${esc(t.agent ?? '')} ${esc(t.agent_version ?? '')}${update}</td>
    <td>${esc(t.state === 'idle' && t.state_reason ? (t.state_reason === 'probing perf' ? 'probing perf…' : `idle: ${t.state_reason}`) : t.state === 'armed' ? 'flight recorder armed' : t.state)}${armed}${behind}${link}</td><td>${esc(t.pid ?? '')}</td><td>${esc(t.session_id ?? '')}</td>
    <td class="num">${t.session_id ? count(store.counts(t.session_id)?.samples ?? 0) : ''}</td></tr>`;
}

// Hundreds of targets stay usable: a search over what a row shows, an order, a page at a time
// and a count. All from the store (the stream keeps it current): no request.
const STATE_ORDER = { profiling: 0, paused: 1, armed: 2, authenticating: 3, idle: 4 };
export function pickTargets(all, { q = '', sort = 'activity', limit = Infinity, samples = () => 0 } = {}) {
  const needle = q.trim().toLowerCase();
  const hay = (t) => [t.id, t.hostname, t.agent, t.agent_version, t.peer, t.pid, t.session_id, t.state].map((x) => String(x ?? '').toLowerCase());
  const matched = needle ? all.filter((t) => hay(t).some((v) => v.includes(needle))) : all.slice();
  const by = {
    activity: (a, b) => samples(b) - samples(a) || (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9),
    state: (a, b) => (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || String(a.hostname).localeCompare(String(b.hostname)),
    host: (a, b) => String(a.hostname ?? '').localeCompare(String(b.hostname ?? '')) || String(a.id).localeCompare(String(b.id)),
    newest: (a, b) => (b.connected_at ?? 0) - (a.connected_at ?? 0),
  }[sort] ?? (() => 0);
  matched.sort(by);
  return { shown: matched.slice(0, limit), total: matched.length, all: all.length };
}

function renderTargets(targets) {
  const samples = (t) => (t.session_id ? store.counts(t.session_id)?.samples ?? 0 : 0);
  const { shown, total, all } = pickTargets(targets, { q: $('#targets-q').value, sort: $('#targets-sort').value, limit: targetsShown, samples });
  syncRows($('#targets tbody'), shown.map((t) => [t.id, targetRow(t)]));
  $('#no-targets').hidden = all > 0;
  $('#targets-tools').hidden = all === 0;
  $('#targets-count').textContent = total === all ? `${all.toLocaleString()} ${all === 1 ? 'target' : 'targets'}${shown.length < total ? `, ${shown.length} shown` : ''}`
    : `${total.toLocaleString()} of ${all.toLocaleString()} match${shown.length < total ? `, ${shown.length} shown` : ''}`;
  $('#targets-more').hidden = shown.length >= total;
}

// Targets changed (the stream): their table alone is drawn again, the sessions are not asked.
// The collector's status (the stream): the memory line and the commands that name its port and
// keys.
export function live(kind) {
  if ($('#landing').hidden) return;
  if (kind === 'targets' && store.targets()) renderTargets(store.targets());
  if (kind === 'status') { showMemory(); show(); }
}

function showMemory() {
  const m = store.status()?.memory;
  $('#memory-use').textContent = m ? `· sessions hold ${mib(m.sessions)} of the ${mib(m.budget)} memory budget${m.folded_samples ? ` (${count(m.folded_samples)} older samples folded into per-interval rows)` : ''}` : '';
}

export async function render() {
  const q = $('#sessions-q').value.trim();
  const [targets, { sessions, total }] = await Promise.all([store.targets() ?? api('/api/targets'), sessionPage({ q, limit: sessionsShown })]);
  renderTargets(targets);
  showMemory();
  if (!helped) { helped = true; renderAgentHelp().catch(() => { helped = false; }); }
  syncRows($('#sessions tbody'), sessions.map((s) => [s.id, `<tr class="link" data-session="${attr(s.id)}" title="${attr(s.id)}">
    <td>${started(s)}</td><td class="name">${processOf(s)}</td><td>${esc(s.hostname ?? '')}</td><td>${esc(eventsOf(s))}</td>
    <td class="num">${duration(s.duration_sec)}</td><td class="num">${count(s.samples)}</td><td>${s.live ? '<b>live</b>' : s.imported ? 'imported' : 'saved'}</td></tr>`]));
  // Thousands of sessions stay usable: the newest first, a page at a time, and a search.
  $('#sessions-count').textContent = q ? `${sessions.length < total ? `${sessions.length} shown, ` : ''}${total.toLocaleString()} ${total === 1 ? 'session matches' : 'sessions match'}`
    : `${sessions.length < total ? `${sessions.length} of ` : ''}${total.toLocaleString()} ${total === 1 ? 'session' : 'sessions'}`;
  $('#sessions-more').hidden = sessions.length >= total;
}

export function clear() {}

const mib = (b) => `${Math.round(b / 1048576).toLocaleString()} MB`;

// Pushes this collector's later agent build to a target: it restarts into it and comes back
// (a dialled agent under a new target id).
async function updateAgent(b) {
  const target = b.dataset.updateTarget;
  updating.add(target);
  b.disabled = true;
  b.textContent = `updating to ${b.dataset.version}…`;
  const said = $('#targets-result');
  said.textContent = '';
  try {
    const r = await api(targetUrl(target, 'update'), { method: 'POST', body: {} });
    said.textContent = `${target}: agent updated from ${r.from || '?'} to ${r.version}${r.error ? ` (${r.error})` : '; it restarts and reconnects'}`;
  } catch (err) {
    said.textContent = `${target}: update refused: ${err.message} (the agent keeps running its version)`;
    b.disabled = false;
    b.textContent = `update to ${b.dataset.version}`;
  } finally { updating.delete(target); app.rerender(); }
}

// A flight recorder's "capture now": its window goes out as a session, which the row then opens.
async function capture(b) {
  const target = b.dataset.captureTarget;
  b.disabled = true;
  const said = $('#targets-result');
  try {
    const r = await api(targetUrl(target, 'capture'), { method: 'POST', body: {} });
    said.textContent = `${target}: capture ${r.capture || 'begun'}: its window, then the seconds after it, go out as a session`;
  } catch (err) {
    said.textContent = `${target}: capture refused: ${err.message}`;
  } finally { b.disabled = false; }
}

export function init(context) {
  app = context;
  // A target's or a session's row opens its session.
  $('#landing').addEventListener('click', (e) => {
    const upd = e.target.closest('[data-update-target]');
    if (upd) { updateAgent(upd); return; }
    const cap = e.target.closest('[data-capture-target]');
    if (cap) { capture(cap); return; }
    const row = e.target.closest('tr[data-session]');
    if (row && row.dataset.session) setHash({ session: row.dataset.session, tab: 'functions' });
  });
  $('#open-wizard').addEventListener('click', () => { location.hash = 'wizard'; });
  let findTarget;
  $('#targets-q').addEventListener('input', () => {
    clearTimeout(findTarget);
    findTarget = setTimeout(() => { targetsShown = 50; live('targets'); }, 150);
  });
  $('#targets-sort').addEventListener('change', () => live('targets'));
  $('#targets-more').addEventListener('click', () => { targetsShown += 50; live('targets'); });
  let search;
  $('#sessions-q').addEventListener('input', () => {
    clearTimeout(search);
    search = setTimeout(() => { sessionsShown = 100; app.rerender(); }, 200);
  });
  $('#sessions-more').addEventListener('click', () => { sessionsShown += 100; app.rerender(); });
  $('#at-machine').addEventListener('input', show);
  $('#add-target').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-copy]');
    if (b) navigator.clipboard?.writeText(b.previousElementSibling.textContent).then(() => { b.textContent = 'copied'; }, () => {});
  });
}
