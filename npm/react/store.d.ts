import type {
  ApprovalItem, Batch, Client, ClientBatch, ConnectionState, Item, LifecycleState, Usage,
} from "agentwire";

/** One session's state. Treat it as immutable: a batch that changes the session replaces this
 * object, and of its fields only those that changed (an unchanged item keeps its object). */
export interface SessionState {
  readonly items: readonly Item[];
  /** Undefined until the first lifecycle arrives. */
  readonly lifecycle: LifecycleState | undefined;
  /** The request ids of the pending approvals, in request order. */
  readonly pending: readonly string[];
  /** The pending approvals' items, in request order. */
  readonly approvals: readonly ApprovalItem[];
  readonly usage: Usage | undefined;
}

/** The key that `subscribe` takes to hear of connection state changes only. */
export declare const CONNECTION: unique symbol;

/** The sessions' state, updated by `apply(batch)`; what the hooks read. */
export declare class AgentwireStore {
  constructor();
  /** The `Client` that `connect()` created; null for a store fed by hand or once closed. */
  client: Client | null;
  /** The session's state: the same object until a batch changes the session. */
  session(id: string): SessionState;
  connection(): ConnectionState;
  /** `listener` runs after each batch that changed the session (`CONNECTION`: the connection
   * state; nothing: anything). Returns the unsubscribe function. */
  subscribe(listener: () => void, session?: string | typeof CONNECTION): () => void;
  /** Applies a `ClientBatch` or a `Projector.drain()`, then calls the listeners concerned. */
  apply(batch: Batch | ClientBatch): void;
  /** Follows one more session (`Client.subscribe`), unless it is followed already. */
  follow(session: string): void;
  /** Closes and frees the client. */
  close(): void;
}
