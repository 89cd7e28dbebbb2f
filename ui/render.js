// One render at a time, of the state in the URL, by the table of views: the landing page, the
// Live Debug wizard, or a session (its header, its device health and the tab chosen). A change
// that arrives during a render is rendered right after it, once; a render whose URL changed
// under it stops at its next step (ctx.stillWanted), so nothing of an old state is drawn over
// a newer choice.
//
// Each view (ui/views/*.js) exports init(app) (its listeners; app: {rerender, showError}),
// render(state, ctx) and clear(); a tab may export waiting() (no samples yet), leave()
// (another tab shown), live(kind, data) (a stream event for it) and withoutSamples.
// ctx: {q, meta, stillWanted, pickedEvent}: q the query every view of the session shares,
// meta the session's (from the header).
import { read } from './state.js';
import { store } from './store.js';
import { $, visible } from './util.js';
import * as calltree from './views/calltree.js';
import * as fleet from './views/fleet.js';
import * as flamegraph from './views/flamegraph.js';
import * as functions from './views/functions.js';
import * as health from './views/health.js';
import * as landing from './views/landing.js';
import * as sandwich from './views/sandwich.js';
import * as header from './views/session.js';
import * as sessions from './views/sessions.js';
import * as source from './views/source.js';
import * as threads from './views/threads.js';
import * as timeline from './views/timeline.js';
import * as wizard from './views/wizard.js';

// A session's tabs, by the URL's tab=.
export const TABS = Object.freeze({ functions, flamegraph, calltree, source, sandwich, timeline, threads, sessions });
const SESSION_VIEWS = [header, health, ...Object.values(TABS)];
const VIEWS = [landing, wizard, fleet, ...SESSION_VIEWS];

class Superseded extends Error {}
let renderedHash = '';
const stillWanted = () => { if (location.hash !== renderedHash) throw new Superseded(); };

// `tab`: the tab whose render failed (data-tab on the message), when a render failed. An error
// stays until it is dismissed (its ✕), another takes its place, or a render of another state
// (the user chose something) succeeds: a live update of the same view leaves it to be read.
let errorAt = null; // the URL whose render it came from (not the page's URL now: a failed
// render may end after the user moved on)
function showError(message, tab) {
  if (!message && (errorAt === null || errorAt === renderedHash)) return;
  errorAt = message ? renderedHash : null;
  $('#view-error').hidden = !message;
  $('#view-error-text').textContent = message ? visible(message) : '';
  if (message && tab) $('#view-error').dataset.tab = tab; else delete $('#view-error').dataset.tab;
}
function dismissError() {
  errorAt = null;
  $('#view-error').hidden = true;
  $('#view-error-text').textContent = '';
  delete $('#view-error').dataset.tab;
}

// The query every view of a session shares: weight, thread, event, baseline, time window.
function queryOf(s) {
  const q = new URLSearchParams({ weight: s.weight });
  for (const key of ['tid', 'event', 'baseline', 'start', 'end', 'last']) if (s[key]) q.set(key, s[key]);
  return q;
}

let shownSession = null;
function clearSession(id) {
  for (const v of SESSION_VIEWS) v.clear(id);
  shownSession = id;
}

async function renderSession(s) {
  header.showTab(s);
  for (const [name, v] of Object.entries(TABS)) if (name !== s.tab) v.leave?.();
  if (shownSession !== s.session) clearSession(s.session);
  const ctx = { q: queryOf(s), stillWanted, pickedEvent: (event) => header.showPicked(s.session, event) };
  try { ctx.meta = await header.render(s, ctx); } catch (e) {
    if (!(e instanceof Superseded)) { clearSession(s.session); shownSession = null; } // nothing of another session stays
    throw e;
  }
  stillWanted();
  await health.render(s, ctx);
  stillWanted();
  const tab = TABS[s.tab];
  if (!tab) return;
  if (ctx.meta.samples || tab.withoutSamples) await tab.render(s, ctx);
  else tab.waiting?.();
}

async function render() {
  renderedHash = location.hash;
  const s = read();
  if (location.hash === '#wizard') {
    // The wizard alone: nothing of the session or the fleet shown before stays under it.
    showError(null); $('#session').hidden = true; $('#fleet').hidden = true; wizard.render(); return;
  }
  wizard.clear();
  $('#fleet').hidden = !fleet.isFleet();
  if (fleet.isFleet()) {
    $('#landing').hidden = true; $('#session').hidden = true;
    try { await fleet.render(); showError(null); } catch (e) { if (!(e instanceof Superseded)) showError(e.message, 'fleet'); }
    return;
  }
  fleet.clear();
  $('#landing').hidden = !!s.session;
  $('#session').hidden = !s.session;
  // An error is shown above the view it belongs to, and goes when that view renders again.
  try { await (s.session ? renderSession(s) : landing.render(s)); showError(null); }
  catch (e) {
    // (A render the user has already left, failing late, says nothing: its state is gone.)
    if (!(e instanceof Superseded) && location.hash === renderedHash) showError(e.message, s.session ? s.tab : 'landing');
  }
}

let rendering = null, again = false;
export function rerender() {
  if (rendering) { again = true; return; }
  rendering = render().finally(() => { rendering = null; if (again) { again = false; rerender(); } });
}

// A live session changes a few times a second; the page follows twice a second at most (the
// last change always lands: a render is due at the end of every half second it was told), so
// what the program does is on screen within a second (bench/screen_latency.mjs).
const LIVE_MS = 500;
let liveDue = null, liveAt = 0;
export function liveRender() {
  if (liveDue) return;
  liveDue = setTimeout(() => { liveDue = null; liveAt = Date.now(); rerender(); }, Math.max(0, liveAt + LIVE_MS - Date.now()));
}

// A stream event for the views that take one.
export function live(kind, data) {
  for (const v of VIEWS) v.live?.(kind, data);
}

// What the views' shared markup asks for, wherever it is on the page: data-sandwich="NAME" the
// callers and callees of a function, data-source-of="NAME" its source, data-baseline="ID" a
// comparison with that session ("" stops comparing). Each becomes an action in the store
// (store.act), taken by the view that subscribed to it.
const SHARED_MARKUP = [['sandwich', 'callers'], ['source-of', 'source'], ['baseline', 'baseline']];

export function init() {
  const app = { rerender, showError: (message) => (message ? showError(message) : dismissError()) };
  for (const v of VIEWS) v.init?.(app);
  document.addEventListener('click', (e) => {
    for (const [attribute, action] of SHARED_MARKUP) {
      const el = e.target.closest(`[data-${attribute}]`);
      if (!el) continue;
      e.preventDefault();
      store.act(action, el.getAttribute(`data-${attribute}`));
      return;
    }
  });
  $('#view-error-close').addEventListener('click', dismissError);
}
