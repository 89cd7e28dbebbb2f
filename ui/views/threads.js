// Every thread of the session's view: its samples, its share and its top functions; a row
// filters every tab by that thread.
import { update as setHash } from '../state.js';
import { store } from '../store.js';
import { esc, pct } from '../format.js';
import { sessionUrl } from '../api.js';
import { $, syncRows } from '../util.js';

export async function render(s, r) {
  const threads = await store.view(s.session, sessionUrl(s.session, 'threads', r.q));
  r.stillWanted();
  syncRows($('#threads tbody'), threads.map((t) => [String(t.tid), `<tr class="link" data-tid="${t.tid}"><td>${t.tid}</td><td>${esc(t.comm)}</td><td>${t.samples}</td><td>${pct(t.pct)}</td>
    <td class="name">${t.top_functions.slice(0, 3).map((f) => `${esc(f.name)} (${pct(f.self_pct)}%)`).join(', ')}</td></tr>`]));
}

export function clear() {
  $('#threads tbody').innerHTML = '';
}

export function init() {
  $('#threads').addEventListener('click', (e) => {
    const row = e.target.closest('tr[data-tid]');
    if (row) setHash({ tid: row.dataset.tid, tab: 'functions' });
  });
}
