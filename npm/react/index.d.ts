import type { ReactNode } from "react";
import type {
  ApprovalItem, ClientBatch, ClientOptions, ConnectionState, Decision, Item, LifecycleState,
  ModelChange, SessionDescription, SessionRecord, Usage,
} from "agentwire";
import type { AgentwireStore, SessionState } from "./store.js";

export { AgentwireStore, CONNECTION } from "./store.js";
export type { SessionState } from "./store.js";

/** `ClientOptions` with `onChange` optional: it gets each batch after the store applied it. */
export type ConnectOptions = Omit<ClientOptions, "onChange"> & {
  onChange?: (batch: ClientBatch) => void;
};

/** A store with its own `Client`, connected at once. */
export function connect(options: ConnectOptions): AgentwireStore;

/** Gives the hooks their store. */
export function AgentwireProvider(props: { store: AgentwireStore; children?: ReactNode }): ReactNode;

/** The store of the nearest `AgentwireProvider` (throws without one). */
export function useAgentwire(): AgentwireStore;
/** The session's whole state; re-renders on any change in the session. */
export function useSession(session: string): SessionState;
/** The session's items; an unchanged item keeps its object across updates. */
export function useItems(session: string): readonly Item[];
export function useLifecycle(session: string): LifecycleState | undefined;
/** The approvals waiting for an answer, in request order. */
export function usePendingApprovals(session: string): readonly ApprovalItem[];
export function useUsage(session: string): Usage | undefined;
export function useConnection(): ConnectionState;

/** The session's commands on the store's client; the same object while store and session
 * stay. Each returns the Client's promise (rejects with an `AgentwireError`). */
export interface Commands {
  startTurn(prompt: string): Promise<{ turnId: string }>;
  interrupt(): Promise<void>;
  answerApproval(requestId: string, decision: Decision): Promise<void>;
  setMode(mode: string): Promise<void>;
  setModel(change: ModelChange): Promise<void>;
  resumeSession(): Promise<SessionRecord>;
  describeSession(): Promise<SessionDescription>;
}
export function useCommands(session: string): Commands;
