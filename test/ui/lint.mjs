// The JavaScript lint and format check (scripts/test.sh), over the UI (ui/) and its tests and
// benchmarks (test/ui/, bench/*.mjs): every module parses, imports only names its source
// exports and uses every name it imports or takes from a browser test's shared state; a view
// imports only the shared modules (api, state, store, format, util, flame_canvas), never another view; and the
// text is LF, no tabs, no trailing spaces, one final newline. Prints each finding; exits 1 if
// any.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ui = join(root, 'ui');
const files = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.name === 'node_modules' ? []
  : d.isDirectory() ? files(join(dir, d.name)) : /\.m?js$/.test(d.name) ? [join(dir, d.name)] : []));
const all = [...files(ui), ...files(join(root, 'test/ui')), ...files(join(root, 'bench'))];
const SHARED = new Set(['api.js', 'state.js', 'store.js', 'format.js', 'util.js', 'flame_canvas.js'].map((f) => join(ui, f)));
const found = [];
const say = (file, line, what) => found.push(`${relative(root, file)}${line ? `:${line}` : ''}: ${what}`);

// The names a module exports: declarations, `export { a, b as c }` and re-exports.
function exportsOf(text) {
  const names = new Set();
  for (const m of text.matchAll(/^export\s+(?:async\s+)?(?:function\*?|const|let|class)\s+([\w$]+)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^export\s*\{([^}]*)\}/gm))
    for (const part of m[1].split(',')) { const n = part.trim().split(/\s+as\s+/).pop(); if (n) names.add(n); }
  return names;
}

// Whether `name` appears in `text` as a name (not a property, not part of another name); a
// spread (`...name`) is a use.
const mentions = (text, name) => new RegExp(`(^|[^\\w$.]|\\.\\.\\.)${name.replace(/\$/g, '\\$')}([^\\w$]|$)`).test(text);

for (const file of all) {
  const text = readFileSync(file, 'utf8');
  const check = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8' });
  if (check.status !== 0) say(file, 0, `does not parse: ${check.stderr.trim().split('\n').slice(0, 5).join(' ')}`);
  text.split('\n').forEach((l, i) => {
    if (/\r/.test(l)) say(file, i + 1, 'CR in the line (LF only)');
    if (/\t/.test(l)) say(file, i + 1, 'a tab (indent with spaces)');
    if (/\s$/.test(l)) say(file, i + 1, 'trailing whitespace');
  });
  if (!text.endsWith('\n') || text.endsWith('\n\n')) say(file, 0, 'must end with exactly one newline');
  for (const m of text.matchAll(/^import\s+(?:\{([^}]*)\}|\*\s+as\s+([\w$]+))\s+from\s+'([^']+)';/gm)) {
    const line = text.slice(0, m.index).split('\n').length;
    const target = resolve(dirname(file), m[3]);
    const names = m[2] ? [[m[2], m[2]]] : m[1].split(',').map((p) => p.trim()).filter(Boolean).map((p) => {
      const [from, as] = p.split(/\s+as\s+/);
      return [from, as ?? from];
    });
    if (!m[3].startsWith('.')) continue; // a package: node's own, or playwright-core
    if (dirname(file) === join(ui, 'views') && !SHARED.has(target))
      say(file, line, `a view imports only api, state, store, format, util and flame_canvas, not ${m[3]}`);
    let source;
    try { source = readFileSync(target, 'utf8'); } catch { say(file, line, `imports ${m[3]}, which does not exist`); continue; }
    const exported = exportsOf(source);
    const rest = text.slice(0, m.index) + text.slice(m.index + m[0].length);
    for (const [from, as] of names) {
      if (!m[2] && !exported.has(from)) say(file, line, `${m[3]} exports no ${from}`);
      if (!mentions(rest, as)) say(file, line, `${as} is imported and never used`);
    }
  }
  // A browser test's step takes names from the shared state: each must be used.
  for (const m of text.matchAll(/^ {2}const \{ ([^}]+) \} = t;$/gm)) {
    const line = text.slice(0, m.index).split('\n').length;
    const rest = text.slice(0, m.index) + text.slice(m.index + m[0].length);
    for (const name of m[1].split(',').map((x) => x.trim())) if (!mentions(rest, name)) say(file, line, `${name} is taken from the state and never used`);
  }
}
for (const f of found) console.log(f);
console.log(found.length ? `${found.length} findings` : `${all.length} modules clean (ui/, test/ui/, bench/)`);
process.exit(found.length ? 1 : 0);
