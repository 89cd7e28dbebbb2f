// Callers and callees of one function (fn= in the URL), as speedscope's sandwich shows them:
// two flame graphs with the function on top — below it, in one, who called it down to where
// the stacks begin; in the other, what it called — and the next level of each as tables. The
// same filters as the other tabs. Opened by the store's 'callers' action (data-sandwich="NAME"
// anywhere on the page); a click on a frame opens that frame's.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, attr, esc, pct, unitOf, visible } from '../format.js';
import { boxAt, diffNote, flameLegend, paintFlame, ROW_H } from '../flame_canvas.js';
import { sessionUrl } from '../api.js';
import { $, blankCanvas, hoverTip, transformQuery } from '../util.js';

const MIN_PCT = 0.05; // frames under this share of the total are not asked for

export async function render(s, r) {
  if (!s.fn) { clear(); return; }
  const shape = transformQuery(s, { focus: false }); // its own focus: the function
  const [d, up, down] = await Promise.all([
    store.view(s.session, sessionUrl(s.session, 'sandwich', r.q, { function: s.fn })),
    store.view(s.session, sessionUrl(s.session, 'flamegraph', r.q, shape, { focus: s.fn, callers: 1, min_pct: MIN_PCT })),
    store.view(s.session, sessionUrl(s.session, 'flamegraph', r.q, shape, { focus: s.fn, min_pct: MIN_PCT })),
  ]).catch((e) => {
    clear();
    throw e; // nothing of the last answer stays under the error
  });
  r.stillWanted();
  const unit = unitOf(d);
  const row = (x, self) => `<tr class="link" data-sandwich="${attr(x.name)}" title="callers and callees of ${attr(visible(x.name))}">${self ? `<td class="num">${pct(x.self_pct)}</td>` : ''}
    <td class="num"><span class="bar" style="width:${Math.min(60, x.total_pct * 0.6)}px"></span>${pct(x.total_pct)}</td><td class="num">${amount(x.total, unit)}</td>
    <td class="name">${esc(x.name)}</td><td class="muted module" title="${esc(x.module)}"><bdi>${esc(x.module)}</bdi></td></tr>`;
  const none = (cols, what) => `<tr><td colspan="${cols}" class="muted">${what}</td></tr>`;
  const more = (n, cols) => (n ? none(cols, `… ${n.toLocaleString()} more, lighter`) : '');
  $('#callers tbody').innerHTML = (d.callers.map((x) => row(x, false)).join('') || none(4, 'none: it is where these stacks begin')) + more(d.callers_more, 4);
  $('#callees tbody').innerHTML = (d.callees.map((x) => row(x, true)).join('') || none(5, 'none: its time is its own')) + more(d.callees_more, 5);
  const f = d.function;
  $('#sandwich-fn').innerHTML = `${esc(f.name)} <span class="muted">self ${pct(f.self_pct)} % (${amount(f.self, unit)}) · total ${pct(f.total_pct)} % (${amount(f.total, unit)})</span>
    <button data-source-of="${attr(f.name)}">source</button>`;
  $('#sandwich-info').textContent = '';
  drawHalf('callers', up, unit, 'called by');
  drawHalf('callees', down, unit, 'calls');
  $('#tab-sandwich').dataset.shows = f.name;
}

// One half: the focused function's node (the graph's only child of its root) on top.
function drawHalf(which, flame, unit, verb) {
  const canvas = $(`#${which}-flame`);
  const top = flame.root.children?.[0];
  if (!top) { blankCanvas(canvas); $(`#${which}-legend`).textContent = ''; return; }
  const boxes = paintFlame(canvas, top, { total: flame.total });
  const whole = flame.total || 1;
  hoverTip(canvas, $(`#${which}-tip`), boxes, ROW_H, (b) => `<b>${esc(b.n.name)}</b><br><span class="muted">${esc(b.n.module || '')}</span><br>
    ${b.y === 0 ? 'every stack through it' : `${verb} on this path`}: ${amount(b.n.value, unit)} (${pct(100 * b.n.value / whole)} % of the total)${diffNote(b.n, flame.total)}<br><span class="muted">click: its own callers and callees</span>`);
  canvas.onclick = (e) => {
    const b = boxAt(canvas, boxes, e);
    if (b && b.y > 0) setHash({ fn: b.n.name });
  };
  $(`#${which}-legend`).innerHTML = flameLegend(boxes) + (flame.small_frames_hidden ? ` · <span class="muted">${flame.small_frames_hidden} frames under ${MIN_PCT} % left out</span>` : '');
}

export function clear() {
  $('#sandwich-fn').textContent = '';
  $('#callers tbody').innerHTML = '';
  $('#callees tbody').innerHTML = '';
  for (const which of ['callers', 'callees']) { blankCanvas($(`#${which}-flame`)); $(`#${which}-legend`).textContent = ''; }
  delete $('#tab-sandwich').dataset.shows;
}

export function init() {
  store.subscribe((what, fn) => { if (what === 'callers') setHash({ tab: 'sandwich', fn }); });
}
