// Pure formatting: text for HTML, numbers in their units, how sessions read in a list. No DOM,
// no state: every function here is tested under node (test/ui/unit/format.test.mjs).

// Text for HTML, escaped; in what is shown, control characters and the Unicode controls that
// reorder or hide text (bidi overrides and isolates, zero-width joiners) appear as ⟨U+202E⟩,
// so a name such as "\u202eevil" cannot pass for "live".
export const attr = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
const hidden = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;
export const visible = (s) => String(s).replace(hidden, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`);
export const esc = (s) => attr(visible(s));
export const pct = (v) => (v ?? 0).toFixed(2);
// A weight in its unit: nanoseconds of a clock event by period read as time (9.02 s), any
// other count shortened (1.2 M).
export function amount(v, unit) {
  const n = Number(v) || 0;
  if (unit === 'ns') {
    if (n >= 1e9) return `${(n / 1e9).toFixed(n >= 1e11 ? 0 : 2)} s`;
    if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e8 ? 0 : 1)} ms`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(0)} µs`;
    return `${n} ns`;
  }
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} G`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)} k`;
  return n.toLocaleString();
}
// The unit of a view's weights: clock events weighed by period count nanoseconds.
export const unitOf = (answer) => (answer?.weight === 'period' && /^(cpu-clock|task-clock|off-cpu|wall)\b/.test(answer?.event || '') ? 'ns' : 'count');
export const mib = (bytes) => (bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0);

// How a session reads in a list: when it started, how long it ran, how much it holds.
export const started = (s) => (s.started_at ? esc(new Date(s.started_at * 1000).toLocaleString()) : '');
export const duration = (sec) => (sec == null ? '' : sec < 60 ? `${sec.toFixed(1)} s` : sec < 3600 ? `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s` : `${(sec / 3600).toFixed(1)} h`);
export const count = (n) => (n == null ? '' : Number(n).toLocaleString());
// perf's event modifiers (cpu-clock:pppH, cycles:u) are noise in a heading.
export const eventName = (e) => String(e).replace(/:[a-zA-Z]+$/, '');
// How a session's recording reads in a list: the process (pid), the imported file, or the
// whole system profiled continuously (--continuous); its events.
// A flight recorder's capture says what fired it; a run a CI job asked for, the job (its
// commit, and a link to it when its URL is one).
const originOf = (o) => {
  if (!o || typeof o !== 'object') return '';
  const what = [o.job, o.commit ? String(o.commit).slice(0, 12) : ''].filter(Boolean).join(' @ ') || o.by || 'CI';
  const title = attr(Object.entries(o).map(([k, v]) => `${k}: ${visible(v)}`).join('\n'));
  const linked = /^https?:\/\//.test(o.url || '') ? `<a href="${attr(o.url)}" rel="noopener noreferrer" target="_blank">${esc(what)}</a>` : esc(what);
  return ` <span class="origin" title="${title}">asked by ${linked}</span>`;
};
export const processOf = (s) => (s.imported ? `<span class="muted">import</span> ${esc((s.source || '').split('/').pop())}`
  : s.continuous && !s.pid ? '<span class="muted">continuous</span> whole system'
    : `${esc(s.process || '')}${s.pid ? ` <span class="muted">${esc(s.pid)}</span>` : ''}`)
  + (s.capture?.trigger ? ` <span class="capture" title="${attr(`a flight recorder's capture: ${s.capture.trigger}${s.capture.window_s != null ? `; ${Math.round(s.capture.window_s)} s held before it` : ''}`)}">captured: ${esc(s.capture.trigger)}</span>` : '')
  + originOf(s.origin);
export const eventsOf = (s) => (s.event_types || []).map(eventName).join(', ');
// A session named by what it is, as plain text (escape it to show it): the process (pid) on
// its host, an import by its file, a continuous run as the whole system; its events, how long.
export function sessionName(s) {
  const what = s.imported ? String(s.source || 'import').split('/').pop()
    : s.continuous && !s.pid ? `whole system${s.hostname ? ` on ${s.hostname}` : ''}`
      : `${s.process || 'process'}${s.pid ? ` (${s.pid})` : ''}${s.hostname ? ` on ${s.hostname}` : ''}`;
  return [what, eventsOf(s), s.duration_sec ? duration(s.duration_sec) : ''].filter(Boolean).join(' · ');
}
// A counter's total over the whole session, with the rate it makes over the intervals'
// seconds: CPUs utilized for a clock (msec), else per second.
export function counterTotal(t, seconds) {
  const v = Number(t.value) || 0;
  const shown = t.unit === 'msec' ? `${(v / 1000).toLocaleString(undefined, { maximumFractionDigits: v < 10000 ? 2 : 0 })} s`
    : v.toLocaleString(undefined, { maximumFractionDigits: 0 });
  const rate = !(seconds > 0) ? '' : t.unit === 'msec' ? `${(v / 1000 / seconds).toFixed(2)} CPUs utilized`
    : `${amount(v / seconds, 'count')}/s`;
  return { shown, rate };
}

// Frames of one module told apart by the name's own shade.
export const nameShade = (n) => String(n).split('').reduce((h, c) => (h * 17 + c.charCodeAt(0)) % 23, 0);
// A module's hue, the same in every view and session: a hash of its file name picks one of 24
// hues a golden angle (137.5°) apart.
export function moduleHue(module) {
  const name = String(module || '').split('/').pop();
  let h = 2166136261;
  for (let i = 0; i < name.length; ++i) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return Math.round((25 + ((h >>> 0) % 24) * 137.508) % 360);
}
export const NOISE_FILL = 'hsl(0,0%,84%)';
// A frame's colour against a baseline: grey within the noise (a change sampling alone would
// make, ± `noise` points), else red where it grew and blue where it shrank, deeper in
// proportion to the change, the largest in the graph (`scale` points) deepest.
export function diffColour(delta, noise, scale) {
  if (!beyondNoise(delta, noise)) return NOISE_FILL;
  const t = Math.min(1, Math.abs(delta) / (scale > 0 ? scale : Math.abs(delta)));
  return `hsl(${delta > 0 ? 0 : 220},${Math.round(30 + 55 * t)}%,${Math.round(88 - 26 * t)}%)`; // never darker than dark text reads on
}

// A change sampling alone would not make: beyond ± `noise` points (the 95 % band of both
// sessions' counts; 0.05 points when a row has none).
export function beyondNoise(delta, noise) {
  return Math.abs(delta) > (noise ?? 0.05);
}
// The largest change beyond its noise among [delta, noise] pairs (points): the deepest colour.
export function largestChange(pairs) {
  let m = 0;
  for (const [d, noise] of pairs) if (d != null && beyondNoise(d, noise)) m = Math.max(m, Math.abs(d));
  return m;
}
// A Δ cell in points, coloured as the compared flame graph colours its frames; `title` says
// what it compares.
export function deltaCell(delta, noise, scale, title) {
  const within = !beyondNoise(delta, noise);
  return `<td class="num delta ${within ? 'muted' : delta > 0 ? 'grew' : 'shrank'}" style="background:${diffColour(delta, noise, scale)}" title="${attr(title + (within ? ', within the noise' : ''))}">${delta > 0 ? '+' : ''}${pct(delta)}</td>`;
}

// Tick spacing for `span` seconds over `px` pixels: 1, 2 or 5 × a power of ten, ~100 px apart.
export function tickStep(span, px) {
  const raw = span / Math.max(1, px / 100);
  const p = 10 ** Math.floor(Math.log10(raw || 1));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? 10 * p;
}

// The window zoomed by `factor` (< 1 in, > 1 out) about the point `at` (0–1 across it), kept
// within the session's [0, whole]; null when it would show the whole session.
export function zoomWindow(start, end, at, factor, whole) {
  const span = Math.min(whole, Math.max(0.001, (end - start) * factor));
  if (span >= whole) return null;
  let a = start + (end - start) * at - span * at;
  a = Math.max(0, Math.min(whole - span, a));
  return { start: a, end: a + span };
}
