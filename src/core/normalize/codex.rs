//! Decoder for `codex exec --json` (JSON Lines, one `ThreadEvent` per line, schema
//! `codex-rs/exec/src/exec_events.rs`), and the turn/tool plumbing both Codex decoders share.
//!
//! Mapping (provider record → canonical events):
//! * `thread.started {thread_id}` → `session_started {provider_session_id}` (no run).
//! * `turn.started` → `run_started` with a fresh run id. Any record that belongs to a turn
//!   (an item, `turn.completed`, `turn.failed`) opens a run first when none is open.
//! * `turn.completed {usage}` → `token_usage_updated {input_tokens, output_tokens,
//!   cache_read_input_tokens (cached_input_tokens), cache_creation_input_tokens
//!   (cache_write_input_tokens), reasoning_output_tokens}`, then `run_completed`.
//! * `turn.failed {error{message}}` → `run_failed` (ProviderError kind `turn_failed`).
//! * top-level `error {message}` (e.g. "Reconnecting... 1/1") → `error_occurred`
//!   (severity `error`, kind `stream_error`); it does not end the turn.
//! * `item.started|updated|completed {item}` by `item.type`:
//!   - `agent_message` → `message_received {content, message_id, role, phase?}` on completion
//!     (exec streams no deltas); `reasoning` → `reasoning_received` on completion;
//!   - `plan` (plan mode's proposed plan, shown to the user as the answer) →
//!     `message_received {kind: "plan"}`; its `item.plan.delta {item_id, delta}` lines →
//!     `message_streamed {message_id, delta, kind: "plan"}`;
//!   - tools: `command_execution` → `shell {command}`, `file_change` → `apply_patch
//!     {changes}`, `mcp_tool_call` → `<server>.<tool> {arguments}`, `web_search` →
//!     `web_search {query, action}`, `collab_tool_call` → its `tool` (`spawn_agent`…).
//!     `item.started` → `tool_call_started`; `item.updated` → `tool_call_updated {status,
//!     output_delta}`; `item.completed` → `tool_call_completed {tool_output, exit_code…}` or
//!     `tool_call_failed {error}` (status `failed`/`declined`, a non-zero exit code, an MCP
//!     error). A tool first seen completed gets its `tool_call_started` on the same line.
//!   - `todo_list {items[{text, completed}]}` → `todo_updated` (whole list) on every phase;
//!   - `error {message}` → `error_occurred` (severity `warning`, kind `item_error`);
//!   - any other item type → an `unknown item type` diagnostic.
//! * `request_user_input {id, call_id, questions}` → `tool_approval_requested`
//!   (`tool_name: "request_user_input"`).
//!
//! Tool ids are the item ids. A `web_search` item carries `id` twice (the thread item's
//! `item_N` and the search's own `ws_…`, both flattened into one object); `serde_json::Value`
//! keeps the last, so the tool call id is the `ws_…` one on both the started and the completed
//! line, which is stable. At a turn's end, a tool still open is closed with
//! `tool_call_cancelled` and a streamed plan that never completed with a discarded
//! `message_received`, both before the run terminal; at end of input only the streamed text
//! is closed (the run stays open for the lifecycle projection).

use std::cell::OnceCell;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::fast::{self, Scan, SlotKeys, Slots, Stamp, Str, Unread, Valid};
use super::turn::OpenTools;
use super::{text_data, tool_started_data};
use super::{Decoder, Out};
use crate::core::event::EventType;
use crate::core::json::{JsonObject, ObjectWriter, ToJson};
use crate::core::provider_error::ProviderError;

/// Decoder state for `codex exec --json`.
#[derive(Default)]
pub(crate) struct Codex {
    turn: TurnState,
}

impl Decoder for Codex {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        out.use_timestamp(record.get("timestamp"));
        let Some(ty) = record.get("type").and_then(Value::as_str) else {
            return out.missing("type");
        };
        match ty {
            "thread.started" => {
                let Some(id) = str_field(record, "thread_id") else {
                    return out.missing("thread_id");
                };
                self.thread_started(id, out);
            }
            "turn.started" => self.turn_started(out),
            "turn.completed" => self.turn_completed(record.get("usage"), out),
            "turn.failed" => self.turn_failed(record.get("error"), out),
            "item.started" => self.item(Phase::Started, record.get("item"), out),
            "item.updated" => self.item(Phase::Updated, record.get("item"), out),
            "item.completed" => self.item(Phase::Completed, record.get("item"), out),
            "item.plan.delta" => {
                let (Some(id), Some(delta)) =
                    (str_field(record, "item_id"), str_field(record, "delta"))
                else {
                    return out.missing("item_id/delta");
                };
                let run = self.turn.ensure_run(out);
                self.turn
                    .stream(out, &run, Stream::Plan, id, delta, Map::new());
            }
            "request_user_input" => {
                let Some(call_id) = str_field(record, "call_id") else {
                    return out.missing("call_id");
                };
                let run = self.turn.ensure_run(out);
                let input =
                    json!({ "questions": record.get("questions").cloned().unwrap_or(json!([])) });
                let data = json!({
                    "request_id": call_id,
                    "tool_call_id": call_id,
                    "tool_name": "request_user_input",
                    "tool_input": input,
                });
                out.emit_full(
                    EventType::ToolApprovalRequested,
                    Some(&run),
                    data,
                    Some(call_id),
                    Map::new(),
                );
            }
            "error" => self.stream_error(str_field(record, "message"), out),
            other => out.unknown(format_args!("type {other:?}")),
        }
    }

    fn record_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        let mut line = Line::default();
        if !out.read_record(text, &mut line) {
            return false;
        }
        let phase = match &*line.ty {
            "thread.started" => {
                let Some(id) = &line.thread_id else {
                    return false;
                };
                out.set_timestamp(line.timestamp);
                self.thread_started(id, out);
                return true;
            }
            "turn.started" => {
                out.set_timestamp(line.timestamp);
                self.turn_started(out);
                return true;
            }
            "turn.completed" => {
                out.set_timestamp(line.timestamp);
                self.turn_completed(line.usage.as_ref(), out);
                return true;
            }
            "turn.failed" => {
                out.set_timestamp(line.timestamp);
                self.turn_failed(line.error.as_ref(), out);
                return true;
            }
            "error" => {
                out.set_timestamp(line.timestamp);
                self.stream_error(line.message.as_deref(), out);
                return true;
            }
            "item.started" => Phase::Started,
            "item.updated" => Phase::Updated,
            "item.completed" => Phase::Completed,
            _ => return false,
        };
        out.set_timestamp(line.timestamp);
        match line.item {
            None => self.item(phase, None, out),
            Some(ItemRead::Text {
                ty,
                id,
                text,
                phase: item_phase,
            }) => {
                let text = text.as_deref().unwrap_or("");
                self.text_item(phase, ty, &id, text, item_phase.as_ref(), out);
            }
            Some(ItemRead::Other(item)) => self.item_fields(phase, &item, out),
        }
        true
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.turn.close_streams(out);
    }
}

/// The fields of the records the typed fast path reads (thread, turn and item records; a
/// text item is read typed, any other item as the fields its decoding uses), read in place
/// ([`fast::Record`]).
#[derive(Default)]
struct Line<'a> {
    ty: Str<'a>,
    timestamp: Stamp,
    thread_id: Option<Str<'a>>,
    /// `Some` even for `null` (which has no counts), as `obj.get(key)` sees it.
    usage: Option<UsageRead>,
    item: Option<ItemRead<'a>>,
    /// Of `turn.failed`; `Some(Null)` for a `null`.
    error: Option<Value>,
    /// Of `error`.
    message: Option<Str<'a>>,
}

impl<'a> fast::Record<'a> for Line<'a> {
    const REQUIRED: u32 = 1;

    fn field(&mut self, key: &str, value: &mut Scan<'a>) -> Result<u32, Unread> {
        Ok(match key {
            "type" => {
                self.ty = value.str()?;
                1
            }
            "timestamp" => {
                self.timestamp = value.stamp()?;
                1 << 1
            }
            "thread_id" => {
                self.thread_id = value.opt_str()?;
                1 << 2
            }
            "usage" => {
                self.usage = Some(value.slots()?);
                1 << 3
            }
            "item" => {
                self.item = match value.null() {
                    true => None,
                    false => Some(ItemRead::read(value)?),
                };
                1 << 4
            }
            "error" => {
                self.error = Some(value.value()?);
                1 << 5
            }
            "message" => {
                self.message = value.opt_str()?;
                1 << 6
            }
            _ => 0,
        })
    }
}

/// The item of an `item.*` line: an `agent_message`, `reasoning` or `plan` item read as the
/// fields its decoding uses (`id`, `type`, `text`, `phase`, borrowed), any other one as the
/// fields of [`ItemFields`]. It must be an object whose `id` and `type`, when they come first
/// (as Codex writes them), are strings; anything else fails the typed read.
enum ItemRead<'a> {
    Text {
        ty: TextItem,
        id: Str<'a>,
        text: Option<Str<'a>>,
        phase: Option<Value>,
    },
    Other(ItemFields<'a>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TextItem {
    AgentMessage,
    Reasoning,
    Plan,
}

impl TextItem {
    fn parse(ty: &str) -> Option<TextItem> {
        Some(match ty {
            "agent_message" => TextItem::AgentMessage,
            "reasoning" => TextItem::Reasoning,
            "plan" => TextItem::Plan,
            _ => return None,
        })
    }
}

/// Where [`ItemRead::read`] is in an item: its leading `id` and `type`, then a text item's
/// fields or any other item's.
enum ItemState<'a> {
    Leading(Option<Str<'a>>, Option<Str<'a>>),
    Text {
        ty: TextItem,
        id: Str<'a>,
        text: Option<Option<Str<'a>>>,
        phase: Option<Value>,
    },
    Other(ItemFields<'a>),
}

impl<'a> ItemState<'a> {
    /// The item read (one of only an `id` and a `type` is decided here).
    fn into_item(self) -> ItemRead<'a> {
        match self {
            ItemState::Leading(id, ty) => ItemState::after_leading(id, ty).into_item(),
            ItemState::Text {
                ty,
                id,
                text,
                phase,
            } => ItemRead::Text {
                ty,
                id,
                text: text.flatten(),
                phase,
            },
            ItemState::Other(fields) => ItemRead::Other(fields),
        }
    }

    /// The item's kind, from its leading `id` and `type`.
    fn after_leading(id: Option<Str<'a>>, ty: Option<Str<'a>>) -> ItemState<'a> {
        match (ty.as_deref().and_then(TextItem::parse), id) {
            (Some(ty), Some(id)) => ItemState::Text {
                ty,
                id,
                text: None,
                phase: None,
            },
            (_, id) => {
                let mut fields = ItemFields::new();
                for (slot, v) in [(0, id), (1, ty)] {
                    if let Some(v) = v {
                        fields.set(slot, Field::Str(v, OnceCell::new()));
                    }
                }
                ItemState::Other(fields)
            }
        }
    }
}

impl<'a> ItemRead<'a> {
    /// Reads an item object: a text item's other fields checked as `IgnoredAny` checks them,
    /// a text field repeated failing the read; any other item's, as `Valid` checks them, a
    /// repeated one kept last.
    fn read(s: &mut Scan<'a>) -> Result<ItemRead<'a>, Unread> {
        if s.peek() != Some(b'{') {
            return Err(Unread);
        }
        let mut state = ItemState::Leading(None, None);
        s.object(|key, s| {
            if let ItemState::Leading(id, ty) = &mut state {
                match &*key {
                    "id" if id.is_none() => return s.str().map(|v| *id = Some(v)),
                    "type" if ty.is_none() => return s.str().map(|v| *ty = Some(v)),
                    _ => state = ItemState::after_leading(id.take(), ty.take()),
                }
            }
            match &mut state {
                ItemState::Leading(..) => unreachable!("left above"),
                ItemState::Text { text, phase, .. } => match &*key {
                    "text" if text.is_none() => s.opt_str().map(|v| *text = Some(v)),
                    "phase" if phase.is_none() => s.value().map(|v| *phase = Some(v)),
                    "id" | "type" | "text" | "phase" => Err(Unread),
                    _ => s.skip::<serde::de::IgnoredAny>(),
                },
                ItemState::Other(fields) => match ItemFields::slot(&key) {
                    Some(slot) => Field::read(s).map(|v| fields.set(slot, v)),
                    None => s.skip::<Valid>(),
                },
            }
        })?;
        Ok(state.into_item())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Started,
    Updated,
    Completed,
}

impl Codex {
    fn thread_started(&mut self, id: &str, out: &mut Out<'_>) {
        let data = ObjectWriter::with_capacity(26 + id.len())
            .field("provider_session_id", id)
            .finish();
        out.emit_data(EventType::SessionStarted, None, data);
    }

    fn turn_started(&mut self, out: &mut Out<'_>) {
        self.turn.abandon(out);
        self.turn.open_run(out, Map::new());
    }

    fn turn_completed<F: Fields + ?Sized>(&mut self, usage: Option<&F>, out: &mut Out<'_>) {
        let run = self.turn.ensure_run(out);
        if let Some(usage) = usage.and_then(usage_object) {
            out.emit_data(EventType::TokenUsageUpdated, Some(&run), usage);
        }
        self.turn
            .end_run(out, EventType::RunCompleted, JsonObject::new());
    }

    fn turn_failed(&mut self, error: Option<&Value>, out: &mut Out<'_>) {
        let message = error
            .and_then(|e| str_field(e, "message"))
            .unwrap_or("turn failed");
        let data = ProviderError::from_provider(out.provider(), "turn_failed", None, message)
            .data_object(&[], None);
        self.turn.ensure_run(out);
        self.turn.end_run(out, EventType::RunFailed, data);
    }

    /// A top-level `error` (e.g. "Reconnecting... 1/1"): it does not end the turn.
    fn stream_error(&mut self, message: Option<&str>, out: &mut Out<'_>) {
        let run = self.turn.run.clone();
        let message = message.unwrap_or("error");
        let kind = ("stream_error", None);
        emit_error(out, run.as_deref(), kind, message, "error", None);
    }

    fn item(&mut self, phase: Phase, item: Option<&Value>, out: &mut Out<'_>) {
        let Some(item) = item.filter(|i| i.is_object()) else {
            return out.missing("item");
        };
        self.item_fields(phase, item, out);
    }

    /// An item (an object), read as a `Value` or typed.
    fn item_fields<F: Fields + ?Sized>(&mut self, phase: Phase, item: &F, out: &mut Out<'_>) {
        let Some(ty) = item.str("type") else {
            return out.missing("item.type");
        };
        let Some(id) = item.str("id") else {
            return out.missing("item.id");
        };
        if let Some(kind) = tool_kind(ty) {
            let run = self.turn.ensure_run(out);
            return match phase {
                Phase::Started => self.turn.tool_started(out, &run, id, kind, item),
                Phase::Updated => self.turn.tool_updated(out, &run, id, kind, item),
                Phase::Completed => self.turn.tool_completed(out, &run, id, kind, item),
            };
        }
        if let Some(text_ty) = TextItem::parse(ty) {
            let text = item.str("text").unwrap_or("");
            return self.text_item(phase, text_ty, id, text, item.get("phase"), out);
        }
        match (ty, phase) {
            ("todo_list", _) => {
                let run = self.turn.ensure_run(out);
                let list = item.get("items").and_then(Value::as_array);
                let items = TodoItems(list.map_or(&[], Vec::as_slice));
                let data = ObjectWriter::with_capacity(256)
                    .field("items", &items)
                    .finish();
                out.emit_data(EventType::TodoUpdated, Some(&run), data);
            }
            ("error", _) => {
                let run = self.turn.ensure_run(out);
                let message = item.str("message").unwrap_or("error");
                emit_error(
                    out,
                    Some(&run),
                    ("item_error", None),
                    message,
                    "warning",
                    None,
                );
            }
            (other, _) => out.unknown(format_args!("item type {other:?}")),
        }
    }
}

/// The `items` of `todo_updated`, from a `todo_list` item's: each `{status, text}`, the status
/// `completed` when the item says so, else `pending`.
struct TodoItems<'a>(&'a [Value]);

impl ToJson for TodoItems<'_> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, todo) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let done = todo.get("completed").and_then(Value::as_bool) == Some(true);
            out.push_str(if done {
                "{\"status\":\"completed\",\"text\":"
            } else {
                "{\"status\":\"pending\",\"text\":"
            });
            str_field(todo, "text").unwrap_or("").write_json(out);
            out.push('}');
        }
        out.push(']');
    }
}

impl Codex {
    /// An `agent_message`, `reasoning` or `plan` item: its whole text on completion.
    fn text_item(
        &mut self,
        phase: Phase,
        ty: TextItem,
        id: &str,
        text: &str,
        item_phase: Option<&Value>,
        out: &mut Out<'_>,
    ) {
        if phase != Phase::Completed {
            return out.ignore();
        }
        let run = self.turn.ensure_run(out);
        let (stream, extra) = match ty {
            TextItem::AgentMessage => {
                let mut extra = Map::new();
                if let Some(p) = item_phase.filter(|p| !p.is_null()) {
                    extra.insert("phase".into(), p.clone());
                }
                (Stream::Message, extra)
            }
            TextItem::Plan => (Stream::Plan, Map::new()),
            TextItem::Reasoning => (Stream::Reasoning, Map::new()),
        };
        self.turn.whole(out, &run, stream, id, text, extra);
    }
}

// ---------------------------------------------------------------------------------------
// Shared by both Codex decoders.
// ---------------------------------------------------------------------------------------

/// A string field, if present.
pub(super) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The first non-null of two spellings of a field (`exec` is snake_case, `app-server`
/// camelCase).
pub(super) fn field<'a>(v: &'a Value, snake: &str, camel: &str) -> Option<&'a Value> {
    v.get(snake)
        .filter(|x| !x.is_null())
        .or_else(|| v.get(camel).filter(|x| !x.is_null()))
}

/// A tool item's fields, from a `Value` (the `Value` path, the app-server decoder) or from
/// [`ItemFields`] (the typed path): what the tool decoding reads, one interface for both.
pub(super) trait Fields {
    fn get(&self, key: &str) -> Option<&Value>;

    /// A string field, if present ([`str_field`]).
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The first non-null of two spellings of a field ([`field`]).
    fn either(&self, snake: &str, camel: &str) -> Option<&Value> {
        self.get(snake)
            .filter(|x| !x.is_null())
            .or_else(|| self.get(camel).filter(|x| !x.is_null()))
    }

    /// [`Fields::either`], when it is a string.
    fn either_str(&self, snake: &str, camel: &str) -> Option<&str> {
        self.either(snake, camel).and_then(Value::as_str)
    }

    /// A field as it is written, if present (a string not copied into a `Value`).
    fn json(&self, key: &str) -> Option<FieldJson<'_>> {
        self.get(key).map(FieldJson::Value)
    }
}

impl Fields for Value {
    fn get(&self, key: &str) -> Option<&Value> {
        Value::get(self, key)
    }
}

/// A typed read of a few fields ([`Slots`]: Codex's usage, OpenCode's parts and status).
impl<K: SlotKeys, const N: usize> Fields for Slots<K, N> {
    fn get(&self, key: &str) -> Option<&Value> {
        Slots::get(self, key)
    }
}

/// A non-text item read typed: the fields [`ItemFields::slot`] lists, each what serde_json
/// reads for it (a repeated field keeps the last, as a `Value` map does), the others
/// checked as `Value` would check them ([`Valid`]) and dropped unbuilt. A few fields, looked
/// up by slot number.
struct ItemFields<'a> {
    /// (slot, value), a slot at most once.
    fields: Vec<(u8, Field<'a>)>,
}

/// One field of [`ItemFields`]: a string, kept borrowed from the line (its `Value` made only
/// if something asks for one), or the `Value` serde_json builds for anything else.
enum Field<'a> {
    Str(Str<'a>, OnceCell<Value>),
    Value(Value),
}

impl Field<'_> {
    fn value(&self) -> &Value {
        match self {
            Field::Str(s, value) => value.get_or_init(|| Value::String(s.0.to_string())),
            Field::Value(value) => value,
        }
    }

    /// The field unless it is null (what [`Fields::either`] skips).
    fn non_null(&self) -> Option<&Self> {
        (!matches!(self, Field::Value(Value::Null))).then_some(self)
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s, _) => Some(s),
            Field::Value(value) => value.as_str(),
        }
    }
}

impl<'a> Field<'a> {
    /// Any JSON value, as `Value` reads it, a string kept borrowed.
    fn read(s: &mut Scan<'a>) -> Result<Field<'a>, Unread> {
        match s.peek() {
            Some(b'"') => Ok(Field::Str(s.str()?, OnceCell::new())),
            _ => s.value().map(Field::Value),
        }
    }
}

impl<'a> ItemFields<'a> {
    fn new() -> ItemFields<'a> {
        ItemFields {
            fields: Vec::with_capacity(8),
        }
    }

    /// Sets the field of `slot` (a repeated field keeps the last).
    fn set(&mut self, slot: u8, value: Field<'a>) {
        match self.fields.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, v)) => *v = value,
            None => self.fields.push((slot, value)),
        }
    }

    /// The slot of `key`: every field that [`Codex::item_fields`] and the tool decoding read
    /// (a test build panics when they read one that is not here), `None` for the others.
    fn slot(key: &str) -> Option<u8> {
        Some(match key {
            "id" => 0,
            "type" => 1,
            "status" => 2,
            "command" => 3,
            "cwd" => 4,
            "aggregated_output" => 5,
            "aggregatedOutput" => 6,
            "exit_code" => 7,
            "exitCode" => 8,
            "duration_ms" => 9,
            "durationMs" => 10,
            "changes" => 11,
            "server" => 12,
            "tool" => 13,
            "arguments" => 14,
            "error" => 15,
            "result" => 16,
            "query" => 17,
            "action" => 18,
            "prompt" => 19,
            "receiver_thread_ids" => 20,
            "receiverThreadIds" => 21,
            "model" => 22,
            "namespace" => 23,
            "path" => 24,
            "revised_prompt" => 25,
            "revisedPrompt" => 26,
            "agents_states" => 27,
            "agentsStates" => 28,
            "content_items" => 29,
            "contentItems" => 30,
            "success" => 31,
            "saved_path" => 32,
            "savedPath" => 33,
            "items" => 34,
            "message" => 35,
            "text" => 36,
            "phase" => 37,
            _ => return None,
        })
    }
}

impl ItemFields<'_> {
    fn field(&self, key: &str) -> Option<&Field<'_>> {
        let slot = ItemFields::slot(key);
        debug_assert!(slot.is_some(), "{key:?} is not a slot of ItemFields");
        let slot = slot?;
        self.fields.iter().find(|(s, _)| *s == slot).map(|(_, v)| v)
    }
}

impl Fields for ItemFields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.field(key).map(Field::value)
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.field(key)?.as_str()
    }

    fn either_str(&self, snake: &str, camel: &str) -> Option<&str> {
        let field = |key| self.field(key).and_then(Field::non_null);
        field(snake).or_else(|| field(camel))?.as_str()
    }

    fn json(&self, key: &str) -> Option<FieldJson<'_>> {
        Some(match self.field(key)? {
            Field::Str(s, _) => FieldJson::Str(s),
            Field::Value(value) => FieldJson::Value(value),
        })
    }
}

/// Emits `error_occurred {error_message, severity, provider_error{kind}}`, with `details`;
/// `kind` is Codex's own name for the cause and the HTTP status, when known.
pub(super) fn emit_error(
    out: &mut Out<'_>,
    run: Option<&str>,
    (kind, status): (&str, Option<u64>),
    message: &str,
    severity: &str,
    details: Option<Value>,
) {
    let data = ProviderError::from_provider(out.provider(), kind, status, message)
        .data_object(&[("severity", &severity)], details);
    out.emit_data(EventType::ErrorOccurred, run, data);
}

/// The counts of `token_usage_updated`: the key each is written as, and the two spellings it
/// is read from (`exec`'s snake_case, the app-server's camelCase), in the order of the keys
/// written.
const USAGE_KEYS: [(&str, &str, &str); 6] = [
    (
        "cache_creation_input_tokens",
        "cache_write_input_tokens",
        "cacheWriteInputTokens",
    ),
    (
        "cache_read_input_tokens",
        "cached_input_tokens",
        "cachedInputTokens",
    ),
    ("input_tokens", "input_tokens", "inputTokens"),
    ("output_tokens", "output_tokens", "outputTokens"),
    (
        "reasoning_output_tokens",
        "reasoning_output_tokens",
        "reasoningOutputTokens",
    ),
    ("total_tokens", "total_tokens", "totalTokens"),
];

/// The counts of a `{input_tokens, cached_input_tokens, …}` object in either spelling, each
/// as the key it is written as, in key order.
fn usage_counts<F: Fields + ?Sized>(u: &F) -> impl Iterator<Item = (&'static str, &Value)> {
    USAGE_KEYS.iter().filter_map(move |&(to, snake, camel)| {
        Some((to, u.either(snake, camel).filter(|n| n.is_number())?))
    })
}

/// `token_usage_updated` data from a usage object; `None` when it carries no counts.
pub(super) fn usage_data(u: &Value) -> Option<Value> {
    let data: Map<String, Value> = usage_counts(u)
        .map(|(key, n)| (key.to_owned(), n.clone()))
        .collect();
    (!data.is_empty()).then_some(Value::Object(data))
}

/// [`usage_data`] written as its text, with no map.
fn usage_object<F: Fields + ?Sized>(u: &F) -> Option<JsonObject> {
    let mut counts = usage_counts(u).peekable();
    counts.peek()?;
    let writer = ObjectWriter::with_capacity(192);
    Some(counts.fold(writer, |w, (key, n)| w.field(key, n)).finish())
}

/// The `usage` of a `turn.completed` line read typed, for the fields [`USAGE_KEYS`] reads
/// ([`fast::Slots`]). Anything but an object has no counts, as `Value::get` finds none in it.
type UsageRead = Slots<UsageKeys, { 2 * USAGE_KEYS.len() }>;

struct UsageKeys;

impl SlotKeys for UsageKeys {
    /// Where `key` is kept: `2 * i` for the snake_case spelling of `USAGE_KEYS[i]`, `2 * i + 1`
    /// for its camelCase one.
    fn slot(key: &str) -> Option<usize> {
        USAGE_KEYS
            .iter()
            .enumerate()
            .find_map(|(i, &(_, snake, camel))| match key {
                _ if key == snake => Some(2 * i),
                _ if key == camel => Some(2 * i + 1),
                _ => None,
            })
    }
}

/// The tool-like item types of both formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ToolKind {
    Command,
    FileChange,
    Mcp,
    WebSearch,
    Collab,
    Dynamic,
    ImageView,
    ImageGeneration,
}

/// The tool kind of an item type, in either spelling.
pub(super) fn tool_kind(ty: &str) -> Option<ToolKind> {
    Some(match ty {
        "command_execution" | "commandExecution" => ToolKind::Command,
        "file_change" | "fileChange" => ToolKind::FileChange,
        "mcp_tool_call" | "mcpToolCall" => ToolKind::Mcp,
        "web_search" | "webSearch" => ToolKind::WebSearch,
        "collab_tool_call" | "collabToolCall" | "collabAgentToolCall" => ToolKind::Collab,
        "dynamicToolCall" => ToolKind::Dynamic,
        "imageView" => ToolKind::ImageView,
        "imageGeneration" => ToolKind::ImageGeneration,
        _ => return None,
    })
}

/// A field of a tool item as it is written: a string borrowed from the line, or a `Value`.
#[derive(Clone, Copy)]
pub(super) enum FieldJson<'i> {
    Str(&'i str),
    Value(&'i Value),
}

impl FieldJson<'_> {
    fn non_null(self) -> Option<Self> {
        (!matches!(self, FieldJson::Value(Value::Null))).then_some(self)
    }

    fn to_value(self) -> Value {
        match self {
            FieldJson::Str(s) => Value::String(s.to_owned()),
            FieldJson::Value(v) => v.clone(),
        }
    }
}

impl ToJson for FieldJson<'_> {
    fn write_json(&self, out: &mut String) {
        match *self {
            FieldJson::Str(s) => s.write_json(out),
            FieldJson::Value(v) => v.write_json(out),
        }
    }
}

/// A tool item's input, from its fields: one source for the `Value` a started tool keeps
/// ([`ToolInput::to_value`]) and the text a tool call's end writes straight from the line
/// (its [`ToJson`], no map).
enum ToolInput<'i> {
    /// A field of the item as the whole input (`{}` when absent or null).
    Whole(Option<FieldJson<'i>>),
    /// An object of the fields that are present and not null; keys in order.
    Object([(&'static str, Option<FieldJson<'i>>); 3]),
}

impl<'i> ToolInput<'i> {
    fn of<F: Fields + ?Sized>(kind: ToolKind, item: &'i F) -> ToolInput<'i> {
        let field = |key| item.json(key).and_then(FieldJson::non_null);
        let either = |snake, camel| item.either(snake, camel).map(FieldJson::Value);
        let object = ToolInput::Object;
        match kind {
            ToolKind::Command => object([("command", field("command")), ("cwd", field("cwd")), NO]),
            ToolKind::FileChange => {
                // `changes` as it is (null included), `[]` when absent.
                let changes = item.json("changes");
                let changes = changes.unwrap_or(FieldJson::Value(&EMPTY_LIST));
                object([("changes", Some(changes)), NO, NO])
            }
            ToolKind::Mcp | ToolKind::Dynamic => ToolInput::Whole(field("arguments")),
            ToolKind::WebSearch => {
                object([("action", field("action")), ("query", field("query")), NO])
            }
            ToolKind::Collab => object([
                ("model", field("model")),
                ("prompt", field("prompt")),
                (
                    "receiver_thread_ids",
                    either("receiver_thread_ids", "receiverThreadIds"),
                ),
            ]),
            ToolKind::ImageView => object([("path", field("path")), NO, NO]),
            ToolKind::ImageGeneration => object([
                ("revised_prompt", either("revised_prompt", "revisedPrompt")),
                NO,
                NO,
            ]),
        }
    }

    fn to_value(&self) -> Value {
        match self {
            ToolInput::Whole(Some(value)) => value.to_value(),
            ToolInput::Whole(None) => Value::Object(Map::new()),
            ToolInput::Object(fields) => Value::Object(
                fields
                    .iter()
                    .filter_map(|(k, v)| Some(((*k).to_owned(), v.as_ref()?.to_value())))
                    .collect(),
            ),
        }
    }
}

/// An unused slot of [`ToolInput::Object`].
const NO: (&str, Option<FieldJson<'_>>) = ("", None);

static EMPTY_LIST: Value = Value::Array(Vec::new());

impl ToJson for ToolInput<'_> {
    fn write_json(&self, out: &mut String) {
        match self {
            ToolInput::Whole(Some(value)) => value.write_json(out),
            ToolInput::Whole(None) => out.push_str("{}"),
            ToolInput::Object(fields) => {
                out.push('{');
                let mut first = true;
                for (key, value) in fields {
                    if let Some(value) = value {
                        if !first {
                            out.push(',');
                        }
                        first = false;
                        crate::core::json::write_str(out, key);
                        out.push(':');
                        value.write_json(out);
                    }
                }
                out.push('}');
            }
        }
    }
}

/// The tool name of a tool item.
pub(super) fn tool_name<F: Fields + ?Sized>(kind: ToolKind, item: &F) -> String {
    match kind {
        ToolKind::Command => "shell".to_owned(),
        ToolKind::FileChange => "apply_patch".to_owned(),
        ToolKind::Mcp => {
            let server = item.str("server").unwrap_or("mcp");
            let tool = item.str("tool").unwrap_or("unknown");
            format!("{server}.{tool}")
        }
        ToolKind::WebSearch => "web_search".to_owned(),
        ToolKind::Collab => item.str("tool").unwrap_or("collab").to_owned(),
        ToolKind::Dynamic => {
            let tool = item.str("tool").unwrap_or("unknown");
            match item.str("namespace") {
                Some(ns) if !ns.is_empty() => format!("{ns}.{tool}"),
                _ => tool.to_owned(),
            }
        }
        ToolKind::ImageView => "view_image".to_owned(),
        ToolKind::ImageGeneration => "image_generation".to_owned(),
    }
}

/// The tool name and input of a tool item.
pub(super) fn tool_call<F: Fields + ?Sized>(kind: ToolKind, item: &F) -> (String, Value) {
    (tool_name(kind, item), ToolInput::of(kind, item).to_value())
}

/// A tool call's `tool_output`: a string of the item (not copied), or a value.
pub(super) enum Output<'a> {
    Str(&'a str),
    Value(Value),
}

impl ToJson for Output<'_> {
    fn write_json(&self, out: &mut String) {
        match self {
            Output::Str(s) => s.write_json(out),
            Output::Value(v) => v.write_json(out),
        }
    }
}

/// The fields a tool call's end adds beside its output, each when the item has it (not null),
/// borrowed from the item.
#[derive(Default)]
pub(super) struct ToolExtra<'i> {
    duration_ms: Option<&'i Value>,
    exit_code: Option<&'i Value>,
    status: Option<&'i str>,
    structured_content: Option<&'i Value>,
}

/// How a tool call ended: `Ok(tool_output)` or `Err(error)`, plus extra data fields.
pub(super) fn tool_result<F: Fields + ?Sized>(
    kind: ToolKind,
    item: &F,
) -> (Result<Option<Output<'_>>, String>, ToolExtra<'_>) {
    let status = item.str("status").unwrap_or("completed");
    let failed = matches!(status, "failed" | "declined");
    let mut extra = ToolExtra {
        status: (status != "completed").then_some(status),
        ..ToolExtra::default()
    };
    let result = match kind {
        ToolKind::Command => {
            let output = item
                .either_str("aggregated_output", "aggregatedOutput")
                .unwrap_or("");
            let code = item.either("exit_code", "exitCode").and_then(Value::as_i64);
            extra.exit_code = item.either("exit_code", "exitCode");
            extra.duration_ms = item.either("duration_ms", "durationMs");
            if failed || code.is_some_and(|c| c != 0) {
                Err(if !output.is_empty() {
                    output.to_owned()
                } else if status == "declined" {
                    "command declined".to_owned()
                } else if let Some(c) = code {
                    format!("command exited with code {c}")
                } else {
                    "command failed".to_owned()
                })
            } else {
                Ok(Some(Output::Str(output)))
            }
        }
        ToolKind::FileChange => {
            if failed {
                Err(format!("apply_patch {status}"))
            } else {
                let summary: Vec<String> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|changes| {
                        changes
                            .iter()
                            .map(|c| {
                                let kind = c
                                    .get("kind")
                                    .and_then(|k| k.as_str().or_else(|| str_field(k, "type")))
                                    .unwrap_or("update");
                                format!("{kind} {}", str_field(c, "path").unwrap_or(""))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Some(Output::Value(json!(summary.join("\n")))))
            }
        }
        ToolKind::Mcp => {
            extra.duration_ms = item.either("duration_ms", "durationMs");
            let error = item.get("error").filter(|e| !e.is_null());
            if failed || error.is_some() {
                let message = error
                    .and_then(|e| str_field(e, "message").or_else(|| e.as_str()))
                    .unwrap_or("MCP tool call failed");
                Err(message.to_owned())
            } else {
                let result = item.get("result").filter(|r| !r.is_null());
                if let Some(r) = result {
                    extra.structured_content = field(r, "structured_content", "structuredContent");
                }
                let output =
                    result.map(|r| text_of_blocks(r.get("content"), "text").unwrap_or(r.clone()));
                Ok(output.map(Output::Value))
            }
        }
        ToolKind::WebSearch | ToolKind::ImageView => {
            if failed {
                Err(format!("tool call {status}"))
            } else {
                Ok(None)
            }
        }
        ToolKind::Collab => {
            let states = item.either("agents_states", "agentsStates");
            if failed {
                let messages: Vec<&str> = states
                    .and_then(Value::as_object)
                    .map(|m| m.values().filter_map(|s| str_field(s, "message")).collect())
                    .unwrap_or_default();
                Err(if messages.is_empty() {
                    "collab tool call failed".to_owned()
                } else {
                    messages.join("\n")
                })
            } else {
                Ok(states.cloned().map(Output::Value))
            }
        }
        ToolKind::Dynamic => {
            extra.duration_ms = item.either("duration_ms", "durationMs");
            let text = text_of_blocks(item.either("content_items", "contentItems"), "inputText");
            if failed || item.get("success").and_then(Value::as_bool) == Some(false) {
                Err(text
                    .and_then(|t| t.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "dynamic tool call failed".to_owned()))
            } else {
                Ok(text.map(Output::Value))
            }
        }
        ToolKind::ImageGeneration => {
            if failed {
                Err("image generation failed".to_owned())
            } else {
                Ok(item
                    .either("saved_path", "savedPath")
                    .cloned()
                    .map(Output::Value))
            }
        }
    };
    (result, extra)
}

/// The texts of the `{type: <text_type>, text}` blocks of a content array, joined, when
/// there is at least one.
fn text_of_blocks(content: Option<&Value>, text_type: &str) -> Option<Value> {
    let texts: Vec<&str> = content?
        .as_array()?
        .iter()
        .filter(|b| str_field(b, "type") == Some(text_type))
        .filter_map(|b| str_field(b, "text"))
        .collect();
    (!texts.is_empty()).then(|| json!(texts.join("\n")))
}

/// What a streamed or whole text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    Message,
    Plan,
    Reasoning,
}

impl Stream {
    fn events(self) -> (EventType, EventType) {
        match self {
            Stream::Message | Stream::Plan => {
                (EventType::MessageStreamed, EventType::MessageReceived)
            }
            Stream::Reasoning => (EventType::ReasoningStreamed, EventType::ReasoningReceived),
        }
    }

    fn base(self, id: &str) -> Map<String, Value> {
        let mut data = Map::new();
        data.insert("message_id".into(), json!(id));
        if self != Stream::Reasoning {
            data.insert("role".into(), json!("assistant"));
        }
        if self == Stream::Plan {
            data.insert("kind".into(), json!("plan"));
        }
        data
    }

    /// [`Stream::base`] with `text` as `key` (`content` or `delta`), written with no map.
    fn write(self, id: &str, key: &'static str, text: &str) -> JsonObject {
        let kind = (self == Stream::Plan).then_some("plan");
        text_data(
            key,
            text,
            id,
            kind,
            (self != Stream::Reasoning).then_some("assistant"),
        )
    }
}

/// The open turn, its open tool calls and its half-streamed texts. Small, keyed by id,
/// cleared when the turn ends.
#[derive(Default)]
pub(super) struct TurnState {
    /// Shared with the run's events (one copy of the id per run).
    pub(super) run: Option<Arc<str>>,
    /// The open tool calls, with the bytes of aggregated output already reported
    /// (`item.updated`), for `output_delta`.
    tools: OpenTools<usize>,
    streams: Vec<(Stream, String)>,
}

impl TurnState {
    /// Starts a run: `run_started` with `data`.
    pub(super) fn open_run(&mut self, out: &mut Out<'_>, data: Map<String, Value>) -> Arc<str> {
        let run: Arc<str> = Arc::from(out.new_run_id());
        out.emit(EventType::RunStarted, Some(&run), Value::Object(data));
        self.run = Some(Arc::clone(&run));
        run
    }

    /// The open run, or a new one.
    pub(super) fn ensure_run(&mut self, out: &mut Out<'_>) -> Arc<str> {
        match &self.run {
            Some(r) => r.clone(),
            None => self.open_run(out, Map::new()),
        }
    }

    /// Leaves the open run (if any) without a terminal, closing its streamed texts.
    pub(super) fn abandon(&mut self, out: &mut Out<'_>) {
        self.close_streams(out);
        self.tools.clear();
        self.run = None;
    }

    /// Ends the open run with `kind` (a run terminal) after closing what is still open:
    /// streamed texts as discarded, tool calls as cancelled ([`OpenTools::cancel_all`]).
    pub(super) fn end_run(&mut self, out: &mut Out<'_>, kind: EventType, data: JsonObject) {
        let Some(run) = self.run.clone() else {
            return;
        };
        self.close_streams(out);
        self.tools.cancel_all(out, &run, kind);
        out.emit_data(kind, Some(&run), data);
        self.run = None;
    }

    /// Closes every streamed text that never completed with a discarded whole event.
    pub(super) fn close_streams(&mut self, out: &mut Out<'_>) {
        let run = self.run.clone();
        for (stream, id) in std::mem::take(&mut self.streams) {
            let mut data = stream.base(&id);
            data.insert("content".into(), json!(""));
            data.insert("discarded".into(), json!(true));
            out.emit(stream.events().1, run.as_deref(), Value::Object(data));
        }
    }

    /// One streamed chunk of a message, plan or reasoning `id`.
    pub(super) fn stream(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        stream: Stream,
        id: &str,
        delta: &str,
        extra: Map<String, Value>,
    ) {
        if !self.streams.iter().any(|(s, i)| *s == stream && i == id) {
            self.streams.push((stream, id.to_owned()));
        }
        let kind = stream.events().0;
        if extra.is_empty() {
            let data = stream.write(id, "delta", delta);
            return out.emit_data(kind, Some(run), data);
        }
        let mut data = stream.base(id);
        data.insert("delta".into(), json!(delta));
        data.extend(extra);
        out.emit(kind, Some(run), Value::Object(data));
    }

    /// True when `id` streamed chunks that are not yet closed.
    pub(super) fn is_streaming(&self, stream: Stream, id: &str) -> bool {
        self.streams.iter().any(|(s, i)| *s == stream && i == id)
    }

    /// The whole text of a message, plan or reasoning `id`; closes its stream.
    pub(super) fn whole(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        stream: Stream,
        id: &str,
        text: &str,
        extra: Map<String, Value>,
    ) {
        self.streams.retain(|(s, i)| !(*s == stream && i == id));
        let kind = stream.events().1;
        if extra.is_empty() {
            let data = stream.write(id, "content", text);
            return out.emit_data(kind, Some(run), data);
        }
        let mut data = stream.base(id);
        data.insert("content".into(), json!(text));
        data.extend(extra);
        out.emit(kind, Some(run), Value::Object(data));
    }

    fn emit_started(out: &mut Out<'_>, run: &str, id: &str, name: &str, input: &impl ToJson) {
        let data = tool_started_data(id, name, input);
        let kind = EventType::ToolCallStarted;
        out.emit_object(kind, Some(run), data, Some(id), JsonObject::new());
    }

    /// The item of a tool call started (again: a repeat only refreshes the input).
    pub(super) fn tool_started<F: Fields + ?Sized>(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        id: &str,
        kind: ToolKind,
        item: &F,
    ) {
        let (name, input) = tool_call(kind, item);
        if let Some(open) = self.tools.get_mut(id) {
            open.name = json!(name);
            open.input = input;
            return out.ignore();
        }
        Self::emit_started(out, run, id, &name, &input);
        self.tools.open(id, json!(name), input, 0);
    }

    /// The item of a tool call was updated: `tool_call_updated {status, output_delta}`.
    fn tool_updated<F: Fields + ?Sized>(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        id: &str,
        kind: ToolKind,
        item: &F,
    ) {
        if !self.tools.is_open(id) {
            self.tool_started(out, run, id, kind, item);
        }
        let Some(open) = self.tools.get_mut(id) else {
            return;
        };
        let mut delta = None;
        if let Some(output) = item
            .either("aggregated_output", "aggregatedOutput")
            .and_then(Value::as_str)
        {
            delta = output.get(open.extra..).filter(|d| !d.is_empty());
            open.extra = output.len();
        }
        let data = ObjectWriter::with_capacity(64 + id.len() + delta.map_or(0, str::len))
            .field_if("output_delta", delta)
            .field_if("status", item.get("status").filter(|v| !v.is_null()))
            .field("tool_call_id", id)
            .finish();
        out.emit_object(
            EventType::ToolCallUpdated,
            Some(run),
            data,
            Some(id),
            JsonObject::new(),
        );
    }

    /// Progress on an open tool call (`data` gets the `tool_call_id`); ignored when the
    /// call is not open.
    pub(super) fn tool_progress(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        id: &str,
        mut data: Map<String, Value>,
    ) {
        let Some(open) = self.tools.get_mut(id) else {
            return out.ignore();
        };
        if let Some(delta) = data.get("output_delta").and_then(Value::as_str) {
            open.extra += delta.len();
        }
        data.insert("tool_call_id".into(), json!(id));
        out.emit_full(
            EventType::ToolCallUpdated,
            Some(run),
            Value::Object(data),
            Some(id),
            Map::new(),
        );
    }

    /// The input of an open tool call.
    pub(super) fn tool_input(&self, id: &str) -> Option<&Value> {
        self.tools.get(id).map(|t| &t.input)
    }

    /// Replaces the input of an open tool call.
    pub(super) fn set_tool_input(&mut self, id: &str, input: Value) {
        if let Some(open) = self.tools.get_mut(id) {
            open.input = input;
        }
    }

    /// The item of a tool call completed: `tool_call_completed` or `tool_call_failed`,
    /// preceded by `tool_call_started` when the call was never seen starting.
    pub(super) fn tool_completed<F: Fields + ?Sized>(
        &mut self,
        out: &mut Out<'_>,
        run: &str,
        id: &str,
        kind: ToolKind,
        item: &F,
    ) {
        let name = tool_name(kind, item);
        let input = ToolInput::of(kind, item);
        if self.tools.close(id).is_none() {
            Self::emit_started(out, run, id, &name, &input);
        }
        let (result, extra) = tool_result(kind, item);
        let (kind, output, error) = match &result {
            Ok(output) => (EventType::ToolCallCompleted, output.as_ref(), None),
            Err(error) => (EventType::ToolCallFailed, None, Some(error)),
        };
        let data = ObjectWriter::with_capacity(256)
            .field_if("duration_ms", extra.duration_ms)
            .field_if("error", error)
            .field_if("exit_code", extra.exit_code)
            .field_if("status", extra.status)
            .field_if("structured_content", extra.structured_content)
            .field("tool_call_id", id)
            .field("tool_input", &input)
            .field("tool_name", &name)
            .field_if("tool_output", output)
            .finish();
        out.emit_object(kind, Some(run), data, Some(id), JsonObject::new());
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::normalize::tests::render;
    use crate::core::normalize::{normalize, Config, Format};
    use crate::core::time::Timestamp;

    use crate::core::normalize::tests::check;

    fn events(input: &str) -> Vec<crate::core::event::Event> {
        normalize(
            Some(Format::Codex),
            Config::new("s1"),
            input.as_bytes(),
            Timestamp::EPOCH,
        )
        .events
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_simple_turn() {
        check(
            Format::Codex,
            r#"{"type":"thread.started","thread_id":"th_1"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Thinking**"}}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"4"}}
{"type":"turn.completed","usage":{"input_tokens":2946,"cached_input_tokens":10,"output_tokens":7,"reasoning_output_tokens":3,"cache_write_input_tokens":5}}
"#,
            expect![[r#"
                  1 -- session_started
                  2 t1 run_started
                  3 t1 reasoning_received content="**Thinking**"
                  4 t1 message_received role="assistant" content="4"
                  5 t1 token_usage_updated input_tokens=2946 output_tokens=7
                  6 t1 run_completed
            "#]],
        );
        let ev = events(
            r#"{"type":"thread.started","thread_id":"th_1"}
{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":10,"output_tokens":7,"reasoning_output_tokens":3,"cache_write_input_tokens":5}}"#,
        );
        assert_eq!(ev[0].data_str("provider_session_id"), Some("th_1"));
        assert_eq!(ev[0].run_id(), None);
        let usage = ev[2].data();
        assert_eq!(usage["cache_read_input_tokens"], 10);
        assert_eq!(usage["cache_creation_input_tokens"], 5);
        assert_eq!(usage["reasoning_output_tokens"], 3);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn messages_keep_their_id_and_phase() {
        let ev = events(
            r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","phase":"commentary","text":"Looking."}}"#,
        );
        assert_eq!(ev[0].kind().as_str(), "run_started");
        assert_eq!(ev[1].data_str("message_id"), Some("item_1"));
        assert_eq!(ev[1].data_str("phase"), Some("commentary"));
        assert_eq!(ev[1].run_id(), ev[0].run_id());
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn commands_succeed_fail_and_are_declined() {
        check(
            Format::Codex,
            r#"{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.updated","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\n","exit_code":null,"status":"in_progress"}}
{"type":"item.updated","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\nb\n","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\nb\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"rm -rf /","aggregated_output":"","exit_code":null,"status":"declined"}}
{"type":"item.completed","item":{"id":"item_4","type":"command_execution","command":"pytest","aggregated_output":"F\n","exit_code":1,"status":"failed"}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="shell" tool_call_id="item_1" tool_input={"command":"bash -lc ls"}
                3 t1 tool_call_updated tool_call_id="item_1" status="in_progress"
                4 t1 tool_call_updated tool_call_id="item_1" status="in_progress"
                5 t1 tool_call_completed tool_name="shell" tool_call_id="item_1" tool_input={"command":"bash -lc ls"} tool_output="a\nb\n"
                6 t1 tool_call_started tool_name="shell" tool_call_id="item_2" tool_input={"command":"false"}
                7 t1 tool_call_failed tool_name="shell" tool_call_id="item_2" tool_input={"command":"false"} error="command exited with code 1"
                8 t1 tool_call_started tool_name="shell" tool_call_id="item_3" tool_input={"command":"rm -rf /"}
                9 t1 tool_call_failed tool_name="shell" tool_call_id="item_3" tool_input={"command":"rm -rf /"} error="command declined" status="declined"
                10 t1 tool_call_started tool_name="shell" tool_call_id="item_4" tool_input={"command":"pytest"}
                11 t1 tool_call_failed tool_name="shell" tool_call_id="item_4" tool_input={"command":"pytest"} error="F\n" status="failed"
            "#]],
        );
        let ev = events(
            r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"","status":"in_progress"}}
{"type":"item.updated","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"a\n","status":"in_progress"}}
{"type":"item.updated","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"a\nb\n","status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"a\nb\n","exit_code":0,"status":"completed"}}"#,
        );
        assert_eq!(ev[2].data_str("output_delta"), Some("a\n"));
        assert_eq!(ev[3].data_str("output_delta"), Some("b\n"));
        assert_eq!(ev[4].data()["exit_code"], 0);
        assert!(ev[1..].iter().all(|e| e.correlation_id() == Some("item_1")));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn file_changes_mcp_calls_and_collab_calls() {
        check(
            Format::Codex,
            r#"{"type":"item.completed","item":{"id":"item_3","type":"file_change","changes":[{"path":"src/a.py","kind":"update"},{"path":"README.md","kind":"add"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"src/a.py","kind":"update"}],"status":"failed"}}
{"type":"item.started","item":{"id":"item_5","type":"mcp_tool_call","server":"github","tool":"search_issues","arguments":{"q":"x"},"result":null,"error":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_5","type":"mcp_tool_call","server":"github","tool":"search_issues","arguments":{"q":"x"},"result":{"content":[{"type":"text","text":"Found 3."}],"structured_content":{"n":3}},"error":null,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_6","type":"mcp_tool_call","server":"github","tool":"search_issues","arguments":null,"result":null,"error":{"message":"tool timeout"},"status":"failed"}}
{"type":"item.completed","item":{"id":"item_7","type":"collab_tool_call","tool":"spawn_agent","sender_thread_id":"main","receiver_thread_ids":["w"],"prompt":"Find tests","agents_states":{"w":{"status":"errored","message":"boom"}},"status":"failed"}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="apply_patch" tool_call_id="item_3" tool_input={"changes":[{"kind":"update","path":"src/a.py"},{"kind":"add…
                3 t1 tool_call_completed tool_name="apply_patch" tool_call_id="item_3" tool_input={"changes":[{"kind":"update","path":"src/a.py"},{"kind":"add… tool_output="update src/a.py\nadd README.md"
                4 t1 tool_call_started tool_name="apply_patch" tool_call_id="item_4" tool_input={"changes":[{"kind":"update","path":"src/a.py"}]}
                5 t1 tool_call_failed tool_name="apply_patch" tool_call_id="item_4" tool_input={"changes":[{"kind":"update","path":"src/a.py"}]} error="apply_patch failed" status="failed"
                6 t1 tool_call_started tool_name="github.search_issues" tool_call_id="item_5" tool_input={"q":"x"}
                7 t1 tool_call_completed tool_name="github.search_issues" tool_call_id="item_5" tool_input={"q":"x"} tool_output="Found 3."
                8 t1 tool_call_started tool_name="github.search_issues" tool_call_id="item_6" tool_input={}
                9 t1 tool_call_failed tool_name="github.search_issues" tool_call_id="item_6" tool_input={} error="tool timeout" status="failed"
                10 t1 tool_call_started tool_name="spawn_agent" tool_call_id="item_7" tool_input={"prompt":"Find tests","receiver_thread_ids":["w"]}
                11 t1 tool_call_failed tool_name="spawn_agent" tool_call_id="item_7" tool_input={"prompt":"Find tests","receiver_thread_ids":["w"]} error="boom" status="failed"
            "#]],
        );
        let ev = events(
            r#"{"type":"item.completed","item":{"id":"item_5","type":"mcp_tool_call","server":"s","tool":"t","arguments":{},"result":{"content":[{"type":"text","text":"ok"}],"structured_content":{"n":3}},"error":null,"status":"completed"}}"#,
        );
        assert_eq!(ev[2].data()["structured_content"]["n"], 3);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn web_search_with_a_duplicate_id_key_keeps_one_stable_id() {
        // Both `id`s are flattened into the item; serde_json keeps the last one.
        check(
            Format::Codex,
            r#"{"type":"item.started","item":{"id":"item_2","type":"web_search","id":"ws_abc","query":"rust serde"}}
{"type":"item.completed","item":{"id":"item_2","type":"web_search","id":"ws_abc","query":"rust serde","action":{"type":"search","query":"rust serde"}}}
"#,
            expect![[r#"
                  1 t1 run_started
                  2 t1 tool_call_started tool_name="web_search" tool_call_id="ws_abc" tool_input={"query":"rust serde"}
                  3 t1 tool_call_completed tool_name="web_search" tool_call_id="ws_abc" tool_input={"action":{"query":"rust serde","type":"search"},"query":"ru…
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn todo_lists_errors_and_unknown_items() {
        check(
            Format::Codex,
            r#"{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_0","type":"todo_list","items":[{"text":"Inspect","completed":false},{"text":"Test","completed":false}]}}
{"type":"item.completed","item":{"id":"item_0","type":"todo_list","items":[{"text":"Inspect","completed":true},{"text":"Test","completed":false}]}}
{"type":"item.completed","item":{"id":"item_1","type":"error","message":"command output truncated"}}
{"type":"item.completed","item":{"id":"item_2","type":"future_item","foo":"bar"}}
{"type":"item.completed","item":{"type":"reasoning"}}
{"type":"item.started","item":{"id":"item_3","type":"agent_message","text":""}}
{"type":"mystery"}
{"no_type":1}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 todo_updated items=[2 items]
                3 t1 todo_updated items=[2 items]
                4 t1 error_occurred error_message="command output truncated" provider_error.kind="agent_error"
                ! line 5: unknown_type: unknown item type "future_item"
                ! line 6: missing_field: missing field `item.id`
                ! line 8: unknown_type: unknown type "mystery"
                ! line 9: missing_field: missing field `type`
            "#]],
        );
        let ev = events(
            r#"{"type":"item.completed","item":{"id":"item_0","type":"todo_list","items":[{"text":"Inspect","completed":true},{"text":"Test","completed":false}]}}"#,
        );
        assert_eq!(
            ev[1].data()["items"],
            serde_json::json!([{"text":"Inspect","status":"completed"},{"text":"Test","status":"pending"}])
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn failed_turns_stream_errors_and_turns_opened_implicitly() {
        check(
            Format::Codex,
            r#"{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/1 (stream disconnected)"}
{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}
{"type":"error","message":"exited non-zero"}
{"type":"turn.failed","error":{}}
{"type":"turn.completed","usage":{}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 error_occurred error_message="Reconnecting... 1/1 (stream disconnected)" provider_error.kind="connection_error"
                3 t1 run_failed error_message="stream disconnected before completion" provider_error.kind="connection_error"
                4 -- error_occurred error_message="exited non-zero" provider_error.kind="agent_error"
                5 t2 run_started
                6 t2 run_failed error_message="turn failed" provider_error.kind="agent_error"
                7 t3 run_started
                8 t3 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn open_tools_are_cancelled_at_turn_end_and_plans_stream() {
        check(
            Format::Codex,
            r#"{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"sleep 99","aggregated_output":"","status":"in_progress"}}
{"type":"item.plan.delta","item_id":"item_2","delta":"1. Do"}
{"type":"item.plan.delta","item_id":"item_2","delta":" it"}
{"type":"item.completed","item":{"id":"item_2","type":"plan","text":"1. Do it"}}
{"type":"item.plan.delta","item_id":"item_3","delta":"half"}
{"type":"turn.failed","error":{"message":"aborted"}}
{"type":"turn.started"}
{"type":"item.plan.delta","item_id":"item_4","delta":"cut off"}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="shell" tool_call_id="item_1" tool_input={"command":"sleep 99"}
                3 t1 message_streamed role="assistant" delta="1. Do"
                4 t1 message_streamed role="assistant" delta=" it"
                5 t1 message_received role="assistant" content="1. Do it"
                6 t1 message_streamed role="assistant" delta="half"
                7 t1 message_received role="assistant" content="" discarded=true
                8 t1 tool_call_cancelled tool_name="shell" tool_call_id="item_1" tool_input={"command":"sleep 99"} reason="run_failed"
                9 t1 run_failed error_message="aborted" provider_error.kind="agent_error"
                10 t2 run_started
                11 t2 message_streamed role="assistant" delta="cut off"
                12 t2 message_received role="assistant" content="" discarded=true
            "#]],
        );
        let ev = events(r#"{"type":"item.plan.delta","item_id":"item_4","delta":"cut off"}"#);
        assert_eq!(ev[2].data()["discarded"], true);
        assert_eq!(ev[2].data_str("kind"), Some("plan"));
        assert_eq!(ev[2].data_str("message_id"), Some("item_4"));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn user_input_requests() {
        check(
            Format::Codex,
            r#"{"type":"request_user_input","id":"turn_1","call_id":"call_9","questions":[{"id":"q","question":"Which?"}]}
"#,
            expect![[r#"
                  1 t1 run_started
                  2 t1 tool_approval_requested tool_name="request_user_input" tool_call_id="call_9" tool_input={"questions":[{"id":"q","question":"Which?"}]} request_id="call_9"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_tool_input_writes_the_text_of_its_value() {
        use super::{ToolInput, ToolKind};
        use crate::core::json::to_json;
        use serde_json::json;

        let kinds = [
            ToolKind::Command,
            ToolKind::FileChange,
            ToolKind::Mcp,
            ToolKind::WebSearch,
            ToolKind::Collab,
            ToolKind::Dynamic,
            ToolKind::ImageView,
            ToolKind::ImageGeneration,
        ];
        let items = [
            json!({}),
            json!({"command": "ls", "cwd": "/tmp", "changes": null, "arguments": null}),
            json!({"command": null, "cwd": 1, "changes": [{"path": "a"}], "arguments": "x"}),
            json!({"query": "q", "action": {"type": "search"}, "arguments": {"b": 1, "a": [2]}}),
            json!({"prompt": "p", "model": "m", "receiver_thread_ids": null,
                   "receiverThreadIds": ["t"], "path": "/i.png", "revisedPrompt": "r"}),
            json!({"prompt": null, "model": "m", "receiver_thread_ids": ["s"],
                   "revised_prompt": null, "revisedPrompt": null, "path": null}),
        ];
        let mut objects = 0;
        for kind in kinds {
            for item in &items {
                let input = ToolInput::of(kind, item);
                let value = input.to_value();
                objects += usize::from(value.as_object().is_some_and(|m| m.len() > 1));
                assert_eq!(to_json(&input), to_json(&value), "{item}");
            }
        }
        // Objects of several keys, whose order the writer must get right.
        assert!(objects >= 4, "{objects}");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn detection_reads_exec_lines() {
        let out = render(None, br#"{"type":"thread.started","thread_id":"t"}"#);
        assert!(out.contains("session_started"));
    }
}
