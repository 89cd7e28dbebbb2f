// Threads over time: a lane per thread (its activity), and the chosen thread's flame chart,
// samples in time order. A click on a lane picks its thread; a drag across the lanes picks a
// time window (start/end in the URL, which the health charts and the other tabs share).
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { esc, moduleHue, nameShade, pct, visible } from '../format.js';
import { $, blankCanvas, hoverTip, setHtml } from '../util.js';

let timeline = null; // the answer drawn
let shownTab = false;

export async function render(s, r) {
  shownTab = true;
  const width = Math.max(200, Math.floor($('#lanes').clientWidth || 900) - 160);
  const t = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/timeline?${r.q}&width=${width}`).catch((e) => {
    clear();
    throw e;
  });
  r.stillWanted();
  timeline = t;
  const lanes = t.threads.slice(0, 24);
  const max = lanes.reduce((m, l) => l.activity.reduce((a, x) => (x > a ? x : a), m), 1);
  $('#timeline-info').textContent = `${pct(t.start_s)}–${pct(t.end_s)} s of the session · ${t.threads.length} threads${t.threads.length > lanes.length ? ` (the ${lanes.length} busiest shown)` : ''}`;
  // Each thread keeps its lane and canvas from one live update to the next, redrawn in place:
  // a drag across a lane, or a click on it, never meets an element replaced under it.
  const box = $('#lanes');
  const had = new Map([...box.children].map((el) => [el.dataset.tid, el]));
  const accent = getComputedStyle(document.documentElement).getPropertyValue('--accent') || '#2563eb';
  lanes.forEach((l, i) => {
    let el = had.get(String(l.tid));
    if (el) had.delete(String(l.tid));
    else {
      el = document.createElement('div');
      el.dataset.tid = l.tid;
      el.innerHTML = '<span class="lane-name"></span><canvas height="18"></canvas>';
    }
    el.className = `lane${String(l.tid) === s.tid ? ' chosen' : ''}`;
    el.title = `${visible(l.comm)} ${l.tid}: click for its flame chart`;
    setHtml(el.querySelector('.lane-name'), `${esc(l.comm)} <span class="muted">${l.tid}</span>`);
    const c = el.querySelector('canvas');
    if (c.width !== width) c.width = width;
    const g = c.getContext('2d');
    g.clearRect(0, 0, c.width, c.height);
    g.fillStyle = accent;
    l.activity.forEach((x, px) => { if (x) { const h = Math.max(2, Math.round(18 * x / max)); g.fillRect(px, 18 - h, 1, h); } });
    if (box.children[i] !== el) box.insertBefore(el, box.children[i] ?? null);
  });
  for (const el of had.values()) el.remove();
  $('#timeline-reset').hidden = !(s.start || s.end);
  drawChart(t);
  $('#tab-timeline').dataset.shows = `${s.session} ${s.tid || ''} ${s.start || ''}-${s.end || ''}`;
}

export function leave() {
  shownTab = false;
}

export function clear() {
  $('#timeline-info').textContent = '';
  $('#lanes').innerHTML = '';
  timeline = null;
  delete $('#tab-timeline').dataset.shows;
  drawChart(null);
}

function drawChart(t) {
  const canvas = $('#chart');
  const chart = t?.chart;
  if (!chart) { blankCanvas(canvas); return; }
  const rowH = 16, width = canvas.clientWidth || 900, scale = width / t.buckets;
  const depth = 1 + chart.boxes.reduce((m, b) => (b[0] > m ? b[0] : m), 0);
  canvas.width = width * devicePixelRatio; canvas.height = depth * rowH * devicePixelRatio;
  canvas.style.height = depth * rowH + 'px';
  const g = canvas.getContext('2d'); g.scale(devicePixelRatio, devicePixelRatio);
  g.font = '10px ui-monospace, monospace';
  const boxes = chart.boxes.map(([d, b0, b1, fi]) => ({ x: b0 * scale, w: (b1 - b0 + 1) * scale, y: d * rowH, f: chart.frames[fi] }));
  for (const b of boxes) {
    g.fillStyle = `hsl(${moduleHue(b.f.module || '')},60%,${58 + nameShade(b.f.name) % 4 * 4}%)`;
    g.fillRect(b.x, b.y, Math.max(b.w - 0.5, 0.5), rowH - 1);
    if (b.w > 40) { g.fillStyle = '#111'; g.fillText(visible(b.f.name).slice(0, Math.floor(b.w / 6)), b.x + 2, b.y + 11); }
  }
  canvas.dataset.boxes = boxes.length;
  const secs = (t.end_s - t.start_s) / t.buckets;
  hoverTip(canvas, $('#chart-tip'), boxes, rowH, (b) => `<b>${esc(b.f.name)}</b><br><span class="muted">${esc(b.f.module || '')}</span><br>${pct(t.start_s + b.x / scale * secs)}–${pct(t.start_s + (b.x + b.w) / scale * secs)} s`);
}

export function init() {
  let drag = null;
  $('#lanes').addEventListener('mousedown', (e) => {
    const c = e.target.closest('.lane canvas');
    if (!c) return;
    const r = c.getBoundingClientRect();
    drag = { x0: e.clientX - r.left, r, tid: e.target.closest('.lane').dataset.tid };
  });
  window.addEventListener('mouseup', (e) => {
    if (!drag) return;
    const d = drag; drag = null;
    const x1 = e.clientX - d.r.left;
    const t = timeline;
    if (Math.abs(x1 - d.x0) < 4 || !t) { setHash({ tid: d.tid }); return; }
    const at = (x) => t.start_s + Math.max(0, Math.min(1, x / d.r.width)) * (t.end_s - t.start_s);
    const [a, b] = [at(Math.min(d.x0, x1)), at(Math.max(d.x0, x1))];
    setHash({ start: a.toFixed(3), end: b.toFixed(3) });
  });
  $('#timeline-reset').addEventListener('click', () => setHash({ start: null, end: null }));
  window.addEventListener('resize', () => { if (shownTab) drawChart(timeline); });
}
