//! The canonical event: one immutable value per thing that happened in a session.
//!
//! Every provider's output is normalized into [`Event`]s; the store, the wire and the
//! projections only ever see this type. An event is built through [`EventInit`] and
//! [`Event::new`], which validates it and returns a typed [`EventError`]; after that it is
//! read-only, except that a sequence number can be stamped onto a copy with
//! [`Event::with_sequence`] by whoever owns the log (the stream buffer or the store).
//!
//! The core never reads the clock and never draws random numbers: timestamps are given by
//! the caller (or taken from the provider line), and absent ids are derived from stable
//! inputs with [`EventId::derive`], so normalizing the same transcript twice yields the
//! same ids and replays deduplicate by id.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::event_ref::{EventRef, EventView};
use super::json::{
    json_names, json_write, json_write_names, FromJson, JsonError, JsonObject, Reader, ToJson,
    HIGH, ONES,
};
use super::quoted::Quoted;
use super::time::Timestamp;

/// The version of the event schema written into every event.
pub const SCHEMA_VERSION: u32 = 1;

vocabulary! {
    /// What an event says happened. Serialized as its snake_case name; the packed frames
    /// (`core::event_ref::packed`) send it as its index in `EventType::ALL`, so a new type
    /// goes at the end.
    ///
    /// The first 28 are the AgentSessionManager vocabulary, spelled exactly as there;
    /// the rest cover what paseo's event union needs that those lack.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum EventType {
        // Session lifecycle.
        SessionCreated = "session_created",
        /// The provider process is up and identified itself (model, cwd, tools, its own session id).
        SessionStarted = "session_started",
        SessionPaused = "session_paused",
        SessionResumed = "session_resumed",
        SessionCompleted = "session_completed",
        SessionFailed = "session_failed",
        SessionCancelled = "session_cancelled",
        // Run (= turn) lifecycle.
        RunStarted = "run_started",
        RunCompleted = "run_completed",
        RunFailed = "run_failed",
        RunCancelled = "run_cancelled",
        RunTimeout = "run_timeout",
        // Messages.
        /// The user's prompt: `data.content`.
        MessageSent = "message_sent",
        /// One whole assistant message: `data.content`.
        MessageReceived = "message_received",
        /// One chunk of assistant text: `data.delta`.
        MessageStreamed = "message_streamed",
        // Tool calls.
        ToolCallStarted = "tool_call_started",
        ToolCallCompleted = "tool_call_completed",
        ToolCallFailed = "tool_call_failed",
        // Errors and usage.
        ErrorOccurred = "error_occurred",
        ErrorRecovered = "error_recovered",
        TokenUsageUpdated = "token_usage_updated",
        TurnCompleted = "turn_completed",
        // Workspace.
        WorkspaceSnapshotTaken = "workspace_snapshot_taken",
        WorkspaceDiffComputed = "workspace_diff_computed",
        // Policy.
        PolicyViolation = "policy_violation",
        // Approvals.
        ToolApprovalRequested = "tool_approval_requested",
        ToolApprovalGranted = "tool_approval_granted",
        ToolApprovalDenied = "tool_approval_denied",
        // Beyond the seed vocabulary, for paseo's union.
        /// One chunk of reasoning text: `data.delta`.
        ReasoningStreamed = "reasoning_streamed",
        /// One whole reasoning block: `data.content`.
        ReasoningReceived = "reasoning_received",
        /// Progress on a running tool call (partial output, a changed title): `data.tool_call_id`.
        ToolCallUpdated = "tool_call_updated",
        /// A tool call that ended because its turn was interrupted.
        ToolCallCancelled = "tool_call_cancelled",
        /// The agent's plan or todo list, whole: `data.items[{text, status}]`.
        TodoUpdated = "todo_updated",
        ModeChanged = "mode_changed",
        ModelChanged = "model_changed",
        ThinkingOptionChanged = "thinking_option_changed",
        /// The agent wants the user: `data.reason` is `finished`, `error` or `permission`.
        AttentionRequired = "attention_required",
        /// The provider compacted its context.
        ContextCompacted = "context_compacted",
        /// A turn silent for longer than the host's threshold (synthetic, not a terminal):
        /// `data.silent_ms`, `data.synthetic: true`. The turn's next event ends the stall.
        RunStalled = "run_stalled",
    }
}

vocabulary! {
    /// Why a run was cancelled: the closed vocabulary of `run_cancelled.data.reason`, the same
    /// whatever the provider (which keeps its own word in `data.details`). docs/events.md
    /// lists the values; a test checks that the list and the enum agree.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum CancelReason {
        /// The provider ended the turn as cancelled: in practice, the user's interrupt
        /// (Claude and Codex `interrupted`, Gemini `cancelled`, OpenCode `MessageAbortedError`).
        Interrupted = "interrupted",
        /// Synthetic: an interrupt the provider did not confirm within the cancel grace.
        InterruptTimeout = "interrupt_timeout",
        /// Synthetic: the session was closed while the turn ran.
        SessionClosed = "session_closed",
    }
}

impl EventType {
    /// True for the events that end a run: completed, failed, cancelled, timeout.
    pub const fn is_run_terminal(self) -> bool {
        matches!(
            self,
            EventType::RunCompleted
                | EventType::RunFailed
                | EventType::RunCancelled
                | EventType::RunTimeout
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which agent produced an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Claude,
    Codex,
    Gemini,
    Opencode,
    Amp,
    /// Any Agent Client Protocol agent other than the ones named above.
    Acp,
    /// The companion's built-in demo agent.
    Demo,
    /// Raw events in the seed's generic alias vocabulary, or the companion itself.
    Generic,
}

impl Provider {
    /// Every provider. The packed frames (`core::event_ref::packed`) send a provider as its
    /// index here: a new one goes at the end.
    pub const ALL: [Provider; 8] = [
        Provider::Claude,
        Provider::Codex,
        Provider::Gemini,
        Provider::Opencode,
        Provider::Amp,
        Provider::Acp,
        Provider::Demo,
        Provider::Generic,
    ];

    /// The lowercase name used on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::Claude => "claude",
            Provider::Codex => "codex",
            Provider::Gemini => "gemini",
            Provider::Opencode => "opencode",
            Provider::Amp => "amp",
            Provider::Acp => "acp",
            Provider::Demo => "demo",
            Provider::Generic => "generic",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event id: `evt_` followed by 32 lowercase hex digits.
///
/// Held inline (its 36 ASCII bytes, no allocation); it orders, hashes, prints and
/// serializes exactly as the string it is.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct EventId([u8; 36]);

impl EventId {
    /// Checks the `evt_` + 32 lowercase hex form.
    pub fn parse(s: &str) -> Result<EventId, EventError> {
        match <[u8; 36]>::try_from(s.as_bytes()) {
            Ok(bytes) if bytes.starts_with(b"evt_") && hex_digits(&bytes[4..]) => {
                Ok(EventId(bytes))
            }
            _ => Err(EventError::InvalidId(s.to_owned())),
        }
    }

    /// Derives an id from stable parts (FNV-1a, 128 bits). The same parts always give the
    /// same id; parts are length-prefixed so `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn derive(parts: &[&str]) -> EventId {
        EventId::from_hash(fnv1a128(parts))
    }

    /// The id of a finished [`Fnv128`] hash: `evt_` and its 32 hex digits.
    pub(crate) fn from_hash(hash: u128) -> EventId {
        let mut bytes = [0u8; 36];
        bytes[..4].copy_from_slice(b"evt_");
        bytes[4..].copy_from_slice(&hex32(hash));
        EventId(bytes)
    }

    /// The id's 128 bits (its 32 hex digits): a key as unique as the id, cheaper to hash.
    #[inline]
    pub fn bits(&self) -> u128 {
        // Only `parse` and `from_hash` make an id, both of lowercase hex digits. Eight at a
        // time, and in two halves: no 128-bit arithmetic (slow in wasm).
        let half = |at: usize| {
            let word = |at: usize| {
                let digits = self.0[at..at + 8].try_into().unwrap_or_default();
                u64::from(hex8(u64::from_be_bytes(digits)))
            };
            (word(at) << 32) | word(at + 8)
        };
        (u128::from(half(4)) << 64) | u128::from(half(20))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Only `parse` and `from_hash` make an id, both of ASCII.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// Whether every byte of `hex` (32 of them, as an id has) is a lowercase hex digit, eight at
/// a time.
fn hex_digits(hex: &[u8]) -> bool {
    // For a byte under 0x80, `b + (0x80 - x)` sets its high bit exactly when `b >= x`, and
    // carries into no other byte.
    let at_least = |w: u64, x: u8| w.wrapping_add(ONES * u64::from(0x80 - x)) & HIGH;
    hex.len() == 32
        && hex.chunks_exact(8).all(|chunk| {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            let digit = at_least(w, b'0') & !at_least(w, b'9' + 1);
            let letter = at_least(w, b'a') & !at_least(w, b'f' + 1);
            w & HIGH == 0 && digit | letter == HIGH
        })
}

/// The value of eight lowercase hex digits, read as a big-endian word (the first digit in
/// its most significant byte): what [`hex16`]'s `spread` does, undone.
fn hex8(word: u64) -> u32 {
    // '0'..='9' are 0x30..=0x39 and 'a'..='f' 0x61..=0x66: a digit's value is its low four
    // bits, plus 9 for a letter (bit 6).
    let mut n = (word & (ONES * 0x0f)) + ((word >> 6) & ONES) * 9;
    n = (n | (n >> 4)) & 0x00ff_00ff_00ff_00ff;
    n = (n | (n >> 8)) & 0x0000_ffff_0000_ffff;
    n = (n | (n >> 16)) & 0x0000_0000_ffff_ffff;
    n as u32
}

/// The 32 lowercase hex digits of `hash`, most significant first (what `{:032x}` writes).
#[inline]
pub(crate) fn hex32(hash: u128) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&hex16((hash >> 64) as u64));
    out[16..].copy_from_slice(&hex16(hash as u64));
    out
}

/// The 16 hex digits of `x`, eight at a time in a word (no 128-bit arithmetic, slow in wasm,
/// and no loop over the digits).
fn hex16(x: u64) -> [u8; 16] {
    // The eight nibbles of `half` in the eight bytes of a word, most significant first once
    // the word is written big-endian.
    let spread = |half: u32| {
        let mut n = u64::from(half);
        n = (n | (n << 16)) & 0x0000_ffff_0000_ffff;
        n = (n | (n << 8)) & 0x00ff_00ff_00ff_00ff;
        n = (n | (n << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        // A nibble's digit: '0' + n, and 'a' - '0' - 10 more where n is 10 or more (n + 6
        // reaches bit 4 exactly then; no byte carries into the next).
        let letters = ((n + 6 * ONES) >> 4) & ONES;
        (n + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&spread((x >> 32) as u32));
    out[8..].copy_from_slice(&spread(x as u32));
    out
}

/// Hashes as the id's text does (`str`'s `Hash`), so maps keyed by ids behave as before.
impl Hash for EventId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EventId").field(&self.as_str()).finish()
    }
}

impl Serialize for EventId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl TryFrom<String> for EventId {
    type Error = EventError;
    fn try_from(s: String) -> Result<EventId, EventError> {
        EventId::parse(&s)
    }
}

impl From<EventId> for String {
    fn from(id: EventId) -> String {
        id.as_str().to_owned()
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// FNV-1a over length-prefixed parts, 128-bit, then a final avalanche so that inputs that
/// differ in one byte give ids that differ everywhere. Stable across Rust versions, unlike
/// std's hasher.
pub(crate) fn fnv1a128(parts: &[&str]) -> u128 {
    let mut h = Fnv128::new();
    for part in parts {
        h.part(part.as_bytes());
    }
    h.finish()
}

/// [`fnv1a128`] fed one part at a time. It is `Copy`, so that the state after a common prefix
/// of parts (the session, the source, the line) can be kept and resumed for each id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    pub(crate) const fn new() -> Fnv128 {
        Fnv128(Fnv128::OFFSET)
    }

    fn eat(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= u128::from(b);
            h = h.wrapping_mul(Fnv128::PRIME);
        }
        self.0 = h;
    }

    /// Hashes one byte, as it is (a tag between parts).
    pub(crate) fn byte(&mut self, b: u8) {
        self.eat(&[b]);
    }

    /// Hashes one part, length-prefixed.
    pub(crate) fn part(&mut self, part: &[u8]) {
        self.eat(&(part.len() as u64).to_le_bytes());
        self.eat(part);
    }

    /// Hashes the decimal digits of `n` as one part (what `part(n.to_string())` hashes).
    pub(crate) fn part_u64(&mut self, n: u64) {
        self.part(super::json::decimal(n, &mut [0; 20]));
    }

    /// The hash: SplitMix64's finalizer on each half, each half seeded by the other.
    pub(crate) fn finish(self) -> u128 {
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            z ^ (z >> 31)
        };
        let h = self.0;
        let (hi, lo) = ((h >> 64) as u64, h as u64);
        let lo = mix(lo ^ mix(hi));
        let hi = mix(hi ^ lo);
        (u128::from(hi) << 64) | u128::from(lo)
    }
}

/// Why an event could not be built or read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("session_id is required and must not be empty")]
    EmptySessionId,
    #[error("invalid event id {}: expected \"evt_\" followed by 32 lowercase hex digits", Quoted(.0))]
    InvalidId(String),
    #[error("unknown event type {}", Quoted(.0))]
    UnknownType(String),
    #[error("invalid timestamp {}: expected RFC 3339", Quoted(.0))]
    InvalidTimestamp(String),
    #[error("`{field}` must be a JSON object")]
    NotAnObject { field: &'static str },
    #[error("run_id must not be empty when present")]
    EmptyRunId,
}

/// The fields of a new event. `id` is derived when absent; see [`Event::new`].
#[derive(Clone, Debug)]
pub struct EventInit {
    pub id: Option<EventId>,
    pub kind: EventType,
    pub session_id: String,
    pub run_id: Option<String>,
    pub sequence: u64,
    pub timestamp: Timestamp,
    pub provider: Provider,
    pub correlation_id: Option<String>,
    pub data: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

impl EventInit {
    /// A minimal init: no id, no run, sequence 0 (unassigned), empty data and metadata.
    pub fn new(
        kind: EventType,
        session_id: impl Into<String>,
        provider: Provider,
        timestamp: Timestamp,
    ) -> EventInit {
        EventInit {
            id: None,
            kind,
            session_id: session_id.into(),
            run_id: None,
            sequence: 0,
            timestamp,
            provider,
            correlation_id: None,
            data: Map::new(),
            metadata: Map::new(),
        }
    }
}

/// One immutable canonical event. Build it with [`Event::new`]; read it with the getters.
///
/// `sequence` 0 means "not yet placed in a log"; logs number from 1. The session and run
/// ids are shared (`Arc<str>`): the events of one normalizer hold one copy of each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    id: EventId,
    #[serde(rename = "type")]
    kind: EventType,
    #[serde(serialize_with = "shared_str")]
    session_id: Arc<str>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "shared_opt_str"
    )]
    run_id: Option<Arc<str>>,
    sequence: u64,
    timestamp: Timestamp,
    provider: Provider,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "shared_opt_str"
    )]
    correlation_id: Option<Arc<str>>,
    data: JsonObject,
    metadata: JsonObject,
    schema_version: u32,
}

impl Event {
    /// Validates `init` and builds the event. An absent id is derived from the session, run,
    /// type, sequence, timestamp and correlation id; callers that emit several events with
    /// equal fields must pass distinct ids (the normalizer derives them from line positions).
    pub fn new(init: EventInit) -> Result<Event, EventError> {
        let id = match init.id {
            Some(id) => id,
            None => derived_id(
                &init.session_id,
                init.run_id.as_deref(),
                init.kind,
                init.sequence,
                init.timestamp,
                init.correlation_id.as_deref(),
            ),
        };
        Event::from_parts(
            id,
            init.kind,
            &Arc::from(init.session_id),
            init.run_id.map(Arc::from),
            init.sequence,
            init.timestamp,
            init.provider,
            init.correlation_id.map(Arc::from),
            init.data.into(),
            init.metadata.into(),
        )
    }

    /// [`Event::new`] for a normalizer: the id is given and the session, run and correlation
    /// ids are shared handles (checked as `new` checks them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        id: EventId,
        kind: EventType,
        session_id: &Arc<str>,
        run_id: Option<Arc<str>>,
        sequence: u64,
        timestamp: Timestamp,
        provider: Provider,
        correlation_id: Option<Arc<str>>,
        data: JsonObject,
        metadata: JsonObject,
    ) -> Result<Event, EventError> {
        if session_id.is_empty() {
            return Err(EventError::EmptySessionId);
        }
        if run_id.as_deref() == Some("") {
            return Err(EventError::EmptyRunId);
        }
        Ok(Event {
            id,
            kind,
            session_id: Arc::clone(session_id),
            run_id,
            sequence,
            timestamp,
            provider,
            correlation_id,
            data,
            metadata,
            schema_version: SCHEMA_VERSION,
        })
    }

    /// A copy of this event placed at `sequence` in a log.
    pub fn with_sequence(&self, sequence: u64) -> Event {
        Event {
            sequence,
            ..self.clone()
        }
    }

    /// Consumes the event and returns it placed at `sequence`.
    pub fn into_sequenced(mut self, sequence: u64) -> Event {
        self.sequence = sequence;
        self
    }

    pub fn id(&self) -> &EventId {
        &self.id
    }
    pub fn kind(&self) -> EventType {
        self.kind
    }
    pub fn session_id(&self) -> &str {
        &self.session_id
    }
    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }
    pub fn sequence(&self) -> u64 {
        self.sequence
    }
    pub fn timestamp(&self) -> Timestamp {
        self.timestamp
    }
    pub fn provider(&self) -> Provider {
        self.provider
    }
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }
    /// `data`'s fields (read from its text when first asked for, if it was made from text).
    pub fn data(&self) -> &Map<String, Value> {
        self.data.map()
    }
    pub fn metadata(&self) -> &Map<String, Value> {
        self.metadata.map()
    }
    /// `data` as both its text and its map (see [`JsonObject`]).
    pub fn data_object(&self) -> &JsonObject {
        &self.data
    }
    pub fn metadata_object(&self) -> &JsonObject {
        &self.metadata
    }
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// A string field of `data`, if present.
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.data().get(key).and_then(Value::as_str)
    }

    /// Reads one event as its [`FromJson`] reader does, keeping `data`'s text as it is when it
    /// is canonical ([`EventRef::into_event_keeping_text`]): for lines our writer wrote (the
    /// store's), whose `data` then builds no map unless it is read.
    pub fn from_written_json(text: &str) -> Result<Event, JsonError> {
        Reader::read_all::<EventRef<'_>>(text).map(EventRef::into_event_keeping_text)
    }

    /// The event as one line of JSON (no trailing newline): what serde's `Serialize` writes,
    /// by `core::json`'s writer.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(512);
        self.write_json(&mut out);
        out
    }
}

json_write!(Event {
    id,
    kind as "type",
    session_id,
    run_id?,
    sequence,
    timestamp,
    provider,
    correlation_id?,
    data,
    metadata,
    schema_version,
});
json_write_names!(EventType);
json_write_names!(Provider);
json_write_names!(CancelReason);

/// Its 36 ASCII characters, which need no escape.
impl ToJson for EventId {
    fn write_json(&self, out: &mut String) {
        out.push('"');
        out.push_str(self.as_str());
        out.push('"');
    }
}

fn shared_str<S: Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

fn shared_opt_str<S: Serializer>(s: &Option<Arc<str>>, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => ser.serialize_some(&**s),
        None => ser.serialize_none(),
    }
}

/// The unvalidated shape of an event on the wire; checked as [`Event::new`] checks. The
/// fields that are only checked or parsed (id, type, timestamp) are borrowed from the input
/// when they hold no escape, and the session and run ids go straight into their shared
/// handles: decoding an event allocates nothing more for them (the page's hot path,
/// tests/js/src/projector.bench.ts).
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    session_id: Cow<'a, str>,
    #[serde(borrow)]
    run_id: Option<Cow<'a, str>>,
    #[serde(default)]
    sequence: u64,
    #[serde(borrow)]
    timestamp: Cow<'a, str>,
    provider: Provider,
    #[serde(borrow)]
    correlation_id: Option<Cow<'a, str>>,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
}

/// Read as the wire's fields (id, type and timestamp borrowed from the input) and validated
/// as by [`Event::new`] (any failure is the deserializer's error, with the [`EventError`]'s
/// message).
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
        let raw = RawEvent::deserialize(deserializer)?;
        Event::try_from(raw).map_err(serde::de::Error::custom)
    }
}

/// Read as serde reads it (the same fields, checks and errors' messages), by `core::json`:
/// how the client reads the events of a frame, through the one reader of events there is
/// (an [`EventRef`], made owned).
impl<'a> FromJson<'a> for Event {
    fn read(r: &mut Reader<'a>) -> Result<Event, JsonError> {
        EventRef::read(r).map(EventView::into_event)
    }
}

json_names!(Provider: [Claude, Codex, Gemini, Opencode, Amp, Acp, Demo, Generic]);

impl<'a> FromJson<'a> for EventId {
    fn read(r: &mut Reader<'a>) -> Result<EventId, JsonError> {
        let text = r.string()?;
        EventId::parse(&text).map_err(|e| r.error(e))
    }
}

impl TryFrom<RawEvent<'_>> for Event {
    type Error = EventError;
    fn try_from(raw: RawEvent<'_>) -> Result<Event, EventError> {
        let is_object =
            |v: &Option<Value>| matches!(v, None | Some(Value::Null | Value::Object(_)));
        let (id, kind, timestamp) = WireParts {
            id: raw.id.as_deref(),
            kind: &raw.kind,
            session_id: &raw.session_id,
            run_id: raw.run_id.as_deref(),
            sequence: raw.sequence,
            timestamp: &raw.timestamp,
            correlation_id: raw.correlation_id.as_deref(),
            data_is_object: is_object(&raw.data),
            metadata_is_object: is_object(&raw.metadata),
        }
        .check()?;
        let object = |v: Option<Value>| match v {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        // Straight from the frame into the shared handles: one allocation each.
        Event::from_parts(
            id,
            kind,
            &Arc::from(&*raw.session_id),
            raw.run_id.as_deref().map(Arc::from),
            raw.sequence,
            timestamp,
            raw.provider,
            raw.correlation_id.as_deref().map(Arc::from),
            object(raw.data).into(),
            object(raw.metadata).into(),
        )
    }
}

/// An event's fields as read from text, before the checks of [`Event::new`]: what serde's
/// reader and `core::json`'s ([`EventRef`]) both check, by one function.
pub(crate) struct WireParts<'r> {
    pub id: Option<&'r str>,
    pub kind: &'r str,
    pub session_id: &'r str,
    pub run_id: Option<&'r str>,
    pub sequence: u64,
    pub timestamp: &'r str,
    pub correlation_id: Option<&'r str>,
    /// `data` is an object, `null` or absent.
    pub data_is_object: bool,
    pub metadata_is_object: bool,
}

impl WireParts<'_> {
    /// The id (derived when absent), type and timestamp, checked in the order `Event::new` of
    /// the same fields checks them, so the first failure is the one it reports.
    pub(crate) fn check(&self) -> Result<(EventId, EventType, Timestamp), EventError> {
        let id = self.id.map(EventId::parse).transpose()?;
        let kind = EventType::parse(self.kind)
            .ok_or_else(|| EventError::UnknownType(self.kind.to_owned()))?;
        let timestamp = Timestamp::parse_rfc3339(self.timestamp)
            .ok_or_else(|| EventError::InvalidTimestamp(self.timestamp.to_owned()))?;
        for (is_object, field) in [
            (self.data_is_object, "data"),
            (self.metadata_is_object, "metadata"),
        ] {
            if !is_object {
                return Err(EventError::NotAnObject { field });
            }
        }
        if self.session_id.is_empty() {
            return Err(EventError::EmptySessionId);
        }
        if self.run_id == Some("") {
            return Err(EventError::EmptyRunId);
        }
        let id = id.unwrap_or_else(|| {
            derived_id(
                self.session_id,
                self.run_id,
                kind,
                self.sequence,
                timestamp,
                self.correlation_id,
            )
        });
        Ok((id, kind, timestamp))
    }
}

/// The id of an event built without one: derived from its session, run, type, sequence,
/// timestamp and correlation id.
fn derived_id(
    session_id: &str,
    run_id: Option<&str>,
    kind: EventType,
    sequence: u64,
    timestamp: Timestamp,
    correlation_id: Option<&str>,
) -> EventId {
    EventId::derive(&[
        session_id,
        run_id.unwrap_or(""),
        kind.as_str(),
        &sequence.to_string(),
        &timestamp.to_string(),
        correlation_id.unwrap_or(""),
    ])
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// An id's digits are its bits in hex, most significant first, and read back as them.
    #[wasm_bindgen_test(unsupported = test)]
    fn an_id_spells_its_bits() {
        let mut x: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        for _ in 0..64 {
            let id = EventId::from_hash(x);
            assert_eq!(id.as_str(), format!("evt_{x:032x}"));
            assert_eq!(id.bits(), x);
            x = x.rotate_left(7) ^ (x >> 3) ^ 0x9e37_79b9;
        }
        assert_eq!(
            EventId::from_hash(u128::MAX).as_str(),
            format!("evt_{}", "f".repeat(32))
        );
        assert_eq!(
            EventId::from_hash(0).as_str(),
            format!("evt_{}", "0".repeat(32))
        );
        // Every digit at every place.
        for digit in 0..16u128 {
            for place in 0..32 {
                let x = digit << (4 * place);
                assert_eq!(EventId::from_hash(x).as_str(), format!("evt_{x:032x}"));
            }
        }
    }

    fn init() -> EventInit {
        EventInit::new(
            EventType::MessageReceived,
            "s1",
            Provider::Claude,
            Timestamp::from_unix_millis(1_700_000_000_000),
        )
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn docs_and_typescript_list_exactly_the_cancel_reasons() {
        use crate::core::provider_error::tests::{documented, ts_union};
        let ours: Vec<&str> = CancelReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(documented("### `run_cancelled.reason`"), ours);
        assert_eq!(ts_union("CancelReason"), ours);
        let types: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(ts_union("EventType"), types);
        for &r in CancelReason::ALL {
            assert_eq!(CancelReason::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn there_are_the_28_seed_types_and_our_extensions() {
        assert_eq!(EventType::ALL.len(), 39);
        assert_eq!(EventType::ALL[0].as_str(), "session_created");
        assert_eq!(EventType::ALL[27].as_str(), "tool_approval_denied");
        for &t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn empty_session_is_refused() {
        let mut i = init();
        i.session_id.clear();
        assert_eq!(Event::new(i).unwrap_err(), EventError::EmptySessionId);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn derived_ids_are_stable_and_well_formed() {
        let a = Event::new(init()).unwrap();
        let b = Event::new(init()).unwrap();
        assert_eq!(a.id(), b.id());
        assert!(EventId::parse(a.id().as_str()).is_ok());
        assert_ne!(
            EventId::derive(&["ab", "c"]),
            EventId::derive(&["a", "bc"]),
            "parts are length-prefixed"
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_id_is_its_32_hex_digits() {
        let mut hash: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        for i in 0..200u32 {
            let id = EventId::from_hash(hash);
            assert_eq!(id.bits(), hash, "{id}");
            let parsed = EventId::parse(id.as_str()).unwrap();
            assert_eq!(
                parsed.bits(),
                u128::from_str_radix(&id.as_str()[4..], 16).unwrap()
            );
            hash = hash.rotate_left(7) ^ u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        for digits in ["0".repeat(32), "f".repeat(32), "0123456789abcdef".repeat(2)] {
            let id = EventId::parse(&format!("evt_{digits}")).unwrap();
            assert_eq!(id.bits(), u128::from_str_radix(&digits, 16).unwrap());
        }
    }

    /// An id parses exactly when each of its 32 digits is a lowercase hex digit: every byte
    /// in every place, against the byte-by-byte reading.
    #[wasm_bindgen_test(unsupported = test)]
    fn every_byte_in_every_place_of_an_id_is_checked() {
        let good = "evt_0123456789abcdef0123456789abcdef";
        for place in 4..36 {
            for byte in 0..=0x7fu8 {
                let mut text = good.as_bytes().to_vec();
                text[place] = byte;
                let text = String::from_utf8(text).unwrap();
                let want = matches!(byte, b'0'..=b'9' | b'a'..=b'f');
                assert_eq!(EventId::parse(&text).is_ok(), want, "{text:?}");
            }
            // And bytes above ASCII: a character of two.
            if place < 35 {
                let text = format!("{}é{}", &good[..place], &good[place + 2..]);
                assert!(EventId::parse(&text).is_err(), "{text}");
            }
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn bad_ids_are_typed_errors() {
        for bad in [
            "evt_123",
            "EVT_00000000000000000000000000000000",
            "evt_0000000000000000000000000000000G",
        ] {
            assert!(
                matches!(EventId::parse(bad), Err(EventError::InvalidId(_))),
                "{bad}"
            );
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn json_round_trip_validates() {
        let e = Event::new(init()).unwrap().into_sequenced(7);
        let back: Event = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(back, e);
        let bad = e.to_json().replace("message_received", "message_exploded");
        let err = serde_json::from_str::<Event>(&bad).unwrap_err().to_string();
        assert!(err.contains("unknown event type"), "{err}");
        let no_session = e.to_json().replace("\"s1\"", "\"\"");
        assert!(serde_json::from_str::<Event>(&no_session).is_err());
        // Without an id (and with a run and a correlation id), the id `new` derives.
        let mut with_run = init();
        with_run.run_id = Some("r\"1".into());
        with_run.correlation_id = Some("c1".into());
        with_run.sequence = 3;
        let e = Event::new(with_run).unwrap();
        let mut json: Value = serde_json::from_str(&e.to_json()).unwrap();
        json.as_object_mut().unwrap().remove("id");
        let back: Event = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, e);
        let back: Event = serde_json::from_str(&json.to_string()).unwrap();
        assert_eq!(back, e);
        json["run_id"] = "".into();
        let err = serde_json::from_value::<Event>(json)
            .unwrap_err()
            .to_string();
        assert!(err.contains("run"), "{err}");
    }
}
