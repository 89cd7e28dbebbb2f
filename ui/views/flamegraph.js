// The flame graph: top-down or bottom-up, zoomed by a click (the path in the URL), focused on a
// function or with functions hidden (pprof's -focus and -hide, from a right-click), the
// header's filter highlighting what matches. Frames narrower than half a pixel at the zoom
// shown are neither asked for nor drawn ("N small frames hidden").
import { read as hashState, update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, attr, count, esc, pct, unitOf, visible } from '../format.js';
import { boxAt as boxAtPointer, diffNote, flameLegend, paintFlame, ROW_H } from '../flame_canvas.js';
import { sessionUrl } from '../api.js';
import { $, addTo, blankCanvas, filterRegex, hoverTip, setHtml, shapeQuery } from '../util.js';

// flame: the answer drawn; key: what it answers; base: the same without the zoom; wanted: the
// key of the latest render; pending: an answer held while the pointer is on the graph.
let v = { flame: null, zoomPath: [], key: null, base: null, wanted: null, pending: null, baseFlame: null, baseId: null };

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
  const x = (50 / Math.max(200, $('#flame').clientWidth || 800)) * share;
  if (!(x > 0)) return 0;
  const p = 10 ** (Math.floor(Math.log10(x)) - 1);
  return Number((Math.floor(x / p) * p).toPrecision(2));
}

export async function render(s, r) {
  $('#inverted').checked = s.inverted;
  const shape = shapeQuery(s);
  const key = `${s.session}?${r.q}&${shape}&${s.zoom || ''}`;
  v.wanted = key;
  // The threshold follows the zoomed frame's share of the whole (from the graph already shown
  // when it is the same one, else from a first answer).
  const base = `${s.session}?${r.q}&${shape}`;
  const path = (share) => sessionUrl(s.session, 'flamegraph', r.q, shape, { min_pct: minPctFor(share) });
  let share = v.base === base ? zoomShare(v.flame, s.zoom) : 1;
  let flame = await store.view(s.session, path(share));
  const actual = zoomShare(flame, s.zoom);
  if (minPctFor(actual) < minPctFor(share)) { share = actual; flame = await store.view(s.session, path(share)); }
  r.stillWanted();
  v.base = base;
  r.pickedEvent(flame.event);
  // New numbers for the same graph while its menu is open: drawn when it closes. Under the
  // pointer, drawn at once with every frame's children in the order shown, so frames grow and
  // shrink in place without changing places.
  if (key === v.key && !$('#flame-menu').hidden) { v.pending = { key, flame }; return; }
  if (key === v.key && $('#flame-box').matches(':hover') && v.flame) keepOrder(flame.root, v.flame.root);
  v.key = key; v.pending = null;
  v.flame = flame; v.zoomPath = s.zoom ? s.zoom.split(';') : [];
  // Compared: the baseline's own graph beside (its whole profile, the same event and weight),
  // as Pyroscope's diff shows both.
  v.baseFlame = null;
  if (s.baseline && flame.baseline) {
    const q = new URLSearchParams({ weight: s.weight, min_pct: String(minPctFor(1)) });
    if (s.event) q.set('event', s.event);
    v.baseFlame = await store.view(s.baseline, sessionUrl(s.baseline, 'flamegraph', q)).catch(() => null);
    r.stillWanted();
    // Side by side, the same functions in the same places: the baseline's children in this
    // session's order (what it has alone after).
    if (v.baseFlame) keepOrder(v.baseFlame.root, flame.root);
  }
  v.baseId = s.baseline;
  draw();
}

// Orders `fresh`'s children, at every depth, as `shown`'s were (by name; new ones after).
function keepOrder(fresh, shown) {
  const todo = [[fresh, shown]];
  while (todo.length) {
    const [a, b] = todo.pop();
    if (!a.children?.length || !b.children?.length) continue;
    const rank = new Map(b.children.map((c, i) => [c.name, i]));
    a.children.sort((x, y) => (rank.get(x.name) ?? Infinity) - (rank.get(y.name) ?? Infinity) || y.value - x.value);
    for (const c of a.children) { const twin = b.children[rank.get(c.name)]; if (twin) todo.push([c, twin]); }
  }
}

export function waiting() {
  $('#flame-legend').textContent = 'waiting for samples…';
}

export function clear() {
  for (const id of ['#flame-tip', '#crumbs', '#flame-legend']) $(id).textContent = '';
  $('#flame-sandwich').hidden = true; $('#flame-menu').hidden = true;
  v = { flame: null, zoomPath: [], key: null, base: null, wanted: null, pending: null, baseFlame: null, baseId: null };
  $('#flame-panes').classList.remove('compared'); $('#flame-base-box').hidden = true; $('#flame-diff-title').hidden = true; blankCanvas($('#flame-base'));
  blankCanvas($('#flame')); delete $('#flame').dataset.baseline;
}

function draw() {
  const canvas = $('#flame');
  if (!v.flame) return;
  // The frame zoomed into, its ancestors drawn greyed above it (a click on one zooms out to it).
  let root = v.flame.root;
  const ancestors = [];
  for (const name of v.zoomPath) {
    const c = root.children?.find((x) => x.name === name);
    if (!c) break;
    ancestors.push(root); root = c;
  }
  const { re } = filterRegex($('#filter').value);
  $('#flame-panes').classList.toggle('compared', !!v.baseFlame);
  $('#flame-base-box').hidden = !v.baseFlame;
  $('#flame-diff-title').hidden = !v.baseFlame;
  if (v.baseFlame) drawBase(ancestors.length ? v.zoomPath : []);
  const boxes = paintFlame(canvas, root, { match: re, rootLabel: v.flame.focus ? `all stacks through ${visible(v.flame.focus)}` : null, dim: ancestors, total: v.flame.total });
  const rowH = ROW_H;
  canvas.dataset.inverted = v.flame.inverted ? '1' : '';
  canvas.dataset.baseline = v.baseFlame ? v.baseId : ''; // the baseline drawn beside, for a reader that waits on it
  // The transforms of the answer drawn (a graph still on its way is not taken for it).
  canvas.dataset.shape = [v.flame.focus || '', (v.flame.hide || []).join(';'), (v.flame.drop || []).join(';'), (v.flame.collapse || []).join(';'), v.flame.collapse_recursion ? 'collapse' : ''].join('|');
  // A floating tooltip: the frame, its module, self and total in the view's unit and share.
  const unit = unitOf(v.flame);
  const share = (x) => `${amount(x, unit)} (${pct(100 * x / (v.flame.total || 1))} %)`;
  hoverTip(canvas, $('#flame-tip'), boxes, rowH, (b) => `<b>${esc(b.n.name)}</b><br><span class="muted">${esc(b.n.module || '')}</span><br>
    total ${share(b.n.value)} · self ${share(b.n.self || 0)} · ${count(b.n.samples)} samples<br><span class="muted">right-click: focus, hide, drop</span>${diffNote(b.n, v.flame.total)}`);
  // The search's reach: the share of the total under frames that match (nested matches once).
  let matched = 0;
  if (re) {
    const walkMatch = (n) => { if (re.test(n.name)) { matched += n.value; return; } for (const c of n.children || []) walkMatch(c); };
    walkMatch(root);
  }
  const legend = flameLegend(boxes);
  const small = v.flame.small_frames_hidden;
  const hiddenNote = small ? ` · <span class="muted" title="frames under half a pixel wide at this zoom are not sent; zoom in to see them">${count(small)} small ${small === 1 ? 'frame' : 'frames'} hidden</span>` : '';
  const through = v.flame.focus ? `stacks through <b>${esc(v.flame.focus)}</b>: ${pct(100 * v.flame.root.value / (v.flame.total || 1))} % of the total · ` : '';
  $('#flame-legend').innerHTML = through + (re ? `<b>matched ${pct(100 * matched / (root.value || 1))} %</b> of ${v.zoomPath.length ? 'this frame' : 'the total'} · ` : '') + legend + hiddenNote;
  const boxAt = (e) => boxAtPointer(canvas, boxes, e);
  // Right-click: focus on the frame's function (every stack through it, from there down) or
  // hide it from every stack, as pprof's -focus and -hide do, or drop every sample through it
  // (Firefox Profiler's "drop samples with this function": a wait kind such as [preempted]).
  canvas.oncontextmenu = (e) => {
    const b = boxAt(e);
    if (!b || b.y === 0 || b.dimmed) return;
    e.preventDefault();
    const menu = $('#flame-menu'), r = canvas.getBoundingClientRect();
    menu.dataset.name = b.n.name;
    menu.dataset.module = b.n.module || '';
    $('#flame-menu-name').textContent = visible(b.n.name);
    // The focused function itself: hiding it would leave nothing, focusing again changes nothing.
    const s = hashState(), focused = b.n.name === s.focus;
    for (const act of ['focus', 'hide', 'drop']) menu.querySelector(`[data-act="${act}"]`).hidden = focused;
    // A module already one frame, or none known, has nothing to collapse.
    menu.querySelector('[data-act="collapse"]').hidden = !b.n.module || (s.collapse || '').split(';').includes(b.n.module);
    menu.style.left = `${Math.min(e.clientX - r.left, r.width - 260)}px`;
    menu.style.top = `${e.clientY - r.top + 4}px`;
    menu.hidden = false;
    $('#flame-tip').hidden = true;
  };
  canvas.onclick = (e) => {
    const b = boxAt(e);
    if (b?.dimmed) { v.zoomPath = v.zoomPath.slice(0, b.y / rowH); setHash({ zoom: v.zoomPath.join(';') || null }); return; }
    if (!b || b.y === 0) return;
    const path = []; // names from the zoom root down to the clicked box
    const find = (n, trail) => { if (n === b.n) { path.push(...trail); return true; } return (n.children || []).some((c) => find(c, [...trail, c.name])); };
    find(root, []);
    v.zoomPath = [...v.zoomPath, ...path];
    setHash({ zoom: v.zoomPath.join(';') });
  };
  setHtml($('#crumbs'), crumbs(v.zoomPath));
  const focus = v.zoomPath[v.zoomPath.length - 1];
  $('#flame-sandwich').hidden = !focus;
  if (focus) { $('#flame-sandwich').dataset.sandwich = focus; $('#flame-sandwich').textContent = `⇅ callers and callees of ${visible(focus)}`; }
}

// The baseline's graph, zoomed to the same path as far as it has it.
function drawBase(path) {
  let root = v.baseFlame.root;
  const ancestors = [];
  for (const name of path) {
    const c = root.children?.find((x) => x.name === name);
    if (!c) break;
    ancestors.push(root); root = c;
  }
  const canvas = $('#flame-base');
  const { re } = filterRegex($('#filter').value);
  const boxes = paintFlame(canvas, root, { match: re, dim: ancestors });
  const unit = unitOf(v.baseFlame);
  $('#flame-base-title').textContent = `baseline ${v.baseId}: ${amount(v.baseFlame.total, unit)}, its own colours`;
  $('#flame-diff-title').textContent = 'this session, coloured by the change of each frame\'s share';
  hoverTip(canvas, $('#flame-base-tip'), boxes, ROW_H, (b) => `<b>${esc(b.n.name)}</b><br><span class="muted">${esc(b.n.module || '')}</span><br>
    total ${amount(b.n.value, unit)} (${pct(100 * b.n.value / (v.baseFlame.total || 1))} % of the baseline)`);
}

// The zoom path as breadcrumbs, a run of one function calling itself shown once with a count
// ("recursive_fib ×7"), each crumb still zooming to its own depth.
function crumbs(path) {
  const parts = ['<span data-depth="0">all</span>'];
  for (let i = 0; i < path.length;) {
    let j = i;
    while (j + 1 < path.length && path[j + 1] === path[i]) ++j;
    parts.push(`<span data-depth="${j + 1}" title="${attr(visible(path[i]))}">${esc(path[i])}${j > i ? ` <b>×${j - i + 1}</b>` : ''}</span>`);
    i = j + 1;
  }
  return parts.join(' › ');
}

export function init() {
  $('#tab-flamegraph').addEventListener('click', (e) => {
    const menu = e.target.closest('#flame-menu button');
    if (menu) {
      const name = $('#flame-menu').dataset.name, s = hashState();
      if (menu.dataset.act === 'focus') setHash({ focus: name, zoom: null });
      if (menu.dataset.act === 'hide') setHash({ hide: addTo(s.hide, name), zoom: null });
      if (menu.dataset.act === 'drop') setHash({ drop: addTo(s.drop, name), zoom: null });
      if (menu.dataset.act === 'collapse') setHash({ collapse: addTo(s.collapse, $('#flame-menu').dataset.module), zoom: null });
      if (menu.dataset.act === 'sandwich') setHash({ tab: 'sandwich', fn: name });
    }
    const crumb = e.target.closest('#crumbs span');
    if (crumb) { v.zoomPath = v.zoomPath.slice(0, Number(crumb.dataset.depth)); setHash({ zoom: v.zoomPath.join(';') }); }
  });
  // A choice in the menu, or a click anywhere else, closes it.
  document.addEventListener('click', (e) => {
    if (e.target.closest('#flame-menu button') || !e.target.closest('#flame-menu')) $('#flame-menu').hidden = true;
  });
  // Esc closes the menu, or zooms out one level.
  document.addEventListener('keydown', (e) => {
    const typing = ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement?.tagName);
    if (e.key !== 'Escape' || (typing && document.activeElement === $('#filter'))) return;
    if (!$('#flame-menu').hidden) $('#flame-menu').hidden = true;
    else if (!typing && hashState().tab === 'flamegraph' && v.zoomPath.length) {
      v.zoomPath = v.zoomPath.slice(0, -1);
      setHash({ zoom: v.zoomPath.join(';') || null });
    }
  });
  $('#filter').addEventListener('input', draw);
  $('#flame-box').addEventListener('mouseleave', () => {
    // Only the graph still asked for: one a later render replaces is dropped.
    const pending = v.pending;
    if (pending && $('#flame-menu').hidden) { v.pending = null; if (pending.key === v.wanted) { v.flame = pending.flame; v.key = pending.key; draw(); } }
  });
  $('#inverted').addEventListener('change', (e) => setHash({ inverted: e.target.checked ? '1' : null, zoom: null }));
  window.addEventListener('resize', draw);
}
