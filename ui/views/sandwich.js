// Callers and callees of one function (fn= in the URL), with the same filters as the other
// tabs. Anything marked data-sandwich="NAME" anywhere on the page opens it.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { amount, attr, esc, pct, unitOf, visible } from '../format.js';
import { $ } from '../util.js';

export async function render(s, r) {
  if (!s.fn) { clear(); return; }
  const d = await store.view(s.session, `/api/sessions/${encodeURIComponent(s.session)}/sandwich?${r.q}&function=${encodeURIComponent(s.fn)}`).catch((e) => {
    clear();
    throw e; // nothing of the last answer stays under the error
  });
  r.stillWanted();
  const unit = unitOf(d);
  const row = (x, self) => `<tr class="link" data-sandwich="${attr(x.name)}" title="callers and callees of ${attr(visible(x.name))}">${self ? `<td class="num">${pct(x.self_pct)}</td>` : ''}
    <td class="num"><span class="bar" style="width:${Math.min(60, x.total_pct * 0.6)}px"></span>${pct(x.total_pct)}</td><td class="num">${amount(x.total, unit)}</td>
    <td class="name">${esc(x.name)}</td><td class="muted module" title="${esc(x.module)}"><bdi>${esc(x.module)}</bdi></td></tr>`;
  const none = (cols, what) => `<tr><td colspan="${cols}" class="muted">${what}</td></tr>`;
  $('#callers tbody').innerHTML = d.callers.map((x) => row(x, false)).join('') || none(4, 'none: it is where these stacks begin');
  $('#callees tbody').innerHTML = d.callees.map((x) => row(x, true)).join('') || none(5, 'none: its time is its own');
  const f = d.function;
  $('#sandwich-fn').innerHTML = `${esc(f.name)} <span class="muted">self ${pct(f.self_pct)} % (${amount(f.self, unit)}) · total ${pct(f.total_pct)} % (${amount(f.total, unit)})</span>
    <button data-source-of="${attr(f.name)}">source</button>`;
  $('#sandwich-info').textContent = '';
  $('#tab-sandwich').dataset.shows = f.name;
}

export function clear() {
  $('#sandwich-fn').textContent = '';
  $('#callers tbody').innerHTML = '';
  $('#callees tbody').innerHTML = '';
  delete $('#tab-sandwich').dataset.shows;
}

export function init() {
  document.addEventListener('click', (e) => {
    const to = e.target.closest('[data-sandwich]');
    if (to) { e.preventDefault(); setHash({ tab: 'sandwich', fn: to.dataset.sandwich }); }
  });
}
