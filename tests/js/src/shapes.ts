// Runtime shapes of everything the package returns, tied to its TypeScript types at compile
// time: `object<T>` must list exactly T's required and optional keys, `tagged<U>` exactly the
// tags of the union U, `oneOf<T>` exactly the members of the string union T. So `tsc` fails
// when the types and these shapes drift apart, and the runtime check fails when the code
// returns anything the types do not describe (an unknown key, a missing one, a wrong type).

import type {
  ApprovalItem, ApprovalStatus, AssistantMessageItem, Batch, Change, ClientBatch, ConnectionState, Transport, DiagnosticKind, ErrorCode, Event,
  ErrorItem, EventType, Item, Json, Lifecycle, LifecycleState, Note, Provider, ReasoningItem, SessionBatch, Stall, TodoItem,
  ToolCallItem, ToolStatus, Usage, UserMessageItem, ViolationKind, StoreState, StoreStatus,
} from "../../../pkg-web/agentwire.js";

export type Check = (v: unknown, path: string) => void;

/** A checker that stands for values of type T (the phantom field keeps T in the type). */
export interface Shape<T> {
  check: Check;
  readonly _type?: T;
}

function fail(path: string, what: string, v: unknown): never {
  throw new Error(`${path}: expected ${what}, got ${JSON.stringify(v)}`);
}

/** The variant of union U whose `K` is `T`. */
type Variant<U, K extends keyof U, T> = Extract<U, Record<K, T>>;

type RequiredKeys<T> = { [K in keyof T]-?: {} extends Pick<T, K> ? never : K }[keyof T];
type OptionalKeys<T> = { [K in keyof T]-?: {} extends Pick<T, K> ? K : never }[keyof T];

export const str: Check = (v, p) => { if (typeof v !== "string") fail(p, "a string", v); };
export const num: Check = (v, p) => {
  if (typeof v !== "number" || !Number.isFinite(v)) fail(p, "a number", v);
};
export const nat: Check = (v, p) => {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) fail(p, "a natural number", v);
};
export const bool: Check = (v, p) => { if (typeof v !== "boolean") fail(p, "a boolean", v); };
export const lit = (want: unknown): Check => (v, p) => { if (v !== want) fail(p, JSON.stringify(want), v); };
export const arrayOf = (item: Check): Check => (v, p) => {
  if (!Array.isArray(v)) fail(p, "an array", v);
  v.forEach((x, i) => item(x, `${p}[${i}]`));
};
export const json: Check = (v, p) => {
  if (v === null || typeof v === "boolean" || typeof v === "string") return;
  if (typeof v === "number") return num(v, p);
  if (Array.isArray(v)) return v.forEach((x, i) => json(x, `${p}[${i}]`));
  if (typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
    for (const [k, x] of Object.entries(v)) json(x, `${p}.${k}`);
    return;
  }
  fail(p, "JSON", v);
};
const jsonObject: Check = (v, p) => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(p, "an object", v);
  json(v, p);
};

/** Exactly the members of the string union T. */
export function oneOf<T extends string>(members: { [K in T]: true }): Shape<T> {
  const set = new Set(Object.keys(members));
  return { check: (v, p) => { if (typeof v !== "string" || !set.has(v)) fail(p, [...set].join("|"), v); } };
}

/** Exactly T's keys: the required ones present, the optional ones checked when present. */
export function object<T>(
  required: { [K in RequiredKeys<T>]-?: Check | Shape<unknown> },
  optional: { [K in OptionalKeys<T>]-?: Check | Shape<unknown> },
): Shape<T> {
  const run = (c: Check | Shape<unknown>): Check => (typeof c === "function" ? c : c.check);
  const req = Object.entries(required) as [string, Check | Shape<unknown>][];
  const opt = new Map(Object.entries(optional) as [string, Check | Shape<unknown>][]);
  return {
    check: (v, p) => {
      if (typeof v !== "object" || v === null || Array.isArray(v)) fail(p, "an object", v);
      const o = v as Record<string, unknown>;
      for (const [k, c] of req) {
        if (!(k in o)) fail(`${p}.${k}`, "a required key", undefined);
        run(c)(o[k], `${p}.${k}`);
      }
      for (const k of Object.keys(o)) {
        const c = opt.get(k);
        if (c) run(c)(o[k], `${p}.${k}`);
        else if (!(k in required)) fail(`${p}.${k}`, "no such key", o[k]);
      }
    },
  };
}

/** A union discriminated by `key`, with one shape per tag, exactly. */
export function tagged<U, K extends keyof U & string>(
  key: K,
  variants: { [V in U[K] & string]: Shape<Extract<U, Record<K, V>>> },
): Shape<U> {
  const table = variants as Record<string, Shape<unknown>>;
  return {
    check: (v, p) => {
      const tag = (v as Record<string, unknown> | null)?.[key];
      const shape = typeof tag === "string" ? table[tag] : undefined;
      if (!shape) fail(`${p}.${key}`, Object.keys(table).join("|"), tag);
      shape.check(v, p);
    },
  };
}

const dict = (c: Check): Check => (v, p) => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(p, "an object", v);
  for (const [k, x] of Object.entries(v)) c(x, `${p}.${k}`);
};

export const eventType = oneOf<EventType>({
  session_created: true, session_started: true, session_paused: true, session_resumed: true,
  session_completed: true, session_failed: true, session_cancelled: true, run_started: true,
  run_completed: true, run_failed: true, run_cancelled: true, run_timeout: true,
  message_sent: true, message_received: true, message_streamed: true, tool_call_started: true,
  tool_call_completed: true, tool_call_failed: true, error_occurred: true, error_recovered: true,
  token_usage_updated: true, turn_completed: true, workspace_snapshot_taken: true,
  workspace_diff_computed: true, policy_violation: true, tool_approval_requested: true,
  tool_approval_granted: true, tool_approval_denied: true, reasoning_streamed: true,
  reasoning_received: true, tool_call_updated: true, tool_call_cancelled: true,
  todo_updated: true, mode_changed: true, model_changed: true, thinking_option_changed: true,
  attention_required: true, context_compacted: true, run_stalled: true,
});
const provider = oneOf<Provider>({
  claude: true, codex: true, gemini: true, opencode: true, amp: true, acp: true, demo: true,
  generic: true,
});
export const event = object<Event>(
  {
    id: str, type: eventType, session_id: str, sequence: nat, timestamp: str, provider,
    data: dict(json), metadata: dict(json), schema_version: lit(1),
  },
  { run_id: str, correlation_id: str },
);

const toolStatus = oneOf<ToolStatus>({ running: true, completed: true, failed: true, cancelled: true });
const approvalStatus = oneOf<ApprovalStatus>({ pending: true, granted: true, denied: true });
const message = { text: str, streaming: bool, discarded: bool };
export const item = tagged<Item, "kind">("kind", {
  user_message: object<UserMessageItem>({ kind: lit("user_message"), text: str }, { run_id: str }),
  assistant_message: object<AssistantMessageItem>(
    { kind: lit("assistant_message"), ...message },
    { message_id: str, run_id: str },
  ),
  reasoning: object<ReasoningItem>({ kind: lit("reasoning"), ...message }, { message_id: str, run_id: str }),
  tool_call: object<ToolCallItem>(
    { kind: lit("tool_call"), tool_call_id: str, tool_name: str, input: json, status: toolStatus, output: str },
    { error: str, title: str, parent_tool_use_id: str, run_id: str },
  ),
  todo: object<TodoItem>({ kind: lit("todo"), items: json }, { run_id: str }),
  error: object<ErrorItem>({ kind: lit("error"), message: str }, { provider_error: json, run_id: str }),
  approval: object<ApprovalItem>(
    { kind: lit("approval"), request_id: str, tool_name: str, input: json, status: approvalStatus },
    { tool_call_id: str, run_id: str },
  ),
});
const usage = object<Usage>(
  {
    input_tokens: nat, output_tokens: nat, cache_read_input_tokens: nat,
    cache_creation_input_tokens: nat, reasoning_output_tokens: nat, cost_usd: num,
  },
  {},
);
export const change = tagged<Change, "op">("op", {
  insert: object<Variant<Change, "op", "insert">>({ op: lit("insert"), index: nat, item }, {}),
  append: object<Variant<Change, "op", "append">>({ op: lit("append"), index: nat, text: str }, {}),
  update: object<Variant<Change, "op", "update">>({ op: lit("update"), index: nat, item }, {}),
  usage: object<Variant<Change, "op", "usage">>({ op: lit("usage"), totals: usage }, {}),
  approvals: object<Variant<Change, "op", "approvals">>({ op: lit("approvals"), pending: arrayOf(str) }, {}),
});
export const lifecycle = oneOf<Lifecycle>({
  initializing: true, idle: true, running: true, error: true, closed: true,
});
const stall = object<Stall>({ run_id: str, silent_ms: nat, at_ms: num }, {});
const lifecycleState = object<LifecycleState>({ state: lifecycle }, { active_turn: str, stalled: stall });
export const errorCode = oneOf<ErrorCode>({
  bad_options: true, bad_decision: true, unknown_provider: true, not_a_transcript: true,
  not_connected: true, connection_lost: true, queue_full: true, closed: true, malformed_event: true,
  unknown_error: true, malformed_frame: true, unknown_type: true, frame_too_large: true,
  binary_frame: true, already_hello: true, hello_required: true, hello_timeout: true,
  unsupported_protocol: true, unknown_session: true, foreground_turn_active: true,
  empty_prompt: true, no_active_turn: true, unknown_request: true, turn_id_used: true, bad_turn_id: true,
  store_error: true, bad_cwd: true, cli_not_found: true, spawn_failed: true, unsupported: true,
  unknown_mode: true, bad_request: true, already_running: true, no_resume_handle: true,
  hosted_elsewhere: true, bad_command_id: true, bad_session_id: true,
  too_many_subscriptions: true, too_many_requests: true, forbidden_host: true, forbidden_origin: true,
  token_required: true, bad_token: true, too_many_attempts: true, bad_body: true,
  body_too_large: true, unsupported_media_type: true, method_not_allowed: true,
  not_found: true, bad_since: true, bad_type: true, internal_error: true, agent_busy: true,
});
const storeState = oneOf<StoreState>({ available: true, unavailable: true });
export const storeStatus = object<StoreStatus>(
  { state: storeState, unstored: nat },
  { error: str, since: str, attempts: nat },
);
export const note = tagged<Note, "note">("note", {
  caught_up: object<Variant<Note, "note", "caught_up">>({ note: lit("caught_up"), latest: nat }, {}),
  reset: object<Variant<Note, "note", "reset">>({ note: lit("reset"), epoch: str, reason: str }, {}),
  resync: object<Variant<Note, "note", "resync">>({ note: lit("resync"), after: nat }, {}),
  gap: object<Variant<Note, "note", "gap">>({ note: lit("gap"), after: nat, next_received: nat }, {}),
  violation: object<Variant<Note, "note", "violation">>(
    {
      note: lit("violation"),
      kind: oneOf<ViolationKind>({
        duplicate_user_message: true, stale_terminal: true, event_after_terminal: true,
        reused_turn_id: true, non_increasing_sequence: true,
      }),
      sequence: nat,
      applied: bool,
    },
    {},
  ),
  diagnostic: object<Variant<Note, "note", "diagnostic">>(
    {
      note: lit("diagnostic"),
      line: nat,
      kind: oneOf<DiagnosticKind>({
        invalid_utf8: true, invalid_json: true, line_too_long: true, not_an_object: true,
        unknown_type: true, missing_field: true, document_too_long: true,
      }),
      message: str,
    },
    {},
  ),
  error: object<Variant<Note, "note", "error">>({ note: lit("error"), code: errorCode, message: str }, {}),
  store: object<Variant<Note, "note", "store">>(
    { note: lit("store"), state: storeState, unstored: nat },
    { error: str, since: str, attempts: nat },
  ),
});
const sessionBatch = object<SessionBatch>(
  { session: str, changes: arrayOf(change.check), after: nat },
  {
    reset: lit(true), lifecycle: lifecycleState, epoch: str, notes: arrayOf(note.check),
    start: nat, older: arrayOf(item.check),
  },
);
export const batch = object<Batch>({ sessions: arrayOf(sessionBatch.check) }, { notes: arrayOf(note.check) });
export const clientBatch = object<ClientBatch>(
  { sessions: arrayOf(sessionBatch.check) },
  {
    notes: arrayOf(note.check),
    state: oneOf<ConnectionState>({
      connecting: true, live: true, caught_up: true, reconnecting: true, closed: true,
    }),
    transport: oneOf<Transport>({ websocket: true, sse: true }),
  },
);

/** Checks `v` against `shape` and returns it typed. */
export function assertShape<T>(shape: Shape<T>, v: unknown, path = "value"): T {
  shape.check(v, path);
  return v as T;
}

/** The index of the first item held, per model and session (above 0 after a snapshot). */
const starts = new WeakMap<Map<string, Item[]>, Map<string, number>>();

/** What a page does with a batch: mirror each session's items. Change indices are absolute:
 * after a snapshot the items before its `start` are not held until history (`older`) brings
 * them. */
export function apply(model: Map<string, Item[]>, b: Batch): void {
  if (!starts.has(model)) starts.set(model, new Map());
  const first = starts.get(model)!;
  for (const s of b.sessions) {
    const held = s.reset ? [] : (model.get(s.session) ?? []);
    let start = s.reset ? (s.start ?? 0) : (first.get(s.session) ?? 0);
    const items = s.older?.length ? [...s.older, ...held] : held;
    if (s.older?.length) start = s.start!;
    first.set(s.session, start);
    model.set(s.session, items);
    for (const c of s.changes) {
      const index = c.op === "usage" || c.op === "approvals" ? 0 : c.index - start;
      switch (c.op) {
        case "insert":
          if (index !== items.length) throw new Error(`insert at ${c.index} of ${start + items.length}`);
          items.push(c.item);
          break;
        case "append": {
          const it = items[index];
          if (it?.kind === "assistant_message" || it?.kind === "reasoning") it.text += c.text;
          else if (it?.kind === "tool_call") it.output += c.text;
          else throw new Error(`append to ${JSON.stringify(it)}`);
          break;
        }
        case "update":
          items[index] = c.item;
          break;
        case "usage":
        case "approvals":
          break;
        default: {
          const never: never = c;
          throw new Error(`unknown change ${JSON.stringify(never)}`);
        }
      }
    }
  }
}

export type { Json };
