// What the UI's modules share: DOM and text helpers (the API's calls are api.js's).
export const $ = (s) => document.querySelector(s);
// Formatting is format.js's; re-exported for the modules that take it from here.
export { amount, attr, esc, mib, pct, unitOf, visible } from './format.js';

// The filter box's text as a case-blind regex: {re} (null when empty), or {error} while the
// pattern is incomplete ("hash_(") — the views then show everything and say why.
export function filterRegex(text) {
  if (!text) return { re: null };
  try { return { re: new RegExp(text, 'i') }; } catch (e) { return { re: null, error: e.message.replace(/^Invalid regular expression: /, '') }; }
}

// The filter box's text when it is plain text (matched by the collector), '' when it is a
// pattern with regex syntax (matched in the page) or empty.
export const plainMatch = (text) => (text && !/[\\^$.|?*+()[\]{}]/.test(text) ? text : '');

// The same elements with the same attributes, in the same places; text may differ.
const sameChildren = (a, b) => a.childNodes.length === b.childNodes.length && [...a.childNodes].every((c, i) => sameShape(c, b.childNodes[i]));
function sameShape(a, b) {
  if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) return false;
  if (a.nodeType === Node.ELEMENT_NODE &&
    (a.attributes.length !== b.attributes.length || [...b.attributes].some((x) => a.getAttribute(x.name) !== x.value))) return false;
  return sameChildren(a, b);
}
function copyText(a, b) {
  if (a.nodeType === Node.TEXT_NODE) { if (a.data !== b.data) a.data = b.data; return; }
  a.childNodes.forEach((c, i) => copyText(c, b.childNodes[i]));
}
// An element's content set from HTML: where only text changed, the text is updated and every
// element stays, so a live view redrawn with each event never replaces a button under a click
// (a press on one element and a release on its copy is no click at all).
export function setHtml(el, html) {
  const t = document.createElement('template');
  t.innerHTML = html;
  if (sameChildren(el, t.content)) copyText(el, t.content);
  else el.replaceChildren(t.content);
}

// Rows updated in place: `rows` is [[key, '<tr …>…</tr>'], …]. A row with the same key keeps
// its element; a cell whose elements are the same has its text updated, only a cell whose
// elements changed is replaced, so a table that refreshes with every live event never takes
// a row or button from under a click. A key seen twice is told apart by its count.
export function syncRows(tbody, rows) {
  const t = document.createElement('template');
  t.innerHTML = `<table><tbody>${rows.map(([, html]) => html).join('')}</tbody></table>`;
  const fresh = [...t.content.querySelector('tbody').rows];
  const had = new Map();
  for (const r of [...tbody.rows]) if (r.dataset.rowKey === undefined) r.remove(); else had.set(r.dataset.rowKey, r);
  const seen = new Map();
  rows.forEach(([key], i) => {
    const next = fresh[i];
    const n = seen.get(key) ?? 0;
    seen.set(key, n + 1);
    next.dataset.rowKey = n ? `${key}\u0000${n}` : key;
    let row = had.get(next.dataset.rowKey);
    if (!row) row = next;
    else {
      had.delete(next.dataset.rowKey);
      for (const a of [...row.attributes]) if (!next.hasAttribute(a.name)) row.removeAttribute(a.name);
      for (const a of [...next.attributes]) if (row.getAttribute(a.name) !== a.value) row.setAttribute(a.name, a.value);
      const cells = [...next.cells];
      cells.forEach((c, j) => { const old = row.cells[j]; if (!old) row.append(c); else if (sameShape(old, c)) copyText(old, c); else old.replaceWith(c); });
      while (row.cells.length > cells.length) row.cells[row.cells.length - 1].remove();
    }
    if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] ?? null);
  });
  for (const r of had.values()) r.remove();
}

// The box under the pointer of a canvas of boxes ({x, y, w} in CSS pixels, rows `rowH` high),
// described in a floating tooltip next to it.
export function hoverTip(canvas, tip, boxes, rowH, describe) {
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

// A canvas emptied: nothing drawn, no height, no count of boxes for a reader to wait on.
export function blankCanvas(canvas) {
  canvas.width = 0; canvas.height = 0; canvas.style.height = '0px'; delete canvas.dataset.boxes;
}

// A ';'-joined list of the URL (hide=, drop=, collapse=) with `item` added last, or taken out (null
// when nothing is left).
export const addTo = (list, item) => [...(list ? list.split(';') : []).filter((x) => x !== item), item].join(';');
export const takeFrom = (list, item) => (list ? list.split(';') : []).filter((x) => x !== item).join(';') || null;

// The transforms the URL applies to every view of stacks (the function table, the trees, the
// timeline's chart): a focus, functions merged into their callers, stacks dropped, recursion collapsed,
// modules collapsed — as the answers' parameters. `focus: false` leaves the focus out (a
// view that sets its own).
export function transformQuery(s, { focus = true } = {}) {
  const q = new URLSearchParams();
  if (focus && s.focus) q.set('focus', s.focus);
  if (s.hide) q.set('hide', s.hide);
  if (s.drop) q.set('drop', s.drop);
  if (s.recursion) q.set('recursion', s.recursion);
  if (s.collapse) q.set('collapse', s.collapse);
  return q;
}
// How the URL shapes a tree (the flame graph's and the call tree's): bottom-up, and the
// transforms.
export function shapeQuery(s) {
  const shape = transformQuery(s);
  if (s.inverted) shape.set('inverted', '1');
  return shape;
}
