//! Decoder for OpenCode: `opencode run --format json` lines, `opencode serve` `/event`
//! payloads, and `{info, parts}` message-history records.
//!
//! The three shapes are told apart per record: `properties` → a serve event, `info` with
//! `parts` → a history record, anything else → a `run` line. Only the first session seen is
//! followed (a root session, or the parent of a child seen first); records of other
//! sessions (sub-agent sessions of the `task` tool, other clients) are ignored.
//!
//! **`run --format json`** (`{type, timestamp (ms, used as the event time), sessionID,
//! part}`): the first line gives `session_started {provider_session_id}`.
//! * `step_start` opens the run at the first step; a run spans steps until a final one.
//! * `text` → `message_received`, `reasoning` → `reasoning_received` (whole parts only; the
//!   part id is the `message_id`).
//! * `tool_use` (state `completed` / `error`) → `tool_call_started` then
//!   `tool_call_completed {tool_output: state.output}` / `tool_call_failed {error}`.
//! * `step_finish` → `token_usage_updated` (run-cumulative sums of `tokens.input`, `output`,
//!   `reasoning`, `cache.read`, `cache.write` and `cost` → `cost_usd`: the last one before
//!   the terminal is the turn's usage), then `run_completed {stop_reason}` when the step is
//!   final. `reason: "tool-calls"` (or `"unknown"`, as OpenCode's own loop reads it) continues
//!   the run, and so does `"error"` (the `error` line that follows fails it). **No `reason`** (older CLIs; takopi's `no_reason` capture): the
//!   step is final when it called no tool, as the agent loop only continues after tool
//!   calls.
//! * `error {error: {name, data: {message, statusCode, …}}}` → `run_failed` with
//!   `provider_error.kind` = the snake-cased `name` (`APIError` → `api_error`; an `APIError`
//!   with status 429 → `rate_limit`, 401/403 → `authentication_failed`) and the name, status
//!   and data under `details`; `MessageAbortedError` → `run_cancelled`. With no run open it
//!   is an `error_occurred`.
//! * `done` (newer CLIs, when the session goes idle) → `run_completed` if a run is still open.
//!
//! **`serve` `/event`** (`{type, properties}`; 1.1.x and 1.18 shapes):
//! * `session.created` / `session.updated` → `session_started {provider_session_id, version,
//!   cwd: directory, title}`, once.
//! * `session.status` `busy` opens a run; `idle` (and `session.idle`) → `run_completed
//!   {stop_reason: the last assistant finish}`; `retry` → `error_occurred` (warning).
//! * `session.error` → `run_failed` (or `run_cancelled` for an abort, or `error_occurred`
//!   when no run is open), as for `run` errors.
//! * `message.updated`: a `user` message is remembered (its text part is the prompt); an
//!   `assistant` message announces its model (`model_changed` when it changes) and, once
//!   `time.completed` is set, adds its `tokens`/`cost` to the run's usage
//!   (`token_usage_updated`, run-cumulative, once per message).
//! * `message.part.updated`, by `part.type`: a user `text` part → `message_sent` (the first
//!   non-synthetic one per message; it opens the run, since it precedes `busy`); assistant
//!   `text` / `reasoning` → `message_streamed` / `reasoning_streamed` for the event's
//!   `delta` (1.1.x), and `message_received` / `reasoning_received` with the whole text once
//!   `part.time.end` is set; `tool` parts by `state.status`: `pending` → `tool_call_started`,
//!   `running` → `tool_call_updated {status, tool_input, title}`, `completed` / `error` →
//!   `tool_call_completed` / `tool_call_failed` (each transition once per `callID`; a call
//!   first seen late gets its `tool_call_started` first); `step-start` opens the run; other
//!   parts (`step-finish`, whose usage `message.updated` also carries, `file`, `patch`, …)
//!   are ignored.
//! * `message.part.delta {partID, field: "text", delta}` (1.18) → `message_streamed` or
//!   `reasoning_streamed`, after the part's type.
//! * `permission.updated` (1.1.x) / `permission.asked` (1.18) → `tool_approval_requested`;
//!   `permission.replied` → `tool_approval_granted` (`once`, `always`) or `_denied`.
//! * `todo.updated` → `todo_updated` (`cancelled` items count as `completed`, flagged).
//! * `session.compacted` → `context_compacted`.
//! * `server.*`, `session.diff`, `file.*`, `lsp.*`, `plugin.*`, `catalog.*`, … → ignored.
//!
//! A text or reasoning part still streaming when its run ends, or at the end of input, is
//! closed with `{content: "", discarded: true}`: OpenCode says explicitly when a part ends.
//! What OpenCode still sends about the assistant messages of a run that ended (after an
//! abort: the part's final text, the message's usage) is ignored, so that it opens no run.
//! Tool calls not finished when their run ends get `tool_call_cancelled`.
//!
//! **History** (`GET /session/:id/message`: `{info, parts}` per message) hydrates finished
//! messages with the same events: a user message opens a run (`message_sent`); an assistant
//! message gives its parts' events, its usage, and, being finished, ends the run when its
//! `finish` is final (as for `step_finish` above; `info.error` fails or cancels it). Event
//! times are the messages' `time.created` / `time.completed`.

use std::collections::{HashMap, HashSet, VecDeque};

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::codex::Fields;
use super::fast::{self, present, Obj, SlotKeys, Slots, Str};
use super::turn::cancel_tool_call;
use super::{text_data, Decoder, Out};
use crate::core::event::{CancelReason, EventType};
use crate::core::provider_error::{add_details, ProviderError};

/// How many user message ids are remembered to tell user parts from assistant ones.
const USER_MESSAGES: usize = 32;

#[derive(Default)]
pub(crate) struct Opencode {
    /// The session followed.
    main: Option<String>,
    session_started: bool,
    model: Option<String>,
    /// The latest user message ids (serve events and history).
    user_messages: VecDeque<String>,
    run: Option<Run>,
    /// Assistant messages of runs that ended (the latest few): OpenCode still sends their
    /// final parts and usage after an abort, which must not open a run of their own.
    ended_messages: VecDeque<String>,
}

#[derive(Default)]
struct Run {
    id: String,
    usage: Usage,
    /// Assistant messages whose tokens are in `usage`.
    counted: HashSet<String>,
    /// `run` lines: the current step called a tool.
    step_tool: bool,
    last_finish: Option<String>,
    /// Text and reasoning parts, by id (serve events).
    parts: HashMap<String, PartKind>,
    /// Parts streamed and not finished, in order.
    streaming: Vec<(String, PartKind)>,
    /// Parts whose whole text was emitted.
    finished: HashSet<String>,
    tools: HashMap<String, ToolSeen>,
    /// Assistant messages of this run.
    messages: HashSet<String>,
    /// User messages already sent as `message_sent`.
    sent: HashSet<String>,
}

#[derive(Default)]
struct Usage {
    input: u64,
    output: u64,
    reasoning: u64,
    cache_read: u64,
    cache_write: u64,
    cost: Option<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PartKind {
    Text,
    Reasoning,
}

struct ToolSeen {
    status: String,
    done: bool,
    name: Value,
    input: Value,
    /// Order of first sight, to cancel unfinished calls in order.
    order: usize,
}

impl Decoder for Opencode {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let Some(obj) = record.as_object() else {
            return out.unknown("record");
        };
        if let Some(props) = obj.get("properties") {
            let Some(ty) = obj.get("type").and_then(Value::as_str) else {
                return out.missing("type");
            };
            let empty = Map::new();
            let props = props.as_object().unwrap_or(&empty);
            return self.event(ty, props, out);
        }
        if let (Some(info), Some(parts)) = (obj.get("info"), obj.get("parts")) {
            return self.history(info, parts, out);
        }
        let Some(ty) = obj.get("type").and_then(Value::as_str) else {
            return out.missing("type");
        };
        self.run_line(ty, obj, out);
    }

    fn record_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        // Only serve events (dotted types; `run` lines are read as a `Value`): the ignored
        // types, a session's updates after its `session_started`, `message.updated`, the
        // parts and their deltas, and a session's status.
        if fast::leading_type(text).is_some_and(|ty| !ty.contains('.')) {
            return false;
        }
        let Ok(line) = serde_json::from_str::<ServeLine<'_>>(text) else {
            return false;
        };
        let Some(props) = &line.properties else {
            return false;
        };
        let Props::Object(props) = props else {
            if ignored_event(&line.ty) {
                out.ignore();
                return true;
            }
            return false;
        };
        let sid = props.session.as_deref();
        match &*line.ty {
            "session.created" | "session.updated" if self.session_started => {
                let Some(info) = &props.info else {
                    return false;
                };
                self.accept(info.0.id.as_deref(), info.0.parent.as_deref());
                out.ignore();
            }
            "message.updated" => {
                let Some(info) = &props.info else {
                    return false;
                };
                let info = &info.0;
                let sid = info.session.as_deref().or(sid);
                if !self.accept(sid, None) {
                    out.ignore();
                    return true;
                }
                self.message_info(info.message(), out);
            }
            "message.part.updated" => {
                let Some(part) = props.part.as_deref().filter(|p| p.object) else {
                    return false;
                };
                self.part_updated(sid, part, props.delta.as_deref(), out);
            }
            "message.part.delta" => self.part_delta(sid, props.part_delta(), out),
            "session.status" => self.session_status(sid, props.status.as_deref(), out),
            "session.idle" => self.session_idle(sid, out),
            ty if ignored_event(ty) => out.ignore(),
            _ => return false,
        }
        true
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.discard_streams(out);
    }
}

/// A serve event as the fast path reads it: its type, and of its `properties` what the
/// types it handles read ([`PropsRead`]).
#[derive(Deserialize)]
struct ServeLine<'a> {
    #[serde(rename = "type", borrow)]
    ty: Str<'a>,
    #[serde(default, borrow, deserialize_with = "props")]
    properties: Option<Props<'a>>,
}

enum Props<'a> {
    /// Boxed: serde moves what it reads several times on its way out.
    Object(Box<PropsRead<'a>>),
    /// Anything but an object.
    Other,
}

/// The fields of `properties` that the types the fast path handles read, any of them
/// absent: the session id, a `session.*` or `message.updated` event's `info`, a part (and
/// the `delta` of OpenCode 1.x), a `message.part.delta`'s fields, a session's `status`.
#[derive(Deserialize)]
struct PropsRead<'a> {
    #[serde(default, borrow, rename = "sessionID")]
    session: Option<Str<'a>>,
    #[serde(default, borrow)]
    info: Option<Box<Obj<InfoRead<'a>>>>,
    #[serde(default)]
    part: Option<Box<PartRead>>,
    #[serde(default, borrow)]
    delta: Option<Str<'a>>,
    #[serde(default, borrow, rename = "messageID")]
    message: Option<Str<'a>>,
    #[serde(default, borrow, rename = "partID")]
    part_id: Option<Str<'a>>,
    #[serde(default, borrow)]
    field: Option<Str<'a>>,
    #[serde(default)]
    status: Option<Box<StatusRead>>,
}

impl PropsRead<'_> {
    fn part_delta(&self) -> PartDelta<'_> {
        PartDelta {
            message: self.message.as_deref().unwrap_or(""),
            field: self.field.as_deref(),
            delta: self.delta.as_deref().unwrap_or(""),
            id: self.part_id.as_deref(),
        }
    }
}

/// What [`Opencode::part_delta`] reads of a `message.part.delta`, from a `Value` or typed.
struct PartDelta<'a> {
    /// `messageID` when a string, else empty.
    message: &'a str,
    field: Option<&'a str>,
    /// `delta` when a string, else empty.
    delta: &'a str,
    /// `partID`.
    id: Option<&'a str>,
}

impl<'a> PartDelta<'a> {
    fn from_map(props: &'a Map<String, Value>) -> PartDelta<'a> {
        let str = |key| props.get(key).and_then(Value::as_str);
        PartDelta {
            message: str("messageID").unwrap_or(""),
            field: str("field"),
            delta: str("delta").unwrap_or(""),
            id: str("partID"),
        }
    }
}

/// A part read typed for the fields [`Opencode::part`] and what it calls read
/// ([`fast::Slots`]); a test build panics when they read another.
type PartRead = Slots<PartKeys, 11>;

struct PartKeys;

impl SlotKeys for PartKeys {
    fn slot(key: &str) -> Option<usize> {
        Some(match key {
            "type" => 0,
            "messageID" => 1,
            "sessionID" => 2,
            "id" => 3,
            "time" => 4,
            "text" => 5,
            "synthetic" => 6,
            "reason" => 7,
            "callID" => 8,
            "tool" => 9,
            "state" => 10,
            _ => return None,
        })
    }
}

/// A `session.status`'s `status` read typed ([`fast::Slots`]): anything but an object has no
/// fields, as `Value::get` finds none in it.
type StatusRead = Slots<StatusKeys, 3>;

struct StatusKeys;

impl SlotKeys for StatusKeys {
    fn slot(key: &str) -> Option<usize> {
        ["type", "message", "attempt"]
            .iter()
            .position(|k| *k == key)
    }
}

/// The fields of an `info` object that the fast path reads: a session's ids, or what
/// [`MessageInfo`] takes of a message (`time` only for whether it has `completed`).
#[derive(Deserialize)]
struct InfoRead<'a> {
    #[serde(default, borrow)]
    id: Option<Str<'a>>,
    #[serde(default, borrow, rename = "parentID")]
    parent: Option<Str<'a>>,
    #[serde(default, borrow, rename = "sessionID")]
    session: Option<Str<'a>>,
    #[serde(default, borrow)]
    role: Option<Str<'a>>,
    #[serde(default, borrow, rename = "modelID")]
    model: Option<Str<'a>>,
    #[serde(default, rename = "providerID", deserialize_with = "present")]
    provider: Option<Value>,
    #[serde(default)]
    time: Option<Obj<TimeRead>>,
    #[serde(default, borrow)]
    finish: Option<Str<'a>>,
    #[serde(default, deserialize_with = "present")]
    tokens: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    cost: Option<Value>,
}

#[derive(Deserialize)]
struct TimeRead {
    #[serde(default, deserialize_with = "present")]
    completed: Option<IgnoredAny>,
}

impl InfoRead<'_> {
    fn message(&self) -> MessageInfo<'_> {
        MessageInfo {
            id: self.id.as_deref().unwrap_or(""),
            role: self.role.as_deref(),
            model: self.model.as_deref(),
            provider: self.provider.as_ref(),
            completed: self.time.as_ref().is_some_and(|t| t.0.completed.is_some()),
            finish: self.finish.as_deref(),
            tokens: self.tokens.as_ref(),
            cost: self.cost.as_ref(),
        }
    }
}

/// What [`Opencode::message_info`] reads of a `message.updated` info, from a `Value` or typed.
struct MessageInfo<'a> {
    /// `id` when a string, else empty.
    id: &'a str,
    role: Option<&'a str>,
    /// `modelID` when a string.
    model: Option<&'a str>,
    /// `providerID`, any JSON.
    provider: Option<&'a Value>,
    /// Whether `time` is an object with a `completed` key.
    completed: bool,
    finish: Option<&'a str>,
    tokens: Option<&'a Value>,
    cost: Option<&'a Value>,
}

impl<'a> MessageInfo<'a> {
    fn from_value(info: &'a Value) -> MessageInfo<'a> {
        MessageInfo {
            id: info.get("id").and_then(Value::as_str).unwrap_or(""),
            role: info.get("role").and_then(Value::as_str),
            model: info.get("modelID").and_then(Value::as_str),
            provider: info.get("providerID"),
            completed: info.get("time").and_then(|t| t.get("completed")).is_some(),
            finish: info.get("finish").and_then(Value::as_str),
            tokens: info.get("tokens"),
            cost: info.get("cost"),
        }
    }
}

/// `properties` when it is an object that reads as [`PropsRead`]; anything else (present,
/// even `null`) is `Other`.
fn props<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Props<'de>>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Props<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("properties")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Props<'de>, A::Error> {
            let props = PropsRead::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            Ok(Props::Object(Box::new(props)))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Props<'de>, A::Error> {
            IgnoredAny::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
            Ok(Props::Other)
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Props<'de>, E> {
            Ok(Props::Other)
        }
    }
    d.deserialize_any(V).map(Some)
}

/// The serve event types that carry nothing for the canonical model.
fn ignored_event(ty: &str) -> bool {
    matches!(
        ty,
        "server.connected"
            | "server.heartbeat"
            | "server.instance.disposed"
            | "session.diff"
            | "session.deleted"
            | "message.removed"
            | "message.part.removed"
            | "command.executed"
            | "question.asked"
            | "question.replied"
            | "question.rejected"
    ) || [
        "file.",
        "lsp.",
        "installation.",
        "ide.",
        "vcs.",
        "project.",
        "pty.",
        "tui.",
        "mcp.",
        // 1.18 announces its plugins and catalogs while it boots.
        "plugin.",
        "catalog.",
        "integration.",
        "reference.",
    ]
    .iter()
    .any(|p| ty.starts_with(p))
}

// `opencode run --format json` lines.
impl Opencode {
    fn run_line(&mut self, ty: &str, obj: &Map<String, Value>, out: &mut Out<'_>) {
        out.use_timestamp(obj.get("timestamp"));
        let session = obj.get("sessionID").and_then(Value::as_str);
        if !self.accept(session, None) {
            return out.ignore();
        }
        if let Some(s) = session {
            self.start_session(json!({ "provider_session_id": s }), out);
        }
        let part = obj.get("part");
        let needs_part = matches!(
            ty,
            "step_start" | "text" | "reasoning" | "tool_use" | "step_finish"
        );
        if needs_part && !part.is_some_and(Value::is_object) {
            return out.missing("part");
        }
        let part = part.unwrap_or(&Value::Null);
        match ty {
            "step_start" => {
                let opened = self.run.is_none();
                self.ensure_run(out);
                self.with_run(|r| r.step_tool = false);
                if !opened {
                    out.ignore();
                }
            }
            "text" => self.whole_part(PartKind::Text, part, out),
            "reasoning" => self.whole_part(PartKind::Reasoning, part, out),
            "tool_use" => {
                let run = self.ensure_run(out);
                self.with_run(|r| r.step_tool = true);
                self.tool_part(&run, part, out);
            }
            "step_finish" => {
                let run = self.ensure_run(out);
                let reason = part.get("reason").and_then(Value::as_str);
                let id = part.get("id").and_then(Value::as_str).unwrap_or("");
                self.add_usage(&run, id, part.get("tokens"), part.get("cost"), out);
                let step_tool = self.run.as_ref().is_some_and(|r| r.step_tool);
                let last = reason.map(str::to_owned);
                self.with_run(|r| r.last_finish = last);
                if is_final(reason, step_tool) {
                    self.end_run(EventType::RunCompleted, json!({"stop_reason": reason}), out);
                }
            }
            "error" => {
                let error = obj.get("error").unwrap_or(&Value::Null);
                self.fail(error, out);
            }
            "done" => {
                if self.run.is_some() {
                    let finish = self.run.as_ref().and_then(|r| r.last_finish.clone());
                    self.end_run(EventType::RunCompleted, json!({"stop_reason": finish}), out);
                } else {
                    out.ignore();
                }
            }
            other => out.unknown(format_args!("type {other:?}")),
        }
    }
}

// `opencode serve` `/event` payloads.
impl Opencode {
    fn event(&mut self, ty: &str, props: &Map<String, Value>, out: &mut Out<'_>) {
        let sid = props.get("sessionID").and_then(Value::as_str);
        match ty {
            "session.created" | "session.updated" => {
                let Some(info) = props.get("info") else {
                    return out.missing("properties.info");
                };
                let id = info.get("id").and_then(Value::as_str);
                let parent = info.get("parentID").and_then(Value::as_str);
                if !self.accept(id, parent) || self.session_started {
                    return out.ignore();
                }
                let mut data = json!({ "provider_session_id": id });
                for (from, to) in [
                    ("version", "version"),
                    ("directory", "cwd"),
                    ("title", "title"),
                ] {
                    if let Some(v) = info.get(from) {
                        data[to] = v.clone();
                    }
                }
                self.start_session(data, out);
            }
            "session.status" => self.session_status(sid, props.get("status"), out),
            "session.idle" => self.session_idle(sid, out),
            "session.error" => {
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                let error = props.get("error").unwrap_or(&Value::Null);
                self.fail(error, out);
            }
            "session.compacted" => {
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                let run = self.run_id();
                out.emit(EventType::ContextCompacted, run.as_deref(), json!({}));
            }
            "message.updated" => {
                let Some(info) = props.get("info") else {
                    return out.missing("properties.info");
                };
                let sid = info.get("sessionID").and_then(Value::as_str).or(sid);
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                self.message_info(MessageInfo::from_value(info), out);
            }
            "message.part.updated" => {
                let Some(part) = props.get("part").filter(|p| p.is_object()) else {
                    return out.missing("properties.part");
                };
                let delta = props.get("delta").and_then(Value::as_str);
                self.part_updated(sid, part, delta, out);
            }
            "message.part.delta" => self.part_delta(sid, PartDelta::from_map(props), out),
            "permission.updated" | "permission.asked" => {
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                self.permission(props, out);
            }
            "permission.replied" => {
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                let id = props
                    .get("requestID")
                    .or_else(|| props.get("permissionID"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let reply = props
                    .get("reply")
                    .or_else(|| props.get("response"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let event = if matches!(reply, "once" | "always" | "allow") {
                    EventType::ToolApprovalGranted
                } else {
                    EventType::ToolApprovalDenied
                };
                let run = self.run_id();
                let correlation = id.as_str().map(str::to_owned);
                out.emit_full(
                    event,
                    run.as_deref(),
                    json!({"request_id": id, "reply": reply}),
                    correlation.as_deref(),
                    Map::new(),
                );
            }
            "todo.updated" => {
                if !self.accept(sid, None) {
                    return out.ignore();
                }
                let todos = props.get("todos").and_then(Value::as_array);
                let items: Vec<Value> = todos
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        let status = t.get("status").and_then(Value::as_str).unwrap_or("pending");
                        let mut item = json!({
                            "text": t.get("content").and_then(Value::as_str).unwrap_or(""),
                            "status": if status == "cancelled" { "completed" } else { status },
                        });
                        if status == "cancelled" {
                            item["cancelled"] = json!(true);
                        }
                        for key in ["priority", "id"] {
                            if let Some(v) = t.get(key) {
                                item[key] = v.clone();
                            }
                        }
                        item
                    })
                    .collect();
                let run = self.run_id();
                out.emit(
                    EventType::TodoUpdated,
                    run.as_deref(),
                    json!({"items": items}),
                );
            }
            t if ignored_event(t) => out.ignore(),
            other => out.unknown(format_args!("event type {other:?}")),
        }
    }

    /// `session.status`: `busy` opens a run, `idle` completes it, `retry` is a warning.
    fn session_status<S: Fields + ?Sized>(
        &mut self,
        sid: Option<&str>,
        status: Option<&S>,
        out: &mut Out<'_>,
    ) {
        if !self.accept(sid, None) {
            return out.ignore();
        }
        match status.and_then(|s| s.str("type")) {
            Some("busy") if self.run.is_none() => {
                self.ensure_run(out);
            }
            Some("idle") if self.run.is_some() => self.complete(out),
            Some("retry") => {
                let message = status.and_then(|s| s.str("message")).unwrap_or("retrying");
                let mut data =
                    ProviderError::from_provider(out.provider(), "retry", None, message).to_data();
                data.insert("severity".into(), json!("warning"));
                if let Some(a) = status.and_then(|s| s.get("attempt")) {
                    data.insert("attempt".into(), a.clone());
                }
                let run = self.run_id();
                out.emit(
                    EventType::ErrorOccurred,
                    run.as_deref(),
                    Value::Object(data),
                );
            }
            Some("busy" | "idle") => out.ignore(),
            Some(other) => out.unknown(format_args!("session status {other:?}")),
            None => out.missing("properties.status.type"),
        }
    }

    fn session_idle(&mut self, sid: Option<&str>, out: &mut Out<'_>) {
        if self.accept(sid, None) && self.run.is_some() {
            self.complete(out);
        } else {
            out.ignore();
        }
    }

    /// `message.part.updated`, its part an object.
    fn part_updated<P: Fields + ?Sized>(
        &mut self,
        sid: Option<&str>,
        part: &P,
        delta: Option<&str>,
        out: &mut Out<'_>,
    ) {
        let sid = part.str("sessionID").or(sid);
        if !self.accept(sid, None) {
            return out.ignore();
        }
        self.part(part, delta, out);
    }

    /// `message.updated`: who wrote the message, its model, and its usage once completed.
    fn message_info(&mut self, info: MessageInfo<'_>, out: &mut Out<'_>) {
        let id = info.id;
        match info.role {
            Some("user") => {
                self.remember_user(id);
                out.ignore();
            }
            Some("assistant") => {
                if self.ended(id) {
                    return out.ignore();
                }
                self.with_run(|r| {
                    r.messages.insert(id.to_owned());
                });
                let mut emitted = self.announce_model(info.model, info.provider, out);
                if let (true, Some(run)) = (info.completed, self.run_id()) {
                    if let Some(finish) = info.finish {
                        let finish = finish.to_owned();
                        self.with_run(|r| r.last_finish = Some(finish));
                    }
                    emitted |= self.add_usage(&run, id, info.tokens, info.cost, out);
                }
                if !emitted {
                    out.ignore();
                }
            }
            _ => out.missing("info.role"),
        }
    }

    fn part<P: Fields + ?Sized>(&mut self, part: &P, delta: Option<&str>, out: &mut Out<'_>) {
        let ty = part.str("type").unwrap_or("");
        let message = part.str("messageID").unwrap_or("");
        if self.is_user(message) {
            return self.user_part(message, part, out);
        }
        if self.ended(message) {
            return out.ignore();
        }
        if !message.is_empty() && matches!(ty, "text" | "reasoning" | "tool" | "step-start") {
            self.ensure_run(out);
            self.with_run(|r| {
                r.messages.insert(message.to_owned());
            });
        }
        match ty {
            "text" | "reasoning" => {
                let kind = if ty == "text" {
                    PartKind::Text
                } else {
                    PartKind::Reasoning
                };
                let Some(id) = part.str("id") else {
                    return out.missing("part.id");
                };
                let run = self.ensure_run(out);
                self.with_run(|r| {
                    r.parts.insert(id.to_owned(), kind);
                });
                if let Some(delta) = delta.filter(|d| !d.is_empty()) {
                    self.stream(&run, id, kind, delta, out);
                }
                let ended = part.get("time").and_then(|t| t.get("end")).is_some();
                if ended {
                    self.finish_part(&run, id, kind, part, out);
                }
            }
            "tool" => {
                let run = self.ensure_run(out);
                self.tool_part(&run, part, out);
            }
            "step-start" => {
                if self.run.is_some() {
                    out.ignore();
                } else {
                    self.ensure_run(out);
                }
            }
            "step-finish" => {
                if let Some(reason) = part.str("reason") {
                    let reason = reason.to_owned();
                    self.with_run(|r| r.last_finish = Some(reason));
                }
                out.ignore();
            }
            _ => out.ignore(),
        }
    }

    /// A user message's part: its first real text part is the prompt.
    fn user_part<P: Fields + ?Sized>(&mut self, message: &str, part: &P, out: &mut Out<'_>) {
        if !self.user_prompt(message, part, out) {
            out.ignore();
        }
    }

    /// Emits `message_sent` for a user message's first real text part; false otherwise.
    fn user_prompt<P: Fields + ?Sized>(
        &mut self,
        message: &str,
        part: &P,
        out: &mut Out<'_>,
    ) -> bool {
        let text = part.str("text");
        let synthetic = part.get("synthetic").and_then(Value::as_bool) == Some(true);
        let fresh = !self.run.as_ref().is_some_and(|r| r.sent.contains(message));
        match text {
            Some(text) if part.str("type") == Some("text") && !synthetic && fresh => {
                let run = self.ensure_run(out);
                self.with_run(|r| {
                    r.sent.insert(message.to_owned());
                });
                let data = json!({"content": text, "message_id": message, "role": "user"});
                out.emit(EventType::MessageSent, Some(&run), data);
                true
            }
            _ => false,
        }
    }

    fn part_delta(&mut self, sid: Option<&str>, props: PartDelta<'_>, out: &mut Out<'_>) {
        if !self.accept(sid, None) {
            return out.ignore();
        }
        let PartDelta {
            message,
            field,
            delta,
            id,
        } = props;
        let Some(id) = id else {
            return out.missing("properties.partID");
        };
        if field != Some("text") || delta.is_empty() || self.is_user(message) || self.ended(message)
        {
            return out.ignore();
        }
        let run = self.ensure_run(out);
        self.with_run(|r| {
            r.messages.insert(message.to_owned());
        });
        let kind = self
            .run
            .as_ref()
            .and_then(|r| r.parts.get(id).copied())
            .unwrap_or(PartKind::Text);
        self.stream(&run, id, kind, delta, out);
    }

    fn permission(&mut self, props: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(id) = props.get("id").and_then(Value::as_str) else {
            return out.missing("properties.id");
        };
        let run = self.ensure_run(out);
        let call = props
            .get("callID")
            .or_else(|| props.get("tool").and_then(|t| t.get("callID")))
            .and_then(Value::as_str);
        let name = props
            .get("permission")
            .or_else(|| props.get("type"))
            .cloned()
            .unwrap_or(Value::Null);
        let mut data = json!({
            "request_id": id,
            "tool_name": name,
            "tool_input": props.get("metadata").cloned().unwrap_or_else(|| json!({})),
        });
        if let Some(call) = call {
            data["tool_call_id"] = json!(call);
        }
        for (from, to) in [
            ("title", "title"),
            ("message", "title"),
            ("pattern", "patterns"),
            ("patterns", "patterns"),
        ] {
            if let Some(v) = props.get(from) {
                data[to] = v.clone();
            }
        }
        out.emit_full(
            EventType::ToolApprovalRequested,
            Some(&run),
            data,
            Some(call.unwrap_or(id)),
            Map::new(),
        );
    }
}

// `{info, parts}` history records.
impl Opencode {
    fn history(&mut self, info: &Value, parts: &Value, out: &mut Out<'_>) {
        let session = info.get("sessionID").and_then(Value::as_str);
        if !self.accept(session, None) {
            return out.ignore();
        }
        let time = info.get("time");
        out.use_timestamp(time.and_then(|t| t.get("created")));
        if let Some(s) = session {
            self.start_session(json!({ "provider_session_id": s }), out);
        }
        let id = info.get("id").and_then(Value::as_str).unwrap_or("");
        let parts = parts.as_array().map(Vec::as_slice).unwrap_or_default();
        match info.get("role").and_then(Value::as_str) {
            Some("user") => {
                self.remember_user(id);
                self.ensure_run(out);
                for part in parts {
                    self.user_prompt(id, part, out);
                }
            }
            Some("assistant") => {
                let run = self.ensure_run(out);
                let model = info.get("modelID").and_then(Value::as_str);
                self.announce_model(model, info.get("providerID"), out);
                let mut called_tool = false;
                for part in parts {
                    match part.get("type").and_then(Value::as_str) {
                        Some("text") => self.whole_part(PartKind::Text, part, out),
                        Some("reasoning") => self.whole_part(PartKind::Reasoning, part, out),
                        Some("tool") => {
                            called_tool = true;
                            self.tool_part(&run, part, out);
                        }
                        _ => {}
                    }
                }
                let Some(completed) = time.and_then(|t| t.get("completed")) else {
                    return;
                };
                out.use_timestamp(Some(completed));
                self.add_usage(&run, id, info.get("tokens"), info.get("cost"), out);
                let finish = info.get("finish").and_then(Value::as_str);
                if let Some(error) = info.get("error").filter(|e| !e.is_null()) {
                    self.fail(error, out);
                } else if is_final(finish, called_tool) {
                    self.end_run(EventType::RunCompleted, json!({"stop_reason": finish}), out);
                }
            }
            _ => out.missing("info.role"),
        }
    }
}

// Shared by the three shapes.
impl Opencode {
    /// A finished text or reasoning part (`run` lines, history): its whole text.
    fn whole_part(&mut self, kind: PartKind, part: &Value, out: &mut Out<'_>) {
        let run = self.ensure_run(out);
        let id = part.get("id").and_then(Value::as_str).unwrap_or("");
        self.finish_part(&run, id, kind, part, out);
    }

    fn stream(&mut self, run: &str, id: &str, kind: PartKind, delta: &str, out: &mut Out<'_>) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        if r.finished.contains(id) {
            return out.ignore();
        }
        if !r.streaming.iter().any(|(p, _)| p == id) {
            r.streaming.push((id.to_owned(), kind));
        }
        let (event, role) = match kind {
            PartKind::Text => (EventType::MessageStreamed, Some("assistant")),
            PartKind::Reasoning => (EventType::ReasoningStreamed, None),
        };
        let data = text_data("delta", delta, id, None, role);
        out.emit_data(event, Some(run), data);
    }

    /// Emits the whole text of a part once; empty parts that never streamed are skipped.
    fn finish_part<P: Fields + ?Sized>(
        &mut self,
        run: &str,
        id: &str,
        kind: PartKind,
        part: &P,
        out: &mut Out<'_>,
    ) {
        let text = part.str("text").unwrap_or("");
        let Some(r) = self.run.as_mut() else {
            return;
        };
        let streamed = r.streaming.iter().position(|(p, _)| p == id);
        if let Some(i) = streamed {
            r.streaming.remove(i);
        }
        let first = id.is_empty() || r.finished.insert(id.to_owned());
        if !first || (text.is_empty() && streamed.is_none()) {
            return out.ignore();
        }
        let (event, role) = match kind {
            PartKind::Text => (EventType::MessageReceived, Some("assistant")),
            PartKind::Reasoning => (EventType::ReasoningReceived, None),
        };
        let data = text_data("content", text, id, None, role);
        out.emit_data(event, Some(run), data);
    }

    /// A `tool` part: each status transition once per call.
    fn tool_part<P: Fields + ?Sized>(&mut self, run: &str, part: &P, out: &mut Out<'_>) {
        let Some(call) = part
            .get("callID")
            .or_else(|| part.get("id"))
            .and_then(Value::as_str)
        else {
            return out.missing("part.callID");
        };
        let state = part.get("state").unwrap_or(&Value::Null);
        let status = state.get("status").and_then(Value::as_str).unwrap_or("");
        let name = part.get("tool").cloned().unwrap_or_else(|| json!("tool"));
        let input = state.get("input").cloned().unwrap_or_else(|| json!({}));
        let Some(r) = self.run.as_mut() else {
            return;
        };
        let seen = r.tools.get(call);
        if seen.is_some_and(|s| s.done || s.status == status) {
            return out.ignore();
        }
        let first = seen.is_none();
        let mut base = json!({"tool_call_id": call, "tool_name": name, "tool_input": input});
        if first {
            out.emit_full(
                EventType::ToolCallStarted,
                Some(run),
                base.clone(),
                Some(call),
                Map::new(),
            );
        }
        let done = matches!(status, "completed" | "error");
        let order = r.tools.get(call).map_or(r.tools.len(), |s| s.order);
        r.tools.insert(
            call.to_owned(),
            ToolSeen {
                status: status.to_owned(),
                done,
                name: name.clone(),
                input: input.clone(),
                order,
            },
        );
        if let Some(title) = state.get("title") {
            base["title"] = title.clone();
        }
        let (event, data) = match status {
            "pending" => return,
            "running" if first => return,
            "completed" => {
                base["tool_output"] = state.get("output").cloned().unwrap_or_else(|| json!(""));
                let meta = state.get("metadata");
                if let Some(exit) = meta.and_then(|m| m.get("exit").or_else(|| m.get("exitCode"))) {
                    base["exit_code"] = exit.clone();
                }
                (EventType::ToolCallCompleted, base)
            }
            "error" => {
                let error = match state.get("error") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => "tool call failed".to_owned(),
                };
                base["error"] = json!(error);
                (EventType::ToolCallFailed, base)
            }
            other => {
                let mut data = json!({"tool_call_id": call, "status": other, "tool_input": base["tool_input"]});
                if let Some(title) = state.get("title") {
                    data["title"] = title.clone();
                }
                (EventType::ToolCallUpdated, data)
            }
        };
        out.emit_full(event, Some(run), data, Some(call), Map::new());
    }

    /// Adds a step's or a message's tokens to the run and emits the run's total so far.
    /// Returns whether it emitted.
    fn add_usage(
        &mut self,
        run: &str,
        id: &str,
        tokens: Option<&Value>,
        cost: Option<&Value>,
        out: &mut Out<'_>,
    ) -> bool {
        let Some(tokens) = tokens.filter(|t| t.is_object()) else {
            return false;
        };
        let Some(r) = self.run.as_mut() else {
            return false;
        };
        if !id.is_empty() && !r.counted.insert(id.to_owned()) {
            return false;
        }
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let cache = tokens.get("cache");
        let u = &mut r.usage;
        u.input += n(tokens.get("input"));
        u.output += n(tokens.get("output"));
        u.reasoning += n(tokens.get("reasoning"));
        u.cache_read += n(cache.and_then(|c| c.get("read")));
        u.cache_write += n(cache.and_then(|c| c.get("write")));
        if let Some(c) = cost.and_then(Value::as_f64) {
            u.cost = Some(u.cost.unwrap_or(0.0) + c);
        }
        let mut data = json!({
            "input_tokens": u.input,
            "output_tokens": u.output,
            "reasoning_output_tokens": u.reasoning,
            "cache_read_input_tokens": u.cache_read,
            "cache_creation_input_tokens": u.cache_write,
        });
        if let Some(c) = u.cost {
            data["cost_usd"] = json!(c);
        }
        out.emit(EventType::TokenUsageUpdated, Some(run), data);
        true
    }

    /// An OpenCode error object (`{name, data: {message, statusCode, …}}`) ends the run.
    fn fail(&mut self, error: &Value, out: &mut Out<'_>) {
        let name = error
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("UnknownError");
        let data = error.get("data");
        let message = data
            .and_then(|d| d.get("message"))
            .or_else(|| error.get("message"))
            .and_then(Value::as_str)
            .unwrap_or(name);
        let status = data
            .and_then(|d| d.get("statusCode"))
            .and_then(Value::as_u64);
        if name == "MessageAbortedError" {
            if self.run.is_some() {
                let data = json!({
                    "reason": CancelReason::Interrupted.as_str(),
                    "error_message": message,
                    "details": {"error_name": name},
                });
                return self.end_run(EventType::RunCancelled, data, out);
            }
            return out.ignore();
        }
        let error = ProviderError::from_provider(out.provider(), name, status, message);
        let mut payload = error.to_data();
        let mut details = json!({"error_name": name});
        if let Some(s) = status {
            details["status_code"] = json!(s);
        }
        if let Some(d) = data {
            details["data"] = d.clone();
        }
        add_details(&mut payload, details);
        if self.run.is_some() {
            self.end_run(EventType::RunFailed, Value::Object(payload), out);
        } else {
            payload.insert("severity".into(), json!("error"));
            out.emit(EventType::ErrorOccurred, None, Value::Object(payload));
        }
    }

    /// `session.idle` / `session.status idle`: the turn completed.
    fn complete(&mut self, out: &mut Out<'_>) {
        let finish = self.run.as_ref().and_then(|r| r.last_finish.clone());
        self.end_run(EventType::RunCompleted, json!({"stop_reason": finish}), out);
    }

    /// Emits the run's terminal after closing what still streams and cancelling the tool
    /// calls that never finished; forgets the run.
    fn end_run(&mut self, kind: EventType, data: Value, out: &mut Out<'_>) {
        self.discard_streams(out);
        let Some(run) = self.run.take() else {
            return;
        };
        for message in &run.messages {
            if self.ended_messages.len() == USER_MESSAGES {
                self.ended_messages.pop_front();
            }
            self.ended_messages.push_back(message.clone());
        }
        let mut open: Vec<(&String, &ToolSeen)> =
            run.tools.iter().filter(|(_, t)| !t.done).collect();
        open.sort_by_key(|(_, t)| t.order);
        for (call, tool) in open {
            cancel_tool_call(out, &run.id, call, &tool.name, &tool.input, kind);
        }
        out.emit(kind, Some(&run.id), data);
    }

    /// Closes every part still streaming with an empty, discarded message.
    fn discard_streams(&mut self, out: &mut Out<'_>) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        for (id, kind) in std::mem::take(&mut r.streaming) {
            let (event, mut data) = match kind {
                PartKind::Text => (EventType::MessageReceived, json!({"role": "assistant"})),
                PartKind::Reasoning => (EventType::ReasoningReceived, json!({})),
            };
            data["content"] = json!("");
            data["message_id"] = json!(id);
            data["discarded"] = json!(true);
            out.emit(event, Some(&r.id), data);
        }
    }

    /// `model_changed` when an assistant message names a model other than the last one.
    fn announce_model(
        &mut self,
        model: Option<&str>,
        provider: Option<&Value>,
        out: &mut Out<'_>,
    ) -> bool {
        let Some(model) = model else {
            return false;
        };
        if self.model.as_deref() == Some(model) {
            return false;
        }
        self.model = Some(model.to_owned());
        let mut data = json!({"model": model});
        if let Some(p) = provider {
            data["provider"] = p.clone();
        }
        let run = self.run_id();
        out.emit(EventType::ModelChanged, run.as_deref(), data);
        true
    }

    /// Whether a record of session `id` (child of `parent`) is one we follow.
    fn accept(&mut self, id: Option<&str>, parent: Option<&str>) -> bool {
        match (&self.main, id) {
            (_, None) => true,
            (None, Some(id)) => {
                self.main = Some(parent.unwrap_or(id).to_owned());
                parent.is_none()
            }
            (Some(main), Some(id)) => main == id,
        }
    }

    fn start_session(&mut self, data: Value, out: &mut Out<'_>) {
        if !self.session_started {
            self.session_started = true;
            out.emit(EventType::SessionStarted, None, data);
        }
    }

    /// Whether `message` belonged to a run that has ended.
    fn ended(&self, message: &str) -> bool {
        !message.is_empty() && self.ended_messages.iter().any(|m| m == message)
    }

    fn remember_user(&mut self, id: &str) {
        if id.is_empty() || self.is_user(id) {
            return;
        }
        if self.user_messages.len() == USER_MESSAGES {
            self.user_messages.pop_front();
        }
        self.user_messages.push_back(id.to_owned());
    }

    fn is_user(&self, id: &str) -> bool {
        !id.is_empty() && self.user_messages.iter().any(|m| m == id)
    }

    fn ensure_run(&mut self, out: &mut Out<'_>) -> String {
        if let Some(r) = &self.run {
            return r.id.clone();
        }
        let id = out.new_run_id();
        out.emit(EventType::RunStarted, Some(&id), json!({}));
        self.run = Some(Run {
            id: id.clone(),
            ..Run::default()
        });
        id
    }

    fn run_id(&self) -> Option<String> {
        self.run.as_ref().map(|r| r.id.clone())
    }

    fn with_run(&mut self, f: impl FnOnce(&mut Run)) {
        if let Some(r) = self.run.as_mut() {
            f(r);
        }
    }
}

/// Whether a step (or an assistant message) with this finish reason ends the turn. With no
/// reason, only a step that called no tool is final.
fn is_final(reason: Option<&str>, called_tool: bool) -> bool {
    match reason {
        // The agent loop goes on after these (`unknown` as in OpenCode's own loop); an
        // `error` step is ended by the error record that follows.
        Some("tool-calls" | "tool_calls" | "error" | "unknown") => false,
        Some(_) => true,
        None => !called_tool,
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::normalize::tests::check;
    use crate::core::normalize::Format;

    #[wasm_bindgen_test(unsupported = test)]
    fn the_fixtures_keep_the_conventions() {
        use crate::core::normalize::tests::check_invariants;
        let fixtures: &[&[u8]] = &[
            include_bytes!("../../../tests/data/opencode/sandbox-agent__native__all-events.json"),
            include_bytes!(
                "../../../tests/data/opencode/sandbox-agent__native__messages-after-2.json"
            ),
            include_bytes!(
                "../../../tests/data/opencode/sandbox-agent__native__session-events.json"
            ),
            include_bytes!("../../../tests/data/opencode/takopi__opencode_run_json.jsonl"),
            include_bytes!("../../../tests/data/opencode/takopi__opencode_stream_error.jsonl"),
            include_bytes!("../../../tests/data/opencode/takopi__opencode_stream_success.jsonl"),
            include_bytes!(
                "../../../tests/data/opencode/takopi__opencode_stream_success_no_reason.jsonl"
            ),
        ];
        for input in fixtures {
            check_invariants(Format::Opencode, input);
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn run_lines_steps_tools_and_usage() {
        check(
            Format::Opencode,
            r#"{"type":"step_start","timestamp":1767036059338,"sessionID":"ses_a","part":{"id":"p1","messageID":"m1","type":"step-start"}}
{"type":"reasoning","timestamp":1767036059400,"sessionID":"ses_a","part":{"id":"p2","messageID":"m1","type":"reasoning","text":"Think.","time":{"start":1,"end":2}}}
{"type":"tool_use","timestamp":1767036061199,"sessionID":"ses_a","part":{"id":"p3","messageID":"m1","type":"tool","callID":"c1","tool":"bash","state":{"status":"error","input":{"command":"false"},"error":"exit 1","time":{"start":1,"end":2}}}}
{"type":"step_finish","timestamp":1767036061205,"sessionID":"ses_a","part":{"id":"p4","messageID":"m1","type":"step-finish","cost":0.5,"tokens":{"input":10,"output":2,"reasoning":1,"cache":{"read":100,"write":5}}}}
{"type":"step_start","timestamp":1767036063732,"sessionID":"ses_a","part":{"id":"p5","messageID":"m2","type":"step-start"}}
{"type":"text","timestamp":1767036064268,"sessionID":"ses_a","part":{"id":"p6","messageID":"m2","type":"text","text":"It failed.","time":{"start":1,"end":2}}}
{"type":"step_finish","timestamp":1767036064273,"sessionID":"ses_a","part":{"id":"p7","messageID":"m2","type":"step-finish","reason":"unknown","cost":0.25,"tokens":{"input":1,"output":1,"reasoning":0,"cache":{"read":0,"write":0}}}}
{"type":"done","timestamp":1767036064300,"sessionID":"ses_a","reason":"idle","rejected":[]}
{"type":"done","timestamp":1767036064301,"sessionID":"ses_a","reason":"idle","rejected":[]}
{"type":"text","timestamp":1767036064302,"sessionID":"ses_other","part":{"id":"x","type":"text","text":"not ours"}}
{"type":"text","timestamp":1767036064303,"sessionID":"ses_a"}
{"type":"snapshot","timestamp":1767036064303,"sessionID":"ses_a"}
"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 reasoning_received content="Think."
                4 t1 tool_call_started tool_name="bash" tool_call_id="c1" tool_input={"command":"false"}
                5 t1 tool_call_failed tool_name="bash" tool_call_id="c1" tool_input={"command":"false"} error="exit 1"
                6 t1 token_usage_updated input_tokens=10 output_tokens=2 cost_usd=0.5
                7 t1 message_received role="assistant" content="It failed."
                8 t1 token_usage_updated input_tokens=11 output_tokens=3 cost_usd=0.75
                9 t1 run_completed
                ! line 11: missing_field: missing field `part`
                ! line 12: unknown_type: unknown type "snapshot"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn run_line_errors_fail_cancel_or_report() {
        check(
            Format::Opencode,
            r#"{"type":"error","timestamp":1,"sessionID":"s","error":{"name":"ProviderAuthError","data":{"providerID":"anthropic","message":"bad key"}}}
{"type":"step_start","timestamp":2,"sessionID":"s","part":{"id":"a","type":"step-start"}}
{"type":"text","timestamp":3,"sessionID":"s","part":{"id":"b","type":"text","text":"","time":{"start":1,"end":2}}}
{"type":"error","timestamp":4,"sessionID":"s","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}
{"type":"step_start","timestamp":5,"sessionID":"s","part":{"id":"c","type":"step-start"}}
{"type":"error","timestamp":6,"sessionID":"s","error":{"name":"APIError","data":{"message":"Unauthorized","statusCode":401}}}
{"type":"error","timestamp":7,"sessionID":"s","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}
{"type":"step_start","timestamp":8,"sessionID":"s","part":{"id":"d","type":"step-start"}}
{"type":"error","timestamp":9,"sessionID":"s","error":{"name":"UnknownError","data":{"message":"boom"}}}
"#,
            expect![[r#"
                1 -- session_started
                2 -- error_occurred error_message="bad key" provider_error.kind="authentication_failed"
                3 t1 run_started
                4 t1 run_cancelled error_message="Aborted" reason="interrupted"
                5 t2 run_started
                6 t2 run_failed error_message="Unauthorized" provider_error.kind="authentication_failed"
                7 t3 run_started
                8 t3 run_failed error_message="boom" provider_error.kind="unknown"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn serve_1_18_deltas_reasoning_and_permissions() {
        check(
            Format::Opencode,
            r#"data: {"type":"server.connected","properties":{}}

data: {"type":"session.created","properties":{"sessionID":"ses_1","info":{"id":"ses_1","version":"1.18.33","directory":"/w","title":"New"}}}

data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_u","sessionID":"ses_1","role":"user","time":{"created":1}}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_u0","sessionID":"ses_1","messageID":"msg_u","type":"text","text":"context","synthetic":true}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_u1","sessionID":"ses_1","messageID":"msg_u","type":"text","text":"fix it"}}}

data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}

data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_a","sessionID":"ses_1","role":"assistant","modelID":"fake-model","providerID":"fake","time":{"created":2}}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_r","sessionID":"ses_1","messageID":"msg_a","type":"reasoning","text":"","time":{"start":3}}}}

data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_r","field":"text","delta":"hmm"}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_r","sessionID":"ses_1","messageID":"msg_a","type":"reasoning","text":"hmm","time":{"start":3,"end":4}}}}

data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":"Do"}}

data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":"ne"}}

data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_x","field":"input","delta":"{"}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_t","sessionID":"ses_1","messageID":"msg_a","type":"text","text":"Done","time":{"start":5,"end":6}}}}

data: {"type":"permission.asked","properties":{"id":"per_1","sessionID":"ses_1","permission":"bash","patterns":["rm *"],"metadata":{"command":"rm x"},"always":["rm *"],"tool":{"messageID":"msg_a","callID":"call_1"}}}

data: {"type":"permission.replied","properties":{"sessionID":"ses_1","requestID":"per_1","reply":"reject"}}

data: {"type":"permission.updated","properties":{"id":"per_2","type":"edit","sessionID":"ses_1","messageID":"msg_a","callID":"call_2","title":"Edit a.rs","metadata":{"filePath":"a.rs"},"time":{"created":7}}}

data: {"type":"permission.replied","properties":{"sessionID":"ses_1","permissionID":"per_2","response":"always"}}

data: {"type":"todo.updated","properties":{"sessionID":"ses_1","todos":[{"id":"1","content":"Read","status":"completed","priority":"high"},{"id":"2","content":"Skip","status":"cancelled","priority":"low"}]}}

data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_a","sessionID":"ses_1","role":"assistant","modelID":"fake-model","providerID":"fake","time":{"created":2,"completed":8},"finish":"stop","cost":0,"tokens":{"input":3,"output":4,"reasoning":1,"cache":{"read":0,"write":0}}}}}

data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_a","sessionID":"ses_1","role":"assistant","modelID":"fake-model","time":{"created":2,"completed":8},"finish":"stop","tokens":{"input":3,"output":4,"reasoning":1,"cache":{"read":0,"write":0}}}}}

data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"idle"}}}

data: {"type":"session.idle","properties":{"sessionID":"ses_1"}}

data: {"type":"session.next.thing","properties":{"sessionID":"ses_1"}}

"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 message_sent role="user" content="fix it"
                4 t1 model_changed model="fake-model"
                5 t1 reasoning_streamed delta="hmm"
                6 t1 reasoning_received content="hmm"
                7 t1 message_streamed role="assistant" delta="Do"
                8 t1 message_streamed role="assistant" delta="ne"
                9 t1 message_received role="assistant" content="Done"
                10 t1 tool_approval_requested tool_name="bash" tool_call_id="call_1" tool_input={"command":"rm x"} request_id="per_1"
                11 t1 tool_approval_denied request_id="per_1"
                12 t1 tool_approval_requested tool_name="edit" tool_call_id="call_2" tool_input={"filePath":"a.rs"} request_id="per_2"
                13 t1 tool_approval_granted request_id="per_2"
                14 t1 todo_updated items=[2 items]
                15 t1 token_usage_updated input_tokens=3 output_tokens=4 cost_usd=0.0
                16 t1 run_completed
                ! line 24: unknown_type: unknown event type "session.next.thing"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn serve_errors_retries_children_and_abandoned_parts() {
        check(
            Format::Opencode,
            r#"[
  {"type": "session.created", "properties": {"info": {"id": "ses_child", "parentID": "ses_main", "version": "1.1.49"}}},
  {"type": "session.updated", "properties": {"info": {"id": "ses_main", "version": "1.1.49", "directory": "/w"}}},
  {"type": "session.error", "properties": {"sessionID": "ses_main", "error": {"name": "APIError", "data": {"message": "overloaded", "statusCode": 529}}}},
  {"type": "session.status", "properties": {"sessionID": "ses_main", "status": {"type": "busy"}}},
  {"type": "session.status", "properties": {"sessionID": "ses_main", "status": {"type": "retry", "attempt": 1, "message": "Rate limited", "next": 5}}},
  {"type": "message.part.updated", "properties": {"part": {"id": "prt_c", "sessionID": "ses_child", "messageID": "msg_c", "type": "text", "text": "child"}, "delta": "child"}},
  {"type": "session.status", "properties": {"sessionID": "ses_child", "status": {"type": "idle"}}},
  {"type": "message.part.updated", "properties": {"part": {"id": "prt_1", "sessionID": "ses_main", "messageID": "msg_a", "type": "text", "text": "Half"}, "delta": "Half"}},
  {"type": "message.part.updated", "properties": {"part": {"id": "prt_2", "sessionID": "ses_main", "messageID": "msg_a", "type": "tool", "callID": "t1", "tool": "read", "state": {"status": "running", "input": {"filePath": "a"}}}}},
  {"type": "session.compacted", "properties": {"sessionID": "ses_main"}},
  {"type": "session.error", "properties": {"sessionID": "ses_main", "error": {"name": "APIError", "data": {"message": "Too many requests", "statusCode": 429, "isRetryable": true}}}},
  {"type": "session.idle", "properties": {"sessionID": "ses_main"}},
  {"type": "session.status", "properties": {"sessionID": "ses_main", "status": {"type": "busy"}}},
  {"type": "message.part.updated", "properties": {"part": {"id": "prt_3", "sessionID": "ses_main", "messageID": "msg_b", "type": "reasoning", "text": "Cut"}, "delta": "Cut"}},
  {"type": "session.error", "properties": {"sessionID": "ses_main", "error": {"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}}},
  {"type": "session.status", "properties": {"sessionID": "ses_main", "status": {"type": "busy"}}},
  {"type": "message.part.updated", "properties": {"part": {"id": "prt_4", "sessionID": "ses_main", "messageID": "msg_c", "type": "text", "text": "Never"}, "delta": "Never"}}
]
"#,
            expect![[r#"
                1 -- session_started
                2 -- error_occurred error_message="overloaded" provider_error.kind="overloaded"
                3 t1 run_started
                4 t1 error_occurred error_message="Rate limited" provider_error.kind="rate_limit"
                5 t1 message_streamed role="assistant" delta="Half"
                6 t1 tool_call_started tool_name="read" tool_call_id="t1" tool_input={"filePath":"a"}
                7 t1 context_compacted
                8 t1 message_received role="assistant" content="" discarded=true
                9 t1 tool_call_cancelled tool_name="read" tool_call_id="t1" tool_input={"filePath":"a"} reason="run_failed"
                10 t1 run_failed error_message="Too many requests" provider_error.kind="rate_limit"
                11 t2 run_started
                12 t2 reasoning_streamed delta="Cut"
                13 t2 reasoning_received content="" discarded=true
                14 t2 run_cancelled error_message="The operation was aborted." reason="interrupted"
                15 t3 run_started
                16 t3 message_streamed role="assistant" delta="Never"
                17 t3 message_received role="assistant" content="" discarded=true
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_aborted_messages_late_parts_open_no_run() {
        // Seen from the real `opencode serve` 1.18.33: after `POST /session/:id/abort`, the
        // aborted message's final text part and usage arrive after the session is idle.
        check(
            Format::Opencode,
            r#"data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_u","sessionID":"ses_1","role":"user","time":{"created":1}}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_u","sessionID":"ses_1","messageID":"msg_u","type":"text","text":"slow"}}}

data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_a","sessionID":"ses_1","messageID":"msg_a","type":"text","text":"","time":{"start":2}}}}

data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_a","field":"text","delta":"1 "}}

data: {"type":"session.error","properties":{"sessionID":"ses_1","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}}

data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"idle"}}}

data: {"type":"message.part.updated","properties":{"sessionID":"ses_1","part":{"id":"prt_a","sessionID":"ses_1","messageID":"msg_a","type":"text","text":"1 2 ","time":{"start":2,"end":3}}}}

data: {"type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_a","sessionID":"ses_1","role":"assistant","time":{"created":2,"completed":4},"tokens":{"input":0,"output":0,"reasoning":0,"cache":{"read":0,"write":0}},"cost":0}}}

data: {"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"idle"}}}

"#,
            expect![[r#"
                1 t1 run_started
                2 t1 message_sent role="user" content="slow"
                3 t1 message_streamed role="assistant" delta="1 "
                4 t1 message_received role="assistant" content="" discarded=true
                5 t1 run_cancelled error_message="Aborted" reason="interrupted"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn boot_announcements_of_1_18_are_ignored() {
        // Seen from the real `opencode serve` 1.18.33 while it boots and after a turn.
        check(
            Format::Opencode,
            r#"data: {"id":"evt_1","type":"plugin.added","properties":{"id":"openai-compatible"}}

data: {"id":"evt_2","type":"catalog.updated","properties":{}}

data: {"id":"evt_3","type":"reference.updated","properties":{}}

data: {"id":"evt_4","type":"integration.updated","properties":{}}

"#,
            expect![[""]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn history_hydrates_finished_messages() {
        check(
            Format::Opencode,
            r#"[
  {"info": {"id": "msg_1", "sessionID": "ses_h", "role": "user", "time": {"created": 1770361012812}},
   "parts": [{"id": "p0", "messageID": "msg_1", "type": "text", "text": "<file>", "synthetic": true},
             {"id": "p1", "messageID": "msg_1", "type": "text", "text": "do it"},
             {"id": "p2", "messageID": "msg_1", "type": "file", "url": "file:///a"}]},
  {"info": {"id": "msg_2", "sessionID": "ses_h", "role": "assistant", "modelID": "m", "providerID": "p",
            "time": {"created": 1770361012900, "completed": 1770361013000},
            "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache": {"read": 0, "write": 0}}, "cost": 0.01},
   "parts": [{"id": "p3", "type": "tool", "callID": "c", "tool": "edit", "state": {"status": "completed", "input": {"filePath": "a"}, "output": "ok"}}]},
  {"info": {"id": "msg_3", "sessionID": "ses_h", "role": "assistant", "modelID": "m",
            "time": {"created": 1770361013100, "completed": 1770361013200},
            "error": {"name": "MessageAbortedError", "data": {"message": "aborted"}}},
   "parts": [{"id": "p4", "type": "text", "text": "partial"}]},
  {"info": {"id": "msg_4", "sessionID": "ses_h", "role": "user", "time": {"created": 1770361014000}}, "parts": []},
  {"info": {"id": "msg_5", "sessionID": "ses_h", "role": "assistant", "time": {"created": 1770361014100, "completed": 1770361014200},
            "error": {"name": "APIError", "data": {"message": "bad request", "statusCode": 400}}}, "parts": []},
  {"info": {"id": "msg_6", "sessionID": "ses_h", "role": "robot"}, "parts": []}
]
"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 message_sent role="user" content="do it"
                4 t1 model_changed model="m"
                5 t1 tool_call_started tool_name="edit" tool_call_id="c" tool_input={"filePath":"a"}
                6 t1 tool_call_completed tool_name="edit" tool_call_id="c" tool_input={"filePath":"a"} tool_output="ok"
                7 t1 token_usage_updated input_tokens=1 output_tokens=2 cost_usd=0.01
                8 t1 message_received role="assistant" content="partial"
                9 t1 run_cancelled error_message="aborted" reason="interrupted"
                10 t2 run_started
                11 t2 run_failed error_message="bad request" provider_error.kind="invalid_request"
                ! line 6: missing_field: missing field `info.role`
            "#]],
        );
    }
}
