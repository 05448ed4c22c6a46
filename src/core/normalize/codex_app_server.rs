//! Decoder for `codex app-server`: JSON-RPC 2.0 messages, one per line on stdio (the server
//! omits the `"jsonrpc":"2.0"` header). Protocol: `codex-rs/app-server-protocol` (v2), the
//! app-server README. Records are told apart by shape: `method` without `id` is a
//! notification, `method` with `id` a request, `result`/`error` without `method` a response.
//!
//! Notifications → canonical events:
//! * `thread/started {thread}` → `session_started {provider_session_id, cwd, version,
//!   model_provider}` unless the `thread/start` response already gave it (with `model`,
//!   `approval_policy`, `sandbox`, `reasoning_effort`). The first thread seen is the session;
//!   turn and item traffic of any other thread (sub-agents, detached reviews) is ignored.
//! * `turn/started {turn{id}}` → `run_started {provider_turn_id}` with a fresh run id.
//!   `turn/completed {turn{id, status, error}}` → `run_completed` (`completed`),
//!   `run_cancelled {reason: "interrupted"}`, or `run_failed` (ProviderError kind from
//!   `error.codexErrorInfo` in snake_case, `unauthorized` → `authentication_failed`, else
//!   `turn_failed`; details `codex_error_info`, `additional_details`). A record of a turn
//!   arriving with no turn open opens one; records of the turn that just ended are dropped.
//! * `item/started` / `item/completed {item}` by `item.type`: `userMessage` → `message_sent`
//!   (completed); `agentMessage` → `message_received` with the whole text (completed);
//!   `plan` → `message_received {kind: "plan"}`; `reasoning` → `reasoning_received` (summary,
//!   else raw content); `exitedReviewMode` → `message_received {kind: "review"}`;
//!   `contextCompaction` → `context_compacted`; tools (`commandExecution` → `shell`,
//!   `fileChange` → `apply_patch`, `mcpToolCall` → `<server>.<tool>`, `webSearch`,
//!   `collabAgentToolCall` → its `tool`, `dynamicToolCall` → `[namespace.]tool`, `imageView`
//!   → `view_image`, `imageGeneration`) → `tool_call_started` / `tool_call_completed` or
//!   `tool_call_failed` (status `failed`/`declined`, non-zero `exitCode`, MCP `error`).
//! * Deltas: `item/agentMessage/delta` → `message_streamed {message_id: itemId, delta}`;
//!   `item/plan/delta` → the same with `kind: "plan"`; `item/reasoning/summaryTextDelta` and
//!   `item/reasoning/textDelta` → `reasoning_streamed`; `item/commandExecution/outputDelta`
//!   and `item/fileChange/outputDelta` → `tool_call_updated {output_delta}`;
//!   `item/fileChange/patchUpdated` → `tool_call_updated {tool_input}`;
//!   `item/mcpToolCall/progress` → `tool_call_updated {progress}`.
//! * `thread/tokenUsage/updated {tokenUsage{total, last, modelContextWindow}}` →
//!   `token_usage_updated` with the thread's running `total` as the counts, `last` and
//!   `model_context_window` beside them. `turn/diff/updated` → `workspace_diff_computed
//!   {diff}`; `turn/plan/updated` → `todo_updated {items, explanation}`; `model/rerouted` →
//!   `model_changed`; `thread/compacted` → `context_compacted` (once per turn with the item).
//! * `error {error, willRetry}` → `error_occurred` (severity `warning` when it will retry,
//!   else `error`); it never ends the turn: the protocol follows a fatal one with
//!   `turn/completed {status: "failed"}`, which gives the `run_failed`. `warning`,
//!   `configWarning`, `guardianWarning` → `error_occurred {severity: "warning"}`.
//! * Legacy `codex/event/*` notifications duplicate the v2 ones and are ignored (counted as
//!   ignored), as are status, account, MCP-startup, hook, realtime and similar notifications.
//!
//! Server → client requests (`id` + `method`): `item/commandExecution/requestApproval`,
//! `item/fileChange/requestApproval`, `item/permissions/requestApproval`,
//! `item/tool/requestUserInput`, `mcpServer/elicitation/request` and the legacy
//! `execCommandApproval` / `applyPatchApproval` → `tool_approval_requested {request_id (the
//! JSON-RPC id as a string), tool_call_id (itemId), tool_name, tool_input}`. When a capture
//! also holds the client's answer (`{id, result{decision}}`), it becomes
//! `tool_approval_granted` / `tool_approval_denied {request_id, decision}`.
//!
//! Responses: a `thread/start` (or resume/fork) result gives the session (above). An error
//! response becomes `error_occurred` (kind `rpc_error`), or `run_failed` when the capture
//! shows it answers a `turn/start` request and a turn is open. Client requests echoed in a
//! capture are otherwise ignored.
//!
//! Streamed messages or reasoning that never complete are closed with a discarded
//! `message_received`/`reasoning_received` at turn end and at end of input; tool calls
//! still open at turn end get `tool_call_cancelled`, before the run terminal.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::codex::{emit_error, str_field, tool_kind, usage_data, Stream, TurnState};
use super::{Decoder, Out};
use crate::core::event::{CancelReason, EventType};
use crate::core::provider_error::{add_details, ProviderError};

/// Notifications known to carry nothing for the canonical model.
const IGNORED: &[&str] = &[
    "initialized",
    "thread/status/changed",
    "thread/archived",
    "thread/unarchived",
    "thread/closed",
    "thread/name/updated",
    "thread/goal/updated",
    "thread/goal/cleared",
    "skills/changed",
    "hook/started",
    "hook/completed",
    "item/autoApprovalReview/started",
    "item/autoApprovalReview/completed",
    "rawResponseItem/completed",
    "command/exec/outputDelta",
    "process/outputDelta",
    "process/exited",
    "item/commandExecution/terminalInteraction",
    "item/reasoning/summaryPartAdded",
    "serverRequest/resolved",
    "mcpServer/oauthLogin/completed",
    "mcpServer/startupStatus/updated",
    "account/updated",
    "account/rateLimits/updated",
    "account/login/completed",
    "app/list/updated",
    "remoteControl/status/changed",
    "externalAgentConfig/import/completed",
    "fs/changed",
    "model/verification",
    "deprecationNotice",
    "fuzzyFileSearch/sessionUpdated",
    "fuzzyFileSearch/sessionCompleted",
    "windows/worldWritableWarning",
    "windowsSandbox/setupCompleted",
];

/// Decoder state for `codex app-server`.
#[derive(Default)]
pub(crate) struct CodexAppServer {
    turn: TurnState,
    /// The provider's id of the open turn, when known.
    turn_id: Option<String>,
    /// The provider's id of the turn that ended last: its late records are dropped.
    ended_turn: Option<String>,
    /// Turns a resumed thread already finished (its `thread/resume` answer lists them): the
    /// usage the server reports for them at resume opens no turn.
    finished_turns: Vec<String>,
    /// The session's thread (the first one seen).
    thread_id: Option<String>,
    session_started: bool,
    /// `context_compacted` already emitted in this turn (item and legacy notification).
    compacted: bool,
    /// Echoed client requests whose answer we read: (JSON-RPC id, method).
    client_requests: Vec<(String, String)>,
    /// Server requests awaiting the client's answer: (JSON-RPC id, tool call id).
    approvals: Vec<(String, Option<String>)>,
}

/// At most this many echoed client requests are remembered.
const MAX_CLIENT_REQUESTS: usize = 32;

impl Decoder for CodexAppServer {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let params = record.get("params").unwrap_or(&Value::Null);
        out.use_timestamp(
            params
                .get("completedAtMs")
                .or_else(|| params.get("startedAtMs")),
        );
        let has_id = record.get("id").is_some_and(|v| !v.is_null());
        match str_field(record, "method") {
            Some(method) if has_id => self.request(method, record, params, out),
            Some(method) => self.notification(method, params, out),
            None if record.get("result").is_some() || record.get("error").is_some() => {
                self.response(record, out)
            }
            None => out.missing("method"),
        }
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.turn.close_streams(out);
    }
}

/// A JSON-RPC id as text (number or string).
fn id_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Inserts `key: value` when `value` is present and not null.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<&Value>) {
    if let Some(v) = value.filter(|v| !v.is_null()) {
        map.insert(key.into(), v.clone());
    }
}

/// Codex's own name and the HTTP status of a `codexErrorInfo` (`"unauthorized"` or
/// `{"httpConnectionFailed": {"httpStatusCode": 401}}`), or `default`, for
/// [`ProviderError::from_provider`] (where a 401 wins over the variant name: Codex 0.171.0
/// reports a 401 from the model API as `httpConnectionFailed {httpStatusCode: 401}`).
fn error_kind(info: Option<&Value>, default: &str) -> (String, Option<u64>) {
    let (name, status) = match info {
        Some(Value::String(s)) => (Some(s.as_str()), None),
        Some(Value::Object(m)) => match m.iter().next() {
            Some((name, inner)) => (
                Some(name.as_str()),
                inner.get("httpStatusCode").and_then(Value::as_u64),
            ),
            None => (None, None),
        },
        _ => (None, None),
    };
    let name = name.filter(|n| !n.is_empty()).unwrap_or(default);
    (name.to_owned(), status)
}

/// `{codex_error_info, additional_details}` of a `TurnError`, when it has any.
fn error_details(error: &Value) -> Option<Value> {
    let mut d = Map::new();
    put(&mut d, "codex_error_info", error.get("codexErrorInfo"));
    put(&mut d, "additional_details", error.get("additionalDetails"));
    (!d.is_empty()).then_some(Value::Object(d))
}

/// The text parts of a `userMessage`'s `content`, joined.
fn user_text(item: &Value) -> String {
    item.get("content")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| str_field(p, "type") == Some("text"))
                .filter_map(|p| str_field(p, "text"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// `a\n\nb` from `["a", "b"]`.
fn joined(v: Option<&Value>) -> String {
    v.and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .unwrap_or_default()
}

impl CodexAppServer {
    /// False when the record names a thread other than the session's (the first seen).
    fn our_thread(&mut self, thread: Option<&str>) -> bool {
        match (thread, &self.thread_id) {
            (None, _) => true,
            (Some(t), None) => {
                self.thread_id = Some(t.to_owned());
                true
            }
            (Some(t), Some(ours)) => t == ours,
        }
    }

    fn start_turn(&mut self, out: &mut Out<'_>, turn_id: Option<&str>) -> Arc<str> {
        let mut data = Map::new();
        if let Some(t) = turn_id {
            data.insert("provider_turn_id".into(), json!(t));
        }
        self.compacted = false;
        self.approvals.clear();
        self.turn_id = turn_id.map(str::to_owned);
        self.turn.open_run(out, data)
    }

    /// The run a record of provider turn `turn_id` belongs to: the open one, else a new one;
    /// `None` for a late record of the turn that already ended.
    fn run_for(&mut self, out: &mut Out<'_>, turn_id: Option<&str>) -> Option<Arc<str>> {
        let late = turn_id.is_some()
            && (turn_id == self.ended_turn.as_deref()
                || self
                    .finished_turns
                    .iter()
                    .any(|t| Some(t.as_str()) == turn_id))
            && turn_id != self.turn_id.as_deref();
        if late {
            return None;
        }
        if let Some(run) = self.turn.run.clone() {
            if self.turn_id.is_none() {
                self.turn_id = turn_id.map(str::to_owned);
            }
            return Some(run);
        }
        Some(self.start_turn(out, turn_id))
    }

    /// Like [`Self::run_for`] for records that may also be session-level (errors, usage,
    /// reroutes): `None` (no run) when the record names no turn and none is open, or names
    /// the turn that already ended.
    fn run_or_session(&mut self, out: &mut Out<'_>, turn_id: Option<&str>) -> Option<Arc<str>> {
        match turn_id {
            Some(_) => self.run_for(out, turn_id),
            None => self.turn.run.clone(),
        }
    }

    fn end_turn(&mut self, out: &mut Out<'_>, kind: EventType, mut data: Map<String, Value>) {
        if let Some(t) = &self.turn_id {
            data.insert("provider_turn_id".into(), json!(t));
        }
        self.turn.end_run(out, kind, data.into());
        self.ended_turn = self.turn_id.take();
        self.approvals.clear();
    }

    fn session(&mut self, out: &mut Out<'_>, thread: &Value, result: Option<&Value>) {
        let Some(id) = str_field(thread, "id") else {
            return out.missing("thread.id");
        };
        if !self.our_thread(Some(id)) {
            return out.ignore();
        }
        if let Some(turns) = thread.get("turns").and_then(Value::as_array) {
            let finished = turns
                .iter()
                .filter(|t| str_field(t, "status") != Some("inProgress"))
                .filter_map(|t| str_field(t, "id"))
                .map(str::to_owned);
            self.finished_turns.extend(finished);
            let excess = self.finished_turns.len().saturating_sub(64);
            self.finished_turns.drain(..excess);
        }
        if self.session_started {
            return out.ignore();
        }
        self.session_started = true;
        let r = result.unwrap_or(&Value::Null);
        let mut data = Map::new();
        data.insert("provider_session_id".into(), json!(id));
        put(&mut data, "model", r.get("model"));
        put(&mut data, "cwd", r.get("cwd").or_else(|| thread.get("cwd")));
        put(&mut data, "version", thread.get("cliVersion"));
        put(
            &mut data,
            "model_provider",
            r.get("modelProvider")
                .or_else(|| thread.get("modelProvider")),
        );
        put(&mut data, "approval_policy", r.get("approvalPolicy"));
        put(&mut data, "sandbox", r.get("sandbox"));
        put(&mut data, "reasoning_effort", r.get("reasoningEffort"));
        out.emit(EventType::SessionStarted, None, Value::Object(data));
    }

    fn notification(&mut self, method: &str, params: &Value, out: &mut Out<'_>) {
        if method.starts_with("codex/event/")
            || method.starts_with("thread/realtime/")
            || IGNORED.contains(&method)
        {
            if method == "serverRequest/resolved" {
                let id = id_string(params.get("requestId"));
                self.approvals.retain(|(r, _)| Some(r) != id.as_ref());
            }
            return out.ignore();
        }
        if method == "thread/started" {
            return match params.get("thread") {
                Some(thread) => self.session(out, thread, None),
                None => out.missing("params.thread"),
            };
        }
        if !self.our_thread(str_field(params, "threadId")) {
            return out.ignore();
        }
        let turn_id = str_field(params, "turnId");
        match method {
            "turn/started" => {
                let id = params.get("turn").and_then(|t| str_field(t, "id"));
                if self.turn.run.is_some() {
                    if self.turn_id.is_none() || self.turn_id.as_deref() == id {
                        self.turn_id = id.map(str::to_owned).or(self.turn_id.take());
                        return out.ignore();
                    }
                    // A new turn while another never completed: leave that one open.
                    self.turn.abandon(out);
                }
                self.start_turn(out, id);
            }
            "turn/completed" => {
                let Some(turn) = params.get("turn") else {
                    return out.missing("params.turn");
                };
                let id = str_field(turn, "id");
                if self.turn.run.is_none() {
                    if id.is_some() && id == self.ended_turn.as_deref() {
                        return out.ignore();
                    }
                    self.start_turn(out, id);
                }
                if self.turn_id.is_none() {
                    self.turn_id = id.map(str::to_owned);
                }
                let status = str_field(turn, "status").unwrap_or("completed");
                match status {
                    "interrupted" => {
                        let data = json!({ "reason": CancelReason::Interrupted.as_str() });
                        let Value::Object(data) = data else { return };
                        self.end_turn(out, EventType::RunCancelled, data);
                    }
                    "failed" => {
                        let error = turn.get("error").unwrap_or(&Value::Null);
                        let message = str_field(error, "message").unwrap_or("turn failed");
                        let (kind, status) = error_kind(error.get("codexErrorInfo"), "turn_failed");
                        let mut data =
                            ProviderError::from_provider(out.provider(), &kind, status, message)
                                .to_data();
                        if let Some(d) = error_details(error) {
                            add_details(&mut data, d);
                        }
                        self.end_turn(out, EventType::RunFailed, data);
                    }
                    other => {
                        let mut data = Map::new();
                        put(&mut data, "duration_ms", turn.get("durationMs"));
                        if other != "completed" {
                            data.insert("status".into(), json!(other));
                        }
                        self.end_turn(out, EventType::RunCompleted, data);
                    }
                }
            }
            "item/started" | "item/completed" => {
                let Some(item) = params.get("item").filter(|i| i.is_object()) else {
                    return out.missing("params.item");
                };
                self.item(method == "item/completed", item, turn_id, out);
            }
            "item/agentMessage/delta" | "item/plan/delta" => {
                let stream = if method == "item/plan/delta" {
                    Stream::Plan
                } else {
                    Stream::Message
                };
                self.delta(out, stream, params, turn_id, Map::new());
            }
            "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => {
                let mut extra = Map::new();
                put(&mut extra, "summary_index", params.get("summaryIndex"));
                put(&mut extra, "content_index", params.get("contentIndex"));
                self.delta(out, Stream::Reasoning, params, turn_id, extra);
            }
            "item/commandExecution/outputDelta"
            | "item/fileChange/outputDelta"
            | "item/fileChange/patchUpdated"
            | "item/mcpToolCall/progress" => {
                let Some(item_id) = str_field(params, "itemId") else {
                    return out.missing("params.itemId");
                };
                let Some(run) = self.run_for(out, turn_id) else {
                    return out.ignore();
                };
                let mut data = Map::new();
                match method {
                    "item/fileChange/patchUpdated" => {
                        let input = json!({ "changes": params.get("changes").cloned().unwrap_or(json!([])) });
                        self.turn.set_tool_input(item_id, input.clone());
                        data.insert("tool_input".into(), input);
                    }
                    "item/mcpToolCall/progress" => {
                        put(&mut data, "progress", params.get("message"));
                    }
                    _ => put(&mut data, "output_delta", params.get("delta")),
                }
                self.turn.tool_progress(out, &run, item_id, data);
            }
            "thread/tokenUsage/updated" => {
                let usage = params.get("tokenUsage").unwrap_or(&Value::Null);
                let Some(Value::Object(mut data)) = usage.get("total").and_then(usage_data) else {
                    return out.missing("params.tokenUsage.total");
                };
                put(
                    &mut data,
                    "last",
                    usage.get("last").and_then(usage_data).as_ref(),
                );
                put(
                    &mut data,
                    "model_context_window",
                    usage.get("modelContextWindow"),
                );
                // Usage of a turn that is over (a late report, a resumed thread's last turn).
                let Some(run) = self.run_or_session(out, turn_id) else {
                    return out.ignore();
                };
                out.emit(
                    EventType::TokenUsageUpdated,
                    Some(&run),
                    Value::Object(data),
                );
            }
            "turn/diff/updated" => {
                let Some(run) = self.run_for(out, turn_id) else {
                    return out.ignore();
                };
                let mut data = Map::new();
                put(&mut data, "diff", params.get("diff"));
                put(&mut data, "provider_turn_id", params.get("turnId"));
                out.emit(
                    EventType::WorkspaceDiffComputed,
                    Some(&run),
                    Value::Object(data),
                );
            }
            "turn/plan/updated" => {
                let Some(run) = self.run_for(out, turn_id) else {
                    return out.ignore();
                };
                let items: Vec<Value> = params
                    .get("plan")
                    .and_then(Value::as_array)
                    .map(|steps| {
                        steps
                            .iter()
                            .map(|s| {
                                let status = match str_field(s, "status") {
                                    Some("inProgress" | "in_progress") => "in_progress",
                                    Some("completed") => "completed",
                                    _ => "pending",
                                };
                                json!({ "text": str_field(s, "step").unwrap_or(""), "status": status })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut data = Map::new();
                data.insert("items".into(), json!(items));
                put(&mut data, "explanation", params.get("explanation"));
                out.emit(EventType::TodoUpdated, Some(&run), Value::Object(data));
            }
            "error" => {
                let error = params.get("error").unwrap_or(&Value::Null);
                let retry = params.get("willRetry").and_then(Value::as_bool) == Some(true);
                let message = str_field(error, "message").unwrap_or("error");
                let default = if retry { "stream_error" } else { "turn_error" };
                let (kind, status) = error_kind(error.get("codexErrorInfo"), default);
                let mut details = error_details(error)
                    .and_then(|d| d.as_object().cloned())
                    .unwrap_or_default();
                details.insert("will_retry".into(), json!(retry));
                let severity = if retry { "warning" } else { "error" };
                let run = self.run_or_session(out, turn_id);
                emit_error(
                    out,
                    run.as_deref(),
                    (&kind, status),
                    message,
                    severity,
                    Some(Value::Object(details)),
                );
            }
            "warning" | "configWarning" | "guardianWarning" => {
                let message = str_field(params, "message")
                    .or_else(|| str_field(params, "summary"))
                    .unwrap_or("warning");
                let run = self.turn.run.clone();
                let kind = method;
                let details = params
                    .get("details")
                    .filter(|d| !d.is_null())
                    .map(|d| json!({ "details": d }));
                emit_error(
                    out,
                    run.as_deref(),
                    (kind, None),
                    message,
                    "warning",
                    details,
                );
            }
            "model/rerouted" => {
                let mut data = Map::new();
                put(&mut data, "model", params.get("toModel"));
                put(&mut data, "from_model", params.get("fromModel"));
                put(&mut data, "reason", params.get("reason"));
                let run = self.run_or_session(out, turn_id);
                out.emit(EventType::ModelChanged, run.as_deref(), Value::Object(data));
            }
            "thread/compacted" => self.compacted(out, turn_id),
            other => out.unknown(format_args!("method {other:?}")),
        }
    }

    fn compacted(&mut self, out: &mut Out<'_>, turn_id: Option<&str>) {
        if self.compacted {
            return out.ignore();
        }
        let Some(run) = self.run_for(out, turn_id) else {
            return out.ignore();
        };
        self.compacted = true;
        out.emit(EventType::ContextCompacted, Some(&run), json!({}));
    }

    fn delta(
        &mut self,
        out: &mut Out<'_>,
        stream: Stream,
        params: &Value,
        turn_id: Option<&str>,
        extra: Map<String, Value>,
    ) {
        let (Some(id), Some(delta)) = (str_field(params, "itemId"), str_field(params, "delta"))
        else {
            return out.missing("params.itemId/delta");
        };
        let Some(run) = self.run_for(out, turn_id) else {
            return out.ignore();
        };
        self.turn.stream(out, &run, stream, id, delta, extra);
    }

    fn item(&mut self, completed: bool, item: &Value, turn_id: Option<&str>, out: &mut Out<'_>) {
        let Some(ty) = str_field(item, "type") else {
            return out.missing("item.type");
        };
        let Some(id) = str_field(item, "id") else {
            return out.missing("item.id");
        };
        let kind = tool_kind(ty);
        let known = kind.is_some()
            || matches!(
                ty,
                "userMessage"
                    | "agentMessage"
                    | "plan"
                    | "reasoning"
                    | "exitedReviewMode"
                    | "enteredReviewMode"
                    | "contextCompaction"
                    | "hookPrompt"
                    | "subAgentActivity"
                    | "sleep"
            );
        if !known {
            return out.unknown(format_args!("item type {ty:?}"));
        }
        if ty == "contextCompaction" {
            return if completed {
                self.compacted(out, turn_id)
            } else {
                out.ignore()
            };
        }
        let silent = matches!(
            ty,
            "enteredReviewMode" | "hookPrompt" | "subAgentActivity" | "sleep"
        );
        if silent || (!completed && kind.is_none()) {
            return out.ignore();
        }
        let Some(run) = self.run_for(out, turn_id) else {
            return out.ignore();
        };
        if let Some(kind) = kind {
            return if completed {
                self.turn.tool_completed(out, &run, id, kind, item)
            } else {
                self.turn.tool_started(out, &run, id, kind, item)
            };
        }
        match ty {
            "userMessage" => {
                let data = json!({ "message_id": id, "role": "user", "content": user_text(item) });
                out.emit(EventType::MessageSent, Some(&run), data);
            }
            "agentMessage" => {
                let mut extra = Map::new();
                put(&mut extra, "phase", item.get("phase"));
                let text = str_field(item, "text").unwrap_or("");
                self.turn.whole(out, &run, Stream::Message, id, text, extra);
            }
            "plan" => {
                let text = str_field(item, "text").unwrap_or("");
                self.turn
                    .whole(out, &run, Stream::Plan, id, text, Map::new());
            }
            "exitedReviewMode" => {
                let text = str_field(item, "review").unwrap_or("");
                let mut extra = Map::new();
                extra.insert("kind".into(), json!("review"));
                self.turn.whole(out, &run, Stream::Message, id, text, extra);
            }
            _ => {
                // reasoning: the summary when there is one, else the raw content.
                let mut text = joined(item.get("summary"));
                if text.is_empty() {
                    text = joined(item.get("content"));
                }
                if text.is_empty() && !self.turn.is_streaming(Stream::Reasoning, id) {
                    return out.ignore();
                }
                self.turn
                    .whole(out, &run, Stream::Reasoning, id, &text, Map::new());
            }
        }
    }

    fn request(&mut self, method: &str, record: &Value, params: &Value, out: &mut Out<'_>) {
        let Some(request_id) = id_string(record.get("id")) else {
            return out.missing("id");
        };
        let item_id = str_field(params, "itemId").or_else(|| str_field(params, "callId"));
        let mut input = Map::new();
        let mut extra = Map::new();
        let name = match method {
            "item/commandExecution/requestApproval" | "execCommandApproval" => {
                put(&mut input, "command", params.get("command"));
                put(&mut input, "cwd", params.get("cwd"));
                put(&mut extra, "reason", params.get("reason"));
                put(&mut extra, "approval_id", params.get("approvalId"));
                "shell"
            }
            "item/fileChange/requestApproval" | "applyPatchApproval" => {
                let changes = params
                    .get("fileChanges")
                    .cloned()
                    .map(|c| json!({ "changes": c }))
                    .or_else(|| item_id.and_then(|i| self.turn.tool_input(i)).cloned())
                    .unwrap_or(json!({ "changes": [] }));
                if let Value::Object(m) = changes {
                    input = m;
                }
                put(&mut extra, "reason", params.get("reason"));
                put(&mut extra, "grant_root", params.get("grantRoot"));
                "apply_patch"
            }
            "item/permissions/requestApproval" => {
                put(&mut input, "permissions", params.get("permissions"));
                put(&mut extra, "reason", params.get("reason"));
                "request_permissions"
            }
            "item/tool/requestUserInput" => {
                put(&mut input, "questions", params.get("questions"));
                "request_user_input"
            }
            "mcpServer/elicitation/request" => {
                if let Some(p) = params.as_object() {
                    for (k, v) in p {
                        if !matches!(k.as_str(), "threadId" | "turnId") {
                            input.insert(k.clone(), v.clone());
                        }
                    }
                }
                "mcp_elicitation"
            }
            "item/tool/call" | "account/chatgptAuthTokens/refresh" | "attestation/generate" => {
                return out.ignore();
            }
            m if m.starts_with("item/") => {
                return out.unknown(format_args!("request method {m:?}"));
            }
            m => {
                // A client request echoed in the capture: remember the ones whose answer
                // we read.
                if matches!(
                    m,
                    "thread/start" | "thread/resume" | "thread/fork" | "turn/start"
                ) {
                    if self.client_requests.len() >= MAX_CLIENT_REQUESTS {
                        self.client_requests.remove(0);
                    }
                    self.client_requests.push((request_id, m.to_owned()));
                }
                return out.ignore();
            }
        };
        let thread = str_field(params, "threadId").or_else(|| str_field(params, "conversationId"));
        if !self.our_thread(thread) {
            return out.ignore();
        }
        let run = match str_field(params, "turnId") {
            Some(t) => match self.run_for(out, Some(t)) {
                Some(r) => Some(r),
                None => return out.ignore(),
            },
            None => self.turn.run.clone(),
        };
        let mut data = Map::new();
        data.insert("request_id".into(), json!(request_id));
        if let Some(i) = item_id {
            data.insert("tool_call_id".into(), json!(i));
        }
        data.insert("tool_name".into(), json!(name));
        data.insert("tool_input".into(), Value::Object(input));
        data.extend(extra);
        out.emit_full(
            EventType::ToolApprovalRequested,
            run.as_deref(),
            Value::Object(data),
            item_id,
            Map::new(),
        );
        self.approvals.retain(|(r, _)| *r != request_id);
        self.approvals
            .push((request_id, item_id.map(str::to_owned)));
    }

    fn response(&mut self, record: &Value, out: &mut Out<'_>) {
        let id = id_string(record.get("id"));
        let result = record.get("result").filter(|r| !r.is_null());
        let method = id.as_ref().and_then(|id| {
            let i = self.client_requests.iter().position(|(r, _)| r == id)?;
            Some(self.client_requests.remove(i).1)
        });
        // The client's answer to a server request (in captures holding both directions).
        if method.is_none() {
            if let Some(pos) = id
                .as_ref()
                .and_then(|id| self.approvals.iter().position(|(r, _)| r == id))
            {
                let answer = result.filter(|r| {
                    ["decision", "permissions", "answers", "action"]
                        .iter()
                        .any(|k| r.get(*k).is_some())
                });
                if answer.is_some() || record.get("error").is_some() {
                    let (request_id, tool_call_id) = self.approvals.remove(pos);
                    return self.answer(out, request_id, tool_call_id, answer);
                }
            }
        }
        if let Some(error) = record.get("error").filter(|e| !e.is_null()) {
            let message = str_field(error, "message").unwrap_or("JSON-RPC error");
            let mut details = Map::new();
            put(&mut details, "code", error.get("code"));
            put(&mut details, "data", error.get("data"));
            if let Some(id) = &id {
                details.insert("request_id".into(), json!(id));
            }
            if let Some(m) = &method {
                details.insert("method".into(), json!(m));
            }
            if method.as_deref() == Some("turn/start") && self.turn.run.is_some() {
                let mut data =
                    ProviderError::from_provider(out.provider(), "rpc_error", None, message)
                        .to_data();
                add_details(&mut data, Value::Object(details));
                return self.end_turn(out, EventType::RunFailed, data);
            }
            let run = self.turn.run.clone();
            return emit_error(
                out,
                run.as_deref(),
                ("rpc_error", None),
                message,
                "error",
                Some(Value::Object(details)),
            );
        }
        match result
            .and_then(|r| r.get("thread"))
            .filter(|t| t.is_object())
        {
            Some(thread) => self.session(out, thread, result),
            None => out.ignore(),
        }
    }

    fn answer(
        &mut self,
        out: &mut Out<'_>,
        request_id: String,
        tool_call_id: Option<String>,
        answer: Option<&Value>,
    ) {
        let decision = answer.and_then(|a| a.get("decision").or_else(|| a.get("action")));
        let name = match decision {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(Value::Object(m)) => m.keys().next().map(String::as_str),
            _ => None,
        };
        let granted = match name {
            Some(n) => !matches!(
                n,
                "decline" | "cancel" | "denied" | "abort" | "declined" | "cancelled"
            ),
            None => answer.is_some(),
        };
        let mut data = Map::new();
        data.insert("request_id".into(), json!(request_id));
        if let Some(t) = &tool_call_id {
            data.insert("tool_call_id".into(), json!(t));
        }
        put(&mut data, "decision", decision);
        let kind = if granted {
            EventType::ToolApprovalGranted
        } else {
            EventType::ToolApprovalDenied
        };
        let run = self.turn.run.clone();
        out.emit_full(
            kind,
            run.as_deref(),
            Value::Object(data),
            tool_call_id.as_deref(),
            Map::new(),
        );
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::normalize::{normalize, Config, Format};
    use crate::core::time::Timestamp;

    use crate::core::normalize::tests::check;

    fn run(input: &str) -> crate::core::normalize::Normalized {
        normalize(
            Some(Format::CodexAppServer),
            Config::new("s1"),
            input.as_bytes(),
            Timestamp::EPOCH,
        )
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_resumed_threads_usage_for_its_finished_turns_opens_no_turn() {
        // Real 0.171.0 output after `thread/resume`: the answer lists the thread's turns, then
        // the server reports the last finished turn's usage before any new turn starts.
        check(
            Format::CodexAppServer,
            r#"{"id":2,"result":{"thread":{"id":"thr_1","cliVersion":"0.171.0","turns":[{"id":"turn_old","status":"completed"}]},"model":"gpt-5.5","cwd":"/w"}}
{"method":"thread/tokenUsage/updated","params":{"threadId":"thr_1","turnId":"turn_old","tokenUsage":{"total":{"totalTokens":45,"inputTokens":42,"outputTokens":3},"last":{"totalTokens":45,"inputTokens":42,"outputTokens":3},"modelContextWindow":272000}}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_new","items":[],"status":"inProgress"}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_new","items":[],"status":"completed"}}}
"#,
            expect![[r#"
                1 -- session_started model="gpt-5.5"
                2 t1 run_started
                3 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_streamed_turn() {
        check(
            Format::CodexAppServer,
            r#"{"id":0,"result":{"userAgent":"codex_cli_rs/0.171.0"}}
{"id":1,"result":{"thread":{"id":"thr_1","cliVersion":"0.171.0","cwd":"/w"},"model":"gpt-5.5","cwd":"/w","approvalPolicy":"never","sandbox":{"type":"dangerFullAccess"}}}
{"method":"thread/started","params":{"thread":{"id":"thr_1","cliVersion":"0.171.0"}}}
{"id":2,"result":{"turn":{"id":"turn_1","status":"inProgress","items":[],"error":null}}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"inProgress","items":[]}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"userMessage","id":"u1","content":[{"type":"text","text":"Say hi"}]},"completedAtMs":1767225600000}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"reasoning","id":"r1","summary":[],"content":[]}}}
{"method":"item/reasoning/summaryTextDelta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"r1","delta":"Greeting","summaryIndex":0}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"reasoning","id":"r1","summary":["Greeting"],"content":[]}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"agentMessage","id":"m1","text":""}}}
{"method":"item/agentMessage/delta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"m1","delta":"Hi"}}
{"method":"codex/event/agent_message_delta","params":{"id":"0","msg":{"type":"agent_message_delta","delta":"Hi"},"conversationId":"thr_1"}}
{"method":"item/agentMessage/delta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"m1","delta":" there"}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"agentMessage","id":"m1","text":"Hi there","phase":"final_answer"}}}
{"method":"thread/tokenUsage/updated","params":{"threadId":"thr_1","turnId":"turn_1","tokenUsage":{"total":{"totalTokens":120,"inputTokens":100,"cachedInputTokens":40,"outputTokens":20,"reasoningOutputTokens":8},"last":{"totalTokens":120,"inputTokens":100,"cachedInputTokens":40,"outputTokens":20,"reasoningOutputTokens":8},"modelContextWindow":272000}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"completed","items":[],"error":null,"durationMs":1500}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"agentMessage","id":"m9","text":"late"}}}
"#,
            expect![[r#"
                1 -- session_started model="gpt-5.5"
                2 t1 run_started
                3 t1 message_sent role="user" content="Say hi"
                4 t1 reasoning_streamed delta="Greeting"
                5 t1 reasoning_received content="Greeting"
                6 t1 message_streamed role="assistant" delta="Hi"
                7 t1 message_streamed role="assistant" delta=" there"
                8 t1 message_received role="assistant" content="Hi there"
                9 t1 token_usage_updated input_tokens=100 output_tokens=20
                10 t1 run_completed
            "#]],
        );
        let out = run(
            r#"{"id":1,"result":{"thread":{"id":"thr_1","cliVersion":"0.171.0","cwd":"/w"},"model":"gpt-5.5","approvalPolicy":"never"}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"method":"item/agentMessage/delta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"m1","delta":"Hi"}}
{"method":"thread/tokenUsage/updated","params":{"threadId":"thr_1","turnId":"turn_1","tokenUsage":{"total":{"inputTokens":100,"cachedInputTokens":40,"outputTokens":20},"last":{"inputTokens":7,"outputTokens":2},"modelContextWindow":272000}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"completed","durationMs":1500}}}"#,
        );
        let ev = &out.events;
        let s = ev[0].data();
        assert_eq!(
            (
                s["provider_session_id"].as_str(),
                s["cwd"].as_str(),
                s["version"].as_str()
            ),
            (Some("thr_1"), Some("/w"), Some("0.171.0"))
        );
        assert_eq!(s["approval_policy"], "never");
        assert_eq!(ev[1].data_str("provider_turn_id"), Some("turn_1"));
        assert_eq!(ev[2].data_str("message_id"), Some("m1"));
        assert_eq!(ev[3].data()["cache_read_input_tokens"], 40);
        assert_eq!(ev[3].data()["last"]["input_tokens"], 7);
        assert_eq!(ev[3].data()["model_context_window"], 272000);
        // The streamed message never completed: closed as discarded before the terminal.
        assert_eq!(ev[4].kind().as_str(), "message_received");
        assert_eq!(ev[4].data()["discarded"], true);
        assert_eq!(ev[5].data()["duration_ms"], 1500);
        assert_eq!(ev[5].data_str("provider_turn_id"), Some("turn_1"));
        assert_eq!(out.stats.ignored, 0);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn tools_with_approvals_and_answers() {
        check(
            Format::CodexAppServer,
            r#"{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"commandExecution","id":"call_1","command":"ls","cwd":"/w","processId":null,"source":"agent","status":"inProgress","commandActions":[],"aggregatedOutput":null,"exitCode":null,"durationMs":null},"startedAtMs":1767225600000}}
{"id":0,"method":"item/commandExecution/requestApproval","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_1","startedAtMs":1767225600100,"reason":"needs approval","command":"ls","cwd":"/w"}}
{"id":0,"result":{"decision":"accept"}}
{"method":"serverRequest/resolved","params":{"threadId":"thr_1","requestId":0}}
{"method":"item/commandExecution/outputDelta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_1","delta":"a.txt\n"}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"commandExecution","id":"call_1","command":"ls","cwd":"/w","status":"completed","commandActions":[],"aggregatedOutput":"a.txt\n","exitCode":0,"durationMs":12}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"fileChange","id":"call_2","changes":[{"path":"a.txt","kind":{"type":"update","move_path":null},"diff":"@@ -1 +1 @@"}],"status":"inProgress"}}}
{"id":"1","method":"item/fileChange/requestApproval","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_2","startedAtMs":1767225600200,"reason":null,"grantRoot":null}}
{"id":"1","result":{"decision":"decline"}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"fileChange","id":"call_2","changes":[{"path":"a.txt","kind":{"type":"update","move_path":null},"diff":"@@ -1 +1 @@"}],"status":"declined"}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"mcpToolCall","id":"call_3","server":"docs","tool":"search","status":"inProgress","arguments":{"q":"x"},"result":null,"error":null}}}
{"method":"item/mcpToolCall/progress","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_3","message":"searching"}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"mcpToolCall","id":"call_3","server":"docs","tool":"search","status":"completed","arguments":{"q":"x"},"result":{"content":[{"type":"text","text":"2 hits"}],"structuredContent":null},"error":null,"durationMs":30}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"webSearch","id":"ws_1","query":"rust","action":{"type":"search","query":"rust","queries":null}}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"dynamicToolCall","id":"call_4","namespace":null,"tool":"lookup","arguments":{"id":"A-1"},"status":"inProgress","contentItems":null,"success":null}}}
{"id":7,"method":"item/tool/call","params":{"threadId":"thr_1","turnId":"turn_1","callId":"call_4","tool":"lookup","arguments":{"id":"A-1"}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"dynamicToolCall","id":"call_4","namespace":null,"tool":"lookup","arguments":{"id":"A-1"},"status":"failed","contentItems":[{"type":"inputText","text":"not found"}],"success":false}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"commandExecution","id":"call_5","command":"sleep 60","cwd":"/w","status":"inProgress","commandActions":[]}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"interrupted","items":[],"error":null}}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 tool_call_started tool_name="shell" tool_call_id="call_1" tool_input={"command":"ls","cwd":"/w"}
                3 t1 tool_approval_requested tool_name="shell" tool_call_id="call_1" tool_input={"command":"ls","cwd":"/w"} reason="needs approval" request_id="0"
                4 t1 tool_approval_granted tool_call_id="call_1" request_id="0"
                5 t1 tool_call_updated tool_call_id="call_1"
                6 t1 tool_call_completed tool_name="shell" tool_call_id="call_1" tool_input={"command":"ls","cwd":"/w"} tool_output="a.txt\n"
                7 t1 tool_call_started tool_name="apply_patch" tool_call_id="call_2" tool_input={"changes":[{"diff":"@@ -1 +1 @@","kind":{"move_path":null,"…
                8 t1 tool_approval_requested tool_name="apply_patch" tool_call_id="call_2" tool_input={"changes":[{"diff":"@@ -1 +1 @@","kind":{"move_path":null,"… request_id="1"
                9 t1 tool_approval_denied tool_call_id="call_2" request_id="1"
                10 t1 tool_call_failed tool_name="apply_patch" tool_call_id="call_2" tool_input={"changes":[{"diff":"@@ -1 +1 @@","kind":{"move_path":null,"… error="apply_patch declined" status="declined"
                11 t1 tool_call_started tool_name="docs.search" tool_call_id="call_3" tool_input={"q":"x"}
                12 t1 tool_call_updated tool_call_id="call_3"
                13 t1 tool_call_completed tool_name="docs.search" tool_call_id="call_3" tool_input={"q":"x"} tool_output="2 hits"
                14 t1 tool_call_started tool_name="web_search" tool_call_id="ws_1" tool_input={"action":{"queries":null,"query":"rust","type":"search"},"q…
                15 t1 tool_call_completed tool_name="web_search" tool_call_id="ws_1" tool_input={"action":{"queries":null,"query":"rust","type":"search"},"q…
                16 t1 tool_call_started tool_name="lookup" tool_call_id="call_4" tool_input={"id":"A-1"}
                17 t1 tool_call_failed tool_name="lookup" tool_call_id="call_4" tool_input={"id":"A-1"} error="not found" status="failed"
                18 t1 tool_call_started tool_name="shell" tool_call_id="call_5" tool_input={"command":"sleep 60","cwd":"/w"}
                19 t1 tool_call_cancelled tool_name="shell" tool_call_id="call_5" tool_input={"command":"sleep 60","cwd":"/w"} reason="run_cancelled"
                20 t1 run_cancelled reason="interrupted"
            "#]],
        );
        let out = run(
            r#"{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"commandExecution","id":"call_1","command":"ls","cwd":"/w","status":"inProgress","commandActions":[]}}}
{"id":0,"method":"item/commandExecution/requestApproval","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_1","startedAtMs":1767225600100,"command":"ls","cwd":"/w"}}
{"id":0,"result":{"decision":{"acceptWithExecpolicyAmendment":{"execpolicy_amendment":["ls"]}}}}
{"method":"item/commandExecution/outputDelta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_1","delta":"a\n"}}
{"method":"item/commandExecution/outputDelta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"nope","delta":"b\n"}}"#,
        );
        let ev = &out.events;
        assert_eq!(ev[2].correlation_id(), Some("call_1"));
        assert_eq!(ev[2].timestamp().to_string(), "2026-01-01T00:00:00.100Z");
        assert_eq!(ev[3].kind().as_str(), "tool_approval_granted");
        assert_eq!(ev[4].data_str("output_delta"), Some("a\n"));
        assert_eq!(ev.len(), 5);
        assert_eq!(out.stats.ignored, 1);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn failed_turns_errors_and_warnings() {
        check(
            Format::CodexAppServer,
            r#"{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"method":"error","params":{"threadId":"thr_1","turnId":"turn_1","willRetry":true,"error":{"message":"Reconnecting... 1/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":null}},"additionalDetails":"idle timeout"}}}
{"method":"error","params":{"threadId":"thr_1","turnId":"turn_1","willRetry":false,"error":{"message":"You've hit your usage limit.","codexErrorInfo":"usageLimitExceeded"}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"failed","items":[],"error":{"message":"You've hit your usage limit.","codexErrorInfo":"usageLimitExceeded"}}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"failed","items":[],"error":{"message":"dup"}}}}
{"method":"warning","params":{"threadId":null,"message":"Under-development features enabled"}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_2","status":"failed","error":{"message":"401","codexErrorInfo":"unauthorized"}}}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_3"}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_3","status":"failed","error":{"message":"boom","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":500}}}}}}
{"method":"model/rerouted","params":{"threadId":"thr_1","turnId":"turn_3","fromModel":"a","toModel":"b","reason":"highRiskCyberActivity"}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_4"}}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_4","status":"failed","error":{"message":"unexpected status 401 Unauthorized: invalid x-api-key","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}},"additionalDetails":null}}}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 error_occurred error_message="Reconnecting... 1/5" provider_error.kind="connection_error"
                3 t1 error_occurred error_message="You've hit your usage limit." provider_error.kind="rate_limit"
                4 t1 run_failed error_message="You've hit your usage limit." provider_error.kind="rate_limit"
                5 -- error_occurred error_message="Under-development features enabled" provider_error.kind="agent_error"
                6 t2 run_started
                7 t2 run_failed error_message="401" provider_error.kind="authentication_failed"
                8 t3 run_started
                9 t3 run_failed error_message="boom" provider_error.kind="connection_error"
                10 -- model_changed reason="highRiskCyberActivity" model="b"
                11 t4 run_started
                12 t4 run_failed error_message="unexpected status 401 Unauthorized: invalid x-api-key" provider_error.kind="authentication_failed"
            "#]],
        );
        let out = run(
            r#"{"method":"error","params":{"threadId":"thr_1","turnId":"turn_1","willRetry":true,"error":{"message":"Reconnecting... 1/5","additionalDetails":"idle timeout"}}}"#,
        );
        let d = out.events[1].data();
        assert_eq!(d["severity"], "warning");
        assert_eq!(d["provider_error"]["kind"], "connection_error");
        assert_eq!(d["details"]["kind"], "stream_error");
        assert_eq!(d["details"]["will_retry"], true);
        assert_eq!(d["details"]["additional_details"], "idle timeout");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn plans_diffs_compaction_and_review() {
        check(
            Format::CodexAppServer,
            r##"{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"method":"turn/plan/updated","params":{"threadId":"thr_1","turnId":"turn_1","explanation":null,"plan":[{"step":"Read","status":"completed"},{"step":"Edit","status":"inProgress"},{"step":"Test","status":"pending"}]}}
{"method":"turn/diff/updated","params":{"threadId":"thr_1","turnId":"turn_1","diff":"diff --git a/x b/x\n"}}
{"method":"item/plan/delta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"p1","delta":"Plan:"}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"plan","id":"p1","text":"Plan:\n1. x"}}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"contextCompaction","id":"c1"}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"contextCompaction","id":"c1"}}}
{"method":"thread/compacted","params":{"threadId":"thr_1","turnId":"turn_1"}}
{"method":"item/started","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"enteredReviewMode","id":"turn_1","review":"current changes"}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"exitedReviewMode","id":"turn_1","review":"Looks fine."}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"hologram","id":"h1"}}}
{"method":"item/completed","params":{"threadId":"thr_1","turnId":"turn_1","item":{"type":"reasoning","id":"r1","summary":[],"content":[]}}}
{"method":"teleport/started","params":{}}
{"method":"turn/completed","params":{"threadId":"thr_1","turn":{"id":"turn_1","status":"completed"}}}
"##,
            expect![[r#"
                1 t1 run_started
                2 t1 todo_updated items=[3 items]
                3 t1 workspace_diff_computed
                4 t1 message_streamed role="assistant" delta="Plan:"
                5 t1 message_received role="assistant" content="Plan:\n1. x"
                6 t1 context_compacted
                7 t1 message_received role="assistant" content="Looks fine."
                8 t1 run_completed
                ! line 11: unknown_type: unknown item type "hologram"
                ! line 13: unknown_type: unknown method "teleport/started"
            "#]],
        );
        let out = run(
            r#"{"method":"turn/plan/updated","params":{"threadId":"thr_1","turnId":"turn_1","explanation":"why","plan":[{"step":"Read","status":"completed"},{"step":"Edit","status":"inProgress"}]}}
{"method":"turn/diff/updated","params":{"threadId":"thr_1","turnId":"turn_1","diff":"D"}}"#,
        );
        let ev = &out.events;
        assert_eq!(
            ev[1].data()["items"],
            serde_json::json!([{"text":"Read","status":"completed"},{"text":"Edit","status":"in_progress"}])
        );
        assert_eq!(ev[1].data_str("explanation"), Some("why"));
        assert_eq!(ev[2].data_str("diff"), Some("D"));
        assert_eq!(ev[2].data_str("provider_turn_id"), Some("turn_1"));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn other_threads_legacy_events_and_rpc_errors() {
        check(
            Format::CodexAppServer,
            r#"{"method":"thread/started","params":{"thread":{"id":"thr_1"}}}
{"id":3,"result":{"thread":{"id":"thr_1"},"model":"late"}}
{"method":"thread/started","params":{"thread":{"id":"thr_sub"}}}
{"method":"turn/started","params":{"threadId":"thr_sub","turn":{"id":"turn_x"}}}
{"method":"codex/event/task_started","params":{"id":"0","msg":{"type":"task_started"},"conversationId":"thr_1"}}
{"method":"thread/status/changed","params":{"threadId":"thr_1","status":{"type":"active","activeFlags":[]}}}
{"id":5,"error":{"code":-32600,"message":"Not initialized"}}
{"jsonrpc":"2.0","id":9,"method":"turn/start","params":{"threadId":"thr_1","input":[{"type":"text","text":"hi"}]}}
{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"id":9,"error":{"code":-32603,"message":"turn failed to start"}}
{"id":10,"method":"item/unheardOf/request","params":{}}
{"foo":1}
"#,
            expect![[r#"
                1 -- session_started
                2 -- error_occurred error_message="Not initialized" provider_error.kind="protocol_error"
                3 t1 run_started
                4 t1 run_failed error_message="turn failed to start" provider_error.kind="protocol_error"
                ! line 11: unknown_type: unknown request method "item/unheardOf/request"
                ! line 12: missing_field: missing field `method`
            "#]],
        );
        let out = run(
            r#"{"method":"thread/started","params":{"thread":{"id":"thr_1"}}}
{"method":"thread/started","params":{"thread":{"id":"thr_sub"}}}
{"method":"codex/event/task_started","params":{"id":"0","msg":{"type":"task_started"}}}"#,
        );
        assert_eq!(out.stats.ignored, 2);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn user_input_elicitation_and_permission_requests() {
        check(
            Format::CodexAppServer,
            r#"{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"id":4,"method":"item/tool/requestUserInput","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_7","questions":[{"id":"q1","header":"H","question":"Which?","options":null}]}}
{"id":4,"result":{"answers":{"q1":{"answers":["A"]}}}}
{"id":5,"method":"item/permissions/requestApproval","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"call_8","reason":"write","permissions":{"fileSystem":{"write":["/w"]}}}}
{"id":6,"method":"mcpServer/elicitation/request","params":{"threadId":"thr_1","turnId":null,"serverName":"docs","mode":"form","message":"Allow?","requestedSchema":{"type":"object"}}}
{"id":6,"result":{"action":"decline","content":null}}
{"id":7,"method":"execCommandApproval","params":{"conversationId":"thr_1","callId":"call_9","command":["echo","hi"],"cwd":"/w","reason":null}}
"#,
            expect![[r#"
                  1 t1 run_started
                  2 t1 tool_approval_requested tool_name="request_user_input" tool_call_id="call_7" tool_input={"questions":[{"header":"H","id":"q1","options":null,"questi… request_id="4"
                  3 t1 tool_approval_granted tool_call_id="call_7" request_id="4"
                  4 t1 tool_approval_requested tool_name="request_permissions" tool_call_id="call_8" tool_input={"permissions":{"fileSystem":{"write":["/w"]}}} reason="write" request_id="5"
                  5 t1 tool_approval_requested tool_name="mcp_elicitation" tool_input={"message":"Allow?","mode":"form","requestedSchema":{"type":… request_id="6"
                  6 t1 tool_approval_denied request_id="6"
                  7 t1 tool_approval_requested tool_name="shell" tool_call_id="call_9" tool_input={"command":["echo","hi"],"cwd":"/w"} request_id="7"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn abandoned_streams_are_closed_at_end_of_input() {
        check(
            Format::CodexAppServer,
            r#"{"method":"turn/started","params":{"threadId":"thr_1","turn":{"id":"turn_1"}}}
{"method":"item/reasoning/textDelta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"r1","delta":"hmm","contentIndex":0}}
{"method":"item/agentMessage/delta","params":{"threadId":"thr_1","turnId":"turn_1","itemId":"m1","delta":"Hal"}}
"#,
            expect![[r#"
                1 t1 run_started
                2 t1 reasoning_streamed delta="hmm"
                3 t1 message_streamed role="assistant" delta="Hal"
                4 t1 reasoning_received content="" discarded=true
                5 t1 message_received role="assistant" content="" discarded=true
            "#]],
        );
    }
}
