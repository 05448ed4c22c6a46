//! Decoder for the Agent Client Protocol (`gemini --experimental-acp`, or any ACP agent).
//!
//! Records are JSON-RPC 2.0 messages as a host logs them, or bare `{sessionUpdate, …}`
//! update objects (hapi's captures; the framing splits their `updates` array). Field names
//! follow zed-industries/agent-client-protocol `schema/schema.json`. The mapping:
//!
//! * `session/update` notifications (`params.update`), and bare updates, by `sessionUpdate`:
//!   * `agent_message_chunk` → `message_streamed {delta: content.text}`; the chunks are
//!     assembled and, when the run of chunks ends (any other update, a response, a request,
//!     the end of input), one `message_received` carries the whole text. The id is the
//!     chunk's `messageId` when the agent sends one, else `<run>:m<n>`; a new `messageId`
//!     starts a new message.
//!   * `agent_thought_chunk` → `reasoning_streamed` / `reasoning_received`, the same way.
//!   * `user_message_chunk` → assembled into one `message_sent` (no per-chunk event);
//!     skipped when it only echoes a `session/prompt` already logged for the turn.
//!   * `tool_call` → `tool_call_started {tool_call_id, tool_name, tool_input: rawInput}`, or
//!     started then `tool_call_completed`/`tool_call_failed` when its `status` already says
//!     so. `tool_name` is the ACP `kind` (`execute`, `edit`, `read`, `think`, …: stable per
//!     tool, which a UI can key icons on), falling back to the `title`; both `kind` and
//!     `title` are kept in `data`. An `execute` call without `rawInput` (the Gemini CLI sends
//!     none) gets `tool_input: {command: title}`: the Gemini CLI's title of a shell call is
//!     its command.
//!   * `tool_call_update` → `tool_call_updated {status, title, output_delta | output}`, or
//!     `tool_call_completed {tool_output}` / `tool_call_failed {error}` when `status` becomes
//!     `completed` / `failed` (each call ends once; later updates are ignored). ACP content
//!     *replaces* the previous content, so the output is the text of the latest content
//!     (`content` blocks' text, joined by newlines; diffs are kept raw in `data.content`),
//!     else `rawOutput`. An update for a call never announced gets its `tool_call_started`.
//!   * `plan` → `todo_updated {items: [{text, status, priority}]}`.
//!   * `current_mode_update` → `mode_changed {mode}`.
//!   * an `agent_message_chunk` reading `[MODE_UPDATE] <mode>`: the Gemini CLI's echo of a
//!     mode switch, sent outside any turn; ignored (the switch is reported by the answer to
//!     `session/set_mode`, below), so that it opens no turn.
//!   * `available_commands_update`, `session_info_update`, `usage_update` (context-window
//!     size, not per-turn tokens), `config_option_update` → ignored.
//! * agent → client request `session/request_permission {toolCall, options}` →
//!   `tool_approval_requested {request_id, tool_call_id, tool_name, tool_input, options}`; the
//!   client's response (when the host logs it) → `tool_approval_granted` for an `allow_*`
//!   option, `tool_approval_denied` for a `reject_*` option or a `cancelled` outcome.
//! * client → agent request `session/prompt` (when the host logs its own requests) → opens
//!   the turn with `message_sent` (the prompt's text blocks).
//! * the response carrying `result.stopReason` ends the turn: `end_turn`, `max_tokens`,
//!   `max_turn_requests` → `run_completed {stop_reason}` (after `token_usage_updated` when
//!   the response has `usage`), `cancelled` → `run_cancelled`, `refusal` → `run_failed` with
//!   kind `refusal`. The error response to `session/prompt` (or an error answering no
//!   logged request while a turn is open) ends the turn with `run_failed` (kind from the
//!   JSON-RPC code: `-32603` → `internal_error`, `-32000` → `authentication_failed`, …; an
//!   HTTP status as the code, as the Gemini CLI sends a model API failure: `401` →
//!   `authentication_failed`, `429` → `rate_limit`, `5xx` → `server_error`, the message
//!   taken from the API error document it carries);
//!   any other error response is an `error_occurred`.
//! * `session/new` / `session/load` responses (or the first notification naming a session)
//!   → `session_started {provider_session_id, cwd, model, mode, version}`, once.
//! * the client's `session/set_mode {modeId}` / `session/set_model {modelId}` (when the host
//!   logs its requests), once answered without error → `mode_changed {mode}` /
//!   `model_changed {model}`.
//! * a `stopReason` response's usage is `usage` (ACP) or, from the Gemini CLI,
//!   `_meta.quota.token_count {input_tokens, output_tokens}`.
//!
//! Responses are matched to turns by JSON-RPC id: a turn remembers the `session/prompt`
//! request it answers. A new `session/prompt` while the open turn's prompt is still
//! unanswered (a host that stopped waiting, e.g. after an interrupt the agent ignored)
//! starts a new turn; the earlier one is set aside, and its answer (the Gemini CLI aborts it
//! for the new prompt and answers `cancelled`, possibly after the new turn's own answer) ends
//! that turn, not the open one. An answer for a prompt whose turn already ended is stale and
//! ignored, as is the answer to any extension request (`_…`, the host's replay barrier).
//!
//! Runs open lazily at the first turn-scoped record; a `session/prompt` logged after the
//! turn's first updates joins that turn. ACP allows one prompt at a time, so a new user
//! message (or `session/prompt`) in a turn that already had both a user message and agent
//! output means the earlier turn ended without its response being logged (a `session/load`
//! replay does this): that turn gets `run_completed {inferred: true}` before the new one
//! starts. At every turn end, tool calls that never finished get `tool_call_cancelled`.
//! Only one session is followed (the first created, loaded or named, and then any session
//! the client creates or loads: a host that resumes into a new session moves on to it);
//! records naming another `sessionId` are ignored.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::turn::cancel_tool_call;
use super::{Decoder, Out};
use crate::core::event::{CancelReason, EventType, Provider};
use crate::core::provider_error::{ErrorKind, ProviderError};

pub(crate) struct Acp {
    provider: Provider,
    session: SessionInfo,
    run: Option<Run>,
    /// The run of chunks being assembled.
    open: Option<Chunks>,
    /// Ordinal for synthesized message ids.
    messages: u64,
    /// Client requests seen, by JSON-RPC id: the method, to read their responses.
    requests: HashMap<String, String>,
    /// Turns whose `session/prompt` is still unanswered though a later prompt started
    /// another turn (the agent aborts the earlier one; its answer, `cancelled`, may come after
    /// the later turn's): request id → the turn, ended by that answer.
    superseded: HashMap<String, Run>,
    /// The `session/prompt`s already answered: a repeated answer is stale.
    answered: HashSet<String>,
    /// Permission requests awaiting the client's answer: request id → options (id → kind).
    permissions: HashMap<String, Vec<(String, String)>>,
    /// The mode or model a logged `session/set_mode` / `session/set_model` asked for.
    switches: HashMap<String, String>,
}

#[derive(Default)]
struct SessionInfo {
    /// The session followed: the first one created, loaded or named by a notification.
    id: Option<String>,
    started: bool,
    cwd: Option<Value>,
    version: Option<Value>,
    agent: Option<Value>,
}

struct Run {
    id: String,
    /// The JSON-RPC id of the `session/prompt` this turn answers, when it was logged.
    request: Option<String>,
    /// A user message (prompt or user chunks) was sent in this run.
    prompted: bool,
    /// The agent produced something in this run.
    active: bool,
    tools: HashMap<String, Tool>,
}

#[derive(Default)]
struct Tool {
    name: String,
    kind: Option<Value>,
    title: Option<Value>,
    input: Value,
    content: Option<Value>,
    output_text: String,
    raw_output: Option<Value>,
    status: Option<String>,
    done: bool,
    /// Order of announcement, to cancel unfinished calls in order.
    order: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ChunkKind {
    Message,
    Thought,
    User,
}

struct Chunks {
    kind: ChunkKind,
    id: String,
    /// The agent's own `messageId`, when it sends one.
    own_id: Option<String>,
    text: String,
    /// User chunks echoing a prompt already logged as a `session/prompt` request.
    echo: bool,
}

impl Acp {
    pub(crate) fn new(provider: Provider) -> Acp {
        Acp {
            provider,
            session: SessionInfo::default(),
            run: None,
            open: None,
            messages: 0,
            requests: HashMap::new(),
            superseded: HashMap::new(),
            answered: HashSet::new(),
            permissions: HashMap::new(),
            switches: HashMap::new(),
        }
    }
}

impl Decoder for Acp {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let Some(obj) = record.as_object() else {
            return out.unknown("record");
        };
        if obj.contains_key("sessionUpdate") {
            return self.update(obj, out);
        }
        if let Some(method) = obj.get("method").and_then(Value::as_str) {
            return self.method(method, obj, out);
        }
        if obj.contains_key("id") && (obj.contains_key("result") || obj.contains_key("error")) {
            return self.response(obj, out);
        }
        out.unknown("record (neither a JSON-RPC message nor a session update)");
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.close_chunks(out);
    }
}

impl Acp {
    fn method(&mut self, method: &str, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let params = obj.get("params").and_then(Value::as_object);
        let id = obj.get("id").map(id_string);
        match method {
            "session/update" => {
                let Some(params) = params else {
                    return out.missing("params");
                };
                if !self.follows(params) {
                    return out.ignore();
                }
                if let Some(session) = params.get("sessionId") {
                    self.start_session(session.clone(), None, None, out);
                }
                match params.get("update").and_then(Value::as_object) {
                    Some(update) => self.update(update, out),
                    None => out.missing("params.update"),
                }
            }
            "session/request_permission" | "session/prompt"
                if !params.is_none_or(|p| self.follows(p)) =>
            {
                out.ignore()
            }
            "session/request_permission" => self.permission_request(id, params, out),
            "session/prompt" => self.prompt(id, params, out),
            "session/new"
            | "session/load"
            | "initialize"
            | "authenticate"
            | "session/set_mode"
            | "session/set_model"
            | "session/set_config_option"
            | "session/list" => {
                if let (Some("session/new" | "session/load"), Some(cwd)) =
                    (Some(method), params.and_then(|p| p.get("cwd")))
                {
                    self.session.cwd = Some(cwd.clone());
                }
                if let Some(id) = id {
                    let target = match method {
                        "session/set_mode" => params.and_then(|p| p.get("modeId")),
                        "session/set_model" => params.and_then(|p| p.get("modelId")),
                        _ => None,
                    };
                    if let Some(t) = target.and_then(Value::as_str) {
                        self.switches.insert(id.clone(), t.to_owned());
                    }
                    self.requests.insert(id, method.to_owned());
                }
                out.ignore();
            }
            "session/cancel" => out.ignore(),
            m if m.starts_with('_') => {
                // An extension method: its answer is not ours to read either.
                if let Some(id) = id {
                    self.requests.insert(id, m.to_owned());
                }
                out.ignore();
            }
            m if m.starts_with("fs/") || m.starts_with("terminal/") => out.ignore(),
            other => out.unknown(format_args!("method {other:?}")),
        }
    }

    fn update(&mut self, update: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(kind) = update.get("sessionUpdate").and_then(Value::as_str) else {
            return out.missing("sessionUpdate");
        };
        if !kind.ends_with("_chunk") {
            // Any other update ends the run of chunks.
            self.close_chunks(out);
        }
        match kind {
            "agent_message_chunk" => self.chunk(ChunkKind::Message, update, out),
            "agent_thought_chunk" => self.chunk(ChunkKind::Thought, update, out),
            "user_message_chunk" => self.chunk(ChunkKind::User, update, out),
            "tool_call" => self.tool_call(update, out),
            "tool_call_update" => self.tool_call_update(update, out),
            "plan" => self.plan(update, out),
            "current_mode_update" => {
                let Some(mode) = update.get("currentModeId") else {
                    return out.missing("currentModeId");
                };
                let run = self.run.as_ref().map(|r| r.id.clone());
                out.emit(
                    EventType::ModeChanged,
                    run.as_deref(),
                    json!({"mode": mode}),
                );
            }
            "available_commands_update"
            | "session_info_update"
            | "usage_update"
            | "config_option_update" => out.ignore(),
            other => out.unknown(format_args!("sessionUpdate {other:?}")),
        }
    }

    fn chunk(&mut self, kind: ChunkKind, update: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(content) = update.get("content") else {
            return out.missing("content");
        };
        let Some(text) = content.get("text").and_then(Value::as_str) else {
            // Images, audio, resources: nothing for the text stream.
            return out.ignore();
        };
        if kind == ChunkKind::Message && text.starts_with("[MODE_UPDATE] ") {
            return out.ignore();
        }
        let own_id = update
            .get("messageId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let continues = self
            .open
            .as_ref()
            .is_some_and(|o| o.kind == kind && (own_id.is_none() || o.own_id == own_id));
        if !continues {
            self.close_chunks(out);
            if kind == ChunkKind::User {
                self.new_turn_for_user(out);
            }
        }
        let run = self.ensure_run(out);
        let echo = self
            .run
            .as_ref()
            .is_some_and(|r| r.prompted && !r.active && kind == ChunkKind::User);
        if kind == ChunkKind::User {
            self.mark(|r| r.prompted = true);
        } else {
            self.mark(|r| r.active = true);
        }
        if !continues {
            let id = match &own_id {
                Some(id) => id.clone(),
                None => self.next_message_id(&run),
            };
            self.open = Some(Chunks {
                kind,
                id,
                own_id,
                text: String::new(),
                echo,
            });
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.text.push_str(text);
        let event = match kind {
            ChunkKind::Message => EventType::MessageStreamed,
            ChunkKind::Thought => EventType::ReasoningStreamed,
            ChunkKind::User => return,
        };
        let mut data = json!({"delta": text, "message_id": open.id});
        if kind == ChunkKind::Message {
            data["role"] = json!("assistant");
        }
        out.emit(event, Some(&run), data);
    }

    /// Ends the run of chunks: one whole message, reasoning block or user prompt.
    fn close_chunks(&mut self, out: &mut Out<'_>) {
        let Some(open) = self.open.take() else {
            return;
        };
        if open.echo {
            return;
        }
        let run = self.run.as_ref().map(|r| r.id.clone());
        let (event, data) = match open.kind {
            ChunkKind::Message => (
                EventType::MessageReceived,
                json!({"content": open.text, "message_id": open.id, "role": "assistant"}),
            ),
            ChunkKind::Thought => (
                EventType::ReasoningReceived,
                json!({"content": open.text, "message_id": open.id}),
            ),
            ChunkKind::User => (
                EventType::MessageSent,
                json!({"content": open.text, "message_id": open.id, "role": "user"}),
            ),
        };
        out.emit(event, run.as_deref(), data);
    }

    fn tool_call(&mut self, update: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(id) = update.get("toolCallId").map(id_string) else {
            return out.missing("toolCallId");
        };
        self.close_chunks(out);
        let run = self.ensure_run(out);
        self.mark(|r| r.active = true);
        if self.tool(&id).is_some() {
            // A repeated announcement: treat it as an update.
            return self.tool_call_update(update, out);
        }
        let mut tool = Tool {
            input: json!({}),
            ..Tool::default()
        };
        merge_tool(&mut tool, update);
        tool.name = tool_name(&tool);
        out.emit_full(
            EventType::ToolCallStarted,
            Some(&run),
            started_data(&id, &tool),
            Some(&id),
            Map::new(),
        );
        let status = tool.status.clone();
        if let Some(run) = self.run.as_mut() {
            tool.order = run.tools.len();
            run.tools.insert(id.clone(), tool);
        }
        if matches!(status.as_deref(), Some("completed" | "failed")) {
            self.end_tool(&run, &id, out);
        }
    }

    fn tool_call_update(&mut self, update: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(id) = update.get("toolCallId").map(id_string) else {
            return out.missing("toolCallId");
        };
        self.close_chunks(out);
        let run = self.ensure_run(out);
        self.mark(|r| r.active = true);
        let known = self.tool(&id).is_some();
        if !known {
            let mut tool = Tool {
                input: json!({}),
                ..Tool::default()
            };
            merge_tool(&mut tool, update);
            tool.name = tool_name(&tool);
            out.emit_full(
                EventType::ToolCallStarted,
                Some(&run),
                started_data(&id, &tool),
                Some(&id),
                Map::new(),
            );
            if let Some(r) = self.run.as_mut() {
                tool.order = r.tools.len();
                r.tools.insert(id.clone(), tool);
            }
        }
        let Some(tool) = self.run.as_mut().and_then(|r| r.tools.get_mut(&id)) else {
            return;
        };
        if tool.done {
            return out.ignore();
        }
        let before = tool.output_text.clone();
        let old_status = tool.status.clone();
        if known {
            merge_tool(tool, update);
        }
        let status = tool.status.clone();
        if matches!(status.as_deref(), Some("completed" | "failed")) {
            return self.end_tool(&run, &id, out);
        }
        if !known {
            // Just announced, with what this update said.
            return;
        }
        let mut data = Map::new();
        data.insert("tool_call_id".into(), json!(id));
        if status != old_status {
            if let Some(s) = &status {
                data.insert("status".into(), json!(s));
            }
        }
        if let Some(title) = update.get("title").filter(|t| !t.is_null()) {
            data.insert("title".into(), title.clone());
        }
        if tool.output_text != before {
            match tool.output_text.strip_prefix(before.as_str()) {
                Some(rest) => data.insert("output_delta".into(), json!(rest)),
                None => data.insert("output".into(), json!(tool.output_text)),
            };
        }
        if let Some(input) = update.get("rawInput") {
            data.insert("tool_input".into(), input.clone());
        }
        out.emit_full(
            EventType::ToolCallUpdated,
            Some(&run),
            Value::Object(data),
            Some(&id),
            Map::new(),
        );
    }

    /// Emits the completion or failure of a tool call whose status just became final.
    fn end_tool(&mut self, run: &str, id: &str, out: &mut Out<'_>) {
        let Some(tool) = self.run.as_mut().and_then(|r| r.tools.get_mut(id)) else {
            return;
        };
        tool.done = true;
        let mut data = started_data(id, tool);
        let text = if !tool.output_text.is_empty() {
            Some(json!(tool.output_text))
        } else {
            tool.raw_output.clone()
        };
        let failed = tool.status.as_deref() == Some("failed");
        let kind = if failed {
            let error = match &text {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "tool call failed".to_owned(),
            };
            data["error"] = json!(error);
            EventType::ToolCallFailed
        } else {
            data["tool_output"] = text.unwrap_or_else(|| json!(""));
            EventType::ToolCallCompleted
        };
        if let Some(content) = tool.content.as_ref().filter(|c| has_items(c)) {
            data["content"] = content.clone();
        }
        if let Some(raw) = &tool.raw_output {
            data["raw_output"] = raw.clone();
        }
        out.emit_full(kind, Some(run), data, Some(id), Map::new());
    }

    fn plan(&mut self, update: &Map<String, Value>, out: &mut Out<'_>) {
        let Some(entries) = update.get("entries").and_then(Value::as_array) else {
            return out.missing("entries");
        };
        self.close_chunks(out);
        let run = self.ensure_run(out);
        self.mark(|r| r.active = true);
        let items: Vec<Value> = entries
            .iter()
            .map(|e| {
                let mut item = json!({
                    "text": e.get("content").and_then(Value::as_str).unwrap_or(""),
                    "status": e.get("status").and_then(Value::as_str).unwrap_or("pending"),
                });
                if let Some(p) = e.get("priority") {
                    item["priority"] = p.clone();
                }
                item
            })
            .collect();
        out.emit(EventType::TodoUpdated, Some(&run), json!({"items": items}));
    }

    fn permission_request(
        &mut self,
        id: Option<String>,
        params: Option<&Map<String, Value>>,
        out: &mut Out<'_>,
    ) {
        let Some(id) = id else {
            return out.missing("id");
        };
        let Some(params) = params else {
            return out.missing("params");
        };
        self.close_chunks(out);
        let run = self.ensure_run(out);
        let call = params.get("toolCall");
        let call_id = call.and_then(|c| c.get("toolCallId")).map(id_string);
        let known = call_id.as_deref().and_then(|c| self.tool(c));
        let (tool_name, tool_input) = match known {
            Some(t) => (t.name.clone(), t.input.clone()),
            None => {
                let mut t = Tool {
                    input: json!({}),
                    ..Tool::default()
                };
                if let Some(c) = call.and_then(Value::as_object) {
                    merge_tool(&mut t, c);
                }
                (tool_name(&t), t.input)
            }
        };
        let options = params.get("options").cloned().unwrap_or_else(|| json!([]));
        let kinds = options
            .as_array()
            .map(|opts| {
                opts.iter()
                    .filter_map(|o| {
                        let oid = o.get("optionId").map(id_string)?;
                        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
                        Some((oid, kind.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.permissions.insert(id.clone(), kinds);
        let mut data = json!({
            "request_id": id,
            "tool_name": tool_name,
            "tool_input": tool_input,
            "options": options,
        });
        if let Some(c) = &call_id {
            data["tool_call_id"] = json!(c);
        }
        if let Some(title) = call.and_then(|c| c.get("title")) {
            data["title"] = title.clone();
        }
        let correlation = call_id.unwrap_or_else(|| id.clone());
        out.emit_full(
            EventType::ToolApprovalRequested,
            Some(&run),
            data,
            Some(&correlation),
            Map::new(),
        );
    }

    fn prompt(
        &mut self,
        id: Option<String>,
        params: Option<&Map<String, Value>>,
        out: &mut Out<'_>,
    ) {
        self.close_chunks(out);
        // The turn of an earlier prompt still unanswered (the host gave up waiting, e.g. an
        // interrupt the agent ignored): the agent aborts it for this one, and its answer,
        // whenever it comes, ends that turn and no other.
        if let Some(request) = self.run.as_ref().and_then(|r| r.request.clone()) {
            if let Some(run) = self.run.take() {
                self.superseded.insert(request, run);
            }
        }
        self.new_turn_for_user(out);
        let run = self.ensure_run(out);
        self.mark(|r| {
            r.prompted = true;
            r.request = r.request.take().or_else(|| id.clone());
        });
        if let Some(id) = id {
            self.requests.insert(id, "session/prompt".to_owned());
        }
        let text: Vec<&str> = params
            .and_then(|p| p.get("prompt"))
            .and_then(Value::as_array)
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let data = json!({"content": text.join("\n"), "role": "user"});
        out.emit(EventType::MessageSent, Some(&run), data);
    }

    fn response(&mut self, obj: &Map<String, Value>, out: &mut Out<'_>) {
        let id = obj.get("id").map(id_string).unwrap_or_default();
        let method = self.requests.remove(&id);
        if method.as_deref().is_some_and(|m| m.starts_with('_')) {
            // The answer to an extension request of the client's (the host's replay barrier).
            return out.ignore();
        }
        if method.is_none() && self.answered.contains(&id) {
            return out.ignore();
        }
        if method.as_deref() == Some("session/prompt") {
            self.answered.insert(id.clone());
            let current = self.run.as_ref().and_then(|r| r.request.as_deref()) == Some(&id);
            if !current {
                return match self.superseded.remove(&id) {
                    Some(run) => {
                        self.requests.insert(id, "session/prompt".to_owned());
                        self.with_run(run, |acp| acp.response(obj, out));
                    }
                    // Its turn already ended: stale.
                    None => out.ignore(),
                };
            }
        }
        if let Some(error) = obj.get("error") {
            self.switches.remove(&id);
            return self.error_response(error, method.as_deref(), out);
        }
        let result = obj.get("result").unwrap_or(&Value::Null);
        if let Some(reason) = result.get("stopReason").and_then(Value::as_str) {
            return self.stop(reason, result, out);
        }
        if let Some(target) = self.switches.remove(&id) {
            let run = self.run.as_ref().map(|r| r.id.clone());
            let (event, key) = match method.as_deref() {
                Some("session/set_model") => (EventType::ModelChanged, "model"),
                _ => (EventType::ModeChanged, "mode"),
            };
            return out.emit(event, run.as_deref(), json!({ key: target }));
        }
        if let Some(options) = self.permissions.remove(&id) {
            return self.permission_response(&id, &options, result, out);
        }
        if let Some(info) = result.get("agentInfo") {
            self.session.version = info.get("version").cloned();
            self.session.agent = info.get("name").cloned();
        }
        if let Some(session) = result.get("sessionId") {
            if matches!(method.as_deref(), Some("session/new" | "session/load")) {
                // The client moved on to another session (a resumed host whose load failed
                // creates a new one): follow it from here.
                let id = session.as_str().map(str::to_owned);
                if self.session.id.is_some() && self.session.id != id {
                    self.session.id = id;
                    self.session.started = false;
                }
            }
            let model = result
                .get("models")
                .and_then(|m| m.get("currentModelId"))
                .cloned();
            let mode = result
                .get("modes")
                .and_then(|m| m.get("currentModeId"))
                .cloned();
            return self.start_session(session.clone(), model, mode, out);
        }
        out.ignore();
    }

    fn stop(&mut self, reason: &str, result: &Value, out: &mut Out<'_>) {
        self.close_chunks(out);
        let run = self.ensure_run(out);
        if let Some(usage) = result.get("usage").and_then(Value::as_object) {
            out.emit(EventType::TokenUsageUpdated, Some(&run), token_usage(usage));
        } else if let Some(count) = result
            .pointer("/_meta/quota/token_count")
            .and_then(Value::as_object)
        {
            let mut data = Map::new();
            for key in ["input_tokens", "output_tokens"] {
                if let Some(v) = count.get(key) {
                    data.insert(key.into(), v.clone());
                }
            }
            out.emit(
                EventType::TokenUsageUpdated,
                Some(&run),
                Value::Object(data),
            );
        }
        let (event, data) = match reason {
            "cancelled" => (
                EventType::RunCancelled,
                json!({
                    "reason": CancelReason::Interrupted.as_str(),
                    "details": {"stop_reason": reason},
                }),
            ),
            "refusal" => {
                let mut data = ProviderError::new(
                    self.provider,
                    ErrorKind::Refusal,
                    "the agent refused to continue",
                )
                .to_data();
                data.insert("stop_reason".into(), json!(reason));
                (EventType::RunFailed, Value::Object(data))
            }
            _ => (EventType::RunCompleted, json!({"stop_reason": reason})),
        };
        self.end_run(event, data, out);
    }

    fn error_response(&mut self, error: &Value, method: Option<&str>, out: &mut Out<'_>) {
        let code = error.get("code").and_then(Value::as_i64);
        let raw = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("JSON-RPC error");
        // The Gemini CLI passes a model API failure on as the HTTP status for a code and the
        // API's error document for a message.
        let inner: Option<String> = serde_json::from_str::<Value>(raw).ok().and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let details = error.pointer("/data/details").and_then(Value::as_str);
        let message = match (inner, details) {
            (Some(inner), _) => inner,
            (None, Some(details)) => format!("{raw}: {details}"),
            (None, None) => raw.to_owned(),
        };
        let message = message.as_str();
        // The JSON-RPC code stays in `details.error.code`.
        let kind = match code {
            Some(c @ 400..=599) => {
                ErrorKind::from_http_status(c.unsigned_abs()).unwrap_or(ErrorKind::ServerError)
            }
            // ACP's `auth_required`.
            Some(-32000) => ErrorKind::AuthenticationFailed,
            // The agent's own failure ("Internal error: No previous sessions found…"), unless
            // its wording says more.
            Some(-32603) => ErrorKind::from_message(message).unwrap_or(ErrorKind::AgentError),
            Some(-32700 | -32600 | -32601 | -32602 | -32002 | -32800) => ErrorKind::ProtocolError,
            _ => ErrorKind::from_message(message).unwrap_or(ErrorKind::Unknown),
        };
        let mut data = ProviderError::new(self.provider, kind, message).to_data();
        data.insert("details".into(), json!({"error": error, "method": method}));
        // The answer to a prompt, or an unattributed error while a turn runs, fails the turn.
        let ends_turn = self.run.is_some() && matches!(method, None | Some("session/prompt"));
        self.close_chunks(out);
        if ends_turn || method == Some("session/prompt") {
            self.ensure_run(out);
            self.end_run(EventType::RunFailed, Value::Object(data), out);
        } else {
            data.insert("severity".into(), json!("error"));
            let run = self.run.as_ref().map(|r| r.id.clone());
            out.emit(
                EventType::ErrorOccurred,
                run.as_deref(),
                Value::Object(data),
            );
        }
    }

    fn permission_response(
        &mut self,
        id: &str,
        options: &[(String, String)],
        result: &Value,
        out: &mut Out<'_>,
    ) {
        let outcome = result.get("outcome");
        let selected = outcome
            .and_then(|o| o.get("optionId"))
            .map(id_string)
            .filter(|_| {
                outcome
                    .and_then(|o| o.get("outcome"))
                    .and_then(Value::as_str)
                    == Some("selected")
            });
        let run = self.run.as_ref().map(|r| r.id.clone());
        let (event, data) = match selected {
            Some(option) => {
                let kind = options
                    .iter()
                    .find(|(o, _)| *o == option)
                    .map_or("", |(_, k)| k.as_str());
                let event = if kind.starts_with("allow") {
                    EventType::ToolApprovalGranted
                } else {
                    EventType::ToolApprovalDenied
                };
                (
                    event,
                    json!({"request_id": id, "option_id": option, "option_kind": kind}),
                )
            }
            None => (
                EventType::ToolApprovalDenied,
                json!({"request_id": id, "reason": "cancelled"}),
            ),
        };
        out.emit_full(event, run.as_deref(), data, Some(id), Map::new());
    }

    fn start_session(
        &mut self,
        session: Value,
        model: Option<Value>,
        mode: Option<Value>,
        out: &mut Out<'_>,
    ) {
        if self.session.id.is_none() {
            self.session.id = session.as_str().map(str::to_owned);
        }
        if self.session.started {
            return;
        }
        self.session.started = true;
        let mut data = Map::new();
        data.insert("provider_session_id".into(), session);
        for (key, value) in [
            ("cwd", self.session.cwd.clone()),
            ("model", model),
            ("mode", mode),
            ("version", self.session.version.clone()),
            ("agent", self.session.agent.clone()),
        ] {
            if let Some(v) = value.filter(|v| !v.is_null()) {
                data.insert(key.into(), v);
            }
        }
        out.emit(EventType::SessionStarted, None, Value::Object(data));
    }

    /// Emits the turn's terminal, after cancelling the tool calls that never finished.
    fn end_run(&mut self, kind: EventType, data: Value, out: &mut Out<'_>) {
        self.close_chunks(out);
        self.permissions.clear();
        let Some(run) = self.run.take() else {
            return;
        };
        let mut open: Vec<(&String, &Tool)> = run.tools.iter().filter(|(_, t)| !t.done).collect();
        open.sort_by_key(|(_, t)| t.order);
        for (call, tool) in open {
            cancel_tool_call(out, &run.id, call, &json!(tool.name), &tool.input, kind);
        }
        out.emit(kind, Some(&run.id), data);
    }

    /// A user message starts a turn; one already producing output must have ended.
    fn new_turn_for_user(&mut self, out: &mut Out<'_>) {
        let ended = self.run.as_ref().is_some_and(|r| r.active && r.prompted);
        if ended {
            self.end_run(EventType::RunCompleted, json!({"inferred": true}), out);
        }
    }

    /// Whether a record's `params.sessionId` is the session followed (or names none).
    fn follows(&mut self, params: &Map<String, Value>) -> bool {
        match (
            params.get("sessionId").and_then(Value::as_str),
            &self.session.id,
        ) {
            (Some(s), Some(main)) => s == main,
            (Some(s), None) => {
                self.session.id = Some(s.to_owned());
                true
            }
            (None, _) => true,
        }
    }

    fn ensure_run(&mut self, out: &mut Out<'_>) -> String {
        if let Some(run) = &self.run {
            return run.id.clone();
        }
        let id = out.new_run_id();
        out.emit(EventType::RunStarted, Some(&id), json!({}));
        self.run = Some(Run {
            id: id.clone(),
            request: None,
            prompted: false,
            active: false,
            tools: HashMap::new(),
        });
        id
    }

    /// Runs `f` with `run` as the open turn (a superseded turn answered late), then restores
    /// the open turn and its chunks untouched.
    fn with_run(&mut self, run: Run, f: impl FnOnce(&mut Acp)) {
        let current = self.run.replace(run);
        let open = self.open.take();
        let permissions = std::mem::take(&mut self.permissions);
        f(self);
        self.run = current;
        self.open = open;
        self.permissions = permissions;
    }

    fn mark(&mut self, f: impl FnOnce(&mut Run)) {
        if let Some(run) = self.run.as_mut() {
            f(run);
        }
    }

    fn tool(&self, id: &str) -> Option<&Tool> {
        self.run.as_ref().and_then(|r| r.tools.get(id))
    }

    fn next_message_id(&mut self, run: &str) -> String {
        self.messages += 1;
        format!("{run}:m{}", self.messages)
    }
}

/// Folds the fields an ACP `tool_call` / `tool_call_update` carries into what we know.
fn merge_tool(tool: &mut Tool, update: &Map<String, Value>) {
    let present = |k: &str| update.get(k).filter(|v| !v.is_null());
    if let Some(kind) = present("kind") {
        tool.kind = Some(kind.clone());
    }
    if let Some(title) = present("title") {
        tool.title = Some(title.clone());
    }
    if let Some(input) = present("rawInput") {
        tool.input = input.clone();
    }
    if let Some(output) = present("rawOutput") {
        tool.raw_output = Some(output.clone());
    }
    if let Some(status) = present("status").and_then(Value::as_str) {
        tool.status = Some(status.to_owned());
    }
    if let Some(content) = present("content") {
        tool.output_text = content_text(content);
        tool.content = Some(content.clone());
    }
    // The Gemini CLI sends no `rawInput`; the title of its shell call (`execute`) is the
    // command, which a page shows before it runs.
    let shell = tool.kind.as_ref().and_then(Value::as_str) == Some("execute");
    if shell && tool.input.as_object().is_some_and(Map::is_empty) {
        if let Some(title) = tool.title.as_ref().and_then(Value::as_str) {
            tool.input = json!({ "command": title });
        }
    }
}

/// `kind` when the agent gives one (stable per tool), else the title.
fn tool_name(tool: &Tool) -> String {
    tool.kind
        .as_ref()
        .or(tool.title.as_ref())
        .and_then(Value::as_str)
        .unwrap_or("tool")
        .to_owned()
}

fn started_data(id: &str, tool: &Tool) -> Value {
    let mut data = json!({
        "tool_call_id": id,
        "tool_name": tool.name,
        "tool_input": tool.input,
    });
    if let Some(kind) = &tool.kind {
        data["kind"] = kind.clone();
    }
    if let Some(title) = &tool.title {
        data["title"] = title.clone();
    }
    data
}

/// The text of ACP tool-call content: `{type: "content", content: {type: "text", text}}`
/// blocks joined by newlines (diffs and terminals carry no text).
fn content_text(content: &Value) -> String {
    let Some(items) = content.as_array() else {
        return String::new();
    };
    let texts: Vec<&str> = items
        .iter()
        .filter_map(|item| {
            item.get("content")
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
        })
        .collect();
    texts.join("\n")
}

fn has_items(v: &Value) -> bool {
    v.as_array().is_some_and(|a| !a.is_empty())
}

/// `token_usage_updated.data` from a prompt response's `usage`.
fn token_usage(usage: &Map<String, Value>) -> Value {
    let mut data = Map::new();
    for (from, to) in [
        ("inputTokens", "input_tokens"),
        ("outputTokens", "output_tokens"),
        ("cachedReadTokens", "cache_read_input_tokens"),
        ("cachedWriteTokens", "cache_creation_input_tokens"),
        ("thoughtTokens", "reasoning_output_tokens"),
        ("totalTokens", "total_tokens"),
    ] {
        if let Some(v) = usage.get(from) {
            data.insert(to.into(), v.clone());
        }
    }
    Value::Object(data)
}

/// A JSON-RPC id (string or number) as text.
fn id_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::normalize::tests::check;
    use crate::core::normalize::Format;

    #[wasm_bindgen_test(unsupported = test)]
    fn a_json_rpc_session_with_a_prompt_turn() {
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}
{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{},"agentInfo":{"name":"gemini-cli","version":"0.61.0"}}}
{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/work","mcpServers":[]}}
{"jsonrpc":"2.0","id":1,"result":{"sessionId":"sess-1","modes":{"currentModeId":"default","availableModes":[]},"models":{"currentModelId":"gemini-2.5-pro"}}}
{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"sess-1","prompt":[{"type":"text","text":"list /tmp"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"I should "}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"run ls."}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"plan","entries":[{"content":"List /tmp","priority":"high","status":"in_progress"}]}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call","toolCallId":"call-1","title":"ls /tmp","kind":"execute","status":"pending","rawInput":{"command":"ls /tmp"}}}}
{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"sess-1","toolCall":{"toolCallId":"call-1"},"options":[{"optionId":"ok","name":"Allow","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}
{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"call-1","status":"in_progress","content":[{"type":"content","content":{"type":"text","text":"a\n"}}]}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"call-1","content":[{"type":"content","content":{"type":"text","text":"a\nb\n"}}]}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"call-1","status":"completed"}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"call-1","status":"completed"}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Two "}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"files."}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"current_mode_update","currentModeId":"yolo"}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess-other","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"not ours"}}}}
{"jsonrpc":"2.0","id":44,"method":"session/request_permission","params":{"sessionId":"sess-other","toolCall":{"toolCallId":"x"},"options":[]}}
{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15,"cachedReadTokens":3}}}
"#,
            expect![[r#"
                1 -- session_started model="gemini-2.5-pro"
                2 t1 run_started
                3 t1 message_sent role="user" content="list /tmp"
                4 t1 reasoning_streamed delta="I should "
                5 t1 reasoning_streamed delta="run ls."
                6 t1 reasoning_received content="I should run ls."
                7 t1 todo_updated items=[1 items]
                8 t1 tool_call_started tool_name="execute" tool_call_id="call-1" tool_input={"command":"ls /tmp"}
                9 t1 tool_approval_requested tool_name="execute" tool_call_id="call-1" tool_input={"command":"ls /tmp"} request_id="7"
                10 t1 tool_approval_granted request_id="7"
                11 t1 tool_call_updated tool_call_id="call-1" status="in_progress"
                12 t1 tool_call_updated tool_call_id="call-1"
                13 t1 tool_call_completed tool_name="execute" tool_call_id="call-1" content=[1 items] tool_input={"command":"ls /tmp"} tool_output="a\nb\n"
                14 t1 message_streamed role="assistant" delta="Two "
                15 t1 message_streamed role="assistant" delta="files."
                16 t1 message_received role="assistant" content="Two files."
                17 t1 mode_changed
                18 t1 token_usage_updated input_tokens=10 output_tokens=5
                19 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn gemini_mode_switches_and_quota_usage_as_the_real_cli_sends_them() {
        // Recorded from the Gemini CLI 0.61.0: `session/set_mode` makes it send a
        // `[MODE_UPDATE]` message chunk outside any turn, and a prompt's answer carries its
        // usage under `_meta.quota`.
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","id":"agentwire-3","method":"session/set_mode","params":{"sessionId":"s","modeId":"yolo"}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"[MODE_UPDATE] yolo"}}}}
{"jsonrpc":"2.0","id":"agentwire-3","result":{}}
{"jsonrpc":"2.0","id":"agentwire-4","method":"session/set_model","params":{"sessionId":"s","modelId":"nope"}}
{"jsonrpc":"2.0","id":"agentwire-4","error":{"code":-32602,"message":"unknown model"}}
{"jsonrpc":"2.0","id":"agentwire-5","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello"}}}}
{"jsonrpc":"2.0","id":"agentwire-5","result":{"stopReason":"end_turn","_meta":{"quota":{"token_count":{"input_tokens":42,"output_tokens":3},"model_usage":[]}}}}
"#,
            expect![[r#"
                1 -- session_started
                2 -- mode_changed
                3 -- error_occurred error_message="unknown model" provider_error.kind="protocol_error"
                4 t1 run_started
                5 t1 message_sent role="user" content="hi"
                6 t1 message_streamed role="assistant" delta="Hello"
                7 t1 message_received role="assistant" content="Hello"
                8 t1 token_usage_updated input_tokens=42 output_tokens=3
                9 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn gemini_api_failures_and_a_host_that_moves_to_a_new_session() {
        // Recorded from the Gemini CLI 0.61.0 against a model API answering 401, then a
        // resumed host whose `session/load` failed and that created a new session.
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","id":"agentwire-2","method":"session/new","params":{"cwd":"/w","mcpServers":[]}}
{"jsonrpc":"2.0","id":"agentwire-2","result":{"sessionId":"s1"}}
{"jsonrpc":"2.0","id":"agentwire-3","method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"http401"}]}}
{"jsonrpc":"2.0","id":"agentwire-3","error":{"code":401,"message":"{\"error\":{\"code\":401,\"message\":\"invalid x-api-key\",\"status\":\"UNAUTHENTICATED\"}}"}}
{"jsonrpc":"2.0","id":"agentwire-4","method":"session/load","params":{"sessionId":"s1","cwd":"/w","mcpServers":[]}}
{"jsonrpc":"2.0","id":"agentwire-4","error":{"code":-32603,"message":"Internal error","data":{"details":"No previous sessions found for this project."}}}
{"jsonrpc":"2.0","id":"agentwire-5","method":"session/new","params":{"cwd":"/w","mcpServers":[]}}
{"jsonrpc":"2.0","id":"agentwire-5","result":{"sessionId":"s2"}}
{"jsonrpc":"2.0","id":"agentwire-6","method":"session/prompt","params":{"sessionId":"s2","prompt":[{"type":"text","text":"again"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok"}}}}
{"jsonrpc":"2.0","id":"agentwire-6","result":{"stopReason":"end_turn"}}
"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 message_sent role="user" content="http401"
                4 t1 run_failed error_message="invalid x-api-key" provider_error.kind="authentication_failed"
                5 -- error_occurred error_message="Internal error: No previous sessions found for this project." provider_error.kind="agent_error"
                6 -- session_started
                7 t2 run_started
                8 t2 message_sent role="user" content="again"
                9 t2 message_streamed role="assistant" delta="ok"
                10 t2 message_received role="assistant" content="ok"
                11 t2 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn tool_output_arrives_as_deltas_when_content_grows() {
        let input = r#"{"sessionUpdate":"tool_call","toolCallId":"t","title":"ls","kind":"execute","status":"in_progress"}
{"sessionUpdate":"tool_call_update","toolCallId":"t","content":[{"type":"content","content":{"type":"text","text":"a"}}]}
{"sessionUpdate":"tool_call_update","toolCallId":"t","content":[{"type":"content","content":{"type":"text","text":"ab"}}]}
{"sessionUpdate":"tool_call_update","toolCallId":"t","title":"ls -l","content":[{"type":"content","content":{"type":"text","text":"xy"}}]}
"#;
        let out = crate::core::normalize::normalize(
            Some(Format::GeminiAcp),
            crate::core::normalize::Config::new("s1"),
            input.as_bytes(),
            crate::core::time::Timestamp::EPOCH,
        );
        let e = &out.events;
        assert_eq!(e[2].data_str("output_delta"), Some("a"));
        assert_eq!(e[3].data_str("output_delta"), Some("b"));
        assert_eq!(e[4].data_str("output"), Some("xy"));
        assert_eq!(e[4].data_str("title"), Some("ls -l"));
        assert!(e.iter().skip(1).all(|e| e.correlation_id() == Some("t")));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_fixtures_keep_the_conventions() {
        use crate::core::normalize::tests::check_invariants;
        check_invariants(
            Format::GeminiAcp,
            include_bytes!(
                "../../../tests/data/gemini-acp/hapi__gemini-3-flash-preview-edit-file.json"
            ),
        );
        check_invariants(
            Format::GeminiAcp,
            include_bytes!(
                "../../../tests/data/gemini-acp/hapi__gemini-3.1-pro-preview-run-shell.json"
            ),
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn bare_updates_as_hapi_captures_them() {
        check(
            Format::GeminiAcp,
            r#"{
  "model": "gemini-3-flash-preview",
  "updates": [
    {"sessionUpdate": "tool_call", "toolCallId": "think-1", "status": "in_progress", "title": "Update topic", "content": [], "locations": [], "kind": "think"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "think-1", "status": "completed", "title": "Update topic", "content": [{"type": "content", "content": {"type": "text", "text": "Topic: demo"}}], "kind": "think"},
    {"sessionUpdate": "tool_call", "toolCallId": "replace-2", "status": "in_progress", "title": "a.txt: x => y", "kind": "edit"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "replace-2", "status": "completed", "content": [{"type": "diff", "path": "/tmp/a.txt", "oldText": "x", "newText": "y"}], "kind": "edit"},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Edited "}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "it."}}
  ]
}
"#,
            expect![[r#"
                  1 t1 run_started
                  2 t1 tool_call_started tool_name="think" tool_call_id="think-1" tool_input={}
                  3 t1 tool_call_completed tool_name="think" tool_call_id="think-1" content=[1 items] tool_input={} tool_output="Topic: demo"
                  4 t1 tool_call_started tool_name="edit" tool_call_id="replace-2" tool_input={}
                  5 t1 tool_call_completed tool_name="edit" tool_call_id="replace-2" content=[1 items] tool_input={} tool_output=""
                  6 t1 message_streamed role="assistant" delta="Edited "
                  7 t1 message_streamed role="assistant" delta="it."
                  8 t1 message_received role="assistant" content="Edited it."
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn stop_reasons_end_the_turn() {
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Work"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"slow","title":"sleep 100","kind":"execute","status":"in_progress"}}}
{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"No."}}}}
{"jsonrpc":"2.0","id":4,"result":{"stopReason":"refusal"}}
{"jsonrpc":"2.0","id":5,"result":{"stopReason":"max_tokens"}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"c","title":"Read a","kind":"read","status":"in_progress"}}}
{"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"Internal error: quota"}}
{"jsonrpc":"2.0","id":8,"error":{"code":-32000,"message":"Authentication required"}}
"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 message_streamed role="assistant" delta="Work"
                4 t1 message_received role="assistant" content="Work"
                5 t1 tool_call_started tool_name="execute" tool_call_id="slow" tool_input={"command":"sleep 100"}
                6 t1 tool_call_cancelled tool_name="execute" tool_call_id="slow" tool_input={"command":"sleep 100"} reason="run_cancelled"
                7 t1 run_cancelled reason="interrupted"
                8 t2 run_started
                9 t2 message_streamed role="assistant" delta="No."
                10 t2 message_received role="assistant" content="No."
                11 t2 run_failed error_message="the agent refused to continue" provider_error.kind="refusal"
                12 t3 run_started
                13 t3 run_completed
                14 t4 run_started
                15 t4 tool_call_started tool_name="read" tool_call_id="c" tool_input={}
                16 t4 tool_call_cancelled tool_name="read" tool_call_id="c" tool_input={} reason="run_failed"
                17 t4 run_failed error_message="Internal error: quota" provider_error.kind="rate_limit"
                18 -- error_occurred error_message="Authentication required" provider_error.kind="authentication_failed"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn tool_calls_announced_finished_unknown_or_failed() {
        check(
            Format::GeminiAcp,
            r#"{"sessionUpdate":"tool_call","toolCallId":"a","title":"grep foo","status":"completed","rawInput":{"pattern":"foo"},"rawOutput":{"matches":2}}
{"sessionUpdate":"tool_call","toolCallId":"b","title":"rm -rf /","kind":"execute","status":"failed","content":[{"type":"content","content":{"type":"text","text":"denied"}}]}
{"sessionUpdate":"tool_call_update","toolCallId":"z","status":"in_progress","title":"late"}
{"sessionUpdate":"tool_call_update","toolCallId":"z","status":"failed"}
{"sessionUpdate":"tool_call_update","toolCallId":"z","status":"completed"}
{"sessionUpdate":"tool_call_update","status":"completed"}
{"sessionUpdate":"teleport"}
{"jsonrpc":"2.0","method":"session/unknown","params":{}}
{"hello":"world"}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="grep foo" tool_call_id="a" tool_input={"pattern":"foo"}
                3 t1 tool_call_completed tool_name="grep foo" tool_call_id="a" tool_input={"pattern":"foo"} tool_output={"matches":2}
                4 t1 tool_call_started tool_name="execute" tool_call_id="b" tool_input={"command":"rm -rf /"}
                5 t1 tool_call_failed tool_name="execute" tool_call_id="b" content=[1 items] tool_input={"command":"rm -rf /"} error="denied"
                6 t1 tool_call_started tool_name="late" tool_call_id="z" tool_input={}
                7 t1 tool_call_failed tool_name="late" tool_call_id="z" tool_input={} error="tool call failed"
                ! line 6: missing_field: missing field `toolCallId`
                ! line 7: unknown_type: unknown sessionUpdate "teleport"
                ! line 8: unknown_type: unknown method "session/unknown"
                ! line 9: unknown_type: unknown record (neither a JSON-RPC message nor a session update)
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_replayed_history_infers_the_end_of_earlier_turns() {
        check(
            Format::GeminiAcp,
            r#"{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"first "}}
{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"question"}}
{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"answer one"}}
{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"second"}}
{"sessionUpdate":"agent_message_chunk","messageId":"m-a","content":{"type":"text","text":"A"}}
{"sessionUpdate":"agent_message_chunk","messageId":"m-b","content":{"type":"text","text":"B"}}
{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"...","mimeType":"image/png"}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 message_sent role="user" content="first question"
                3 t1 message_streamed role="assistant" delta="answer one"
                4 t1 message_received role="assistant" content="answer one"
                5 t1 run_completed
                6 t2 run_started
                7 t2 message_sent role="user" content="second"
                8 t2 message_streamed role="assistant" delta="A"
                9 t2 message_received role="assistant" content="A"
                10 t2 message_streamed role="assistant" delta="B"
                11 t2 message_received role="assistant" content="B"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_late_answer_ends_its_own_turn_and_not_the_next() {
        // Issue 13, as the Gemini CLI 0.61.0 sent it: the model answers HTTP 500 (the CLI
        // retries silently), a turn is interrupted and its `session/cancel` ignored, the next
        // prompt is streamed and answered, and only then the old request `agentwire-4` comes
        // back `cancelled`. That answer ends its own turn (t2), never the new one (t3); a
        // repeated answer is stale. Then the same with the late answer in mid-stream (t4, t5).
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","id":"agentwire-3","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"first"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"one"}}}}
{"jsonrpc":"2.0","id":"agentwire-3","result":{"stopReason":"end_turn"}}
{"jsonrpc":"2.0","id":"agentwire-4","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"retried"}]}}
{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}
{"jsonrpc":"2.0","id":"agentwire-5","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"next"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hello"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" from the"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" fake model."}}}}
{"jsonrpc":"2.0","id":"agentwire-5","result":{"stopReason":"end_turn"}}
{"jsonrpc":"2.0","id":"agentwire-4","result":{"stopReason":"cancelled"}}
{"jsonrpc":"2.0","id":"agentwire-3","result":{"stopReason":"end_turn"}}
{"jsonrpc":"2.0","id":"agentwire-6","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"slow"}]}}
{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}
{"jsonrpc":"2.0","id":"agentwire-7","method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"again"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"A"}}}}
{"jsonrpc":"2.0","id":"agentwire-6","error":{"code":500,"message":"overloaded"}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"B"}}}}
{"jsonrpc":"2.0","id":"agentwire-7","result":{"stopReason":"end_turn"}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 message_sent role="user" content="first"
                3 -- session_started
                4 t1 message_streamed role="assistant" delta="one"
                5 t1 message_received role="assistant" content="one"
                6 t1 run_completed
                7 t2 run_started
                8 t2 message_sent role="user" content="retried"
                9 t3 run_started
                10 t3 message_sent role="user" content="next"
                11 t3 message_streamed role="assistant" delta="Hello"
                12 t3 message_streamed role="assistant" delta=" from the"
                13 t3 message_streamed role="assistant" delta=" fake model."
                14 t3 message_received role="assistant" content="Hello from the fake model."
                15 t3 run_completed
                16 t2 run_cancelled reason="interrupted"
                17 t4 run_started
                18 t4 message_sent role="user" content="slow"
                19 t5 run_started
                20 t5 message_sent role="user" content="again"
                21 t5 message_streamed role="assistant" delta="A"
                22 t4 run_failed error_message="overloaded" provider_error.kind="server_error"
                23 t5 message_streamed role="assistant" delta="B"
                24 t5 message_received role="assistant" content="AB"
                25 t5 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn through_the_host_pipeline_the_new_turn_keeps_its_answer() {
        // What the host does with the sequence above: its turn ids, the interrupt that gets
        // no answer within the grace (a synthetic `run_cancelled`), the drop policy.
        use crate::core::event::{EventType, Provider};
        use crate::core::lifecycle::{Disposition, LifecycleConfig, Policy, TurnProjector};
        use crate::core::normalize::{Config, Normalizer};
        use crate::core::time::Timestamp;

        struct Host {
            n: Normalizer,
            p: TurnProjector,
            log: Vec<crate::core::event::Event>,
        }
        impl Host {
            fn drain(&mut self) {
                self.log.extend(std::iter::from_fn(|| self.p.poll_event()));
            }
            fn line(&mut self, line: String, now: i64) {
                let at = Timestamp::from_unix_millis(now);
                self.n.handle_bytes(format!("{line}\n").as_bytes(), at);
                while let Some(e) = self.n.poll_event() {
                    if self.p.handle_event(&e, now) == Disposition::Applied {
                        self.log.push(e);
                    }
                    self.drain();
                }
            }
            fn prompt(&mut self, turn: &str, id: &str, text: &str, now: i64) {
                self.p.start_foreground(turn, now).unwrap();
                self.n.expect_run(turn);
                self.line(format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"session/prompt","params":{{"sessionId":"s","prompt":[{{"type":"text","text":"{text}"}}]}}}}"#), now);
            }
            fn chunk(&mut self, text: &str, now: i64) {
                self.line(format!(r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"{text}"}}}}}}}}"#), now);
            }
            fn answer(&mut self, id: &str, reason: &str, now: i64) {
                self.line(
                    format!(
                        r#"{{"jsonrpc":"2.0","id":"{id}","result":{{"stopReason":"{reason}"}}}}"#
                    ),
                    now,
                );
            }
        }
        let mut config = LifecycleConfig::new("s", Provider::Gemini);
        config.policy = Policy::Drop;
        let mut host = Host {
            n: Normalizer::new(Some(Format::GeminiAcp), Config::new("s")),
            p: TurnProjector::new(config),
            log: Vec::new(),
        };
        host.p.mark_connected();
        host.prompt("turn_a", "agentwire-3", "first", 0);
        host.chunk("one", 1);
        host.answer("agentwire-3", "end_turn", 2);
        host.prompt("turn_b", "agentwire-4", "retried", 10);
        assert!(host.p.interrupt(20));
        host.p.handle_timeout(20 + 2_000);
        host.drain();
        host.prompt("turn_c", "agentwire-5", "next", 3_000);
        host.chunk("Hello", 3_001);
        host.answer("agentwire-5", "end_turn", 3_002);
        host.answer("agentwire-4", "cancelled", 3_003);
        let log = host.log;
        let turn_c: Vec<String> = log
            .iter()
            .filter(|e| e.run_id() == Some("turn_c"))
            .map(|e| {
                format!(
                    "{} {}",
                    e.kind().as_str(),
                    e.data_str("content").or(e.data_str("reason")).unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            turn_c,
            [
                "run_started ",
                "message_sent next",
                "message_streamed ",
                "message_received Hello",
                "run_completed "
            ]
        );
        let turn_b: Vec<_> = log
            .iter()
            .filter(|e| e.run_id() == Some("turn_b") && e.kind().is_run_terminal())
            .map(|e| (e.kind(), e.data_str("reason")))
            .collect();
        assert_eq!(
            turn_b,
            [(EventType::RunCancelled, Some("interrupt_timeout"))]
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_logged_prompt_adopts_early_updates_and_skips_its_echo() {
        check(
            Format::GeminiAcp,
            r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"},{"type":"resource_link","uri":"file:///a","name":"a"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}}}
{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"w","title":"Write a","kind":"edit","rawInput":{"path":"a"}},"options":[{"optionId":"rej","name":"No","kind":"reject_once"}]}}
{"jsonrpc":"2.0","id":9,"result":{"outcome":{"outcome":"selected","optionId":"rej"}}}
{"jsonrpc":"2.0","id":10,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"w2"},"options":[]}}
{"jsonrpc":"2.0","id":10,"result":{"outcome":{"outcome":"cancelled"}}}
{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}
{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"again"}]}}
{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok"}}}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 message_sent role="user" content="hi"
                3 -- session_started
                4 t1 message_streamed role="assistant" delta="hello"
                5 t1 message_received role="assistant" content="hello"
                6 t1 tool_approval_requested tool_name="edit" tool_call_id="w" tool_input={"path":"a"} request_id="9"
                7 t1 tool_approval_denied request_id="9"
                8 t1 tool_approval_requested tool_name="tool" tool_call_id="w2" tool_input={} request_id="10"
                9 t1 tool_approval_denied reason="cancelled" request_id="10"
                10 t1 run_failed error_message="boom" provider_error.kind="agent_error"
                11 t2 run_started
                12 t2 message_sent role="user" content="again"
                13 t2 message_streamed role="assistant" delta="ok"
                14 t2 message_received role="assistant" content="ok"
            "#]],
        );
    }
}
