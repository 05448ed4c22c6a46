//! Decoder for `gemini -p … --output-format stream-json` (Gemini CLI headless mode).
//!
//! Every line is `{type, timestamp, …}` (schema: `packages/core/src/output/types.ts`); each
//! event is stamped with the line's own `timestamp`. The mapping:
//!
//! * `init {session_id, model}` → `session_started {provider_session_id, model}` (again only
//!   when the session id changes), then a new run: one `gemini -p` process is one turn, and a
//!   stream with several `init`s is several turns.
//! * `message {role: "user", content}` → `message_sent`.
//! * `message {role: "assistant", content, delta: true}` → `message_streamed {delta}`; the
//!   chunks are assembled, and when the run of chunks ends (at a `tool_use`, `tool_result`,
//!   `error`, `result`, another `init`, a user message, or the end of the input) one
//!   `message_received` carries the whole text. A non-delta assistant message is a
//!   `message_received` by itself. Gemini gives no message id: a stable one is made from the
//!   run id and an ordinal (`<run>:m<n>`).
//! * `tool_use {tool_name, tool_id, parameters}` → `tool_call_started`.
//! * `tool_result {tool_id, status, output, error}` → `tool_call_completed {tool_output}` when
//!   `status` is `success`, `tool_call_failed {error: error.message}` otherwise. A result for
//!   a call never announced gets its `tool_call_started` first, the tool name taken from the
//!   id's `<name>__…` prefix.
//! * `error {severity, message}` → `error_occurred {severity, error_message, provider_error}`;
//!   the kind is mapped from the error's own type when it carries one (`error.type`, newer
//!   `reason` / `category`, kept as `details.kind`), else from what the status or the message
//!   says (`max_turns` for the max-session-turns message; `agent_error` by default). It does
//!   not end the turn: the `result` that follows does.
//! * `result {status, error, stats}` → `token_usage_updated` from `stats` (`input_tokens`,
//!   `output_tokens`, `cached` → `cache_read_input_tokens`; `total_tokens`, `duration_ms`,
//!   `tool_calls` and the per-model `models` map kept under `details`), then `run_completed`
//!   (`status: success`) or `run_failed` (the kind mapped from `error.type`). A call
//!   still without its `tool_result` ends with the turn: `tool_call_cancelled` first.
//!
//! Thoughts are dropped by the CLI in this format, so no reasoning events appear. Lines whose
//! placeholders (`<DURATION>`) make them invalid JSON are diagnostics of the framing; a turn
//! whose `result` line was lost stays open (no terminal is invented at the end of input).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::fast::{self, Scan, Stamp, Str, Unread};
use super::turn::OpenTools;
use super::{text_data, tool_started_data, Decoder, Out};
use crate::core::event::EventType;
use crate::core::json::{JsonObject, ObjectWriter, ToJson};
use crate::core::provider_error::ProviderError;

/// State of one Gemini CLI process's output: the open run, the assistant message being
/// assembled, and the tool calls announced in the current run.
#[derive(Default)]
pub(crate) struct Gemini {
    session_id: Option<String>,
    /// Shared with the run's events (one copy of the id per run).
    run: Option<Arc<str>>,
    /// The assistant message being assembled from `delta: true` chunks.
    text: Option<Assembling>,
    /// Ordinal for synthesized message ids.
    messages: u64,
    /// Tool calls started in the current run and not yet answered.
    tools: OpenTools,
}

struct Assembling {
    id: String,
    text: String,
}

impl Decoder for Gemini {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let Some(obj) = record.as_object() else {
            return out.unknown("record");
        };
        let Some(ty) = obj.get("type").and_then(Value::as_str) else {
            return out.missing("type");
        };
        out.use_timestamp(obj.get("timestamp"));
        match ty {
            "init" => self.init(obj, out),
            "message" => self.message(obj, out),
            "tool_use" => self.tool_use(obj, out),
            "tool_result" => self.tool_result(obj, out),
            "error" => self.error(obj, out),
            "result" => self.result(obj, out),
            _ => out.unknown(format_args!("type {ty:?}")),
        }
    }

    fn record_text(&mut self, text: &str, out: &mut Out<'_>) -> bool {
        let mut line = Line::default();
        if !out.read_record(text, &mut line) {
            return false;
        }
        match &*line.ty {
            "message" => {
                let (Some(role), Some(content)) = (&line.role, &line.content) else {
                    return false;
                };
                if !matches!(&**role, "user" | "assistant") {
                    return false;
                }
                out.set_timestamp(line.timestamp);
                self.message_parts(role, content, line.delta.unwrap_or(false), out);
            }
            "tool_use" => {
                let Some(id) = &line.tool_id else {
                    return false;
                };
                out.set_timestamp(line.timestamp);
                self.tool_use_parts(id, line.tool_name.as_deref(), line.parameters, out);
            }
            "tool_result" => {
                let Some(id) = &line.tool_id else {
                    return false;
                };
                out.set_timestamp(line.timestamp);
                let status = line.status.as_ref().and_then(Value::as_str);
                let (error, output) = (line.error.as_ref(), line.output.as_ref());
                self.tool_result_parts(id, status, error, output, out);
            }
            "init" => {
                out.set_timestamp(line.timestamp);
                self.init_parts(line.session_id.as_deref(), line.model.as_ref(), out);
            }
            "error" => {
                out.set_timestamp(line.timestamp);
                self.error_parts(
                    line.severity.as_deref(),
                    line.message.as_deref(),
                    ErrorFields {
                        status: line.status.as_ref(),
                        category: line.category.as_ref(),
                        reason: line.reason.as_ref(),
                        error: line.error.as_ref(),
                    },
                    out,
                );
            }
            "result" => {
                let stats = line.stats.as_ref().filter(|s| s.object);
                out.set_timestamp(line.timestamp);
                let status = line.status.as_ref().and_then(Value::as_str);
                self.result_parts(status, line.error.as_ref(), stats, out);
            }
            _ => return false,
        }
        true
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.flush(out);
    }
}

/// The fields of the records the typed fast path reads (`init`, `message`, `tool_use`,
/// `tool_result`, `error`, `result`), read in place ([`fast::Record`]).
#[derive(Default)]
struct Line<'a> {
    ty: Str<'a>,
    timestamp: Stamp,
    role: Option<Str<'a>>,
    content: Option<Str<'a>>,
    delta: Option<bool>,
    tool_id: Option<Str<'a>>,
    tool_name: Option<Str<'a>>,
    // `Some(Null)` for a `null` (as `obj.get(key)` sees it), `None` when absent.
    parameters: Option<Value>,
    status: Option<Value>,
    error: Option<Value>,
    output: Option<Value>,
    session_id: Option<Str<'a>>,
    model: Option<Value>,
    severity: Option<Str<'a>>,
    message: Option<Str<'a>>,
    category: Option<Value>,
    reason: Option<Value>,
    stats: Option<StatsRead>,
    /// Its type is not one of [`TYPED`].
    other: bool,
}

/// The types of the lines read typed.
const TYPED: [&str; 6] = [
    "message",
    "tool_use",
    "tool_result",
    "init",
    "error",
    "result",
];

impl<'a> fast::Record<'a> for Line<'a> {
    const REQUIRED: u32 = 1;

    fn refused(&self) -> bool {
        self.other
    }

    fn field(&mut self, key: &str, value: &mut Scan<'a>) -> Result<u32, Unread> {
        Ok(match key {
            "type" => {
                self.ty = value.str()?;
                // A line of a type read only as a `Value` is read no further (its type comes
                // first, as the CLI writes it).
                self.other = !TYPED.contains(&&*self.ty);
                if self.other {
                    return Err(Unread);
                }
                1
            }
            "timestamp" => {
                self.timestamp = value.stamp()?;
                1 << 1
            }
            "role" => {
                self.role = value.opt_str()?;
                1 << 2
            }
            "content" => {
                self.content = value.opt_str()?;
                1 << 3
            }
            "delta" => {
                self.delta = value.opt_bool()?;
                1 << 4
            }
            "tool_id" => {
                self.tool_id = value.opt_str()?;
                1 << 5
            }
            "tool_name" => {
                self.tool_name = value.opt_str()?;
                1 << 6
            }
            "parameters" => {
                self.parameters = Some(value.value()?);
                1 << 7
            }
            "status" => {
                self.status = Some(value.value()?);
                1 << 8
            }
            "error" => {
                self.error = Some(value.value()?);
                1 << 9
            }
            "output" => {
                self.output = Some(value.value()?);
                1 << 10
            }
            "session_id" => {
                self.session_id = value.opt_str()?;
                1 << 11
            }
            "model" => {
                self.model = Some(value.value()?);
                1 << 12
            }
            "severity" => {
                self.severity = value.opt_str()?;
                1 << 13
            }
            "message" => {
                self.message = value.opt_str()?;
                1 << 14
            }
            "category" => {
                self.category = Some(value.value()?);
                1 << 15
            }
            "reason" => {
                self.reason = Some(value.value()?);
                1 << 16
            }
            "stats" => {
                self.stats = match value.null() {
                    true => None,
                    false => Some(value.slots()?),
                };
                1 << 17
            }
            _ => 0,
        })
    }
}

/// A `result` line's `stats`, read for the fields [`usage`] and the terminal read
/// ([`STATS`]), without the map; stats that are not an object are none, as on the `Value` path.
type StatsRead = fast::Slots<StatsKeys, { STATS.len() }>;

/// The `stats` fields a result's events are made of.
const STATS: [&str; 8] = [
    "cached",
    "duration_ms",
    "input",
    "input_tokens",
    "models",
    "output_tokens",
    "tool_calls",
    "total_tokens",
];

struct StatsKeys;

impl fast::SlotKeys for StatsKeys {
    fn slot(key: &str) -> Option<usize> {
        STATS.iter().position(|&k| k == key)
    }
}

/// A result's stats, as a `Value` map or read typed ([`StatsRead`]).
trait Stats {
    fn stat(&self, key: &str) -> Option<&Value>;
}

impl Stats for Map<String, Value> {
    fn stat(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

impl Stats for StatsRead {
    fn stat(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

/// The fields of an `error` line that are kept as its `details` (present, even as null).
struct ErrorFields<'a> {
    status: Option<&'a Value>,
    category: Option<&'a Value>,
    reason: Option<&'a Value>,
    error: Option<&'a Value>,
}

impl Gemini {
    fn init(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let session = obj.get("session_id").and_then(Value::as_str);
        self.init_parts(session, obj.get("model"), out);
    }

    fn init_parts(&mut self, session: Option<&str>, model: Option<&Value>, out: &mut Out<'_>) {
        self.flush(out);
        if session.is_none() {
            out.missing("session_id");
        }
        if session.is_some() && session != self.session_id.as_deref() {
            self.session_id = session.map(str::to_owned);
            let data = ObjectWriter::with_capacity(64)
                .field_if("model", model)
                .field("provider_session_id", &session)
                .finish();
            out.emit_data(EventType::SessionStarted, None, data);
        }
        // One init is one turn; a turn left open by a lost `result` stays open.
        self.tools.clear();
        self.start_run(out);
    }

    fn message(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(role) = obj.get("role").and_then(Value::as_str) else {
            return out.missing("role");
        };
        let Some(content) = obj.get("content").and_then(Value::as_str) else {
            return out.missing("content");
        };
        let delta = obj.get("delta").and_then(Value::as_bool).unwrap_or(false);
        self.message_parts(role, content, delta, out);
    }

    fn message_parts(&mut self, role: &str, content: &str, delta: bool, out: &mut Out<'_>) {
        match role {
            "user" => {
                self.flush(out);
                let run = self.ensure_run(out);
                let data = ObjectWriter::with_capacity(32 + content.len())
                    .field("content", content)
                    .field("role", "user")
                    .finish();
                out.emit_data(EventType::MessageSent, Some(&run), data);
            }
            "assistant" if delta => {
                let run = self.ensure_run(out);
                if self.text.is_none() {
                    let id = self.next_message_id(&run);
                    self.text = Some(Assembling {
                        id,
                        text: String::new(),
                    });
                }
                let Some(open) = self.text.as_mut() else {
                    return;
                };
                open.text.push_str(content);
                let data = text_data("delta", content, &open.id, None, Some("assistant"));
                out.emit_data(EventType::MessageStreamed, Some(&run), data);
            }
            "assistant" => {
                self.flush(out);
                let run = self.ensure_run(out);
                let id = self.next_message_id(&run);
                let data = text_data("content", content, &id, None, Some("assistant"));
                out.emit_data(EventType::MessageReceived, Some(&run), data);
            }
            other => out.unknown(format_args!("message role {other:?}")),
        }
    }

    fn tool_use(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(id) = obj.get("tool_id").and_then(Value::as_str) else {
            return out.missing("tool_id");
        };
        let name = obj.get("tool_name").and_then(Value::as_str);
        self.tool_use_parts(id, name, obj.get("parameters").cloned(), out);
    }

    fn tool_use_parts(
        &mut self,
        id: &str,
        name: Option<&str>,
        input: Option<Value>,
        out: &mut Out<'_>,
    ) {
        self.flush(out);
        let run = self.ensure_run(out);
        let name = name.map_or_else(|| name_from_id(id), str::to_owned);
        let input = input.unwrap_or_else(|| json!({}));
        let data = tool_started_data(id, &name, &input);
        let kind = EventType::ToolCallStarted;
        out.emit_object(kind, Some(&run), data, Some(id), JsonObject::new());
        self.tools.close(id);
        self.tools.open(id, json!(name), input, ());
    }

    fn tool_result(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(id) = obj.get("tool_id").and_then(Value::as_str) else {
            return out.missing("tool_id");
        };
        let status = obj.get("status").and_then(Value::as_str);
        self.tool_result_parts(id, status, obj.get("error"), obj.get("output"), out);
    }

    fn tool_result_parts(
        &mut self,
        id: &str,
        status: Option<&str>,
        error: Option<&Value>,
        output: Option<&Value>,
        out: &mut Out<'_>,
    ) {
        self.flush(out);
        let run = self.ensure_run(out);
        let (name, input) = match self.tools.close(id) {
            Some(tool) => (tool.name, tool.input),
            None => {
                let (name, input) = (name_from_id(id), json!({}));
                let data = tool_started_data(id, &name, &input);
                let kind = EventType::ToolCallStarted;
                out.emit_object(kind, Some(&run), data, Some(id), JsonObject::new());
                (json!(name), input)
            }
        };
        let failed = status == Some("error") || (status.is_none() && error.is_some());
        let message = failed.then(|| {
            error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .or_else(|| output.and_then(Value::as_str))
                .unwrap_or("tool call failed")
        });
        let error_type = error.and_then(|e| e.get("type")).filter(|_| failed);
        let output: Option<&dyn ToJson> = match output {
            _ if failed => None,
            Some(output) => Some(output),
            None => Some(&""),
        };
        let data = ObjectWriter::with_capacity(128)
            .field_if("error", message)
            .field_if("error_type", error_type)
            .field("tool_call_id", id)
            .field("tool_input", &input)
            .field("tool_name", &name)
            .field_if("tool_output", output)
            .finish();
        let kind = match failed {
            true => EventType::ToolCallFailed,
            false => EventType::ToolCallCompleted,
        };
        out.emit_object(kind, Some(&run), data, Some(id), JsonObject::new());
    }

    fn error(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let severity = obj.get("severity").and_then(Value::as_str);
        let message = obj.get("message").and_then(Value::as_str);
        let fields = ErrorFields {
            status: obj.get("status"),
            category: obj.get("category"),
            reason: obj.get("reason"),
            error: obj.get("error"),
        };
        self.error_parts(severity, message, fields, out);
    }

    fn error_parts(
        &mut self,
        severity: Option<&str>,
        message: Option<&str>,
        fields: ErrorFields<'_>,
        out: &mut Out<'_>,
    ) {
        self.flush(out);
        let severity = severity.unwrap_or("error");
        let message = message.unwrap_or("error");
        let own_kind = fields
            .error
            .and_then(|e| e.get("type"))
            .or(fields.reason)
            .or(fields.category)
            .and_then(Value::as_str);
        let status = fields.status.and_then(Value::as_u64);
        let own_kind = own_kind.unwrap_or("");
        let details: Map<String, Value> = [
            ("status", fields.status),
            ("category", fields.category),
            ("reason", fields.reason),
            ("error", fields.error),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.clone())))
        .collect();
        let details = (!details.is_empty()).then_some(Value::Object(details));
        let data = ProviderError::from_provider(out.provider(), own_kind, status, message)
            .data_object(&[("severity", &severity)], details);
        let run = self.run.as_deref();
        out.emit_data(EventType::ErrorOccurred, run, data);
    }

    fn result(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let status = obj.get("status").and_then(Value::as_str);
        let stats = obj.get("stats").and_then(Value::as_object);
        self.result_parts(status, obj.get("error"), stats, out);
    }

    fn result_parts<S: Stats>(
        &mut self,
        status: Option<&str>,
        error: Option<&Value>,
        stats: Option<&S>,
        out: &mut Out<'_>,
    ) {
        self.flush(out);
        let run = self.ensure_run(out);
        let failed = status == Some("error") || (status.is_none() && error.is_some());
        let terminal = if failed {
            EventType::RunFailed
        } else {
            EventType::RunCompleted
        };
        // Calls that never got a result ended with the turn.
        self.tools.cancel_all(out, &run, terminal);
        if let Some(stats) = stats {
            out.emit_data(EventType::TokenUsageUpdated, Some(&run), usage(stats));
        }
        let duration = stats.and_then(|s| s.stat("duration_ms")).cloned();
        if failed {
            let kind = error
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let message = error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("gemini run failed");
            let status = error.and_then(|e| e.get("code")).and_then(Value::as_u64);
            let duration = duration.as_ref().map(|d| ("duration_ms", d as &dyn ToJson));
            let details = error.map(|error| json!({ "error": error }));
            let data = ProviderError::from_provider(out.provider(), kind, status, message)
                .data_object(duration.as_slice(), details);
            out.emit_data(EventType::RunFailed, Some(&run), data);
        } else {
            let data = ObjectWriter::with_capacity(32)
                .field_if("duration_ms", duration.as_ref())
                .finish();
            out.emit_data(EventType::RunCompleted, Some(&run), data);
        }
        self.run = None;
        self.tools.clear();
    }

    /// Ends the run of assistant chunks: one `message_received` with the whole text.
    fn flush(&mut self, out: &mut Out<'_>) {
        let Some(open) = self.text.take() else {
            return;
        };
        let data = text_data("content", &open.text, &open.id, None, Some("assistant"));
        let run = self.run.as_deref();
        out.emit_data(EventType::MessageReceived, run, data);
    }

    fn start_run(&mut self, out: &mut Out<'_>) -> Arc<str> {
        let run: Arc<str> = Arc::from(out.new_run_id());
        out.emit(EventType::RunStarted, Some(&run), json!({}));
        self.run = Some(Arc::clone(&run));
        run
    }

    fn ensure_run(&mut self, out: &mut Out<'_>) -> Arc<str> {
        match &self.run {
            Some(run) => run.clone(),
            None => self.start_run(out),
        }
    }

    fn next_message_id(&mut self, run: &str) -> String {
        self.messages += 1;
        format!("{run}:m{}", self.messages)
    }
}

/// `token_usage_updated.data` from `result.stats`, written as text (keys in order): the
/// counts under their canonical names, the rest of the stats under `details`.
fn usage(stats: &impl Stats) -> JsonObject {
    const DETAILS: [&str; 5] = [
        "duration_ms",
        "input",
        "models",
        "tool_calls",
        "total_tokens",
    ];
    let details = (DETAILS.into_iter())
        .fold(ObjectWriter::with_capacity(128), |w, k| {
            w.field_if(k, stats.stat(k))
        })
        .finish();
    ObjectWriter::with_capacity(192)
        .field_if("cache_read_input_tokens", stats.stat("cached"))
        .field_if("details", (!details.is_empty()).then_some(&details))
        .field_if("input_tokens", stats.stat("input_tokens"))
        .field_if("output_tokens", stats.stat("output_tokens"))
        .finish()
}

/// The tool name in a Gemini tool id: `run_shell_command__run_shell_command_1795987868186_0`
/// and `run_shell_command__45c957ff` both start with it.
fn name_from_id(id: &str) -> String {
    match id.split_once("__") {
        Some((name, _)) if !name.is_empty() => name.to_owned(),
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::normalize::tests::{check, check_invariants};
    use crate::core::normalize::Format;

    #[wasm_bindgen_test(unsupported = test)]
    fn a_turn_with_streamed_text_and_a_tool() {
        check(
            Format::Gemini,
            r#"{"type":"init","timestamp":"2026-11-29T21:31:07.000Z","session_id":"s-1","model":"gemini-2.5-flash"}
{"type":"message","timestamp":"2026-11-29T21:31:07.100Z","role":"user","content":"run echo"}
{"type":"message","timestamp":"2026-11-29T21:31:07.200Z","role":"assistant","content":"Let me ","delta":true}
{"type":"message","timestamp":"2026-11-29T21:31:07.300Z","role":"assistant","content":"run it.","delta":true}
{"type":"tool_use","timestamp":"2026-11-29T21:31:08.329Z","tool_name":"run_shell_command","tool_id":"run_shell_command__run_shell_command_1795987868186_0","parameters":{"command":"echo hi"}}
{"type":"tool_result","timestamp":"2026-11-29T21:31:08.581Z","tool_id":"run_shell_command__run_shell_command_1795987868186_0","status":"success","output":"hi"}
{"type":"message","timestamp":"2026-11-29T21:31:09.000Z","role":"assistant","content":"Done.","delta":true}
{"type":"result","timestamp":"2026-11-29T21:31:09.500Z","status":"success","stats":{"total_tokens":120,"input_tokens":100,"output_tokens":20,"cached":40,"input":60,"duration_ms":2500,"tool_calls":1,"models":{"gemini-2.5-flash":{"total_tokens":120}}}}
"#,
            expect![[r#"
                1 -- session_started model="gemini-2.5-flash"
                2 t1 run_started
                3 t1 message_sent role="user" content="run echo"
                4 t1 message_streamed role="assistant" delta="Let me "
                5 t1 message_streamed role="assistant" delta="run it."
                6 t1 message_received role="assistant" content="Let me run it."
                7 t1 tool_call_started tool_name="run_shell_command" tool_call_id="run_shell_command__run_shell_command_1795987868186_0" tool_input={"command":"echo hi"}
                8 t1 tool_call_completed tool_name="run_shell_command" tool_call_id="run_shell_command__run_shell_command_1795987868186_0" tool_input={"command":"echo hi"} tool_output="hi"
                9 t1 message_streamed role="assistant" delta="Done."
                10 t1 message_received role="assistant" content="Done."
                11 t1 token_usage_updated input_tokens=100 output_tokens=20
                12 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn timestamps_and_ids_come_from_the_lines() {
        let input = concat!(
            r#"{"type":"init","timestamp":"2026-11-29T21:31:07.000Z","session_id":"s-1","model":"auto"}"#,
            "\n",
            r#"{"type":"message","timestamp":"2026-11-29T21:31:07.200Z","role":"assistant","content":"a","delta":true}"#,
            "\n",
            r#"{"type":"result","timestamp":"2026-11-29T21:31:09.500Z","status":"success","stats":{"input_tokens":1,"output_tokens":2,"cached":0}}"#,
            "\n"
        );
        let out = crate::core::normalize::normalize(
            Some(Format::Gemini),
            crate::core::normalize::Config::new("s1"),
            input.as_bytes(),
            crate::core::time::Timestamp::EPOCH,
        );
        let e = &out.events;
        assert_eq!(e[0].data_str("provider_session_id"), Some("s-1"));
        assert_eq!(e[2].timestamp().to_string(), "2026-11-29T21:31:07.200Z");
        let id = e[2].data_str("message_id").unwrap();
        assert_eq!(e[3].data_str("message_id"), Some(id));
        assert_eq!(e[3].data_str("content"), Some("a"));
        // The message closed by the result carries the result line's time.
        assert_eq!(e[3].timestamp().to_string(), "2026-11-29T21:31:09.500Z");
        assert_eq!(e[4].data()["cache_read_input_tokens"], 0);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn tool_failures_and_unannounced_results() {
        check(
            Format::Gemini,
            r#"{"type":"tool_use","timestamp":"2026-01-01T00:00:00Z","tool_name":"read_file","tool_id":"read_file__1","parameters":{"path":"/nope"}}
{"type":"tool_result","timestamp":"2026-01-01T00:00:01Z","tool_id":"read_file__1","status":"error","error":{"type":"FILE_NOT_FOUND","message":"File not found: /nope"}}
{"type":"tool_result","timestamp":"2026-01-01T00:00:02Z","tool_id":"glob__abc","status":"success","output":"a.rs"}
{"type":"tool_result","timestamp":"2026-01-01T00:00:03Z","tool_id":"weird","status":"success"}
{"type":"tool_result","timestamp":"2026-01-01T00:00:03Z"}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="read_file" tool_call_id="read_file__1" tool_input={"path":"/nope"}
                3 t1 tool_call_failed tool_name="read_file" tool_call_id="read_file__1" tool_input={"path":"/nope"} error="File not found: /nope"
                4 t1 tool_call_started tool_name="glob" tool_call_id="glob__abc" tool_input={}
                5 t1 tool_call_completed tool_name="glob" tool_call_id="glob__abc" tool_input={} tool_output="a.rs"
                6 t1 tool_call_started tool_name="unknown" tool_call_id="weird" tool_input={}
                7 t1 tool_call_completed tool_name="unknown" tool_call_id="weird" tool_input={} tool_output=""
                ! line 5: missing_field: missing field `tool_id`
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn warnings_and_errors_do_not_end_the_turn() {
        check(
            Format::Gemini,
            r#"{"type":"init","timestamp":"2026-01-01T00:00:00Z","session_id":"s","model":"m"}
{"type":"message","timestamp":"2026-01-01T00:00:00Z","role":"assistant","content":"loop","delta":true}
{"type":"error","timestamp":"2026-01-01T00:00:01Z","severity":"warning","message":"Loop detected, stopping execution"}
{"type":"error","timestamp":"2026-01-01T00:00:02Z","severity":"error","message":"Maximum session turns exceeded"}
{"type":"error","timestamp":"2026-01-01T00:00:02Z","severity":"error","message":"Quota exceeded","status":429,"reason":"RATE_LIMIT_EXCEEDED"}
{"type":"result","timestamp":"2026-01-01T00:00:03Z","status":"success","stats":{"input_tokens":0,"output_tokens":0,"cached":0}}
"#,
            expect![[r#"
                1 -- session_started model="m"
                2 t1 run_started
                3 t1 message_streamed role="assistant" delta="loop"
                4 t1 message_received role="assistant" content="loop"
                5 t1 error_occurred error_message="Loop detected, stopping execution" provider_error.kind="agent_error"
                6 t1 error_occurred error_message="Maximum session turns exceeded" provider_error.kind="max_turns"
                7 t1 error_occurred error_message="Quota exceeded" provider_error.kind="rate_limit"
                8 t1 token_usage_updated input_tokens=0 output_tokens=0
                9 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_failed_result_fails_the_run() {
        check(
            Format::Gemini,
            r#"{"type":"init","timestamp":"2026-01-01T00:00:00Z","session_id":"s","model":"m"}
{"type":"message","timestamp":"2026-01-01T00:00:00Z","role":"user","content":"hi"}
{"type":"tool_use","timestamp":"2026-01-01T00:00:01Z","tool_name":"web_fetch","tool_id":"web_fetch__9","parameters":{"url":"https://example.com"}}
{"type":"result","timestamp":"2026-01-01T00:00:03Z","status":"error","error":{"type":"ApiError","message":"[API Error: 400 Bad Request]"},"stats":{"input_tokens":0,"output_tokens":0,"cached":0,"duration_ms":12}}
"#,
            expect![[r#"
                1 -- session_started model="m"
                2 t1 run_started
                3 t1 message_sent role="user" content="hi"
                4 t1 tool_call_started tool_name="web_fetch" tool_call_id="web_fetch__9" tool_input={"url":"https://example.com"}
                5 t1 tool_call_cancelled tool_name="web_fetch" tool_call_id="web_fetch__9" tool_input={"url":"https://example.com"} reason="run_failed"
                6 t1 token_usage_updated input_tokens=0 output_tokens=0
                7 t1 run_failed error_message="[API Error: 400 Bad Request]" provider_error.kind="server_error"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn several_inits_are_several_turns_and_eof_closes_the_message() {
        check(
            Format::Gemini,
            r#"{"type":"init","timestamp":"2026-01-01T00:00:00Z","session_id":"s","model":"m"}
{"type":"message","timestamp":"2026-01-01T00:00:00Z","role":"assistant","content":"Full answer."}
{"type":"result","timestamp":"2026-01-01T00:00:01Z","status":"success"}
{"type":"init","timestamp":"2026-01-01T00:01:00Z","session_id":"s","model":"m"}
{"type":"message","timestamp":"2026-01-01T00:01:00Z","role":"user","content":"again"}
{"type":"message","timestamp":"2026-01-01T00:01:01Z","role":"assistant","content":"Part","delta":true}
{"type":"message","timestamp":"2026-01-01T00:01:01Z","role":"assistant","content":"ial","delta":true}
{"type":"thought","timestamp":"2026-01-01T00:01:01Z"}
{"type":"message","timestamp":"2026-01-01T00:01:01Z","role":"system","content":"x"}
"#,
            expect![[r#"
                1 -- session_started model="m"
                2 t1 run_started
                3 t1 message_received role="assistant" content="Full answer."
                4 t1 run_completed
                5 t2 run_started
                6 t2 message_sent role="user" content="again"
                7 t2 message_streamed role="assistant" delta="Part"
                8 t2 message_streamed role="assistant" delta="ial"
                9 t2 message_received role="assistant" content="Partial"
                ! line 8: unknown_type: unknown type "thought"
                ! line 9: unknown_type: unknown message role "system"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn placeholder_lines_are_diagnostics() {
        check(
            Format::Gemini,
            r#"{"type":"init","timestamp":"<TIMESTAMP>","session_id":"test-session-id","model":"test-model"}
{"type":"result","timestamp":"<TIMESTAMP>","status":"success","stats":{"duration_ms":<DURATION>}}
"#,
            expect![[r#"
                1 -- session_started model="test-model"
                2 t1 run_started
                ! line 2: invalid_json: expected value at line 1 column 86; line starts "{\"type\":\"result\",\"timestamp\":\"<TIMESTAMP>\",\"status\":\"success"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_fixtures_keep_the_conventions() {
        let fixtures: &[&[u8]] = &[
            include_bytes!("../../../tests/data/gemini/gemini-cli__nonInteractiveCli.test.ts.snap"),
            include_bytes!("../../../tests/data/gemini/gemini-cli__snap-extract__loop-detected-warning.jsonl"),
            include_bytes!("../../../tests/data/gemini/gemini-cli__snap-extract__max-session-turns-error.jsonl"),
            include_bytes!("../../../tests/data/gemini/gemini-cli__snap-extract__tool-use-stream.jsonl"),
        ];
        for input in fixtures {
            check_invariants(Format::Gemini, input);
        }
    }
}
