//! Provider output in, canonical [`Event`]s out: one streaming, sans-IO normalizer per format.
//!
//! [`Normalizer`] owns the framing that every provider shares and hands each *record* (one
//! JSON object) to the decoder of its format, which emits events through `Out`:
//!
//! * JSON Lines, one object per line, `\r\n` tolerated;
//! * Server-Sent Events (`data:` lines, dispatched on a blank line; `event:`/`id:`/comments
//!   skipped), as `opencode serve` and the model APIs speak;
//! * a pretty-printed JSON document (a file whose first line is `[` or `{`): an array is a list
//!   of records, an object with an `updates` array (ACP captures) is that list, any other
//!   object is one record.
//!
//! Driving rule: feed input with [`Normalizer::handle_bytes`] (any chunking gives the same
//! result), end it with [`Normalizer::handle_eof`], and after each call drain
//! [`Normalizer::poll_event`] and [`Normalizer::poll_diagnostic`] until they return `None`.
//!
//! The normalizer never panics and never fails as a whole: a line it cannot read (invalid
//! UTF-8, invalid JSON, too long, not an object, an unknown type) becomes a [`Diagnostic`]
//! with its line number and reason, and [`Stats`] counts every line read, every event
//! emitted, every known line deliberately ignored and every diagnostic.

mod acp;
mod alias;
mod amp;
mod claude;
mod codex;
mod codex_app_server;
mod fast;
mod gemini;
mod opencode;
mod turn;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::event::{hex32, Event, EventId, EventType, Fnv128, Provider};
use super::json::{zero_bytes, JsonObject, ObjectWriter, ToJson, ONES};
use super::time::Timestamp;

pub use alias::{canonical_type, filter_by_run, filter_by_type, normalize_batch, sort_events};

/// The output formats we read. The CLI names are the `--provider` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `claude -p --output-format stream-json --verbose [--include-partial-messages]`.
    Claude,
    /// `codex exec --json`.
    Codex,
    /// `codex app-server` JSON-RPC notifications.
    CodexAppServer,
    /// `gemini --output-format stream-json`.
    Gemini,
    /// Agent Client Protocol `session/update` notifications (`gemini --experimental-acp`).
    GeminiAcp,
    /// `opencode run --format json` lines and `opencode serve` `/event` payloads.
    Opencode,
    /// `amp --execute --stream-json`.
    Amp,
    /// The seed's generic alias vocabulary (`assistant_message`, `delta`, `tool_call`, …).
    Generic,
}

impl Format {
    pub const ALL: &'static [Format] = &[
        Format::Claude,
        Format::Codex,
        Format::CodexAppServer,
        Format::Gemini,
        Format::GeminiAcp,
        Format::Opencode,
        Format::Amp,
        Format::Generic,
    ];

    /// The name used by `agentwire normalize --provider`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Claude => "claude",
            Format::Codex => "codex",
            Format::CodexAppServer => "codex-app-server",
            Format::Gemini => "gemini",
            Format::GeminiAcp => "gemini-acp",
            Format::Opencode => "opencode",
            Format::Amp => "amp",
            Format::Generic => "generic",
        }
    }

    pub fn parse(name: &str) -> Option<Format> {
        Format::ALL.iter().copied().find(|f| f.as_str() == name)
    }

    /// The provider stamped on the events of this format.
    pub const fn provider(self) -> Provider {
        match self {
            Format::Claude => Provider::Claude,
            Format::Codex | Format::CodexAppServer => Provider::Codex,
            Format::Gemini | Format::GeminiAcp => Provider::Gemini,
            Format::Opencode => Provider::Opencode,
            Format::Amp => Provider::Amp,
            Format::Generic => Provider::Generic,
        }
    }

    /// Guesses the format from one record; `None` when nothing identifies it.
    pub fn detect(record: &Value) -> Option<Format> {
        let obj = record.as_object()?;
        let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
        // JSON-RPC: ACP methods live under `session/`; Codex's app-server omits `jsonrpc`.
        if let Some(method) = obj.get("method").and_then(Value::as_str) {
            let acp = method.starts_with("session/") || method.starts_with("fs/");
            return Some(if acp {
                Format::GeminiAcp
            } else {
                Format::CodexAppServer
            });
        }
        if obj.contains_key("sessionUpdate") {
            return Some(Format::GeminiAcp);
        }
        if obj.contains_key("id") && (obj.contains_key("result") || obj.contains_key("error")) {
            let acp = obj.contains_key("jsonrpc");
            return Some(if acp {
                Format::GeminiAcp
            } else {
                Format::CodexAppServer
            });
        }
        if ty.starts_with("thread.") || ty.starts_with("turn.") || ty.starts_with("item.") {
            return Some(Format::Codex);
        }
        if obj.contains_key("part")
            || obj.contains_key("properties")
            || (obj.contains_key("info") && obj.contains_key("parts"))
        {
            return Some(Format::Opencode);
        }
        match ty {
            "system" | "assistant" | "user" | "result" | "stream_event" | "control_request"
            | "control_response" | "rate_limit_event" => {
                let amp = obj
                    .get("session_id")
                    .and_then(Value::as_str)
                    .is_some_and(|s| s.starts_with("T-"));
                Some(if amp { Format::Amp } else { Format::Claude })
            }
            "init" | "message" | "tool_use" | "tool_result" if obj.contains_key("timestamp") => {
                Some(Format::Gemini)
            }
            "" => None,
            _ => Some(Format::Generic),
        }
    }

    fn decoder(self) -> Box<dyn Decoder> {
        match self {
            Format::Claude => Box::new(claude::Claude::new(Provider::Claude)),
            Format::Amp => Box::new(amp::Amp::new()),
            Format::Codex => Box::new(codex::Codex::default()),
            Format::CodexAppServer => Box::new(codex_app_server::CodexAppServer::default()),
            Format::Gemini => Box::new(gemini::Gemini::default()),
            Format::GeminiAcp => Box::new(acp::Acp::new(Provider::Gemini)),
            Format::Opencode => Box::new(opencode::Opencode::default()),
            Format::Generic => Box::new(alias::Generic::default()),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a [`Normalizer`] stamps and bounds what it reads.
#[derive(Clone, Debug)]
pub struct Config {
    /// The session every event belongs to (required, non-empty).
    pub session_id: String,
    /// Distinguishes one provider process from the next in the same session, so that derived
    /// event ids never collide when line numbers restart. Empty for a single transcript.
    pub source: String,
    /// Lines longer than this become a [`DiagnosticKind::LineTooLong`] (default 4 MiB).
    pub max_line_bytes: usize,
    /// A pretty-printed JSON document longer than this is refused (default 64 MiB).
    pub max_document_bytes: usize,
    /// The sequence of the first event emitted (default 1).
    pub first_sequence: u64,
}

impl Config {
    pub fn new(session_id: impl Into<String>) -> Config {
        Config {
            session_id: session_id.into(),
            source: String::new(),
            max_line_bytes: 4 << 20,
            max_document_bytes: 64 << 20,
            first_sequence: 1,
        }
    }
}

/// Why a line or record produced no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticKind {
    InvalidUtf8,
    InvalidJson,
    LineTooLong,
    NotAnObject,
    UnknownType,
    MissingField,
    DocumentTooLong,
}

impl DiagnosticKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            DiagnosticKind::InvalidUtf8 => "invalid_utf8",
            DiagnosticKind::InvalidJson => "invalid_json",
            DiagnosticKind::LineTooLong => "line_too_long",
            DiagnosticKind::NotAnObject => "not_an_object",
            DiagnosticKind::UnknownType => "unknown_type",
            DiagnosticKind::MissingField => "missing_field",
            DiagnosticKind::DocumentTooLong => "document_too_long",
        }
    }
}

/// A line (or record of a JSON document) the normalizer could not turn into events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// 1-based line number; for a JSON document, the 1-based index of the record.
    pub line: u64,
    pub kind: DiagnosticKind,
    /// What exactly was wrong, e.g. the JSON error or the unknown type's name.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: {}: {}",
            self.line,
            self.kind.as_str(),
            self.message
        )
    }
}

/// What a normalizer has read so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Non-blank lines (or document records) read.
    pub records: u64,
    pub events: u64,
    /// Records of a known type that carry nothing for the canonical model (e.g. `ping`).
    pub ignored: u64,
    pub diagnostics: u64,
}

/// A streaming normalizer for one provider process's output. See the module docs for the
/// driving rule.
pub struct Normalizer {
    format: Option<Format>,
    decoder: Option<Box<dyn Decoder>>,
    config: Config,
    state: EmitState,
    /// Bytes of the current, unfinished line.
    partial: Vec<u8>,
    /// Length of an over-long line being skipped, if any.
    skipping: Option<usize>,
    /// Accumulated `data:` payload of the current SSE event.
    sse: Option<String>,
    /// The last dispatched payload's buffer, cleared, for the next one.
    sse_spare: String,
    /// Some when the input is a pretty-printed JSON document, buffered until EOF.
    document: Option<Vec<u8>>,
    seen_content: bool,
    ended: bool,
    /// The typed fast paths and owned records are in use (always, but in the test that
    /// compares them with the `Value` path).
    fast: bool,
}

impl Normalizer {
    /// A normalizer for `format`, or one that detects the format from the first record.
    pub fn new(format: Option<Format>, config: Config) -> Normalizer {
        let sequence = config.first_sequence;
        Normalizer {
            format,
            decoder: format.map(Format::decoder),
            state: EmitState {
                session_id: Arc::from(config.session_id.as_str()),
                run: None,
                correlation: None,
                id_prefix: {
                    let mut h = Fnv128::new();
                    h.part(config.session_id.as_bytes());
                    h.part(config.source.as_bytes());
                    h
                },
                provider: format.map_or(Provider::Generic, Format::provider),
                sequence,
                turn_counter: 0,
                pending_run_ids: VecDeque::new(),
                events: VecDeque::new(),
                diagnostics: VecDeque::new(),
                stats: Stats::default(),
                scratch: String::new(),
                unreadable: false,
            },
            config,
            partial: Vec::new(),
            skipping: None,
            sse: None,
            sse_spare: String::new(),
            document: None,
            seen_content: false,
            ended: false,
            fast: true,
        }
    }

    /// The format in use: the one given, or the one detected (`None` before detection).
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    pub fn stats(&self) -> Stats {
        self.state.stats
    }

    /// Gives the next turn the decoder starts this id instead of a derived one. The host
    /// calls it when it submits a prompt, so the provider's turn carries the host's turn id.
    pub fn expect_run(&mut self, run_id: impl Into<String>) {
        self.state.pending_run_ids.push_back(run_id.into());
    }

    /// Feeds raw output; `now` stamps events whose line carries no timestamp.
    pub fn handle_bytes(&mut self, mut bytes: &[u8], now: Timestamp) {
        if self.ended {
            return;
        }
        if let Some(doc) = &mut self.document {
            doc.extend_from_slice(bytes);
            return self.check_document_size();
        }
        while let Some(nl) = find_newline(bytes) {
            let (head, rest) = (&bytes[..nl], &bytes[nl + 1..]);
            bytes = rest;
            if let Some(len) = self.skipping.take() {
                self.line_too_long(len + head.len());
                continue;
            }
            if self.partial.len() + head.len() > self.config.max_line_bytes {
                let len = self.partial.len() + head.len();
                self.partial.clear();
                self.line_too_long(len);
                continue;
            }
            if self.partial.is_empty() {
                self.handle_line(head, now);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.handle_line(&line, now);
                // Keep a small buffer for the next split line.
                if line.capacity() <= 1 << 16 {
                    line.clear();
                    self.partial = line;
                }
            }
            if let Some(doc) = &mut self.document {
                doc.extend_from_slice(bytes);
                return self.check_document_size();
            }
        }
        if let Some(len) = &mut self.skipping {
            *len += bytes.len();
        } else if self.partial.len() + bytes.len() > self.config.max_line_bytes {
            self.skipping = Some(self.partial.len() + bytes.len());
            self.partial = Vec::new();
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    /// Ends the input: reads an unterminated last line, closes what the provider left open.
    pub fn handle_eof(&mut self, now: Timestamp) {
        if self.ended {
            return;
        }
        if let Some(len) = self.skipping.take() {
            self.line_too_long(len);
        }
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.handle_line(&line, now);
        }
        self.dispatch_sse(now);
        if let Some(doc) = self.document.take() {
            self.handle_document(&doc, now);
        }
        self.ended = true;
        if let Some(decoder) = &mut self.decoder {
            let line = self.state.stats.records + 1;
            decoder.finish(&mut self.state.out(line, now));
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.state.events.pop_front()
    }

    pub fn poll_diagnostic(&mut self) -> Option<Diagnostic> {
        self.state.diagnostics.pop_front()
    }

    fn line_too_long(&mut self, len: usize) {
        self.state.stats.records += 1;
        let line = self.state.stats.records;
        self.state.diagnose(
            line,
            DiagnosticKind::LineTooLong,
            format!(
                "{len} bytes, over the limit of {}",
                self.config.max_line_bytes
            ),
        );
    }

    fn check_document_size(&mut self) {
        let too_long = self
            .document
            .as_ref()
            .is_some_and(|d| d.len() > self.config.max_document_bytes);
        if too_long {
            let len = self.document.take().map_or(0, |d| d.len());
            self.state.diagnose(
                1,
                DiagnosticKind::DocumentTooLong,
                format!(
                    "JSON document over {} bytes ({len} read)",
                    self.config.max_document_bytes
                ),
            );
            self.ended = true;
        }
    }

    fn handle_line(&mut self, line: &[u8], now: Timestamp) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let blank = line.iter().all(u8::is_ascii_whitespace);
        if blank {
            self.dispatch_sse(now);
            return;
        }
        let trimmed = line.trim_ascii();
        if !self.seen_content && (trimmed == b"[" || trimmed == b"{") {
            self.seen_content = true;
            let mut doc = line.to_vec();
            doc.push(b'\n');
            self.document = Some(doc);
            return;
        }
        self.seen_content = true;
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                self.dispatch_sse(now);
                self.state.stats.records += 1;
                let line_no = self.state.stats.records;
                let msg = format!("invalid UTF-8 at byte {}", e.valid_up_to());
                return self
                    .state
                    .diagnose(line_no, DiagnosticKind::InvalidUtf8, msg);
            }
        };
        match sse_field(text) {
            Some(SseField::Data(payload)) => {
                let buf = self
                    .sse
                    .get_or_insert_with(|| std::mem::take(&mut self.sse_spare));
                if !buf.is_empty() {
                    buf.push('\n');
                }
                buf.push_str(payload);
                return;
            }
            Some(SseField::Other) => return,
            None => {}
        }
        self.dispatch_sse(now);
        self.state.stats.records += 1;
        let line_no = self.state.stats.records;
        self.handle_json_text(line_no, text, now);
    }

    fn dispatch_sse(&mut self, now: Timestamp) {
        let Some(mut payload) = self.sse.take() else {
            return;
        };
        if !(payload.trim().is_empty() || payload.trim() == "[DONE]") {
            self.state.stats.records += 1;
            let line_no = self.state.stats.records;
            self.handle_json_text(line_no, &payload, now);
        }
        // Keep a small buffer for the next event.
        if payload.capacity() <= 1 << 16 {
            payload.clear();
            self.sse_spare = payload;
        }
    }

    fn handle_json_text(&mut self, line_no: u64, text: &str, now: Timestamp) {
        if let Some(decoder) = self.decoder.as_mut().filter(|_| self.fast) {
            if fast::is_object_text(text) {
                self.state.unreadable = false;
                if decoder.record_text(text, &mut self.state.out(line_no, now)) {
                    return;
                }
                // The typed read failed: `fast::Valid` finds the error `Value` would in
                // invalid JSON (the same parse, building nothing), so such a line is read
                // only once more, without a tree that would be thrown away.
                if self.state.unreadable {
                    if let Err(e) = serde_json::from_str::<fast::Valid>(text) {
                        return self.invalid_json(line_no, text, &e);
                    }
                }
            }
        }
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.handle_record(line_no, value, now),
            Err(e) => self.invalid_json(line_no, text, &e),
        }
    }

    /// The diagnostic of a line that is not JSON: the parser's error and the line's start.
    fn invalid_json(&mut self, line_no: u64, text: &str, e: &serde_json::Error) {
        use fmt::Write;
        let start = excerpt(text, 60);
        let mut msg = String::with_capacity(64 + start.len());
        let _ = write!(msg, "{e}");
        msg.push_str("; line starts ");
        push_debug(&mut msg, start);
        self.state
            .diagnose(line_no, DiagnosticKind::InvalidJson, msg);
    }

    fn handle_document(&mut self, doc: &[u8], now: Timestamp) {
        let value: Value = match serde_json::from_slice(doc) {
            Ok(v) => v,
            Err(e) => {
                self.state.stats.records += 1;
                let msg = format!("JSON document: {e}");
                return self.state.diagnose(1, DiagnosticKind::InvalidJson, msg);
            }
        };
        let records: Vec<Value> = match value {
            Value::Array(items) => items,
            Value::Object(mut obj) => match obj.remove("updates") {
                Some(Value::Array(items)) => items,
                updates => {
                    if let Some(u) = updates {
                        obj.insert("updates".to_owned(), u);
                    }
                    vec![Value::Object(obj)]
                }
            },
            other => vec![other],
        };
        for record in records {
            self.state.stats.records += 1;
            let line_no = self.state.stats.records;
            self.handle_record(line_no, record, now);
        }
    }

    fn handle_record(&mut self, line_no: u64, value: Value, now: Timestamp) {
        if self.ready_for(line_no, &value) {
            if let Some(decoder) = &mut self.decoder {
                let out = &mut self.state.out(line_no, now);
                if self.fast {
                    decoder.record_owned(value, out);
                } else {
                    decoder.record(&value, out);
                }
            }
        }
    }

    /// [`Normalizer::handle_record`] for a borrowed record.
    fn handle_record_ref(&mut self, line_no: u64, value: &Value, now: Timestamp) {
        if self.ready_for(line_no, value) {
            if let Some(decoder) = &mut self.decoder {
                decoder.record(value, &mut self.state.out(line_no, now));
            }
        }
    }

    /// Sets the decoder for `value` (detecting the format on the first record); `false` (and
    /// a diagnostic) when it is not an object.
    fn ready_for(&mut self, line_no: u64, value: &Value) -> bool {
        if !value.is_object() {
            let msg = format!("expected a JSON object, got {}", json_kind(value));
            self.state
                .diagnose(line_no, DiagnosticKind::NotAnObject, msg);
            return false;
        }
        if self.decoder.is_none() {
            let format = Format::detect(value).unwrap_or(Format::Generic);
            self.format = Some(format);
            self.state.provider = format.provider();
            self.decoder = Some(format.decoder());
        }
        true
    }
}

/// Everything a normalizer produced from a whole input.
#[derive(Clone, Debug, Default)]
pub struct Normalized {
    pub format: Option<Format>,
    pub events: Vec<Event>,
    pub diagnostics: Vec<Diagnostic>,
    pub stats: Stats,
}

/// The fewest input bytes per event [`normalize`] makes room for at first, and the most
/// events it makes room for (≈ 7 MB of them) before it sees how many there are.
const EVENT_BYTES_HINT: usize = 96;
const EVENTS_HINT_MAX: usize = 1 << 16;

/// Normalizes a whole input at once (a transcript file). `format: None` detects it.
pub fn normalize(
    format: Option<Format>,
    config: Config,
    input: &[u8],
    now: Timestamp,
) -> Normalized {
    let mut n = Normalizer::new(format, config);
    // Room for the events of lines of ≈ 100 bytes, the shortest that make one each (Codex,
    // Gemini), so the queue is not copied as it grows; what an input of longer lines leaves
    // unused is given back below.
    n.state
        .events
        .reserve((input.len() / EVENT_BYTES_HINT).min(EVENTS_HINT_MAX));
    n.handle_bytes(input, now);
    n.handle_eof(now);
    // What polling would give, in the same order, without moving every event again.
    let mut events = Vec::from(std::mem::take(&mut n.state.events));
    if events.capacity() - events.len() > events.len() / 4 {
        events.shrink_to_fit();
    }
    Normalized {
        format: n.format(),
        events,
        diagnostics: Vec::from(std::mem::take(&mut n.state.diagnostics)),
        stats: n.stats(),
    }
}

/// The index of the first `\n` in `bytes`, eight bytes at a time (a word with a zero byte
/// after XOR with `\n` repeated has a newline; the rest is scanned bytewise from there).
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const NL: u64 = ONES * b'\n' as u64;
    let mut i = 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_ne_bytes(word.try_into().expect("8 bytes")) ^ NL;
        if zero_bytes(w) != 0 {
            break;
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| b == b'\n').map(|p| i + p)
}

enum SseField<'a> {
    Data(&'a str),
    Other,
}

fn sse_field(line: &str) -> Option<SseField<'_>> {
    if let Some(rest) = line.strip_prefix("data:") {
        return Some(SseField::Data(rest.strip_prefix(' ').unwrap_or(rest)));
    }
    let other = line.starts_with(':')
        || ["event:", "id:", "retry:"]
            .iter()
            .any(|p| line.starts_with(p));
    other.then_some(SseField::Other)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Appends `s` as `{:?}` writes it; printable ASCII (where only `"` and `\` are escaped)
/// without the formatting machinery.
fn push_debug(out: &mut String, s: &str) {
    if !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        use fmt::Write;
        let _ = write!(out, "{s:?}");
        return;
    }
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// At most `max` characters of `s`, cut on a char boundary.
pub(crate) fn excerpt(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The emitting state shared by all decoders of one normalizer.
struct EmitState {
    session_id: Arc<str>,
    /// The run id of the last event emitted with one, shared by the events of that run.
    run: Option<Arc<str>>,
    /// The correlation id of the last event emitted with one, shared the same way (a tool
    /// call's start, deltas and end come in a row).
    correlation: Option<Arc<str>>,
    /// The id hash after the parts every event id shares: the session and the source.
    id_prefix: Fnv128,
    provider: Provider,
    sequence: u64,
    turn_counter: u64,
    pending_run_ids: VecDeque<String>,
    events: VecDeque<Event>,
    diagnostics: VecDeque<Diagnostic>,
    stats: Stats,
    /// Where the typed reads unescape strings ([`fast::read_record`]).
    scratch: String,
    /// Set by [`Out::read_record`] when a typed read failed (on invalid JSON, or on a shape
    /// it does not take).
    unreadable: bool,
}

impl EmitState {
    fn out(&mut self, line: u64, now: Timestamp) -> Out<'_> {
        let mut line_hash = self.id_prefix;
        line_hash.part_u64(line);
        Out {
            state: self,
            line,
            line_hash,
            index: 0,
            timestamp: now,
        }
    }

    fn diagnose(&mut self, line: u64, kind: DiagnosticKind, message: String) {
        self.stats.diagnostics += 1;
        self.diagnostics.push_back(Diagnostic {
            line,
            kind,
            message,
        });
    }
}

/// What a decoder emits through, for one record. Events get the session, the provider, the
/// next sequence, the record's timestamp (see [`Out::use_timestamp`]) or the caller's `now`,
/// and an id derived from (session, source, line, index within the line).
pub(crate) struct Out<'a> {
    state: &'a mut EmitState,
    line: u64,
    /// The id hash after (session, source, line).
    line_hash: Fnv128,
    index: u32,
    timestamp: Timestamp,
}

impl Out<'_> {
    pub(crate) fn provider(&self) -> Provider {
        self.state.provider
    }

    /// A typed read of `text` into `record` (the fast path, [`fast::read_record`]): false when
    /// it fails, and then the normalizer checks the line's JSON before it builds a `Value` of
    /// it (a line the scanner does not take is most often invalid JSON).
    pub(crate) fn read_record<'t, R: fast::Record<'t>>(
        &mut self,
        text: &'t str,
        record: &mut R,
    ) -> bool {
        let read = fast::read_record(text, record, &mut self.state.scratch).is_ok();
        self.state.unreadable |= !read && !record.refused();
        read
    }

    /// Stamps this record's events with a time read by the typed fast path.
    pub(crate) fn set_timestamp(&mut self, stamp: fast::Stamp) {
        if let Some(t) = stamp.0 {
            self.timestamp = t;
        }
    }

    /// Stamps this record's events with the time the provider wrote into it, when it parses.
    pub(crate) fn use_timestamp(&mut self, value: Option<&Value>) {
        let parsed = match value {
            Some(Value::String(s)) => Timestamp::parse_rfc3339(s),
            Some(Value::Number(n)) => n.as_i64().map(Timestamp::from_unix_millis),
            _ => None,
        };
        if let Some(t) = parsed {
            self.timestamp = t;
        }
    }

    /// A run id for a new turn: the one the host announced with
    /// [`Normalizer::expect_run`], else one derived from the session and the turn's ordinal.
    pub(crate) fn new_run_id(&mut self) -> String {
        self.state.turn_counter += 1;
        if let Some(id) = self.state.pending_run_ids.pop_front() {
            return id;
        }
        // fnv1a128([session, source, "run", turn]), resumed after (session, source).
        let mut hash = self.state.id_prefix;
        hash.part(b"run");
        hash.part_u64(self.state.turn_counter);
        let mut id = String::with_capacity(36);
        id.push_str("run_");
        id.push_str(std::str::from_utf8(&hex32(hash.finish())).unwrap_or_default());
        id
    }

    /// The shared handle of `id`: `last`'s when it is the same id, else a new one, kept in
    /// `last` for the next event.
    fn shared(last: &mut Option<Arc<str>>, id: &str) -> Arc<str> {
        match last {
            Some(last) if **last == *id => Arc::clone(last),
            _ => Arc::clone(last.insert(Arc::from(id))),
        }
    }

    /// Emits one event. `data` must be a JSON object (anything else is wrapped as `value`).
    pub(crate) fn emit(&mut self, kind: EventType, run_id: Option<&str>, data: Value) {
        self.emit_full(kind, run_id, data, None, Map::new());
    }

    /// Emits one event with a correlation id (a tool call id, a request id…) and metadata.
    pub(crate) fn emit_full(
        &mut self,
        kind: EventType,
        run_id: Option<&str>,
        data: Value,
        correlation_id: Option<&str>,
        metadata: Map<String, Value>,
    ) {
        let data = match data {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_owned(), other)]),
        };
        self.emit_object(kind, run_id, data.into(), correlation_id, metadata.into());
    }

    /// Emits one event whose `data` is made already (by an
    /// [`ObjectWriter`](super::json::ObjectWriter): no map), with no correlation id or metadata.
    pub(crate) fn emit_data(&mut self, kind: EventType, run_id: Option<&str>, data: JsonObject) {
        self.emit_object(kind, run_id, data, None, JsonObject::new());
    }

    /// [`Out::emit_data`] with a correlation id and metadata.
    pub(crate) fn emit_object(
        &mut self,
        kind: EventType,
        run_id: Option<&str>,
        data: JsonObject,
        correlation_id: Option<&str>,
        metadata: JsonObject,
    ) {
        let state = &mut *self.state;
        let mut hash = self.line_hash;
        hash.part_u64(u64::from(self.index));
        let id = EventId::from_hash(hash.finish());
        self.index += 1;
        let run_id = run_id
            .filter(|r| !r.is_empty())
            .map(|r| Out::shared(&mut state.run, r));
        let correlation_id = correlation_id.map(|c| Out::shared(&mut state.correlation, c));
        let event = Event::from_parts(
            id,
            kind,
            &state.session_id,
            run_id,
            state.sequence,
            self.timestamp,
            state.provider,
            correlation_id,
            data,
            metadata,
        );
        match event {
            Ok(event) => {
                state.sequence += 1;
                state.stats.events += 1;
                state.events.push_back(event);
            }
            Err(e) => {
                let line = self.line;
                state.diagnose(line, DiagnosticKind::MissingField, e.to_string());
            }
        }
    }

    /// This record is of a known type and deliberately carries nothing.
    pub(crate) fn ignore(&mut self) {
        self.state.stats.ignored += 1;
    }

    /// This record's type is not one the decoder knows.
    pub(crate) fn unknown(&mut self, what: impl fmt::Display) {
        let line = self.line;
        self.state
            .diagnose(line, DiagnosticKind::UnknownType, format!("unknown {what}"));
    }

    /// This record lacks a field the decoder needs.
    pub(crate) fn missing(&mut self, field: &str) {
        let line = self.line;
        self.state.diagnose(
            line,
            DiagnosticKind::MissingField,
            format!("missing field `{field}`"),
        );
    }
}

/// One provider format's decoder: records in, events out through [`Out`].
pub(crate) trait Decoder: Send {
    /// One JSON object read from the stream.
    fn record(&mut self, record: &Value, out: &mut Out<'_>);
    /// [`Decoder::record`] with the record owned, for decoders that move parts of it into
    /// their events instead of cloning them.
    fn record_owned(&mut self, record: Value, out: &mut Out<'_>) {
        self.record(&record, out);
    }
    /// The typed fast path: reads `text` (one line that starts as a JSON object) without a
    /// `Value` tree and returns `true` when it handled it; `false`, having emitted nothing,
    /// sends the record down [`Decoder::record`] (see the `fast` module for the rule).
    fn record_text(&mut self, _text: &str, _out: &mut Out<'_>) -> bool {
        false
    }
    /// The stream ended: close or discard what is still open (a turn with no terminal event
    /// stays open for the lifecycle projection; a partial message that never closed is
    /// discarded or emitted whole, never left dangling).
    fn finish(&mut self, out: &mut Out<'_>);
}

/// The `data` of `tool_call_started`, written with no map (and no copy of the input).
pub(crate) fn tool_started_data(
    id: &str,
    name: &str,
    input: &(impl ToJson + ?Sized),
) -> JsonObject {
    ObjectWriter::with_capacity(64 + id.len() + name.len())
        .field("tool_call_id", id)
        .field("tool_input", input)
        .field("tool_name", name)
        .finish()
}

/// The `data` of a streamed or whole text: `text` as `key` (`delta` or `content`), its
/// message id, and the optional `kind` and `role`; written with no map (keys in order).
pub(crate) fn text_data(
    key: &'static str,
    text: &str,
    message_id: &str,
    kind: Option<&str>,
    role: Option<&str>,
) -> JsonObject {
    ObjectWriter::with_capacity(48 + text.len() + message_id.len())
        .field(key, text)
        .field_if("kind", kind)
        .field("message_id", message_id)
        .field_if("role", role)
        .finish()
}

#[cfg(test)]
mod tests;
