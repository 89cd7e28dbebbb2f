// perfwire UI: plain ES modules, no build step. State lives in the URL hash (state.js); the
// page's model of the collector, fed by the live stream, with its cache of view answers, is
// store.js; formatting is format.js.
import { initAgentHelp, renderAgentHelp } from './agents.js';
import { initHealth, liveMetrics, resetHealth, showSession } from './health.js';
import { amount, attr, count, duration, esc, eventName, mib, pct, started, unitOf, visible } from './format.js';
import { read as readState, update as updateState } from './state.js';
import { createStore } from './store.js';
import { openLiveStream } from './stream.js';
import { $, api, filterRegex, sessionPage, setHtml, syncRows } from './util.js';
import { initWizard, openWizard } from './wizard.js';

// The URL's hash is the state (state.js).
const hashState = readState;
const setHash = updateState;
// What the stream said (targets, each session's data version and counts), and the views'
// answers for data that has not changed since.
const store = createStore({ fetchJson: (path) => api(path) });

// ---- landing ----
async function renderLanding() {
  const q = $('#sessions-q').value.trim();
  const [targets, { sessions, total }] = await Promise.all([store.targets() ?? api('/api/targets'), sessionPage({ q, limit: sessionsShown })]);
  syncRows($('#targets tbody'), targets.map((t) => [t.id, `<tr class="link" data-session="${attr(t.session_id || t.last_session_id || '')}">
    <td>${esc(t.id)}</td><td>${esc(t.hostname ?? '')}</td><td>${esc(t.agent ?? '')} ${esc(t.agent_version ?? '')}${t.updating ? ` <span class="muted">${updateProgress(t.updating)}</span>` : updating.has(t.id) ? ' <span class="muted">updating…</span>' : t.update && t.update_blocked ? ` <span class="muted update-blocked" title="${attr(t.update_blocked)}">${esc(t.update)} available; cannot update: ${esc(t.update_blocked)}</span>` : t.update ? ` <button data-update-target="${attr(t.id)}" data-version="${attr(t.update)}" title="this collector has agent ${attr(t.update)} for this device, signed with its --agent-update-key: the agent checks the signature, replaces itself and restarts">update to ${esc(t.update)}</button>` : ''}</td>
    <td>${esc(t.state)}</td><td>${esc(t.pid ?? '')}</td><td>${esc(t.session_id ?? '')}</td></tr>`]));
  $('#no-targets').hidden = targets.length > 0;
  if (!renderLanding.helped) { renderLanding.helped = true; renderAgentHelp().catch(() => { renderLanding.helped = false; }); }
  syncRows($('#sessions tbody'), sessions.map((s) => [s.id, `<tr class="link" data-session="${attr(s.id)}" title="${attr(s.id)}">
    <td>${started(s)}</td><td class="name">${processOf(s)}</td><td>${esc(s.hostname ?? '')}</td><td>${esc(eventsOf(s))}</td>
    <td class="num">${duration(s.duration_sec)}</td><td class="num">${count(s.samples)}</td><td>${s.live ? '<b>live</b>' : s.imported ? 'imported' : 'saved'}</td></tr>`]));
  // Thousands of sessions stay usable: the newest first, a page at a time, and a search.
  $('#sessions-count').textContent = q ? `${sessions.length < total ? `${sessions.length} shown, ` : ''}${total.toLocaleString()} ${total === 1 ? 'session matches' : 'sessions match'}`
    : `${sessions.length < total ? `${sessions.length} of ` : ''}${total.toLocaleString()} ${total === 1 ? 'session' : 'sessions'}`;
  $('#sessions-more').hidden = sessions.length >= total;
}
let sessionsShown = 100;
const updating = new Set(); // targets being updated: no second update button meanwhile
// A push under way, as the collector reports it (any tab sees it): the bytes sent, then the
// agent's own checks before it restarts.
const updateProgress = (u) => (u.applying ? `installing ${esc(u.version)}…`
  : `updating to ${esc(u.version)}… ${u.size ? Math.floor((100 * u.sent) / u.size) : 0}%`);

// How a session reads in a list: when, what process (pid), which event, how long, how much.
const processOf = (s) => (s.imported ? `<span class="muted">import</span> ${esc((s.source || '').split('/').pop())}`
  : `${esc(s.process || '')}${s.pid ? ` <span class="muted">${esc(s.pid)}</span>` : ''}`);
const eventsOf = (s) => (s.event_types || []).map(eventName).join(', ');

// ---- session ----
let view = { functions: [], sort: 'self_pct', desc: true, flame: null, zoomPath: [], expanded: new Map() };

function statCards(meta) {
  const st = meta.perf_stat || {};
  const cards = (st.counters || []).map((c) => {
    const v = !c.supported ? '<span class="muted">not supported</span>' : !c.counted ? '<span class="muted">not counted</span>'
      : `${Number(c.value).toLocaleString()}${c.unit ? ' ' + c.unit : ''}`;
    const scaled = c.running_pct != null && c.running_pct < 100 ? ` <span class="warn" title="multiplexed: counted ${pct(c.running_pct)}% of the time">scaled</span>` : '';
    return `<div class="card">${esc(c.event)}<b>${v}${scaled}</b></div>`;
  });
  if (st.ipc != null) cards.push(`<div class="card">IPC<b>${st.ipc.toFixed(2)}</b></div>`);
  if (meta.lost_samples) cards.push(`<div class="card warn">lost samples<b>${meta.lost_samples}</b></div>`);
  if (meta.unparsed_chunks) cards.push(`<div class="card warn" title="the live profile reached its memory budget (--live-mb): these chunks are on disk and shown when the session is opened after it ends">not shown live<b>${meta.unparsed_chunks} ${meta.unparsed_chunks === 1 ? 'chunk' : 'chunks'}</b></div>`);
  if (meta.unsaved_chunks) {
    const what = `${meta.unsaved_chunks} ${meta.unsaved_chunks === 1 ? 'chunk' : 'chunks'}${meta.unsaved_samples ? `, ${Number(meta.unsaved_samples).toLocaleString()} samples` : ''}`;
    cards.push(`<div class="card warn" title="${meta.live ? 'shown here, kept in memory and written when there is room' : 'missing from the recording on disk'}">${meta.live ? 'not on disk yet' : 'incomplete recording'}<b>${what}: ${esc(meta.store_error || '')}</b></div>`);
  }
  $('#stat-cards').innerHTML = cards.join('');
}

// The function table holds every function; only the rows in view are in the DOM, so sorting,
// filtering and scrolling stay fast with tens of thousands of functions.
const ROW_H = 24;
function renderFunctions() {
  let rows = view.functions;
  const f = $('#filter').value;
  const { re, error } = filterRegex(f);
  $('#filter-error').hidden = !error;
  $('#filter-error').textContent = error ? `incomplete pattern, showing all: ${error}` : '';
  $('#filter').classList.toggle('invalid', !!error);
  if (re) rows = rows.filter((r) => re.test(r.name) || re.test(r.module));
  const k = view.sort, d = view.desc ? -1 : 1;
  const sorted = [...rows].sort((a, b) => (a[k] < b[k] ? -d : a[k] > b[k] ? d : 0));
  // New numbers for the same view while the pointer is over the table: rows keep their places
  // (new ones below), so a click lands on the row aimed at; the order catches up on leaving.
  const key = `${view.query}|${k}|${view.desc}|${f}`;
  if (key === view.orderKey && view.rows?.length && $('#functions-scroll').matches(':hover')) {
    const place = new Map(view.rows.map((r, i) => [`${r.name}\0${r.module}`, i]));
    sorted.sort((a, b) => (place.get(`${a.name}\0${a.module}`) ?? Infinity) - (place.get(`${b.name}\0${b.module}`) ?? Infinity));
    view.frozen = true;
  }
  view.orderKey = key;
  // A nameless module's row, opened: its addresses right below it.
  view.rows = sorted.flatMap((r) => [r, ...(view.expanded.get(groupKey(r)) || [])]);
  view.diff = view.rows.some((r) => r.delta_self_pct != null);
  for (const th of document.querySelectorAll('#functions th.diff')) th.hidden = !view.diff;
  for (const th of document.querySelectorAll('#functions th[data-sort]')) th.dataset.order = th.dataset.sort === k ? (view.desc ? 'desc' : 'asc') : '';
  const n = view.functions.length.toLocaleString();
  $('#functions-count').innerHTML = esc(re ? `${view.rows.length.toLocaleString()} of ${n} functions match` : `${n} functions`) +
    (view.diff && view.baseline ? ` · compared with <b>${esc(view.baseline)}</b>: Δ in points of each session's total, red grew, green shrank <button data-baseline="">stop comparing</button>` : '');
  drawFunctionRows();
}

// "[unknown]" rows: the code of a module perf could not name, which opens into the addresses
// the samples fell on ("libx.so.1+0x15bc9", as perf report lists them).
const groupKey = (r) => `${encodeURIComponent(r.name)} ${encodeURIComponent(r.module)}`;
async function loadAddresses(session, q, r) {
  const d = await api(`/api/sessions/${encodeURIComponent(session)}/addresses?${q}&function=${encodeURIComponent(r.name)}&module=${encodeURIComponent(r.module)}`);
  const rows = d.addresses.map((a) => ({ child: true, name: a.label, module: a.module, self: a.self, self_pct: a.self_pct }));
  if (d.addresses_total > rows.length) rows.push({ child: true, more: d.addresses_total - rows.length, name: '', module: r.module, self_pct: 0 });
  return rows;
}
async function refreshAddresses(session, q) {
  for (const key of [...view.expanded.keys()]) {
    const r = view.functions.find((f) => groupKey(f) === key);
    if (!r) { view.expanded.delete(key); continue; }
    view.expanded.set(key, await loadAddresses(session, q, r).catch(() => []));
  }
}

function drawFunctionRows() {
  const box = $('#functions-scroll'), rows = view.rows || [];
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - 10);
  const last = Math.min(rows.length, first + Math.ceil((box.clientHeight || 800) / ROW_H) + 20);
  const cols = view.diff ? 8 : 5;
  const spacer = (n, key) => [key, n > 0 ? `<tr class="spacer"><td colspan="${cols}" style="height:${n * ROW_H}px"></td></tr>` : ''];
  const delta = (v) => `<td class="${v > 0.005 ? 'warn' : v < -0.005 ? 'better' : 'muted'}">${v > 0 ? '+' : ''}${pct(v)}</td>`;
  const sub = (r) => r.more ? `<tr class="sub"><td></td><td></td>${view.diff ? '<td></td><td></td><td></td>' : ''}<td></td><td class="muted">… ${count(r.more)} more addresses</td><td></td></tr>`
    : `<tr class="sub" title="${attr(r.name)}: an address in ${attr(r.module)}, which has no symbol for it"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td><td></td>${view.diff ? '<td></td><td></td><td></td>' : ''}<td class="num">${amount(r.self, view.unit)}</td><td class="name">${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`;
  const toggle = (r) => r.name === '[unknown]' && r.module && r.module !== '[unknown]' && r.self > 0
    ? `<button class="expand" data-expand="${attr(groupKey(r))}" title="${view.expanded.has(groupKey(r)) ? 'close' : 'the addresses in this module its samples fell on'}">${view.expanded.has(groupKey(r)) ? '▾' : '▸'}</button> ` : '';
  const rowKey = (r) => `${r.child ? 'address' : 'function'}\u0000${r.module}\u0000${r.name}\u0000${r.more ?? ''}`;
  const shown = rows.slice(first, last).map((r) => [rowKey(r), r.child ? sub(r) : `<tr class="link" data-function="${attr(r.name)}" title="${esc(r.name)}: show its source lines"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td>
    <td>${pct(r.total_pct)}</td>${view.diff ? `<td class="muted">${pct(r.baseline_self_pct)}</td>${delta(r.delta_self_pct)}${delta(r.delta_total_pct)}` : ''}<td class="num" title="${attr(r.self)}">${amount(r.self, view.unit)}</td><td class="name"><button class="sandwich-link" data-sandwich="${attr(r.name)}" title="callers and callees of ${attr(visible(r.name))}">⇅</button> ${toggle(r)}${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`]);
  syncRows($('#functions tbody'), [spacer(first, 'above'), ...shown, spacer(rows.length - last, 'below')].filter(([, html]) => html));
}

// A module's hue, and frames of one module told apart by the name's own shade.
const moduleHue = (m) => m.split('').reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 360, 0);
const moduleColour = (m) => `hsl(${moduleHue(m)},65%,60%)`;
const nameShade = (n) => n.split('').reduce((h, c) => (h * 17 + c.charCodeAt(0)) % 23, 0);

// The box under the pointer of a canvas of boxes ({x, y, w} in CSS pixels, rows `rowH` high),
// described in a floating tooltip next to it.
function hoverTip(canvas, tip, boxes, rowH, describe) {
  canvas.onmousemove = (e) => {
    const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    const b = boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + rowH);
    tip.hidden = !b;
    if (!b) return;
    tip.innerHTML = describe(b);
    tip.style.left = `${Math.min(x + 14, r.width - 320)}px`;
    tip.style.top = `${y + 16}px`;
  };
  canvas.onmouseleave = () => { tip.hidden = true; };
}

// The share of the whole under the frame a zoom path ("main;work") ends at, in a graph.
function zoomShare(flame, zoom) {
  if (!flame?.root?.value || !zoom) return 1;
  let n = flame.root;
  for (const name of zoom.split(';')) { const c = n.children?.find((x) => x.name === name); if (!c) break; n = c; }
  return n.value / flame.root.value;
}
// min_pct for frames of half a pixel at a zoom showing `share` of the whole, rounded down to
// two significant digits so a live update asks for the same answer.
function minPctFor(share) {
  const v = (50 / Math.max(200, $('#flame').clientWidth || 800)) * share;
  if (!(v > 0)) return 0;
  const p = 10 ** (Math.floor(Math.log10(v)) - 1);
  return Number((Math.floor(v / p) * p).toPrecision(2));
}

function drawFlame() {
  const canvas = $('#flame');
  if (!view.flame) return;
  let root = view.flame.root;
  for (const name of view.zoomPath) root = root.children.find((c) => c.name === name) || root;
  const rowH = 18, width = canvas.clientWidth || 800;
  const boxes = [];
  const walk = (n, x, depth, scale) => {
    boxes.push({ n, x, y: depth * rowH, w: n.value * scale });
    let cx = x;
    for (const c of n.children || []) { if (c.value * scale >= 0.5) walk(c, cx, depth + 1, scale); cx += c.value * scale; }
  };
  walk(root, 0, 0, root.value ? width / root.value : 0);
  const depth = Math.max(...boxes.map((b) => b.y)) / rowH + 1;
  canvas.width = width * devicePixelRatio; canvas.height = depth * rowH * devicePixelRatio;
  canvas.style.height = depth * rowH + 'px';
  canvas.dataset.boxes = boxes.length; // what was drawn, for a reader that waits on it
  canvas.dataset.inverted = view.flame.inverted ? '1' : '';
  const g = canvas.getContext('2d'); g.scale(devicePixelRatio, devicePixelRatio);
  g.font = '11px ui-monospace, monospace';
  const { re } = filterRegex($('#filter').value);
  const d0 = root.delta_pct ?? root.children?.find((c) => c.delta_pct != null)?.delta_pct;
  for (const b of boxes) {
    const hue = moduleHue(b.n.module || '');
    // Against a baseline: red grew, blue shrank, grey unchanged; otherwise a hue per module.
    const d = b.n.delta_pct;
    const fill = d != null ? (Math.abs(d) < 0.05 ? 'hsl(0,0%,78%)' : `hsl(${d > 0 ? 0 : 220},${Math.min(90, 30 + Math.abs(d) * 6)}%,62%)`)
      : `hsl(${(hue + nameShade(b.n.name) - 11 + 360) % 360},${55 + nameShade(b.n.name)}%,${52 + (nameShade(b.n.name) % 5) * 3}%)`;
    g.fillStyle = re && re.test(b.n.name) ? '#d946ef' : fill;
    g.fillRect(b.x, b.y, Math.max(b.w - 1, 0.5), rowH - 1);
    if (b.w > 40) {
      // As many characters as fit the box (the font's own width, not a guess).
      const label = b.y === 0 && view.flame.focus ? `all stacks through ${visible(view.flame.focus)}` : visible(b.n.name);
      const fit = Math.max(0, Math.floor((b.w - 6) / g.measureText('M').width));
      g.fillStyle = '#111'; g.fillText(label.length > fit ? label.slice(0, Math.max(0, fit - 1)) + '…' : label, b.x + 3, b.y + 13);
    }
  }
  // A floating tooltip: the frame, its module, self and total in the view's unit and share.
  const unit = unitOf(view.flame);
  const share = (v) => `${amount(v, unit)} (${pct(100 * v / (view.flame.total || 1))} %)`;
  hoverTip(canvas, $('#flame-tip'), boxes, rowH, (b) => `<b>${esc(b.n.name)}</b><br><span class="muted">${esc(b.n.module || '')}</span><br>
    total ${share(b.n.value)} · self ${share(b.n.self || 0)} · ${count(b.n.samples)} samples<br><span class="muted">right-click: focus, hide</span>${b.n.delta_pct != null ? `<br>${b.n.delta_pct > 0 ? '+' : ''}${pct(b.n.delta_pct)} points vs baseline` : ''}`);
  // The search's reach: the share of the total under frames that match (nested matches once).
  let matched = 0;
  if (re) {
    const walkMatch = (n) => { if (re.test(n.name)) { matched += n.value; return; } for (const c of n.children || []) walkMatch(c); };
    walkMatch(root);
  }
  const modules = new Map();
  for (const b of boxes) if (b.n.module) modules.set(b.n.module, (modules.get(b.n.module) || 0) + b.w);
  const legend = d0 != null ? '<span class="swatch" style="background:hsl(0,70%,62%)"></span> grew · <span class="swatch" style="background:hsl(220,70%,62%)"></span> shrank · <span class="swatch" style="background:hsl(0,0%,78%)"></span> unchanged vs the baseline'
    : [...modules].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([m]) => `<span class="swatch" style="background:${moduleColour(m)}"></span> ${esc(m.split('/').pop())}`).join(' · ');
  const small = view.flame.small_frames_hidden;
  const hiddenNote = small ? ` · <span class="muted" title="frames under half a pixel wide at this zoom are not sent; zoom in to see them">${count(small)} small ${small === 1 ? 'frame' : 'frames'} hidden</span>` : '';
  $('#flame-legend').innerHTML = (re ? `<b>matched ${pct(100 * matched / (root.value || 1))} %</b> of ${view.zoomPath.length ? 'this frame' : 'the total'} · ` : '') + legend + hiddenNote;
  const boxAt = (e) => {
    const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    return boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + rowH);
  };
  // Right-click: focus on the frame's function (every stack through it, from there down) or
  // hide it from every stack, as pprof's -focus and -hide do.
  canvas.oncontextmenu = (e) => {
    const b = boxAt(e);
    if (!b || b.y === 0) return;
    e.preventDefault();
    const menu = $('#flame-menu'), r = canvas.getBoundingClientRect();
    menu.dataset.name = b.n.name;
    $('#flame-menu-name').textContent = visible(b.n.name);
    // The focused function itself: hiding it would leave nothing, focusing again changes nothing.
    const focused = b.n.name === hashState().focus;
    for (const act of ['focus', 'hide']) menu.querySelector(`[data-act="${act}"]`).hidden = focused;
    menu.style.left = `${Math.min(e.clientX - r.left, r.width - 260)}px`;
    menu.style.top = `${e.clientY - r.top + 4}px`;
    menu.hidden = false;
    $('#flame-tip').hidden = true;
  };
  canvas.onclick = (e) => {
    const b = boxAt(e);
    if (!b || b.y === 0) return;
    const path = []; // names from the zoom root down to the clicked box
    const find = (n, trail) => { if (n === b.n) { path.push(...trail); return true; } return (n.children || []).some((c) => find(c, [...trail, c.name])); };
    find(root, []);
    view.zoomPath = [...view.zoomPath, ...path];
    setHash({ zoom: view.zoomPath.join(';') });
  };
  // What the graph is reduced to, each undone with its ✕.
  // (From the answer drawn, not from the URL: a graph still on its way cannot be mislabelled.)
  const focusName = view.flame.focus || '', hidden = view.flame.hide || [];
  setHtml($('#flame-shape'), (focusName ? `<span class="chip">focused on <b>${esc(focusName)}</b> (${pct(100 * view.flame.root.value / (view.flame.total || 1))} % of the total) <button data-unfocus title="show every stack">✕</button></span> ` : '')
    + hidden.map((h) => `<span class="chip">hidden <b>${esc(h)}</b> <button data-unhide="${attr(h)}" title="show it again">✕</button></span>`).join(' '));
  $('#flame-shape').dataset.shows = `${focusName}|${hidden.join(';')}`;
  setHtml($('#crumbs'), crumbs(view.zoomPath));
  const focus = view.zoomPath[view.zoomPath.length - 1];
  $('#flame-sandwich').hidden = !focus;
  if (focus) { $('#flame-sandwich').dataset.sandwich = focus; $('#flame-sandwich').textContent = `⇅ callers and callees of ${visible(focus)}`; }
}

// What a session view shows, emptied: nothing of another session stays on screen while this
// one loads or when it cannot be shown.
function clearSession(title) {
  $('#session-title').textContent = title;
  for (const id of ['#session-info', '#control-state', '#control-result', '#functions-count', '#flame-tip', '#source-info', '#crumbs', '#flame-shape', '#quality-summary', '#sandwich-fn', '#flame-legend', '#timeline-info', '#baseline-info']) $(id).textContent = '';
  for (const id of ['#stat-cards', '#quality-checks', '#callers tbody', '#callees tbody', '#lanes', '#functions tbody', '#threads tbody', '#source tbody', '#source-file', '#symbol-files tbody', '#all-sessions tbody', '#event']) $(id).innerHTML = '';
  // The thread choice holds only this session's threads: another session's, offered while
  // this one's are fetched, would filter by a thread it never had.
  $('#thread').replaceChildren(new Option('all threads', '')); delete $('#thread').dataset.session;
  // Nor another session's device health, flame graph menus or source focus.
  resetHealth();
  $('#flame-sandwich').hidden = true; $('#flame-menu').hidden = true; delete $('#flame-shape').dataset.shows;
  view.zoomPath = []; view.focusFunction = null; view.focusFile = null;
  $('#session-skipped').hidden = true; $('#quality-action').hidden = true;
  $('#controls').hidden = true;
  delete $('#functions').dataset.shows;
  view.functions = []; view.rows = []; view.expanded = new Map(); view.flameKey = null; view.pendingFlame = null; view.flame = null; view.timeline = null;
  $('#quality').className = ''; delete $('#quality').dataset.shows; delete $('#tab-sandwich').dataset.shows; delete $('#tab-timeline').dataset.shows;
  drawChart(null);
  const canvas = $('#flame'); canvas.width = 0; canvas.height = 0; canvas.style.height = '0px'; delete canvas.dataset.boxes;
}

// The zoom path as breadcrumbs, a run of one function calling itself shown once with a count
// ("recursive_fib ×7"), each crumb still zooming to its own depth.
function crumbs(path) {
  const parts = [`<span data-depth="0">all</span>`];
  for (let i = 0; i < path.length;) {
    let j = i;
    while (j + 1 < path.length && path[j + 1] === path[i]) ++j;
    parts.push(`<span data-depth="${j + 1}" title="${attr(visible(path[i]))}">${esc(path[i])}${j > i ? ` <b>×${j - i + 1}</b>` : ''}</span>`);
    i = j + 1;
  }
  return parts.join(' › ');
}

// How far this profile can be trusted, each check with its measured value and the fix.
async function renderQuality(s, q) {
  const d = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/quality?${q}`);
  const mark = { ok: '✓', warn: '!', bad: '✗' };
  $('#quality-checks').innerHTML = d.checks.map((c) => `<li class="q-${attr(c.status)}" data-check="${attr(c.id)}">
    <span class="q-mark">${mark[c.status] || ''}</span> <b>${esc(c.title)}</b>: ${esc(c.value)}
    ${c.fix ? `<div class="q-fix">→ ${esc(c.fix)}</div>` : ''}
    ${c.detail.length && c.status !== 'ok' ? `<div class="muted q-fix">${c.detail.map((x) => `${esc(x.name)}${x.pct ? ` (${pct(x.pct)} %)` : ''}`).join(' · ')}</div>` : ''}</li>`).join('');
  const worst = d.checks.some((c) => c.status === 'bad') ? 'bad' : d.checks.some((c) => c.status === 'warn') ? 'warn' : 'ok';
  const open = d.checks.filter((c) => c.status !== 'ok').length;
  $('#quality-summary').textContent = open ? `${open} to look at` : 'all good';
  $('#quality').className = `q-${worst}`;
  // A check that fails opens the panel, once per session: it holds the fix.
  if (worst === 'bad' && view.qualityOpened !== s.session) { view.qualityOpened = s.session; $('#quality').open = true; }
  // Stacks cut short on a target this collector can still steer: one click records it again
  // with DWARF unwinding (the agent refuses, saying why, if its perf cannot).
  // (A standing element, not part of the list redrawn with every live update, so a click on
  // it always lands.)
  const cut = d.checks.find((c) => c.id === 'truncated' && c.status !== 'ok');
  $('#quality-action').hidden = !(cut && view.target && view.targetPid && view.callgraph !== 'dwarf');
  $('#quality-action-what').textContent = `${view.running ? 'stops this run and records' : 'records'} pid ${view.targetPid} again with --call-graph dwarf: whole stacks where frame pointers are missing, at more cost per sample`;
  $('#quality').dataset.shows = s.session;
}

// Threads over time: a lane per thread (its activity), and the chosen thread's flame chart,
// samples in time order. The window is the one the health charts share (start/end).
async function renderTimeline(s, q) {
  const width = Math.max(200, Math.floor($('#lanes').clientWidth || 900) - 160);
  const t = await api(`/api/sessions/${encodeURIComponent(s.session)}/timeline?${q}&width=${width}`).catch((e) => {
    $('#lanes').innerHTML = ''; view.timeline = null; drawChart(null); delete $('#tab-timeline').dataset.shows;
    throw e;
  });
  view.timeline = t;
  const lanes = t.threads.slice(0, 24);
  const max = lanes.reduce((m, l) => l.activity.reduce((a, v) => (v > a ? v : a), m), 1);
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
    l.activity.forEach((v, x) => { if (v) { const h = Math.max(2, Math.round(18 * v / max)); g.fillRect(x, 18 - h, 1, h); } });
    if (box.children[i] !== el) box.insertBefore(el, box.children[i] ?? null);
  });
  for (const el of had.values()) el.remove();
  $('#timeline-reset').hidden = !(s.start || s.end);
  drawChart(t);
  $('#tab-timeline').dataset.shows = `${s.session} ${s.tid || ''} ${s.start || ''}-${s.end || ''}`;
}

function drawChart(t) {
  const canvas = $('#chart');
  const chart = t?.chart;
  if (!chart) { canvas.width = 0; canvas.height = 0; canvas.style.height = '0px'; delete canvas.dataset.boxes; return; }
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

// Who calls a function and what it calls, with the same filters as the other views.
async function renderSandwich(s, q) {
  if (!s.fn) { $('#sandwich-fn').textContent = ''; $('#callers tbody').innerHTML = ''; $('#callees tbody').innerHTML = ''; return; }
  const d = await api(`/api/sessions/${encodeURIComponent(s.session)}/sandwich?${q}&function=${encodeURIComponent(s.fn)}`).catch((e) => {
    $('#callers tbody').innerHTML = ''; $('#callees tbody').innerHTML = ''; $('#sandwich-fn').textContent = ''; delete $('#tab-sandwich').dataset.shows;
    throw e; // nothing of the last answer stays under the error
  });
  const unit = unitOf(d);
  const row = (r, self) => `<tr class="link" data-sandwich="${attr(r.name)}" title="callers and callees of ${attr(visible(r.name))}">${self ? `<td class="num">${pct(r.self_pct)}</td>` : ''}
    <td class="num"><span class="bar" style="width:${Math.min(60, r.total_pct * 0.6)}px"></span>${pct(r.total_pct)}</td><td class="num">${amount(r.total, unit)}</td>
    <td class="name">${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`;
  const none = (cols, what) => `<tr><td colspan="${cols}" class="muted">${what}</td></tr>`;
  $('#callers tbody').innerHTML = d.callers.map((r) => row(r, false)).join('') || none(4, 'none: it is where these stacks begin');
  $('#callees tbody').innerHTML = d.callees.map((r) => row(r, true)).join('') || none(5, 'none: its time is its own');
  const f = d.function;
  $('#sandwich-fn').innerHTML = `${esc(f.name)} <span class="muted">self ${pct(f.self_pct)} % (${amount(f.self, unit)}) · total ${pct(f.total_pct)} % (${amount(f.total, unit)})</span>
    <button data-source-of="${attr(f.name)}">source</button>`;
  $('#sandwich-info').textContent = '';
  $('#tab-sandwich').dataset.shows = f.name;
}

async function renderSession(s) {
  // The tab the user chose shows at once, even if what fills it cannot be fetched; controls
  // follow the URL here, before any wait, so a render under way never undoes a later click.
  $('#inverted').checked = s.inverted;
  for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.tab === s.tab);
  for (const t of document.querySelectorAll('.tab')) t.hidden = t.id !== 'tab-' + s.tab;
  if (s.tab !== 'functions') delete $('#functions').dataset.shows; // drawn anew when it is back
  if (view.shown !== s.session) { clearSession(s.session); view.shown = s.session; }
  const q = new URLSearchParams({ weight: $('#weight').value });
  if (s.tid) q.set('tid', s.tid);
  if (s.event) q.set('event', s.event);
  if (s.baseline) q.set('baseline', s.baseline);
  if (s.start) q.set('start', s.start);
  if (s.end) q.set('end', s.end);
  let meta;
  try { meta = await api(`/api/sessions/${encodeURIComponent(s.session)}`); } catch (e) { clearSession(s.session); view.shown = null; throw e; }
  stillWanted();
  const events = meta.event_types || [];
  // Without an event in the URL the collector picks the one with most samples: keep showing
  // the one it picked last for this session, so a re-render never flashes another.
  const shown = s.event || (view.picked?.session === s.session ? view.picked.event : null);
  $('#event').innerHTML = events.map((e) => `<option value="${attr(e)}" ${e === shown ? 'selected' : ''}>${esc(eventName(e))}</option>`).join('');
  view.callgraph = meta.callgraph;
  await renderControls(s.session);
  await renderThreadChoice(s);
  await showSession(s.session, meta.started_at, windowOf(s));
  stillWanted();
  $('#session-title').textContent = s.session;
  $('#session-info').textContent = [visible(meta.hostname || ''), `${meta.samples} samples`, `${meta.chunks} ${meta.chunks === 1 ? 'chunk' : 'chunks'}`,
    (meta.event_types || []).map(eventName).join(', '), meta.callgraph ? `call graphs: ${visible(meta.callgraph)}` : '', meta.live ? 'live' : meta.ended_at ? `ended, ${duration(meta.duration_sec)}` : ''].filter(Boolean).join(' · ');
  // Lines of the recording the parser could not read: counted, never silently dropped.
  $('#session-skipped').hidden = !meta.skipped_lines;
  $('#session-skipped').textContent = meta.skipped_lines ? `${Number(meta.skipped_lines).toLocaleString()} unreadable lines skipped` : '';
  statCards(meta);
  // #functions[data-shows] names the session and query its rows came from: a reader (or a test)
  // waits for the state a filter produces, not for rows that may already have been there.
  if (!meta.samples) {
    $('#functions tbody').innerHTML = '<tr><td colspan="5" class="muted">waiting for samples…</td></tr>'; $('#functions-count').textContent = ''; delete $('#functions').dataset.shows;
    $('#quality-summary').textContent = 'waiting for samples…'; $('#flame-legend').textContent = 'waiting for samples…';
    if (s.tab === 'sessions') await renderSessions(s); // every session, samples or not
    return;
  }
  await renderQuality(s, q);
  stillWanted();
  if (s.tab === 'functions') {
    const answer = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/functions?${q}`);
    view.functions = answer.functions;
    view.query = `${s.session}?${q}`;
    view.q = q.toString();
    await refreshAddresses(s.session, q);
    view.baseline = answer.baseline;
    view.unit = unitOf(answer);
    if (!s.event) { view.picked = { session: s.session, event: answer.event }; $('#event').value = answer.event; }
    renderFunctions();
    $('#functions').dataset.shows = new URLSearchParams([['session', s.session], ...q]).toString();
  }
  if (s.tab === 'flamegraph') {
    const shape = new URLSearchParams();
    if (s.inverted) shape.set('inverted', '1');
    if (s.focus) shape.set('focus', s.focus);
    if (s.hide) shape.set('hide', s.hide);
    const key = `${s.session}?${q}&${shape}&${s.zoom || ''}`;
    view.flameWanted = key;
    // Frames narrower than half a pixel at the zoom shown are not drawn, so not asked for:
    // the threshold follows the zoomed frame's share of the whole (from the graph already
    // shown when it is the same one, else from a first answer).
    const base = `${s.session}?${q}&${shape}`;
    const path = (share) => `/api/sessions/${encodeURIComponent(s.session)}/flamegraph?${q}&${shape}&min_pct=${minPctFor(share)}`;
    let share = view.flameBase === base ? zoomShare(view.flame, s.zoom) : 1;
    let flame = await store.view(s.session, path(share));
    const actual = zoomShare(flame, s.zoom);
    if (minPctFor(actual) < minPctFor(share)) { share = actual; flame = await store.view(s.session, path(share)); }
    stillWanted();
    view.flameBase = base;
    // New numbers for the same graph while the pointer is on it (or its menu is open): drawn
    // when the pointer leaves, so frames never move under it.
    if (key === view.flameKey && ($('#flame-box').matches(':hover') || !$('#flame-menu').hidden)) { view.pendingFlame = { key, flame }; return; }
    view.flameKey = key; view.pendingFlame = null;
    view.flame = flame; view.zoomPath = s.zoom ? s.zoom.split(';') : []; drawFlame();
  }
  if (s.tab === 'source') await renderSource(s, q);
  if (s.tab === 'sandwich') await renderSandwich(s, q);
  if (s.tab === 'timeline') await renderTimeline(s, q);
  if (s.tab === 'sessions') await renderSessions(s);
  if (s.tab === 'threads') {
    const threads = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/threads?${q}`);
    syncRows($('#threads tbody'), threads.map((t) => [String(t.tid), `<tr class="link" data-tid="${t.tid}"><td>${t.tid}</td><td>${esc(t.comm)}</td><td>${t.samples}</td><td>${pct(t.pct)}</td>
      <td class="name">${t.top_functions.slice(0, 3).map((f) => `${esc(f.name)} (${pct(f.self_pct)}%)`).join(', ')}</td></tr>`]));
  }
}

// The thread filter: every thread of the session (whole session, so the list stays put).
async function renderThreadChoice(s) {
  const q = new URLSearchParams({ weight: 'samples' });
  if (s.event) q.set('event', s.event);
  let answered = true;
  const threads = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/threads?${q}`).catch(() => { answered = false; return []; }); // none yet: 404
  stillWanted(); // a choice made meanwhile stays
  // Updated in place: a live session re-renders with every chunk, and options rebuilt each
  // time would close the list a user has open and drop what they were about to choose.
  const select = $('#thread');
  const had = new Map([...select.options].map((o) => [o.value, o]));
  const want = [['', 'all threads'], ...threads.map((t) => [String(t.tid), `${t.tid} ${visible(t.comm)} (${pct(t.pct)}%)`])];
  want.forEach(([value, label], i) => {
    const o = had.get(value) ?? new Option(label, value);
    if (o.text !== label) o.text = label;
    if (select.options[i] !== o) select.insertBefore(o, select.options[i] ?? null);
  });
  while (select.options.length > want.length) select.remove(want.length);
  const chosen = want.some(([v]) => v === s.tid) ? s.tid : '';
  if (select.value !== chosen) select.value = chosen;
  // Whose threads these are, once the session answered (a test waits for it).
  if (answered) select.dataset.session = s.session; else delete select.dataset.session;
}

const windowOf = (s) => (s.start != null && s.end != null ? [Number(s.start), Number(s.end)] : null);

// Pause, resume and stop for a session whose agent is connected, each offered only when the
// agent's state allows it; "start again" for the run its idle agent last finished.
async function renderControls(session) {
  const targets = store.targets() ?? await api('/api/targets');
  stillWanted();
  const t = targets.find((x) => x.session_id === session) || targets.find((x) => x.last_session_id === session && x.state === 'idle');
  view.target = t?.id;
  view.targetPid = t?.pid;
  $('#controls').hidden = !t;
  if (!t) return;
  const state = t.session_id === session ? t.state : 'ended';
  view.running = state !== 'ended';
  const allowed = { pause: state === 'profiling', resume: state === 'paused', stop: state === 'profiling' || state === 'paused' };
  for (const b of document.querySelectorAll('#controls button[data-cmd]')) {
    if (b.dataset.cmd === 'start') { b.hidden = state !== 'ended' || !t.pid; continue; }
    b.hidden = state === 'ended';
    b.disabled = !allowed[b.dataset.cmd];
  }
  $('#control-state').textContent = [visible(t.hostname || ''), state === 'ended' ? 'this run has ended; the agent is idle' : t.state, t.pid ? `pid ${t.pid}` : ''].filter(Boolean).join(' · ');
}

// Every session: open, compare against (baseline), delete, export; import a recording.
async function renderSessions(s) {
  const { sessions } = await sessionPage({ limit: 500 });
  $('#baseline-info').innerHTML = s.baseline
    ? `comparing against <b>${esc(s.baseline)}</b>: functions gain a Δ column, the flame graph turns red where time grew and blue where it shrank. <button data-baseline="">stop comparing</button>`
    : 'choose a baseline to compare this session against';
  const formats = ['collapsed', 'json', 'svg', 'speedscope', 'pprof'];
  syncRows($('#all-sessions tbody'), sessions.map((x) => [x.id, `<tr title="${attr(x.id)}">
    <td><a href="#session=${encodeURIComponent(x.id)}">${started(x) || esc(x.id)}</a>${x.id === s.session ? ' (this one)' : ''}</td><td class="name">${processOf(x)}</td><td>${esc(x.hostname ?? '')}</td>
    <td class="num">${duration(x.duration_sec)}</td><td class="num">${count(x.samples)}</td><td>${x.live ? '<b>live</b>' : x.imported ? 'imported' : 'saved'}</td>
    <td>${x.id !== s.session ? `<button data-baseline="${attr(x.id)}">baseline</button>` : ''} ${x.live ? '' : `<button data-delete="${attr(x.id)}">delete</button>`}</td>
    <td>${formats.map((f) => `<a href="/api/sessions/${encodeURIComponent(x.id)}/export?format=${f}" download>${f}</a>`).join(' ')}</td></tr>`]));
}

// An import streams through the collector as it uploads: its progress arrives as `import`
// events; cancelling aborts the upload, and the collector keeps nothing of it.
let importing = null; // { file, abort } while an upload runs
async function importRecording(file) {
  importing = { file, abort: new AbortController() };
  $('#import-state').innerHTML = `importing ${esc(file.name)}… <button id="import-cancel">cancel</button>`;
  let body;
  try { body = await api('/api/sessions/import', { method: 'POST', body: file, signal: importing.abort.signal }); }
  catch (e) { $('#import-state').textContent = importing.abort.signal.aborted ? `import of ${file.name} cancelled` : e.message; importing = null; return; }
  importing = null;
  $('#import-state').textContent = '';
  setHash({ session: body.session_id, tab: 'functions', baseline: null, start: null, end: null, file: null, zoom: null, tid: null, event: null });
}

// Source lines, heat-coloured by their share of the file; the hottest line is scrolled to.
async function renderSource(s, q) {
  const base = `/api/sessions/${encodeURIComponent(s.session)}/source`;
  const list = await api(`${base}?${q}`);
  const files = list.files || [];
  const file = s.file || files[0]?.file;
  $('#source-file').innerHTML = files.map((f) => `<option value="${attr(f.file)}" ${f.file === file ? 'selected' : ''}>${pct(f.pct)}% ${esc(f.file)}${f.found ? '' : ' (not found)'}</option>`).join('');
  const warnings = (w) => (w || []).map((x) => `<br><span class="warn" data-warning>⚠ ${esc(x)}</span>`).join('');
  renderSymbolFiles(list.binaries || []);
  if (!file) {
    const why = (list.binaries || []).filter((b) => b.error && b.module.startsWith('/')).map((b) => esc(b.error)).join('<br>');
    $('#source-info').innerHTML = 'no samples could be placed on source lines' + (why ? `:<br>${why}` : '') + warnings(list.warnings);
    $('#source tbody').innerHTML = '';
    return;
  }
  const fn = view.focusFunction && view.focusFile === file ? `&function=${encodeURIComponent(view.focusFunction)}` : '';
  const src = await api(`${base}?${q}&file=${encodeURIComponent(file)}${fn}`);
  const scope = s.tid || s.start || s.end ? ' · <span data-scope>this thread and time window only</span>' : '';
  if (!src.path) $('#source-settings').open = true; // say where the file is, right here
  $('#source-info').innerHTML = esc(`${pct(src.file_pct)}% of the samples · ${src.path ? src.path : 'source file not found here: add its folder or map its build path below'}`) +
    scope + (fn ? ` · <a href="#" data-sandwich="${attr(view.focusFunction)}">⇅ callers and callees of ${esc(view.focusFunction)}</a>` : '') + warnings(src.warnings);
  // Without the file, only the lines that hold samples (their numbers and shares), not
  // thousands of empty rows.
  const lines = src.path ? src.lines : src.lines.filter((l) => l.samples);
  const max = Math.max(...lines.map((l) => l.pct), 1e-9);
  $('#source tbody').innerHTML = lines.map((l) => {
    const heat = l.pct > 0 ? `style="background: rgba(220,38,38,${(0.12 + 0.6 * l.pct / max).toFixed(2)})"` : '';
    const cls = [l.line === src.hottest_line ? 'hot' : '', l.line === src.focus_line ? 'focus' : ''].join(' ').trim();
    return `<tr id="L${l.line}" ${heat} class="${cls}"><td>${l.pct > 0 ? pct(l.pct) : ''}</td><td>${l.samples || ''}</td>
      <td class="muted">${l.line}</td><td class="code">${esc(l.text)}</td></tr>`;
  }).join('');
  document.getElementById('L' + (src.focus_line || src.hottest_line))?.scrollIntoView({ block: 'center' });
}

// Per module of the session: the file its symbols come from and where it was found, or what
// was looked at and what to do.
function renderSymbolFiles(binaries) {
  const shown = binaries.filter((b) => b.module.startsWith('/'));
  if (shown.some((b) => b.fix && !b.pending)) $('#source-settings').open = true;
  // In place: its buttons are clicked while live data redraws the tab.
  syncRows($('#symbol-files tbody'), shown.length ? shown.map((b) => {
    const tried = (b.tried || []).map((t) => `<li>${esc(visible(t))}</li>`).join('');
    const where = b.path && !b.fix
      ? `${esc(b.origin)}: <code>${esc(visible(b.path))}</code> (${Number(b.symbols).toLocaleString()} symbols${b.build_matches ? ', the same build' : ''})`
      : b.pending ? 'asking debuginfod…'
      : `<span class="warn">${b.path ? 'only its dynamic symbols' : 'not found'}</span>: ${esc(b.fix || b.error)}`;
    // Where the device's own names are poor, every frame of the module can be named here.
    const whole = b.path && b.symbols && (!b.fix || b.named_here) ? ` <button data-resymbolize="${attr(b.module)}" data-on="${b.named_here ? 1 : 0}" title="${b.named_here
      ? 'name only the frames the device could not, as perf named the others' : 'name every frame of this module from these symbols, not only those the device could not'}">${b.named_here ? 'named here: undo' : 'name all its frames here'}</button>` : '';
    return [b.module, `<tr data-module="${attr(b.module)}"><td><code>${esc(visible(b.module))}</code></td>
      <td data-origin="${attr(b.origin)}">${where}${whole}${tried ? `<details><summary>looked at</summary><ul>${tried}</ul></details>` : ''}</td></tr>`];
  }) : [['', '<tr><td colspan="2" class="muted">no module looked up yet</td></tr>']]);
}

async function openFunctionSource(name) {
  const s = hashState();
  try {
    const src = await api(`/api/sessions/${encodeURIComponent(s.session)}/source?function=${encodeURIComponent(name)}`);
    view.focusFunction = name; view.focusFile = src.file; // scroll to this function's hottest line
    setHash({ tab: 'source', file: src.file });
  } catch (e) { showError(e.message); }
}

// `tab`: the tab whose render failed (data-tab on the message), when a render failed.
function showError(message, tab) {
  $('#view-error').hidden = !message;
  $('#view-error').textContent = message ? visible(message) : '';
  if (message && tab) $('#view-error').dataset.tab = tab; else delete $('#view-error').dataset.tab;
}

// A render whose address changed under it stops at its next step: the render that change
// queued draws the new state, sooner, and nothing of the old one is written over a newer choice.
class Superseded extends Error {}
let renderedHash = '';
const stillWanted = () => { if (location.hash !== renderedHash) throw new Superseded(); };

let rendering = null;
async function render() {
  renderedHash = location.hash;
  const s = hashState();
  if (location.hash === '#wizard') { showError(null); openWizard(); return; }
  $('#wizard').hidden = true;
  $('#landing').hidden = !!s.session;
  $('#session').hidden = !s.session;
  // An error is shown above the view it belongs to, and goes when that view renders again.
  try { await (s.session ? renderSession(s) : renderLanding()); showError(null); }
  catch (e) { if (!(e instanceof Superseded)) showError(e.message, s.session ? s.tab : 'landing'); }
}
// One render at a time; a change that arrives during one is rendered right after it, once.
let again = false;
function rerender() {
  if (rendering) { again = true; return; }
  rendering = render().finally(() => { rendering = null; if (again) { again = false; rerender(); } });
}

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
    const r = await api(`/api/targets/${encodeURIComponent(b.dataset.updateTarget)}/update`, { method: 'POST', body: {} });
    said.textContent = `${b.dataset.updateTarget}: agent updated from ${r.from || '?'} to ${r.version}${r.error ? ` (${r.error})` : '; it restarts and reconnects'}`;
  } catch (err) {
    said.textContent = `${b.dataset.updateTarget}: update refused: ${err.message} (the agent keeps running its version)`;
    b.disabled = false;
    b.textContent = `update to ${b.dataset.version}`;
  } finally { updating.delete(target); rerender(); }
}

document.addEventListener('click', (e) => {
  const upd = e.target.closest('[data-update-target]');
  if (upd) { e.stopPropagation(); updateAgent(upd); return; }
  const row = e.target.closest('tr[data-session]');
  if (row && row.dataset.session) setHash({ session: row.dataset.session, tab: 'functions' });
  const tidRow = e.target.closest('tr[data-tid]');
  if (tidRow) setHash({ tid: tidRow.dataset.tid, tab: 'functions' });
  const toSandwich = e.target.closest('[data-sandwich]');
  if (toSandwich) { e.preventDefault(); setHash({ tab: 'sandwich', fn: toSandwich.dataset.sandwich }); return; }
  const sourceOf = e.target.closest('[data-source-of]');
  if (sourceOf) { openFunctionSource(sourceOf.dataset.sourceOf); return; }
  const expand = e.target.closest('[data-expand]');
  if (expand) {
    const key = expand.dataset.expand, s = hashState();
    if (view.expanded.has(key)) { view.expanded.delete(key); renderFunctions(); return; }
    const r = view.functions.find((f) => groupKey(f) === key);
    if (r) loadAddresses(s.session, view.q, r).then((rows) => { view.expanded.set(key, rows); renderFunctions(); }).catch((err) => showError(err.message));
    return;
  }
  const fnRow = e.target.closest('tr[data-function]');
  if (fnRow) openFunctionSource(fnRow.dataset.function);
  const tab = e.target.closest('#tabs button');
  if (tab) setHash({ tab: tab.dataset.tab });
  const th = e.target.closest('th[data-sort]');
  if (th) { view.desc = view.sort === th.dataset.sort ? !view.desc : true; view.sort = th.dataset.sort; $('#functions-scroll').scrollTop = 0; renderFunctions(); }
  const menu = e.target.closest('#flame-menu button');
  if (menu) {
    const name = $('#flame-menu').dataset.name, s = hashState();
    if (menu.dataset.act === 'focus') setHash({ focus: name, zoom: null });
    if (menu.dataset.act === 'hide') setHash({ hide: [...(s.hide ? s.hide.split(';') : []).filter((h) => h !== name), name].join(';'), zoom: null });
    if (menu.dataset.act === 'sandwich') setHash({ tab: 'sandwich', fn: name });
  }
  if (menu || !e.target.closest('#flame-menu')) $('#flame-menu').hidden = true; // a choice or a click elsewhere closes it
  if (e.target.closest('[data-unfocus]')) setHash({ focus: null, zoom: null });
  const unhide = e.target.closest('[data-unhide]');
  if (unhide) setHash({ hide: hashState().hide.split(';').filter((h) => h !== unhide.dataset.unhide).join(';') || null, zoom: null });
  const crumb = e.target.closest('#crumbs span');
  if (crumb) { view.zoomPath = view.zoomPath.slice(0, Number(crumb.dataset.depth)); setHash({ zoom: view.zoomPath.join(';') }); }
});
// Keyboard: "/" to search, Esc to leave the search box or zoom out one level.
document.addEventListener('keydown', (e) => {
  const typing = ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement?.tagName);
  if (e.key === '/' && !typing && !$('#session').hidden) { e.preventDefault(); $('#filter').focus(); }
  else if (e.key === 'Escape' && typing && document.activeElement === $('#filter')) $('#filter').blur();
  else if (e.key === 'Escape' && !$('#flame-menu').hidden) $('#flame-menu').hidden = true;
  else if (e.key === 'Escape' && !typing && hashState().tab === 'flamegraph' && view.zoomPath.length) {
    view.zoomPath = view.zoomPath.slice(0, -1);
    setHash({ zoom: view.zoomPath.join(';') || null });
  }
});
$('#filter').addEventListener('input', () => { $('#functions-scroll').scrollTop = 0; renderFunctions(); drawFlame(); });
$('#flame-box').addEventListener('mouseleave', () => {
  // Only the graph still asked for: one a later render replaces is dropped.
  const pending = view.pendingFlame;
  if (pending && $('#flame-menu').hidden) { view.pendingFlame = null; if (pending.key === view.flameWanted) { view.flame = pending.flame; drawFlame(); } }
});
$('#functions-scroll').addEventListener('mouseleave', () => { if (view.frozen) { view.frozen = false; renderFunctions(); } });
let scrollFrame = 0;
$('#functions-scroll').addEventListener('scroll', () => {
  if (!scrollFrame) scrollFrame = requestAnimationFrame(() => { scrollFrame = 0; drawFunctionRows(); });
});
$('#weight').addEventListener('change', rerender);
$('#open-wizard').addEventListener('click', () => { location.hash = 'wizard'; });
$('#event').addEventListener('change', (e) => setHash({ event: e.target.value }));
$('#thread').addEventListener('change', (e) => setHash({ tid: e.target.value || null }));
$('#import-file').addEventListener('change', (e) => { if (e.target.files[0]) importRecording(e.target.files[0]); });
$('#import-state').addEventListener('click', (e) => { if (e.target.id === 'import-cancel') importing?.abort.abort(); });
let sessionsSearch;
$('#sessions-q').addEventListener('input', () => {
  clearTimeout(sessionsSearch);
  sessionsSearch = setTimeout(() => { sessionsShown = 100; rerender(); }, 200);
});
$('#sessions-more').addEventListener('click', () => { sessionsShown += 100; rerender(); });
$('#all-sessions').addEventListener('click', async (e) => {
  const del = e.target.closest('button[data-delete]');
  if (del && confirm(`Delete session ${del.dataset.delete} and its recording?`)) {
    try { await api(`/api/sessions/${encodeURIComponent(del.dataset.delete)}`, { method: 'DELETE' }); store.forget(del.dataset.delete); }
    catch (err) { $('#import-state').textContent = err.message; }
    if (del.dataset.delete === hashState().session) location.hash = ''; else rerender();
  }
});
document.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-baseline]');
  if (b) setHash({ baseline: b.dataset.baseline || null, tab: b.dataset.baseline ? 'functions' : 'sessions' });
});
const agentCommand = (target, body) => api(`/api/targets/${encodeURIComponent(target)}/command`, { method: 'POST', body });
// A new run on the same process; it is a session of its own, which is opened.
async function startRun(target, args) {
  // A start may wait for the agent to probe perf (tens of seconds with some builds).
  $('#control-result').textContent = 'starting… probing perf';
  let answer;
  try { answer = await agentCommand(target, { cmd: 'start', args }); } finally { $('#control-result').textContent = ''; }
  const t = answer.session_id ? null : (await api('/api/targets')).find((x) => x.id === target);
  const next = answer.session_id || t?.session_id || t?.last_session_id;
  if (next) { setHash({ session: next, baseline: null, start: null, end: null, zoom: null, tid: null }); return true; }
  return false;
}
$('#controls').addEventListener('click', async (e) => {
  const b = e.target.closest('button[data-cmd]');
  if (!b || !view.target) return;
  try {
    $('#control-result').textContent = '';
    if (b.dataset.cmd === 'start' ? await startRun(view.target, { pid: view.targetPid }) : (await agentCommand(view.target, { cmd: b.dataset.cmd }), false)) return;
  } catch (err) { $('#control-result').textContent = `${b.dataset.cmd}: ${err.message}`; }
  rerender(); // the target's state changed
});
document.addEventListener('click', async (e) => {
  const b = e.target.closest('button[data-restart-callgraph]');
  if (!b || !view.target) return;
  b.disabled = true;
  const target = view.target, pid = view.targetPid;
  try {
    if (view.running) await agentCommand(target, { cmd: 'stop' });
    if (await startRun(target, { pid, callgraph: b.dataset.restartCallgraph })) return;
    rerender();
  } catch (err) { $('#control-result').textContent = `restart with ${b.dataset.restartCallgraph}: ${err.message}`; rerender(); }
  finally { b.disabled = false; }
});
// Theme: auto (the system's), light or dark; remembered by this browser.
const themes = ['auto', 'light', 'dark'];
function applyTheme(t) {
  if (t === 'auto') delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  $('#theme').textContent = `theme: ${t}`;
}
applyTheme(localStorage.getItem('perfwire-theme') || 'auto');
$('#theme').addEventListener('click', () => {
  const next = themes[(themes.indexOf(localStorage.getItem('perfwire-theme') || 'auto') + 1) % themes.length];
  localStorage.setItem('perfwire-theme', next);
  applyTheme(next);
});
initHealth((w) => setHash(w ? { start: w[0].toFixed(1), end: w[1].toFixed(1) } : { start: null, end: null }));
initWizard();
initAgentHelp();
$('#source-file').addEventListener('change', (e) => setHash({ file: e.target.value }));
// Source folders and path maps, set for this collector from the Source tab (PUT /api/config:
// within its --browse-root), then the view again.
async function addSourceSetting(change) {
  try {
    const c = await api('/api/config');
    await api('/api/config', { method: 'PUT', body: change(c) });
    $('#source-settings-state').textContent = 'saved; looking again…';
    rerender();
  } catch (e) { $('#source-settings-state').textContent = e.message; }
}
$('#source-dir-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const dir = $('#source-dir').value.trim();
  if (dir) addSourceSetting((c) => ({ source_dirs: [...c.source_dirs, dir] }));
});
$('#symbol-files').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-resymbolize]');
  if (!b) return;
  const m = b.dataset.resymbolize, on = b.dataset.on === '1';
  addSourceSetting((c) => ({ resymbolize: on ? c.resymbolize.filter((x) => x !== m) : [...c.resymbolize, m] }));
});
$('#debug-dir-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const dir = $('#debug-dir').value.trim();
  if (dir) addSourceSetting((c) => ({ debug_dirs: [...c.debug_dirs, dir] }));
});
$('#binary-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const path = $('#binary-path').value.trim();
  if (path) addSourceSetting((c) => ({ binaries: [...c.binaries, path] }));
});
$('#path-map-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const from = $('#map-from').value.trim(), to = $('#map-to').value.trim();
  if (from && to) addSourceSetting((c) => ({ path_map: [...c.path_map, { from, to }] }));
});
// Lanes: a click picks the thread; a drag picks a time window within the one shown.
let laneDrag = null;
$('#lanes').addEventListener('mousedown', (e) => {
  const c = e.target.closest('.lane canvas');
  if (!c) return;
  const r = c.getBoundingClientRect();
  laneDrag = { x0: e.clientX - r.left, r, tid: e.target.closest('.lane').dataset.tid };
});
window.addEventListener('mouseup', (e) => {
  if (!laneDrag) return;
  const d = laneDrag; laneDrag = null;
  const x1 = e.clientX - d.r.left;
  const t = view.timeline;
  if (Math.abs(x1 - d.x0) < 4 || !t) { setHash({ tid: d.tid }); return; }
  const at = (x) => t.start_s + Math.max(0, Math.min(1, x / d.r.width)) * (t.end_s - t.start_s);
  const [a, b] = [at(Math.min(d.x0, x1)), at(Math.max(d.x0, x1))];
  setHash({ start: a.toFixed(3), end: b.toFixed(3) });
});
$('#timeline-reset').addEventListener('click', () => setHash({ start: null, end: null }));
$('#inverted').addEventListener('change', (e) => setHash({ inverted: e.target.checked ? '1' : null, zoom: null }));
window.addEventListener('resize', () => { drawFlame(); if (hashState().tab === 'timeline') drawChart(view.timeline); });

// Signed in? The collector asks every API request for its access token, which the link it
// printed at start turns into a cookie. Without it, say where the token is and take it here.
async function signedIn() {
  const r = await fetch('/api/status', { headers: { Accept: 'application/json' } });
  if (r.status !== 401) { await r.arrayBuffer().catch(() => {}); return true; } // read whole: the connection is free again
  const where = (await r.json().catch(() => ({})))?.error?.token_file || '';
  $('#conn').textContent = 'signed out';
  $('#main').innerHTML = `<section id="sign-in"><h2>Sign in</h2>
    <p>This collector asks for its access token. Open the link <code>perfwire-collector</code> printed when it started
    (<code>UI and API on http://…/?token=…</code>), or paste the token here:</p>
    <form><input id="sign-in-token" size="40" autocomplete="off" aria-label="access token"> <button>sign in</button></form>
    ${where ? `<p class="muted">The token is kept in <code>${esc(where)}</code> on the collector's machine.</p>` : ''}</section>`;
  $('#sign-in form').addEventListener('submit', (e) => {
    e.preventDefault();
    location.href = '/?token=' + encodeURIComponent($('#sign-in-token').value.trim());
  });
  return false;
}

if (await signedIn()) {
  window.addEventListener('hashchange', rerender);
  // Live updates: re-render when something the current view shows changed.
  const stream = openLiveStream();
  let broken = false;
  stream.addEventListener('open', () => {
    $('#conn').textContent = 'live';
    if (broken) { broken = false; store.reset(); rerender(); } // versions restart with a collector
  });
  stream.addEventListener('error', () => { broken = true; $('#conn').textContent = 'reconnecting…'; });
  // The landing page lists targets and sessions; a session's view follows its agent's state
  // (controls, "ended") and its own end.
  let ownTarget = '';
  stream.addEventListener('targets', (e) => {
    const list = JSON.parse(e.data);
    store.setTargets(list);
    const s = hashState();
    if (!s.session) { rerender(); return; }
    const t = list.find((x) => x.session_id === s.session || x.last_session_id === s.session);
    const now = t ? `${t.id} ${t.state} ${t.session_id} ${t.last_session_id} ${t.pid}` : '';
    if (now !== ownTarget) { ownTarget = now; rerender(); }
  });
  stream.addEventListener('sessions', (e) => {
    const s = hashState();
    if (!s.session || JSON.parse(e.data).session_id === s.session) rerender();
  });
  stream.addEventListener('import', (e) => {
    const d = JSON.parse(e.data);
    if (!importing || !['receiving', 'converting', 'parsing'].includes(d.phase)) return;
    const of = d.total ? ` of ${mib(d.total)}` : '';
    const what = d.phase === 'converting' ? 'running perf script on' : 'importing';
    $('#import-state').innerHTML = `${what} ${esc(importing.file.name)}: ${mib(d.bytes)}${of} MiB, ${Number(d.samples).toLocaleString()} samples <button id="import-cancel">cancel</button>`;
  });
  stream.addEventListener('metrics', (e) => liveMetrics(JSON.parse(e.data), windowOf(hashState())));
  // A live session changes a few times a second; the page follows once a second at most
  // (the last change always lands: a render is due at the end of every second it was told).
  let liveDue = null, liveAt = 0;
  stream.addEventListener('data_version', (e) => {
    const s = hashState(), d = JSON.parse(e.data);
    if (!store.dataChanged(d)) return; // not news
    if (s.session && d.session_id !== s.session) return;
    if (liveDue) return;
    const wait = Math.max(0, liveAt + 1000 - Date.now());
    liveDue = setTimeout(() => { liveDue = null; liveAt = Date.now(); rerender(); }, wait);
  });
  rerender();
}
