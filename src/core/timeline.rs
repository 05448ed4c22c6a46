//! The timeline projection: one session's canonical events in, a UI-ready list of [`Item`]s
//! out, plus the compact [`Change`]s a client needs to mirror that list.
//!
//! Driving rule: feed every event of the session to [`Timeline::handle_event`], in log order,
//! then call [`Timeline::drain`] whenever the client should catch up (after each frame or
//! batch, not necessarily after each event). Applying the drained changes in order to a copy
//! of the list that was in effect at the previous drain yields [`Timeline::items`] exactly.
//!
//! Invariants, each one written so that nothing here slows down as a session grows (the
//! reason AG-UI and paseo clients turn quadratic, see `reference/anchors.md`):
//! - Items are only ever appended, never removed or reordered: an index names one item for
//!   the life of the timeline, so a change addresses it by index and nothing is searched.
//! - Handling one event is O(1) amortized plus the size of what it carries: message, tool
//!   call, approval and run ids map straight to item indices; text deltas are appended in
//!   place. No event scans, clones or rebuilds the list.
//! - [`Timeline::drain`] visits only the items touched since the previous drain, and emits at
//!   most one change per item: an item inserted in that window is sent once, in its final
//!   state; several appends to one text become one [`Change::AppendText`] with just the new
//!   text; anything else becomes one [`Change::Update`] with the whole (single) item.
//! - Idempotent: an event whose sequence is not above the last one applied (when it has a
//!   sequence), or whose id was already applied, changes nothing. Replaying the log from any
//!   cursor, duplicated or re-chunked, leaves the projection as it was.
//! - A run terminal closes what the run left open: its streaming texts stop streaming and its
//!   running tool calls become `failed` (run failed or timed out) or `cancelled` (otherwise,
//!   since no result ever came); a session terminal does the same for every run.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;
use std::mem;

use serde::de::MapAccess;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event::EventType;
use super::event_ref::EventView;
use super::hash::{FastMap, FastSet};
use super::json::{
    json_fields, json_names, json_struct, json_write, json_write_names, json_write_tagged, to_json,
    FromJson, JsonError, Reader, ToJson,
};
use super::normalize::excerpt;
use super::quoted::Quoted;
use super::sorted;
use super::sorted::SortedSet;
use super::tagged::{self, Tagged, Variant};

/// One entry of the timeline, as a UI shows it. Serialized with a `kind` tag (and read by
/// `core::tagged`, through its mirror `ItemFields`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    /// The user's prompt (`message_sent`).
    UserMessage {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// Assistant text, assembled from `message_streamed` and settled by `message_received`.
    AssistantMessage(Message),
    /// Reasoning text, assembled from `reasoning_streamed` and settled by `reasoning_received`.
    Reasoning(Message),
    ToolCall(ToolCall),
    /// The latest todo list of a run (`todo_updated` replaces the run's previous list).
    Todo {
        items: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// From `run_failed`, `error_occurred` and `session_failed`.
    Error {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_error: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    Approval(Approval),
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Item, D::Error> {
        tagged::deserialize(d)
    }
}

impl Tagged for Item {
    const TAG: &'static str = "kind";
    const EXPECTING: &'static str = "internally tagged enum Item";

    fn variant<'de, A: MapAccess<'de>>(tag: &str, rest: A) -> Result<Item, A::Error> {
        ItemFields::deserialize(Variant::new(tag, rest))
    }
}

/// Read by `core::json` (how the client reads snapshots and history pages): the same
/// variants and fields as serde's, the tag anywhere in the object.
impl<'a> FromJson<'a> for Item {
    fn read(r: &mut Reader<'a>) -> Result<Item, JsonError> {
        r.object()?;
        let tag = r.tag("kind")?;
        match &*tag {
            "user_message" => json_fields!(r, Item::UserMessage { text, run_id }),
            "assistant_message" => Message::fields(r).map(Item::AssistantMessage),
            "reasoning" => Message::fields(r).map(Item::Reasoning),
            "tool_call" => ToolCall::fields(r).map(Item::ToolCall),
            "todo" => json_fields!(r, Item::Todo { items, run_id }),
            "error" => json_fields!(
                r,
                Item::Error {
                    message,
                    provider_error,
                    run_id
                }
            ),
            "approval" => Approval::fields(r).map(Item::Approval),
            other => Err(r.error(format_args!(
                "unknown variant `{other}`, expected one of `user_message`, `assistant_message`, \
                 `reasoning`, `tool_call`, `todo`, `error`, `approval`"
            ))),
        }
    }
}

json_struct!(Message {
    message_id,
    text,
    streaming,
    discarded,
    run_id
});
json_struct!(ToolCall {
    tool_call_id,
    tool_name,
    input,
    status,
    output,
    error,
    title,
    parent_tool_use_id,
    run_id,
});
json_names!(ToolStatus: [Running, Completed, Failed, Cancelled]);
json_struct!(Approval {
    request_id,
    tool_name,
    input,
    status,
    tool_call_id,
    run_id
});
json_names!(ApprovalStatus: [Pending, Granted, Denied]);

// Written as serde's `Serialize` writes them (the tests compare the two).
json_write_tagged!(Item: "kind" {
    UserMessage "user_message" { text, run_id? },
    AssistantMessage "assistant_message" (Message),
    Reasoning "reasoning" (Message),
    ToolCall "tool_call" (ToolCall),
    Todo "todo" { items, run_id? },
    Error "error" { message, provider_error?, run_id? },
    Approval "approval" (Approval),
});
json_write!(Message {
    message_id?,
    text,
    streaming,
    discarded,
    run_id?
});
json_write!(ToolCall {
    tool_call_id,
    tool_name,
    input,
    status,
    output,
    error?,
    title?,
    parent_tool_use_id?,
    run_id?,
});
json_write_names!(ToolStatus);
json_write!(Approval {
    request_id,
    tool_name,
    input,
    status,
    tool_call_id?,
    run_id?
});
json_write_names!(ApprovalStatus);
json_write_tagged!(ChangeRef<'a>: "op" {
    Insert "insert" { index, item },
    AppendText "append" { index, text },
    Update "update" { index, item },
    Usage "usage" { totals },
    Approvals "approvals" { pending },
});

/// A change is written as its borrowed form is (one writer for both).
impl ToJson for Change {
    fn write_json(&self, out: &mut String) {
        ChangeRef::of(self).write_json(out);
    }
}
json_write!(Usage {
    input_tokens,
    output_tokens,
    cache_read_input_tokens,
    cache_creation_input_tokens,
    reasoning_output_tokens,
    cost_usd,
});

/// [`Item`] as serde reads an externally tagged enum: the same variants and fields, read
/// from the rest of a tagged object by `core::tagged`.
#[derive(Deserialize)]
#[serde(remote = "Item", rename_all = "snake_case")]
enum ItemFields {
    UserMessage {
        text: String,
        #[serde(default)]
        run_id: Option<String>,
    },
    AssistantMessage(Message),
    Reasoning(Message),
    ToolCall(ToolCall),
    Todo {
        items: Value,
        #[serde(default)]
        run_id: Option<String>,
    },
    Error {
        message: String,
        #[serde(default)]
        provider_error: Option<Value>,
        #[serde(default)]
        run_id: Option<String>,
    },
    Approval(Approval),
}

/// A text item: assistant message or reasoning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    pub text: String,
    /// Deltas may still come; false once settled or once its run ended.
    pub streaming: bool,
    /// The provider abandoned it: a UI hides it.
    pub discarded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub status: ToolStatus,
    /// The tool's text output: the streamed `output_delta`s, replaced by `tool_output` when
    /// the call completes (non-string outputs as compact JSON).
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_use_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl ToolStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Running => "running",
            ToolStatus::Completed => "completed",
            ToolStatus::Failed => "failed",
            ToolStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub request_id: String,
    pub tool_name: String,
    pub input: Value,
    pub status: ApprovalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Granted,
    Denied,
}

impl ApprovalStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Granted => "granted",
            ApprovalStatus::Denied => "denied",
        }
    }
}

impl Item {
    /// The run the item belongs to, if any.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            Item::UserMessage { run_id, .. }
            | Item::Todo { run_id, .. }
            | Item::Error { run_id, .. } => run_id.as_deref(),
            Item::AssistantMessage(m) | Item::Reasoning(m) => m.run_id.as_deref(),
            Item::ToolCall(t) => t.run_id.as_deref(),
            Item::Approval(a) => a.run_id.as_deref(),
        }
    }

    /// The text that [`Change::AppendText`] extends: a message's `text`, a tool's `output`.
    pub fn growing_text(&self) -> Option<&str> {
        match self {
            Item::AssistantMessage(m) | Item::Reasoning(m) => Some(&m.text),
            Item::ToolCall(t) => Some(&t.output),
            _ => None,
        }
    }

    /// Mutable access to [`Item::growing_text`], for whoever applies changes.
    pub fn growing_text_mut(&mut self) -> Option<&mut String> {
        match self {
            Item::AssistantMessage(m) | Item::Reasoning(m) => Some(&mut m.text),
            Item::ToolCall(t) => Some(&mut t.output),
            _ => None,
        }
    }
}

/// Token and cost totals. Per run: the latest value of each field reported for that run;
/// per session: the sum over runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub reasoning_output_tokens: u64,
    pub cost_usd: f64,
}

json_struct!(Usage {
    input_tokens,
    output_tokens,
    cache_read_input_tokens,
    cache_creation_input_tokens,
    reasoning_output_tokens,
    cost_usd,
});

/// What changed since the previous [`Timeline::drain`]. Serialized with a short `op` tag.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    /// A new item; `index` is always the current length of the list.
    Insert { index: usize, item: Item },
    /// Append `text` to the item's [`Item::growing_text`].
    #[serde(rename = "append")]
    AppendText { index: usize, text: String },
    /// Replace the item.
    Update { index: usize, item: Item },
    /// The session's new usage totals.
    Usage { totals: Usage },
    /// The request ids of the approvals now pending, in the order they were requested.
    Approvals { pending: Vec<String> },
}

/// A [`Change`] that borrows the item or text it carries (from the timeline, when a drain is
/// written straight to JSON: `Projector::drain_json`). Written as the `Change` is.
#[derive(Clone, Debug)]
pub enum ChangeRef<'a> {
    Insert { index: usize, item: &'a Item },
    AppendText { index: usize, text: &'a str },
    Update { index: usize, item: &'a Item },
    Usage { totals: Usage },
    Approvals { pending: Vec<&'a str> },
}

impl<'a> ChangeRef<'a> {
    /// `change`, borrowed.
    pub fn of(change: &'a Change) -> ChangeRef<'a> {
        match change {
            Change::Insert { index, item } => ChangeRef::Insert {
                index: *index,
                item,
            },
            Change::AppendText { index, text } => ChangeRef::AppendText {
                index: *index,
                text,
            },
            Change::Update { index, item } => ChangeRef::Update {
                index: *index,
                item,
            },
            Change::Usage { totals } => ChangeRef::Usage { totals: *totals },
            Change::Approvals { pending } => ChangeRef::Approvals {
                pending: pending.iter().map(String::as_str).collect(),
            },
        }
    }

    /// The change, owned (what it borrows copied).
    pub fn to_change(&self) -> Change {
        match self {
            ChangeRef::Insert { index, item } => Change::Insert {
                index: *index,
                item: Item::clone(item),
            },
            ChangeRef::AppendText { index, text } => Change::AppendText {
                index: *index,
                text: (*text).to_owned(),
            },
            ChangeRef::Update { index, item } => Change::Update {
                index: *index,
                item: Item::clone(item),
            },
            ChangeRef::Usage { totals } => Change::Usage { totals: *totals },
            ChangeRef::Approvals { pending } => Change::Approvals {
                pending: pending.iter().map(|&p| p.to_owned()).collect(),
            },
        }
    }
}

/// What a drain took from a timeline ([`Timeline::take_changes`]): which items changed and
/// how, and whether the usage and the approvals did; the changes themselves are read from
/// the timeline ([`Timeline::changes`]) until it changes again.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    items: Vec<(usize, Dirty)>,
    usage: bool,
    approvals: bool,
}

impl Drained {
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty() && !self.usage && !self.approvals
    }
}

/// How many events the timeline saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Applied (new, of this session).
    pub events: u64,
    /// Skipped as already applied (by sequence or id).
    pub duplicates: u64,
    /// Skipped because they belong to another session than the first event's.
    pub foreign: u64,
}

/// The timeline of one session. See the module docs for the driving rule and invariants.
#[derive(Default)]
pub struct Timeline {
    session_id: Option<String>,
    /// The items held: all of them, or (restored from a snapshot) those from `items.start`.
    items: Held<Item>,
    dirt: Dirt,
    messages: FastMap<String, usize>,
    reasoning: FastMap<String, usize>,
    tools: FastMap<String, usize>,
    approvals: FastMap<String, usize>,
    /// Keyed by run id; `""` holds what has no run (run ids are never empty).
    runs: FastMap<String, RunState>,
    /// Indices of pending approval items (index order = request order).
    pending: SortedSet<usize>,
    total: Tally,
    usage_changed: bool,
    approvals_changed: bool,
    last_sequence: u64,
    /// Every id applied, as its 128 bits (ids are `evt_` + 32 hex digits), so the set stays
    /// small.
    seen: FastSet<u128>,
    counts: Counts,
}

#[derive(Default)]
struct RunState {
    open_message: Option<usize>,
    open_reasoning: Option<usize>,
    /// Items that were streaming or running when added; checked (lazily) at the terminal.
    open: Vec<usize>,
    todo: Option<usize>,
    usage: Tally,
}

/// Usage in exact integers (cost in nano-dollars) so totals can be kept by difference.
#[derive(Clone, Copy, Default, PartialEq)]
struct Tally {
    tokens: [u64; 5],
    cost_nanos: i64,
}

const TOKEN_FIELDS: [&str; 5] = [
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_output_tokens",
];

impl Tally {
    fn usage(&self) -> Usage {
        let [input, output, cache_read, cache_creation, reasoning] = self.tokens;
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_input_tokens: cache_read,
            cache_creation_input_tokens: cache_creation,
            reasoning_output_tokens: reasoning,
            cost_usd: self.cost_nanos as f64 / 1e9,
        }
    }
}

/// A list addressed by absolute index that holds only the entries from `start` on: what
/// lets a timeline restored from a snapshot keep its indices without the items before it.
struct Held<T> {
    start: usize,
    vec: Vec<T>,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            start: 0,
            vec: Vec::new(),
        }
    }
}

impl<T> Held<T> {
    /// The absolute index the next entry gets.
    fn len(&self) -> usize {
        self.start + self.vec.len()
    }

    fn push(&mut self, value: T) {
        self.vec.push(value);
    }

    /// Puts `older` (the entries just before `start`) in front.
    fn prepend(&mut self, older: Vec<T>) {
        self.start -= older.len();
        self.vec.splice(0..0, older);
    }
}

impl<T> std::ops::Index<usize> for Held<T> {
    type Output = T;
    fn index(&self, idx: usize) -> &T {
        &self.vec[idx - self.start]
    }
}

impl<T> std::ops::IndexMut<usize> for Held<T> {
    fn index_mut(&mut self, idx: usize) -> &mut T {
        &mut self.vec[idx - self.start]
    }
}

/// What an item owes the next drain.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dirty {
    Clean,
    Inserted,
    Updated,
    /// Only appended to since the last drain, from this byte offset of its growing text.
    Appended {
        from: usize,
    },
}

/// The per-item drain state and the list of items to visit, in order of first touch.
#[derive(Default)]
struct Dirt {
    state: Held<Dirty>,
    list: Vec<usize>,
}

impl Dirt {
    fn inserted(&mut self, idx: usize) {
        debug_assert_eq!(idx, self.state.len());
        self.state.push(Dirty::Inserted);
        self.list.push(idx);
    }

    fn updated(&mut self, idx: usize) {
        match self.state[idx] {
            Dirty::Clean => {
                self.state[idx] = Dirty::Updated;
                self.list.push(idx);
            }
            Dirty::Appended { .. } => self.state[idx] = Dirty::Updated,
            Dirty::Inserted | Dirty::Updated => {}
        }
    }

    fn appended(&mut self, idx: usize, from: usize) {
        if self.state[idx] == Dirty::Clean {
            self.state[idx] = Dirty::Appended { from };
            self.list.push(idx);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Stream {
    Message,
    Reasoning,
}

impl RunState {
    fn open(&self, stream: Stream) -> Option<usize> {
        match stream {
            Stream::Message => self.open_message,
            Stream::Reasoning => self.open_reasoning,
        }
    }

    fn open_mut(&mut self, stream: Stream) -> &mut Option<usize> {
        match stream {
            Stream::Message => &mut self.open_message,
            Stream::Reasoning => &mut self.open_reasoning,
        }
    }
}

fn message_mut(item: &mut Item, stream: Stream) -> Option<&mut Message> {
    match (item, stream) {
        (Item::AssistantMessage(m), Stream::Message) | (Item::Reasoning(m), Stream::Reasoning) => {
            Some(m)
        }
        _ => None,
    }
}

fn run_entry<'a>(runs: &'a mut FastMap<String, RunState>, key: &str) -> &'a mut RunState {
    if !runs.contains_key(key) {
        runs.insert(key.to_owned(), RunState::default());
    }
    runs.get_mut(key).expect("inserted above")
}

/// A field of `data` as text, when present and not null: a string as it is (borrowed from the
/// event, not copied into a `Value` first), anything else as compact JSON.
fn data_text<'e>(e: &'e impl EventView, key: &str) -> Option<Cow<'e, str>> {
    if let Some(s) = e.data_str(key) {
        return Some(Cow::Borrowed(s));
    }
    let v = e.data_value(key).filter(|v| !v.is_null())?;
    Some(Cow::Owned(text_of(&v).into_owned()))
}

/// A value as text: strings as they are, anything else as compact JSON.
fn text_of(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(to_json(other)),
    }
}

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_owned)
}

impl Timeline {
    pub fn new() -> Self {
        Timeline::default()
    }

    /// Applies one event (skipped when already applied or of another session).
    pub fn handle_event(&mut self, event: &impl EventView) {
        self.handle(event, true);
    }

    /// [`Timeline::handle_event`] for an event a [`Dedup`](super::dedup::Dedup) has just
    /// admitted, as the projector and the companion's projections do: its id is not remembered
    /// a second time here. The dedup's window of ids is bounded, and this set was not: it
    /// kept every id of the session (≈ 2 MiB per 100 k events) and cost a hash insert per
    /// event. A sequence at or below the last one is still skipped.
    pub(crate) fn handle_admitted(&mut self, event: &impl EventView) {
        self.handle(event, false);
    }

    /// How many ids the timeline remembers (none when every event came through
    /// [`Timeline::handle_admitted`]).
    #[cfg(test)]
    pub(crate) fn remembered_ids(&self) -> usize {
        self.seen.len()
    }

    #[inline(always)]
    fn handle(&mut self, event: &impl EventView, remember: bool) {
        match &self.session_id {
            None => self.session_id = Some(event.session_id().to_owned()),
            Some(s) if s != event.session_id() => {
                self.counts.foreign += 1;
                return;
            }
            Some(_) => {}
        }
        let seq = event.sequence();
        if (seq > 0 && seq <= self.last_sequence)
            || (remember && !self.seen.insert(event.id_bits()))
        {
            self.counts.duplicates += 1;
            return;
        }
        self.last_sequence = self.last_sequence.max(seq);
        self.counts.events += 1;
        self.apply(event);
    }

    /// The changes since the previous drain, coalesced: at most one per item, then at most
    /// one usage and one approvals change. Costs O(what changed), not O(timeline).
    pub fn drain(&mut self) -> Vec<Change> {
        let drained = self.take_changes();
        self.changes(&drained).map(|c| c.to_change()).collect()
    }

    /// What [`Timeline::drain`] drains, taken without copying the changes out: they are
    /// read, borrowed, by [`Timeline::changes`] (before the timeline changes again).
    pub(crate) fn take_changes(&mut self) -> Drained {
        let mut items = Vec::with_capacity(self.dirt.list.len());
        for index in self.dirt.list.drain(..) {
            items.push((
                index,
                mem::replace(&mut self.dirt.state[index], Dirty::Clean),
            ));
        }
        Drained {
            items,
            usage: mem::take(&mut self.usage_changed),
            approvals: mem::take(&mut self.approvals_changed),
        }
    }

    /// The changes `drained` took, in drain order, borrowing what they carry.
    pub(crate) fn changes<'a>(
        &'a self,
        drained: &'a Drained,
    ) -> impl Iterator<Item = ChangeRef<'a>> {
        let items = drained.items.iter().map(|&(index, dirty)| {
            let item = &self.items[index];
            match dirty {
                Dirty::Inserted => ChangeRef::Insert { index, item },
                Dirty::Appended { from } => match item.growing_text().and_then(|t| t.get(from..)) {
                    Some(text) => ChangeRef::AppendText { index, text },
                    None => {
                        debug_assert!(false, "an append offset is always inside the text");
                        ChangeRef::Update { index, item }
                    }
                },
                Dirty::Updated => ChangeRef::Update { index, item },
                Dirty::Clean => unreachable!("only dirty items are listed"),
            }
        });
        let usage = (drained.usage).then(|| ChangeRef::Usage {
            totals: self.usage(),
        });
        let approvals = (drained.approvals).then(|| ChangeRef::Approvals {
            pending: self.pending_approvals().collect(),
        });
        items.chain(usage).chain(approvals)
    }

    /// The items held: every item, unless the timeline was restored from a snapshot (then
    /// those from [`Timeline::start`] on).
    pub fn items(&self) -> &[Item] {
        &self.items.vec
    }

    /// How many items the session has (held or not): the index the next item gets.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    /// The index of the first item held (0 unless restored from a snapshot and not paged
    /// back to the start).
    pub fn start(&self) -> usize {
        self.items.start
    }

    /// The session's totals: the sum over runs of each run's latest usage.
    pub fn usage(&self) -> Usage {
        self.total.usage()
    }

    /// The latest usage of one run (`None`: the events that carry no run id).
    pub fn run_usage(&self, run_id: Option<&str>) -> Option<Usage> {
        self.runs.get(run_id.unwrap_or("")).map(|r| r.usage.usage())
    }

    /// Request ids of the pending approvals, in the order they were requested.
    pub fn pending_approvals(&self) -> impl Iterator<Item = &str> + '_ {
        self.pending.iter().filter_map(|&i| match &self.items[i] {
            Item::Approval(a) => Some(a.request_id.as_str()),
            _ => None,
        })
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    fn apply(&mut self, e: &impl EventView) {
        use EventType as T;
        match e.kind() {
            T::MessageSent => self.user_message(e),
            T::MessageStreamed => self.delta(e, Stream::Message),
            T::ReasoningStreamed => self.delta(e, Stream::Reasoning),
            T::MessageReceived => self.whole(e, Stream::Message),
            T::ReasoningReceived => self.whole(e, Stream::Reasoning),
            T::ToolCallStarted => self.tool_started(e),
            T::ToolCallUpdated => self.tool_updated(e),
            T::ToolCallCompleted => self.tool_ended(e, ToolStatus::Completed),
            T::ToolCallFailed => self.tool_ended(e, ToolStatus::Failed),
            T::ToolCallCancelled => self.tool_ended(e, ToolStatus::Cancelled),
            T::TodoUpdated => self.todo(e),
            T::TokenUsageUpdated => self.usage_updated(e),
            T::ToolApprovalRequested => self.approval(e, ApprovalStatus::Pending),
            T::ToolApprovalGranted => self.approval(e, ApprovalStatus::Granted),
            T::ToolApprovalDenied => self.approval(e, ApprovalStatus::Denied),
            T::ErrorOccurred => self.error(e),
            T::RunFailed => {
                self.error(e);
                self.close_run(e.run_id().unwrap_or(""), ToolStatus::Failed);
            }
            T::RunTimeout => self.close_run(e.run_id().unwrap_or(""), ToolStatus::Failed),
            T::RunCompleted | T::RunCancelled => {
                self.close_run(e.run_id().unwrap_or(""), ToolStatus::Cancelled)
            }
            T::SessionFailed => {
                self.error(e);
                self.close_all(ToolStatus::Failed);
            }
            T::SessionCompleted | T::SessionCancelled => self.close_all(ToolStatus::Cancelled),
            _ => {}
        }
    }

    fn insert(&mut self, item: Item) -> usize {
        let idx = self.items.len();
        self.items.push(item);
        self.dirt.inserted(idx);
        idx
    }

    fn user_message(&mut self, e: &impl EventView) {
        if let Some(text) = e.data_str("content") {
            self.insert(Item::UserMessage {
                text: text.to_owned(),
                run_id: owned(e.run_id()),
            });
        }
    }

    fn ids(&mut self, stream: Stream) -> &mut FastMap<String, usize> {
        match stream {
            Stream::Message => &mut self.messages,
            Stream::Reasoning => &mut self.reasoning,
        }
    }

    /// A text chunk: appended to the item its `message_id` names, else to the run's open
    /// item of that stream; a new streaming item when there is none. Late chunks to a
    /// settled item are dropped (the settled text is whole).
    fn delta(&mut self, e: &impl EventView, stream: Stream) {
        let Some(delta) = e.data_str("delta").filter(|d| !d.is_empty()) else {
            return;
        };
        let id = e.data_str("message_id");
        let run_key = e.run_id().unwrap_or("");
        let found = match id {
            Some(id) => self.ids(stream).get(id).copied(),
            None => self.runs.get(run_key).and_then(|r| r.open(stream)),
        };
        if let Some(idx) = found {
            if let Some(m) = message_mut(&mut self.items[idx], stream) {
                if m.streaming {
                    let from = m.text.len();
                    m.text.push_str(delta);
                    self.dirt.appended(idx, from);
                }
            }
            return;
        }
        let message = Message {
            message_id: owned(id),
            text: delta.to_owned(),
            streaming: true,
            discarded: false,
            run_id: owned(e.run_id()),
        };
        let idx = self.insert(match stream {
            Stream::Message => Item::AssistantMessage(message),
            Stream::Reasoning => Item::Reasoning(message),
        });
        if let Some(id) = id {
            self.ids(stream).insert(id.to_owned(), idx);
        }
        let run = run_entry(&mut self.runs, run_key);
        *run.open_mut(stream) = Some(idx);
        run.open.push(idx);
    }

    /// A whole text: settles the item its `message_id` names (or the run's open item when
    /// there is no id, or when that open item has no id yet); otherwise a new, settled item.
    fn whole(&mut self, e: &impl EventView, stream: Stream) {
        let id = e.data_str("message_id");
        let content = e.data_str("content");
        let discarded = e
            .data_value("discarded")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let open = self
            .runs
            .get(e.run_id().unwrap_or(""))
            .and_then(|r| r.open(stream));
        let found = match id {
            Some(id) => self.ids(stream).get(id).copied().or_else(|| {
                open.filter(|&i| match (&self.items[i], stream) {
                    (Item::AssistantMessage(m), Stream::Message)
                    | (Item::Reasoning(m), Stream::Reasoning) => m.message_id.is_none(),
                    _ => false,
                })
            }),
            None => open,
        };
        let Some(idx) = found else {
            if discarded {
                return; // abandoned before anything was shown: nothing to show or close
            }
            let Some(text) = content else { return };
            let message = Message {
                message_id: owned(id),
                text: text.to_owned(),
                streaming: false,
                discarded: false,
                run_id: owned(e.run_id()),
            };
            let idx = self.insert(match stream {
                Stream::Message => Item::AssistantMessage(message),
                Stream::Reasoning => Item::Reasoning(message),
            });
            if let Some(id) = id {
                self.ids(stream).insert(id.to_owned(), idx);
            }
            return;
        };
        let Some(m) = message_mut(&mut self.items[idx], stream) else {
            return;
        };
        let mut changed = m.streaming || m.discarded != discarded;
        m.streaming = false;
        m.discarded = discarded;
        if let Some(text) = content.filter(|t| *t != m.text) {
            m.text.clear();
            m.text.push_str(text);
            changed = true;
        }
        let adopt = match (&m.message_id, id) {
            (None, Some(id)) => {
                m.message_id = Some(id.to_owned());
                changed = true;
                Some(id)
            }
            _ => None,
        };
        let run_key = m.run_id.clone().unwrap_or_default();
        if changed {
            self.dirt.updated(idx);
        }
        if let Some(id) = adopt {
            self.ids(stream).insert(id.to_owned(), idx);
        }
        if let Some(run) = self.runs.get_mut(&run_key) {
            if run.open(stream) == Some(idx) {
                *run.open_mut(stream) = None;
            }
        }
    }

    /// The tool call the event names, inserted with `status` when unknown. Events with no
    /// `tool_call_id` (nor correlation id) each get their own item.
    fn tool(&mut self, e: &impl EventView, status: ToolStatus) -> usize {
        let key = e.data_str("tool_call_id").or(e.correlation_id());
        if let Some(&idx) = key.and_then(|k| self.tools.get(k)) {
            return idx;
        }
        let idx = self.insert(Item::ToolCall(ToolCall {
            tool_call_id: key.unwrap_or("").to_owned(),
            tool_name: String::new(),
            input: Value::Null,
            status,
            output: String::new(),
            error: None,
            title: None,
            parent_tool_use_id: None,
            run_id: owned(e.run_id()),
        }));
        if let Some(key) = key {
            self.tools.insert(key.to_owned(), idx);
        }
        if status == ToolStatus::Running {
            run_entry(&mut self.runs, e.run_id().unwrap_or(""))
                .open
                .push(idx);
        }
        idx
    }

    fn tool_started(&mut self, e: &impl EventView) {
        let idx = self.tool(e, ToolStatus::Running);
        if let Item::ToolCall(t) = &mut self.items[idx] {
            if fill_tool(t, e) {
                self.dirt.updated(idx);
            }
        }
    }

    /// Progress: `output_delta` appended, `title` replaced. Ignored once the call ended.
    fn tool_updated(&mut self, e: &impl EventView) {
        let idx = self.tool(e, ToolStatus::Running);
        let Item::ToolCall(t) = &mut self.items[idx] else {
            return;
        };
        if t.status != ToolStatus::Running {
            return;
        }
        let mut changed = fill_tool(t, e);
        if let Some(title) = e.data_str("title") {
            if t.title.as_deref() != Some(title) {
                t.title = Some(title.to_owned());
                changed = true;
            }
        }
        if changed {
            self.dirt.updated(idx);
        }
        if let Some(delta) = e.data_str("output_delta").filter(|d| !d.is_empty()) {
            let from = t.output.len();
            t.output.push_str(delta);
            self.dirt.appended(idx, from);
        }
    }

    fn tool_ended(&mut self, e: &impl EventView, status: ToolStatus) {
        let idx = self.tool(e, status);
        let Item::ToolCall(t) = &mut self.items[idx] else {
            return;
        };
        let mut changed = fill_tool(t, e);
        if t.status != status {
            t.status = status;
            changed = true;
        }
        if let Some(output) = data_text(e, "tool_output") {
            if t.output != output {
                t.output = output.into_owned();
                changed = true;
            }
        }
        let error = ["error", "error_message"]
            .iter()
            .find_map(|k| data_text(e, k));
        if let Some(error) = error {
            if t.error.as_deref() != Some(&*error) {
                t.error = Some(error.into_owned());
                changed = true;
            }
        }
        if changed {
            self.dirt.updated(idx);
        }
    }

    fn todo(&mut self, e: &impl EventView) {
        let items = e
            .data_value("items")
            .map(Cow::into_owned)
            .unwrap_or_else(|| Value::Array(Vec::new()));
        let run_key = e.run_id().unwrap_or("");
        match self.runs.get(run_key).and_then(|r| r.todo) {
            Some(idx) => {
                if let Item::Todo { items: old, .. } = &mut self.items[idx] {
                    if *old != items {
                        *old = items;
                        self.dirt.updated(idx);
                    }
                }
            }
            None => {
                let idx = self.insert(Item::Todo {
                    items,
                    run_id: owned(e.run_id()),
                });
                run_entry(&mut self.runs, run_key).todo = Some(idx);
            }
        }
    }

    fn error(&mut self, e: &impl EventView) {
        let provider_error = e.data_value("provider_error").filter(|v| v.is_object());
        let message = e
            .data_str("error_message")
            .or_else(|| e.data_str("error"))
            .or_else(|| e.data_str("message"))
            .or_else(|| provider_error.as_deref()?.get("message")?.as_str())
            .unwrap_or(e.kind().as_str());
        self.insert(Item::Error {
            message: message.to_owned(),
            provider_error: provider_error.map(Cow::into_owned),
            run_id: owned(e.run_id()),
        });
    }

    /// Keeps the latest value of each reported field for the run (fields not reported keep
    /// their value) and the session total as the sum over runs, by difference.
    fn usage_updated(&mut self, e: &impl EventView) {
        let run = run_entry(&mut self.runs, e.run_id().unwrap_or(""));
        let mut next = run.usage;
        for (slot, field) in next.tokens.iter_mut().zip(TOKEN_FIELDS) {
            if let Some(n) = e.data_value(field).and_then(|v| as_count(&v)) {
                *slot = n;
            }
        }
        if let Some(cost) = e.data_value("cost_usd").and_then(|v| v.as_f64()) {
            next.cost_nanos = (cost * 1e9).round() as i64;
        }
        if next == run.usage {
            return;
        }
        for i in 0..TOKEN_FIELDS.len() {
            self.total.tokens[i] = self.total.tokens[i]
                .wrapping_sub(run.usage.tokens[i])
                .wrapping_add(next.tokens[i]);
        }
        self.total.cost_nanos = self
            .total
            .cost_nanos
            .wrapping_sub(run.usage.cost_nanos)
            .wrapping_add(next.cost_nanos);
        run.usage = next;
        self.usage_changed = true;
    }

    /// A request inserts or re-opens the approval; a grant or denial resolves it (inserting
    /// it when the request was never seen). Keyed by `request_id`, else the correlation id.
    fn approval(&mut self, e: &impl EventView, status: ApprovalStatus) {
        let Some(key) = e.data_str("request_id").or(e.correlation_id()) else {
            return;
        };
        let tool_name = e.data_str("tool_name");
        let input = e.data_value("tool_input").filter(|v| !v.is_null());
        let idx = match self.approvals.get(key) {
            Some(&idx) => {
                let Item::Approval(a) = &mut self.items[idx] else {
                    return;
                };
                let mut changed = a.status != status;
                a.status = status;
                if let Some(name) = tool_name.filter(|n| *n != a.tool_name) {
                    a.tool_name = name.to_owned();
                    changed = true;
                }
                if let Some(input) = input.filter(|i| **i != a.input) {
                    a.input = input.into_owned();
                    changed = true;
                }
                if changed {
                    self.dirt.updated(idx);
                }
                idx
            }
            None => {
                let idx = self.insert(Item::Approval(Approval {
                    request_id: key.to_owned(),
                    tool_name: tool_name.unwrap_or("").to_owned(),
                    input: input.map_or(Value::Null, Cow::into_owned),
                    status,
                    tool_call_id: owned(e.data_str("tool_call_id")),
                    run_id: owned(e.run_id()),
                }));
                self.approvals.insert(key.to_owned(), idx);
                idx
            }
        };
        let moved = if status == ApprovalStatus::Pending {
            self.pending.insert(idx)
        } else {
            self.pending.remove(&idx)
        };
        self.approvals_changed |= moved;
    }

    fn close_run(&mut self, run_key: &str, status: ToolStatus) {
        let Some(run) = self.runs.get_mut(run_key) else {
            return;
        };
        run.open_message = None;
        run.open_reasoning = None;
        for idx in mem::take(&mut run.open) {
            close_item(&mut self.items[idx], idx, &mut self.dirt, status);
        }
    }

    /// Every run's open items, closed in index order so the changes are deterministic.
    fn close_all(&mut self, status: ToolStatus) {
        let mut open = Vec::new();
        for run in self.runs.values_mut() {
            run.open_message = None;
            run.open_reasoning = None;
            open.append(&mut run.open);
        }
        sorted::sort_unstable(&mut open);
        for idx in open {
            close_item(&mut self.items[idx], idx, &mut self.dirt, status);
        }
    }

    /// The timeline as text, one item per line, then a usage line: for `agentwire project`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut runs: HashMap<&str, usize> = HashMap::new();
        for (i, item) in (self.items.start..).zip(&self.items.vec) {
            let label = match item.run_id() {
                Some(r) => {
                    let next = runs.len() + 1;
                    format!("t{}", runs.entry(r).or_insert(next))
                }
                None => "--".to_owned(),
            };
            let _ = write!(out, "[{i}] {label} ");
            match item {
                Item::UserMessage { text, .. } => {
                    let _ = write!(out, "user_message {}", quote(text));
                }
                Item::AssistantMessage(m) | Item::Reasoning(m) => {
                    let kind = match item {
                        Item::Reasoning(_) => "reasoning",
                        _ => "assistant_message",
                    };
                    let _ = write!(out, "{kind} {}", quote(&m.text));
                    if m.streaming {
                        out.push_str(" (streaming)");
                    }
                    if m.discarded {
                        out.push_str(" (discarded)");
                    }
                }
                Item::ToolCall(t) => {
                    let _ = write!(out, "tool_call {} {}", t.tool_name, t.status.as_str());
                    if let Some(input) = summarize(&t.input) {
                        let _ = write!(out, " {input}");
                    }
                    if !t.output.is_empty() {
                        let _ = write!(out, " -> {}", quote(&t.output));
                    }
                    if let Some(error) = &t.error {
                        let _ = write!(out, " !! {}", quote(error));
                    }
                }
                Item::Todo { items, .. } => {
                    let list = items.as_array().map(Vec::as_slice).unwrap_or_default();
                    let mut text = String::new();
                    for (n, todo) in list.iter().enumerate() {
                        let mark = match todo.get("status").and_then(Value::as_str) {
                            Some("completed") => "[x]",
                            Some("in_progress") => "[~]",
                            _ => "[ ]",
                        };
                        let what = todo.get("text").map(text_of).unwrap_or_default();
                        let sep = if n == 0 { "" } else { "; " };
                        let _ = write!(text, "{sep}{mark} {what}");
                    }
                    let _ = write!(out, "todo {}", cut(&text));
                }
                Item::Error {
                    message,
                    provider_error,
                    ..
                } => {
                    let _ = write!(out, "error {}", quote(message));
                    let kind = provider_error
                        .as_ref()
                        .and_then(|p| p.get("kind")?.as_str());
                    if let Some(kind) = kind {
                        let _ = write!(out, " ({kind})");
                    }
                }
                Item::Approval(a) => {
                    let _ = write!(out, "approval {} {}", a.tool_name, a.status.as_str());
                    if let Some(input) = summarize(&a.input) {
                        let _ = write!(out, " {input}");
                    }
                }
            }
            out.push('\n');
        }
        let u = self.usage();
        let c = self.counts;
        let _ = writeln!(
            out,
            "usage: input={} output={} cache_read={} cache_creation={} reasoning={} cost_usd={}; \
             {} items, {} pending approvals, {} events, {} duplicates",
            u.input_tokens,
            u.output_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens,
            u.reasoning_output_tokens,
            u.cost_usd,
            self.items.len(),
            self.pending.len(),
            c.events,
            c.duplicates,
        );
        out
    }
}

/// Fills what a tool item does not know yet from an event; true when something changed.
fn fill_tool(t: &mut ToolCall, e: &impl EventView) -> bool {
    let mut changed = false;
    if t.tool_name.is_empty() {
        if let Some(name) = e.data_str("tool_name").filter(|n| !n.is_empty()) {
            t.tool_name = name.to_owned();
            changed = true;
        }
    }
    if t.input.is_null() {
        if let Some(input) = e.data_value("tool_input").filter(|v| !v.is_null()) {
            t.input = input.into_owned();
            changed = true;
        }
    }
    if t.parent_tool_use_id.is_none() {
        if let Some(parent) = e.data_str("parent_tool_use_id") {
            t.parent_tool_use_id = Some(parent.to_owned());
            changed = true;
        }
    }
    changed
}

fn close_item(item: &mut Item, idx: usize, dirt: &mut Dirt, status: ToolStatus) {
    match item {
        Item::AssistantMessage(m) | Item::Reasoning(m) if m.streaming => {
            m.streaming = false;
            dirt.updated(idx);
        }
        Item::ToolCall(t) if t.status == ToolStatus::Running => {
            t.status = status;
            dirt.updated(idx);
        }
        _ => {}
    }
}

fn as_count(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// At most 80 characters, with `…` when cut.
fn cut(s: &str) -> Cow<'_, str> {
    let short = excerpt(s, 80);
    if short.len() < s.len() {
        Cow::Owned(format!("{short}…"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Cut and quoted, newlines escaped.
fn quote(s: &str) -> String {
    Quoted(&cut(s)).to_string()
}

/// The telling part of a tool input: its command, path, pattern… or else compact JSON.
fn summarize(input: &Value) -> Option<String> {
    const KEYS: &[&str] = &[
        "command",
        "cmd",
        "file_path",
        "path",
        "pattern",
        "query",
        "url",
        "description",
        "prompt",
    ];
    match input {
        Value::Null => None,
        Value::String(s) => Some(quote(s)),
        Value::Object(m) => Some(
            KEYS.iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str))
                .map(quote)
                .unwrap_or_else(|| cut(&to_json(input)).into_owned()),
        ),
        other => Some(cut(&to_json(other)).into_owned()),
    }
}

/// What a timeline restored from a snapshot needs, besides its items, to go on projecting
/// the events after the snapshot exactly as the whole log would: the ids, runs and pending
/// approvals that point into the items it holds, and the usage tallies. Made by
/// [`Timeline::checkpoint`], used by [`Timeline::restore`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The last sequence applied.
    pub last_sequence: u64,
    /// Id → index of the items held that later events may name, per kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<(String, usize)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<(String, usize)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<(String, usize)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<(String, usize)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunCheckpoint>,
    /// Indices of the pending approvals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<usize>,
    /// The session's usage totals: tokens as in [`Usage`], cost in nano-dollars.
    pub tokens: [u64; 5],
    pub cost_nanos: i64,
}

/// One run's state in a [`TimelineState`] (`run` is `""` for what has no run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCheckpoint {
    pub run: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_message: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_reasoning: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todo: Option<usize>,
    pub tokens: [u64; 5],
    pub cost_nanos: i64,
}

json_struct!(TimelineState {
    session_id,
    last_sequence,
    messages = Vec::new(),
    reasoning = Vec::new(),
    tools = Vec::new(),
    approvals = Vec::new(),
    runs = Vec::new(),
    pending = Vec::new(),
    tokens,
    cost_nanos,
});
json_struct!(RunCheckpoint {
    run,
    open_message,
    open_reasoning,
    open = Vec::new(),
    todo,
    tokens,
    cost_nanos,
});

/// How far back (in items) a snapshot's window reaches for an item still open or of a turn
/// in progress, at most.
pub const MAX_REACH_BACK: usize = 10_000;

/// Whether an item can still change without naming it: a streaming text, a running tool
/// call, a pending approval.
fn is_open(item: &Item) -> bool {
    match item {
        Item::AssistantMessage(m) | Item::Reasoning(m) => m.streaming,
        Item::ToolCall(t) => t.status == ToolStatus::Running,
        Item::Approval(a) => a.status == ApprovalStatus::Pending,
        _ => false,
    }
}

impl Timeline {
    /// Where a snapshot of the last `n` items should start so that the events after it
    /// project exactly: at most `n` items back, and further back to the first item that is
    /// still open (streaming, running, pending) or belongs to a run in `active` (a turn still
    /// in progress may name any of its items), but never more than [`MAX_REACH_BACK`] items
    /// back (an approval left pending long ago must not pin every later snapshot to it: an
    /// event naming such an item is applied as if it were unknown). O(items reached).
    pub fn snapshot_start(&self, n: usize, active: &[&str]) -> usize {
        let mut start = self.items.len().saturating_sub(n).max(self.items.start);
        let reach = (self.items.len().saturating_sub(MAX_REACH_BACK)).max(self.items.start);
        for (i, item) in (reach..).zip(&self.items.vec[reach - self.items.start..]) {
            if i >= start {
                break;
            }
            if is_open(item) || item.run_id().is_some_and(|r| active.contains(&r)) {
                start = i;
                break;
            }
        }
        start
    }

    /// The items from `start` on, and the state that lets [`Timeline::restore`] go on from
    /// them. Everything that points before `start` is left out: an event after the snapshot
    /// that names an item before `start` (a provider repeating the result of a call that
    /// ended long ago) is applied as if that item were unknown. See
    /// [`Timeline::snapshot_start`] for a `start` that keeps every open item.
    pub fn checkpoint(&self, start: usize) -> (Vec<Item>, TimelineState) {
        let start = start.clamp(self.items.start, self.items.len());
        let items = self.items.vec[start - self.items.start..].to_vec();
        let keep = |map: &FastMap<String, usize>| {
            let mut v: Vec<(String, usize)> = map
                .iter()
                .filter(|(_, &i)| i >= start)
                .map(|(k, &i)| (k.clone(), i))
                .collect();
            sorted::sort_unstable_by(&mut v, |a, b| a.1.cmp(&b.1));
            v
        };
        let in_window: FastSet<&str> = items.iter().filter_map(Item::run_id).collect();
        let mut runs: Vec<RunCheckpoint> = self
            .runs
            .iter()
            .filter(|(k, _)| k.is_empty() || in_window.contains(k.as_str()))
            .map(|(k, r)| RunCheckpoint {
                run: k.clone(),
                open_message: r.open_message.filter(|&i| i >= start),
                open_reasoning: r.open_reasoning.filter(|&i| i >= start),
                open: r.open.iter().copied().filter(|&i| i >= start).collect(),
                todo: r.todo.filter(|&i| i >= start),
                tokens: r.usage.tokens,
                cost_nanos: r.usage.cost_nanos,
            })
            .collect();
        sorted::sort_unstable_by(&mut runs, |a, b| a.run.cmp(&b.run));
        let state = TimelineState {
            session_id: self.session_id.clone(),
            last_sequence: self.last_sequence,
            messages: keep(&self.messages),
            reasoning: keep(&self.reasoning),
            tools: keep(&self.tools),
            approvals: keep(&self.approvals),
            runs,
            pending: self
                .pending
                .iter()
                .copied()
                .filter(|&i| i >= start)
                .collect(),
            tokens: self.total.tokens,
            cost_nanos: self.total.cost_nanos,
        };
        (items, state)
    }

    /// A timeline holding `items` from index `start` on, in `state` (from
    /// [`Timeline::checkpoint`]). Its first drain inserts every item, then gives the usage
    /// and the pending approvals. `None` when the state points outside the items.
    pub fn restore(start: usize, items: Vec<Item>, state: TimelineState) -> Option<Timeline> {
        let end = start.checked_add(items.len())?;
        let inside = |i: &usize| (start..end).contains(i);
        let maps = [
            &state.messages,
            &state.reasoning,
            &state.tools,
            &state.approvals,
        ];
        let runs_inside = state.runs.iter().all(|r| {
            r.open_message.iter().all(inside)
                && r.open_reasoning.iter().all(inside)
                && r.open.iter().all(inside)
                && r.todo.iter().all(inside)
        });
        if !(maps.iter().all(|m| m.iter().all(|(_, i)| inside(i)))
            && runs_inside
            && state.pending.iter().all(inside))
        {
            return None;
        }
        let map = |v: Vec<(String, usize)>| v.into_iter().collect::<FastMap<_, _>>();
        let n = items.len();
        let mut t = Timeline {
            session_id: state.session_id,
            items: Held { start, vec: items },
            messages: map(state.messages),
            reasoning: map(state.reasoning),
            tools: map(state.tools),
            approvals: map(state.approvals),
            runs: state
                .runs
                .into_iter()
                .map(|r| {
                    let run = RunState {
                        open_message: r.open_message,
                        open_reasoning: r.open_reasoning,
                        open: r.open,
                        todo: r.todo,
                        usage: Tally {
                            tokens: r.tokens,
                            cost_nanos: r.cost_nanos,
                        },
                    };
                    (r.run, run)
                })
                .collect(),
            pending: state.pending.into_iter().collect(),
            total: Tally {
                tokens: state.tokens,
                cost_nanos: state.cost_nanos,
            },
            usage_changed: true,
            approvals_changed: true,
            last_sequence: state.last_sequence,
            ..Timeline::default()
        };
        t.dirt.state = Held {
            start,
            vec: vec![Dirty::Inserted; n],
        };
        t.dirt.list = (start..end).collect();
        Some(t)
    }

    /// Items older than those held, just before [`Timeline::start`] (a page of history):
    /// held from now on, reported by no drain (whoever asked for them has them). Returns
    /// false, changing nothing, when they do not end where the held items begin.
    pub fn prepend(&mut self, start: usize, items: Vec<Item>) -> bool {
        if start.checked_add(items.len()) != Some(self.items.start) {
            return false;
        }
        self.dirt.state.prepend(vec![Dirty::Clean; items.len()]);
        self.items.prepend(items);
        true
    }

    /// Up to `limit` items just before index `before` (clamped to what is held): the first
    /// index of the page and its items, oldest first.
    pub fn page_before(&self, before: usize, limit: usize) -> (usize, &[Item]) {
        let end = before.clamp(self.items.start, self.items.len());
        let start = end.saturating_sub(limit).max(self.items.start);
        (
            start,
            &self.items.vec[start - self.items.start..end - self.items.start],
        )
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::{expect, Expect};
    use proptest::prelude::*;
    use serde_json::{json, Map};
    use std::collections::HashSet;

    use super::*;
    use crate::core::event::Event;
    use crate::core::event::{EventId, EventInit, Provider};
    use crate::core::time::Timestamp;

    /// The naive model a client keeps: a plain list that changes are applied to.
    fn apply(model: &mut Vec<Item>, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Insert { index, item } => {
                    assert_eq!(*index, model.len(), "inserts come in index order");
                    model.push(item.clone());
                }
                Change::AppendText { index, text } => {
                    let grown = model[*index].growing_text_mut();
                    grown.expect("appends go to text items").push_str(text);
                }
                Change::Update { index, item } => model[*index] = item.clone(),
                Change::Usage { .. } | Change::Approvals { .. } => {}
            }
        }
    }

    /// At most one change per item per drain, and nothing after the side-state changes.
    fn assert_coalesced(changes: &[Change]) {
        let mut seen = HashSet::new();
        for change in changes {
            if let Change::Insert { index, .. }
            | Change::AppendText { index, .. }
            | Change::Update { index, .. } = change
            {
                assert!(
                    seen.insert(*index),
                    "two changes to item {index}: {changes:?}"
                );
            }
        }
    }

    fn event(seq: u64, run: Option<&str>, kind: EventType, data: Value, id_seed: &str) -> Event {
        let mut init = EventInit::new(
            kind,
            "s1",
            Provider::Generic,
            Timestamp::from_unix_millis(1_700_000_000_000 + seq as i64),
        );
        init.id = Some(EventId::derive(&["timeline-test", id_seed]));
        init.run_id = run.map(str::to_owned);
        init.sequence = seq;
        init.data = match data {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Event::new(init).unwrap()
    }

    /// Runs a script through a timeline. A line is `drain`, or `<seq> <run|-> <type> [json]`
    /// (the event id is derived from the line, so a repeated line is the same event). Shows
    /// each drain's changes, then the rendered timeline; checks the changes rebuild `items()`.
    fn check(script: &str, expect: Expect) {
        let mut timeline = Timeline::new();
        let mut model = Vec::new();
        let mut out = String::new();
        let mut drain = |timeline: &mut Timeline, out: &mut String| {
            let changes = timeline.drain();
            assert_coalesced(&changes);
            apply(&mut model, &changes);
            out.push_str("drain\n");
            for c in &changes {
                let _ = writeln!(out, "  {}", serde_json::to_string(c).unwrap());
            }
        };
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line == "drain" {
                drain(&mut timeline, &mut out);
                continue;
            }
            let mut parts = line.splitn(4, ' ');
            let seq = parts.next().unwrap().parse().unwrap();
            let run = parts.next().filter(|r| *r != "-");
            let kind = EventType::parse(parts.next().unwrap()).unwrap();
            let data = serde_json::from_str(parts.next().unwrap_or("{}")).unwrap();
            timeline.handle_event(&event(seq, run, kind, data, line));
        }
        drain(&mut timeline, &mut out);
        assert_eq!(model, timeline.items());
        out.push_str(&timeline.render());
        expect.assert_eq(&out);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn deltas_are_assembled_then_settled() {
        check(
            r#"
            1 r1 message_sent {"content":"hi"}
            2 r1 message_streamed {"message_id":"m1","delta":"Hel"}
            drain
            3 r1 message_streamed {"message_id":"m1","delta":"lo "}
            4 r1 message_streamed {"message_id":"m1","delta":"wor"}
            5 r1 message_streamed {"message_id":"m1","delta":"ld"}
            drain
            6 r1 message_received {"message_id":"m1","content":"Hello world!","role":"assistant"}
            7 r1 message_streamed {"message_id":"m1","delta":" late"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"user_message","text":"hi","run_id":"r1"}}
                  {"op":"insert","index":1,"item":{"kind":"assistant_message","message_id":"m1","text":"Hel","streaming":true,"discarded":false,"run_id":"r1"}}
                drain
                  {"op":"append","index":1,"text":"lo world"}
                drain
                  {"op":"update","index":1,"item":{"kind":"assistant_message","message_id":"m1","text":"Hello world!","streaming":false,"discarded":false,"run_id":"r1"}}
                [0] t1 user_message "hi"
                [1] t1 assistant_message "Hello world!"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 2 items, 0 pending approvals, 7 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn deltas_without_id_go_to_the_open_item_of_their_run() {
        check(
            r#"
            1 r1 reasoning_streamed {"delta":"think"}
            2 r1 reasoning_streamed {"delta":"ing"}
            3 r1 reasoning_received {"content":"thinking."}
            4 r1 message_streamed {"delta":"A"}
            5 r2 message_streamed {"delta":"B"}
            6 r1 message_streamed {"delta":"a"}
            7 r1 message_received {"message_id":"m9","content":"Aa."}
            8 r1 message_received {"content":"whole, never streamed"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"reasoning","text":"thinking.","streaming":false,"discarded":false,"run_id":"r1"}}
                  {"op":"insert","index":1,"item":{"kind":"assistant_message","message_id":"m9","text":"Aa.","streaming":false,"discarded":false,"run_id":"r1"}}
                  {"op":"insert","index":2,"item":{"kind":"assistant_message","text":"B","streaming":true,"discarded":false,"run_id":"r2"}}
                  {"op":"insert","index":3,"item":{"kind":"assistant_message","text":"whole, never streamed","streaming":false,"discarded":false,"run_id":"r1"}}
                [0] t1 reasoning "thinking."
                [1] t1 assistant_message "Aa."
                [2] t2 assistant_message "B" (streaming)
                [3] t1 assistant_message "whole, never streamed"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 4 items, 0 pending approvals, 8 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_abandoned_message_is_discarded() {
        check(
            r#"
            1 r1 message_streamed {"message_id":"m1","delta":"Half a th"}
            drain
            2 r1 message_received {"message_id":"m1","content":"","discarded":true}
            3 r1 message_received {"message_id":"m2","content":"","discarded":true}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"assistant_message","message_id":"m1","text":"Half a th","streaming":true,"discarded":false,"run_id":"r1"}}
                drain
                  {"op":"update","index":0,"item":{"kind":"assistant_message","message_id":"m1","text":"","streaming":false,"discarded":true,"run_id":"r1"}}
                [0] t1 assistant_message "" (discarded)
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 1 items, 0 pending approvals, 3 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn tool_call_lifecycle() {
        check(
            r#"
            1 r1 tool_call_started {"tool_call_id":"t1","tool_name":"Bash","tool_input":{"command":"ls"}}
            drain
            2 r1 tool_call_updated {"tool_call_id":"t1","output_delta":"README"}
            3 r1 tool_call_updated {"tool_call_id":"t1","output_delta":".md\n"}
            drain
            4 r1 tool_call_updated {"tool_call_id":"t1","output_delta":"src\n"}
            5 r1 tool_call_completed {"tool_call_id":"t1","tool_name":"Bash","tool_output":"README.md\nsrc\n"}
            drain
            6 r1 tool_call_started {"tool_call_id":"t2","tool_name":"Read","tool_input":{"file_path":"/nope"}}
            7 r1 tool_call_failed {"tool_call_id":"t2","error":"no such file"}
            8 r1 tool_call_updated {"tool_call_id":"t2","output_delta":"late"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Bash","input":{"command":"ls"},"status":"running","output":"","run_id":"r1"}}
                drain
                  {"op":"append","index":0,"text":"README.md\n"}
                drain
                  {"op":"update","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Bash","input":{"command":"ls"},"status":"completed","output":"README.md\nsrc\n","run_id":"r1"}}
                drain
                  {"op":"insert","index":1,"item":{"kind":"tool_call","tool_call_id":"t2","tool_name":"Read","input":{"file_path":"/nope"},"status":"failed","output":"","error":"no such file","run_id":"r1"}}
                [0] t1 tool_call Bash completed "ls" -> "README.md\nsrc\n"
                [1] t1 tool_call Read failed "/nope" !! "no such file"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 2 items, 0 pending approvals, 8 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn out_of_order_terminal_inserts_the_call_and_a_late_start_fills_it() {
        check(
            r#"
            1 r1 tool_call_completed {"tool_call_id":"t1","tool_output":[{"type":"text","text":"ok"}]}
            drain
            2 r1 tool_call_started {"tool_call_id":"t1","tool_name":"Task","tool_input":{"prompt":"look around"},"parent_tool_use_id":"t0"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"","input":null,"status":"completed","output":"[{\"text\":\"ok\",\"type\":\"text\"}]","run_id":"r1"}}
                drain
                  {"op":"update","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Task","input":{"prompt":"look around"},"status":"completed","output":"[{\"text\":\"ok\",\"type\":\"text\"}]","parent_tool_use_id":"t0","run_id":"r1"}}
                [0] t1 tool_call Task completed "look around" -> "[{\"text\":\"ok\",\"type\":\"text\"}]"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 1 items, 0 pending approvals, 2 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn run_terminals_close_what_the_run_left_open() {
        check(
            r#"
            1 r1 tool_call_started {"tool_call_id":"t1","tool_name":"Bash","tool_input":{"command":"sleep 100"}}
            2 r1 tool_call_started {"tool_call_id":"t2","tool_name":"Bash","tool_input":{"command":"true"}}
            3 r1 tool_call_completed {"tool_call_id":"t2"}
            4 r1 message_streamed {"delta":"Let me"}
            5 r2 tool_call_started {"tool_call_id":"t3","tool_name":"Grep","tool_input":{"pattern":"x"}}
            drain
            6 r1 run_cancelled {"reason":"user"}
            drain
            7 r2 run_failed {"error_message":"overloaded","provider_error":{"provider":"claude","kind":"api_error","message":"overloaded"}}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Bash","input":{"command":"sleep 100"},"status":"running","output":"","run_id":"r1"}}
                  {"op":"insert","index":1,"item":{"kind":"tool_call","tool_call_id":"t2","tool_name":"Bash","input":{"command":"true"},"status":"completed","output":"","run_id":"r1"}}
                  {"op":"insert","index":2,"item":{"kind":"assistant_message","text":"Let me","streaming":true,"discarded":false,"run_id":"r1"}}
                  {"op":"insert","index":3,"item":{"kind":"tool_call","tool_call_id":"t3","tool_name":"Grep","input":{"pattern":"x"},"status":"running","output":"","run_id":"r2"}}
                drain
                  {"op":"update","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Bash","input":{"command":"sleep 100"},"status":"cancelled","output":"","run_id":"r1"}}
                  {"op":"update","index":2,"item":{"kind":"assistant_message","text":"Let me","streaming":false,"discarded":false,"run_id":"r1"}}
                drain
                  {"op":"insert","index":4,"item":{"kind":"error","message":"overloaded","provider_error":{"kind":"api_error","message":"overloaded","provider":"claude"},"run_id":"r2"}}
                  {"op":"update","index":3,"item":{"kind":"tool_call","tool_call_id":"t3","tool_name":"Grep","input":{"pattern":"x"},"status":"failed","output":"","run_id":"r2"}}
                [0] t1 tool_call Bash cancelled "sleep 100"
                [1] t1 tool_call Bash completed "true"
                [2] t1 assistant_message "Let me"
                [3] t2 tool_call Grep failed "x"
                [4] t2 error "overloaded" (api_error)
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 5 items, 0 pending approvals, 7 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn approvals_go_from_pending_to_granted_or_denied() {
        check(
            r#"
            1 r1 tool_approval_requested {"request_id":"a1","tool_name":"Bash","tool_input":{"command":"rm -rf build"}}
            2 r1 tool_approval_requested {"request_id":"a2","tool_name":"Write","tool_input":{"file_path":"x.rs"}}
            drain
            3 r1 tool_approval_granted {"request_id":"a1"}
            drain
            4 r1 tool_approval_denied {"request_id":"a2"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"approval","request_id":"a1","tool_name":"Bash","input":{"command":"rm -rf build"},"status":"pending","run_id":"r1"}}
                  {"op":"insert","index":1,"item":{"kind":"approval","request_id":"a2","tool_name":"Write","input":{"file_path":"x.rs"},"status":"pending","run_id":"r1"}}
                  {"op":"approvals","pending":["a1","a2"]}
                drain
                  {"op":"update","index":0,"item":{"kind":"approval","request_id":"a1","tool_name":"Bash","input":{"command":"rm -rf build"},"status":"granted","run_id":"r1"}}
                  {"op":"approvals","pending":["a2"]}
                drain
                  {"op":"update","index":1,"item":{"kind":"approval","request_id":"a2","tool_name":"Write","input":{"file_path":"x.rs"},"status":"denied","run_id":"r1"}}
                  {"op":"approvals","pending":[]}
                [0] t1 approval Bash granted "rm -rf build"
                [1] t1 approval Write denied "x.rs"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 2 items, 0 pending approvals, 4 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn usage_keeps_the_latest_per_run_and_sums_runs() {
        check(
            r#"
            1 r1 token_usage_updated {"input_tokens":10,"output_tokens":5,"cost_usd":0.001}
            2 r1 token_usage_updated {"input_tokens":30,"output_tokens":7,"cache_read_input_tokens":100,"cost_usd":0.003}
            drain
            3 r2 token_usage_updated {"input_tokens":1,"output_tokens":2,"cost_usd":0.0005}
            4 r2 token_usage_updated {"output_tokens":4}
            drain
            5 r2 token_usage_updated {"output_tokens":4}
            6 r1 todo_updated {"items":[{"text":"read","status":"completed"},{"text":"fix","status":"in_progress"}]}
            7 r1 todo_updated {"items":[{"text":"read","status":"completed"},{"text":"fix","status":"completed"},{"text":"test","status":"pending"}]}
            "#,
            expect![[r#"
                drain
                  {"op":"usage","totals":{"input_tokens":30,"output_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":0,"reasoning_output_tokens":0,"cost_usd":0.003}}
                drain
                  {"op":"usage","totals":{"input_tokens":31,"output_tokens":11,"cache_read_input_tokens":100,"cache_creation_input_tokens":0,"reasoning_output_tokens":0,"cost_usd":0.0035}}
                drain
                  {"op":"insert","index":0,"item":{"kind":"todo","items":[{"status":"completed","text":"read"},{"status":"completed","text":"fix"},{"status":"pending","text":"test"}],"run_id":"r1"}}
                [0] t1 todo [x] read; [x] fix; [ ] test
                usage: input=31 output=11 cache_read=100 cache_creation=0 reasoning=0 cost_usd=0.0035; 1 items, 0 pending approvals, 7 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn replayed_events_change_nothing() {
        check(
            r#"
            1 r1 message_streamed {"message_id":"m1","delta":"a"}
            2 r1 message_streamed {"message_id":"m1","delta":"b"}
            drain
            1 r1 message_streamed {"message_id":"m1","delta":"a"}
            2 r1 message_streamed {"message_id":"m1","delta":"b"}
            3 r1 message_streamed {"message_id":"m1","delta":"c"}
            3 r1 message_streamed {"message_id":"m1","delta":"c"}
            drain
            0 r1 message_streamed {"message_id":"m1","delta":"unsequenced"}
            0 r1 message_streamed {"message_id":"m1","delta":"unsequenced"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"assistant_message","message_id":"m1","text":"ab","streaming":true,"discarded":false,"run_id":"r1"}}
                drain
                  {"op":"append","index":0,"text":"c"}
                drain
                  {"op":"append","index":0,"text":"unsequenced"}
                [0] t1 assistant_message "abcunsequenced" (streaming)
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 1 items, 0 pending approvals, 4 events, 4 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn errors_and_session_failure() {
        check(
            r#"
            1 r1 tool_call_started {"tool_call_id":"t1","tool_name":"Bash","tool_input":{"command":"make"}}
            2 r1 error_occurred {"error_message":"retrying (1/3)","severity":"warning"}
            3 - session_failed {"error_message":"process exited with code 1"}
            "#,
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"tool_call","tool_call_id":"t1","tool_name":"Bash","input":{"command":"make"},"status":"failed","output":"","run_id":"r1"}}
                  {"op":"insert","index":1,"item":{"kind":"error","message":"retrying (1/3)","run_id":"r1"}}
                  {"op":"insert","index":2,"item":{"kind":"error","message":"process exited with code 1"}}
                [0] t1 tool_call Bash failed "make"
                [1] t1 error "retrying (1/3)"
                [2] -- error "process exited with code 1"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 3 items, 0 pending approvals, 3 events, 0 duplicates
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn long_texts_are_cut_in_the_rendering() {
        let long = "x".repeat(100);
        check(
            &format!("1 - message_sent {{\"content\":\"line one\\n{long}\"}}"),
            expect![[r#"
                drain
                  {"op":"insert","index":0,"item":{"kind":"user_message","text":"line one\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}
                [0] -- user_message "line one\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…"
                usage: input=0 output=0 cache_read=0 cache_creation=0 reasoning=0 cost_usd=0; 1 items, 0 pending approvals, 1 events, 0 duplicates
            "#]],
        );
    }

    // Property tests over random event sequences: not all of them valid, so the projection
    // also meets terminals before starts, deltas after settlement, unknown ids and so on.

    const WORDS: &[&str] = &["a", "bc", "déf", "\n", "gh ij", ""];

    /// (type selector, run 0..3 with 0 = none, id 0..4, flag, word)
    type Spec = (u8, u8, u8, bool, &'static str);

    fn spec() -> impl Strategy<Value = Spec> {
        (
            0u8..30,
            0u8..3,
            0u8..4,
            any::<bool>(),
            prop::sample::select(WORDS),
        )
    }

    fn build(seq: u64, (k, run, x, flag, word): Spec) -> Event {
        use EventType as T;
        let run = ["", "r1", "r2"][usize::from(run)];
        let run = (!run.is_empty()).then_some(run);
        let m = format!("m{x}");
        let id = |mut d: Value| {
            if flag {
                d["message_id"] = json!(m);
            }
            d
        };
        let t = format!("t{x}");
        let a = format!("a{x}");
        let (kind, data) = match k {
            0 => (T::RunStarted, json!({})),
            1 => (T::MessageSent, json!({ "content": word })),
            2..=6 => (T::MessageStreamed, id(json!({ "delta": word }))),
            7 => (T::MessageReceived, id(json!({ "content": word }))),
            8 => (
                T::MessageReceived,
                id(json!({ "content": "", "discarded": true })),
            ),
            9 | 10 => (T::ReasoningStreamed, id(json!({ "delta": word }))),
            11 => (T::ReasoningReceived, id(json!({ "content": word }))),
            12 => (
                T::ToolCallStarted,
                json!({"tool_call_id": t, "tool_name": "Bash", "tool_input": {"command": word}}),
            ),
            13 | 14 => (
                T::ToolCallUpdated,
                json!({"tool_call_id": t, "output_delta": word}),
            ),
            15 => (
                T::ToolCallCompleted,
                json!({"tool_call_id": t, "tool_output": word}),
            ),
            16 => (T::ToolCallFailed, json!({"tool_call_id": t, "error": word})),
            17 => (T::ToolCallCancelled, json!({ "tool_call_id": t })),
            18 => (
                T::TodoUpdated,
                json!({"items": [{"text": word, "status": "pending"}]}),
            ),
            19 => (
                T::TokenUsageUpdated,
                json!({"input_tokens": x, "output_tokens": u64::from(x) * 3, "cost_usd": f64::from(x) * 0.001}),
            ),
            20 => (T::ErrorOccurred, json!({ "error_message": word })),
            21 => (
                T::ToolApprovalRequested,
                json!({"request_id": a, "tool_name": "Bash", "tool_input": {"command": word}}),
            ),
            22 => (T::ToolApprovalGranted, json!({ "request_id": a })),
            23 => (T::ToolApprovalDenied, json!({ "request_id": a })),
            24 => (T::RunCompleted, json!({})),
            25 => (T::RunFailed, json!({ "error_message": word })),
            26 => (T::RunCancelled, json!({ "reason": "user" })),
            27 => (T::SessionFailed, json!({ "error_message": word })),
            _ => (T::ModeChanged, json!({ "mode": word })),
        };
        event(seq, run, kind, data, &format!("{seq}"))
    }

    fn events(specs: Vec<Spec>) -> Vec<Event> {
        (1..).zip(specs).map(|(seq, s)| build(seq, s)).collect()
    }

    /// Applies the events, draining after those flagged and at the end; returns the model
    /// rebuilt from the changes alone.
    fn run_with_drains(timeline: &mut Timeline, events: &[Event], drains: &[bool]) -> Vec<Item> {
        let mut model = Vec::new();
        for (e, &d) in events
            .iter()
            .zip(drains.iter().chain(std::iter::repeat(&false)))
        {
            timeline.handle_event(e);
            if d {
                let changes = timeline.drain();
                assert_coalesced(&changes);
                apply(&mut model, &changes);
            }
        }
        let changes = timeline.drain();
        assert_coalesced(&changes);
        apply(&mut model, &changes);
        model
    }

    proptest! {
        #[wasm_bindgen_test(unsupported = test)]
        fn drained_changes_rebuild_the_items(
            specs in prop::collection::vec(spec(), 0..120),
            drains in prop::collection::vec(any::<bool>(), 0..120),
        ) {
            let events = events(specs);
            let mut timeline = Timeline::new();
            let model = run_with_drains(&mut timeline, &events, &drains);
            prop_assert_eq!(&model[..], timeline.items());
            prop_assert!(timeline.drain().is_empty());
        }

        #[wasm_bindgen_test(unsupported = test)]
        fn replaying_any_suffix_and_duplicates_changes_nothing(
            specs in prop::collection::vec(spec(), 1..120),
            cut in any::<prop::sample::Index>(),
            dups in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let events = events(specs);
            let mut timeline = Timeline::new();
            run_with_drains(&mut timeline, &events, &[]);
            let (items, usage, render) = (timeline.items().to_vec(), timeline.usage(), timeline.render());
            for e in &events[cut.index(events.len())..] {
                timeline.handle_event(e);
            }
            for d in &dups {
                let e = &events[d.index(events.len())];
                timeline.handle_event(e);
                timeline.handle_event(&e.with_sequence(0));
            }
            prop_assert!(timeline.drain().is_empty());
            prop_assert_eq!(&items[..], timeline.items());
            prop_assert_eq!(usage, timeline.usage());
            // Only the duplicate count in the last line may differ.
            let body = |r: &str| r.rsplit_once("events").map(|(a, _)| a.to_owned());
            prop_assert_eq!(body(&render), body(&timeline.render()));
        }

        #[wasm_bindgen_test(unsupported = test)]
        fn where_drains_fall_does_not_change_the_projection(
            specs in prop::collection::vec(spec(), 0..120),
            drains in prop::collection::vec(any::<bool>(), 0..120),
        ) {
            let events = events(specs);
            let mut chunked = Timeline::new();
            let mut whole = Timeline::new();
            let from_chunks = run_with_drains(&mut chunked, &events, &drains);
            let from_one = run_with_drains(&mut whole, &events, &[]);
            prop_assert_eq!(&from_chunks, &from_one);
            prop_assert_eq!(chunked.items(), whole.items());
            prop_assert_eq!(chunked.usage(), whole.usage());
            prop_assert!(chunked.pending_approvals().eq(whole.pending_approvals()));
            prop_assert_eq!(chunked.render(), whole.render());
        }
    }
}
