// Threads over time: a ruler, a lane per thread (its activity), and the chosen lane's flame
// chart, samples in time order. A click on a lane picks the chart's thread (`lane`, the
// timeline's own: the other tabs keep their thread filter); a drag across the lanes, or the
// wheel over them, picks a time window (start/end in the URL, which the health charts and the
// other tabs share). The pointer on the chart shows the whole stack under it.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, esc, pct, tickStep, unitOf, visible, zoomWindow } from '../format.js';
import { frameFill } from '../flame_canvas.js';
import { sessionUrl } from '../api.js';
import { $, blankCanvas, setHtml, transformQuery } from '../util.js';

let timeline = null; // the answer drawn
let shownTab = false;
let wheel = null; // a zoom by the wheel under way: {start, end, timer}
let laneOrder = { session: null, rank: new Map() }; // tid -> its place, for the session shown
let pointer = null; // where the pointer rests on the lanes, for the tip after a redraw
// A wait's fill by its kind (the timeline's wait_kinds: sleeping, I/O, preempted, other).
const WAIT_FILL = ['rgba(13, 148, 136, 0.4)', 'rgba(217, 119, 6, 0.55)', 'rgba(220, 38, 38, 0.45)', 'rgba(148, 163, 184, 0.35)'];
let showLaneTip = () => {};

// The window being dragged across the lanes, as a band over them.
function band(d, x) {
  const el = $('#lane-band'), box = $('#lanes-box').getBoundingClientRect();
  const x0 = d.r.left + d.x0, lo = Math.max(d.r.left, Math.min(x0, x)), hi = Math.min(d.r.right, Math.max(x0, x));
  el.style.left = `${lo - box.left}px`;
  el.style.width = `${Math.max(1, hi - lo)}px`;
  el.hidden = false;
}

export async function render(s, r) {
  shownTab = true;
  const width = Math.max(200, Math.floor($('#lanes').clientWidth || 900) - 160);
  const q = new URLSearchParams([...r.q, ...transformQuery(s)]); // the chart's stacks reshaped
  if (s.lane) q.set('tid', s.lane); // the chart's thread; the lanes are every thread
  const t = await store.view(s.session, sessionUrl(s.session, 'timeline', q, { width })).catch((e) => {
    clear();
    throw e;
  });
  r.stillWanted();
  timeline = t;
  // Lanes keep their places as the window changes: in the order they were first shown (the
  // busiest of the session first), later threads below.
  if (laneOrder.session !== s.session) laneOrder = { session: s.session, rank: new Map() };
  for (const l of t.threads) if (!laneOrder.rank.has(l.tid)) laneOrder.rank.set(l.tid, laneOrder.rank.size);
  const lanes = t.threads.slice(0, 24).sort((a, b) => laneOrder.rank.get(a.tid) - laneOrder.rank.get(b.tid));
  const max = lanes.reduce((m, l) => l.activity.reduce((a, x) => (x > a ? x : a), m), 1);
  const chosen = s.lane || s.tid || '';
  setHtml($('#timeline-info'), `${pct(t.start_s)}–${pct(t.end_s)} s of the session · ${t.threads.length} threads${t.threads.length > lanes.length ? ` (the ${lanes.length} busiest shown)` : ''}${t.wait_kinds ? ` · waiting: ${t.wait_kinds.map((k, i) => `<span class="swatch" style="background:${WAIT_FILL[i]}"></span> ${esc(k)}`).join(' ')}` : ''}`);
  // When the run's link was down (the samples are there: they came late), from the session.
  const meta = await store.view(s.session, sessionUrl(s.session)).catch(() => null);
  r.stillWanted();
  drawRuler(t, width, Array.isArray(meta?.link_gaps_s) ? meta.link_gaps_s : [], captureMark(meta));
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
    el.className = `lane${String(l.tid) === chosen ? ' chosen' : ''}`;
    el.title = `${visible(l.comm)} ${l.tid}: click for its flame chart below (the other tabs keep their thread filter)`;
    setHtml(el.querySelector('.lane-name'), `${esc(l.comm)} <span class="muted">${l.tid}</span>`);
    const c = el.querySelector('canvas');
    if (c.width !== width) c.width = width;
    const g = c.getContext('2d');
    g.clearRect(0, 0, c.width, c.height);
    // When it waited, under when it ran, coloured by why.
    for (const [b0, b1, kind] of l.waits || []) {
      g.fillStyle = WAIT_FILL[kind] ?? WAIT_FILL[3];
      g.fillRect(b0, 0, b1 - b0 + 1, 18);
    }
    g.fillStyle = accent;
    l.activity.forEach((x, px) => { if (x) { const h = Math.max(2, Math.round(18 * x / max)); g.fillRect(px, 18 - h, 1, h); } });
    if (box.children[i] !== el) box.insertBefore(el, box.children[i] ?? null);
  });
  for (const el of had.values()) el.remove();
  $('#timeline-reset').hidden = !(s.start || s.end);
  $('#chart-name').textContent = t.chart ? `flame chart of thread ${t.chart.tid}${t.threads.find((l) => l.tid === t.chart.tid)?.comm ? ` (${visible(t.threads.find((l) => l.tid === t.chart.tid).comm)})` : ''}, in time order` : 'flame chart: no thread chosen';
  drawChart(t);
  $('#tab-timeline').dataset.shows = `${s.session} ${chosen} ${s.start || ''}-${s.end || ''}`;
  if (pointer) showLaneTip(pointer);
}

// A flight recorder's capture: the moment its trigger fired, on the session's clock (the
// window held before it opens the session), and what fired.
const captureMark = (meta) => (meta?.capture && Number.isFinite(meta.capture.window_s) ? { at: meta.capture.window_s, what: String(meta.capture.trigger || '') } : null);

// Seconds from the session's start along the lanes, ticks at 1, 2 or 5 × a power of ten; the
// times the run's link was down as hatched bands (`gaps`: [from_s, to_s] on the same clock); a
// capture's firing as a red line.
function drawRuler(t, width, gaps = [], capture = null) {
  const c = $('#ruler');
  c.width = width * devicePixelRatio; c.height = 20 * devicePixelRatio;
  c.style.height = '20px';
  const g = c.getContext('2d'); g.scale(devicePixelRatio, devicePixelRatio);
  const span = t.end_s - t.start_s;
  if (!(span > 0)) return;
  const shown = gaps.filter((g) => g[1] > t.start_s && g[0] < t.end_s);
  g.fillStyle = 'rgba(217, 119, 6, 0.35)';
  for (const [from, to] of shown) {
    const x0 = Math.max(0, (from - t.start_s) / span * width);
    const x1 = Math.min(width, (to - t.start_s) / span * width);
    g.fillRect(x0, 0, Math.max(2, x1 - x0), 20);
  }
  c.dataset.gaps = shown.length;
  const titles = shown.length ? [`the orange bands: the device's link was down, its samples sent when it was back (${shown.map(([a, b]) => `${a.toFixed(1)}–${b.toFixed(1)} s`).join(', ')})`] : [];
  const fired = capture && capture.at >= t.start_s && capture.at <= t.end_s;
  if (fired) {
    g.fillStyle = '#dc2626';
    g.fillRect(Math.min(width - 2, (capture.at - t.start_s) / span * width), 0, 2, 20);
    titles.push(`the red line: the flight recorder's trigger fired at ${capture.at.toFixed(1)} s (${capture.what}); what came before it is the window the device held`);
  }
  c.dataset.capture = fired ? capture.at.toFixed(1) : '';
  c.title = titles.join('\n');
  const step = tickStep(span, width);
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  g.font = '10px ui-monospace, monospace';
  g.fillStyle = getComputedStyle(document.body).color || '#444';
  let ticks = 0;
  for (let x = Math.ceil(t.start_s / step) * step; x <= t.end_s + 1e-9; x += step) {
    const px = (x - t.start_s) / span * width;
    g.fillRect(px, 12, 1, 8);
    g.fillText(`${x.toFixed(digits)} s`, Math.min(px + 2, width - 40), 10);
    ++ticks;
  }
  c.dataset.ticks = ticks;
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
    g.fillStyle = frameFill(b.f, {}); // the flame graph's colours
    g.fillRect(b.x, b.y, Math.max(b.w - 0.5, 0.5), rowH - 1);
    if (b.w > 40) { g.fillStyle = '#111'; g.fillText(visible(b.f.name).slice(0, Math.floor(b.w / 6)), b.x + 2, b.y + 11); }
  }
  canvas.dataset.boxes = boxes.length;
  const secs = (t.end_s - t.start_s) / t.buckets;
  // The stack under the pointer: every box across its x, outermost first.
  const tip = $('#chart-tip');
  canvas.onmousemove = (e) => {
    const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    const stack = boxes.filter((b) => x >= b.x && x < b.x + b.w).sort((a, b) => a.y - b.y);
    tip.hidden = !stack.length;
    if (!stack.length) return;
    const at = t.start_s + x / scale * secs;
    tip.innerHTML = `<span class="muted">${pct(at)} s</span><ol class="stack">${stack.map((b) => (y >= b.y && y < b.y + rowH ? `<li class="here"><b>${esc(b.f.name)}</b>` : `<li>${esc(b.f.name)}`) + ` <span class="muted">${esc((b.f.module || '').split('/').pop())}</span></li>`).join('')}</ol>`;
    tip.style.left = `${Math.min(x + 14, r.width - 340)}px`;
    tip.style.top = `${y + 16}px`;
  };
  canvas.onmouseleave = () => { tip.hidden = true; };
}

// What a lane's bucket held: its weight and the commonest call path, innermost frames kept.
function laneTip(t, lane, b) {
  const at = t.start_s + (b + 0.5) * (t.end_s - t.start_s) / t.buckets;
  const unit = unitOf(t), weight = unit === 'count' ? `${lane.activity[b]} ${t.weight === 'period' ? `${esc(t.event)} period` : lane.activity[b] === 1 ? 'sample' : 'samples'}` : amount(lane.activity[b], unit);
  const head = `<span class="muted">${pct(at)} s · ${esc(lane.comm)} ${lane.tid}${lane.activity[b] ? ` · ${weight}` : ''}</span>`;
  const wait = (lane.waits || []).find(([b0, b1]) => b >= b0 && b <= b1);
  // Inside a wait that began earlier (its weight spread over its time): where it began.
  const own = lane.top_stack?.[b] ?? -1, from = own < 0 && wait ? wait[0] : b;
  const si = lane.top_stack?.[from] ?? -1;
  const waiting = wait ? `<div>waiting here: ${esc(t.wait_kinds?.[wait[2]] ?? 'off the CPU')}</div>` : '';
  // (In a wall view a lane's activity is when it ran: a wait there has none.)
  if (!lane.activity[b] && !wait) return `${head}<div>idle here</div>`;
  if (si < 0) return `${head}${waiting}<div class="muted">no stack in the view here</div>`;
  const frames = t.stacks[si].map((fi) => t.stack_frames[fi]);
  const shown = frames.slice(-14), cut = frames.length - shown.length;
  const share = lane.activity[b] ? Math.round(100 * lane.top_weight[b] / lane.activity[b]) : 100;
  return `${head}${waiting}<div>${from === b && lane.activity[b] ? `commonest stack (${share} % here)` : `the stack it began waiting in, ${pct(t.start_s + from * (t.end_s - t.start_s) / t.buckets)} s`}:</div>${cut ? `<div class="muted">… ${cut} outer frames</div>` : ''}<ol class="stack" start="${cut + 1}">${shown.map((f, i) => `<li${i === shown.length - 1 ? ' class="here"' : ''}>${esc(f.name)} <span class="muted">${esc((f.module || '').split('/').pop())}</span></li>`).join('')}</ol>`;
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
    $('#lane-band').hidden = true;
    const x1 = e.clientX - d.r.left;
    const t = timeline;
    if (Math.abs(x1 - d.x0) < 4 || !t) { setHash({ lane: d.tid }); return; }
    const at = (x) => t.start_s + Math.max(0, Math.min(1, x / d.r.width)) * (t.end_s - t.start_s);
    const [a, b] = [at(Math.min(d.x0, x1)), at(Math.max(d.x0, x1))];
    setHash({ start: a.toFixed(3), end: b.toFixed(3), last: null });
  });
  // The wheel over the lanes or the ruler zooms about the pointer; the window is asked for
  // once the wheel rests (one history entry, one answer).
  const onWheel = (e) => {
    const c = e.target.closest('.lane canvas, #ruler');
    const t = timeline;
    if (!c || !t || !e.deltaY) return;
    e.preventDefault();
    const r = c.getBoundingClientRect();
    const at = Math.max(0, Math.min(1, (e.clientX - r.left) / r.width));
    const cur = wheel ?? { start: t.start_s, end: t.end_s };
    const next = zoomWindow(cur.start, cur.end, at, e.deltaY < 0 ? 0.8 : 1.25, t.duration_s ?? t.end_s);
    clearTimeout(wheel?.timer);
    wheel = next ? { ...next } : { start: 0, end: t.duration_s ?? t.end_s, whole: true };
    wheel.timer = setTimeout(() => {
      const w = wheel; wheel = null;
      setHash(w.whole ? { start: null, end: null } : { start: w.start.toFixed(3), end: w.end.toFixed(3), last: null });
    }, 200);
  };
  // The pointer on a lane: the time, the thread's weight there and its commonest stack (told
  // again when a live update redraws the lanes under a resting pointer).
  $('#lanes').addEventListener('mousemove', (e) => { pointer = { clientX: e.clientX, clientY: e.clientY, target: e.target }; showLaneTip(pointer); });
  showLaneTip = (e) => {
    const c = e.target.isConnected ? e.target.closest('.lane canvas') : null;
    const tip = $('#lane-tip');
    const lane = c && timeline?.threads.find((l) => String(l.tid) === c.closest('.lane').dataset.tid);
    if (drag) { band(drag, e.clientX); tip.hidden = true; return; }
    if (!lane) { tip.hidden = true; return; }
    const r = c.getBoundingClientRect(), box = $('#lanes-box').getBoundingClientRect();
    const at = Math.min(timeline.buckets - 1, Math.max(0, Math.floor((e.clientX - r.left) / r.width * timeline.buckets)));
    // On a sparse lane the nearest bucket with samples, within a few pixels, is the one meant.
    const reach = Math.ceil(4 * timeline.buckets / r.width);
    let b = at;
    for (let d = 1; d <= reach && !lane.activity[b]; ++d) b = lane.activity[at - d] ? at - d : lane.activity[at + d] ? at + d : at;
    tip.innerHTML = laneTip(timeline, lane, b);
    tip.hidden = false;
    tip.style.left = `${Math.min(e.clientX - box.left + 14, box.width - 430)}px`;
    tip.style.top = `${e.clientY - box.top + 16}px`;
  };
  $('#lanes').addEventListener('mouseleave', () => { $('#lane-tip').hidden = true; pointer = null; });
  $('#lanes').addEventListener('wheel', onWheel, { passive: false });
  $('#ruler').addEventListener('wheel', onWheel, { passive: false });
  $('#timeline-reset').addEventListener('click', () => setHash({ start: null, end: null }));
  window.addEventListener('resize', () => { if (shownTab) drawChart(timeline); });
}
