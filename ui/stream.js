// The live stream of the collector's events. Over a WebSocket (GET /api/ws): a browser keeps
// at most six HTTP/1.1 connections per host for all its tabs, and an EventSource holds one
// for as long as its tab is open, so a sixth tab would leave none for anybody's requests;
// WebSockets are not counted there, so any number of tabs stay live. A page that cannot open
// one (a proxy that does not pass upgrades) uses EventSource on GET /api/stream instead.
// Returns an EventTarget: 'open', 'error', and each event of the collector by its kind, with
// `data` as EventSource gives it.

export const KINDS = ['status', 'targets', 'targets_changed', 'data_version', 'sessions', 'import', 'metrics'];

// The collector says something at least every 15 s (a keep-alive comment when nothing else):
// silent longer, it is stopped or hung with its socket open — what the page shows is stale.
export const SILENT_MS = 25000;

// One WebSocket message ("event: KIND\ndata: JSON\n\n", or a ": keep-alive" comment) as
// [kind, data], or null for a comment.
export function parseEvent(text) {
  let kind = 'message';
  const data = [];
  for (const line of String(text).split('\n')) {
    if (line.startsWith('event: ')) kind = line.slice(7);
    else if (line.startsWith('data: ')) data.push(line.slice(6));
  }
  return data.length ? [kind, data.join('\n')] : null;
}

export function openLiveStream() {
  const target = new EventTarget();
  const say = (kind, data) => target.dispatchEvent(data === undefined ? new Event(kind) : new MessageEvent(kind, { data }));
  let opened = false, wait = 500;
  const overEventSource = () => {
    const es = new EventSource('/api/stream');
    es.onopen = () => say('open');
    es.onerror = () => say('error');
    for (const kind of KINDS) es.addEventListener(kind, (e) => say(kind, e.data));
  };
  const overWebSocket = () => {
    const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/api/ws`);
    let quiet = 0;
    const lost = () => {
      clearTimeout(quiet);
      ws.onclose = ws.onmessage = null;
      say('error');
      if (!opened) { overEventSource(); return; } // never open here: EventSource does its own reconnecting
      setTimeout(overWebSocket, wait); // the collector restarted, or dropped a page that fell behind
      wait = Math.min(wait * 2, 10000);
    };
    // (A socket whose peer is silent is given up without waiting for its close.)
    const heard = () => { clearTimeout(quiet); quiet = setTimeout(() => { lost(); ws.close(); }, SILENT_MS); };
    ws.onopen = () => { opened = true; wait = 500; heard(); say('open'); };
    ws.onmessage = (e) => { heard(); const ev = parseEvent(e.data); if (ev) say(ev[0], ev[1]); };
    ws.onclose = lost;
  };
  overWebSocket();
  return target;
}
