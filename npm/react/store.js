// agentwire/react's store: the sessions' state as immutable values, updated from the batches a
// `Client` (or a `Projector`) gives, for `useSyncExternalStore`. An item that a batch did not
// change keeps its object; so does a session's `items` array, `lifecycle` and `approvals` when
// nothing in them changed, so memoized rows and virtualized lists skip their render. No React
// here: index.js adds the hooks.

const NO_ITEMS = Object.freeze([]);

/** What a session looks like before its first batch. */
const EMPTY = Object.freeze({
  items: NO_ITEMS,
  lifecycle: undefined,
  pending: NO_ITEMS,
  approvals: NO_ITEMS,
  usage: undefined,
});

export class AgentwireStore {
  constructor() {
    /** The `Client` that `connect()` created (null for a store fed by hand). */
    this.client = null;
    this._sessions = new Map();
    this._connection = "connecting";
    this._listeners = new Map();
    this._all = new Set();
  }

  /** The session's state: `{items, lifecycle, pending, approvals, usage}`. The same object
   * until a batch changes the session. */
  session(id) {
    return this._sessions.get(id) ?? EMPTY;
  }

  /** The connection state (`connecting`, `live`, `caught_up`, `reconnecting`, `closed`). */
  connection() {
    return this._connection;
  }

  /** Calls `listener` after each batch that changed the session (or, with no session, after
   * each batch that changed anything). Returns the unsubscribe function. */
  subscribe(listener, session) {
    let set = session === undefined ? this._all : this._listeners.get(session);
    if (!set) this._listeners.set(session, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (session !== undefined && set.size === 0) this._listeners.delete(session);
    };
  }

  /** Applies one batch (`ClientBatch` or `Projector.drain()`), then tells the listeners of
   * what changed. */
  apply(batch) {
    const woken = new Set();
    let changed = false;
    if (batch.state !== undefined && batch.state !== this._connection) {
      this._connection = batch.state;
      changed = true;
      for (const l of this._listeners.get(CONNECTION) ?? []) woken.add(l);
    }
    for (const s of batch.sessions ?? []) {
      const before = this.session(s.session);
      const after = next(before, s);
      if (after === before) continue;
      this._sessions.set(s.session, after);
      changed = true;
      for (const l of this._listeners.get(s.session) ?? []) woken.add(l);
    }
    if (!changed) return;
    for (const l of this._all) woken.add(l);
    for (const l of woken) l();
  }

  /** Follows one more session (`Client.subscribe`), unless it is followed already. */
  follow(session) {
    if (!this.client) throw new Error("this store has no client: it was not made by connect()");
    if (this._followed?.has(session)) return;
    this._followed?.add(session);
    this.client.subscribe(session);
  }

  /** Closes and frees the client. */
  close() {
    if (!this.client) return;
    const client = this.client;
    this.client = null;
    client.close();
    client.free();
  }
}

/** The key under which connection listeners are kept. */
export const CONNECTION = Symbol("connection");

/** The session's state after one `SessionBatch`: `before` itself when nothing changed. */
function next(before, batch) {
  let items = batch.reset ? [] : before.items;
  let copied = batch.reset;
  let { pending, usage } = before;
  const write = () => {
    if (!copied) {
      items = items.slice();
      copied = true;
    }
    return items;
  };
  for (const c of batch.changes) {
    switch (c.op) {
      case "insert":
      case "update":
        write()[c.index] = c.item;
        break;
      case "append": {
        const item = items[c.index];
        if (!item) break;
        const field = item.kind === "tool_call" ? "output" : "text";
        write()[c.index] = { ...item, [field]: item[field] + c.text };
        break;
      }
      case "usage":
        usage = c.totals;
        break;
      case "approvals":
        pending = sameList(pending, c.pending) ? pending : c.pending;
        break;
    }
  }
  const lifecycle =
    batch.lifecycle === undefined || sameLifecycle(before.lifecycle, batch.lifecycle)
      ? before.lifecycle
      : batch.lifecycle;
  if (copied && !batch.reset && sameList(items, before.items)) items = before.items;
  if (items === before.items && lifecycle === before.lifecycle && pending === before.pending && usage === before.usage) {
    return before;
  }
  let approvals = before.approvals;
  if (items !== before.items || pending !== before.pending) {
    const byRequest = new Map();
    for (const item of items) if (item.kind === "approval") byRequest.set(item.request_id, item);
    const list = pending.map((id) => byRequest.get(id)).filter((item) => item !== undefined);
    if (!sameList(list, approvals)) approvals = list;
  }
  return { items, lifecycle, pending, approvals, usage };
}

function sameList(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function sameLifecycle(a, b) {
  return a !== undefined && JSON.stringify(a) === JSON.stringify(b);
}
