// A session's header, above every tab: its title and line (host, samples, events, state), the
// controls of its agent (pause, resume, stop, start again), perf stat's counters, the profile's
// health checks, and the choices every tab shares (tab, event, thread, weight, filter).
// The numbers come from the live stream (store.counts); what changes slowly (the session's
// meta, its health checks, its threads) is asked again at most every few seconds while live.
import { apply as applyState, read as hashState, update as setHash } from '../state.js';
import { store } from '../store.js';
import { attr, count, counterTotal, duration, esc, eventName, pct, sessionName, visible } from '../format.js';
import { agentCommand, api, exportUrl, sessionUrl } from '../api.js';
import { $, filterRegex, plainMatch, setHtml, takeFrom, transformQuery } from '../util.js';

const LAG = 5000; // ms an earlier answer about the header's slow parts is good for

let app; // {rerender, showError}
// The agent of the session shown, as the targets list says: what the controls act on.
let agent = { target: null, pid: null, running: false, callgraph: null };
let picked = null; // {session, event}: the event the collector chose when the URL names none
let qualityOpened = null; // the session whose failing check opened the panel once
let drawn = { events: '', checks: '' }; // what the event choice and the checks list hold
let known = { session: null, samples: 0 }; // the last meta's
let shownQuery = { session: null, q: '' }; // what the export choice exports
// The summary (stat cards, profile health, device strip) open or shut as the user last left
// it; until they choose, a failing health check opens it once per session.
const SUMMARY_KEY = 'perfwire-summary';
let openingSummary = false;

// The tab asked for shows at once, before anything it shows is fetched: a render under way
// never undoes a later click.
export function showTab(s) {
  showTransforms(s);
  showScope(s);
  for (const b of document.querySelectorAll('#tabs button[data-tab]')) b.classList.toggle('active', b.dataset.tab === s.tab);
  for (const t of document.querySelectorAll('.tab')) t.hidden = t.id !== 'tab-' + s.tab;
  if ($('#weight').value !== s.weight) $('#weight').value = s.weight;
}

// The tabs the transforms reshape, and what they are now, each undone with its ✕.
const RESHAPED = new Set(['functions', 'flamegraph', 'calltree', 'sandwich', 'timeline']);
const moduleFile = (m) => m.replace(/^.*\//, '');
function showTransforms(s) {
  $('#transforms').hidden = !RESHAPED.has(s.tab);
  $('.collapse-recursion').checked = s.recursion === 'collapse';
  const list = (v) => (v ? v.split(';').filter(Boolean) : []);
  setHtml($('#transform-chips'), (s.focus ? `<span class="chip" title="only the stacks through it, from it down">focused on <b>${esc(s.focus)}</b> <button data-unfocus title="show every stack">✕</button></span>` : '')
    + list(s.hide).map((h) => `<span class="chip" title="left out of every stack: its time is its callers'">merged <b>${esc(h)}</b> <button data-unhide="${attr(h)}" title="show it again">✕</button></span>`).join('')
    + list(s.drop).map((d) => `<span class="chip" title="every sample through it left out, and its time from the total">dropped <b>${esc(d)}</b> <button data-undrop="${attr(d)}" title="take its samples back">✕</button></span>`).join('')
    + list(s.collapse).map((m) => `<span class="chip" title="${attr(visible(m))}: one frame for each run of calls inside it">collapsed <b>${esc(moduleFile(m))}</b> <button data-uncollapse="${attr(m)}" title="show its functions again">✕</button></span>`).join(''));
  if (!RESHAPED.has(s.tab)) $('#transform-chips').innerHTML = ''; // they reshape no view here
  $('#transforms').dataset.shows = [s.focus || '', s.hide || '', s.drop || '', s.collapse || '', s.recursion || ''].join('|');
}

// What narrows every view, above them all, each undone with its ✕: the time window (or the
// rolling one), the thread, the filter's text, the baseline compared with.
const LAST = { 10: 'last 10 s', 60: 'last 1 min', 300: 'last 5 min' };
function showScope(s) {
  if ($('#last').value !== (s.last || '')) $('#last').value = s.last || '';
  if (document.activeElement !== $('#filter') && $('#filter').value !== (s.filter || '')) { $('#filter').value = s.filter || ''; showFilterError(); }
  const secs = (x) => `${Number(x).toFixed(2)} s`;
  const thread = s.tid ? [...$('#thread').options].find((o) => o.value === s.tid)?.textContent || `thread ${s.tid}` : '';
  const chips = [
    s.start || s.end ? `<span class="chip" data-scope="window" title="every view counts only the samples in this window (chosen on the Timeline)">window <b>${s.start ? secs(s.start) : 'start'} – ${s.end ? secs(s.end) : 'end'}</b> <button data-unscope="start,end" title="the whole session">✕</button></span>` : '',
    s.last ? `<span class="chip" data-scope="last" title="every view counts only the newest ${esc(s.last)} seconds, following a live session">${esc(LAST[s.last] || `last ${s.last} s`)} <button data-unscope="last" title="since the start">✕</button></span>` : '',
    s.tid ? `<span class="chip" data-scope="thread" title="every view counts only this thread">thread <b>${esc(thread)}</b> <button data-unscope="tid" title="all threads">✕</button></span>` : '',
    s.filter ? `<span class="chip" data-scope="filter" title="the function table lists, the flame graph highlights and an export keeps what matches">filter <b>${esc(s.filter)}</b> <button data-unscope="filter" title="clear the filter">✕</button></span>` : '',
    s.baseline ? `<span class="chip" data-scope="baseline" title="the views compare with this session">compared with <b>${esc(s.baseline)}</b> <button data-baseline="" title="stop comparing">✕</button></span>` : '',
  ].join('');
  setHtml($('#scope-chips'), chips);
  $('#scope').hidden = !chips && !$('#transform-chips').innerHTML;
  $('#scope').dataset.shows = [s.start || '', s.end || '', s.last || '', s.tid || '', s.filter || '', s.baseline || ''].join('|');
}

// The event the collector picked for a view of `session` whose URL names none: the choice
// shows it, and keeps showing it while the session is re-rendered (never flashing another).
export function showPicked(session, event) {
  picked = { session, event };
  if (!hashState().event && event) $('#event').value = event;
}

// The session's meta (with the stream's fresher counts), after drawing the header from it.
export async function render(s, r) {
  // Until samples arrive, the meta is asked with every update: its events come with them.
  const lag = known.session === s.session && known.samples ? LAG : 0;
  // Asked with the thread and window, it counts what they hold too (view_samples).
  const scope = new URLSearchParams();
  for (const key of ['tid', 'start', 'end', 'last']) if (s[key]) scope.set(key, s[key]);
  const meta = await store.view(s.session, sessionUrl(s.session, '', scope), { lag });
  known = { session: s.session, samples: meta.samples };
  r.stillWanted();
  shownQuery = { session: s.session, q: String(r.q) };
  const c = store.counts(s.session);
  const shown = c ? { ...meta, samples: Math.max(meta.samples || 0, c.samples), chunks: Math.max(meta.chunks || 0, c.chunks),
    lost_samples: Math.max(meta.lost_samples || 0, c.lost_samples) } : meta;
  const events = meta.event_types || [];
  const event = s.event || (picked?.session === s.session ? picked.event : null);
  const options = events.map((e) => `<option value="${attr(e)}" ${e === event ? 'selected' : ''}>${esc(eventName(e))}</option>`).join('');
  if (drawn.events !== options) { $('#event').innerHTML = options; drawn.events = options; }
  agent.callgraph = meta.callgraph;
  await renderControls(s.session, r);
  await renderThreadChoice(s, r);
  // Named by what it is; its id (the folder, the URL) beside.
  const name = sessionName({ ...meta, ...shown, imported: meta.imported, duration_sec: meta.duration_sec });
  if ($('#session-title').dataset.name !== name) {
    $('#session-title').innerHTML = `${esc(name)} <span class="muted session-id">${esc(s.session)}</span>`;
    $('#session-title').dataset.name = name;
    document.title = `${visible(name)} — perfwire`; // controls shown, never obeyed
  }
  // A live session whose link is down: the device records on and sends it when it is back.
  const state = meta.live && meta.link_down_since
    ? `link down for ${duration(Math.max(0, Date.now() / 1000 - meta.link_down_since))}: the device records on`
    : meta.live ? 'live' : meta.ended_at ? `ended, ${duration(meta.duration_sec)}` : '';
  const inView = meta.view_samples != null ? ` (${count(meta.view_samples)} in ${s.tid && !(s.start || s.end || s.last) ? 'this thread' : 'this window'})` : '';
  $('#scope-count').textContent = meta.view_samples != null ? `${count(meta.view_samples)} of ${count(shown.samples)} samples` : '';
  // An import is said as one where no host is known.
  const host = meta.hostname || (meta.imported ? `imported${meta.source ? ` from ${String(meta.source).split('/').pop()}` : ''}` : '');
  const parts = [visible(host), `${shown.samples} samples${inView}`, `${shown.chunks} ${shown.chunks === 1 ? 'chunk' : 'chunks'}`,
    events.map(eventName).join(', '), meta.callgraph ? `call graphs: ${visible(meta.callgraph)}` : ''].filter(Boolean).join(' · ');
  // The state in a span of its own: struck through while the collector is out of reach.
  setHtml($('#session-info'), esc(parts) + (state ? ` · <span class="${meta.live ? 'live-state' : ''}">${esc(state)}</span>` : ''));
  // Lines of the recording the parser could not read: counted, never silently dropped.
  $('#session-skipped').hidden = !meta.skipped_lines;
  $('#session-skipped').textContent = meta.skipped_lines ? `${Number(meta.skipped_lines).toLocaleString()} unreadable lines skipped` : '';
  statCards(shown);
  if (shown.samples) await renderQuality(s, r, meta.live);
  else $('#quality-summary').textContent = 'waiting for samples…';
  return shown;
}

// perf stat's counters: over the whole session (every interval's report added up, with the
// rate they make) and, in each card's line below, the last interval as perf printed it (its
// own note). Counters perf could not count say so.
function statCards(meta) {
  const st = meta.perf_stat || {};
  const totals = new Map((st.totals || []).map((t) => [t.event, t]));
  const intervals = st.intervals || 0;
  const cards = (st.counters || []).map((c) => {
    const t = totals.get(c.event);
    const last = !c.supported ? 'not supported' : !c.counted ? 'not counted'
      : `${Number(c.value).toLocaleString()}${c.unit ? ' ' + c.unit : ''}${c.note ? ` (${c.note.replace(/^#\s*/, '')})` : ''}`;
    const scaled = c.running_pct != null && c.running_pct < 100 ? ` <span class="warn" title="multiplexed: counted ${pct(c.running_pct)}% of the time">scaled</span>` : '';
    if (!t) return `<div class="card">${esc(c.event)}<b class="muted">${esc(last)}</b></div>`;
    const { shown, rate } = counterTotal(t, st.total_seconds);
    return `<div class="card" title="the whole session: ${t.intervals} of ${intervals} intervals counted it">${esc(c.event)}<b>${esc(shown)}${scaled}</b>`
      + `${rate ? `<small>${esc(rate)}</small>` : ''}<small class="muted">last interval: ${esc(last)}</small></div>`;
  });
  if (cards.length) cards.unshift(`<div class="card head">perf stat<b>whole session</b><small class="muted">${intervals} ${intervals === 1 ? 'interval' : 'intervals'}, ${duration(st.total_seconds || 0)}</small></div>`);
  if (st.ipc != null) cards.push(`<div class="card">IPC <span class="muted">last interval</span><b>${st.ipc.toFixed(2)}</b></div>`);
  if (meta.lost_samples) cards.push(`<div class="card warn" title="samples perf dropped because it could not keep up, over the whole session">lost samples<b>${count(meta.lost_samples)}</b><small>whole session</small></div>`);
  if (meta.folded_samples) cards.push(`<div class="card" title="to stay within the collector's memory budget, the oldest samples are kept as one row per ${attr(meta.fold_interval_sec)} s, thread and call path: every count and view is whole, a time selection exact to ${attr(meta.fold_interval_sec)} s">folded to ${esc(meta.fold_interval_sec)} s<b>${count(meta.folded_samples)}</b></div>`);
  // The run's link was down: how long, and how much of what the device recorded came late.
  const gaps = Array.isArray(meta.link_gaps) ? meta.link_gaps : [];
  if (gaps.length) {
    const down = gaps.reduce((t, g) => t + Math.max(0, Number(g[1]) - Number(g[0])), 0);
    const late = gaps.reduce((n, g) => n + (Number(g[2]) || 0), 0);
    cards.push(`<div class="card" data-card="link-gaps" title="the device kept recording while its link was down and sent it when it was back: the samples are there; the timeline marks when">link down ${gaps.length} ${gaps.length === 1 ? 'time' : 'times'}<b>${esc(duration(down))}</b><small>${late ? `${count(late)} chunks came late` : 'nothing lost'}</small></div>`);
  }
  // The agent changed the rate to stay within its --max-overhead budget: the views weigh each
  // sample by its period, so shares stay right across the change.
  const rates = Array.isArray(meta.rate_changes) ? meta.rate_changes : [];
  if (rates.length) {
    const last = rates[rates.length - 1];
    const said = rates.map((c) => `${c.at_s != null ? `at ${Number(c.at_s).toFixed(1)} s: ` : ''}${c.from_hz} → ${c.to_hz} Hz${c.why ? ` (${c.why})` : ''}`).join('\n');
    cards.push(`<div class="card" data-card="rate-changes" title="${attr(`the agent kept what profiling costs within its budget (--max-overhead): samples are weighed by their period, so shares stay right across a change\n${said}`)}">sampling rate changed ${rates.length} ${rates.length === 1 ? 'time' : 'times'}<b>${esc(last.to_hz)} Hz</b><small>from ${esc(rates[0].from_hz)} Hz asked${last.callgraph ? `, call graphs ${esc(last.callgraph)}` : ''}</small></div>`);
  }
  if (meta.unsaved_chunks) {
    const what = `${meta.unsaved_chunks} ${meta.unsaved_chunks === 1 ? 'chunk' : 'chunks'}${meta.unsaved_samples ? `, ${Number(meta.unsaved_samples).toLocaleString()} samples` : ''}`;
    cards.push(`<div class="card warn" title="${meta.live ? 'shown here, kept in memory and written when there is room' : 'missing from the recording on disk'}">${meta.live ? 'not on disk yet' : 'incomplete recording'}<b>${what}: ${esc(meta.store_error || '')}</b></div>`);
  }
  const html = cards.join('');
  if ($('#stat-cards').innerHTML !== html) $('#stat-cards').innerHTML = html;
}

// How far this profile can be trusted, each check with its measured value and the fix.
async function renderQuality(s, r, live) {
  const d = await store.view(s.session, sessionUrl(s.session, 'quality', r.q), { lag: LAG });
  r.stillWanted();
  const mark = { ok: '✓', warn: '!', bad: '✗' };
  const html = d.checks.map((c) => `<li class="q-${attr(c.status)}" data-check="${attr(c.id)}">
    <span class="q-mark">${mark[c.status] || ''}</span> <b>${esc(c.title)}</b>: ${esc(c.value)}
    ${c.fix ? `<div class="q-fix">→ ${esc(c.fix)}</div>` : ''}
    ${c.detail.length && c.status !== 'ok' ? `<div class="muted q-fix">${c.detail.map((x) => `${esc(x.name)}${x.pct ? ` (${pct(x.pct)} %)` : ''}`).join(' · ')}</div>` : ''}</li>`).join('');
  if (drawn.checks !== html) { $('#quality-checks').innerHTML = html; drawn.checks = html; }
  const worst = d.checks.some((c) => c.status === 'bad') ? 'bad' : d.checks.some((c) => c.status === 'warn') ? 'warn' : 'ok';
  const open = d.checks.filter((c) => c.status !== 'ok').length;
  $('#quality-summary').textContent = open ? `${open} to look at` : 'all good';
  $('#quality').className = `q-${worst}`;
  $('#summary-health').className = `q-${worst}`;
  $('#summary-health').textContent = `${{ ok: '✓', warn: '!', bad: '✗' }[worst]} profile health: ${open ? `${open} to look at` : 'all good'}`;
  // A check that fails opens the panel, once per session, while the user has not chosen
  // whether the summary stays open: it holds the fix. (Not for too few samples while the
  // session is live: they are still coming.)
  const opens = d.checks.some((c) => c.status === 'bad' && !(live && c.id === 'samples'));
  if (opens && qualityOpened !== s.session && localStorage.getItem(SUMMARY_KEY) === null) {
    qualityOpened = s.session;
    openingSummary = true; $('#summary').open = true; $('#quality').open = true;
  }
  // Stacks cut short on a target this collector can still steer: one click records it again
  // with DWARF unwinding (the agent refuses, saying why, if its perf cannot).
  // (A standing element, not part of the list redrawn with every live update, so a click on
  // it always lands.)
  // Offered too when the stacks stop only below the program (in the C library, the runtime),
  // but then said to be optional: every frame of the program is already there.
  const check = d.checks.find((c) => c.id === 'truncated');
  const inside = check && check.status !== 'ok', below = (check?.below_pct ?? 0) >= 10;
  $('#quality-action').hidden = !((inside || below) && agent.target && agent.pid && agent.callgraph !== 'dwarf');
  $('#quality-action-what').textContent = `${agent.running ? 'stops this run and records' : 'records'} pid ${agent.pid} again with --call-graph dwarf: `
    + (inside ? 'whole stacks where frame pointers are missing, at more cost per sample'
      : 'names the C library\'s and the runtime\'s frames below the program\'s too — not needed to see the program\'s own, and it costs more per sample');
  $('#quality').dataset.shows = s.session;
}

// The thread filter: every thread of the session (whole session, so the list stays put).
async function renderThreadChoice(s, r) {
  const q = new URLSearchParams({ weight: 'samples' });
  if (s.event) q.set('event', s.event);
  let answered = true;
  const threads = await store.view(s.session, sessionUrl(s.session, 'threads', q), { lag: LAG })
    .catch(() => { answered = false; return []; }); // none yet: 404
  r.stillWanted(); // a choice made meanwhile stays
  // Updated in place: options rebuilt with each live update would close the list a user has
  // open and drop what they were about to choose.
  const select = $('#thread');
  const had = new Map([...select.options].map((o) => [o.value, o]));
  const want = [['', 'all threads'], ...threads.map((t) => [String(t.tid), `${t.tid} ${visible(t.comm)} (${pct(t.pct)}%)`])];
  want.forEach(([value, label], i) => {
    const o = had.get(value) ?? new Option(label, value);
    if (o.text !== label) o.text = label;
    if (select.options[i] !== o) select.insertBefore(o, select.options[i] ?? null);
  });
  while (select.options.length > want.length) select.remove(want.length);
  const chosen = want.some(([v]) => v === s.tid) ? s.tid : '';
  if (select.value !== chosen) select.value = chosen;
  // Whose threads these are, once the session answered (a test waits for it).
  if (answered) select.dataset.session = s.session; else delete select.dataset.session;
}

// Pause, resume and stop for a session whose agent is connected, each offered only when the
// agent's state allows it; "start again" for the run its idle agent last finished.
async function renderControls(session, r) {
  const targets = store.targets() ?? await api('/api/targets');
  r.stillWanted();
  const t = targets.find((x) => x.session_id === session) || targets.find((x) => x.last_session_id === session && x.state === 'idle');
  agent.target = t?.id;
  agent.pid = t?.pid;
  $('#controls').hidden = !t;
  if (!t) return;
  const state = t.session_id === session ? t.state : 'ended';
  agent.running = state !== 'ended';
  const allowed = { pause: state === 'profiling', resume: state === 'paused', stop: state === 'profiling' || state === 'paused' };
  for (const b of document.querySelectorAll('#controls button[data-cmd]')) {
    if (b.dataset.cmd === 'start') { b.hidden = state !== 'ended' || !t.pid; $('#control-offcpu-box').hidden = b.hidden; continue; }
    b.hidden = state === 'ended';
    b.disabled = !allowed[b.dataset.cmd];
  }
  $('#control-state').textContent = [visible(t.hostname || ''), state === 'ended' ? 'this run has ended; the agent is idle' : t.state, t.pid ? `pid ${t.pid}` : ''].filter(Boolean).join(' · ');
}

// Nothing of another session: emptied when a session is opened, or cannot be shown.
export function clear(title = '') {
  $('#session-title').textContent = title; delete $('#session-title').dataset.name;
  $('#summary-health').textContent = ''; $('#summary-health').className = '';
  for (const id of ['#session-info', '#control-state', '#control-result', '#quality-summary']) $(id).textContent = '';
  for (const id of ['#stat-cards', '#quality-checks', '#event']) $(id).innerHTML = '';
  drawn = { events: '', checks: '' };
  // The thread choice holds only this session's threads: another session's, offered while
  // this one's are fetched, would filter by a thread it never had.
  $('#thread').replaceChildren(new Option('all threads', '')); delete $('#thread').dataset.session;
  $('#session-skipped').hidden = true; $('#quality-action').hidden = true;
  $('#controls').hidden = true;
  $('#quality').className = ''; delete $('#quality').dataset.shows;
  agent = { target: null, pid: null, running: false, callgraph: null };
}

// A new run on the same process; it is a session of its own, which is opened.
async function startRun(target, args) {
  // A start may wait for the agent to probe perf (tens of seconds with some builds).
  $('#control-result').textContent = 'starting… probing perf';
  let answer;
  try { answer = await agentCommand(target, { cmd: 'start', args }); } finally { $('#control-result').textContent = ''; }
  const t = answer.session_id ? null : (await api('/api/targets')).find((x) => x.id === target);
  const next = answer.session_id || t?.session_id || t?.last_session_id;
  if (next) { setHash({ session: next, baseline: null, start: null, end: null, zoom: null, tid: null }); return true; }
  return false;
}

// The filter box's pattern, said next to it while incomplete (the views then show everything).
function showFilterError() {
  const { error } = filterRegex($('#filter').value);
  $('#filter-error').hidden = !error;
  $('#filter-error').textContent = error ? `incomplete pattern, showing all: ${error}` : '';
  $('#filter').classList.toggle('invalid', !!error);
}

export function init(context) {
  app = context;
  $('#summary').open = localStorage.getItem(SUMMARY_KEY) === 'open';
  $('#summary').addEventListener('toggle', () => {
    if (openingSummary) { openingSummary = false; return; } // opened for a failing check
    localStorage.setItem(SUMMARY_KEY, $('#summary').open ? 'open' : 'shut');
  });
  // The view as it is now — its thread, window, transforms and plain-text filter — as a file
  // (the collector names it after the session), downloaded: the page stays.
  $('#export').addEventListener('change', (e) => {
    const format = e.target.value;
    e.target.value = '';
    if (!format || !shownQuery.session) return;
    const s = hashState(), match = plainMatch($('#filter').value);
    const q = new URLSearchParams(shownQuery.q);
    q.delete('baseline');
    const a = document.createElement('a');
    a.href = exportUrl(shownQuery.session, format, q, transformQuery(s), { match });
    a.download = '';
    document.body.append(a);
    a.click();
    a.remove();
  });
  $('#tabs').addEventListener('click', (e) => {
    const tab = e.target.closest('#tabs button[data-tab]');
    if (tab) setHash({ tab: tab.dataset.tab });
  });
  $('#event').addEventListener('change', (e) => setHash({ event: e.target.value }));
  $('.collapse-recursion').addEventListener('change', (e) => setHash({ recursion: e.target.checked ? 'collapse' : null, zoom: null }));
  $('#transform-chips').addEventListener('click', (e) => {
    const s = hashState(), b = e.target.closest('button');
    if (!b) return;
    if ('unfocus' in b.dataset) setHash({ focus: null, zoom: null });
    if (b.dataset.unhide) setHash({ hide: takeFrom(s.hide, b.dataset.unhide), zoom: null });
    if (b.dataset.undrop) setHash({ drop: takeFrom(s.drop, b.dataset.undrop), zoom: null });
    if (b.dataset.uncollapse) setHash({ collapse: takeFrom(s.collapse, b.dataset.uncollapse), zoom: null });
  });
  $('#thread').addEventListener('change', (e) => setHash({ tid: e.target.value || null }));
  $('#last').addEventListener('change', (e) => setHash({ last: e.target.value || null, start: null, end: null, zoom: null }));
  $('#scope-chips').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-unscope]');
    if (!b) return;
    const undo = Object.fromEntries(b.dataset.unscope.split(',').map((k) => [k, null]));
    if ('filter' in undo) $('#filter').value = '';
    setHash(undo);
  });
  // The filter's text is in the URL (replaced, not a step of the history per key typed).
  let typed;
  $('#filter').addEventListener('input', () => {
    clearTimeout(typed);
    typed = setTimeout(() => {
      history.replaceState(null, '', '#' + applyState(location.hash, { filter: $('#filter').value || null }));
      showScope(hashState());
    }, 300);
  });
  $('#weight').addEventListener('change', (e) => setHash({ weight: e.target.value === 'period' ? null : e.target.value }));
  $('#filter').addEventListener('input', showFilterError);
  // Keyboard: "/" to search, Esc to leave the search box.
  document.addEventListener('keydown', (e) => {
    const typing = ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement?.tagName);
    if (e.key === '/' && !typing && !$('#session').hidden) { e.preventDefault(); $('#filter').focus(); }
    else if (e.key === 'Escape' && typing && document.activeElement === $('#filter')) $('#filter').blur();
  });
  $('#controls').addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-cmd]');
    if (!b || !agent.target) return;
    try {
      $('#control-result').textContent = '';
      if (b.dataset.cmd === 'start' ? await startRun(agent.target, { pid: agent.pid, off_cpu: $('#control-offcpu').checked }) : (await agentCommand(agent.target, { cmd: b.dataset.cmd }), false)) return;
    } catch (err) { $('#control-result').textContent = `${b.dataset.cmd}: ${err.message}`; }
    app.rerender(); // the target's state changed
  });
  $('#quality-action').addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-restart-callgraph]');
    if (!b || !agent.target) return;
    b.disabled = true;
    const { target, pid } = agent;
    try {
      if (agent.running) await agentCommand(target, { cmd: 'stop' });
      if (await startRun(target, { pid, callgraph: b.dataset.restartCallgraph })) return;
      app.rerender();
    } catch (err) { $('#control-result').textContent = `restart with ${b.dataset.restartCallgraph}: ${err.message}`; app.rerender(); }
    finally { b.disabled = false; }
  });
}
