// Every session, from a session's Sessions tab: open one, compare against it (the baseline),
// delete it, export it in five formats; and import a recording (perf.data or perf script
// text), which streams through the collector as it uploads, its progress from the live
// stream's `import` events. The store's 'baseline' action (data-baseline="ID" anywhere)
// compares against that session ("" stops comparing).
import { read as hashState, update as setHash } from '../state.js';
import { store } from '../store.js';
import { attr, count, duration, esc, mib, processOf, started } from '../format.js';
import { api, exportUrl, importUrl, sessionPage, sessionUrl } from '../api.js';
import { $, syncRows } from '../util.js';

let app; // {rerender, showError}
let importing = null; // { file, abort } while an upload runs

// Every session, samples or not.
export const withoutSamples = true;

export async function render(s, r) {
  const { sessions } = await sessionPage({ limit: 500 });
  r.stillWanted();
  $('#baseline-info').innerHTML = s.baseline
    ? `comparing against <b>${esc(s.baseline)}</b>: functions gain a Δ column, the flame graph turns red where time grew and blue where it shrank. <button data-baseline="">stop comparing</button>`
    : 'choose a baseline to compare this session against';
  const formats = ['collapsed', 'json', 'svg', 'speedscope', 'pprof'];
  syncRows($('#all-sessions tbody'), sessions.map((x) => [x.id, `<tr title="${attr(x.id)}">
    <td><a href="#session=${encodeURIComponent(x.id)}">${started(x) || esc(x.id)}</a>${x.id === s.session ? ' (this one)' : ''}</td><td class="name">${processOf(x)}</td><td>${esc(x.hostname ?? '')}</td>
    <td class="num">${duration(x.duration_sec)}</td><td class="num">${count(x.samples)}</td><td>${x.live ? '<b>live</b>' : x.imported ? 'imported' : 'saved'}</td>
    <td>${x.id !== s.session ? `<button data-baseline="${attr(x.id)}">baseline</button>` : ''} ${x.live ? '' : `<button data-delete="${attr(x.id)}">delete</button>`}</td>
    <td>${formats.map((f) => `<a href="${attr(exportUrl(x.id, f))}" download>${f}</a>`).join(' ')}</td></tr>`]));
}

export function clear() {
  $('#baseline-info').textContent = '';
  $('#all-sessions tbody').innerHTML = '';
}

// The stream's `import` events: the upload under way, as the collector reads it.
export function live(kind, d) {
  if (kind !== 'import' || !importing || !['receiving', 'converting', 'parsing'].includes(d.phase)) return;
  const of = d.total ? ` of ${mib(d.total)}` : '';
  const what = d.phase === 'converting' ? 'running perf script on' : 'importing';
  $('#import-state').innerHTML = `${what} ${esc(importing.file.name)}: ${mib(d.bytes)}${of} MiB, ${Number(d.samples).toLocaleString()} samples <button id="import-cancel">cancel</button>`;
}

// Cancelling aborts the upload, and the collector keeps nothing of it.
async function importRecording(file) {
  importing = { file, abort: new AbortController() };
  $('#import-state').innerHTML = `importing ${esc(file.name)}… <button id="import-cancel">cancel</button>`;
  let body;
  try { body = await api(importUrl(file.name), { method: 'POST', body: file, signal: importing.abort.signal }); }
  catch (e) { $('#import-state').textContent = importing.abort.signal.aborted ? `import of ${file.name} cancelled` : e.message; importing = null; return; }
  importing = null;
  $('#import-state').textContent = '';
  setHash({ session: body.session_id, tab: 'functions', baseline: null, start: null, end: null, file: null, zoom: null, tid: null, event: null });
}

export function init(context) {
  app = context;
  $('#import-file').addEventListener('change', (e) => { if (e.target.files[0]) importRecording(e.target.files[0]); });
  $('#import-state').addEventListener('click', (e) => { if (e.target.id === 'import-cancel') importing?.abort.abort(); });
  $('#all-sessions').addEventListener('click', async (e) => {
    const del = e.target.closest('button[data-delete]');
    if (del && confirm(`Delete session ${del.dataset.delete} and its recording?`)) {
      try { await api(sessionUrl(del.dataset.delete), { method: 'DELETE' }); store.forget(del.dataset.delete); }
      catch (err) { $('#import-state').textContent = err.message; }
      if (del.dataset.delete === hashState().session) location.hash = ''; else app.rerender();
    }
  });
  store.subscribe((what, id) => { if (what === 'baseline') setHash({ baseline: id || null, tab: id ? 'functions' : 'sessions' }); });
}
