// perfwire UI: plain ES modules, no build step. The state is the URL's hash (state.js); the
// page's model of the collector, fed by the live stream, with its cache of view answers, is
// store.js; render.js renders the state, one view per part of the page (views/*.js). This
// module boots them: the sign-in, the theme, the views' listeners and the live stream.
import { read as hashState } from './state.js';
import { store } from './store.js';
import { openLiveStream } from './stream.js';
import { init as initViews, live, liveRender, rerender } from './render.js';
import { $, esc } from './util.js';

// Theme: auto (the system's), light or dark; remembered by this browser.
const themes = ['auto', 'light', 'dark'];
function applyTheme(t) {
  if (t === 'auto') delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  $('#theme').textContent = `theme: ${t}`;
}
applyTheme(localStorage.getItem('perfwire-theme') || 'auto');
$('#theme').addEventListener('click', () => {
  const next = themes[(themes.indexOf(localStorage.getItem('perfwire-theme') || 'auto') + 1) % themes.length];
  localStorage.setItem('perfwire-theme', next);
  applyTheme(next);
});

// Signed in? The collector asks every API request for its access token, which the link it
// printed at start turns into a cookie. Without it, say where the token is and take it here.
async function signedIn() {
  const r = await fetch('/api/status', { headers: { Accept: 'application/json' } });
  if (r.status !== 401) { await r.arrayBuffer().catch(() => {}); return true; } // read whole: the connection is free again
  const where = (await r.json().catch(() => ({})))?.error?.token_file || '';
  $('#conn').textContent = 'signed out';
  $('#main').innerHTML = `<section id="sign-in"><h2>Sign in</h2>
    <p>This collector asks for its access token. Open the newest sign-in link <code>perfwire-collector</code> printed
    (<code>UI and API on http://…/?code=…</code>; each link signs one browser in), or paste the token here:</p>
    <form><input id="sign-in-token" type="password" size="40" autocomplete="off" aria-label="access token"> <button>sign in</button>
    <span id="sign-in-error" class="warn" role="alert"></span></form>
    ${where ? `<p class="muted">The token is kept in <code>${esc(where)}</code> on the collector's machine.</p>` : ''}</section>`;
  $('#sign-in form').addEventListener('submit', async (e) => {
    e.preventDefault();
    // In the body, never in an address: nothing of it reaches the history.
    const r = await fetch('/api/sign-in', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ token: $('#sign-in-token').value.trim() }) });
    if (r.ok) { location.reload(); return; }
    $('#sign-in-error').textContent = (await r.json().catch(() => ({})))?.error?.message || `sign-in failed (${r.status})`;
  });
  return false;
}

// The live stream feeds the store; a render follows when what the page shows changed.
function follow(stream) {
  let broken = false;
  stream.addEventListener('open', () => {
    $('#conn').textContent = 'live';
    delete document.body.dataset.offline;
    if (broken) { broken = false; store.reset(); rerender(); } // versions restart with a collector
  });
  stream.addEventListener('error', () => { broken = true; $('#conn').textContent = 'reconnecting…'; document.body.dataset.offline = '1'; });
  // The landing page lists targets; a session's header follows its agent's state.
  let ownTarget = '';
  const targetsMoved = () => {
    const s = hashState();
    if (!s.session) { live('targets'); return; } // the landing page's table alone
    const t = store.targets().find((x) => x.session_id === s.session || x.last_session_id === s.session);
    const now = t ? `${t.id} ${t.state} ${t.session_id} ${t.last_session_id} ${t.pid}` : '';
    if (now !== ownTarget) { ownTarget = now; rerender(); }
  };
  // The whole list when the stream opens, then what changed (a few times a second at most).
  stream.addEventListener('targets', (e) => { store.setTargets(JSON.parse(e.data)); targetsMoved(); });
  stream.addEventListener('targets_changed', (e) => { if (store.targetsChanged(JSON.parse(e.data))) targetsMoved(); });
  // Sessions began, ended or went: what is kept of them is asked again.
  stream.addEventListener('sessions', (e) => {
    const ids = JSON.parse(e.data).session_ids ?? [], s = hashState();
    for (const id of ids) store.refresh(id);
    if (!s.session || ids.includes(s.session)) rerender();
  });
  stream.addEventListener('data_version', (e) => {
    const d = JSON.parse(e.data), s = hashState();
    if (store.dataChanged(d) && (!s.session || d.session_id === s.session)) liveRender();
  });
  // The collector's status: when the stream opens, then when it changes (the one source of it).
  stream.addEventListener('status', (e) => {
    store.setStatus(JSON.parse(e.data));
    $('#fleet-link').hidden = !store.status().fleet;
    if (hashState().fleet) rerender(); else live('status');
  });
  for (const kind of ['import', 'metrics']) stream.addEventListener(kind, (e) => live(kind, JSON.parse(e.data)));
}

initViews();
if (await signedIn()) {
  window.addEventListener('hashchange', rerender);
  follow(openLiveStream());
  rerender();
}
