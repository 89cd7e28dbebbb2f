// The UI's state is the URL's hash: a link or a reload shows the same view. One table says
// which keys there are, how each reads, and which belong to the session shown, so opening
// another session never carries the last one's function, zoom or window over. Pure functions
// of strings, plus read() and update() for the page's own location.

// kind: 'text' (the default), 'bool' ('1' or absent), 'flag' (present with no value, as
// "#fleet&…"); default: what an absent key reads as; session: true for keys that describe
// something inside one session.
export const KEYS = Object.freeze({
  session: {},
  tab: { default: 'functions' },
  weight: { default: 'period' },
  tid: { session: true },
  lane: { session: true }, // the timeline's chosen thread: its flame chart, no filter elsewhere
  event: { session: true },
  zoom: { session: true },
  file: { session: true },
  fn: { session: true },
  start: { session: true },
  end: { session: true },
  last: {}, // seconds: every view over the newest N seconds only (a rolling window)
  filter: { session: true }, // the filter box's text
  baseline: { session: true },
  inverted: { kind: 'bool', session: true },
  focus: { session: true },
  hide: { session: true },
  drop: { session: true }, // functions whose stacks are left out whole, ';' between
  recursion: { session: true }, // 'collapse': a function calling itself is one frame
  collapse: { session: true }, // modules shown as one frame each, ';' between
  sort: { session: true }, // the function table's column (self % when absent)
  order: { session: true }, // 'asc' or 'desc' against the column's natural order
  // The Fleet view ("#fleet&devices=a,b&range=3600&…"; it shares event and fn).
  fleet: { kind: 'flag' },
  devices: {}, // ',' between
  range: { default: '3600' }, // seconds back from now; '0': everything kept
  build: {},
  compare: {}, // 'before' (the period before) or 'build' (base_build)
  base_build: {},
});

// The state a hash ("#session=…&tab=…", with or without the '#') reads as: every key of the
// table, absent ones at their defaults (null for text, false for bool); other keys ignored.
export function parse(hash) {
  const p = new URLSearchParams(String(hash || '').replace(/^#/, ''));
  const out = {};
  for (const [key, spec] of Object.entries(KEYS)) {
    const v = p.get(key);
    if (spec.kind === 'bool') out[key] = v === '1';
    else if (spec.kind === 'flag') out[key] = p.has(key);
    else out[key] = v === null || v === '' ? (spec.default ?? null) : v;
  }
  return out;
}

// The hash after `changes` ({key: value}; null, undefined, '' or false removes a key, true
// sets a bool key) applied to `hash`. A change of session drops the keys that belonged to
// the last one, unless `changes` sets them too. Keys outside the table are kept as they are
// (a page such as "#wizard" owns its own); the order of those kept is stable.
export function apply(hash, changes) {
  const p = new URLSearchParams(String(hash || '').replace(/^#/, ''));
  if ('session' in changes && (changes.session || null) !== (p.get('session') || null))
    for (const [key, spec] of Object.entries(KEYS)) if (spec.session && !(key in changes)) p.delete(key);
  for (const [key, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === '' || v === false) p.delete(key);
    else if (KEYS[key]?.kind === 'flag') p.set(key, '');
    else p.set(key, v === true ? '1' : String(v));
  }
  let out = p.toString();
  for (const [key, spec] of Object.entries(KEYS))
    if (spec.kind === 'flag') out = out.replace(new RegExp(`(^|&)${key}=(?=&|$)`), `$1${key}`);
  return out;
}

// The page's own state, and a change to it (a new history entry, as a click is).
export const read = () => parse(location.hash);
export function update(changes) {
  location.hash = apply(location.hash, changes);
}
