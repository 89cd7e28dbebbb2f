// The function table: self and total per function, sortable, filtered by the header's box, a
// baseline's Δ columns when comparing. Only the rows in view are in the DOM, so sorting,
// filtering and scrolling stay fast with tens of thousands of functions. A nameless module's
// "[unknown]" row opens into the addresses its samples fell on.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, attr, count, deltaCell, esc, largestChange, pct, unitOf, visible } from '../format.js';
import { api, sessionUrl } from '../api.js';
import { $, filterRegex, plainMatch, setHtml, syncRows, transformQuery } from '../util.js';

const ROW_H = 24;
const PAGE = 200; // rows per request: a screen is ~40
let app; // {rerender, showError}
// The table asked for (key: session, query, order and filter), the pages of it loaded (page
// number → rows), the rows that match and all rows, and the rows opened into addresses.
let v = { key: null, drawn: 0, table: null, pages: new Map(), asking: new Set(), matched: 0, count: 0, sort: 'self_pct', desc: true, expanded: new Map(), index: new Map() };

// "[unknown]" rows: the code of a module perf could not name, which opens into the addresses
// the samples fell on ("libx.so.1+0x15bc9", as perf report lists them).
const groupKey = (r) => `${encodeURIComponent(r.name)} ${encodeURIComponent(r.module)}`;
async function loadAddresses(session, q, r) {
  const d = await api(sessionUrl(session, 'addresses', q, { function: r.name, module: r.module }));
  const rows = d.addresses.map((a) => ({ child: true, name: a.label, module: a.module, self: a.self, self_pct: a.self_pct }));
  if (d.addresses_total > rows.length) rows.push({ child: true, more: d.addresses_total - rows.length, name: '', module: r.module, self_pct: 0 });
  return rows;
}

// The filter box: plain text is matched by the collector (case-blind, in names and modules),
// a page at a time; a pattern with regex syntax is matched here, over the whole table.
function filterOf() {
  const text = $('#filter').value;
  const { re } = filterRegex(text);
  if (!re) return { match: '', re: null };
  return plainMatch(text) ? { match: text, re: null } : { match: '', re };
}

// The table as a render asks for it: the session's query, the order and the filter as they
// are then (a page asked for later, while scrolling, is of the same table).
function tableOf(session, query) {
  const { match, re } = filterOf();
  const q = new URLSearchParams(query);
  q.set('sort', v.sort);
  q.set('order', v.desc ? 'desc' : 'asc');
  if (match) q.set('match', match);
  const path = (page) => {
    const p = new URLSearchParams(q);
    if (!re) { p.set('offset', String(page * PAGE)); p.set('limit', String(PAGE)); }
    return sessionUrl(session, 'functions', p);
  };
  return { match, re, path };
}

// Page `page` of the table drawn, asked for unless it is here or on its way; drawn when it
// comes, unless another render has drawn the table since.
function wantPage(page) {
  if (v.pages.has(page) || v.asking.has(page)) return;
  const { drawn, table } = v;
  v.asking.add(page);
  store.view(v.session, table.path(page)).then((answer) => {
    if (v.drawn !== drawn) return;
    v.asking.delete(page);
    take(answer, page);
    drawRows();
  }, (e) => { if (v.drawn === drawn) v.asking.delete(page); app.showError(e.message); });
}

// An answer into the pages (a regex answer holds every row: they are filtered and cut here).
function take(answer, page) {
  const { re } = v.table;
  v.count = answer.count ?? answer.functions.length;
  if (re) {
    const rows = answer.functions.filter((r) => re.test(r.name) || re.test(r.module));
    v.matched = rows.length;
    v.pages = new Map();
    for (let p = 0; p * PAGE < rows.length || p === 0; ++p) v.pages.set(p, rows.slice(p * PAGE, (p + 1) * PAGE));
  } else {
    v.matched = answer.matched ?? answer.functions.length;
    v.pages.set(page, answer.functions);
  }
  for (const [p, rows] of v.pages) rows.forEach((r, i) => v.index.set(groupKey(r), p * PAGE + i));
  v.diff = answer.functions.some((r) => r.delta_self_pct != null);
  // The largest change among the rows known: a Δ's colour is as strong as its share of it.
  v.deltaScale = Math.max(v.deltaScale || 0, largestChange(answer.functions.flatMap((r) => [[r.delta_self_pct, r.noise_self_pct], [r.delta_total_pct, r.noise_total_pct]])));
  v.baseline = answer.baseline;
  v.unit = unitOf(answer);
}

// The display rows drawn: those in view and a few either side. (The box is never taller than
// the window; its own height is not known before it holds rows.)
function drawnRows() {
  const first = Math.max(0, Math.floor($('#functions-scroll').scrollTop / ROW_H) - 5);
  return [first, first + Math.ceil(innerHeight / ROW_H) + 10];
}

// The pages the drawn rows fall on (extra rows of opened addresses aside).
function visiblePages() {
  const [first, last] = drawnRows();
  const out = [];
  for (let p = Math.floor(first / PAGE); p <= Math.floor(last / PAGE); ++p) out.push(p);
  return out;
}

// Names read A→Z first, numbers largest first; the URL says so only when it is otherwise.
const TEXT_COLUMNS = new Set(['name', 'module']);
const naturalOrder = (field) => (TEXT_COLUMNS.has(field) ? 'asc' : 'desc');

export async function render(s, r) {
  v.sort = s.sort || 'self_pct';
  v.desc = (s.order || naturalOrder(v.sort)) === 'desc';
  const query = new URLSearchParams([...r.q, ...transformQuery(s)]); // the view's, reshaped
  const key = `${s.session}?${query}|${v.sort}|${v.desc}|${$('#filter').value}`;
  // New numbers for the same table while the pointer is over it: each row's numbers change in
  // place, the rows keep their order (a click lands on the row aimed at) and move when the
  // pointer leaves; how many would move is said meanwhile.
  const steady = key === v.key && $('#functions-scroll').matches(':hover');
  const session = s.session, q = query.toString(), table = steady ? v.table : tableOf(session, q);
  const pages = table.re ? [0] : visiblePages();
  const answers = await Promise.all(pages.map((p) => store.view(session, table.path(p))));
  r.stillWanted();
  if (steady && key === v.key) { updateInPlace(answers, pages); return; }
  if (v.key !== key) { v.expanded = new Map(); v.deltaScale = 0; }
  Object.assign(v, { key, session, q, table, drawn: v.drawn + 1, pages: new Map(), asking: new Set(), index: new Map(), held: 0 });
  answers.forEach((a, i) => take(a, pages[i]));
  for (const [k] of v.expanded) {
    const i = v.index.get(k), row = i != null && v.pages.get(Math.floor(i / PAGE))?.[i % PAGE];
    if (!row) { v.expanded.delete(k); continue; }
    v.expanded.set(k, await loadAddresses(session, q, row).catch(() => []));
  }
  r.stillWanted();
  r.pickedEvent(answers[0].event);
  draw();
  // #functions[data-shows] names the session and query its rows came from: a reader (or a
  // test) waits for the state a filter produces, not for rows that may already have been there.
  $('#functions').dataset.shows = new URLSearchParams([['session', s.session], ...query]).toString();
}

// Fresh answers for the table shown, taken without moving a row: each row known gets its new
// numbers, and a row new to the table (a live session's first seconds) comes in below them, as
// the flame graph adds a new frame after its siblings; v.held counts the places where the fresh
// order differs from the one shown.
function updateInPlace(answers, pages) {
  const fresh = new Map(), order = [];
  answers.forEach((a, i) => {
    const rows = v.table.re ? a.functions.filter((r) => v.table.re.test(r.name) || v.table.re.test(r.module)) : a.functions;
    rows.forEach((r, k) => { fresh.set(groupKey(r), r); order.push([v.table.re ? k : pages[i] * PAGE + k, groupKey(r)]); });
  });
  let loaded = 0;
  for (const rows of v.pages.values()) {
    loaded += rows.length;
    rows.forEach((r, i) => { const n = fresh.get(groupKey(r)); if (n) rows[i] = n; });
  }
  // Added only where every row shown is loaded: a longer table's later pages come in their
  // fresh order when scrolled to.
  if (loaded >= v.matched) {
    for (const [k, r] of fresh) {
      if (v.index.has(k)) continue;
      const i = loaded++, page = Math.floor(i / PAGE);
      if (!v.pages.has(page)) v.pages.set(page, []);
      v.pages.get(page).push(r);
      v.index.set(k, i);
    }
    v.matched = loaded;
  }
  let moved = 0;
  for (const [i, k] of order) { const r = v.pages.get(Math.floor(i / PAGE))?.[i % PAGE]; if (!r || groupKey(r) !== k) ++moved; }
  v.held = moved;
  v.count = answers[0].count ?? v.count;
  draw();
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
  v = { ...v, key: null, session: null, drawn: v.drawn + 1, pages: new Map(), asking: new Set(), index: new Map(), matched: 0, count: 0, expanded: new Map() };
}

function draw() {
  // Only what changed is touched: a live update of the same order repaints only the rows.
  for (const th of document.querySelectorAll('#functions th.diff')) if (th.hidden !== !v.diff) th.hidden = !v.diff;
  for (const th of document.querySelectorAll('#functions th[data-sort]')) {
    const order = th.dataset.sort === v.sort ? (v.desc ? 'desc' : 'asc') : '';
    if (th.dataset.order !== order) th.dataset.order = order;
  }
  const { match, re } = v.table ?? {}, n = v.count.toLocaleString();
  setHtml($('#functions-count'), esc(match || re ? `${v.matched.toLocaleString()} of ${n} functions match` : `${n} functions`) +
    (v.diff && v.baseline ? ` · compared with <b>${esc(v.baseline)}</b>: Δ in points of each session's total: red grew, blue shrank, grey is within the noise <button data-baseline="">stop comparing</button>` : '') +
    (v.held ? ` · <span id="functions-held" title="the numbers stay live; the rows keep their places while the pointer is on the table, and take their new order when it leaves">order held: ${v.held} ${v.held === 1 ? 'row changes' : 'rows change'} place when the pointer leaves</span>` : ''));
  drawRows();
}

// Display rows: the table's rows, each opened one followed by its addresses. [[row index,
// its addresses]] in order, for the rows opened whose place is known.
function opened() {
  const out = [];
  for (const [k, kids] of v.expanded) { const i = v.index.get(k); if (i != null) out.push([i, kids]); }
  return out.sort((a, b) => a[0] - b[0]);
}
// The display row `d`: {row} (undefined while its page is on its way) and its index.
function rowAt(d, open) {
  let shift = 0;
  for (const [i, kids] of open) {
    if (d <= i + shift) break;
    if (d <= i + shift + kids.length) return { row: kids[d - i - shift - 1] };
    shift += kids.length;
  }
  const i = d - shift;
  return { row: v.pages.get(Math.floor(i / PAGE))?.[i % PAGE], index: i };
}

function drawRows() {
  const open = opened();
  const total = v.matched + open.reduce((n, [, kids]) => n + kids.length, 0);
  const [first, drawn] = drawnRows(), last = Math.min(total, drawn);
  const cols = v.diff ? 8 : 5;
  const spacer = (n, key) => [key, n > 0 ? `<tr class="spacer"><td colspan="${cols}" style="height:${n * ROW_H}px"></td></tr>` : ''];
  // Grey within the noise (what sampling alone would move it by); beyond it red (grew) or
  // blue (shrank), as strong as the change, as the compared flame graph colours its frames.
  const delta = (x, noise) => deltaCell(x, noise, v.deltaScale, noise != null ? `±${pct(noise)} points is within the noise of both sessions' samples` : 'Δ in points of each session\'s total');
  const sub = (r) => r.more ? `<tr class="sub"><td></td><td></td>${v.diff ? '<td></td><td></td><td></td>' : ''}<td></td><td class="muted">… ${count(r.more)} more addresses</td><td></td></tr>`
    : `<tr class="sub" title="${attr(r.name)}: an address in ${attr(r.module)}, which has no symbol for it"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td><td></td>${v.diff ? '<td></td><td></td><td></td>' : ''}<td class="num">${amount(r.self, v.unit)}</td><td class="name">${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`;
  const toggle = (r) => r.name === '[unknown]' && r.module && r.module !== '[unknown]' && r.self > 0
    ? `<button class="expand" data-expand="${attr(groupKey(r))}" title="${v.expanded.has(groupKey(r)) ? 'close' : 'the addresses in this module its samples fell on'}">${v.expanded.has(groupKey(r)) ? '▾' : '▸'}</button> ` : '';
  const rowKey = (r) => `${r.child ? 'address' : 'function'}\u0000${r.module}\u0000${r.name}\u0000${r.more ?? ''}`;
  const shown = [];
  for (let d = first; d < last; ++d) {
    const { row: r, index } = rowAt(d, open);
    if (!r) { wantPage(Math.floor(index / PAGE)); shown.push([`pending ${index}`, `<tr class="pending"><td colspan="${cols}" class="muted">…</td></tr>`]); continue; }
    shown.push([rowKey(r), r.child ? sub(r) : `<tr class="link" data-function="${attr(r.name)}" title="${esc(r.name)}: show its source lines and where it was called from"><td><span class="bar" style="width:${Math.min(60, r.self_pct * 0.6)}px"></span>${pct(r.self_pct)}</td>
    <td>${pct(r.total_pct)}</td>${v.diff ? `<td class="muted">${pct(r.baseline_self_pct)}</td>${delta(r.delta_self_pct, r.noise_self_pct)}${delta(r.delta_total_pct, r.noise_total_pct)}` : ''}<td class="num" title="${attr(r.self)}">${amount(r.self, v.unit)}</td><td class="name"><button class="sandwich-link" data-sandwich="${attr(r.name)}" title="callers and callees of ${attr(visible(r.name))}">⇅</button> ${toggle(r)}${esc(r.name)}</td><td class="muted module" title="${esc(r.module)}"><bdi>${esc(r.module)}</bdi></td></tr>`]);
  }
  syncRows($('#functions tbody'), [spacer(first, 'above'), ...shown, spacer(total - last, 'below')].filter(([, html]) => html));
}

export function init(context) {
  app = context;
  $('#functions').addEventListener('click', (e) => {
    // A row opens its function's source; its own buttons (callers and callees, the addresses
    // of a module) are not the row.
    const row = e.target.closest('tr[data-function]');
    if (row && !e.target.closest('[data-sandwich], [data-expand]')) { store.act('source', row.dataset.function); return; }
    const expand = e.target.closest('[data-expand]');
    if (expand) {
      const key = expand.dataset.expand;
      if (v.expanded.has(key)) { v.expanded.delete(key); drawRows(); return; }
      const i = v.index.get(key), r = i != null && v.pages.get(Math.floor(i / PAGE))?.[i % PAGE];
      const shown = v.key; // the rows come for this table only
      if (r) loadAddresses(v.session, v.q, r).then((rows) => { if (v.key === shown) { v.expanded.set(key, rows); drawRows(); } }).catch((err) => app.showError(err.message));
      return;
    }
    const th = e.target.closest('th[data-sort]');
    if (th) {
      // A first click sorts the column its natural way; another click on it turns it round.
      const field = th.dataset.sort;
      const order = v.sort === field ? (v.desc ? 'asc' : 'desc') : naturalOrder(field);
      $('#functions-scroll').scrollTop = 0;
      setHash({ sort: field === 'self_pct' ? null : field, order: order === naturalOrder(field) ? null : order });
    }
  });
  // Typing asks the collector once the typing pauses.
  let typing;
  $('#filter').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { $('#functions-scroll').scrollTop = 0; app.rerender(); }, 150);
  });
  $('#functions-scroll').addEventListener('mouseleave', () => { if (v.held) { v.held = 0; app.rerender(); } });
  let frame = 0;
  $('#functions-scroll').addEventListener('scroll', () => {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; drawRows(); });
  });
}
