//! The Agent Client Protocol on stdio: JSON-RPC 2.0 as JSON Lines, spoken by `gemini
//! --experimental-acp` and any other ACP agent. The companion is the ACP *client*.
//!
//! Handshake, sent at start: `initialize {protocolVersion: 1, clientCapabilities}`; once its
//! answer arrives (it says whether the agent can `loadSession`), `session/new {cwd,
//! mcpServers: []}`, or `session/load {sessionId, cwd, mcpServers: []}` to resume. Prompts
//! given before the session id is known wait, then go out as `session/prompt {sessionId,
//! prompt: [{type: "text", text}]}`; the response's `stopReason` ends the turn (the decoder
//! reads it: [`Adapter::feeds_requests`]). Interrupt is the `session/cancel` notification,
//! after answering every open permission request `cancelled`, as the protocol asks.
//!
//! Agent → client requests: `session/request_permission {toolCall, options}` waits for the
//! user; allow selects the first `allow_once` option (else `allow_always`), deny the first
//! `reject_once` (else `reject_always`), and with no such option the outcome is `cancelled`.
//! The client announces no file system and no terminal capability, so `fs/*` and
//! `terminal/*` requests (and any other) are refused at once with a JSON-RPC error: a turn
//! never waits on a question nobody can answer.
//!
//! Our request ids are strings (`agentwire-N`), so they never collide with the agent's own
//! (numeric) request ids in the one log the decoder reads.
//!
//! `session/load` makes the agent replay the session's history as `session/update`s; that
//! replay is already in the companion's log, so the adapter keeps it out
//! ([`Adapter::quiet`]), and prompts wait, until the replay is over. The protocol has the
//! agent replay before it answers, but the Gemini CLI (0.61) does not await its replay: the
//! first update comes before the answer and the rest after it. So the answer is not the end:
//! after it the adapter sends a *barrier*, an extension request (`_agentwire/barrier`) that
//! any agent answers at once (an error: no such method), and the replay is over at the first
//! barrier answer with no replayed update since the previous answer (the load's or a
//! barrier's); otherwise another barrier goes out. Why that is exact for the Gemini CLI: it
//! writes one message at a time through one queue, and queues each replayed update as soon as
//! the previous one is written, before it reads anything more from its stdin; so while the
//! replay runs, another update is queued ahead of the answer to any barrier read meanwhile.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::process::Command;

use super::{rpc_line, Adapter, Capabilities, Mode, Thinking};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// An ACP agent session: one ACP session, many prompt turns.
pub struct AcpStdio {
    provider: Provider,
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    /// A session to load instead of creating one.
    resume: Option<String>,
    next_id: u64,
    /// Our requests awaiting an answer: id → method.
    pending: HashMap<String, String>,
    session: Option<String>,
    /// Inside `session/load`, until its replay is over: the replayed history is kept out of
    /// the log.
    loading: bool,
    /// A `session/update` came (while loading) since the last answer to the load or a barrier.
    replayed: bool,
    /// Barriers sent for this load.
    barriers: u32,
    can_load: bool,
    /// Prompts waiting for the session.
    waiting: Vec<String>,
    /// Open permission requests: our key → (the id as sent, options as (id, kind)).
    permissions: HashMap<String, (Value, Vec<(String, String)>)>,
    modes: Vec<Mode>,
    /// The agent offers `session/set_model` (it listed `models`).
    models: bool,
    commands: Option<Vec<Value>>,
}

impl AcpStdio {
    /// An ACP agent run as `program args…`, in the companion's environment.
    pub fn new(provider: Provider, program: PathBuf, args: Vec<String>) -> AcpStdio {
        AcpStdio {
            provider,
            program,
            args,
            cwd: PathBuf::new(),
            resume: None,
            next_id: 0,
            pending: HashMap::new(),
            session: None,
            loading: false,
            replayed: false,
            barriers: 0,
            can_load: false,
            waiting: Vec::new(),
            permissions: HashMap::new(),
            modes: Vec::new(),
            models: false,
            commands: None,
        }
    }

    /// The Gemini CLI in ACP mode. It reads its settings from `~/.gemini/settings.json` and
    /// its key from the environment (`GEMINI_API_KEY`, …); `model` skips its router.
    pub fn gemini(program: PathBuf, model: Option<&str>) -> AcpStdio {
        let mut args = vec!["--experimental-acp".to_owned()];
        if let Some(m) = model {
            args.extend(["-m".to_owned(), m.to_owned()]);
        }
        AcpStdio::new(Provider::Gemini, program, args)
    }

    /// Loads the ACP session `id` (the session's `provider_session_id`) instead of creating
    /// one, when the agent can; otherwise a new session starts.
    pub fn resuming(mut self, id: &str) -> AcpStdio {
        self.resume = Some(id.to_owned());
        self
    }

    fn request(&mut self, method: &str, params: Value) -> Vec<u8> {
        self.next_id += 1;
        let id = format!("agentwire-{}", self.next_id);
        self.pending.insert(id.clone(), method.to_owned());
        rpc_line(json!({"id": id, "method": method, "params": params}))
    }

    fn open_session(&mut self) -> Vec<u8> {
        let cwd = self.cwd.display().to_string();
        match self.resume.clone().filter(|_| self.can_load) {
            Some(id) => {
                self.loading = true;
                self.session = Some(id.clone());
                self.request(
                    "session/load",
                    json!({"sessionId": id, "cwd": cwd, "mcpServers": []}),
                )
            }
            None => self.request("session/new", json!({"cwd": cwd, "mcpServers": []})),
        }
    }

    /// After the answer to `session/load`: one more barrier, or the end of the replay (then
    /// the prompts that waited go out).
    fn after_replay_answer(&mut self) -> Vec<u8> {
        if std::mem::take(&mut self.replayed) && self.barriers < MAX_BARRIERS {
            self.barriers += 1;
            return self.request(BARRIER, json!({}));
        }
        self.loading = false;
        self.flush()
    }

    fn prompt_request(&mut self, session: &str, text: &str) -> Vec<u8> {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    /// Sends the prompts that waited for the session.
    fn flush(&mut self) -> Vec<u8> {
        let Some(session) = self.session.clone().filter(|_| !self.loading) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for text in std::mem::take(&mut self.waiting) {
            out.extend(self.prompt_request(&session, &text));
        }
        out
    }

    /// Reads what a `session/new` or `session/load` answer says about the session.
    fn session_result(&mut self, result: &Value) {
        if let Some(id) = result.get("sessionId").and_then(Value::as_str) {
            self.session = Some(id.to_owned());
        }
        if let Some(modes) = result
            .get("modes")
            .and_then(|m| m.get("availableModes"))
            .and_then(Value::as_array)
        {
            self.modes = modes
                .iter()
                .filter_map(|m| {
                    let id = m.get("id")?.as_str()?;
                    let name = m.get("name").and_then(Value::as_str).unwrap_or(id);
                    let description = m.get("description").and_then(Value::as_str);
                    Some(Mode::new(id, name, description.unwrap_or("")))
                })
                .collect();
        }
        self.models = result.get("models").is_some_and(Value::is_object);
    }

    fn agent_request(&mut self, id: &Value, method: &str, params: Option<&Value>) -> Vec<u8> {
        if method == "session/request_permission" {
            let options = params
                .and_then(|p| p.get("options"))
                .and_then(Value::as_array)
                .map(|opts| {
                    opts.iter()
                        .filter_map(|o| {
                            let oid = o.get("optionId").and_then(Value::as_str)?;
                            let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
                            Some((oid.to_owned(), kind.to_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            self.permissions
                .insert(id_string(id), (id.clone(), options));
            return Vec::new();
        }
        let message = if method.starts_with("fs/") || method.starts_with("terminal/") {
            format!("agentwire offers no {method}: the client announced no such capability")
        } else {
            format!("agentwire cannot answer {method} requests")
        };
        rpc_line(json!({"id": id, "error": {"code": -32601, "message": message}}))
    }
}

/// The extension request that tells where a `session/load` replay ends.
const BARRIER: &str = "_agentwire/barrier";

/// At most this many barriers per load (an agent that never stops sending updates).
const MAX_BARRIERS: u32 = 100;

/// A JSON-RPC id (string or number) as text: the `request_id` of the approval events.
fn id_string(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Adapter for AcpStdio {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn format(&self) -> Format {
        Format::GeminiAcp
    }

    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).current_dir(cwd);
        cmd
    }

    fn start(&mut self, cwd: &Path) -> Vec<u8> {
        self.cwd = cwd.to_owned();
        self.request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false,
                },
                "clientInfo": {"name": "agentwire", "version": env!("CARGO_PKG_VERSION")},
            }),
        )
    }

    fn observe(&mut self, line: &[u8]) -> Vec<u8> {
        let Ok(Value::Object(msg)) = serde_json::from_slice::<Value>(line) else {
            return Vec::new();
        };
        let method = msg.get("method").and_then(Value::as_str);
        match (method, msg.get("id")) {
            (Some(method), Some(id)) => self.agent_request(id, method, msg.get("params")),
            (Some("session/update"), None) => {
                let update = msg.get("params").and_then(|p| p.get("update"));
                let kind = update
                    .and_then(|u| u.get("sessionUpdate"))
                    .and_then(Value::as_str);
                if kind == Some("available_commands_update") {
                    self.commands = update
                        .and_then(|u| u.get("availableCommands"))
                        .and_then(Value::as_array)
                        .cloned();
                } else if self.loading {
                    self.replayed = true;
                }
                Vec::new()
            }
            (None, Some(id)) => {
                let Some(method) = self.pending.remove(&id_string(id)) else {
                    return Vec::new();
                };
                let result = msg.get("result");
                match method.as_str() {
                    "initialize" => {
                        self.can_load = result
                            .and_then(|r| r.get("agentCapabilities"))
                            .and_then(|c| c.get("loadSession"))
                            .and_then(Value::as_bool)
                            == Some(true);
                        self.open_session()
                    }
                    "session/new" | "session/load" => {
                        self.loading = false;
                        match result {
                            Some(r) => self.session_result(r),
                            // A session that cannot be loaded: start a new one.
                            None if method == "session/load" => {
                                self.session = None;
                                self.resume = None;
                                return self.open_session();
                            }
                            None => {}
                        }
                        if method == "session/load" {
                            // The replay may go on after the answer: see the module docs.
                            self.loading = true;
                            self.replayed = true;
                            return self.after_replay_answer();
                        }
                        self.flush()
                    }
                    BARRIER => self.after_replay_answer(),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    fn prompt(&mut self, text: &str) -> Vec<u8> {
        match self.session.clone().filter(|_| !self.loading) {
            Some(session) => self.prompt_request(&session, text),
            None => {
                self.waiting.push(text.to_owned());
                Vec::new()
            }
        }
    }

    fn interrupt(&mut self, _request_id: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for (_, (id, _)) in self.permissions.drain() {
            out.extend(rpc_line(
                json!({"id": id, "result": {"outcome": {"outcome": "cancelled"}}}),
            ));
        }
        if !self.waiting.is_empty() {
            self.waiting.clear();
        }
        if let Some(session) = &self.session {
            out.extend(rpc_line(
                json!({"method": "session/cancel", "params": {"sessionId": session}}),
            ));
        }
        out
    }

    fn answer(&mut self, request_id: &str, decision: Decision, _request: &Value) -> Vec<u8> {
        let Some((id, options)) = self.permissions.remove(request_id) else {
            return Vec::new();
        };
        let preference: &[&str] = match decision {
            Decision::Allow => &["allow_once", "allow_always"],
            Decision::Deny => &["reject_once", "reject_always"],
        };
        let chosen = preference
            .iter()
            .find_map(|kind| options.iter().find(|(_, k)| k == kind))
            .map(|(option, _)| option.clone());
        let outcome = match chosen {
            Some(option) => json!({"outcome": "selected", "optionId": option}),
            None => json!({"outcome": "cancelled"}),
        };
        rpc_line(json!({"id": id, "result": {"outcome": outcome}}))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            set_mode: true,
            set_model: true,
            thinking: false,
            commands: true,
            resume: true,
        }
    }

    fn modes(&self) -> Vec<Mode> {
        self.modes.clone()
    }

    fn set_mode(&mut self, mode: &str) -> Vec<u8> {
        let Some(session) = self.session.clone() else {
            return Vec::new();
        };
        self.request(
            "session/set_mode",
            json!({"sessionId": session, "modeId": mode}),
        )
    }

    fn set_model(&mut self, model: Option<&str>, _thinking: Option<Thinking>) -> Vec<u8> {
        match (self.session.clone(), model) {
            (Some(session), Some(model)) => self.request(
                "session/set_model",
                json!({"sessionId": session, "modelId": model}),
            ),
            _ => Vec::new(),
        }
    }

    fn commands(&self) -> Option<Vec<Value>> {
        self.commands.clone()
    }

    fn feeds_requests(&self) -> bool {
        true
    }

    fn quiet(&self) -> bool {
        self.loading
    }
}

#[cfg(test)]
mod tests {
    use super::super::lines;
    use super::*;

    fn observe(a: &mut AcpStdio, v: Value) -> Vec<Value> {
        lines(&a.observe(v.to_string().as_bytes()))
    }

    fn started(resume: Option<&str>, can_load: bool) -> (AcpStdio, Vec<Value>) {
        let mut a = AcpStdio::gemini("gemini".into(), None);
        if let Some(id) = resume {
            a = a.resuming(id);
        }
        let hello = lines(&a.start(Path::new("/w")));
        assert_eq!(hello[0]["method"], "initialize");
        assert_eq!(hello[0]["jsonrpc"], "2.0");
        let id = hello[0]["id"].clone();
        let result = json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": can_load}});
        let sent = observe(
            &mut a,
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
        );
        (a, sent)
    }

    #[test]
    fn prompts_wait_for_the_session_then_go_out_with_its_id() {
        let (mut a, sent) = started(None, true);
        assert_eq!(sent[0]["method"], "session/new");
        assert_eq!(sent[0]["params"], json!({"cwd": "/w", "mcpServers": []}));
        assert!(a.prompt("hi").is_empty(), "no session yet");
        let result = json!({"sessionId": "s1", "modes": {"currentModeId": "default",
            "availableModes": [{"id": "default", "name": "Default"}, {"id": "yolo", "name": "YOLO"}]},
            "models": {"currentModelId": "auto", "availableModels": []}});
        let sent = observe(
            &mut a,
            json!({"jsonrpc": "2.0", "id": sent[0]["id"], "result": result}),
        );
        assert_eq!(sent[0]["method"], "session/prompt");
        assert_eq!(
            sent[0]["params"],
            json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]})
        );
        assert!(
            sent[0]["id"].is_string(),
            "our ids never collide with the agent's"
        );
        assert_eq!(a.modes().len(), 2);
        assert_eq!(lines(&a.set_mode("yolo"))[0]["params"]["modeId"], "yolo");
        assert_eq!(
            lines(&a.set_model(Some("gemini-2.5-pro"), None))[0]["method"],
            "session/set_model"
        );
        let cancel = lines(&a.interrupt("i1"));
        assert_eq!(
            cancel,
            [json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})]
        );
    }

    #[test]
    fn permissions_pick_the_options_by_kind_and_other_requests_are_refused() {
        let (mut a, _) = started(None, false);
        let ask = json!({"jsonrpc": "2.0", "id": 0, "method": "session/request_permission",
            "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t"}, "options": [
                {"optionId": "proceed_always", "kind": "allow_always"},
                {"optionId": "proceed_once", "kind": "allow_once"},
                {"optionId": "cancel", "kind": "reject_once"}]}});
        assert!(
            observe(&mut a, ask.clone()).is_empty(),
            "it waits for the user"
        );
        let yes = lines(&a.answer("0", Decision::Allow, &json!({})));
        assert_eq!(yes[0]["id"], 0);
        assert_eq!(yes[0]["result"]["outcome"]["optionId"], "proceed_once");
        assert!(
            a.answer("0", Decision::Allow, &json!({})).is_empty(),
            "once"
        );
        observe(&mut a, ask.clone());
        let no = lines(&a.answer("0", Decision::Deny, &json!({})));
        assert_eq!(no[0]["result"]["outcome"]["optionId"], "cancel");
        // An interrupt answers what is still open, `cancelled`.
        observe(&mut a, ask);
        let cancelled = lines(&a.interrupt("i"));
        assert_eq!(cancelled[0]["result"]["outcome"]["outcome"], "cancelled");
        let read = json!({"jsonrpc": "2.0", "id": 5, "method": "fs/read_text_file",
                          "params": {"path": "/etc/passwd"}});
        let refused = observe(&mut a, read);
        assert_eq!(refused[0]["id"], 5);
        assert_eq!(refused[0]["error"]["code"], -32601);
    }

    fn update(text: &str, kind: &str) -> Value {
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "old", "update": {"sessionUpdate": kind,
            "content": {"type": "text", "text": text}}}})
    }

    /// Answers the request in `sent` (error: no such method, as the Gemini CLI answers a
    /// barrier) and returns what the adapter sends next.
    fn refuse(a: &mut AcpStdio, sent: &[Value]) -> Vec<Value> {
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["method"], "_agentwire/barrier");
        let error = json!({"code": -32601, "message": "Method not found"});
        observe(
            a,
            json!({"jsonrpc": "2.0", "id": sent[0]["id"], "error": error}),
        )
    }

    #[test]
    fn a_resumed_session_is_loaded_and_its_replay_kept_quiet_until_it_is_over() {
        // As the Gemini CLI 0.61.0 sends it: the first replayed update before the answer to
        // `session/load`, the rest after it.
        let (mut a, sent) = started(Some("old"), true);
        assert_eq!(sent[0]["method"], "session/load");
        assert_eq!(sent[0]["params"]["sessionId"], "old");
        assert!(a.quiet());
        assert!(a.prompt("next").is_empty(), "waits for the load");
        observe(&mut a, update("<session_context>", "user_message_chunk"));
        assert!(a.quiet());
        let barrier = observe(
            &mut a,
            json!({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {}}),
        );
        assert!(a.quiet(), "the replay goes on after the answer");
        observe(&mut a, update("first prompt", "user_message_chunk"));
        observe(&mut a, update("first answer", "agent_message_chunk"));
        let barrier = refuse(&mut a, &barrier);
        assert!(a.quiet(), "updates came since the answer: one more barrier");
        let commands = json!({"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "old", "update": {"sessionUpdate": "available_commands_update",
            "availableCommands": [{"name": "memory"}]}}});
        observe(&mut a, commands);
        let sent = refuse(&mut a, &barrier);
        assert!(!a.quiet(), "nothing replayed since the last answer");
        assert_eq!(sent[0]["method"], "session/prompt");
        assert_eq!(sent[0]["params"]["sessionId"], "old");
        assert!(a.commands().is_some(), "the commands were read meanwhile");

        // An agent that replays before it answers: one barrier.
        let (mut a, sent) = started(Some("old"), true);
        a.prompt("next");
        observe(&mut a, update("earlier", "agent_message_chunk"));
        let barrier = observe(
            &mut a,
            json!({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {}}),
        );
        let sent = refuse(&mut a, &barrier);
        assert!(!a.quiet());
        assert_eq!(sent[0]["method"], "session/prompt");

        // An agent that cannot load starts a new session.
        let (_, sent) = started(Some("old"), false);
        assert_eq!(sent[0]["method"], "session/new");
    }

    #[test]
    fn the_real_gemini_cli_replay_stays_out_until_it_is_over() {
        // The second process of tests/data/gemini-acp/agentwire-fake__resumed-load.jsonl
        // (Gemini CLI 0.61.0): its agent lines fed to a fresh adapter, which must send what
        // the companion sent then, and pass on no replayed update.
        const RECORDING: &str =
            include_str!("../../../tests/data/gemini-acp/agentwire-fake__resumed-load.jsonl");
        let recorded_lines: Vec<Value> = RECORDING
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let start = recorded_lines
            .iter()
            .rposition(|l| l["method"] == "initialize")
            .unwrap();
        let ours = |l: &Value| {
            l["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("agentwire-"))
                && l.get("method").is_some()
        };
        let load = recorded_lines[start..]
            .iter()
            .find(|l| l["method"] == "session/load")
            .unwrap();
        let session = load["params"]["sessionId"].as_str().unwrap();
        let mut a = AcpStdio::gemini("gemini".into(), None).resuming(session);
        let mut sent = lines(&a.start(Path::new("/w")));
        sent.extend(lines(&a.prompt("third prompt")));
        let mut passed = Vec::new();
        for line in &recorded_lines[start..] {
            if ours(line) {
                continue;
            }
            sent.extend(observe(&mut a, line.clone()));
            if !a.quiet() {
                passed.push(line.clone());
            }
        }
        let recorded: Vec<(&Value, &Value)> = recorded_lines[start..]
            .iter()
            .filter(|l| ours(l))
            .map(|l| (&l["id"], &l["method"]))
            .collect();
        let now: Vec<(&Value, &Value)> = sent.iter().map(|l| (&l["id"], &l["method"])).collect();
        assert_eq!(now, recorded, "the same requests, barriers included");
        assert!(
            recorded
                .iter()
                .filter(|(_, m)| *m == "_agentwire/barrier")
                .count()
                >= 2
        );
        // What passed: the last barrier's answer, then the prompt's own updates and answer.
        let texts: Vec<&str> = passed
            .iter()
            .filter_map(|l| l["params"]["update"]["content"]["text"].as_str())
            .collect();
        assert_eq!(texts, ["Hello", " from the", " fake model."]);
        assert!(passed
            .iter()
            .all(|l| { l["params"]["update"]["sessionUpdate"] != "user_message_chunk" }));
    }
}
