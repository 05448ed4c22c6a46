// ---- agentwire data types (src/wasm/types.d.ts, written once, checked by tests/js/types.test.ts)

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A transcript format, as `agentwire normalize --provider` names it. */
export type Format =
  | "claude" | "codex" | "codex-app-server" | "gemini" | "gemini-acp" | "opencode" | "amp"
  | "generic";

/** Which agent produced an event. */
export type Provider =
  | "claude" | "codex" | "gemini" | "opencode" | "amp" | "acp" | "demo" | "generic";

/** What an event says happened (docs/events.md). */
export type EventType =
  | "session_created" | "session_started" | "session_paused" | "session_resumed"
  | "session_completed" | "session_failed" | "session_cancelled"
  | "run_started" | "run_completed" | "run_failed" | "run_cancelled" | "run_timeout"
  | "message_sent" | "message_received" | "message_streamed"
  | "tool_call_started" | "tool_call_completed" | "tool_call_failed"
  | "error_occurred" | "error_recovered" | "token_usage_updated" | "turn_completed"
  | "workspace_snapshot_taken" | "workspace_diff_computed" | "policy_violation"
  | "tool_approval_requested" | "tool_approval_granted" | "tool_approval_denied"
  | "reasoning_streamed" | "reasoning_received" | "tool_call_updated" | "tool_call_cancelled"
  | "todo_updated" | "mode_changed" | "model_changed" | "thinking_option_changed"
  | "attention_required" | "context_compacted" | "run_stalled";

/** What caused a failure: `provider_error.kind`, the same whatever the provider (docs/events.md). */
export type ProviderErrorKind =
  | "authentication_failed" | "billing_error" | "rate_limit" | "invalid_request"
  | "context_window_exceeded" | "server_error" | "overloaded" | "connection_error" | "refusal"
  | "max_turns" | "max_budget" | "config_error" | "protocol_error" | "agent_error"
  | "process_exit" | "cli_not_found" | "spawn_failed" | "stdin_closed" | "unreachable"
  | "request_failed" | "event_stream_closed" | "unreadable_output" | "watchdog"
  | "companion_restart" | "node_lost" | "unknown";

/** Why a run was cancelled: `run_cancelled.data.reason` (docs/events.md). */
export type CancelReason = "interrupted" | "interrupt_timeout" | "session_closed";

/** One canonical event: each line that `normalize()` returns is one, as JSON. */
export interface Event {
  id: string;
  type: EventType;
  session_id: string;
  run_id?: string;
  /** Position in the session's log, from 1. */
  sequence: number;
  /** RFC 3339, UTC, milliseconds. */
  timestamp: string;
  provider: Provider;
  correlation_id?: string;
  data: { [key: string]: Json };
  metadata: { [key: string]: Json };
  schema_version: 1;
}

export type ToolStatus = "running" | "completed" | "failed" | "cancelled";
export type ApprovalStatus = "pending" | "granted" | "denied";

export interface UserMessageItem {
  kind: "user_message";
  text: string;
  run_id?: string;
}

export interface AssistantMessageItem {
  kind: "assistant_message";
  message_id?: string;
  text: string;
  /** More text may come; false once settled or once its turn ended. */
  streaming: boolean;
  /** The provider abandoned it: hide it. */
  discarded: boolean;
  run_id?: string;
}

export interface ReasoningItem {
  kind: "reasoning";
  message_id?: string;
  text: string;
  streaming: boolean;
  discarded: boolean;
  run_id?: string;
}

export interface ToolCallItem {
  kind: "tool_call";
  tool_call_id: string;
  tool_name: string;
  input: Json;
  status: ToolStatus;
  /** The tool's text output (streamed, then replaced by the final output). */
  output: string;
  error?: string;
  title?: string;
  parent_tool_use_id?: string;
  run_id?: string;
}

export interface TodoItem {
  kind: "todo";
  items: Json;
  run_id?: string;
}

export interface ErrorItem {
  kind: "error";
  message: string;
  provider_error?: Json;
  run_id?: string;
}

export interface ApprovalItem {
  kind: "approval";
  request_id: string;
  tool_name: string;
  input: Json;
  status: ApprovalStatus;
  tool_call_id?: string;
  run_id?: string;
}

/** One entry of a session's timeline. Items are only appended; an index names one item. */
export type Item =
  | UserMessageItem | AssistantMessageItem | ReasoningItem | ToolCallItem | TodoItem
  | ErrorItem | ApprovalItem;

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  reasoning_output_tokens: number;
  cost_usd: number;
}

/** How to update a copy of the items: apply the changes of each batch in order. */
export type Change =
  /** A new item at `index` (always the current length). */
  | { op: "insert"; index: number; item: Item }
  /** Append `text` to the item's `text` (messages, reasoning) or `output` (tool calls). */
  | { op: "append"; index: number; text: string }
  /** Replace the item. */
  | { op: "update"; index: number; item: Item }
  | { op: "usage"; totals: Usage }
  /** The request ids of the approvals now pending, in request order. */
  | { op: "approvals"; pending: string[] };

export type Lifecycle = "initializing" | "idle" | "running" | "error" | "closed";

export interface LifecycleState {
  state: Lifecycle;
  /** The turn in progress, if any. */
  active_turn?: string;
  /** Present while that turn is stalled: a `run_stalled` came and nothing since. */
  stalled?: Stall;
}

/** A turn silent for longer than the host's threshold (`serve --stall-ms`). */
export interface Stall {
  run_id: string;
  /** How long the turn had been silent when the host noticed. */
  silent_ms: number;
  /** When the host noticed (unix milliseconds). */
  at_ms: number;
}

export type ViolationKind =
  | "duplicate_user_message" | "stale_terminal" | "event_after_terminal" | "reused_turn_id"
  | "non_increasing_sequence";

export type DiagnosticKind =
  | "invalid_utf8" | "invalid_json" | "line_too_long" | "not_an_object" | "unknown_type"
  | "missing_field" | "document_too_long";

/** Something to know besides the changes. */
export type Note =
  /** Everything stored up to `latest` was delivered; what follows is live. */
  | { note: "caught_up"; latest: number }
  /** The server's log was rebuilt: the session starts over (the batch has `reset`). */
  | { note: "reset"; epoch: string; reason: string }
  /** The server caught the session up again from `after`; nothing was skipped. */
  | { note: "resync"; after: number }
  /** Sequences were missing; the client resubscribed from `after`. */
  | { note: "gap"; after: number; next_received: number }
  | { note: "violation"; kind: ViolationKind; sequence: number; applied: boolean }
  /** A line of a raw transcript that could not be read. */
  | { note: "diagnostic"; line: number; kind: DiagnosticKind; message: string }
  | { note: "error"; code: ErrorCode; message: string }
  /** The session's store changed state (`session_status`); the same fields as `StoreStatus`. */
  | {
      note: "store"; state: StoreState; error?: string; since?: string; attempts?: number;
      unstored: number;
    };

export type StoreState = "available" | "unavailable";

/** Whether a session's events reach the server's store (`Client.store(session)`, a
 * description's `store`). While `unavailable`, `unstored` events wait on the server, in order;
 * nothing is lost. */
export interface StoreStatus {
  state: StoreState;
  /** The last failure (while unavailable). */
  error?: string;
  /** RFC 3339: the first failure of this outage (while unavailable). */
  since?: string;
  /** Failed writes in this outage (while unavailable). */
  attempts?: number;
  unstored: number;
}

/** What changed in one session since the previous batch. */
export interface SessionBatch {
  session: string;
  /** Drop every item held for this session before applying `changes`. */
  reset?: true;
  changes: Change[];
  /** Present when the lifecycle or the active turn changed. */
  lifecycle?: LifecycleState;
  /** The index of the first item held, when it moved: after a snapshot (with `reset`) or
   *  a history page (with `older`). A `reset` without it starts at 0. Change indices are
   *  absolute: the item at `index` is held at `index - start`. */
  start?: number;
  /** Older items (a history page), to put before those held; they begin at `start`. Apply
   *  them before `changes`. */
  older?: Item[];
  /** The cursor: the last sequence applied, and its epoch. */
  after: number;
  epoch?: string;
  notes?: Note[];
}

/** One drain: `Projector.drain()`. */
export interface Batch {
  sessions: SessionBatch[];
  /** Notes that belong to no session (protocol errors, unreadable frames). */
  notes?: Note[];
}

export type ConnectionState = "connecting" | "live" | "caught_up" | "reconnecting" | "closed";

/** What `ClientOptions.onChange` receives, at most once per animation frame. */
export interface ClientBatch extends Batch {
  /** Present when the connection state changed. */
  state?: ConnectionState;
  /** Present when the transport changed: `sse` is the fallback (Server-Sent Events and HTTP
   * commands) where WebSockets do not get through. */
  transport?: Transport;
}

export type Transport = "websocket" | "sse";

export type Decision = "allow" | "deny";

/** How hard the model thinks, where the agent CLI lets a client choose. */
export type Thinking = "off" | "low" | "medium" | "high";

/** `Client.setModel`'s change: a model, a thinking level, or both. */
export interface ModelChange {
  model?: string;
  thinking?: Thinking;
}

/** What a session's agent can do besides prompts, interrupts and approvals. */
export interface Capabilities {
  set_mode: boolean;
  set_model: boolean;
  thinking: boolean;
  commands: boolean;
  resume: boolean;
}

export interface Mode {
  id: string;
  name: string;
  description?: string;
}

/** `Client.describeSession`'s answer (the same as `GET /api/sessions/{id}`). */
export interface SessionDescription {
  session: SessionRecord;
  latest_sequence: number;
  epoch: string;
  /** From the CLI's `session_started`: `model`, `version`, `cwd`, `provider_session_id`, … */
  runtime: { [key: string]: Json };
  capabilities: Capabilities;
  /** The `tool_approval_requested` data still waiting for an answer. */
  pending_approvals: Json[];
  store: StoreStatus;
  /** While the agent runs on the companion asked: */
  modes?: Mode[];
  current_mode?: string | null;
  commands?: Json[] | null;
}

/** A session as the companion stores it (`GET /api/sessions/{id}`'s `session`). */
export interface SessionRecord {
  id: string;
  provider: string;
  cwd: string;
  state: "starting" | "running" | "closed" | "failed";
  /** The agent CLI's own session id, with which the companion resumes it. */
  provider_session_id: string | null;
  created_at: string;
  updated_at: string;
  /** The companion that hosts (or last hosted) it: its `serve --node` name. */
  node: string;
}

export interface ClientOptions {
  /** The server's WebSocket URL, e.g. `ws://127.0.0.1:7777/ws`. */
  url: string;
  token: string;
  /** Sessions to follow from the start. */
  sessions?: string[];
  onChange: (batch: ClientBatch) => void;
  /** First reconnect delay (100 ms); doubles up to `backoffMaxMs` (5000 ms), with jitter. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** How long opening a socket and the handshake may take (10000 ms). */
  connectTimeoutMs?: number;
  /** Fall back to Server-Sent Events and HTTP where WebSockets do not get through (true). */
  fallback?: boolean;
  /** Open each session with no cursor from a snapshot of its last `items` items (200 when
   *  omitted) instead of replaying its log; page older ones in with `Client.history`. A
   *  reconnect resumes from the cursor, never from a new snapshot. */
  snapshot?: { items?: number };
}

/** Codes raised by this package. */
export type ClientErrorCode =
  | "bad_options" | "bad_decision" | "unknown_provider" | "not_a_transcript"
  | "not_connected" | "connection_lost" | "queue_full" | "closed" | "malformed_event"
  | "unknown_error";

/** Codes of the wire protocol, the server's command replies and its HTTP API
 * (docs/protocol.md); the same list as `core::error::ErrorCode`, checked by a test. */
export type ServerErrorCode =
  | "malformed_frame" | "unknown_type" | "frame_too_large" | "binary_frame" | "already_hello"
  | "hello_required" | "hello_timeout" | "unsupported_protocol" | "bad_command_id"
  | "bad_session_id" | "too_many_subscriptions" | "too_many_requests" | "forbidden_host" | "forbidden_origin"
  | "token_required" | "bad_token" | "too_many_attempts" | "unknown_session"
  | "unknown_request" | "unknown_provider" | "unknown_mode" | "foreground_turn_active"
  | "no_active_turn" | "turn_id_used" | "bad_turn_id" | "empty_prompt" | "bad_cwd" | "not_connected"
  | "already_running" | "hosted_elsewhere" | "no_resume_handle" | "unsupported"
  | "cli_not_found" | "spawn_failed" | "store_error" | "bad_request" | "bad_body"
  | "body_too_large" | "unsupported_media_type" | "method_not_allowed" | "not_found"
  | "bad_since" | "bad_type" | "internal_error" | "agent_busy";

export type ErrorCode = ClientErrorCode | ServerErrorCode;

/** Every error this package throws or rejects with. */
export interface AgentwireError extends Error {
  name: "AgentwireError";
  code: ErrorCode;
}
