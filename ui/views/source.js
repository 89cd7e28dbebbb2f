// Source lines, heat-coloured by their share of the file, the hottest line (or the function's
// own) scrolled to; and where the symbols and sources come from, with the settings that
// change it (PUT /api/config, within the collector's --browse-root). The store's 'source'
// action (data-source-of="NAME" anywhere, a function table row) opens a function's source.
import { read as hashState, update as setHash } from '../state.js';
import { store } from '../store.js';
import { attr, esc, pct, visible } from '../format.js';
import { api, sessionUrl } from '../api.js';
import { $, syncRows } from '../util.js';

let app; // {rerender, showError}
// The function opened, the file it is in, and the line to show (else its hottest).
let focus = { fn: null, file: null, line: null };
let scrolledTo = null; // the session, file, function and line last scrolled to
let renders = 0;

export async function render(s, r) {
  const list = await store.view(s.session, sessionUrl(s.session, 'source', r.q));
  r.stillWanted();
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
  const fn = focus.fn && focus.file === file ? focus.fn : null;
  const src = await store.view(s.session, sessionUrl(s.session, 'source', r.q, { file, function: fn }));
  r.stillWanted();
  const scope = s.tid || s.start || s.end ? ' · <span data-scope>this thread and time window only</span>' : '';
  if (!src.path) $('#source-settings').open = true; // say where the file is, right here
  $('#source-info').innerHTML = esc(`${pct(src.file_pct)}% of the samples · ${src.path ? src.path : 'source file not found here: add its folder or map its build path below'}`) +
    scope + (fn ? ` · <a href="#" data-sandwich="${attr(focus.fn)}">⇅ callers and callees of ${esc(focus.fn)}</a>` : '') + calledFrom(src.called_from) + warnings(src.warnings);
  // Without the file, only the lines that hold samples (their numbers and shares), not
  // thousands of empty rows.
  const lines = src.path ? src.lines : src.lines.filter((l) => l.samples || l.total_value);
  const max = Math.max(...lines.map((l) => l.pct), 1e-9);
  // The heaviest call sites in view (what the calls on a line led to), marked: "this line
  // costs 60 % because of the call on it".
  const calling = lines.filter((l) => l.calls).sort((a, b) => b.total_value - a.total_value).slice(0, 3).map((l) => l.line);
  const focusLine = focus.line && fn ? focus.line : src.focus_line; // a call site opened, else the function's heaviest line
  $('#source tbody').innerHTML = lines.map((l) => {
    const heat = l.pct > 0 ? `style="background: rgba(220,38,38,${(0.12 + 0.6 * l.pct / max).toFixed(2)})"` : '';
    const cls = [l.line === src.hottest_line ? 'hot' : '', l.line === focusLine ? 'focus' : '', calling.includes(l.line) ? 'hot-call' : ''].join(' ').trim();
    const calls = (l.calls || []).map((c) => `<span class="call" title="the call on this line to ${attr(visible(c.name))} led to ${pct(c.pct)} % of the view's samples">→ ${esc(c.name)} ${pct(c.pct)} %</span>`).join(' ');
    return `<tr id="L${l.line}" ${heat} class="${cls}" data-total="${l.total_value || 0}"><td>${l.pct > 0 ? pct(l.pct) : ''}</td><td title="this line and what its calls led to, of the view's samples">${l.total_value ? pct(l.total_pct) : ''}</td><td>${l.samples || ''}</td>
      <td class="muted">${l.line}</td><td class="code">${esc(l.text)}${calls ? ` ${calls}` : ''}</td></tr>`;
  }).join('');
  // Scrolled to the line once per file and function opened: a live update leaves the reader
  // where they scrolled.
  const target = `${s.session}|${file}|${fn}|${focus.line}`;
  if (scrolledTo !== target) {
    const el = document.getElementById('L' + (focusLine || src.hottest_line));
    if (el) { el.scrollIntoView({ block: 'center' }); scrolledTo = target; }
  }
  await renderCode(s, r, fn ? focus.fn : null);
  $('#tab-source').dataset.renders = String(++renders); // each render done, for a reader
}

// Where the function opened was called from: each call's line opens the caller there.
function calledFrom(sites) {
  if (!sites?.length) return '';
  return '<br><span id="called-from">called from: ' + sites.map((c) => {
    const where = c.file ? `${c.file.split('/').pop()}:${c.line}` : `+0x${c.offset.toString(16)}`;
    const what = `${esc(c.function)} <span class="muted">${esc(where)}</span> ${pct(c.pct)} %`;
    return c.file ? `<a href="#" data-call-site data-fn="${attr(c.function)}" data-file="${attr(c.file)}" data-line="${c.line}" title="the call in ${attr(visible(c.function))} at ${attr(c.file)}:${c.line} led to ${pct(c.pct)} % of the view's samples">${what}</a>`
      : `<span title="no line information for ${attr(visible(c.function))}">${what}</span>`;
  }).join(' · ') + '</span>';
}

// The function opened: its machine code beside the lines, the samples that fell on each
// instruction (where the program was when sampled: the leaf's own addresses).
async function renderCode(s, r, name) {
  $('#disasm-box').hidden = !name;
  $('#source-panes').classList.toggle('with-code', !!name);
  if (!name) { $('#disasm tbody').innerHTML = ''; return; }
  const d = await store.view(s.session, sessionUrl(s.session, 'disassembly', r.q, { function: name }))
    .catch((e) => ({ error: e.message, instructions: [] }));
  r.stillWanted();
  $('#disasm-title').textContent = `machine code of ${visible(name)}`;
  const self = (d.instructions || []).reduce((a, i) => a + i.self, 0);
  $('#disasm-info').innerHTML = d.error ? `<span class="warn">${esc(d.error)}</span>`
    : `${esc(d.file)} · ${pct(d.self_pct)} % of the samples in it${d.unmatched ? ` · <span class="warn">${pct(100 * d.unmatched / (d.total || 1))} % at addresses that are no instruction here: another build?</span>` : ''}`;
  const max = Math.max(...(d.instructions || []).map((i) => i.self_pct), 1e-9);
  $('#disasm tbody').innerHTML = (d.instructions || []).map((i) => {
    const heat = i.self ? `style="background: rgba(220,38,38,${(0.12 + 0.6 * i.self_pct / max).toFixed(2)})"` : '';
    return `<tr ${heat} data-offset="${i.offset}"><td>${i.self ? pct(i.self_pct) : ''}</td><td>${i.self ? pct(100 * i.self / (self || 1)) : ''}</td>
      <td class="muted">+0x${i.offset.toString(16)}</td><td class="code">${esc(i.text)}</td></tr>`;
  }).join('');
  $('#disasm-box').dataset.shows = `${name} ${(d.instructions || []).length}`;
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

export function clear() {
  $('#source-info').textContent = '';
  $('#disasm-box').hidden = true; $('#disasm tbody').innerHTML = ''; delete $('#disasm-box').dataset.shows;
  $('#source-panes').classList.remove('with-code');
  for (const id of ['#source tbody', '#source-file', '#symbol-files tbody']) $(id).innerHTML = '';
  focus = { fn: null, file: null, line: null };
  scrolledTo = null;
}

async function openFunctionSource(name) {
  const s = hashState();
  try {
    const src = await api(sessionUrl(s.session, 'source', { function: name }));
    focus = { fn: name, file: src.file, line: null }; // scroll to this function's hottest line
    scrolledTo = null;
    setHash({ tab: 'source', file: src.file });
  } catch (e) { app.showError(e.message); }
}

// A setting changed for this collector, then the view again (names and paths may change).
async function addSourceSetting(change) {
  try {
    const c = await api('/api/config');
    await api('/api/config', { method: 'PUT', body: change(c) });
    $('#source-settings-state').textContent = 'saved; looking again…';
    store.refresh(hashState().session);
    app.rerender();
  } catch (e) { $('#source-settings-state').textContent = e.message; }
}

export function init(context) {
  app = context;
  store.subscribe((what, name) => { if (what === 'source') openFunctionSource(name); });
  $('#tab-source').addEventListener('click', (e) => {
    const call = e.target.closest('[data-call-site]');
    if (!call) return;
    e.preventDefault();
    focus = { fn: call.dataset.fn, file: call.dataset.file, line: Number(call.dataset.line) };
    scrolledTo = null;
    if (hashState().file === call.dataset.file) app.rerender(); else setHash({ tab: 'source', file: call.dataset.file });
  });
  $('#source-file').addEventListener('change', (e) => setHash({ file: e.target.value }));
  const submit = (form, change) => $(form).addEventListener('submit', (e) => {
    e.preventDefault();
    const c = change();
    if (c) addSourceSetting(c);
  });
  submit('#source-dir-form', () => { const dir = $('#source-dir').value.trim(); return dir && ((c) => ({ source_dirs: [...c.source_dirs, dir] })); });
  submit('#debug-dir-form', () => { const dir = $('#debug-dir').value.trim(); return dir && ((c) => ({ debug_dirs: [...c.debug_dirs, dir] })); });
  submit('#binary-form', () => { const path = $('#binary-path').value.trim(); return path && ((c) => ({ binaries: [...c.binaries, path] })); });
  submit('#path-map-form', () => {
    const from = $('#map-from').value.trim(), to = $('#map-to').value.trim();
    return from && to && ((c) => ({ path_map: [...c.path_map, { from, to }] }));
  });
  $('#symbol-files').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-resymbolize]');
    if (!b) return;
    const m = b.dataset.resymbolize, on = b.dataset.on === '1';
    addSourceSetting((c) => ({ resymbolize: on ? c.resymbolize.filter((x) => x !== m) : [...c.resymbolize, m] }));
  });
}
