// The Fleet view (#fleet): what the fleet store (ClickHouse, docs/fleet.md) holds across
// devices. Choose devices (or all), a time range, an event and a build; see each device's
// samples, the functions and the flame graph ClickHouse computes, and compare with the period
// before or with another build (the diff colours of the session flame graph). A function
// chosen (a row or a frame) narrows every part to the stacks through it and shows its share on
// each device. The whole choice lives in the URL ("#fleet&devices=a,b&range=3600&…", keys in
// state.js); the answers in the store, asked again at most every REFRESH_MS while samples come.
import { parse, read, update } from '../state.js';
import { FLEET, store } from '../store.js';
import { amount, attr, count, esc, pct, visible } from '../format.js';
import { boxAt, flameLegend, paintFlame, ROW_H } from '../flame_canvas.js';
import { fleetUrl } from '../api.js';
import { $, hoverTip, setHtml, syncRows } from '../util.js';

// Time ranges offered, in seconds back from now (0: everything kept).
const RANGES = [[900, 'last 15 minutes'], [3600, 'last hour'], [21600, 'last 6 hours'], [86400, 'last 24 hours'], [604800, 'last 7 days'], [2592000, 'last 30 days'], [0, 'everything']];

let flame = null, boxes = [];
// The fleet store is asked again for the same choice at most every REFRESH_MS (the live stream
// tells of new samples twice a second; ClickHouse's answers are not that cheap).
const REFRESH_MS = 10000;
const ask = (path) => store.view(FLEET, path, { lag: REFRESH_MS });

// The flame graph's level per process (by name) under its root: a box of no function.
const PROCESS = '[process]';

// The view's state, from the URL.

export function stateOf(hash = location.hash) {
  const s = parse(hash);
  return {
    devices: (s.devices || '').split(',').filter(Boolean),
    range: Number(s.range) || 0,
    event: s.event || '',
    build: s.build || '',
    fn: s.fn || '',
    compare: s.compare || '', // '' | 'before' | 'build'
    baseBuild: s.base_build || '',
  };
}
const go = (changes) => update({ fleet: true, ...changes });
export const isFleet = () => read().fleet;

// The API query of a state: the filter, and the baseline when comparing; `withDevices` false
// for the device table, which lists every device the other choices leave.
export function queryOf(s, now = Date.now() / 1000, { withDevices = true, withFunction = true } = {}) {
  const q = new URLSearchParams();
  if (withDevices && s.devices.length) q.set('devices', s.devices.join(','));
  const from = s.range ? Math.floor(now - s.range) : null;
  if (from) q.set('from', String(from));
  if (s.event) q.set('event', s.event);
  if (s.build) q.set('build', s.build);
  if (withFunction && s.fn) q.set('function', s.fn);
  if (s.compare === 'before' && from) { q.set('base_from', String(from - s.range)); q.set('base_to', String(from)); }
  if (s.compare === 'build' && s.baseBuild) q.set('base_build', s.baseBuild);
  return q;
}
const comparing = (q) => [...q.keys()].some((k) => k.startsWith('base_'));
// The question of the functions and the flame graph: the filter and the baseline, when complete.
function fleetQuery(s, now) {
  const q = queryOf(s, now);
  if (s.compare === 'build' && !s.baseBuild) q.delete('base_build');
  return q;
}

function options(select, list, chosen) {
  const html = list.map(([value, label]) => `<option value="${attr(value)}"${String(value) === String(chosen) ? ' selected' : ''}>${esc(label)}</option>`).join('');
  if (select.innerHTML !== html) select.innerHTML = html;
  select.value = String(chosen);
}

// The time a range counts back from: now, to REFRESH_MS, so that the questions asked stay the
// same (and are answered from the store) within it.
const nowTick = () => Math.floor(Date.now() / REFRESH_MS) * REFRESH_MS / 1000;
let drawn = []; // the answers on screen, drawn again only when one is another

export async function render() {
  const s = stateOf(), now = nowTick();
  const fleetStore = store.status()?.fleet;
  const backlog = fleetStore?.backlog?.sessions ? `, ${count(fleetStore.backlog.sessions)} ${fleetStore.backlog.sessions === 1 ? 'session' : 'sessions'} to write from the session folders` : '';
  $('#fleet-store').textContent = fleetStore ? `ClickHouse at ${fleetStore.clickhouse}, database ${fleetStore.database} · ${count(fleetStore.written_samples)} samples written by this collector${fleetStore.waiting_samples ? `, ${count(fleetStore.waiting_samples)} waiting` : ''}${backlog}` : '';
  $('#fleet-none').hidden = !!fleetStore || !store.status();
  $('#fleet-body').hidden = !fleetStore;
  if (!fleetStore) return;
  $('#fleet-waiting').hidden = !fleetStore.last_error;
  $('#fleet-waiting').textContent = fleetStore.last_error ? `ClickHouse does not answer (${fleetStore.last_error}): ${count(fleetStore.waiting_samples)} samples wait in this collector and are written when it is back.` : '';

  // Every device the time, event and build leave, to choose from; the function's share on each.
  const all = queryOf({ ...s, compare: '' }, now, { withDevices: false, withFunction: false });
  const through = queryOf({ ...s, compare: '' }, now, { withDevices: false });
  const [listed, withFn] = await Promise.all([ask(fleetUrl('devices', all)), s.fn ? ask(fleetUrl('devices', through)) : null]);
  const [functions, graph] = await Promise.all([ask(fleetUrl('functions', fleetQuery(s, now), { limit: 50 })), ask(fleetUrl('flamegraph', fleetQuery(s, now), { min_pct: 0.05 }))]);
  const answers = [location.hash, fleetStore, listed, withFn, functions, graph];
  if (answers.every((a, i) => a === drawn[i])) return;
  drawn = answers;
  const devices = listed.devices;
  const events = [...new Set(devices.flatMap((d) => d.events))].sort();
  // A build by its file and the start of its id ("perfwire-demo 1a2b3c4d"), its module's first.
  const fileOf = (b) => (listed.build_modules?.[b] || '').split('/').pop();
  const buildName = (b) => `${fileOf(b) || 'build'} ${b.slice(0, 8)}`;
  const builds = [...new Set(devices.flatMap((d) => d.builds))].sort((a, b) => fileOf(a).localeCompare(fileOf(b)) || a.localeCompare(b));
  options($('#fleet-range'), RANGES.map(([v, l]) => [v, l]), s.range);
  // Every sampled event; the waits (off-cpu, in ns) by name only.
  options($('#fleet-event'), [['', events.includes('off-cpu') ? 'every sampled event' : 'every event'], ...events.map((e) => [e, e])], s.event);
  options($('#fleet-build'), [['', 'every build'], ...builds.map((b) => [b, buildName(b)])], s.build);
  options($('#fleet-compare'), [['', 'nothing'], ...(s.range ? [['before', 'the period before']] : []), ['build', 'another build']], s.compare);
  $('#fleet-base-build').hidden = s.compare !== 'build';
  options($('#fleet-base-build'), [['', 'choose a build'], ...builds.map((b) => [b, buildName(b)])], s.baseBuild);
  const fnOn = new Map((withFn?.devices || []).map((d) => [d.device, d.samples]));
  const total = devices.reduce((a, d) => a + d.samples, 0) || 1;
  $('#fleet-fn-head').textContent = s.fn ? `in ${visible(s.fn)}` : '';
  syncRows($('#fleet-devices tbody'), devices.map((d) => [d.device, `<tr>
    <td><label><input type="checkbox" data-device="${attr(d.device)}"${s.devices.includes(d.device) ? ' checked' : ''}> ${esc(d.device)}</label></td>
    <td class="num">${count(d.samples)}</td><td class="num">${pct(100 * d.samples / total)} %</td>
    <td class="num">${s.fn ? `${count(fnOn.get(d.device) || 0)} (${pct(100 * (fnOn.get(d.device) || 0) / (d.samples || 1))} %)` : ''}</td>
    <td>${esc(new Date(d.first_sec * 1000).toLocaleString())}</td><td>${esc(new Date(d.last_sec * 1000).toLocaleString())}</td>
    <td class="name" title="${attr(d.builds.map((b) => `${listed.build_modules?.[b] || '?'} ${b}`).join('\n'))}">${d.builds.map((b) => esc(buildName(b))).join(', ')}</td></tr>`]));
  $('#fleet-no-samples').hidden = devices.length > 0;
  $('#fleet-shown').textContent = `${s.devices.length ? `${s.devices.length} of ${devices.length} devices` : `all ${devices.length} devices`}${s.fn ? ` · stacks through ${visible(s.fn)}` : ''}`;
  setHtml($('#fleet-chips'), s.fn ? `<span class="chip">through <b>${esc(s.fn)}</b> <button data-fleet-unfn title="every stack">✕</button></span>` : '');

  const compared = comparing(fleetQuery(s, now));
  $('#fleet-delta-head').textContent = compared ? 'Δ total (points)' : '';
  syncRows($('#fleet-functions tbody'), functions.functions.map((f) => [`${f.name}\u0000${f.module}`, `<tr data-fn="${attr(f.name)}" title="${attr(visible(f.module))}">
    <td class="name">${esc(f.name)}</td><td class="name muted">${esc(f.module.split('/').pop())}</td>
    <td class="num">${count(f.self)}</td><td class="num">${pct(f.self_pct)} %</td><td class="num">${count(f.total)}</td><td class="num">${pct(f.total_pct)} %</td>
    <td class="num">${compared ? `${f.delta_total_pct > 0 ? '+' : ''}${pct(f.delta_total_pct)}` : ''}</td></tr>`]));
  const baseline = s.compare === 'before' ? 'the period before' : 'the other build';
  $('#fleet-samples').textContent = `${count(functions.samples)} samples${compared ? ` against ${count(functions.baseline_samples)} in ${baseline}${functions.baseline_samples ? '' : ': nothing to compare with, every frame reads as new'}` : ''}`;
  flame = graph;
  draw();
}

function draw() {
  const canvas = $('#fleet-flame');
  if (!flame) return;
  boxes = flame.root.value ? paintFlame(canvas, flame.root, { total: flame.total }) : [];
  if (!flame.root.value) { canvas.width = 0; canvas.height = 0; canvas.style.height = '0px'; canvas.dataset.boxes = 0; }
  const compared = flame.baseline_total != null;
  const share = (x) => `${amount(x, 'count')} (${pct(100 * x / (flame.total || 1))} %)`;
  hoverTip(canvas, $('#fleet-flame-tip'), boxes, ROW_H, (b) => `<b>${esc(b.n.name)}</b><br><span class="muted">${esc(b.n.module || '')}</span><br>
    total ${share(b.n.value)} · self ${share(b.n.self || 0)}${b.n.delta_pct != null ? `<br>${pct(b.n.baseline_pct)} % → ${pct(100 * b.n.value / (flame.total || 1))} % (${b.n.delta_pct > 0 ? '+' : ''}${pct(b.n.delta_pct)} points)` : ''}<br><span class="muted">${b.n.module === PROCESS ? 'a process: the stacks of every thread it ran' : 'click: stacks through it'}</span>`);
  const hidden = flame.small_frames_hidden ? ` · <span class="muted">${count(flame.small_frames_hidden)} small frames hidden</span>` : '';
  $('#fleet-flame-legend').innerHTML = (flame.root.value ? flameLegend(boxes) : 'no samples') + hidden;
}

export function clear() {
  flame = null; boxes = []; drawn = [];
}

export function init() {
  const fleet = $('#fleet');
  fleet.addEventListener('change', (e) => {
    const t = e.target;
    if (t.dataset.device !== undefined) {
      const chosen = [...fleet.querySelectorAll('[data-device]:checked')].map((x) => x.dataset.device);
      go({ devices: chosen.join(',') });
    }
    if (t.id === 'fleet-range') {
      // (everything has no period before it to compare with)
      const changes = { range: t.value === '3600' ? null : t.value };
      if (t.value === '0' && stateOf().compare === 'before') changes.compare = null;
      go(changes);
    }
    if (t.id === 'fleet-event') go({ event: t.value });
    if (t.id === 'fleet-build') go({ build: t.value });
    if (t.id === 'fleet-compare') go({ compare: t.value, base_build: t.value === 'build' ? stateOf().baseBuild : null });
    if (t.id === 'fleet-base-build') go({ base_build: t.value });
  });
  fleet.addEventListener('click', (e) => {
    const row = e.target.closest('#fleet-functions tr[data-fn]');
    if (row) go({ fn: row.dataset.fn });
    if (e.target.closest('[data-fleet-unfn]')) go({ fn: null });
    if (e.target.closest('#fleet-all-devices')) go({ devices: null });
  });
  $('#fleet-flame').addEventListener('click', (e) => {
    const b = boxAt($('#fleet-flame'), boxes, e);
    if (b && b.y > 0 && b.n.module !== PROCESS) go({ fn: b.n.name });
  });
  window.addEventListener('resize', () => { if (isFleet()) draw(); });
}
