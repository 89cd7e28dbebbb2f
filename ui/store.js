// The page's model of the collector, fed by the live stream (GET /api/stream), and the page's
// actions between views (act, subscribe):
//   - the targets: the whole list from the `targets` event a stream opens with, then the
//     targets that changed or left from each `targets_changed` (the page never asks again);
//   - per session, what `data_version` carries: its data version and the counts a page shows
//     (chunks, samples, lost samples, threads, the samples' span);
//   - a cache of view answers keyed by (session, data version, request): a view asked again
//     for data that has not changed is answered from memory, two asks in flight share one
//     request, and only the newest version of each request is kept, the least recently used
//     dropped past `limit`. A part of a page that changes slowly (a session's header) may take
//     an answer for an earlier version for `lag` ms: a live session then costs it one request
//     every `lag`, not one per update.
// No DOM: `fetchJson(path)` does the asking, so the model is tested under node
// (test/ui/unit/store.test.mjs). Answers handed out are shared: a view must not change them.

import { api } from './api.js';

// The scope of the Fleet view's answers: the fleet store is written by other collectors too, so
// an answer is good for `lag` ms, whatever this collector's stream said.
export const FLEET = '*fleet';

export function createStore({ fetchJson, limit = 24, now = () => Date.now() } = {}) {
  let targets = null; // null until the stream has said
  let status = null; // the collector's, as the stream last said it
  const sessions = new Map(); // id → {version, chunks, samples, lost_samples, threads, duration_sec}
  const answers = new Map(); // `${session}\n${path}` → {version, promise}; insertion order is use order
  const listeners = new Set();
  const emit = (what, id) => { for (const l of [...listeners]) l(what, id); };

  return {
    // The targets as the stream last listed them; null before its first `targets` event.
    targets: () => targets,
    setTargets(list) {
      targets = Array.isArray(list) ? list : [];
      emit('targets');
    },
    // A `targets_changed` event ({targets: [changed], gone: [ids]}): a changed target replaces
    // its earlier self in place, a new one is added at the end, one gone leaves. Ignored
    // before the first list (a stream always opens with one).
    targetsChanged(d) {
      if (targets === null || !d) return false;
      const gone = new Set(Array.isArray(d.gone) ? d.gone : []);
      const changed = new Map((Array.isArray(d.targets) ? d.targets : []).map((t) => [t.id, t]));
      const next = [];
      for (const t of targets) {
        if (gone.has(t.id)) continue;
        next.push(changed.get(t.id) ?? t);
        changed.delete(t.id);
      }
      for (const t of changed.values()) if (!gone.has(t.id)) next.push(t);
      targets = next;
      emit('targets');
      return true;
    },

    // The collector's status (GET /api/status's shape), as the stream's `status` events say it
    // (when a stream opens, then whenever it changes); null before the first.
    status: () => status,
    setStatus(s) {
      status = s && typeof s === 'object' ? s : {};
      emit('status');
    },

    // What the stream said of a session's data; null if it has said nothing yet.
    counts: (id) => sessions.get(id) ?? null,
    version: (id) => sessions.get(id)?.version ?? 0,
    // A `data_version` event. True when it is news (a later version than known): the views of
    // that session are then asked again when next shown.
    dataChanged(d) {
      if (!d || typeof d.session_id !== 'string') return false;
      const known = sessions.get(d.session_id);
      if (known && !(Number(d.version) > known.version)) return false;
      sessions.set(d.session_id, {
        version: Number(d.version) || 0,
        chunks: Number(d.chunks) || 0,
        samples: Number(d.samples) || 0,
        lost_samples: Number(d.lost_samples) || 0,
        threads: Number(d.threads) || 0,
        duration_sec: Number(d.duration_sec) || 0,
      });
      emit('data', d.session_id);
      return true;
    },

    // The answer to `path` (a view of `session`, or of FLEET) for its data as the stream last
    // told it, or, with `lag`, for an earlier version asked less than `lag` ms ago.
    view(session, path, { lag = 0 } = {}) {
      const key = `${session}\n${path}`;
      const version = sessions.get(session)?.version ?? 0;
      const hit = answers.get(key);
      const young = hit && now() - hit.at < lag;
      if (hit && (session === FLEET ? young : hit.version === version || young)) {
        answers.delete(key); // most recently used last
        answers.set(key, hit);
        return hit.promise;
      }
      const entry = { version, at: now(), promise: null };
      entry.promise = Promise.resolve()
        .then(() => fetchJson(path))
        .catch((e) => {
          if (answers.get(key) === entry) answers.delete(key); // an error is not kept
          throw e;
        });
      answers.delete(key);
      answers.set(key, entry);
      while (answers.size > limit) answers.delete(answers.keys().next().value);
      return entry.promise;
    },
    cached: () => answers.size,

    // The stream opened again (the collector may have restarted, its data versions with it):
    // what it said before is forgotten, and its next `targets` and `data_version` count as news.
    reset() {
      sessions.clear();
      status = null;
      answers.clear();
    },

    // A session deleted: nothing of it is kept.
    forget(session) {
      sessions.delete(session);
      this.refresh(session);
    },
    // Something of a session changed that its data version does not count (it ended, it was
    // renamed): every answer about it is asked again.
    refresh(session) {
      for (const key of [...answers.keys()]) if (key.startsWith(`${session}\n`)) answers.delete(key);
    },

    // A page-wide action with its detail, for the view that takes it: 'callers' (a function's
    // name), 'source' (a function's name), 'baseline' (a session id, '' to stop comparing).
    // render.js turns the page's shared markup into actions; no view reads another's markup.
    act(what, detail) {
      emit(what, detail);
    },

    // fn(what, detail) after each change ('targets', 'status'; 'data' with the session id)
    // and each action; returns the unsubscribe.
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
}

// The page's one store, asking the collector's API.
export const store = createStore({ fetchJson: (path) => api(path) });
