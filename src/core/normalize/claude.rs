//! Decoder for Claude Code's `stream-json` output (`claude -p --output-format stream-json
//! --verbose`, with or without `--include-partial-messages`, and with `--input-format
//! stream-json`), also used for Amp (`amp --execute --stream-json`), which speaks the same
//! envelope with fewer fields.
//!
//! Turns. A run is one turn: it opens at the first turn-scoped record when none is open
//! (`system/init`, which stream-json input mode re-emits at every turn; else the first
//! `assistant`, `user`, `stream_event`, `result`, retry, compaction or permission request) and
//! closes at `result`. Hook, status, thinking-token, rate-limit, task and keep-alive lines
//! never open one. `session_started` (no run id) is emitted on the first `system/init` and
//! whenever `init` names another provider session id; a later `init` of the same session
//! that reports another `permissionMode` or `model` gives `mode_changed` / `model_changed`.
//!
//! Record → canonical events:
//! * `assistant` lines carry ONE content block each and are merged by `message.id`: the text
//!   blocks of a message (joined by a blank line) become one `message_received {content,
//!   message_id, role}`, emitted when the message's text is over: at the message's first
//!   `tool_use` block (the API puts tool calls after the text, so the text is whole by then and
//!   the timeline shows it before the tool), at `message_stop` (partial mode), when any other
//!   turn-scoped record arrives (a `user` line, a line of another message, `result`), or at EOF.
//!   `thinking` → `reasoning_received`; `tool_use` (also `server_tool_use`, `mcp_tool_use`) →
//!   `tool_call_started` at once, once per tool id; `TodoWrite` also → `todo_updated`
//!   (`input.todos[{content, status}]` → `items[{text, status}]`); `*_tool_result` blocks
//!   (server tools) → `tool_call_completed`. A block seen twice in a message is skipped.
//! * A synthetic `assistant` line (`model: "<synthetic>"` with an `error` field or
//!   `isApiErrorMessage`) is the CLI's report of a failed API call, not a model message: it
//!   is held and becomes the `provider_error` of the `run_failed` that the `result`
//!   (`success` + `is_error`) brings; if no failing result consumes it, it is reported as
//!   `error_occurred` (severity `error`) before the terminal or at EOF.
//! * `stream_event` (partial mode): `text_delta` → `message_streamed {delta, message_id}`,
//!   `thinking_delta` → `reasoning_streamed`; `input_json_delta`, `signature_delta`, block
//!   starts/stops and `message_delta` are bookkeeping (the `assistant` line, which comes
//!   before the block's `content_block_stop`, carries the whole block). The first delta of a
//!   second text block is prefixed with the same blank line that joins the blocks, so the
//!   streamed text always equals the final `content`. A streamed message that never reaches
//!   `message_stop` (a mid-stream API error, after which the CLI retries under a new message
//!   id) is closed as abandoned when a new `message_start` or an `assistant` line of another
//!   id arrives in the same lane, at `result`, at `init` or at EOF: `message_received
//!   {content: "", discarded: true}` (and likewise `reasoning_received` for an unfinished
//!   thinking block), unless `assistant` lines already gave it text, which is then emitted.
//! * `user`: each `tool_result` → `tool_call_completed {tool_output}` or, with `is_error`,
//!   `tool_call_failed {error}`, with `tool_name`/`tool_input` from the started call and the
//!   line's `tool_use_result` sidecar under `data.details.tool_use_result` (when the line
//!   holds a single result); a result whose text is the interrupt marker `[Request
//!   interrupted by user…]` → `tool_call_cancelled` and marks the turn interrupted. Text →
//!   `message_sent {content}`, except that marker, which only marks the turn interrupted.
//!   A result for a call the stream never showed is emitted without `tool_name`/`tool_input`
//!   (no `tool_call_started` is invented).
//! * `result`: the usage → `token_usage_updated` (`usage` is the turn's; `total_cost_usd`
//!   and `modelUsage` count since the process started, so they become `session_cost_usd` and
//!   `model_usage`, and `cost_usd` is the turn's share: the growth of the total since the
//!   session's previous result), then exactly one terminal:
//!   `success` without `is_error` → `run_completed {result, stop_reason, duration_ms,
//!   duration_api_ms, num_turns, permission_denials}`; `success` with `is_error` (a failed API
//!   call) → `run_failed`, kind from the synthetic line's `error`, else from
//!   `api_error_status` (401/403 `authentication_failed`, 402 `billing_error`, 429
//!   `rate_limit`, 400 `invalid_request`, 529 `overloaded`, 5xx `server_error`), else
//!   `api_error`; `error_during_execution` after an interrupt (marker seen, a host `interrupt`
//!   control request, or `terminal_reason: aborted_*`) → `tool_call_cancelled` for the calls
//!   still open, then `run_cancelled {reason: "interrupted"}`, otherwise `run_failed` kind
//!   `error_during_execution`; `error_max_turns`, `error_max_budget_usd`, … → `run_failed` kind
//!   `max_turns`, `max_budget_usd`, …. The failure message is `result`, else Amp's `error`
//!   string, else `errors[]` joined; the result's own fields go under `data.details`.
//! * `system`: `api_retry` → `error_occurred {severity: "warning", attempt, max_retries,
//!   provider_error}`; `compact_boundary` → `context_compacted {trigger, pre_tokens}`;
//!   `status` carrying a new `permissionMode` → `mode_changed`; `status`, `hook_*`,
//!   `thinking_tokens`, `task_*`, `files_persisted` are ignored (counted); other subtypes are
//!   reported as unknown.
//! * `control_request` `can_use_tool` → `tool_approval_requested {request_id, tool_name,
//!   tool_input, tool_call_id}`; the host's answer, when it is in the stream (a
//!   `control_response` for that request), → `tool_approval_granted` / `tool_approval_denied`,
//!   and a `control_cancel_request` for it → `tool_approval_denied {reason: "cancelled"}`. A
//!   host `interrupt` request marks the turn interrupted. Every other control request and
//!   response (`initialize` and its command list, `set_model`, hook callbacks, …) is ignored.
//! * `rate_limit_event`, `keep_alive`, `tool_progress`, `auth_status` are ignored.
//!
//! Lanes. Sub-agent (Task) traffic carries `parent_tool_use_id`; every event derived from such
//! a line carries it in `data`, and open messages are tracked per lane (main agent, or one
//! sub-agent), so that parallel sub-agents do not abandon each other's streamed messages.
//!
//! State is per turn (open messages, the turn's tool calls, pending approvals) and is cleared
//! at `result`; only the last closed message is kept, so that a message whose lines were
//! interleaved with another lane's can be completed (its `message_received` is then emitted
//! again, with the whole text).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::fast::{self, present, Obj, Stamp, Str};
use super::turn::cancelled_data;
use super::{Decoder, Out};
use crate::core::event::{CancelReason, EventType, Fnv128, Provider};
use crate::core::json::ObjectWriter;
use crate::core::provider_error::{add_details, ProviderError};

/// The text Claude Code writes as a user message when the user interrupts a turn.
const INTERRUPT_MARKER: &str = "[Request interrupted by user";

/// The separator between two text blocks of one message.
const BLOCK_SEPARATOR: &str = "\n\n";

pub(crate) struct Claude {
    provider: Provider,
    /// The provider session id of the last `system/init`.
    session: Option<String>,
    permission_mode: Option<String>,
    model: Option<String>,
    /// The open run, if any.
    run: Option<String>,
    /// The `total_cost_usd` of the provider session's last `result`.
    session_cost: Option<f64>,
    turn: Turn,
}

/// What one turn keeps; dropped at its `result`.
#[derive(Default)]
struct Turn {
    /// Open assistant messages (one per lane at most, in practice).
    messages: Vec<Msg>,
    /// The last message closed normally, kept so that a late line of it can complete it.
    recent: Option<Msg>,
    /// The turn's tool calls in start order, and their index by id.
    tools: Vec<Tool>,
    tool_index: HashMap<String, usize>,
    /// Permission requests awaiting an answer: request id → tool call id.
    approvals: HashMap<String, Option<String>>,
    /// A failed API call reported by a synthetic assistant line, awaiting the result.
    api_error: Option<ApiError>,
    interrupted: bool,
}

/// An assistant message being assembled from its `assistant` lines and stream events.
#[derive(Default)]
struct Msg {
    id: Option<String>,
    /// `parent_tool_use_id`: None for the main agent.
    lane: Option<String>,
    /// Opened by a `message_start` stream event: only `message_stop` completes it.
    streamed: bool,
    /// The text blocks from `assistant` lines, joined by [`BLOCK_SEPARATOR`].
    text: String,
    /// `text` has been emitted as `message_received` and has not grown since.
    text_sent: bool,
    /// All text deltas streamed so far (with separators between blocks).
    deltas: String,
    /// The block index of the last text delta.
    delta_block: Option<u64>,
    /// Thinking deltas of the thinking block still streaming.
    reasoning: String,
    /// Hashes of the content blocks already taken, to skip repeats.
    seen: Vec<u128>,
}

struct Tool {
    id: String,
    name: Option<String>,
    input: Option<Value>,
    lane: Option<String>,
    done: bool,
}

/// How a tool call ended: its output (text, or a server tool's value), its error text, or
/// the user's interrupt.
enum Outcome {
    Output(Value),
    Error(Value),
    Cancelled,
}

/// What [`Claude::user_line`] reads of a `user` line, from a `Value` or typed.
struct UserLine<'a> {
    /// `message.content` when it is a string or an array.
    content: Option<UserContent<'a>>,
    /// `parent_tool_use_id` when it is a string.
    lane: Option<Cow<'a, str>>,
    replay: bool,
    synthetic: bool,
}

enum UserContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<UserBlock<'a>>),
}

/// A block of a user message: a `text` block's text (when a string), a `tool_result` (its
/// `tool_use_id` when a string, `is_error` when a boolean, the text of its content), or
/// anything else.
enum UserBlock<'a> {
    Text(Cow<'a, str>),
    ToolResult {
        id: Option<Cow<'a, str>>,
        is_error: Option<bool>,
        text: String,
    },
    Other,
}

impl<'a> UserBlock<'a> {
    fn from_value(block: &'a Value) -> UserBlock<'a> {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => match block.get("text").and_then(Value::as_str) {
                Some(t) => UserBlock::Text(Cow::Borrowed(t)),
                None => UserBlock::Other,
            },
            Some("tool_result") => UserBlock::ToolResult {
                id: block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .map(Cow::Borrowed),
                is_error: block.get("is_error").and_then(Value::as_bool),
                text: result_text(block.get("content")),
            },
            _ => UserBlock::Other,
        }
    }
}

/// A `user` line as the typed fast path reads it: the fields [`UserLine`] takes, borrowed,
/// and the `tool_use_result` sidecar as the `Value` its event carries. Any field of another
/// JSON type than these, a repeated field, or a block or text item that is not an object
/// fails the read (the `Value` path takes the line).
#[derive(Deserialize)]
struct UserRead<'a> {
    #[serde(rename = "type", borrow)]
    ty: Str<'a>,
    #[serde(default)]
    timestamp: Stamp,
    #[serde(borrow)]
    message: Obj<MessageRead<'a>>,
    #[serde(default, deserialize_with = "present")]
    tool_use_result: Option<Value>,
    #[serde(default, borrow)]
    parent_tool_use_id: Option<Str<'a>>,
    #[serde(default, rename = "isReplay")]
    is_replay: Option<bool>,
    #[serde(default, rename = "isSynthetic")]
    is_synthetic: Option<bool>,
}

#[derive(Deserialize)]
struct MessageRead<'a> {
    /// Null reads as absent, as `message.content` is neither a string nor an array then.
    #[serde(default, borrow)]
    content: Option<ContentRead<'a>>,
}

/// A user message's content: a string or a list of blocks.
enum ContentRead<'a> {
    Text(Str<'a>),
    Blocks(Vec<Obj<BlockRead<'a>>>),
}

#[derive(Deserialize)]
struct BlockRead<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default, borrow)]
    tool_use_id: Option<Str<'a>>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default, borrow)]
    content: Option<ResultRead<'a>>,
}

impl<'a> BlockRead<'a> {
    fn into_block(self) -> UserBlock<'a> {
        match self.ty.as_deref() {
            Some("text") => match self.text {
                Some(t) => UserBlock::Text(t.0),
                None => UserBlock::Other,
            },
            Some("tool_result") => UserBlock::ToolResult {
                id: self.tool_use_id.map(|id| id.0),
                is_error: self.is_error,
                text: self.content.map_or_else(String::new, ResultRead::into_text),
            },
            _ => UserBlock::Other,
        }
    }
}

/// A tool result's content, as [`result_text`] reads it: a string, or items whose `text`
/// strings are joined.
enum ResultRead<'a> {
    Text(Str<'a>),
    Items(Vec<Obj<TextRead<'a>>>),
}

#[derive(Deserialize)]
struct TextRead<'a> {
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
}

impl ResultRead<'_> {
    fn into_text(self) -> String {
        match self {
            ResultRead::Text(s) => s.0.into_owned(),
            ResultRead::Items(items) => {
                let texts: Vec<Cow<'_, str>> = items
                    .into_iter()
                    .filter_map(|i| i.0.text)
                    .map(|t| t.0)
                    .collect();
                texts.join("\n")
            }
        }
    }
}

/// A string or an array, read by `text` and `items` (anything else fails the read).
fn string_or_seq<'de, D, T, S>(
    d: D,
    text: fn(Str<'de>) -> T,
    items: fn(Vec<S>) -> T,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    S: Deserialize<'de>,
{
    use serde::de::{Error, SeqAccess, Visitor};

    struct V<'de, T, S> {
        text: fn(Str<'de>) -> T,
        items: fn(Vec<S>) -> T,
    }
    impl<'de, T, S: Deserialize<'de>> Visitor<'de> for V<'de, T, S> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array")
        }
        fn visit_borrowed_str<E: Error>(self, s: &'de str) -> Result<T, E> {
            Ok((self.text)(Str(Cow::Borrowed(s))))
        }
        fn visit_str<E: Error>(self, s: &str) -> Result<T, E> {
            Ok((self.text)(Str(Cow::Owned(s.to_owned()))))
        }
        fn visit_string<E: Error>(self, s: String) -> Result<T, E> {
            Ok((self.text)(Str(Cow::Owned(s))))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            let mut all = Vec::new();
            while let Some(item) = seq.next_element()? {
                all.push(item);
            }
            Ok((self.items)(all))
        }
    }
    d.deserialize_any(V { text, items })
}

impl<'de: 'a, 'a> Deserialize<'de> for ContentRead<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        string_or_seq(d, ContentRead::Text, ContentRead::Blocks)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ResultRead<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        string_or_seq(d, ResultRead::Text, ResultRead::Items)
    }
}

/// What [`Claude::stream`] reads of a `stream_event` line's `event`, from a `Value` or typed:
/// its type, `message.id`, `delta.type`, `delta.text`, `delta.thinking` (each when a
/// string) and `index` (when an unsigned integer).
struct StreamEvent<'a> {
    ty: &'a str,
    message_id: Option<&'a str>,
    delta_type: Option<&'a str>,
    text: Option<&'a str>,
    thinking: Option<&'a str>,
    index: Option<u64>,
}

/// A `stream_event` line as the typed fast path reads it (the fields of [`StreamEvent`];
/// anything of another JSON type, a repeated field, or a non-object `event`, `message` or
/// `delta` fails the read).
#[derive(Deserialize)]
struct StreamRead<'a> {
    #[serde(rename = "type", borrow)]
    ty: Str<'a>,
    #[serde(default)]
    timestamp: Stamp,
    #[serde(borrow)]
    event: Obj<EventRead<'a>>,
    #[serde(default, borrow)]
    parent_tool_use_id: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct EventRead<'a> {
    #[serde(rename = "type", borrow)]
    ty: Str<'a>,
    #[serde(default, borrow)]
    message: Option<Obj<IdRead<'a>>>,
    #[serde(default, borrow)]
    delta: Option<Obj<DeltaRead<'a>>>,
    #[serde(default)]
    index: Option<u64>,
}

#[derive(Deserialize)]
struct IdRead<'a> {
    #[serde(default, borrow)]
    id: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct DeltaRead<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Str<'a>>,
}

/// A `system` line as the typed fast path reads it (for `init`, `status` and
/// [`ignored_system`] subtypes).
#[derive(Deserialize)]
struct SystemRead<'a> {
    #[serde(rename = "type", borrow)]
    ty: Str<'a>,
    #[serde(borrow)]
    subtype: Str<'a>,
    #[serde(default)]
    timestamp: Stamp,
    // The fields `init` takes (null reads as absent, as `init` skips nulls).
    #[serde(default, rename = "permissionMode")]
    permission_mode: Option<Value>,
    #[serde(default)]
    session_id: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    cwd: Option<Value>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    claude_code_version: Option<Value>,
    #[serde(default)]
    slash_commands: Option<Value>,
    #[serde(default)]
    mcp_servers: Option<Value>,
    #[serde(default)]
    agents: Option<Value>,
    #[serde(default)]
    skills: Option<Value>,
    #[serde(default)]
    plugins: Option<Value>,
    #[serde(default)]
    output_style: Option<Value>,
    #[serde(default, rename = "apiKeySource")]
    api_key_source: Option<Value>,
}

impl SystemRead<'_> {
    /// The field `key` (its JSON name) for [`Claude::init`].
    fn take(&mut self, key: &str) -> Option<Value> {
        match key {
            "permissionMode" => self.permission_mode.take(),
            "session_id" => self.session_id.take(),
            "model" => self.model.take(),
            "cwd" => self.cwd.take(),
            "tools" => self.tools.take(),
            "claude_code_version" => self.claude_code_version.take(),
            "slash_commands" => self.slash_commands.take(),
            "mcp_servers" => self.mcp_servers.take(),
            "agents" => self.agents.take(),
            "skills" => self.skills.take(),
            "plugins" => self.plugins.take(),
            "output_style" => self.output_style.take(),
            "apiKeySource" => self.api_key_source.take(),
            _ => None,
        }
    }
}

/// The `system` subtypes that carry nothing for the canonical model.
fn ignored_system(subtype: &str) -> bool {
    matches!(
        subtype,
        "hook_started"
            | "hook_progress"
            | "hook_response"
            | "thinking_tokens"
            | "task_started"
            | "task_progress"
            | "task_notification"
            | "task_updated"
            | "files_persisted"
            // A tool refused by the permission mode (`dontAsk`): its tool_result says so.
            | "permission_denied"
    )
}

struct ApiError {
    kind: String,
    message: String,
    status: Option<Value>,
}

impl Claude {
    pub(crate) fn new(provider: Provider) -> Claude {
        Claude {
            provider,
            session: None,
            permission_mode: None,
            model: None,
            run: None,
            session_cost: None,
            turn: Turn::default(),
        }
    }

    /// Opens a run if none is open.
    fn ensure_run(&mut self, out: &mut Out<'_>) {
        if self.run.is_none() {
            let run = out.new_run_id();
            out.emit(EventType::RunStarted, Some(&run), json!({}));
            self.run = Some(run);
        }
    }

    /// Ends the turn after its terminal event.
    fn end_turn(&mut self) {
        self.run = None;
        self.turn = Turn::default();
    }

    fn system(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(subtype) = rec.get("subtype").and_then(Value::as_str) else {
            return out.missing("subtype");
        };
        match subtype {
            "init" => self.init(|key| rec.get(key).filter(|v| !v.is_null()).cloned(), out),
            "api_retry" => {
                self.ensure_run(out);
                self.close_settled(out);
                self.api_retry(rec, out);
            }
            "compact_boundary" => {
                self.ensure_run(out);
                self.close_settled(out);
                let meta = rec
                    .get("compact_metadata")
                    .or_else(|| rec.get("compactMetadata"));
                let mut data = Map::new();
                if let Some(meta) = meta {
                    copy(&mut data, "trigger", meta.get("trigger"));
                    let pre = meta.get("pre_tokens").or_else(|| meta.get("preTokens"));
                    copy(&mut data, "pre_tokens", pre);
                }
                emit(
                    out,
                    self.run.as_deref(),
                    EventType::ContextCompacted,
                    data,
                    None,
                    None,
                );
            }
            "status" => {
                let mode = rec.get("permissionMode").and_then(Value::as_str);
                self.status(mode, out);
            }
            subtype if ignored_system(subtype) => out.ignore(),
            other => out.unknown(format_args!("system subtype {other:?}")),
        }
    }

    /// A `system/status` line: a new permission mode, or nothing.
    fn status(&mut self, mode: Option<&str>, out: &mut Out<'_>) {
        match mode {
            Some(mode) if self.permission_mode.as_deref() != Some(mode) => {
                self.permission_mode = Some(mode.to_owned());
                let data = obj(json!({ "mode": mode }));
                emit(
                    out,
                    self.run.as_deref(),
                    EventType::ModeChanged,
                    data,
                    None,
                    None,
                );
            }
            _ => out.ignore(),
        }
    }

    /// A `system/init` line; `take(key)` gives the value of one of its fields, once (`None`
    /// when absent or null).
    fn init(&mut self, mut take: impl FnMut(&str) -> Option<Value>, out: &mut Out<'_>) {
        // A new query: whatever is still open belongs to the previous one.
        self.close_all(out);
        let (session_id, mode, model) = (take("session_id"), take("permissionMode"), take("model"));
        let name = |v: &Option<Value>| {
            v.as_ref()
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let (session, mode, model) = (
            name(&session_id),
            (name(&mode), mode),
            (name(&model), model),
        );
        let same_session = session.is_some() && session == self.session;
        let ((mode, mode_value), (model, model_value)) = (mode, model);
        if !same_session {
            let mut data = Map::new();
            let fields = [
                ("provider_session_id", session_id),
                ("model", model_value),
                ("permission_mode", mode_value),
            ];
            for (to, value) in fields {
                if let Some(v) = value {
                    data.insert(to.to_owned(), v);
                }
            }
            for (to, from) in [
                ("cwd", "cwd"),
                ("tools", "tools"),
                ("version", "claude_code_version"),
                ("slash_commands", "slash_commands"),
                ("mcp_servers", "mcp_servers"),
                ("agents", "agents"),
                ("skills", "skills"),
                ("plugins", "plugins"),
                ("output_style", "output_style"),
                ("api_key_source", "apiKeySource"),
            ] {
                if let Some(v) = take(from) {
                    data.insert(to.to_owned(), v);
                }
            }
            emit(out, None, EventType::SessionStarted, data, None, None);
            self.session = session;
            self.session_cost = None;
            self.permission_mode = mode;
            self.model = model;
            self.ensure_run(out);
            return;
        }
        self.ensure_run(out);
        if let Some(mode) = mode {
            if self.permission_mode.as_ref() != Some(&mode) {
                let data = obj(json!({ "mode": mode }));
                emit(
                    out,
                    self.run.as_deref(),
                    EventType::ModeChanged,
                    data,
                    None,
                    None,
                );
                self.permission_mode = Some(mode);
            }
        }
        if let Some(model) = model {
            if self.model.as_ref() != Some(&model) {
                let data = obj(json!({ "model": model }));
                emit(
                    out,
                    self.run.as_deref(),
                    EventType::ModelChanged,
                    data,
                    None,
                    None,
                );
                self.model = Some(model);
            }
        }
    }

    fn api_retry(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let (kind, detail) = match rec.get("error") {
            Some(Value::String(s)) => (s.clone(), None),
            Some(Value::Object(e)) => (
                str_field(e, "type").unwrap_or_else(|| "api_error".into()),
                str_field(e, "message"),
            ),
            _ => ("api_error".to_owned(), None),
        };
        let status = rec.get("error_status").filter(|s| !s.is_null());
        let mut message = format!("API error ({kind}");
        if let Some(status) = status {
            message.push_str(&format!(", status {status}"));
        }
        message.push(')');
        if let Some(detail) = detail {
            message.push_str(&format!(": {detail}"));
        }
        match (rec.get("attempt"), rec.get("max_retries")) {
            (Some(a), Some(m)) => message.push_str(&format!("; retrying, attempt {a} of {m}")),
            (Some(a), None) => message.push_str(&format!("; retrying, attempt {a}")),
            _ => message.push_str("; retrying"),
        }
        let status = status_code(status);
        let mut data =
            ProviderError::from_provider(self.provider, &kind, status, message).to_data();
        data.insert("severity".into(), "warning".into());
        for key in ["attempt", "max_retries", "retry_delay_ms", "error_status"] {
            copy(&mut data, key, rec.get(key));
        }
        emit(
            out,
            self.run.as_deref(),
            EventType::ErrorOccurred,
            data,
            None,
            None,
        );
    }

    fn assistant(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(message) = rec.get("message").and_then(Value::as_object) else {
            return out.missing("message");
        };
        self.ensure_run(out);
        let lane = str_field(rec, "parent_tool_use_id");
        if let Some(error) = api_error_line(rec, message) {
            self.close_settled(out);
            if let Some(previous) = self.turn.api_error.replace(error) {
                self.report_api_error(previous, out);
            }
            return;
        }
        let id = str_field(message, "id");
        if id.is_some() {
            // A message whose stream began before the capture did: it is this one.
            let unnamed = self.turn.messages.iter_mut();
            for m in unnamed.filter(|m| m.streamed && m.id.is_none() && m.lane == lane) {
                m.id = id.clone();
            }
        }
        // A late line of the message closed last: complete that one.
        let reopened = self.turn.recent.take_if(|m| id.is_some() && m.id == id);
        // Any other message is over: settled ones close, a streamed one of this lane was
        // abandoned (the CLI retried under a new id).
        let mut i = 0;
        while i < self.turn.messages.len() {
            let m = &self.turn.messages[i];
            let other = id.is_none() || m.id != id;
            if other && (!m.streamed || m.lane == lane) {
                let m = self.turn.messages.remove(i);
                let abandoned = m.streamed;
                self.close(m, abandoned, out);
            } else {
                i += 1;
            }
        }
        let at = match self
            .turn
            .messages
            .iter()
            .position(|m| id.is_some() && m.id == id)
        {
            Some(at) => at,
            None => {
                let msg = reopened.unwrap_or_else(|| Msg {
                    id: id.clone(),
                    lane: lane.clone(),
                    ..Msg::default()
                });
                self.turn.messages.push(msg);
                self.turn.messages.len() - 1
            }
        };
        let text_block;
        let blocks: &[Value] = match message.get("content") {
            Some(Value::Array(blocks)) => blocks,
            Some(Value::String(s)) => {
                text_block = [json!({ "type": "text", "text": s })];
                &text_block
            }
            _ => &[],
        };
        for block in blocks {
            self.assistant_block(at, block, lane.as_deref(), out);
        }
        if id.is_none() {
            // Nothing can be merged into a message without an id.
            let m = self.turn.messages.remove(at);
            self.close(m, false, out);
        }
    }

    fn assistant_block(&mut self, at: usize, block: &Value, lane: Option<&str>, out: &mut Out<'_>) {
        let run = self.run.as_deref();
        let Some(msg) = self.turn.messages.get_mut(at) else {
            return;
        };
        let hash = block_hash(block);
        if msg.seen.contains(&hash) {
            return;
        }
        msg.seen.push(hash);
        let ty = block.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "text" => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                if !text.is_empty() {
                    if !msg.text.is_empty() {
                        msg.text.push_str(BLOCK_SEPARATOR);
                    }
                    msg.text.push_str(text);
                    msg.text_sent = false;
                }
            }
            "thinking" => {
                let text = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                msg.reasoning.clear();
                let mut data = msg_data(msg);
                data.remove("role");
                data.insert("content".into(), text.into());
                emit(out, run, EventType::ReasoningReceived, data, lane, None);
            }
            "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                flush_text(msg, run, out);
                let Some(id) = block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                else {
                    return out.missing("tool_use.id");
                };
                let name = block.get("name").and_then(Value::as_str);
                self.tool_started(id, name, block.get("input"), lane, out);
            }
            t if t.ends_with("_tool_result") => {
                let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
                    return out.missing("tool_use_id");
                };
                let output = block.get("content").cloned().unwrap_or(Value::Null);
                self.tool_finished(id, Outcome::Output(output), None, lane, out);
            }
            // redacted_thinking, images, …: nothing to show.
            _ => {}
        }
    }

    fn tool_started(
        &mut self,
        id: &str,
        name: Option<&str>,
        input: Option<&Value>,
        lane: Option<&str>,
        out: &mut Out<'_>,
    ) {
        if self.turn.tool_index.contains_key(id) {
            return;
        }
        self.turn
            .tool_index
            .insert(id.to_owned(), self.turn.tools.len());
        self.turn.tools.push(Tool {
            id: id.to_owned(),
            name: name.map(str::to_owned),
            input: input.cloned(),
            lane: lane.map(str::to_owned),
            done: false,
        });
        let mut data = Map::new();
        data.insert("tool_call_id".into(), id.into());
        copy(&mut data, "tool_name", name.map(Value::from).as_ref());
        copy(&mut data, "tool_input", input);
        let run = self.run.as_deref();
        emit(out, run, EventType::ToolCallStarted, data, lane, Some(id));
        if matches!(name, Some("TodoWrite" | "todo_write")) {
            let items = todo_items(input);
            let data = obj(json!({ "items": items, "tool_call_id": id }));
            emit(out, run, EventType::TodoUpdated, data, lane, None);
        }
    }

    /// Emits the end of a tool call.
    fn tool_finished(
        &mut self,
        id: &str,
        outcome: Outcome,
        sidecar: Option<Value>,
        lane: Option<&str>,
        out: &mut Out<'_>,
    ) {
        let mut data = Map::new();
        data.insert("tool_call_id".into(), id.into());
        match self
            .turn
            .tool_index
            .get(id)
            .and_then(|&i| self.turn.tools.get_mut(i))
        {
            Some(tool) if tool.done => return out.ignore(),
            Some(tool) => {
                tool.done = true;
                copy(
                    &mut data,
                    "tool_name",
                    tool.name.clone().map(Value::from).as_ref(),
                );
                copy(&mut data, "tool_input", tool.input.as_ref());
            }
            None => {
                // A result for a call this stream never showed: remember it as done.
                self.turn
                    .tool_index
                    .insert(id.to_owned(), self.turn.tools.len());
                self.turn.tools.push(Tool {
                    id: id.to_owned(),
                    name: None,
                    input: None,
                    lane: lane.map(str::to_owned),
                    done: true,
                });
            }
        }
        let kind = match outcome {
            Outcome::Output(output) => {
                data.insert("tool_output".into(), output);
                EventType::ToolCallCompleted
            }
            Outcome::Error(error) => {
                data.insert("error".into(), error);
                EventType::ToolCallFailed
            }
            Outcome::Cancelled => {
                // The payload of every tool call a cancelled turn cut off (turn.rs).
                data.insert("reason".into(), EventType::RunCancelled.as_str().into());
                EventType::ToolCallCancelled
            }
        };
        if let Some(sidecar) = sidecar {
            let details = Map::from_iter([("tool_use_result".to_owned(), sidecar)]);
            data.insert("details".into(), Value::Object(details));
        }
        emit(out, self.run.as_deref(), kind, data, lane, Some(id));
    }

    /// A `user` line; `sidecar` is its `tool_use_result`, taken out of `rec` by the caller.
    fn user(&mut self, rec: &Map<String, Value>, sidecar: Option<Value>, out: &mut Out<'_>) {
        let Some(message) = rec.get("message").and_then(Value::as_object) else {
            return out.missing("message");
        };
        let content = match message.get("content") {
            Some(Value::String(s)) => Some(UserContent::Text(Cow::Borrowed(s))),
            Some(Value::Array(blocks)) => Some(UserContent::Blocks(
                blocks.iter().map(UserBlock::from_value).collect(),
            )),
            _ => None,
        };
        let line = UserLine {
            content,
            lane: rec
                .get("parent_tool_use_id")
                .and_then(Value::as_str)
                .map(Cow::Borrowed),
            replay: rec.get("isReplay").and_then(Value::as_bool) == Some(true),
            synthetic: rec.get("isSynthetic").and_then(Value::as_bool) == Some(true),
        };
        self.user_line(line, sidecar, out);
    }

    /// A `user` line as [`UserLine`], read by either path.
    fn user_line(&mut self, line: UserLine<'_>, sidecar: Option<Value>, out: &mut Out<'_>) {
        // The output of a local command (`set_model` answers with one, between turns): no
        // user prompt, and no turn of its own.
        let local = matches!(&line.content, Some(UserContent::Text(c))
            if c.trim_start().starts_with("<local-command-stdout>"));
        if local && line.replay {
            return out.ignore();
        }
        self.ensure_run(out);
        self.close_settled(out);
        let lane = line.lane.filter(|l| !l.is_empty());
        let lane = lane.as_deref();
        let mut texts: Vec<Cow<'_, str>> = Vec::new();
        match line.content {
            Some(UserContent::Text(s)) => texts.push(s),
            Some(UserContent::Blocks(blocks)) => {
                let results = blocks
                    .iter()
                    .filter(|b| matches!(b, UserBlock::ToolResult { .. }))
                    .count();
                let mut sidecar = sidecar.filter(|_| results == 1);
                for block in blocks {
                    match block {
                        UserBlock::Text(t) => texts.push(t),
                        UserBlock::ToolResult { id, is_error, text } => {
                            let Some(id) = id else {
                                out.missing("tool_use_id");
                                continue;
                            };
                            let outcome = if text.trim_start().starts_with(INTERRUPT_MARKER) {
                                self.turn.interrupted = true;
                                Outcome::Cancelled
                            } else if is_error == Some(true) {
                                Outcome::Error(text.into())
                            } else {
                                Outcome::Output(text.into())
                            };
                            // One result: its call takes the sidecar.
                            self.tool_finished(&id, outcome, sidecar.take(), lane, out);
                        }
                        UserBlock::Other => {}
                    }
                }
            }
            None => return out.missing("message.content"),
        }
        let mut prompt: Vec<&str> = Vec::new();
        for text in &texts {
            if text.trim_start().starts_with(INTERRUPT_MARKER) {
                self.turn.interrupted = true;
            } else if !text.is_empty() {
                prompt.push(text);
            }
        }
        if !prompt.is_empty() {
            let mut data = obj(json!({ "content": prompt.join("\n"), "role": "user" }));
            if line.synthetic {
                data.insert("synthetic".into(), true.into());
            }
            emit(
                out,
                self.run.as_deref(),
                EventType::MessageSent,
                data,
                lane,
                None,
            );
        }
    }

    /// The typed fast path of a `user` line (see [`UserRead`]); `false` when it does not
    /// read as one.
    fn user_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        let Ok(read) = serde_json::from_str::<UserRead<'_>>(text) else {
            return false;
        };
        if &*read.ty != "user" {
            return false;
        }
        let content = match read.message.0.content {
            Some(ContentRead::Text(s)) => Some(UserContent::Text(s.0)),
            Some(ContentRead::Blocks(blocks)) => Some(UserContent::Blocks(
                blocks.into_iter().map(|b| b.0.into_block()).collect(),
            )),
            None => None,
        };
        let line = UserLine {
            content,
            lane: read.parent_tool_use_id.map(|l| l.0),
            replay: read.is_replay == Some(true),
            synthetic: read.is_synthetic == Some(true),
        };
        out.set_timestamp(read.timestamp);
        self.user_line(line, read.tool_use_result, out);
        true
    }

    /// The typed fast path of a `system` line whose subtype carries nothing (or only a
    /// permission mode); `false` for any other.
    fn system_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        let Ok(mut read) = serde_json::from_str::<SystemRead<'_>>(text) else {
            return false;
        };
        if &*read.ty != "system" {
            return false;
        }
        let (init, status) = (&*read.subtype == "init", &*read.subtype == "status");
        if !init && !status {
            if !ignored_system(&read.subtype) {
                return false;
            }
            out.ignore();
            return true;
        }
        out.set_timestamp(std::mem::take(&mut read.timestamp));
        if init {
            self.init(|key| read.take(key), out);
        } else {
            let mode = read.permission_mode.as_ref().and_then(Value::as_str);
            self.status(mode, out);
        }
        true
    }

    fn stream_event(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(event) = rec.get("event").and_then(Value::as_object) else {
            return out.missing("event");
        };
        let Some(ty) = event.get("type").and_then(Value::as_str) else {
            return out.missing("event.type");
        };
        let delta = event.get("delta");
        let delta_str = |key: &str| delta.and_then(|d| d.get(key)).and_then(Value::as_str);
        let read = StreamEvent {
            ty,
            message_id: event
                .get("message")
                .and_then(|m| m.get("id"))
                .and_then(Value::as_str),
            delta_type: delta_str("type"),
            text: delta_str("text"),
            thinking: delta_str("thinking"),
            index: event.get("index").and_then(Value::as_u64),
        };
        self.stream(read, str_field(rec, "parent_tool_use_id"), out);
    }

    /// The typed fast path of a `stream_event` line (see [`StreamRead`]).
    fn stream_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        let Ok(line) = serde_json::from_str::<StreamRead<'_>>(text) else {
            return false;
        };
        if &*line.ty != "stream_event" {
            return false;
        }
        let event = &line.event.0;
        let delta = event.delta.as_ref().map(|d| &d.0);
        let read = StreamEvent {
            ty: &event.ty,
            message_id: event.message.as_ref().and_then(|m| m.0.id.as_deref()),
            delta_type: delta.and_then(|d| d.ty.as_deref()),
            text: delta.and_then(|d| d.text.as_deref()),
            thinking: delta.and_then(|d| d.thinking.as_deref()),
            index: event.index,
        };
        let lane = line.parent_tool_use_id.filter(|l| !l.is_empty());
        out.set_timestamp(line.timestamp);
        self.stream(read, lane.map(|l| l.0.into_owned()), out);
        true
    }

    /// A `stream_event` line as [`StreamEvent`], read by either path; `lane` is its
    /// `parent_tool_use_id` when a non-empty string.
    fn stream(&mut self, event: StreamEvent<'_>, lane: Option<String>, out: &mut Out<'_>) {
        let ty = event.ty;
        if matches!(ty, "message_start" | "content_block_delta") {
            self.ensure_run(out);
        }
        let streamed_in_lane =
            |msgs: &[Msg]| msgs.iter().position(|m| m.streamed && m.lane == lane);
        match ty {
            "message_start" => {
                self.close_settled(out);
                if let Some(at) = streamed_in_lane(&self.turn.messages) {
                    let m = self.turn.messages.remove(at);
                    self.close(m, true, out);
                }
                let id = event.message_id.filter(|s| !s.is_empty());
                self.turn.messages.push(Msg {
                    id: id.map(str::to_owned),
                    lane: lane.clone(),
                    streamed: true,
                    ..Msg::default()
                });
                out.ignore();
            }
            "content_block_delta" => {
                let (text, is_text) = match event.delta_type {
                    Some("text_delta") => (event.text, true),
                    Some("thinking_delta") => (event.thinking, false),
                    _ => return out.ignore(),
                };
                let text = text.unwrap_or("");
                if text.is_empty() {
                    return out.ignore();
                }
                let at = match streamed_in_lane(&self.turn.messages) {
                    Some(at) => at,
                    None => {
                        // A delta with no message_start (a capture that began mid-message).
                        self.turn.messages.push(Msg {
                            lane: lane.clone(),
                            streamed: true,
                            ..Msg::default()
                        });
                        self.turn.messages.len() - 1
                    }
                };
                let run = self.run.as_deref();
                let Some(msg) = self.turn.messages.get_mut(at) else {
                    return;
                };
                // `{delta, message_id?, parent_tool_use_id?}`, written with no map.
                let data = |delta: &str, msg: &Msg| {
                    ObjectWriter::with_capacity(64 + delta.len())
                        .field("delta", delta)
                        .field_if("message_id", msg.id.as_deref())
                        .field_if("parent_tool_use_id", lane.as_deref())
                        .finish()
                };
                if is_text {
                    let index = event.index;
                    let mut chunk = String::new();
                    if !msg.deltas.is_empty() && index != msg.delta_block {
                        chunk.push_str(BLOCK_SEPARATOR);
                    }
                    chunk.push_str(text);
                    msg.delta_block = index;
                    msg.deltas.push_str(&chunk);
                    let data = data(&chunk, msg);
                    out.emit_data(EventType::MessageStreamed, run, data);
                } else {
                    msg.reasoning.push_str(text);
                    let data = data(text, msg);
                    out.emit_data(EventType::ReasoningStreamed, run, data);
                }
            }
            "message_stop" => match streamed_in_lane(&self.turn.messages) {
                Some(at) => {
                    let m = self.turn.messages.remove(at);
                    self.close(m, false, out);
                }
                None => out.ignore(),
            },
            "content_block_start" | "content_block_stop" | "message_delta" | "ping" | "error" => {
                out.ignore()
            }
            other => out.unknown(format_args!("stream_event {other:?}")),
        }
    }

    fn result(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        self.ensure_run(out);
        self.close_all(out);
        let subtype = rec
            .get("subtype")
            .and_then(Value::as_str)
            .unwrap_or("success");
        let is_error = rec.get("is_error").and_then(Value::as_bool) == Some(true);
        let run = self.run.clone();
        let run = run.as_deref();
        if let Some(mut data) = usage(rec) {
            // `total_cost_usd` counts since the process started; the turn's cost is the growth.
            if let Some(total) = rec.get("total_cost_usd").and_then(Value::as_f64) {
                let turn = match self.session_cost {
                    Some(before) if total >= before => round_usd(total - before),
                    _ => round_usd(total),
                };
                data.insert("cost_usd".into(), json!(turn));
                data.insert("session_cost_usd".into(), json!(total));
                self.session_cost = Some(total);
            }
            emit(out, run, EventType::TokenUsageUpdated, data, None, None);
        }
        let mut api_error = self.turn.api_error.take();
        let text = |key: &str| str_field(rec, key).filter(|s| !s.trim().is_empty());
        let errors = rec.get("errors").and_then(Value::as_array).map(|errors| {
            let all: Vec<&str> = errors.iter().filter_map(Value::as_str).collect();
            all.join("; ")
        });
        let errors = errors.filter(|s| !s.is_empty());
        let aborted = rec
            .get("terminal_reason")
            .and_then(Value::as_str)
            .is_some_and(|r| r.starts_with("aborted"));
        enum End {
            Completed,
            Cancelled,
            Failed(String, String),
        }
        let end = match subtype {
            "success" if !is_error => End::Completed,
            "success" => {
                let (kind, fallback) = match api_error.take() {
                    Some(e) => (e.kind, Some(e.message)),
                    None => (status_kind(rec.get("api_error_status")), None),
                };
                let message = text("result")
                    .or(fallback.filter(|s| !s.is_empty()))
                    .or_else(|| text("error"))
                    .or(errors)
                    .unwrap_or_else(|| match rec.get("api_error_status") {
                        Some(s) if !s.is_null() => format!("API error (status {s})"),
                        _ => "API error".to_owned(),
                    });
                End::Failed(kind, message)
            }
            "error_during_execution" if self.turn.interrupted || aborted => End::Cancelled,
            other if !is_error && !other.starts_with("error") => End::Completed,
            other => {
                let during = other == "error_during_execution";
                let kind = match api_error.take_if(|_| during) {
                    Some(e) => e.kind,
                    None if during => other.to_owned(),
                    None => other.strip_prefix("error_").unwrap_or(other).to_owned(),
                };
                let fallback = match other {
                    "error_max_turns" => "reached the maximum number of turns".to_owned(),
                    "error_max_budget_usd" => "reached the maximum budget".to_owned(),
                    _ => other.replace('_', " "),
                };
                let message = text("result").or_else(|| text("error")).or(errors);
                End::Failed(kind, message.unwrap_or(fallback))
            }
        };
        if let Some(e) = api_error {
            self.report_api_error(e, out);
        }
        match end {
            End::Completed => {
                let mut data = Map::new();
                for key in [
                    "result",
                    "stop_reason",
                    "duration_ms",
                    "duration_api_ms",
                    "num_turns",
                ] {
                    copy(&mut data, key, rec.get(key));
                }
                let denials = rec.get("permission_denials");
                copy(
                    &mut data,
                    "permission_denials",
                    denials.filter(|d| non_empty(d)),
                );
                emit(out, run, EventType::RunCompleted, data, None, None);
            }
            End::Cancelled => {
                // The turn owns its tools now: take them out rather than clone them.
                for tool in std::mem::take(&mut self.turn.tools) {
                    if tool.done {
                        continue;
                    }
                    let id = tool.id;
                    let name = tool.name.map_or(Value::Null, Value::from);
                    let input = tool.input.unwrap_or(Value::Null);
                    let data = cancelled_data(&id, &name, &input, EventType::RunCancelled);
                    let data = obj(data);
                    let kind = EventType::ToolCallCancelled;
                    emit(out, run, kind, data, tool.lane.as_deref(), Some(&id));
                }
                let mut data = obj(json!({ "reason": CancelReason::Interrupted.as_str() }));
                for key in ["duration_ms", "num_turns"] {
                    copy(&mut data, key, rec.get(key));
                }
                data.insert("details".into(), details(rec).into());
                emit(out, run, EventType::RunCancelled, data, None, None);
            }
            End::Failed(kind, message) => {
                let status = status_code(rec.get("api_error_status"));
                let error = ProviderError::from_provider(self.provider, &kind, status, message);
                let mut data = error.to_data();
                add_details(&mut data, details(rec).into());
                emit(out, run, EventType::RunFailed, data, None, None);
            }
        }
        self.end_turn();
    }

    fn control_request(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(request) = rec.get("request").and_then(Value::as_object) else {
            return out.missing("request");
        };
        match request.get("subtype").and_then(Value::as_str) {
            Some("can_use_tool") => {
                let Some(request_id) = str_field(rec, "request_id") else {
                    return out.missing("request_id");
                };
                self.ensure_run(out);
                self.close_settled(out);
                let tool_call_id = str_field(request, "tool_use_id").filter(|s| !s.is_empty());
                let mut data = Map::new();
                data.insert("request_id".into(), request_id.clone().into());
                copy(&mut data, "tool_name", request.get("tool_name"));
                copy(&mut data, "tool_input", request.get("input"));
                copy(
                    &mut data,
                    "tool_call_id",
                    tool_call_id.clone().map(Value::from).as_ref(),
                );
                for key in ["permission_suggestions", "blocked_path", "decision_reason"] {
                    copy(&mut data, key, request.get(key));
                }
                // A sub-agent's call: the request names no lane, the started call does.
                let lane = tool_call_id
                    .as_ref()
                    .and_then(|id| self.turn.tool_index.get(id))
                    .and_then(|&i| self.turn.tools.get(i))
                    .and_then(|t| t.lane.clone());
                let run = self.run.as_deref();
                let kind = EventType::ToolApprovalRequested;
                emit(out, run, kind, data, lane.as_deref(), Some(&request_id));
                self.turn.approvals.insert(request_id, tool_call_id);
            }
            Some("interrupt") if self.run.is_some() => {
                self.turn.interrupted = true;
                out.ignore();
            }
            _ => out.ignore(),
        }
    }

    fn control_response(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let response = rec.get("response");
        let request_id = response
            .and_then(|r| r.get("request_id"))
            .and_then(Value::as_str);
        let Some((request_id, tool_call_id)) =
            request_id.and_then(|id| self.turn.approvals.remove_entry(id))
        else {
            return out.ignore();
        };
        let inner = response.and_then(|r| r.get("response"));
        let behavior = inner
            .and_then(|r| r.get("behavior"))
            .and_then(Value::as_str);
        let failed = response
            .and_then(|r| r.get("subtype"))
            .and_then(Value::as_str)
            == Some("error");
        let mut data = obj(json!({ "request_id": request_id }));
        copy(
            &mut data,
            "tool_call_id",
            tool_call_id.map(Value::from).as_ref(),
        );
        let kind = if behavior == Some("allow") && !failed {
            copy(
                &mut data,
                "updated_input",
                inner.and_then(|r| r.get("updatedInput")),
            );
            EventType::ToolApprovalGranted
        } else {
            copy(&mut data, "message", inner.and_then(|r| r.get("message")));
            copy(&mut data, "error", response.and_then(|r| r.get("error")));
            EventType::ToolApprovalDenied
        };
        emit(
            out,
            self.run.as_deref(),
            kind,
            data,
            None,
            Some(&request_id),
        );
    }

    fn control_cancel(&mut self, rec: &Map<String, Value>, out: &mut Out<'_>) {
        let request_id = rec.get("request_id").and_then(Value::as_str);
        let Some((request_id, tool_call_id)) =
            request_id.and_then(|id| self.turn.approvals.remove_entry(id))
        else {
            return out.ignore();
        };
        let mut data = obj(json!({ "request_id": request_id, "reason": "cancelled" }));
        copy(
            &mut data,
            "tool_call_id",
            tool_call_id.map(Value::from).as_ref(),
        );
        let kind = EventType::ToolApprovalDenied;
        emit(
            out,
            self.run.as_deref(),
            kind,
            data,
            None,
            Some(&request_id),
        );
    }

    /// Closes the messages not opened by a stream (their lines are all in).
    fn close_settled(&mut self, out: &mut Out<'_>) {
        let mut i = 0;
        while i < self.turn.messages.len() {
            if self.turn.messages[i].streamed {
                i += 1;
            } else {
                let m = self.turn.messages.remove(i);
                self.close(m, false, out);
            }
        }
    }

    /// Closes every open message; a streamed one that never stopped is abandoned.
    fn close_all(&mut self, out: &mut Out<'_>) {
        for m in std::mem::take(&mut self.turn.messages) {
            let abandoned = m.streamed;
            self.close(m, abandoned, out);
        }
    }

    /// Emits what a message still owes: its whole text, or the discard of what it streamed.
    fn close(&mut self, mut msg: Msg, abandoned: bool, out: &mut Out<'_>) {
        let run = self.run.as_deref();
        let lane = msg.lane.clone();
        let lane = lane.as_deref();
        if !msg.text.is_empty() {
            flush_text(&mut msg, run, out);
        } else if !msg.deltas.is_empty() && !msg.text_sent {
            let mut data = msg_data(&msg);
            if abandoned {
                data.insert("content".into(), "".into());
                data.insert("discarded".into(), true.into());
            } else {
                data.insert("content".into(), msg.deltas.clone().into());
            }
            emit(out, run, EventType::MessageReceived, data, lane, None);
            msg.text_sent = true;
        }
        if !msg.reasoning.is_empty() {
            let mut data = msg_data(&msg);
            data.remove("role");
            if abandoned {
                data.insert("content".into(), "".into());
                data.insert("discarded".into(), true.into());
            } else {
                data.insert("content".into(), std::mem::take(&mut msg.reasoning).into());
            }
            msg.reasoning.clear();
            emit(out, run, EventType::ReasoningReceived, data, lane, None);
        }
        if !abandoned && msg.id.is_some() {
            msg.streamed = false;
            self.turn.recent = Some(msg);
        }
    }

    fn report_api_error(&self, e: ApiError, out: &mut Out<'_>) {
        let status = status_code(e.status.as_ref());
        let mut data =
            ProviderError::from_provider(self.provider, &e.kind, status, e.message).to_data();
        data.insert("severity".into(), "error".into());
        copy(&mut data, "api_error_status", e.status.as_ref());
        emit(
            out,
            self.run.as_deref(),
            EventType::ErrorOccurred,
            data,
            None,
            None,
        );
    }
}

impl Decoder for Claude {
    fn record_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        match fast::leading_type(text) {
            Some("user") => self.user_text(text, out),
            Some("system") => self.system_text(text, out),
            Some("stream_event") => self.stream_text(text, out),
            _ => false,
        }
    }

    fn record_owned(&mut self, mut record: Value, out: &mut Out<'_>) {
        // A `user` line's `tool_use_result` (often the whole file read) is moved into its
        // event rather than cloned.
        let user = record.get("type").and_then(Value::as_str) == Some("user");
        match record.as_object_mut() {
            Some(rec) if user => {
                let sidecar = rec.remove("tool_use_result");
                out.use_timestamp(rec.get("timestamp"));
                self.user(rec, sidecar, out);
            }
            _ => self.record(&record, out),
        }
    }

    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let Some(rec) = record.as_object() else {
            return out.unknown("record");
        };
        let Some(ty) = rec.get("type").and_then(Value::as_str) else {
            return out.missing("type");
        };
        out.use_timestamp(rec.get("timestamp"));
        match ty {
            "system" => self.system(rec, out),
            "assistant" => self.assistant(rec, out),
            "user" => self.user(rec, rec.get("tool_use_result").cloned(), out),
            "stream_event" => self.stream_event(rec, out),
            "result" => self.result(rec, out),
            "control_request" => self.control_request(rec, out),
            "control_response" => self.control_response(rec, out),
            "control_cancel_request" => self.control_cancel(rec, out),
            "rate_limit_event" | "keep_alive" | "tool_progress" | "auth_status" => out.ignore(),
            other => out.unknown(format_args!("type {other:?}")),
        }
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.close_all(out);
        if let Some(e) = self.turn.api_error.take() {
            self.report_api_error(e, out);
        }
    }
}

/// Emits one event, adding the sub-agent lane as `parent_tool_use_id`.
fn emit(
    out: &mut Out<'_>,
    run: Option<&str>,
    kind: EventType,
    mut data: Map<String, Value>,
    lane: Option<&str>,
    correlation: Option<&str>,
) {
    if let Some(lane) = lane {
        data.insert("parent_tool_use_id".into(), lane.into());
    }
    out.emit_full(kind, run, Value::Object(data), correlation, Map::new());
}

/// Emits the message's text as `message_received` unless it already was.
fn flush_text(msg: &mut Msg, run: Option<&str>, out: &mut Out<'_>) {
    if msg.text.is_empty() || msg.text_sent {
        return;
    }
    let mut data = msg_data(msg);
    data.insert("content".into(), msg.text.clone().into());
    emit(
        out,
        run,
        EventType::MessageReceived,
        data,
        msg.lane.as_deref(),
        None,
    );
    msg.text_sent = true;
}

/// `{message_id, role}` of a message's events.
fn msg_data(msg: &Msg) -> Map<String, Value> {
    let mut data = Map::new();
    if let Some(id) = &msg.id {
        data.insert("message_id".into(), id.clone().into());
    }
    data.insert("role".into(), "assistant".into());
    data
}

/// The failed API call a synthetic assistant line reports, if it is one.
fn api_error_line(rec: &Map<String, Value>, message: &Map<String, Value>) -> Option<ApiError> {
    let error = rec.get("error").and_then(Value::as_str);
    let flagged = ["isApiErrorMessage", "is_api_error_message"]
        .iter()
        .any(|k| rec.get(*k).and_then(Value::as_bool) == Some(true));
    let synthetic = message.get("model").and_then(Value::as_str) == Some("<synthetic>");
    if error.is_none() && !flagged {
        return None;
    }
    if !synthetic && !flagged {
        return None;
    }
    let status = rec
        .get("apiErrorStatus")
        .or_else(|| rec.get("api_error_status"));
    let kind = match error {
        Some(e) => e.to_owned(),
        None => status_kind(status),
    };
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    };
    Some(ApiError {
        kind,
        message: text,
        status: status.filter(|s| !s.is_null()).cloned(),
    })
}

/// An HTTP status given as a number or a string.
fn status_code(status: Option<&Value>) -> Option<u64> {
    status.and_then(|s| {
        s.as_u64()
            .or_else(|| s.as_str().and_then(|s| s.parse().ok()))
    })
}

/// A provider-error kind from an HTTP status.
fn status_kind(status: Option<&Value>) -> String {
    match status_code(status) {
        Some(401 | 403) => "authentication_failed",
        Some(402) => "billing_error",
        Some(429) => "rate_limit",
        Some(400) => "invalid_request",
        Some(529) => "overloaded",
        Some(500..=599) => "server_error",
        _ => "api_error",
    }
    .to_owned()
}

/// `token_usage_updated.data` from a result, when it reports any usage.
fn usage(rec: &Map<String, Value>) -> Option<Map<String, Value>> {
    let mut data = Map::new();
    if let Some(u) = rec.get("usage").and_then(Value::as_object) {
        for key in [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ] {
            copy(&mut data, key, u.get(key).filter(|v| v.is_number()));
        }
    }
    copy(
        &mut data,
        "cost_usd",
        rec.get("total_cost_usd").filter(|v| v.is_number()),
    );
    if data.is_empty() {
        return None;
    }
    let model_usage = rec.get("modelUsage").filter(|m| non_empty(m));
    copy(&mut data, "model_usage", model_usage);
    Some(data)
}

/// Dollars rounded to 1e-9, so that a difference of two totals reads as it was meant.
fn round_usd(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

/// The result's own fields, for `data.details` of a failed or cancelled run.
fn details(rec: &Map<String, Value>) -> Map<String, Value> {
    let mut d = Map::new();
    for key in [
        "subtype",
        "is_error",
        "api_error_status",
        "terminal_reason",
        "result",
        "error",
        "errors",
        "permission_denials",
        "duration_ms",
        "num_turns",
    ] {
        copy(&mut d, key, rec.get(key).filter(|v| !v.is_null()));
    }
    d
}

/// The text of a tool_result's content: a string, or its text blocks joined.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// `todo_updated.data.items` from a TodoWrite input.
fn todo_items(input: Option<&Value>) -> Vec<Value> {
    let todos = input.and_then(|i| i.get("todos")).and_then(Value::as_array);
    todos
        .into_iter()
        .flatten()
        .map(|t| {
            let text = t
                .get("content")
                .or_else(|| t.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let status = match t.get("status").and_then(Value::as_str) {
                Some(s @ ("pending" | "in_progress" | "completed")) => s,
                Some("in-progress") => "in_progress",
                Some("done") => "completed",
                _ => "pending",
            };
            json!({ "text": text, "status": status })
        })
        .collect()
}

fn str_field(m: &Map<String, Value>, key: &str) -> Option<String> {
    m.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn copy(data: &mut Map<String, Value>, key: &str, value: Option<&Value>) {
    if let Some(v) = value.filter(|v| !v.is_null()) {
        data.insert(key.to_owned(), v.clone());
    }
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Null => false,
        _ => true,
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A content block's identity within its message, for skipping repeats: its value hashed as
/// it is built (each node's kind, then its contents, strings and counts length-prefixed), so
/// two blocks hash alike exactly when their JSON text would, without writing the text.
fn block_hash(block: &Value) -> u128 {
    fn feed(h: &mut Fnv128, value: &Value) {
        match value {
            Value::Null => h.byte(b'n'),
            Value::Bool(b) => h.byte(if *b { b't' } else { b'f' }),
            // Told apart as serde_json tells them apart (and writes them: `1`, `-1`, `1.0`).
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => {
                    h.byte(b'u');
                    h.part(&u.to_le_bytes());
                }
                (None, Some(i), _) => {
                    h.byte(b'i');
                    h.part(&i.to_le_bytes());
                }
                (None, None, f) => {
                    h.byte(b'd');
                    h.part(&f.unwrap_or_default().to_bits().to_le_bytes());
                }
            },
            Value::String(s) => {
                h.byte(b's');
                h.part(s.as_bytes());
            }
            Value::Array(items) => {
                h.byte(b'a');
                h.part(&(items.len() as u64).to_le_bytes());
                for item in items {
                    feed(h, item);
                }
            }
            Value::Object(map) => {
                h.byte(b'o');
                h.part(&(map.len() as u64).to_le_bytes());
                for (key, value) in map {
                    h.part(key.as_bytes());
                    feed(h, value);
                }
            }
        }
    }
    let mut h = Fnv128::new();
    feed(&mut h, block);
    h.finish()
}

#[cfg(test)]
pub(super) mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::{expect, Expect};
    use serde_json::Value;

    use crate::core::normalize::{normalize, Config, Format};
    use crate::core::time::Timestamp;

    use crate::core::normalize::tests::check;

    /// Like `check`, but prints every event's whole `data` (minus the bulky
    /// `provider_error`), for the fields the compact rendering leaves out.
    fn check_data(input: &str, expect: Expect) {
        let out = normalize(
            Some(Format::Claude),
            Config::new("s1"),
            input.as_bytes(),
            Timestamp::EPOCH,
        );
        let mut text = String::new();
        let mut runs: Vec<String> = Vec::new();
        for e in &out.events {
            let mut data = e.data().clone();
            if let Some(kind) = data
                .remove("provider_error")
                .and_then(|p| p.get("kind").cloned())
            {
                data.insert("provider_error.kind".into(), kind);
            }
            let run = match e.run_id() {
                Some(r) => {
                    if !runs.iter().any(|x| x == r) {
                        runs.push(r.to_owned());
                    }
                    let n = runs.iter().position(|x| x == r).map_or(0, |n| n + 1);
                    format!("t{n}")
                }
                None => "--".to_owned(),
            };
            text.push_str(&format!(
                "{} {run} {} {}\n",
                e.sequence(),
                e.kind(),
                Value::Object(data)
            ));
        }
        for d in &out.diagnostics {
            text.push_str(&format!("! {d}\n"));
        }
        expect.assert_eq(&text);
    }

    /// Two blocks hash alike exactly when their JSON text is alike (what the hash of the text
    /// it replaced told apart): numbers of each kind, strings against keys and nesting, the
    /// same value written in other ways.
    #[wasm_bindgen_test(unsupported = test)]
    fn blocks_hash_alike_exactly_when_their_text_is_alike() {
        let texts = [
            r#"{"type":"text","text":"a"}"#,
            r#"{ "text" : "a", "type" : "text" }"#,
            r#"{"type":"text","text":"\u0061"}"#,
            r#"{"type":"text","text":"ab"}"#,
            r#"{"type":"text","text":"a","x":null}"#,
            r#"{"type":"textt","ext":"a"}"#,
            r#"{"ab":"c"}"#,
            r#"{"a":"bc"}"#,
            r#"{"a":["b","c"]}"#,
            r#"{"a":[["b"],"c"]}"#,
            r#"{"a":["b",["c"]]}"#,
            r#"{"a":[]}"#,
            r#"{"a":{}}"#,
            r#"{"a":null}"#,
            r#"{"a":"null"}"#,
            r#"{"a":true}"#,
            r#"{"a":false}"#,
            r#"{"a":1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e0}"#,
            r#"{"a":-1}"#,
            r#"{"a":-1.0}"#,
            r#"{"a":0.0}"#,
            r#"{"a":-0.0}"#,
            r#"{"a":18446744073709551615}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":"1"}"#,
            r#"[]"#,
            r#"[null]"#,
            r#"[[]]"#,
            r#""a""#,
        ];
        let values: Vec<Value> = texts
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let written: Vec<String> = values.iter().map(Value::to_string).collect();
        for ((a, wa), ta) in values.iter().zip(&written).zip(texts) {
            for ((b, wb), tb) in values.iter().zip(&written).zip(texts) {
                assert_eq!(
                    super::block_hash(a) == super::block_hash(b),
                    wa == wb,
                    "{ta} against {tb}"
                );
            }
        }
    }

    const INIT: &str = r#"{"type":"system","subtype":"init","session_id":"sess-1","cwd":"/w","tools":["Bash","Read","TodoWrite","Task"],"model":"claude-opus-4-8","permissionMode":"default","claude_code_version":"2.1.197","slash_commands":["compact"]}"#;

    #[wasm_bindgen_test(unsupported = test)]
    fn a_turn_with_one_line_per_block_and_parallel_results_out_of_order() {
        let input = [
            INIT,
            r#"{"type":"user","session_id":"sess-1","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"text","text":"Read both files"}]}}"#,
            r#"{"type":"assistant","session_id":"sess-1","parent_tool_use_id":null,"message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Reading them."}]}}"#,
            r#"{"type":"assistant","session_id":"sess-1","parent_tool_use_id":null,"message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"tu_a","name":"Read","input":{"file_path":"a"}}]}}"#,
            r#"{"type":"assistant","session_id":"sess-1","parent_tool_use_id":null,"message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"tu_b","name":"Read","input":{"file_path":"b"}}]}}"#,
            r#"{"type":"user","session_id":"sess-1","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_b","content":[{"type":"text","text":"B1"},{"type":"text","text":"B2"}]}]},"tool_use_result":{"type":"text","file":{"filePath":"b","numLines":2}}}"#,
            r#"{"type":"user","session_id":"sess-1","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_a","content":"File does not exist.","is_error":true}]},"tool_use_result":"Error: File does not exist."}"#,
            r#"{"type":"assistant","session_id":"sess-1","parent_tool_use_id":null,"message":{"id":"msg_2","role":"assistant","content":[{"type":"text","text":"b has two lines; a is missing."}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":2360,"duration_api_ms":2325,"num_turns":2,"result":"b has two lines; a is missing.","stop_reason":"end_turn","session_id":"sess-1","total_cost_usd":0.25,"usage":{"input_tokens":18,"cache_creation_input_tokens":25067,"cache_read_input_tokens":17254,"output_tokens":424},"permission_denials":[],"terminal_reason":"completed"}"#,
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 message_sent role="user" content="Read both files"
                4 t1 message_received role="assistant" content="Reading them."
                5 t1 tool_call_started tool_name="Read" tool_call_id="tu_a" tool_input={"file_path":"a"}
                6 t1 tool_call_started tool_name="Read" tool_call_id="tu_b" tool_input={"file_path":"b"}
                7 t1 tool_call_completed tool_name="Read" tool_call_id="tu_b" tool_input={"file_path":"b"} tool_output="B1\nB2"
                8 t1 tool_call_failed tool_name="Read" tool_call_id="tu_a" tool_input={"file_path":"a"} error="File does not exist."
                9 t1 message_received role="assistant" content="b has two lines; a is missing."
                10 t1 token_usage_updated input_tokens=18 output_tokens=424 cost_usd=0.25
                11 t1 run_completed
            "#]],
        );
        check_data(
            &input,
            expect![[r#"
                1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
                2 t1 run_started {}
                3 t1 message_sent {"content":"Read both files","role":"user"}
                4 t1 message_received {"content":"Reading them.","message_id":"msg_1","role":"assistant"}
                5 t1 tool_call_started {"tool_call_id":"tu_a","tool_input":{"file_path":"a"},"tool_name":"Read"}
                6 t1 tool_call_started {"tool_call_id":"tu_b","tool_input":{"file_path":"b"},"tool_name":"Read"}
                7 t1 tool_call_completed {"details":{"tool_use_result":{"file":{"filePath":"b","numLines":2},"type":"text"}},"tool_call_id":"tu_b","tool_input":{"file_path":"b"},"tool_name":"Read","tool_output":"B1\nB2"}
                8 t1 tool_call_failed {"details":{"tool_use_result":"Error: File does not exist."},"error":"File does not exist.","tool_call_id":"tu_a","tool_input":{"file_path":"a"},"tool_name":"Read"}
                9 t1 message_received {"content":"b has two lines; a is missing.","message_id":"msg_2","role":"assistant"}
                10 t1 token_usage_updated {"cache_creation_input_tokens":25067,"cache_read_input_tokens":17254,"cost_usd":0.25,"input_tokens":18,"output_tokens":424,"session_cost_usd":0.25}
                11 t1 run_completed {"duration_api_ms":2325,"duration_ms":2360,"num_turns":2,"result":"b has two lines; a is missing.","stop_reason":"end_turn"}
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn partial_mode_turn_with_thinking_text_and_a_tool() {
        let ev = |e: &str| {
            format!(
                r#"{{"type":"stream_event","event":{e},"session_id":"sess-1","parent_tool_use_id":null,"uuid":"u"}}"#
            )
        };
        let input = [
            INIT.to_owned(),
            r#"{"type":"system","subtype":"status","status":"requesting","session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":42,"output_tokens":1}}}"#),
            ev(r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}"#),
            r#"{"type":"system","subtype":"thinking_tokens","estimated_tokens":3,"estimated_tokens_delta":3,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"think."}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#),
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","model":"claude-opus-4-8","content":[{"type":"thinking","thinking":"Let me think.","signature":"sig"}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_stop","index":0}"#),
            ev(r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
            ev(r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I will "}}"#),
            ev(r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"run it."}}"#),
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"I will run it."}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_stop","index":1}"#),
            ev(r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu_1","name":"Bash","input":{}}}"#),
            ev(r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"echo hi\"}"}}"#),
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":"tu_1","name":"Bash","input":{"command":"echo hi"}}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            // The same block again: partial mode may show it twice.
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":"tu_1","name":"Bash","input":{"command":"echo hi"}}],"stop_reason":null},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_stop","index":2}"#),
            ev(r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#),
            ev(r#"{"type":"message_stop"}"#),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"hi","is_error":false}]},"parent_tool_use_id":null,"session_id":"sess-1","tool_use_result":{"stdout":"hi","stderr":"","interrupted":false,"isImage":false}}"#.into(),
            ev(r#"{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[]}}"#),
            ev(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It said hi."}}"#),
            r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"text","text":"It said hi."}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_stop","index":0}"#),
            ev(r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
            ev(r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Done."}}"#),
            r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"text","text":"Done."}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"content_block_stop","index":1}"#),
            ev(r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#),
            ev(r#"{"type":"message_stop"}"#),
            r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":293,"num_turns":2,"result":"It said hi.\n\nDone.","stop_reason":"end_turn","session_id":"sess-1","total_cost_usd":0.00051,"usage":{"input_tokens":42,"output_tokens":40},"terminal_reason":"completed"}"#.into(),
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 reasoning_streamed delta="Let me "
                4 t1 reasoning_streamed delta="think."
                5 t1 reasoning_received content="Let me think."
                6 t1 message_streamed delta="I will "
                7 t1 message_streamed delta="run it."
                8 t1 message_received role="assistant" content="I will run it."
                9 t1 tool_call_started tool_name="Bash" tool_call_id="tu_1" tool_input={"command":"echo hi"}
                10 t1 tool_call_completed tool_name="Bash" tool_call_id="tu_1" tool_input={"command":"echo hi"} tool_output="hi"
                11 t1 message_streamed delta="It said hi."
                12 t1 message_streamed delta="\n\nDone."
                13 t1 message_received role="assistant" content="It said hi.\n\nDone."
                14 t1 token_usage_updated input_tokens=42 output_tokens=40 cost_usd=0.00051
                15 t1 run_completed
            "#]],
        );
        check_data(
            &input,
            expect![[r#"
                1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
                2 t1 run_started {}
                3 t1 reasoning_streamed {"delta":"Let me ","message_id":"msg_1"}
                4 t1 reasoning_streamed {"delta":"think.","message_id":"msg_1"}
                5 t1 reasoning_received {"content":"Let me think.","message_id":"msg_1"}
                6 t1 message_streamed {"delta":"I will ","message_id":"msg_1"}
                7 t1 message_streamed {"delta":"run it.","message_id":"msg_1"}
                8 t1 message_received {"content":"I will run it.","message_id":"msg_1","role":"assistant"}
                9 t1 tool_call_started {"tool_call_id":"tu_1","tool_input":{"command":"echo hi"},"tool_name":"Bash"}
                10 t1 tool_call_completed {"details":{"tool_use_result":{"interrupted":false,"isImage":false,"stderr":"","stdout":"hi"}},"tool_call_id":"tu_1","tool_input":{"command":"echo hi"},"tool_name":"Bash","tool_output":"hi"}
                11 t1 message_streamed {"delta":"It said hi.","message_id":"msg_2"}
                12 t1 message_streamed {"delta":"\n\nDone.","message_id":"msg_2"}
                13 t1 message_received {"content":"It said hi.\n\nDone.","message_id":"msg_2","role":"assistant"}
                14 t1 token_usage_updated {"cost_usd":0.00051,"input_tokens":42,"output_tokens":40,"session_cost_usd":0.00051}
                15 t1 run_completed {"duration_ms":293,"num_turns":2,"result":"It said hi.\n\nDone.","stop_reason":"end_turn"}
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_abandoned_partial_is_discarded_when_the_retry_arrives() {
        let ev = |e: &str| {
            format!(
                r#"{{"type":"stream_event","event":{e},"session_id":"sess-1","parent_tool_use_id":null}}"#
            )
        };
        let input = [
            INIT.to_owned(),
            ev(r#"{"type":"message_start","message":{"id":"msg_a","content":[]}}"#),
            ev(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#),
            // The stream broke; the CLI retried without streaming, under another id.
            r#"{"type":"assistant","message":{"id":"msg_b","role":"assistant","content":[{"type":"text","text":"Hello there."}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Hello there.","session_id":"sess-1","duration_ms":10,"num_turns":1}"#.into(),
            // Second turn: the abandoned message is followed by a new streamed attempt.
            INIT.to_owned(),
            ev(r#"{"type":"message_start","message":{"id":"msg_c","content":[]}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}}"#),
            ev(r#"{"type":"message_start","message":{"id":"msg_d","content":[]}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi."}}"#),
            r#"{"type":"assistant","message":{"id":"msg_d","role":"assistant","content":[{"type":"text","text":"Hi."}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"message_stop"}"#),
            // Third turn: the stream breaks and the input ends.
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Hi.","session_id":"sess-1"}"#.into(),
            ev(r#"{"type":"message_start","message":{"id":"msg_e","content":[]}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Cut"}}"#),
        ]
        .join("\n");
        check_data(
            &input,
            expect![[r#"
            1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
            2 t1 run_started {}
            3 t1 message_streamed {"delta":"Hel","message_id":"msg_a"}
            4 t1 message_streamed {"delta":"lo","message_id":"msg_a"}
            5 t1 message_received {"content":"","discarded":true,"message_id":"msg_a","role":"assistant"}
            6 t1 message_received {"content":"Hello there.","message_id":"msg_b","role":"assistant"}
            7 t1 run_completed {"duration_ms":10,"num_turns":1,"result":"Hello there."}
            8 t2 run_started {}
            9 t2 reasoning_streamed {"delta":"Hmm","message_id":"msg_c"}
            10 t2 reasoning_received {"content":"","discarded":true,"message_id":"msg_c"}
            11 t2 message_streamed {"delta":"Hi.","message_id":"msg_d"}
            12 t2 message_received {"content":"Hi.","message_id":"msg_d","role":"assistant"}
            13 t2 run_completed {"result":"Hi."}
            14 t3 run_started {}
            15 t3 message_streamed {"delta":"Cut","message_id":"msg_e"}
            16 t3 message_received {"content":"","discarded":true,"message_id":"msg_e","role":"assistant"}
        "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_local_commands_replayed_output_opens_no_turn() {
        // Real 2.1.197 output: the `set_model` control request, between turns, makes the CLI
        // print the command's output as a replayed user line.
        check(
            Format::Claude,
            r#"{"type":"user","message":{"role":"user","content":"<local-command-stdout>Set model to claude-sonnet-4-5</local-command-stdout>"},"session_id":"s","parent_tool_use_id":null,"uuid":"u","timestamp":"2026-11-30T01:43:35.958Z","isReplay":true}
{"type":"control_response","response":{"subtype":"success","request_id":"agentwire_control_2"}}
"#,
            expect![[""]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_tool_refused_by_the_permission_mode_is_reported_by_its_result() {
        // Real 2.1.197 output in `dontAsk` mode: a `system/permission_denied` line, then the
        // tool_result carrying the same refusal.
        check(
            Format::Claude,
            r#"{"type":"system","subtype":"permission_denied","tool_name":"Bash","tool_use_id":"toolu_1","decision_reason_type":"mode","message":"Permission to use Bash has been denied."}
"#,
            expect![[""]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_long_lived_process_reports_cumulative_cost_and_each_turn_gets_its_share() {
        // Real 2.1.197 output (stream-json input, two turns in one process): `usage` is the
        // turn's, `total_cost_usd` and `modelUsage` count since the process started.
        let input = [
            r#"{"type":"system","subtype":"init","session_id":"sess-1","model":"claude-opus-4-8"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"a","session_id":"sess-1","total_cost_usd":0.000285,"usage":{"input_tokens":42,"output_tokens":3},"modelUsage":{"m":{"inputTokens":42,"costUSD":0.000285}}}"#,
            r#"{"type":"system","subtype":"init","session_id":"sess-1","model":"claude-opus-4-8"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"b","session_id":"sess-1","total_cost_usd":0.00057,"usage":{"input_tokens":42,"output_tokens":3},"modelUsage":{"m":{"inputTokens":84,"costUSD":0.00057}}}"#,
            // A new session starts counting again.
            r#"{"type":"system","subtype":"init","session_id":"sess-2","model":"claude-opus-4-8"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"c","session_id":"sess-2","total_cost_usd":0.0001,"usage":{"input_tokens":1,"output_tokens":1}}"#,
        ]
        .join("\n");
        check_data(
            &input,
            expect![[r#"
                1 -- session_started {"model":"claude-opus-4-8","provider_session_id":"sess-1"}
                2 t1 run_started {}
                3 t1 token_usage_updated {"cost_usd":0.000285,"input_tokens":42,"model_usage":{"m":{"costUSD":0.000285,"inputTokens":42}},"output_tokens":3,"session_cost_usd":0.000285}
                4 t1 run_completed {"result":"a"}
                5 t2 run_started {}
                6 t2 token_usage_updated {"cost_usd":0.000285,"input_tokens":42,"model_usage":{"m":{"costUSD":0.00057,"inputTokens":84}},"output_tokens":3,"session_cost_usd":0.00057}
                7 t2 run_completed {"result":"b"}
                8 -- session_started {"model":"claude-opus-4-8","provider_session_id":"sess-2"}
                9 t3 run_started {}
                10 t3 token_usage_updated {"cost_usd":0.0001,"input_tokens":1,"output_tokens":1,"session_cost_usd":0.0001}
                11 t3 run_completed {"result":"c"}
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_api_failure_is_a_success_result_with_is_error() {
        let input = [
            INIT,
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":1,"retry_delay_ms":500,"error_status":401,"error":"authentication_failed","session_id":"sess-1"}"#,
            r#"{"type":"assistant","message":{"id":"6c3a","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Failed to authenticate. API Error: 401 invalid x-api-key"}]},"parent_tool_use_id":null,"session_id":"sess-1","error":"authentication_failed"}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"duration_ms":1200,"num_turns":1,"result":"Failed to authenticate. API Error: 401 invalid x-api-key","session_id":"sess-1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"terminal_reason":"api_error"}"#,
            // Without a synthetic line the kind comes from the status.
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"result":"","session_id":"sess-1"}"#,
            // A synthetic line that no failing result consumes is still reported.
            r#"{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"API Error: 429 rate limited"}]},"isApiErrorMessage":true,"apiErrorStatus":429,"session_id":"sess-1"}"#,
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 error_occurred error_message="API error (authentication_failed, status 401); retrying, att"… provider_error.kind="authentication_failed"
                4 t1 token_usage_updated input_tokens=0 output_tokens=0 cost_usd=0.0
                5 t1 run_failed error_message="Failed to authenticate. API Error: 401 invalid x-api-key" provider_error.kind="authentication_failed"
                6 t2 run_started
                7 t2 run_failed error_message="API error (status 529)" provider_error.kind="overloaded"
                8 t3 run_started
                9 t3 error_occurred error_message="API Error: 429 rate limited" provider_error.kind="rate_limit"
            "#]],
        );
        check_data(
            &input,
            expect![[r#"
                1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
                2 t1 run_started {}
                3 t1 error_occurred {"attempt":1,"error_message":"API error (authentication_failed, status 401); retrying, attempt 1 of 1","error_status":401,"max_retries":1,"provider_error.kind":"authentication_failed","retry_delay_ms":500,"severity":"warning"}
                4 t1 token_usage_updated {"cost_usd":0.0,"input_tokens":0,"output_tokens":0,"session_cost_usd":0.0}
                5 t1 run_failed {"details":{"api_error_status":401,"duration_ms":1200,"is_error":true,"num_turns":1,"result":"Failed to authenticate. API Error: 401 invalid x-api-key","subtype":"success","terminal_reason":"api_error"},"error_message":"Failed to authenticate. API Error: 401 invalid x-api-key","provider_error.kind":"authentication_failed"}
                6 t2 run_started {}
                7 t2 run_failed {"details":{"api_error_status":529,"is_error":true,"result":"","subtype":"success"},"error_message":"API error (status 529)","provider_error.kind":"overloaded"}
                8 t3 run_started {}
                9 t3 error_occurred {"api_error_status":429,"error_message":"API Error: 429 rate limited","provider_error.kind":"rate_limit","severity":"error"}
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn interrupted_turns_are_cancelled() {
        let ev = |e: &str| {
            format!(
                r#"{{"type":"stream_event","event":{e},"session_id":"sess-1","parent_tool_use_id":null}}"#
            )
        };
        let input = [
            INIT.to_owned(),
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"Bash","input":{"command":"sleep 100"}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"tu_2","name":"Bash","input":{"command":"sleep 200"}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_2","content":"[Request interrupted by user for tool use]","is_error":true}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user for tool use]"}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"duration_ms":5000,"num_turns":1,"session_id":"sess-1","usage":{"input_tokens":5,"output_tokens":7},"total_cost_usd":0.01}"#.into(),
            // Interrupted mid-stream: the partial text never completes.
            INIT.to_owned(),
            ev(r#"{"type":"message_start","message":{"id":"msg_2","content":[]}}"#),
            ev(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Once upon"}}"#),
            r#"{"type":"control_request","request_id":"req_9","request":{"subtype":"interrupt"}}"#.into(),
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_9"}}"#.into(),
            r#"{"type":"result","subtype":"error_during_execution","is_error":false,"session_id":"sess-1","terminal_reason":"aborted_streaming","errors":[]}"#.into(),
            // Without an interrupt, error_during_execution is a failure.
            INIT.to_owned(),
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"sess-1","errors":["Permission denied: cannot write to /root/secret.txt","second"],"result":""}"#.into(),
            INIT.to_owned(),
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"sess-1","num_turns":3}"#.into(),
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 tool_call_started tool_name="Bash" tool_call_id="tu_1" tool_input={"command":"sleep 100"}
                4 t1 tool_call_started tool_name="Bash" tool_call_id="tu_2" tool_input={"command":"sleep 200"}
                5 t1 tool_call_cancelled tool_name="Bash" tool_call_id="tu_2" tool_input={"command":"sleep 200"} reason="run_cancelled"
                6 t1 token_usage_updated input_tokens=5 output_tokens=7 cost_usd=0.01
                7 t1 tool_call_cancelled tool_name="Bash" tool_call_id="tu_1" tool_input={"command":"sleep 100"} reason="run_cancelled"
                8 t1 run_cancelled reason="interrupted"
                9 t2 run_started
                10 t2 message_streamed delta="Once upon"
                11 t2 message_received role="assistant" content="" discarded=true
                12 t2 run_cancelled reason="interrupted"
                13 t3 run_started
                14 t3 run_failed error_message="Permission denied: cannot write to /root/secret.txt; second" provider_error.kind="agent_error"
                15 t4 run_started
                16 t4 run_failed error_message="reached the maximum number of turns" provider_error.kind="max_turns"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn sessions_modes_and_models() {
        let input = [
            INIT,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"sess-1"}"#,
            // Stream-json input mode: init again at the next turn, with a new mode and model.
            r#"{"type":"system","subtype":"init","session_id":"sess-1","model":"claude-haiku-4","permissionMode":"plan"}"#,
            r#"{"type":"system","subtype":"status","status":null,"permissionMode":"acceptEdits","session_id":"sess-1"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"sess-1"}"#,
            // Another session in the same stream.
            r#"{"type":"system","subtype":"init","session_id":"sess-2","model":"claude-haiku-4","permissionMode":"plan"}"#,
            r#"{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"manual","pre_tokens":1000},"session_id":"sess-2"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"sess-2"}"#,
        ]
        .join("\n");
        check_data(
            &input,
            expect![[r#"
            1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
            2 t1 run_started {}
            3 t1 run_completed {"result":""}
            4 t2 run_started {}
            5 t2 mode_changed {"mode":"plan"}
            6 t2 model_changed {"model":"claude-haiku-4"}
            7 t2 mode_changed {"mode":"acceptEdits"}
            8 t2 run_completed {"result":""}
            9 -- session_started {"model":"claude-haiku-4","permission_mode":"plan","provider_session_id":"sess-2"}
            10 t3 run_started {}
            11 t3 context_compacted {"pre_tokens":1000,"trigger":"manual"}
            12 t3 run_completed {"result":""}
        "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn approvals_todos_and_sub_agents() {
        let input = [
            INIT,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"init_1","response":{"commands":[{"name":"compact"}]}}}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"tu_todo","name":"TodoWrite","input":{"todos":[{"content":"Explore","status":"completed","activeForm":"Exploring"},{"content":"Fix","status":"in_progress","activeForm":"Fixing"},{"content":"Test","status":"pending","activeForm":"Testing"}]}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_todo","content":"Todos have been modified successfully"}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#,
            r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"tool_use","id":"tu_task","name":"Task","input":{"prompt":"find files","subagent_type":"Explore"}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"find files"}]},"parent_tool_use_id":"tu_task","session_id":"sess-1"}"#,
            r#"{"type":"assistant","message":{"id":"msg_3","role":"assistant","content":[{"type":"tool_use","id":"tu_rm","name":"Bash","input":{"command":"rm x"}}]},"parent_tool_use_id":"tu_task","session_id":"sess-1"}"#,
            r#"{"type":"control_request","request_id":"req_1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"rm x"},"tool_use_id":"tu_rm","permission_suggestions":[]}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"behavior":"deny","message":"Denied by user"}}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_rm","content":"Denied by user","is_error":true}]},"parent_tool_use_id":"tu_task","session_id":"sess-1","tool_use_result":"Error: Denied by user"}"#,
            r#"{"type":"control_request","request_id":"req_2","request":{"subtype":"can_use_tool","tool_name":"Read","input":{"file_path":"y"}}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_2","response":{"behavior":"allow","updatedInput":{"file_path":"y"}}}}"#,
            r#"{"type":"control_request","request_id":"req_3","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"z"},"tool_use_id":"tu_w"}}"#,
            r#"{"type":"control_cancel_request","request_id":"req_3"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_task","content":[{"type":"text","text":"Found 2 files."}]}]},"parent_tool_use_id":null,"session_id":"sess-1","tool_use_result":{"status":"completed","totalDurationMs":900}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"sess-1","permission_denials":[{"tool_name":"Bash","tool_use_id":"tu_rm","tool_input":{"command":"rm x"}}]}"#,
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 tool_call_started tool_name="TodoWrite" tool_call_id="tu_todo" tool_input={"todos":[{"activeForm":"Exploring","content":"Explore","sta…
                4 t1 todo_updated tool_call_id="tu_todo" items=[3 items]
                5 t1 tool_call_completed tool_name="TodoWrite" tool_call_id="tu_todo" tool_input={"todos":[{"activeForm":"Exploring","content":"Explore","sta… tool_output="Todos have been modified successfully"
                6 t1 tool_call_started tool_name="Task" tool_call_id="tu_task" tool_input={"prompt":"find files","subagent_type":"Explore"}
                7 t1 message_sent parent_tool_use_id="tu_task" role="user" content="find files"
                8 t1 tool_call_started tool_name="Bash" tool_call_id="tu_rm" parent_tool_use_id="tu_task" tool_input={"command":"rm x"}
                9 t1 tool_approval_requested tool_name="Bash" tool_call_id="tu_rm" parent_tool_use_id="tu_task" tool_input={"command":"rm x"} request_id="req_1"
                10 t1 tool_approval_denied tool_call_id="tu_rm" request_id="req_1"
                11 t1 tool_call_failed tool_name="Bash" tool_call_id="tu_rm" parent_tool_use_id="tu_task" tool_input={"command":"rm x"} error="Denied by user"
                12 t1 tool_approval_requested tool_name="Read" tool_input={"file_path":"y"} request_id="req_2"
                13 t1 tool_approval_granted request_id="req_2"
                14 t1 tool_approval_requested tool_name="Write" tool_call_id="tu_w" tool_input={"file_path":"z"} request_id="req_3"
                15 t1 tool_approval_denied tool_call_id="tu_w" reason="cancelled" request_id="req_3"
                16 t1 tool_call_completed tool_name="Task" tool_call_id="tu_task" tool_input={"prompt":"find files","subagent_type":"Explore"} tool_output="Found 2 files."
                17 t1 run_completed
            "#]],
        );
        check_data(
            &input,
            expect![[r#"
            1 -- session_started {"cwd":"/w","model":"claude-opus-4-8","permission_mode":"default","provider_session_id":"sess-1","slash_commands":["compact"],"tools":["Bash","Read","TodoWrite","Task"],"version":"2.1.197"}
            2 t1 run_started {}
            3 t1 tool_call_started {"tool_call_id":"tu_todo","tool_input":{"todos":[{"activeForm":"Exploring","content":"Explore","status":"completed"},{"activeForm":"Fixing","content":"Fix","status":"in_progress"},{"activeForm":"Testing","content":"Test","status":"pending"}]},"tool_name":"TodoWrite"}
            4 t1 todo_updated {"items":[{"status":"completed","text":"Explore"},{"status":"in_progress","text":"Fix"},{"status":"pending","text":"Test"}],"tool_call_id":"tu_todo"}
            5 t1 tool_call_completed {"tool_call_id":"tu_todo","tool_input":{"todos":[{"activeForm":"Exploring","content":"Explore","status":"completed"},{"activeForm":"Fixing","content":"Fix","status":"in_progress"},{"activeForm":"Testing","content":"Test","status":"pending"}]},"tool_name":"TodoWrite","tool_output":"Todos have been modified successfully"}
            6 t1 tool_call_started {"tool_call_id":"tu_task","tool_input":{"prompt":"find files","subagent_type":"Explore"},"tool_name":"Task"}
            7 t1 message_sent {"content":"find files","parent_tool_use_id":"tu_task","role":"user"}
            8 t1 tool_call_started {"parent_tool_use_id":"tu_task","tool_call_id":"tu_rm","tool_input":{"command":"rm x"},"tool_name":"Bash"}
            9 t1 tool_approval_requested {"parent_tool_use_id":"tu_task","permission_suggestions":[],"request_id":"req_1","tool_call_id":"tu_rm","tool_input":{"command":"rm x"},"tool_name":"Bash"}
            10 t1 tool_approval_denied {"message":"Denied by user","request_id":"req_1","tool_call_id":"tu_rm"}
            11 t1 tool_call_failed {"details":{"tool_use_result":"Error: Denied by user"},"error":"Denied by user","parent_tool_use_id":"tu_task","tool_call_id":"tu_rm","tool_input":{"command":"rm x"},"tool_name":"Bash"}
            12 t1 tool_approval_requested {"request_id":"req_2","tool_input":{"file_path":"y"},"tool_name":"Read"}
            13 t1 tool_approval_granted {"request_id":"req_2","updated_input":{"file_path":"y"}}
            14 t1 tool_approval_requested {"request_id":"req_3","tool_call_id":"tu_w","tool_input":{"file_path":"z"},"tool_name":"Write"}
            15 t1 tool_approval_denied {"reason":"cancelled","request_id":"req_3","tool_call_id":"tu_w"}
            16 t1 tool_call_completed {"details":{"tool_use_result":{"status":"completed","totalDurationMs":900}},"tool_call_id":"tu_task","tool_input":{"prompt":"find files","subagent_type":"Explore"},"tool_name":"Task","tool_output":"Found 2 files."}
            17 t1 run_completed {"permission_denials":[{"tool_input":{"command":"rm x"},"tool_name":"Bash","tool_use_id":"tu_rm"}],"result":"ok"}
        "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn parallel_sub_agents_stream_in_their_own_lanes() {
        let ev = |lane: &str, e: &str| {
            format!(
                r#"{{"type":"stream_event","event":{e},"session_id":"sess-1","parent_tool_use_id":{lane}}}"#
            )
        };
        let line = |lane: &str, id: &str, text: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"{id}","role":"assistant","content":[{{"type":"text","text":"{text}"}}]}},"parent_tool_use_id":{lane},"session_id":"sess-1"}}"#
            )
        };
        let (a, b) = (r#""tu_a""#, r#""tu_b""#);
        let input = [
            INIT.to_owned(),
            r#"{"type":"assistant","message":{"id":"m0","role":"assistant","content":[{"type":"tool_use","id":"tu_a","name":"Task","input":{"prompt":"A"}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            r#"{"type":"assistant","message":{"id":"m0","role":"assistant","content":[{"type":"tool_use","id":"tu_b","name":"Task","input":{"prompt":"B"}}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
            ev(a, r#"{"type":"message_start","message":{"id":"a1"}}"#),
            ev(b, r#"{"type":"message_start","message":{"id":"b1"}}"#),
            ev(a, r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"A says"}}"#),
            ev(b, r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"B says"}}"#),
            line(b, "b1", "B says"),
            line(a, "a1", "A says"),
            ev(a, r#"{"type":"message_stop"}"#),
            ev(b, r#"{"type":"message_stop"}"#),
            // Unstreamed lines of two lanes interleaved: a2 is completed when its second
            // line arrives, and emitted again whole.
            line(a, "a2", "part 1"),
            line(b, "b2", "B done"),
            line(a, "a2", "part 2"),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_a","content":"A done"}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#.into(),
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 -- session_started model="claude-opus-4-8"
                2 t1 run_started
                3 t1 tool_call_started tool_name="Task" tool_call_id="tu_a" tool_input={"prompt":"A"}
                4 t1 tool_call_started tool_name="Task" tool_call_id="tu_b" tool_input={"prompt":"B"}
                5 t1 message_streamed parent_tool_use_id="tu_a" delta="A says"
                6 t1 message_streamed parent_tool_use_id="tu_b" delta="B says"
                7 t1 message_received parent_tool_use_id="tu_a" role="assistant" content="A says"
                8 t1 message_received parent_tool_use_id="tu_b" role="assistant" content="B says"
                9 t1 message_received parent_tool_use_id="tu_a" role="assistant" content="part 1"
                10 t1 message_received parent_tool_use_id="tu_b" role="assistant" content="B done"
                11 t1 message_received parent_tool_use_id="tu_a" role="assistant" content="part 1\n\npart 2"
                12 t1 tool_call_completed tool_name="Task" tool_call_id="tu_a" tool_input={"prompt":"A"} tool_output="A done"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_end_of_input_closes_messages_but_not_the_turn() {
        let input = [
            INIT,
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"thinking","thinking":"ok"}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#,
            r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Half"}]},"parent_tool_use_id":null,"session_id":"sess-1"}"#,
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
              1 -- session_started model="claude-opus-4-8"
              2 t1 run_started
              3 t1 reasoning_received content="ok"
              4 t1 message_received role="assistant" content="Half"
        "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn lines_that_carry_nothing_and_lines_that_are_unknown() {
        let input = [
            r#"{"type":"system","subtype":"hook_response","hook_name":"SessionStart:startup","stdout":"","exit_code":0}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed"}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"4","num_turns":1,"usage":{"input_tokens":10,"output_tokens":25}}"#,
            r#"{"type":"system","subtype":"teleport"}"#,
            r#"{"type":"system"}"#,
            r#"{"type":"assistant"}"#,
            r#"{"type":"stream_event","event":{"type":"message_explode"}}"#,
            r#"{"type":"mystery"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"x"}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash"}]}}"#,
        ]
        .join("\n");
        check(
            Format::Claude,
            &input,
            expect![[r#"
                1 t1 run_started
                2 t1 token_usage_updated input_tokens=10 output_tokens=25
                3 t1 run_completed
                4 t2 run_started
                ! line 4: unknown_type: unknown system subtype "teleport"
                ! line 5: missing_field: missing field `subtype`
                ! line 6: missing_field: missing field `message`
                ! line 7: unknown_type: unknown stream_event "message_explode"
                ! line 8: unknown_type: unknown type "mystery"
                ! line 9: missing_field: missing field `tool_use_id`
                ! line 10: missing_field: missing field `tool_use.id`
            "#]],
        );
    }
}
