// agentwire/react: React hooks over a `Client`, built on `useSyncExternalStore`. See
// index.d.ts and the package's README.

import { createContext, createElement, useCallback, useContext, useMemo, useSyncExternalStore } from "react";
import { Client } from "agentwire";

import { AgentwireStore, CONNECTION } from "./store.js";

export { AgentwireStore } from "./store.js";

/** A store with its own `Client` (the same options, `onChange` optional: it still gets every
 * batch, after the store applied it). */
export function connect(options) {
  const store = new AgentwireStore();
  store._followed = new Set(options.sessions ?? []);
  const onChange = options.onChange;
  store.client = new Client({
    ...options,
    onChange: (batch) => {
      store.apply(batch);
      if (onChange) onChange(batch);
    },
  });
  store._connection = store.client.state;
  return store;
}

const Context = createContext(null);

/** Gives the hooks below their store. */
export function AgentwireProvider({ store, children }) {
  return createElement(Context.Provider, { value: store }, children);
}

/** The store given to the nearest `AgentwireProvider`. */
export function useAgentwire() {
  const store = useContext(Context);
  if (!store) throw new Error("agentwire/react: no AgentwireProvider above this component");
  return store;
}

/** The session's whole state; re-renders on any change in it. */
export function useSession(session) {
  const store = useAgentwire();
  const subscribe = useCallback((listener) => store.subscribe(listener, session), [store, session]);
  const get = () => store.session(session);
  return useSyncExternalStore(subscribe, get, get);
}

function useSessionField(session, field) {
  const store = useAgentwire();
  const subscribe = useCallback((listener) => store.subscribe(listener, session), [store, session]);
  const get = () => store.session(session)[field];
  return useSyncExternalStore(subscribe, get, get);
}

/** The session's items; an item that did not change keeps its object. */
export function useItems(session) {
  return useSessionField(session, "items");
}

/** The session's lifecycle (`{state, active_turn?, stalled?}`), undefined until known. */
export function useLifecycle(session) {
  return useSessionField(session, "lifecycle");
}

/** The approval items still waiting for an answer, in request order. */
export function usePendingApprovals(session) {
  return useSessionField(session, "approvals");
}

/** The session's token usage totals, once reported. */
export function useUsage(session) {
  return useSessionField(session, "usage");
}

/** The connection state. */
export function useConnection() {
  const store = useAgentwire();
  const subscribe = useCallback((listener) => store.subscribe(listener, CONNECTION), [store]);
  const get = () => store.connection();
  return useSyncExternalStore(subscribe, get, get);
}

/** The session's commands, bound to the store's client (the same object while the store and
 * the session stay). */
export function useCommands(session) {
  const store = useAgentwire();
  return useMemo(() => {
    const client = () => {
      if (!store.client) throw new Error("agentwire/react: the store has no client (closed?)");
      return store.client;
    };
    return {
      startTurn: (prompt) => client().startTurn(session, prompt),
      interrupt: () => client().interrupt(session),
      answerApproval: (requestId, decision) => client().answerApproval(session, requestId, decision),
      setMode: (mode) => client().setMode(session, mode),
      setModel: (change) => client().setModel(session, change),
      resumeSession: () => client().resumeSession(session),
      describeSession: () => client().describeSession(session),
    };
  }, [store, session]);
}
