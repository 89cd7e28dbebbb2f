// The device-health strip of a session: CPU, per-core load, memory, load average,
// temperature, the profiled process and network rates, from the agent's metrics frames
// (history from /api/sessions/{id}/metrics, then live over SSE). Dragging across a
// sparkline selects a time window for the profile views (start/end in the URL hash).
import { update as setHash } from '../state.js';
import { api, sessionUrl } from '../api.js';
import { $ } from '../util.js';

const keep = 600; // points per series, ~20 minutes at the agent's 2 s

const h = { session: null, started: 0, system: [], process: [], network: [] };

function line(svg, points, max, window) {
  const el = $(svg);
  if (!points.length) { el.innerHTML = ''; return; }
  const t0 = points[0].t, t1 = points[points.length - 1].t || t0 + 1, span = Math.max(t1 - t0, 1);
  const top = Math.max(max ?? Math.max(...points.map((p) => p.v)), 1e-9);
  const xy = points.map((p) => `${(300 * (p.t - t0) / span).toFixed(1)},${(40 - 38 * p.v / top).toFixed(1)}`).join(' ');
  let sel = '';
  if (window) {
    const a = 300 * (window[0] + h.started - t0) / span, b = 300 * (window[1] + h.started - t0) / span;
    sel = `<rect class="sel" x="${Math.max(0, a)}" y="0" width="${Math.max(1, b - a)}" height="40"/>`;
  }
  el.innerHTML = `${sel}<polyline points="${xy}"/>`;
  el.dataset.t0 = t0; el.dataset.span = span;
}

function rate(list, pick) {
  if (list.length < 2) return null;
  const a = list[list.length - 2], b = list[list.length - 1], dt = b.ts - a.ts;
  return dt > 0 ? (pick(b) - pick(a)) / dt : null;
}
const bytes = (v) => v == null ? '–' : v > 1 << 20 ? `${(v / (1 << 20)).toFixed(1)} MiB/s` : `${(v / 1024).toFixed(1)} KiB/s`;

function draw(window) {
  const sys = h.system, last = sys[sys.length - 1];
  $('#health').hidden = !last && !h.process.length;
  if (last) {
    $('#h-cpu').textContent = `${(last.cpu?.overall_pct ?? 0).toFixed(0)} %`;
    line('#h-cpu-line', sys.map((m) => ({ t: m.ts, v: m.cpu?.overall_pct ?? 0 })), 100, window);
    $('#h-cores').innerHTML = (last.cpu?.per_core || []).map((c) => `<i title="${c.toFixed(0)} %" style="height:${Math.max(1, c * 0.32)}px"></i>`).join('');
    $('#h-mem').textContent = `${(last.mem?.used_pct ?? 0).toFixed(0)} % of ${((last.mem?.total_kb ?? 0) / 1048576).toFixed(1)} GiB`;
    line('#h-mem-line', sys.map((m) => ({ t: m.ts, v: m.mem?.used_pct ?? 0 })), 100, window);
    $('#h-load').textContent = last.load ? `${last.load.avg_1m.toFixed(2)} ${last.load.avg_5m.toFixed(2)} ${last.load.avg_15m.toFixed(2)}` : '–';
    $('#h-temp').textContent = last.temp_c != null ? `${last.temp_c.toFixed(0)} °C` : '';
  }
  const proc = h.process[h.process.length - 1];
  if (proc) {
    $('#h-proc').textContent = `${proc.comm} ${proc.cpu_pct.toFixed(0)} % · ${(proc.rss_kb / 1024).toFixed(0)} MiB · ${proc.threads} threads`;
    line('#h-proc-line', h.process.map((m) => ({ t: m.ts, v: m.cpu_pct })), null, window);
  }
  const sum = (m, k) => Object.values(m.interfaces || {}).reduce((s, i) => s + (i[k] || 0), 0);
  $('#h-net').textContent = h.network.length > 1
    ? `↓ ${bytes(rate(h.network, (m) => sum(m, 'rx_bytes')))} ↑ ${bytes(rate(h.network, (m) => sum(m, 'tx_bytes')))}` : '–';
  $('#h-window').textContent = window ? `window ${window[0].toFixed(0)}–${window[1].toFixed(0)} s (double-click to clear)` : 'drag across a chart to select a time window';
}

function add(m) {
  const list = h[m.type];
  if (!list) return;
  list.push(m);
  if (list.length > keep) list.splice(0, list.length - keep);
}

// The window of the profile views (start/end in the URL), in seconds from the session's start.
const windowOf = (s) => (s.start != null && s.end != null ? [Number(s.start), Number(s.end)] : null);
let shownWindow = null;

// Called on every render of a session: loads its history once.
export async function render(s, { meta }) {
  await showSession(s.session, meta.started_at, (shownWindow = windowOf(s)));
}
async function showSession(id, startedAt, window) {
  if (h.session !== id) {
    Object.assign(h, { session: id, started: startedAt || 0, system: [], process: [], network: [] });
    const history = await api(sessionUrl(id, 'metrics')).catch(() => []);
    if (h.session !== id) return; // another session was opened meanwhile
    // The history first, then what the stream brought meanwhile that it does not hold.
    const meanwhile = { system: h.system, process: h.process, network: h.network };
    Object.assign(h, { system: [], process: [], network: [] });
    for (const m of history) add(m);
    for (const [type, list] of Object.entries(meanwhile))
      for (const m of list) if (!h[type].length || m.ts > h[type][h[type].length - 1].ts) add(m);
  }
  draw(window);
}

// No session's health shown (another session is being opened).
export function clear() {
  Object.assign(h, { session: null, started: 0, system: [], process: [], network: [] });
  $('#health').hidden = true;
}

// The stream's `metrics` events: the session shown gains a point.
export function live(kind, d) {
  if (kind !== 'metrics' || d.session_id !== h.session) return;
  add(d.metrics);
  draw(shownWindow);
}

// Drag on any sparkline: the window in seconds from the session's start.
export function init() {
  const onWindow = (w) => setHash(w ? { start: w[0].toFixed(1), end: w[1].toFixed(1) } : { start: null, end: null });
  let from = null;
  const at = (e, svg) => {
    const r = svg.getBoundingClientRect();
    return Number(svg.dataset.t0) + Number(svg.dataset.span) * Math.min(1, Math.max(0, (e.clientX - r.left) / r.width)) - h.started;
  };
  for (const svg of document.querySelectorAll('#health svg')) {
    svg.addEventListener('mousedown', (e) => { if (svg.dataset.t0) from = at(e, svg); });
    svg.addEventListener('mouseup', (e) => {
      if (from == null) return;
      const to = at(e, svg);
      if (Math.abs(to - from) >= 1) onWindow([Math.min(from, to), Math.max(from, to)]);
      from = null;
    });
    svg.addEventListener('dblclick', () => onWindow(null));
  }
}
