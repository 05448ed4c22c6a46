//! `codex app-server`: JSON-RPC 2.0 as JSON Lines on stdio (the server leaves out the
//! `"jsonrpc"` header, and so do we).
//!
//! Handshake, sent at start: `initialize {clientInfo}` → `initialized` (a notification) →
//! `thread/start {cwd, approvalPolicy, sandbox}` (or `thread/resume {threadId}`). The thread
//! id comes back in that request's result; prompts given before it arrives wait, then go out
//! as `turn/start {threadId, input: [{type: "text", text}]}`. The current turn's id (from the
//! `turn/start` result or `turn/started`) is what `turn/interrupt {threadId, turnId}` needs;
//! an interrupt asked for before it is known goes out when it is.
//!
//! Approvals are server → client requests. `item/commandExecution/requestApproval` and
//! `item/fileChange/requestApproval` are answered `{decision: "accept" | "decline"}`; the
//! legacy `execCommandApproval` / `applyPatchApproval` `{decision: "approved" | "denied"}`.
//! Any other server request (user input, permissions, MCP elicitation) is answered with a
//! JSON-RPC error, so the turn is never left waiting on a question we cannot put to the user.
//! The answer carries the request's own JSON-RPC id (number or string), remembered here by
//! its string form, which is the `request_id` of the `tool_approval_requested` event.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::process::Command;

use super::{line, Adapter, Capabilities, Mode, Thinking};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// Server requests answered with a decision, and the words each one takes.
const DECISIONS: &[(&str, &str, &str)] = &[
    ("item/commandExecution/requestApproval", "accept", "decline"),
    ("item/fileChange/requestApproval", "accept", "decline"),
    ("execCommandApproval", "approved", "denied"),
    ("applyPatchApproval", "approved", "denied"),
];

/// Codex's approval policies (`AskForApproval`), the modes of a Codex session.
const APPROVAL_POLICIES: &[(&str, &str, &str)] = &[
    (
        "untrusted",
        "Untrusted",
        "Asks before anything but known read-only commands",
    ),
    (
        "on-request",
        "On request",
        "The model asks when it wants to leave the sandbox",
    ),
    (
        "never",
        "Never",
        "Never asks; failures go back to the model",
    ),
];

/// A `codex app-server` session: one thread, many turns.
pub struct CodexAppServer {
    program: PathBuf,
    /// `untrusted`, `on-request` or `never`.
    approval_policy: String,
    /// `read-only`, `workspace-write` or `danger-full-access`.
    sandbox: String,
    /// A thread to resume instead of starting one.
    resume: Option<String>,
    next_id: u64,
    /// The id of our `thread/start` (or `thread/resume`) request.
    thread_request: Option<u64>,
    thread: Option<String>,
    /// Our `turn/start` request ids, until answered.
    turn_requests: Vec<u64>,
    turn: Option<String>,
    /// Prompts waiting for the thread id.
    waiting: Vec<String>,
    interrupt_waiting: bool,
    /// Open server requests: string id → (the id as sent, method).
    requests: HashMap<String, (Value, String)>,
    /// Overrides for the next `turn/start` (they stick to the thread from then on).
    next_turn: serde_json::Map<String, Value>,
}

impl CodexAppServer {
    /// `codex app-server` at `program`. The CLI inherits the companion's environment
    /// (`CODEX_HOME` and its `config.toml` choose the model provider).
    pub fn new(program: PathBuf, approval_policy: &str, sandbox: &str) -> CodexAppServer {
        CodexAppServer {
            program,
            approval_policy: approval_policy.to_owned(),
            sandbox: sandbox.to_owned(),
            resume: None,
            next_id: 0,
            thread_request: None,
            thread: None,
            turn_requests: Vec::new(),
            turn: None,
            waiting: Vec::new(),
            interrupt_waiting: false,
            requests: HashMap::new(),
            next_turn: serde_json::Map::new(),
        }
    }

    /// Resumes the thread `id` (the session's `provider_session_id`) instead of starting one.
    pub fn resuming(mut self, id: &str) -> CodexAppServer {
        self.resume = Some(id.to_owned());
        self
    }

    fn request(&mut self, method: &str, params: Value) -> (u64, Vec<u8>) {
        self.next_id += 1;
        let id = self.next_id;
        (
            id,
            line(json!({"method": method, "id": id, "params": params})),
        )
    }

    fn turn_start(&mut self, thread: &str, text: &str) -> Vec<u8> {
        let mut params = json!({"threadId": thread, "input": [{"type": "text", "text": text}]});
        params
            .as_object_mut()
            .expect("an object")
            .extend(std::mem::take(&mut self.next_turn));
        let (id, bytes) = self.request("turn/start", params);
        self.turn_requests.push(id);
        bytes
    }

    fn turn_interrupt(&mut self, thread: &str, turn: &str) -> Vec<u8> {
        let params = json!({"threadId": thread, "turnId": turn});
        self.request("turn/interrupt", params).1
    }

    /// Sends what waited for the thread or the turn id, now that they may be known.
    fn flush(&mut self) -> Vec<u8> {
        let Some(thread) = self.thread.clone() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for text in std::mem::take(&mut self.waiting) {
            out.extend(self.turn_start(&thread, &text));
        }
        if self.interrupt_waiting {
            if let Some(turn) = self.turn.clone() {
                self.interrupt_waiting = false;
                out.extend(self.turn_interrupt(&thread, &turn));
            }
        }
        out
    }
}

fn id_string(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Adapter for CodexAppServer {
    fn provider(&self) -> Provider {
        Provider::Codex
    }

    fn format(&self) -> Format {
        Format::CodexAppServer
    }

    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("app-server").current_dir(cwd);
        cmd
    }

    fn start(&mut self, cwd: &Path) -> Vec<u8> {
        let client = json!({"clientInfo": {"name": "agentwire", "title": "agentwire",
                                           "version": env!("CARGO_PKG_VERSION")}});
        let mut out = self.request("initialize", client).1;
        out.extend(line(json!({"method": "initialized"})));
        let (method, params) = match &self.resume {
            Some(thread) => (
                "thread/resume",
                json!({"threadId": thread, "cwd": cwd, "approvalPolicy": self.approval_policy,
                       "sandbox": self.sandbox}),
            ),
            None => (
                "thread/start",
                json!({"cwd": cwd, "approvalPolicy": self.approval_policy,
                       "sandbox": self.sandbox}),
            ),
        };
        let (id, bytes) = self.request(method, params);
        self.thread_request = Some(id);
        out.extend(bytes);
        out
    }

    fn observe(&mut self, line: &[u8]) -> Vec<u8> {
        let Ok(Value::Object(msg)) = serde_json::from_slice::<Value>(line) else {
            return Vec::new();
        };
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id");
        match (method, id) {
            // A server request: remember how to answer it.
            (Some(method), Some(id)) => {
                if let Some(key) = id_string(id) {
                    let known = DECISIONS.iter().any(|(m, _, _)| *m == method);
                    if !known {
                        let message = format!("agentwire cannot answer {method} requests");
                        return super::line(json!({"id": id,
                            "error": {"code": -32601, "message": message}}));
                    }
                    self.requests.insert(key, (id.clone(), method.to_owned()));
                }
                Vec::new()
            }
            // A notification.
            (Some(method), None) => {
                let params = msg.get("params");
                let turn_id = params
                    .and_then(|p| p.get("turn"))
                    .and_then(|t| t.get("id"))
                    .and_then(Value::as_str);
                match method {
                    "turn/started" => {
                        self.turn = turn_id.map(str::to_owned);
                        self.flush()
                    }
                    "turn/completed" => {
                        if self.turn.as_deref() == turn_id {
                            self.turn = None;
                        }
                        self.interrupt_waiting = false;
                        Vec::new()
                    }
                    "serverRequest/resolved" => {
                        let resolved = params.and_then(|p| p.get("requestId"));
                        if let Some(key) = resolved.and_then(id_string) {
                            self.requests.remove(&key);
                        }
                        Vec::new()
                    }
                    _ => Vec::new(),
                }
            }
            // A response to one of our requests.
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else {
                    return Vec::new();
                };
                let result = msg.get("result");
                if Some(id) == self.thread_request {
                    let thread = result
                        .and_then(|r| r.get("thread"))
                        .and_then(|t| t.get("id"))
                        .and_then(Value::as_str);
                    self.thread = thread.map(str::to_owned);
                } else if let Some(pos) = self.turn_requests.iter().position(|&r| r == id) {
                    self.turn_requests.remove(pos);
                    let turn = result
                        .and_then(|r| r.get("turn"))
                        .and_then(|t| t.get("id"))
                        .and_then(Value::as_str);
                    if let Some(turn) = turn {
                        self.turn = Some(turn.to_owned());
                    }
                }
                self.flush()
            }
            (None, None) => Vec::new(),
        }
    }

    fn prompt(&mut self, text: &str) -> Vec<u8> {
        match self.thread.clone() {
            Some(thread) => self.turn_start(&thread, text),
            None => {
                self.waiting.push(text.to_owned());
                Vec::new()
            }
        }
    }

    fn interrupt(&mut self, _request_id: &str) -> Vec<u8> {
        match (self.thread.clone(), self.turn.clone()) {
            (Some(thread), Some(turn)) => self.turn_interrupt(&thread, &turn),
            _ => {
                self.interrupt_waiting = true;
                Vec::new()
            }
        }
    }

    fn answer(&mut self, request_id: &str, decision: Decision, _request: &Value) -> Vec<u8> {
        let Some((id, method)) = self.requests.remove(request_id) else {
            return Vec::new();
        };
        let (_, yes, no) = DECISIONS
            .iter()
            .find(|(m, _, _)| *m == method)
            .expect("only requests with known decisions are kept");
        let word = match decision {
            Decision::Allow => yes,
            Decision::Deny => no,
        };
        line(json!({"id": id, "result": {"decision": word}}))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            set_mode: true,
            set_model: true,
            thinking: true,
            commands: false,
            resume: true,
        }
    }

    fn modes(&self) -> Vec<Mode> {
        APPROVAL_POLICIES
            .iter()
            .map(|(id, name, description)| Mode::new(id, name, description))
            .collect()
    }

    /// Codex takes the policy with the next `turn/start` (and keeps it for the thread).
    fn set_mode(&mut self, mode: &str) -> Vec<u8> {
        self.approval_policy = mode.to_owned();
        self.next_turn
            .insert("approvalPolicy".into(), Value::from(mode));
        Vec::new()
    }

    /// The model and reasoning effort go with the next `turn/start`.
    fn set_model(&mut self, model: Option<&str>, thinking: Option<Thinking>) -> Vec<u8> {
        if let Some(model) = model {
            self.next_turn.insert("model".into(), Value::from(model));
        }
        if let Some(thinking) = thinking {
            let effort = match thinking {
                Thinking::Off => "minimal",
                Thinking::Low => "low",
                Thinking::Medium => "medium",
                Thinking::High => "high",
            };
            self.next_turn.insert("effort".into(), Value::from(effort));
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::super::lines;
    use super::*;

    fn observe(a: &mut CodexAppServer, v: Value) -> Vec<Value> {
        lines(&a.observe(v.to_string().as_bytes()))
    }

    #[test]
    fn prompts_wait_for_the_thread_and_interrupts_for_the_turn() {
        let mut a = CodexAppServer::new("codex".into(), "untrusted", "workspace-write");
        let hello = lines(&a.start(Path::new("/w")));
        let methods: Vec<_> = hello.iter().map(|m| m["method"].clone()).collect();
        assert_eq!(methods, ["initialize", "initialized", "thread/start"]);
        assert_eq!(hello[2]["params"]["approvalPolicy"], "untrusted");
        assert!(a.prompt("hi").is_empty(), "no thread yet");
        assert!(a.interrupt("i1").is_empty(), "no turn yet");
        assert!(observe(&mut a, json!({"id": 1, "result": {}})).is_empty());
        let sent = observe(&mut a, json!({"id": 2, "result": {"thread": {"id": "th"}}}));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["method"], "turn/start");
        assert_eq!(sent[0]["params"]["threadId"], "th");
        assert_eq!(sent[0]["params"]["input"][0]["text"], "hi");
        let id = sent[0]["id"].clone();
        let sent = observe(&mut a, json!({"id": id, "result": {"turn": {"id": "tu"}}}));
        assert_eq!(sent[0]["method"], "turn/interrupt");
        assert_eq!(sent[0]["params"], json!({"threadId": "th", "turnId": "tu"}));
        // Later prompts go out at once.
        assert_eq!(lines(&a.prompt("again"))[0]["method"], "turn/start");
    }

    #[test]
    fn approvals_are_answered_with_each_requests_own_id_and_words() {
        let mut a = CodexAppServer::new("codex".into(), "untrusted", "workspace-write");
        let request = json!({"method": "item/commandExecution/requestApproval", "id": 0,
                             "params": {"itemId": "call_1"}});
        assert!(observe(&mut a, request).is_empty());
        let answer = lines(&a.answer("0", Decision::Allow, &json!({})));
        assert_eq!(answer, [json!({"id": 0, "result": {"decision": "accept"}})]);
        assert!(
            a.answer("0", Decision::Allow, &json!({})).is_empty(),
            "once"
        );
        let legacy = json!({"method": "execCommandApproval", "id": "r7", "params": {}});
        observe(&mut a, legacy);
        let answer = lines(&a.answer("r7", Decision::Deny, &json!({})));
        assert_eq!(
            answer,
            [json!({"id": "r7", "result": {"decision": "denied"}})]
        );
        // A question we cannot put to the user gets an error at once.
        let ask = json!({"method": "item/tool/requestUserInput", "id": 3, "params": {}});
        let refused = observe(&mut a, ask);
        assert_eq!(refused[0]["id"], 3);
        assert_eq!(refused[0]["error"]["code"], -32601);
    }
}
