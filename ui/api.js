// The collector's API as the page calls it: every session and target URL a view asks for is
// built here, and api() is the one way to call it. No DOM: tested under node.

// fetch, with a collector that cannot be reached said as such (not "Failed to fetch").
async function reach(path, init) {
  try { return await fetch(path, init); } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new Error(`cannot reach the collector (${e.message}); is it running?`);
  }
}

// A call to the collector's API. `body`: an object (sent as JSON), a File or Blob (sent as
// is), or nothing. A failed call throws with the collector's message, or the agent's for a
// relayed command ({"ok":false,"error":"not profiling"}).
// `signal`: an AbortSignal that cancels the call.
export async function api(path, { method = 'GET', body, signal } = {}) {
  const json = body !== undefined && !(body instanceof Blob);
  const r = await reach(path, {
    method,
    headers: json ? { 'Content-Type': 'application/json', Accept: 'application/json' } : { Accept: 'application/json' },
    body: json ? JSON.stringify(body) : body,
    signal,
  });
  const data = r.status === 204 ? {} : await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data?.error?.message || (typeof data?.error === 'string' ? data.error : '') || r.statusText);
  return data;
}

// A query from parts: strings already encoded ("weight=period&tid=7"), URLSearchParams, or
// objects whose empty values are left out ({function: 'main', module: null}).
export function query(...parts) {
  const out = [];
  for (const p of parts) {
    if (p === null || p === undefined) continue;
    const text = typeof p === 'string' ? p
      : p instanceof URLSearchParams ? p.toString()
      : new URLSearchParams(Object.entries(p).filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) => [k, String(v)])).toString();
    if (text) out.push(text);
  }
  return out.length ? `?${out.join('&')}` : '';
}

// A session, one of its views ('functions', 'flamegraph', 'metrics', …), with a query.
export const sessionUrl = (id, view = '', ...parts) =>
  `/api/sessions/${encodeURIComponent(id)}${view ? `/${view}` : ''}${query(...parts)}`;
// The view as filtered now, as a file.
export const exportUrl = (id, format, ...parts) => sessionUrl(id, 'export', { format }, ...parts);
// A page of sessions, newest first: {sessions, total} (total: how many match `q`).
export async function sessionPage({ q = '', limit = 100, offset = 0 } = {}) {
  const r = await reach(`/api/sessions${query({ limit, offset, q })}`, { headers: { Accept: 'application/json' } });
  if (!r.ok) throw new Error((await r.json().catch(() => ({})))?.error?.message || r.statusText);
  return { sessions: await r.json(), total: Number(r.headers.get('X-Total-Count') || 0) };
}
export const importUrl = (name) => `/api/sessions/import${query({ name })}`;

// A connected agent, or what is done to it ('command', 'update').
export const targetUrl = (id, action = '') => `/api/targets/${encodeURIComponent(id)}${action ? `/${action}` : ''}`;
// The agent relay: a command for target `target` ({cmd, args}).
export const agentCommand = (target, body) => api(targetUrl(target, 'command'), { method: 'POST', body });
// The Fleet view's questions ('devices', 'functions', 'flamegraph').
export const fleetUrl = (what, ...parts) => `/api/fleet/${what}${query(...parts)}`;
