// The call tree as a table, as Hotspot and perf report show it: top-down (from where the
// stacks begin to what they call) or bottom-up (each sampled function, then who called it),
// total and self per row, a row opened by a click (Alt-click opens all below it). The
// heaviest path is open at first. The same shape as the flame graph (its focus, hidden
// functions, collapsed recursion), from the same answer.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, attr, deltaCell, esc, largestChange, pct, unitOf, visible } from '../format.js';
import { sessionUrl } from '../api.js';
import { $, shapeQuery } from '../util.js';

const MIN_PCT = 0.01; // rows under this share of the total are not asked for
const MAX_ROWS = 3000; // rows drawn at most (the rest say how many)

let v = { tree: null, key: null, open: new Set(), unit: 'count', opened: null };

const pathKey = (path) => path.join('\u001f');

export async function render(s, r) {
  $('#tree-inverted').checked = s.inverted;
  const shape = shapeQuery(s);
  const tree = await store.view(s.session, sessionUrl(s.session, 'flamegraph', r.q, shape, { min_pct: MIN_PCT }));
  r.stillWanted();
  r.pickedEvent(tree.event);
  // Another session or direction: the rows opened before mean nothing here; the heaviest
  // path is opened again.
  const which = `${s.session}|${shape}`;
  if (v.opened !== which) { v.open = heaviestPath(tree.root); v.opened = which; }
  v.tree = tree; v.unit = unitOf(tree);
  draw();
}

// Every node below the root as [delta, noise], for the deepest colour.
function* changes(n) {
  for (const c of n.children || []) { yield [c.delta_pct, c.noise_pct]; yield* changes(c); }
}
const nodeDelta = (n, scale) => deltaCell(n.delta_pct, n.noise_pct, scale, `baseline ${pct(n.baseline_pct)} % → ${pct(n.delta_pct + n.baseline_pct)} %`);

// The path down the heaviest child while it holds at least half of its parent.
function heaviestPath(root) {
  const open = new Set([pathKey([])]);
  let n = root, path = [];
  for (let depth = 0; depth < 64; ++depth) {
    const c = (n.children || [])[0];
    if (!c || c.value < n.value / 2) break;
    path = [...path, c.name]; n = c;
    open.add(pathKey(path));
  }
  return open;
}

function draw() {
  const t = v.tree;
  if (!t) return;
  const whole = t.total || 1, rows = [];
  // Compared with a baseline: a Δ column, and the paths of the baseline alone (value 0).
  const compared = t.baseline != null, scale = compared ? largestChange(changes(t.root)) : 0;
  for (const th of document.querySelectorAll('#calltree th.diff')) th.hidden = !compared;
  let hidden = 0;
  const walk = (n, path, depth) => {
    for (const c of n.children || []) {
      const p = [...path, c.name];
      if (rows.length >= MAX_ROWS) { ++hidden; continue; }
      const open = v.open.has(pathKey(p)), leaf = !(c.children || []).length;
      rows.push(`<tr data-path="${attr(pathKey(p))}" class="${open ? 'open' : ''}${c.value ? '' : ' gone'}"><td class="num"><span class="bar" style="width:${Math.min(60, 60 * c.value / whole)}px"></span>${pct(100 * c.value / whole)}</td>
        <td class="num">${pct(100 * (c.self || 0) / whole)}</td>${compared ? nodeDelta(c, scale) : ''}<td class="num">${amount(c.value, v.unit)}</td>
        <td class="name" style="padding-left:${0.6 + depth * 1.1}em"><span class="twisty">${leaf ? '' : open ? '▾' : '▸'}</span>${esc(c.name)}</td>
        <td class="muted module" title="${esc(c.module || '')}"><bdi>${esc((c.module || '').split('/').pop())}</bdi></td></tr>`);
      if (open) walk(c, p, depth + 1);
    }
  };
  walk(t.root, [], 0);
  $('#calltree tbody').innerHTML = rows.join('') + (hidden ? `<tr><td colspan="${compared ? 6 : 5}" class="muted">… ${hidden} more rows: close some, or focus on a function</td></tr>` : '');
  $('#calltree-info').textContent = `${t.inverted ? 'bottom-up: each sampled function, then who called it' : 'top-down: from where the stacks begin to what they call'} · total and self in % of ${amount(t.total, v.unit)}`
    + (t.focus ? ` · focused on ${visible(t.focus)}` : '') + (compared ? ` · Δ against ${t.baseline} in points of each session's total` : '') + (t.small_frames_hidden ? ` · ${t.small_frames_hidden} rows under ${MIN_PCT} % left out` : '');
  $('#tab-calltree').dataset.shows = `${t.inverted ? 'bottom-up' : 'top-down'} ${rows.length}`;
}

export function clear() {
  v = { tree: null, key: null, open: new Set(), unit: 'count', opened: null };
  $('#calltree tbody').innerHTML = '';
  $('#calltree-info').textContent = '';
  delete $('#tab-calltree').dataset.shows;
}

export function waiting() {
  $('#calltree-info').textContent = 'waiting for samples…';
}

export function init() {
  $('#calltree').addEventListener('click', (e) => {
    const tr = e.target.closest('tr[data-path]');
    if (!tr || !v.tree) return;
    const key = tr.dataset.path;
    if (v.open.has(key) && !e.altKey) {
      for (const k of [...v.open]) if (k === key || k.startsWith(key + '\u001f')) v.open.delete(k);
    } else {
      v.open.add(key);
      if (e.altKey) { // everything below it
        let n = v.tree.root;
        for (const name of key.split('\u001f')) n = n?.children?.find((c) => c.name === name);
        const all = (m, path) => { for (const c of m?.children || []) { const p = [...path, c.name]; v.open.add(pathKey(p)); all(c, p); } };
        all(n, key.split('\u001f'));
      }
    }
    draw();
  });
  $('#calltree').addEventListener('dblclick', (e) => {
    const tr = e.target.closest('tr[data-path]');
    if (tr) setHash({ tab: 'sandwich', fn: tr.dataset.path.split('\u001f').pop() });
  });
  $('#tree-inverted').addEventListener('change', (e) => setHash({ inverted: e.target.checked ? '1' : null, zoom: null }));
}
