// The function table: self and total per function, sortable, filtered by the header's box, a
// baseline's Δ columns when comparing. Only the rows in view are in the DOM, so sorting,
// filtering and scrolling stay fast with tens of thousands of functions. A nameless module's
// "[unknown]" row opens into the addresses its samples fell on.
import { store } from '../store.js';
import { amount, attr, count, esc, pct, unitOf, visible } from '../format.js';
import { $, api, filterRegex, syncRows } from '../util.js';

const ROW_H = 24;
let app; // {rerender, showError}
let v = { functions: [], rows: [], sort: 'self_pct', desc: true, expanded: new Map() };

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
  for (const key of [...v.expanded.keys()]) {
    const r = v.functions.find((f) => groupKey(f) === key);
    if (!r) { v.expanded.delete(key); continue; }
    v.expanded.set(key, await loadAddresses(session, q, r).catch(() => []));
  }
}

export async function render(s, r) {
  const answer = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/functions?${r.q}`);
  r.stillWanted();
  v.functions = answer.functions;
  v.query = `${s.session}?${r.q}`;
  v.session = s.session;
  v.q = r.q.toString();
  await refreshAddresses(s.session, r.q);
  r.stillWanted();
  v.baseline = answer.baseline;
  v.unit = unitOf(answer);
  r.pickedEvent(answer.event);
  draw();
  // #functions[data-shows] names the session and query its rows came from: a reader (or a
  // test) waits for the state a filter produces, not for rows that may already have been there.
  $('#functions').dataset.shows = new URLSearchParams([['session', s.session], ...r.q]).toString();
}

// No samples yet: the table says so.
export function waiting() {
  $('#functions tbody').innerHTML = '<tr><td colspan="5" class="muted">waiting for samples…</td></tr>';
  $('#functions-count').textContent = '';
  delete $('#functions').dataset.shows;
}

// Another tab shown: drawn anew when this one is back.
export function leave() {
  delete $('#functions').dataset.shows;
}

export function clear() {
  $('#functions-count').textContent = '';
  $('#functions tbody').innerHTML = '';
  delete $('#functions').dataset.shows;
  v = { ...v, functions: [], rows: [], expanded: new Map(), orderKey: null };
}

function draw() {
  let rows = v.functions;
  const f = $('#filter').value;
  const { re } = filterRegex(f);
  if (re) rows = rows.filter((r) => re.test(r.name) || re.test(r.module));
  const k = v.sort, d = v.desc ? -1 : 1;
  const sorted = [...rows].sort((a, b) => (a[k] < b[k] ? -d : a[k] > b[k] ? d : 0));
  // New numbers for the same view while the pointer is over the table: rows keep their places
  // (new ones below), so a click lands on the row aimed at; the order catches up on leaving.
  const key = `${v.query}|${k}|${v.desc}|${f}`;
  if (key === v.orderKey && v.rows?.length && $('#functions-scroll').matches(':hover')) {
    const place = new Map(v.rows.map((r, i) => [`${r.name}\0${r.module}`, i]));
    sorted.sort((a, b) => (place.get(`${a.name}\0${a.module}`) ?? Infinity) - (place.get(`${b.name}\0${b.module}`) ?? Infinity));
    v.frozen = true;
  }
  v.orderKey = key;
  // A nameless module's row, opened: its addresses right below it.
  v.rows = sorted.flatMap((r) => [r, ...(v.expanded.get(groupKey(r)) || [])]);
  v.diff = v.rows.some((r) => r.delta_self_pct != null);
  for (const th of document.querySelectorAll('#functions th.diff')) th.hidden = !v.diff;
  for (const th of document.querySelectorAll('#functions th[data-sort]')) th.dataset.order = th.dataset.sort === k ? (v.desc ? 'desc' : 'asc') : '';
  const n = v.functions.length.toLocaleString();
  $('#functions-count').innerHTML = esc(re ? `${v.rows.length.toLocaleString()} of ${n} functions match` : `${n} functions`) +
    (v.diff && v.baseline ? ` · compared with <b>${esc(v.baseline)}</b>: Δ in points of each session's total, red grew, green shrank <button data-baseline="">stop comparing</button>` : '');
  drawRows();
}

function drawRows() {
  const box = $('#functions-scroll'), rows = v.rows || [];
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - 10);
  const last = Math.min(rows.length, first + Math.ceil((box.clientHeight || 800) / ROW_H) + 20);
  const cols = v.diff ? 8 : 5;
  const spacer = (n, key) => [key, n > 0 ? `<tr class="spacer"><td colspan="${cols}" style="height:${n * ROW_H}px"></td></tr>` : ''];
  const delta = (x) => `<td class="${x > 0.005 ? 'warn' : x < -0.005 ? 'better' : 'muted'}">${x > 0 ? '+' : ''}${pct(x)}</td>`;
  const sub = (r) => r.more ? `<tr class="sub"><td></td><td></td>${v.diff ? '<td></td><td></td><td></td>' : ''}<td></td><td class="muted">… ${count(r.more)} more addresses</td><td></td></tr>`
    : `<tr class="sub" title="${attr(r.name)}: an address in ${attr(r.module)}, which has no symbol for it"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td><td></td>${v.diff ? '<td></td><td></td><td></td>' : ''}<td class="num">${amount(r.self, v.unit)}</td><td class="name">${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`;
  const toggle = (r) => r.name === '[unknown]' && r.module && r.module !== '[unknown]' && r.self > 0
    ? `<button class="expand" data-expand="${attr(groupKey(r))}" title="${v.expanded.has(groupKey(r)) ? 'close' : 'the addresses in this module its samples fell on'}">${v.expanded.has(groupKey(r)) ? '▾' : '▸'}</button> ` : '';
  const rowKey = (r) => `${r.child ? 'address' : 'function'}\u0000${r.module}\u0000${r.name}\u0000${r.more ?? ''}`;
  const shown = rows.slice(first, last).map((r) => [rowKey(r), r.child ? sub(r) : `<tr class="link" data-function="${attr(r.name)}" title="${esc(r.name)}: show its source lines"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td>
    <td>${pct(r.total_pct)}</td>${v.diff ? `<td class="muted">${pct(r.baseline_self_pct)}</td>${delta(r.delta_self_pct)}${delta(r.delta_total_pct)}` : ''}<td class="num" title="${attr(r.self)}">${amount(r.self, v.unit)}</td><td class="name"><button class="sandwich-link" data-sandwich="${attr(r.name)}" title="callers and callees of ${attr(visible(r.name))}">⇅</button> ${toggle(r)}${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`]);
  syncRows($('#functions tbody'), [spacer(first, 'above'), ...shown, spacer(rows.length - last, 'below')].filter(([, html]) => html));
}

export function init(context) {
  app = context;
  $('#functions').addEventListener('click', (e) => {
    const expand = e.target.closest('[data-expand]');
    if (expand) {
      const key = expand.dataset.expand;
      if (v.expanded.has(key)) { v.expanded.delete(key); draw(); return; }
      const r = v.functions.find((f) => groupKey(f) === key);
      if (r) loadAddresses(v.session, v.q, r).then((rows) => { v.expanded.set(key, rows); draw(); }).catch((err) => app.showError(err.message));
      return;
    }
    const th = e.target.closest('th[data-sort]');
    if (th) { v.desc = v.sort === th.dataset.sort ? !v.desc : true; v.sort = th.dataset.sort; $('#functions-scroll').scrollTop = 0; draw(); }
  });
  $('#filter').addEventListener('input', () => { $('#functions-scroll').scrollTop = 0; draw(); });
  $('#functions-scroll').addEventListener('mouseleave', () => { if (v.frozen) { v.frozen = false; draw(); } });
  let frame = 0;
  $('#functions-scroll').addEventListener('scroll', () => {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; drawRows(); });
  });
}
