// Live Debug wizard: dial an agent started with `perfwire-agent --listen`, pick a process,
// check perf and choose events, say where binaries and sources are, set the rate, start.
// Every step talks to the collector's API; agent commands go through the relay.
import { agentCommand, api, query } from '../api.js';
import { $, attr, esc, visible } from '../util.js';

const state = { target: null, pid: null, comm: '', events: [], probe: null };

const command = (cmd, args = {}) => agentCommand(state.target, { cmd, args });

function step(name) {
  for (const s of document.querySelectorAll('#wizard .step')) s.hidden = s.dataset.step !== name;
  for (const b of document.querySelectorAll('#wizard-steps li')) b.classList.toggle('active', b.dataset.step === name);
  $('#wizard-error').textContent = '';
}
function fail(e) { $('#wizard-error').textContent = e.message || String(e); }
async function busy(button, work) {
  button.disabled = true;
  try { await work(); } catch (e) { fail(e); } finally { button.disabled = false; }
}

async function connect() {
  const host = $('#wz-host').value.trim(), port = Number($('#wz-port').value), token = $('#wz-token').value.trim();
  const pin = $('#wz-pin').value.trim();
  if (!host || !port) throw new Error('host and port are needed');
  const body = { host, port };
  if (token) body.token = token;
  if (pin) body.pin = pin;
  const t = await api('/api/targets/connect', { method: 'POST', body });
  state.target = t.id;
  $('#wz-connected').textContent = `${t.hostname || host} · ${t.agent || 'agent'} ${t.agent_version || ''} · ${t.platform?.perf_version || ''}`;
  await loadProcesses();
  step('process');
}

async function loadProcesses() {
  const r = await command('list_processes');
  state.processes = r.processes || [];
  renderProcesses();
}
function renderProcesses() {
  const f = $('#wz-filter').value.toLowerCase();
  const rows = state.processes.filter((p) => !f || String(p.pid).includes(f) || (p.comm + ' ' + p.cmdline).toLowerCase().includes(f));
  $('#wz-processes tbody').innerHTML = rows.slice(0, 200).map((p) => `<tr class="link" data-pid="${attr(p.pid)}" data-comm="${attr(p.comm)}">
    <td>${p.pid}</td><td>${esc(p.comm)}</td><td>${(p.cpu ?? 0).toFixed(1)}</td><td class="cmdline" title="${attr(visible(p.cmdline || ''))}">${esc(p.cmdline || '')}</td></tr>`).join('');
}

async function chooseProcess(pid, comm) {
  const v = await command('verify_pid', { pid });
  if (!v.exists) throw new Error(`process ${pid} is gone`);
  state.pid = pid; state.comm = v.info?.comm || comm;
  $('#wz-chosen').textContent = `${pid} ${state.comm}`;
  step('perf');
  // "next" waits for the probe: the review and the start take what it found.
  $('#wz-perf-next').disabled = true;
  try { await probePerf(pid); } finally { $('#wz-perf-next').disabled = false; }
}

async function probePerf(pid) {
  $('#wz-perf').textContent = 'checking perf…';
  const perf = await command('verify_perf');
  $('#wz-perf').innerHTML = `${esc(perf.version || 'perf')} · ${perf.functional ? 'works' : '<span class="warn">does not work: ' + esc(perf.error || '') + '</span>'} · perf_event_paranoid ${esc(perf.perf_event_paranoid ?? '?')}`;
  $('#wz-events').innerHTML = '<span class="muted">probing events…</span>';
  $('#wz-callgraph').innerHTML = '';
  const probe = await command('reprobe', { pid });
  state.probe = probe;
  const rec = probe.record_events || [], stat = probe.stat_only_events || [];
  $('#wz-events').innerHTML = rec.map((e, i) => `<label><input type="checkbox" name="event" value="${attr(e)}" ${i === 0 ? 'checked' : ''}> ${esc(e)}</label>`).join(' ')
    + (stat.length ? `<p class="muted">counted by perf stat alongside: ${stat.map(esc).join(', ')}</p>` : '')
    + `<p class="muted">${probe.pipe_mode ? 'continuous stream' : 'rounds (this perf cannot stream perf.data through a pipe)'}</p>`
    + (probe.cannot || []).map((c) => `<p class="warn">this perf cannot ${esc(c)}</p>`).join('');
  // Call-graph modes the probe saw give stacks on this device, its pick checked; none as well.
  const modes = [...(probe.callgraph_modes || []), 'none'];
  const picked = probe.callgraph_method || 'none';
  $('#wz-callgraph').innerHTML = 'call graphs: ' + modes.map((m) => `<label title="${attr(callgraphHelp[m] || '')}"><input type="radio" name="callgraph" value="${attr(m)}" ${m === picked ? 'checked' : ''}> ${esc(callgraphLabel[m] || m)}</label>`).join(' ')
    + '<br><span id="wz-callgraph-help" class="muted"></span>';
  explainCallgraph();
  // Off-CPU offered only where this device can record the switches; else why not.
  const why = probe.off_cpu_problem || '';
  $('#wz-offcpu').disabled = Boolean(why);
  if (why) $('#wz-offcpu').checked = false;
  $('#wz-offcpu-why').textContent = why;
  // Its minimum wait beside it once chosen.
  const sync = () => { $('#wz-offcpu-min-box').hidden = !$('#wz-offcpu').checked; };
  $('#wz-offcpu').onchange = sync;
  sync();
}
const offCpuMinUs = () => Math.max(0, Math.floor(Number($('#wz-offcpu-min').value) || 0));
// What the chosen mode costs and gives, under the choice (a title alone is easy to miss).
function explainCallgraph() {
  const help = $('#wz-callgraph-help');
  if (help) help.textContent = callgraphHelp[chosenCallgraph()] || '';
}
const callgraphLabel = { fp: 'frame pointers', dwarf: 'DWARF unwinding', lbr: 'LBR', none: 'none' };
const callgraphHelp = {
  fp: 'cheap; stacks stop where code was built without frame pointers',
  dwarf: 'copies a slice of the stack with each sample: full stacks without frame pointers, more overhead and data',
  lbr: 'the CPU\'s last-branch records: cheap and deep for user code, on Intel hardware',
  none: 'only the sampled function, no callers',
};
const chosenCallgraph = () => document.querySelector('#wz-callgraph input[name=callgraph]:checked')?.value;

async function loadSymbols() {
  const c = await api('/api/config');
  $('#wz-binary').value = (c.binaries || []).join(', ');
  $('#wz-source').value = (c.source_dirs || []).join(', ');
  // Only toolchains the collector found or was given: a request never names a program to run.
  $('#wz-toolchain').innerHTML = (c.toolchains || ['']).map((t) =>
    `<option value="${attr(t)}">${t ? esc(t) + 'addr2line' : 'native (addr2line)'}</option>`).join('');
  $('#wz-toolchain').value = c.toolchain_prefix || '';
  $('#wz-sysroot').value = c.sysroot || '';
  state.browseRoot = c.browse_root;
}
async function saveSymbols() {
  const list = (s) => s.split(',').map((x) => x.trim()).filter(Boolean);
  await api('/api/config', { method: 'PUT', body: {
    binaries: list($('#wz-binary').value), source_dirs: list($('#wz-source').value),
    toolchain_prefix: $('#wz-toolchain').value, sysroot: $('#wz-sysroot').value.trim(),
  } });
}

// The file browser: fills the input it was opened for.
async function browse(path, input) {
  const r = await api(`/api/browse${query({ path })}`);
  const box = $('#wz-browser');
  box.hidden = false;
  box.dataset.input = input;
  box.innerHTML = `<div class="muted">${esc(r.path)} <button data-use="${attr(r.path)}">use this folder</button></div>`
    + (r.parent ? `<div class="link" data-dir="${attr(r.parent)}">..</div>` : '')
    + r.entries.map((e) => e.type === 'dir' ? `<div class="link" data-dir="${attr(r.path + '/' + e.name)}">${esc(e.name)}/</div>`
      : e.type === 'link' ? `<div class="muted" title="a link out of the browse root">${esc(e.name)} ↗</div>`
      : `<div class="link" data-use="${attr(r.path + '/' + e.name)}">${esc(e.name)}${e.executable ? ' *' : ''}</div>`).join('');
}

function review() {
  const events = [...document.querySelectorAll('#wz-events input[name=event]:checked')].map((i) => i.value);
  state.events = events;
  $('#wz-review').innerHTML = `<table>
    <tr><td>target</td><td>${esc($('#wz-connected').textContent)}</td></tr>
    <tr><td>process</td><td>${state.pid} ${esc(state.comm)}</td></tr>
    <tr><td>events</td><td>${events.map(esc).join(', ') || '<span class="warn">none chosen: the agent picks</span>'}</td></tr>
    <tr><td>call graphs</td><td>${esc(callgraphLabel[chosenCallgraph()] || 'the agent picks')}</td></tr>
    <tr><td>off-CPU</td><td>${$('#wz-offcpu').checked ? 'recorded: where the threads wait, and why' + (offCpuMinUs() ? `, waits under ${offCpuMinUs()} µs left out` : '') : 'not recorded'}</td></tr>
    <tr><td>frequency</td><td>${Number($('#wz-frequency').value)} Hz</td></tr>
    <tr><td>chunk length</td><td>${Number($('#wz-duration').value)} s</td></tr>
    <tr><td>flight recorder</td><td>${esc(flightWords(flightArgs()))}</td></tr>
    <tr><td>binaries</td><td>${esc($('#wz-binary').value || '(the device paths)')}</td></tr></table>`;
  step('review');
}

// A flight recorder's start arguments (none when not chosen): the window, the seconds after,
// and the levels and process name that fire it.
function flightArgs() {
  if (!$('#wz-flight').checked) return {};
  const n = (sel) => $(sel).value.trim() === '' ? null : Number($(sel).value);
  const hold = Math.max(0, Number($('#wz-trigger-hold').value) || 0);
  const level = (v) => (v > 0 ? `${v}:${hold}` : undefined);
  const args = { flight_recorder: Math.max(1, Math.floor(n('#wz-flight-window') || 60)), after: Math.max(0, Math.floor(n('#wz-flight-after') ?? 10)),
    trigger_cpu: level(n('#wz-trigger-cpu')), trigger_memory: level(n('#wz-trigger-memory')), trigger_load: level(n('#wz-trigger-load')),
    trigger_process: $('#wz-trigger-process').value.trim() || undefined };
  return Object.fromEntries(Object.entries(args).filter(([, v]) => v !== undefined));
}
const flightWords = (a) => (a.flight_recorder ? `keeps the last ${a.flight_recorder} s, sends them and ${a.after} s more when ${[
  a.trigger_cpu && `the process uses ${a.trigger_cpu.split(':')[0]} % of a core`, a.trigger_memory && `memory in use reaches ${a.trigger_memory.split(':')[0]} %`,
  a.trigger_load && `the load reaches ${a.trigger_load.split(':')[0]}`, a.trigger_process && `a process ${a.trigger_process} starts or exits`, 'you press capture now'].filter(Boolean).join(', or ')}` : 'off: everything is sent as it is recorded');

async function start() {
  const args = { pid: state.pid, frequency: Number($('#wz-frequency').value), duration: Number($('#wz-duration').value), ...flightArgs() };
  if (state.events.length) args.events = state.events;
  if (chosenCallgraph()) args.callgraph = chosenCallgraph();
  if ($('#wz-offcpu').checked) {
    args.off_cpu = true;
    if (offCpuMinUs()) args.off_cpu_min_us = offCpuMinUs();
  }
  $('#wz-start-state').textContent = 'starting… (the agent checks what this perf can do first: up to a minute on some devices)';
  let answer;
  try { answer = await command('start', args); } finally { $('#wz-start-state').textContent = ''; }
  // A flight recorder sends nothing yet: its target, armed, is where its captures will be.
  if (answer.state === 'armed') { location.hash = ''; return; }
  // The run is a session from the start's answer on; if it already ended (the target exited
  // at once), the session it left.
  const t = answer.session_id ? null : (await api('/api/targets')).find((x) => x.id === state.target);
  const session = answer.session_id || t?.session_id || t?.last_session_id;
  if (!session) throw new Error('the agent started, but no session came of it (did the process exit at once?)');
  location.hash = `session=${encodeURIComponent(session)}&tab=functions`;
}

export function render() {
  if (!$('#wizard').hidden) return; // already open: live updates must not reset it
  $('#wizard').hidden = false;
  $('#landing').hidden = true;
  step('connect');
}

// Closed, as when another page is shown (the wizard keeps its step while it is open).
export function clear() {
  $('#wizard').hidden = true;
}

export function init() {
  const on = (sel, fn) => $(sel).addEventListener('click', (e) => { if (!e.currentTarget.disabled) busy(e.currentTarget, fn); });
  on('#wz-connect', connect);
  on('#wz-refresh', loadProcesses);
  on('#wz-perf-next', async () => { await loadSymbols(); step('symbols'); });
  on('#wz-symbols-next', async () => { await saveSymbols(); step('rate'); });
  on('#wz-rate-next', async () => review());
  on('#wz-start', start);
  $('#wz-filter').addEventListener('input', renderProcesses);
  $('#wz-flight').addEventListener('change', () => { $('#wz-flight-box').hidden = !$('#wz-flight').checked; });
  $('#wz-callgraph').addEventListener('change', explainCallgraph);
  $('#wz-processes').addEventListener('click', (e) => {
    const row = e.target.closest('tr[data-pid]');
    if (row) busy(row, () => chooseProcess(Number(row.dataset.pid), row.dataset.comm));
  });
  for (const b of document.querySelectorAll('#wizard [data-browse]'))
    b.addEventListener('click', () => browse('', b.dataset.browse).catch(fail));
  $('#wz-browser').addEventListener('click', (e) => {
    const box = $('#wz-browser');
    const dir = e.target.closest('[data-dir]'), use = e.target.closest('[data-use]');
    if (dir) browse(dir.dataset.dir, box.dataset.input).catch(fail);
    if (use) { $('#' + box.dataset.input).value = use.dataset.use; box.hidden = true; }
  });
  for (const b of document.querySelectorAll('#wizard [data-back]'))
    b.addEventListener('click', () => step(b.dataset.back));
  $('#wz-close').addEventListener('click', () => { $('#wizard').hidden = true; location.hash = ''; $('#landing').hidden = false; });
}
