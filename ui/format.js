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
export const unitOf = (answer) => (answer?.weight === 'period' && /^(cpu-clock|task-clock)\b/.test(answer?.event || '') ? 'ns' : 'count');
export const mib = (bytes) => (bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0);

// How a session reads in a list: when it started, how long it ran, how much it holds.
export const started = (s) => (s.started_at ? esc(new Date(s.started_at * 1000).toLocaleString()) : '');
export const duration = (sec) => (sec == null ? '' : sec < 60 ? `${sec.toFixed(1)} s` : sec < 3600 ? `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s` : `${(sec / 3600).toFixed(1)} h`);
export const count = (n) => (n == null ? '' : Number(n).toLocaleString());
// perf's event modifiers (cpu-clock:pppH, cycles:u) are noise in a heading.
export const eventName = (e) => String(e).replace(/:[a-zA-Z]+$/, '');
// How a session's recording reads in a list: the process (pid), the imported file, or the
// whole system profiled continuously (--continuous); its events.
export const processOf = (s) => (s.imported ? `<span class="muted">import</span> ${esc((s.source || '').split('/').pop())}`
  : s.continuous && !s.pid ? '<span class="muted">continuous</span> whole system'
    : `${esc(s.process || '')}${s.pid ? ` <span class="muted">${esc(s.pid)}</span>` : ''}`);
export const eventsOf = (s) => (s.event_types || []).map(eventName).join(', ');

// A module's hue, and frames of one module told apart by the name's own shade.
export const moduleHue = (m) => String(m).split('').reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 360, 0);
export const moduleColour = (m) => `hsl(${moduleHue(m)},65%,60%)`;
export const nameShade = (n) => String(n).split('').reduce((h, c) => (h * 17 + c.charCodeAt(0)) % 23, 0);
