//! `agentwire-testkit fake-model`: a scripted model server on 127.0.0.1 for running the real
//! agent CLIs offline (test support, not in the product binary). It is the only faked part of
//! the real-CLI tests: the CLIs are the real ones, pointed at this server through their
//! base-URL settings.
//!
//! It binds loopback addresses only and refuses any other. It speaks:
//! * Anthropic Messages: `POST /v1/messages[?beta=true]` (SSE when `stream: true`, else JSON)
//!   and `POST /v1/messages/count_tokens` (Claude Code);
//! * OpenAI Responses: `POST /v1/responses` (SSE; Codex);
//! * OpenAI Chat Completions: `POST /v1/chat/completions` (SSE or JSON; OpenCode);
//! * Gemini: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, `:generateContent`
//!   (which also answers the Gemini CLI's router classifiers with `{"model_choice":"flash"}`
//!   or `{"complexity_score":10}`, and its next-speaker check with `{"next_speaker":"user"}`)
//!   and `:countTokens`;
//! * `GET /v1/models`.
//!
//! Every request (method, path with query, headers with credentials redacted, body as JSON) is
//! recorded, and `GET /_requests` returns them in order (`DELETE /_requests` clears them), so a
//! test can assert that a CLI reached nothing else. Unknown paths are recorded and get a 404.
//! `POST /_outage` and `DELETE /_outage` start and end an outage of the `outage` scenario
//! (a model that fails for a while, then answers: the CLI retries in between).
//!
//! **Scenarios.** The reply is chosen from the request's conversation. When tool results come
//! after the last user text (the follow-up request of a tool turn), the reply is a text that
//! echoes them: `The tool said: <outputs joined by "; ">`. Otherwise the last user text (with
//! Claude Code's `<system-reminder>` blocks removed, lowercased) picks the first keyword it
//! contains, in this order:
//!
//! | keyword | reply |
//! |---|---|
//! | `<task-notification>` | a background task woke the agent: `The background task finished.` |
//! | `http401`, `http429`, `http500`, `http529` | that HTTP status with the API's error body |
//! | `outage` | HTTP 500 to every request (the Gemini CLI's classifiers too) while an outage is on (`POST /_outage` starts one, `DELETE /_outage` ends it), else as (none) |
//! | `midstream` | a text starts, then an SSE `error` event (Anthropic), `response.failed` (Responses), an error chunk (Chat, Gemini); a non-streaming retry gets a whole text |
//! | `slow` | 100 text deltas, 100 ms apart (something to interrupt) |
//! | `background` | a shell tool call that starts `sleep 1 && echo background-done` in the background |
//! | `think` | thinking (reasoning), a text, then two parallel shell tool calls (`echo one`, `echo two`) |
//! | `tool` | a short text, then one shell tool call, `echo hello-from-tool` by default |
//! | (none) | `Hello from the fake model.` in three deltas |
//!
//! The shell tool is taken from the request's own tool list, the first of `Bash` (Claude
//! Code), `exec_command` (Codex), `run_shell_command` (Gemini CLI), `bash` (OpenCode), `shell`;
//! without one, the reply says so in text. A prompt line starting with `$ ` overrides the
//! command of `tool` and `background` (e.g. `tool\n$ touch x && echo done`).
//!
//! Ids come from one counter per server (`msg_fake_1`, `toolu_fake_2`, `call_fake_3`, …), so a
//! run against a fresh server is reproducible apart from the CLI's own ids.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

/// Input tokens reported for every request.
const INPUT_TOKENS: u64 = 42;
/// The `slow` scenario: this many deltas, this far apart.
const SLOW_CHUNKS: usize = 100;
const SLOW_DELAY: Duration = Duration::from_millis(100);
const DEFAULT_COMMAND: &str = "echo hello-from-tool";
const BACKGROUND_COMMAND: &str = "sleep 1 && echo background-done";
/// Shell tools by preference: Claude Code, Codex, Gemini CLI, OpenCode, older Codex.
const SHELL_TOOLS: &[&str] = &["Bash", "exec_command", "run_shell_command", "bash", "shell"];

/// Why the fake model could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeModelError {
    #[error("refusing to listen on {0}: the fake model binds loopback addresses only")]
    NotLoopback(SocketAddr),
    #[error("listening on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

/// What every handler shares: the request log and the id counter.
#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Value>>,
    ids: AtomicU64,
    /// An outage of the `outage` scenario is on.
    outage: AtomicBool,
}

impl Shared {
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A running fake model server; it stops when its task is aborted or the runtime ends.
pub struct FakeModel {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds `addr` (loopback only) and serves in a background task.
pub async fn start(addr: SocketAddr) -> Result<FakeModel, FakeModelError> {
    if !addr.ip().is_loopback() {
        return Err(FakeModelError::NotLoopback(addr));
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| FakeModelError::Bind(addr, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| FakeModelError::Bind(addr, e))?;
    let app = router();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("fake-model: {e}");
        }
    });
    Ok(FakeModel { addr, task })
}

/// The fake model's routes, with a fresh request log.
pub fn router() -> Router {
    let shared = Arc::new(Shared::default());
    Router::new()
        .route("/_requests", get(list_requests).delete(clear_requests))
        .route("/_outage", post(start_outage).delete(end_outage))
        .fallback(handle)
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(shared)
}

async fn list_requests(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(Value::Array(
        shared.requests.lock().expect("request log").clone(),
    ))
}

async fn clear_requests(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.requests.lock().expect("request log").clear();
    StatusCode::NO_CONTENT
}

async fn start_outage(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.outage.store(true, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

async fn end_outage(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.outage.store(false, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// Records the request, then dispatches on the path.
async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let path = uri.path();
    shared.requests.lock().expect("request log").push(json!({
        "method": method.as_str(),
        "path": uri.path_and_query().map_or(path, |p| p.as_str()),
        "headers": recorded_headers(&headers),
        "body": body,
    }));
    let api = match (method.clone(), path) {
        // Claude Code's preconnect to its base URL.
        (Method::HEAD | Method::GET, "/") => return StatusCode::OK.into_response(),
        (Method::GET, "/v1/models" | "/models") => return models(),
        (Method::POST, "/v1/messages/count_tokens") => {
            return Json(json!({"input_tokens": INPUT_TOKENS})).into_response()
        }
        (Method::POST, "/v1/messages") => Api::Anthropic,
        (Method::POST, "/v1/responses") => Api::Responses,
        (Method::POST, "/v1/chat/completions") => Api::Chat,
        (Method::POST, p) if p.starts_with("/v1beta/models/") => {
            let (model, action) = p["/v1beta/models/".len()..]
                .split_once(':')
                .unwrap_or((p, ""));
            match action {
                "streamGenerateContent" => Api::Gemini {
                    model: model.to_owned(),
                    stream: true,
                },
                "generateContent" => Api::Gemini {
                    model: model.to_owned(),
                    stream: false,
                },
                "countTokens" => return Json(json!({"totalTokens": INPUT_TOKENS})).into_response(),
                _ => return not_found(&method, path),
            }
        }
        _ => return not_found(&method, path),
    };
    let convo = Conversation::read(&api, &body);
    let plan = Plan::of(&convo, &shared);
    api.respond(plan, &convo, &shared)
}

fn recorded_headers(headers: &HeaderMap) -> Map<String, Value> {
    const SECRET: &[&str] = &["authorization", "x-api-key", "x-goog-api-key", "cookie"];
    headers
        .iter()
        .map(|(name, value)| {
            let value = if SECRET.contains(&name.as_str()) {
                "<redacted>".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.as_str().to_owned(), Value::String(value))
        })
        .collect()
}

fn not_found(method: &Method, path: &str) -> Response {
    let message = format!("the fake model does not serve {method} {path}");
    let body = json!({"error": {"type": "not_found_error", "message": message}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

fn models() -> Response {
    let model = |id: &str| {
        json!({"id": id, "object": "model", "type": "model", "display_name": id,
               "created": 0, "created_at": "2026-01-01T00:00:00Z", "owned_by": "agentwire"})
    };
    let data = vec![
        model("fake-model"),
        model("claude-opus-4-8"),
        model("gpt-5.5"),
    ];
    Json(json!({"object": "list", "data": data, "has_more": false})).into_response()
}

/// What a request says, whatever its API: the turns that matter for choosing a reply.
#[derive(Debug, Default)]
struct Conversation {
    /// User texts and tool outputs, in order.
    items: Vec<Item>,
    /// The names of the tools the request offers.
    tools: Vec<String>,
    model: String,
    stream: bool,
    /// The JSON answer a structured side request of the Gemini CLI asks for, if it is one.
    asks_for: Option<&'static str>,
}

#[derive(Debug)]
enum Item {
    User(String),
    ToolOutput(String),
}

impl Conversation {
    fn read(api: &Api, body: &Value) -> Conversation {
        let mut c = Conversation {
            model: str_at(body, "model").unwrap_or("fake-model").to_owned(),
            stream: body.get("stream").and_then(Value::as_bool) == Some(true),
            ..Conversation::default()
        };
        let list = |key: &str| body.get(key).and_then(Value::as_array).cloned();
        match api {
            Api::Anthropic => {
                c.tools = names(list("tools"), |t| str_at(t, "name"));
                for m in list("messages").unwrap_or_default() {
                    if str_at(&m, "role") != Some("user") {
                        continue;
                    }
                    c.push_anthropic(m.get("content"));
                }
            }
            Api::Responses => {
                c.stream = body.get("stream").and_then(Value::as_bool) != Some(false);
                c.tools = names(list("tools"), |t| str_at(t, "name"));
                match body.get("input") {
                    Some(Value::String(s)) => c.items.push(Item::User(s.clone())),
                    Some(Value::Array(items)) => {
                        for item in items {
                            match str_at(item, "type") {
                                Some("function_call_output" | "custom_tool_call_output") => {
                                    c.items.push(Item::ToolOutput(text_of(item.get("output"))))
                                }
                                Some("message") | None if str_at(item, "role") == Some("user") => {
                                    c.items.push(Item::User(match item.get("content") {
                                        Some(Value::Array(blocks)) => last_text(blocks),
                                        other => text_of(other),
                                    }))
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            Api::Chat => {
                c.tools = names(list("tools"), |t| {
                    t.get("function").and_then(|f| str_at(f, "name"))
                });
                for m in list("messages").unwrap_or_default() {
                    match str_at(&m, "role") {
                        Some("user") => c.items.push(Item::User(match m.get("content") {
                            Some(Value::Array(blocks)) => last_text(blocks),
                            other => text_of(other),
                        })),
                        Some("tool") => c.items.push(Item::ToolOutput(text_of(m.get("content")))),
                        _ => {}
                    }
                }
            }
            Api::Gemini { model, stream } => {
                c.model = model.clone();
                c.stream = *stream;
                let declarations = list("tools")
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|t| {
                        t.get("functionDeclarations")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect();
                c.tools = names(Some(declarations), |d| str_at(d, "name"));
                for content in list("contents").unwrap_or_default() {
                    if str_at(&content, "role") != Some("user") {
                        continue;
                    }
                    let parts = content
                        .get("parts")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let outputs: Vec<String> = parts
                        .iter()
                        .filter_map(|p| p.get("functionResponse"))
                        .map(|r| {
                            let response = r.get("response").unwrap_or(&Value::Null);
                            match response.get("output") {
                                Some(Value::String(s)) => s.clone(),
                                _ => response.to_string(),
                            }
                        })
                        .collect();
                    if outputs.is_empty() {
                        c.items.push(Item::User(last_text(&parts)));
                    } else {
                        c.items.extend(outputs.into_iter().map(Item::ToolOutput));
                    }
                }
                let text = body.to_string();
                if text.contains("model_choice") {
                    c.asks_for = Some("model_choice");
                } else if text.contains("complexity_score") {
                    c.asks_for = Some("complexity_score");
                } else if text.contains("next_speaker") {
                    c.asks_for = Some("next_speaker");
                }
            }
        }
        c
    }

    /// An Anthropic user message: tool results if it has any, else its text.
    fn push_anthropic(&mut self, content: Option<&Value>) {
        let blocks = match content {
            Some(Value::Array(blocks)) => blocks.clone(),
            other => {
                self.items.push(Item::User(text_of(other)));
                return;
            }
        };
        let results: Vec<String> = blocks
            .iter()
            .filter(|b| str_at(b, "type") == Some("tool_result"))
            .map(|b| text_of(b.get("content")))
            .collect();
        if results.is_empty() {
            self.items.push(Item::User(last_text(&blocks)));
        } else {
            self.items.extend(results.into_iter().map(Item::ToolOutput));
        }
    }

    /// The tool outputs after the last user text, and that text.
    fn last_turn(&self) -> (Vec<&str>, &str) {
        let last_user = self.items.iter().rposition(|i| matches!(i, Item::User(_)));
        let start = last_user.map_or(0, |i| i + 1);
        let outputs = self.items[start..]
            .iter()
            .filter_map(|i| match i {
                Item::ToolOutput(s) => Some(s.as_str()),
                Item::User(_) => None,
            })
            .collect();
        let text = match last_user.map(|i| &self.items[i]) {
            Some(Item::User(s)) => s.as_str(),
            _ => "",
        };
        (outputs, text)
    }

    fn shell_tool(&self) -> Option<&'static str> {
        SHELL_TOOLS
            .iter()
            .copied()
            .find(|name| self.tools.iter().any(|t| t == name))
    }
}

fn names(list: Option<Vec<Value>>, name: impl Fn(&Value) -> Option<&str>) -> Vec<String> {
    list.unwrap_or_default()
        .iter()
        .filter_map(|t| name(t).map(str::to_owned))
        .collect()
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a content value: a string, or the `text` (or `output`) of its blocks, joined.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                _ => b
                    .get("text")
                    .or_else(|| b.get("output"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Object(o)) => o
            .get("content")
            .or_else(|| o.get("output"))
            .map(|c| text_of(Some(c)))
            .unwrap_or_else(|| Value::Object(o.clone()).to_string()),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The last text block of a message that is more than system reminders: the prompt. (Claude
/// Code merges consecutive user messages, so earlier blocks may be earlier prompts.)
fn last_text(blocks: &[Value]) -> String {
    blocks
        .iter()
        .rev()
        .filter_map(|b| b.as_str().or_else(|| str_at(b, "text")))
        .find(|t| !strip_reminders(t).trim().is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Removes Claude Code's `<system-reminder>…</system-reminder>` sections.
fn strip_reminders(text: &str) -> String {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        match rest[start..].find(CLOSE) {
            Some(end) => rest = &rest[start + end + CLOSE.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The scripted scenarios (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    Plain,
    Tool,
    Think,
    Http(u16),
    /// HTTP 500 while an outage is on, else [`Scenario::Plain`].
    Outage,
    Midstream,
    Slow,
    Background,
    /// A background task's notification woke the agent.
    Wake,
}

impl Scenario {
    /// The scenario a user text asks for.
    pub fn of(text: &str) -> Scenario {
        let text = strip_reminders(text).to_lowercase();
        if text.contains("<task-notification>") {
            return Scenario::Wake;
        }
        const KEYWORDS: &[(&str, Scenario)] = &[
            ("http401", Scenario::Http(401)),
            ("http429", Scenario::Http(429)),
            ("http500", Scenario::Http(500)),
            ("http529", Scenario::Http(529)),
            ("outage", Scenario::Outage),
            ("midstream", Scenario::Midstream),
            ("slow", Scenario::Slow),
            ("background", Scenario::Background),
            ("think", Scenario::Think),
            ("tool", Scenario::Tool),
        ];
        KEYWORDS
            .iter()
            .find(|(k, _)| text.contains(k))
            .map_or(Scenario::Plain, |(_, s)| s.clone())
    }
}

/// The command a prompt asks for with a `$ ` line, if any.
fn command_override(text: &str) -> Option<String> {
    strip_reminders(text)
        .lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("$ ")
                .map(|c| c.trim().to_owned())
        })
        .filter(|c| !c.is_empty())
}

/// One block of a scripted reply, API-neutral.
#[derive(Clone, Debug)]
enum Block {
    Thinking(Vec<String>),
    /// A text, as its deltas.
    Text(Vec<String>),
    Call {
        id: u64,
        name: String,
        input: Value,
    },
}

/// What to answer.
#[derive(Clone, Debug)]
enum Plan {
    Reply {
        blocks: Vec<Block>,
        /// The pause before each delta.
        delay: Duration,
    },
    /// An HTTP error status.
    Fail(u16),
    /// A text that breaks off with an in-stream error (whole when not streaming).
    Midstream(Vec<String>),
    /// A JSON document as the text of a non-streaming Gemini reply.
    Structured(Value),
}

impl Plan {
    fn of(c: &Conversation, shared: &Shared) -> Plan {
        let (outputs, text) = c.last_turn();
        let outage = Scenario::of(text) == Scenario::Outage;
        if outage && shared.outage.load(Ordering::SeqCst) {
            // Every request of the prompt fails, the Gemini CLI's router classifier too.
            return Plan::Fail(500);
        }
        match c.asks_for {
            Some("model_choice") => {
                return Plan::Structured(json!({
                    "reasoning": "The fake model routes every request to flash.",
                    "model_choice": "flash",
                }))
            }
            Some("complexity_score") => {
                return Plan::Structured(json!({
                    "complexity_reasoning": "The fake model finds every task simple.",
                    "complexity_score": 10,
                }))
            }
            Some("next_speaker") => {
                return Plan::Structured(json!({
                    "reasoning": "The fake model's turn is over.",
                    "next_speaker": "user",
                }))
            }
            _ => {}
        }
        let reply = |blocks| Plan::Reply {
            blocks,
            delay: Duration::ZERO,
        };
        if !outputs.is_empty() {
            let said = format!("The tool said: {}", outputs.join("; ").trim());
            return reply(vec![Block::Text(deltas(&said))]);
        }
        let call = |command: &str, background: bool| {
            let name = c.shell_tool()?;
            Some(Block::Call {
                id: shared.next_id(),
                name: name.to_owned(),
                input: shell_input(name, command, background),
            })
        };
        let no_shell = || Block::Text(deltas("No shell tool was offered."));
        match Scenario::of(text) {
            Scenario::Plain | Scenario::Outage => reply(vec![Block::Text(vec![
                "Hello".into(),
                " from the".into(),
                " fake model.".into(),
            ])]),
            Scenario::Wake => reply(vec![Block::Text(deltas("The background task finished."))]),
            Scenario::Http(status) => Plan::Fail(status),
            Scenario::Midstream => Plan::Midstream(deltas("This answer breaks off midway.")),
            Scenario::Slow => Plan::Reply {
                blocks: vec![Block::Text(
                    (1..=SLOW_CHUNKS)
                        .map(|i| format!("{i}{}", if i == SLOW_CHUNKS { "." } else { " " }))
                        .collect(),
                )],
                delay: SLOW_DELAY,
            },
            Scenario::Tool => {
                let command = command_override(text).unwrap_or_else(|| DEFAULT_COMMAND.into());
                match call(&command, false) {
                    Some(call) => reply(vec![Block::Text(deltas("Running a command.")), call]),
                    None => reply(vec![no_shell()]),
                }
            }
            Scenario::Background => {
                let command = command_override(text).unwrap_or_else(|| BACKGROUND_COMMAND.into());
                match call(&command, true) {
                    Some(call) => reply(vec![
                        Block::Text(deltas("Starting a background task.")),
                        call,
                    ]),
                    None => reply(vec![no_shell()]),
                }
            }
            Scenario::Think => {
                let mut blocks = vec![
                    Block::Thinking(deltas("The user wants two things. Two commands will do.")),
                    Block::Text(deltas("I will run two commands at once.")),
                ];
                match (call("echo one", false), call("echo two", false)) {
                    (Some(a), Some(b)) => blocks.extend([a, b]),
                    _ => blocks.push(no_shell()),
                }
                reply(blocks)
            }
        }
    }
}

/// Splits a text into about three deltas at spaces.
fn deltas(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let per = words.len().div_ceil(3).max(1);
    words.chunks(per).map(|c| c.concat()).collect()
}

/// The input a shell tool takes, per CLI.
fn shell_input(tool: &str, command: &str, background: bool) -> Value {
    let description = if background {
        "Start a background task"
    } else {
        "Run a command"
    };
    match tool {
        "Bash" if background => {
            json!({"command": command, "description": description, "run_in_background": true})
        }
        "exec_command" => {
            let cmd = if background {
                format!("({command}) &")
            } else {
                command.to_owned()
            };
            json!({"cmd": cmd})
        }
        "shell" => json!({"command": ["bash", "-lc", command]}),
        _ if background => json!({"command": format!("({command}) &"), "description": description}),
        _ => json!({"command": command, "description": description}),
    }
}

/// One piece of a streamed body and the pause before it.
struct Frame {
    delay: Duration,
    text: String,
}

fn frame(text: String) -> Frame {
    Frame {
        delay: Duration::ZERO,
        text,
    }
}

fn named(event: &str, data: &Value) -> Frame {
    frame(format!("event: {event}\ndata: {data}\n\n"))
}

fn data(data: &Value) -> Frame {
    frame(format!("data: {data}\n\n"))
}

fn sse(frames: Vec<Frame>) -> Response {
    let stream = futures_util::stream::unfold(frames.into_iter(), |mut frames| async move {
        let next = frames.next()?;
        if !next.delay.is_zero() {
            tokio::time::sleep(next.delay).await;
        }
        Some((Ok::<_, Infallible>(Bytes::from(next.text)), frames))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}

/// The API a request speaks.
enum Api {
    Anthropic,
    Responses,
    Chat,
    Gemini { model: String, stream: bool },
}

impl Api {
    fn respond(&self, plan: Plan, c: &Conversation, shared: &Shared) -> Response {
        if let Plan::Fail(status) = plan {
            return self.error(status);
        }
        let n = shared.next_id();
        match self {
            Api::Anthropic => anthropic(plan, c, n),
            Api::Responses => responses(plan, c, n),
            Api::Chat => chat(plan, c, n),
            Api::Gemini { .. } => gemini(plan, c),
        }
    }

    fn error(&self, status: u16) -> Response {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let (kind, message) = match status {
            401 => ("authentication_error", "invalid x-api-key"),
            429 => (
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
            ),
            529 => ("overloaded_error", "Overloaded"),
            _ => ("api_error", "Internal server error"),
        };
        let message = format!("{message} (fake model, HTTP {status})");
        let body = match self {
            Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
            Api::Responses | Api::Chat => {
                let code = match status {
                    401 => "invalid_api_key",
                    429 => "rate_limit_exceeded",
                    _ => "server_error",
                };
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            }
            Api::Gemini { .. } => {
                let grpc = match status {
                    401 => "UNAUTHENTICATED",
                    429 => "RESOURCE_EXHAUSTED",
                    529 => "UNAVAILABLE",
                    _ => "INTERNAL",
                };
                json!({"error": {"code": status, "message": message, "status": grpc}})
            }
        };
        let mut response = (code, Json(body)).into_response();
        response
            .headers_mut()
            .insert("request-id", "req_fake".parse().expect("a header value"));
        response
    }
}

fn output_tokens(blocks: &[Block]) -> usize {
    blocks
        .iter()
        .map(|b| match b {
            Block::Thinking(d) | Block::Text(d) => d.len(),
            Block::Call { .. } => 10,
        })
        .sum()
}

/// Splits a JSON text into two pieces (for argument deltas).
fn halves(s: &str) -> [&str; 2] {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    [&s[..mid], &s[mid..]]
}

const SIGNATURE: &str = "ZmFrZS1zaWduYXR1cmU=";

fn anthropic(plan: Plan, c: &Conversation, n: u64) -> Response {
    let id = format!("msg_fake_{n}");
    let (blocks, delay, broken) = match plan {
        Plan::Reply { blocks, delay } => (blocks, delay, false),
        Plan::Midstream(text) if c.stream => (vec![Block::Text(text)], Duration::ZERO, true),
        Plan::Midstream(text) => (vec![Block::Text(text)], Duration::ZERO, false),
        Plan::Structured(v) => (
            vec![Block::Text(vec![v.to_string()])],
            Duration::ZERO,
            false,
        ),
        Plan::Fail(_) => unreachable!("handled by the caller"),
    };
    let has_call = blocks.iter().any(|b| matches!(b, Block::Call { .. }));
    let stop_reason = if has_call { "tool_use" } else { "end_turn" };
    let usage = |output: usize| {
        json!({"input_tokens": INPUT_TOKENS, "output_tokens": output,
               "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    };
    let content_of = |b: &Block| match b {
        Block::Thinking(d) => {
            json!({"type": "thinking", "thinking": d.concat(), "signature": SIGNATURE})
        }
        Block::Text(d) => json!({"type": "text", "text": d.concat()}),
        Block::Call { id, name, input } => {
            json!({"type": "tool_use", "id": format!("toolu_fake_{id}"), "name": name, "input": input})
        }
    };
    if !c.stream {
        let content: Vec<Value> = blocks.iter().map(content_of).collect();
        return Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": c.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": usage(output_tokens(&blocks)),
        }))
        .into_response();
    }
    let mut frames = vec![named(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": c.model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage(1)}}),
    )];
    for (index, block) in blocks.iter().enumerate() {
        let start = match block {
            Block::Thinking(_) => json!({"type": "thinking", "thinking": ""}),
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::Call { id, name, .. } => {
                json!({"type": "tool_use", "id": format!("toolu_fake_{id}"), "name": name, "input": {}})
            }
        };
        frames.push(named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        let delta = |d: Value| {
            named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": d}),
            )
        };
        match block {
            Block::Thinking(parts) => {
                for p in parts {
                    frames.push(delta(json!({"type": "thinking_delta", "thinking": p})));
                }
                frames.push(delta(
                    json!({"type": "signature_delta", "signature": SIGNATURE}),
                ));
            }
            Block::Text(parts) => {
                for p in parts {
                    let mut f = delta(json!({"type": "text_delta", "text": p}));
                    f.delay = delay;
                    frames.push(f);
                }
                if broken {
                    frames.push(named(
                        "error",
                        &json!({"type": "error", "error": {"type": "overloaded_error",
                            "message": "Overloaded (fake model, mid-stream)"}}),
                    ));
                    return sse(frames);
                }
            }
            Block::Call { input, .. } => {
                let json = input.to_string();
                for piece in halves(&json) {
                    frames.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
        }
        frames.push(named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    frames.push(named(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": output_tokens(&blocks)}}),
    ));
    frames.push(named("message_stop", &json!({"type": "message_stop"})));
    sse(frames)
}

fn responses(plan: Plan, c: &Conversation, n: u64) -> Response {
    let id = format!("resp_fake_{n}");
    let (blocks, delay, broken) = match plan {
        Plan::Reply { blocks, delay } => (blocks, delay, false),
        Plan::Midstream(text) => (vec![Block::Text(text)], Duration::ZERO, true),
        Plan::Structured(v) => (
            vec![Block::Text(vec![v.to_string()])],
            Duration::ZERO,
            false,
        ),
        Plan::Fail(_) => unreachable!("handled by the caller"),
    };
    let mut seq = 0u64;
    let mut frames = Vec::new();
    let mut push = |frames: &mut Vec<Frame>, delay: Duration, mut v: Value| {
        seq += 1;
        v["sequence_number"] = json!(seq);
        let event = v["type"].as_str().unwrap_or("message").to_owned();
        let mut f = named(&event, &v);
        f.delay = delay;
        frames.push(f);
    };
    let response = |status: &str, output: &[Value]| {
        json!({"id": id, "object": "response", "created_at": 0, "status": status,
               "model": c.model, "output": output})
    };
    push(
        &mut frames,
        Duration::ZERO,
        json!({"type": "response.created", "response": response("in_progress", &[])}),
    );
    let mut output = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let item_id = format!("item_fake_{n}_{index}");
        let (added, done) = match block {
            Block::Thinking(parts) => (
                json!({"type": "reasoning", "id": item_id, "summary": []}),
                json!({"type": "reasoning", "id": item_id,
                       "summary": [{"type": "summary_text", "text": parts.concat()}]}),
            ),
            Block::Text(parts) => (
                json!({"type": "message", "id": item_id, "role": "assistant",
                       "status": "in_progress", "content": []}),
                json!({"type": "message", "id": item_id, "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": parts.concat(), "annotations": []}]}),
            ),
            Block::Call { id, name, input } => {
                let item = json!({"type": "function_call", "id": item_id,
                    "call_id": format!("call_fake_{id}"), "name": name,
                    "arguments": input.to_string(), "status": "completed"});
                (item.clone(), item)
            }
        };
        push(
            &mut frames,
            Duration::ZERO,
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        match block {
            Block::Thinking(parts) => {
                for p in parts {
                    push(
                        &mut frames,
                        delay,
                        json!({"type": "response.reasoning_summary_text.delta",
                           "item_id": item_id, "output_index": index, "summary_index": 0,
                           "delta": p}),
                    );
                }
            }
            Block::Text(parts) => {
                for p in parts {
                    push(
                        &mut frames,
                        delay,
                        json!({"type": "response.output_text.delta", "item_id": item_id,
                           "output_index": index, "content_index": 0, "delta": p}),
                    );
                }
                if broken {
                    let error = json!({"code": "server_error",
                        "message": "The fake model failed mid-stream."});
                    let mut failed = response("failed", &output);
                    failed["error"] = error;
                    push(
                        &mut frames,
                        Duration::ZERO,
                        json!({"type": "response.failed", "response": failed}),
                    );
                    return sse(frames);
                }
            }
            Block::Call { .. } => {}
        }
        push(
            &mut frames,
            Duration::ZERO,
            json!({"type": "response.output_item.done", "output_index": index, "item": done}),
        );
        output.push(done);
    }
    let mut completed = response("completed", &output);
    let out = output_tokens(&blocks);
    completed["usage"] = json!({"input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS as usize + out});
    if !c.stream {
        return Json(completed).into_response();
    }
    push(
        &mut frames,
        Duration::ZERO,
        json!({"type": "response.completed", "response": completed}),
    );
    sse(frames)
}

fn chat(plan: Plan, c: &Conversation, n: u64) -> Response {
    let id = format!("chatcmpl-fake-{n}");
    let (blocks, delay, broken) = match plan {
        Plan::Reply { blocks, delay } => (blocks, delay, false),
        Plan::Midstream(text) => (vec![Block::Text(text)], Duration::ZERO, c.stream),
        Plan::Structured(v) => (
            vec![Block::Text(vec![v.to_string()])],
            Duration::ZERO,
            false,
        ),
        Plan::Fail(_) => unreachable!("handled by the caller"),
    };
    let calls: Vec<(u64, &String, &Value)> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Call { id, name, input } => Some((*id, name, input)),
            _ => None,
        })
        .collect();
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let out = output_tokens(&blocks);
    let usage = json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": out,
                       "total_tokens": INPUT_TOKENS as usize + out});
    if !c.stream {
        let text: String = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(d) => Some(d.concat()),
                _ => None,
            })
            .collect();
        let reasoning: String = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Thinking(d) => Some(d.concat()),
                _ => None,
            })
            .collect();
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, input)| {
                json!({"id": format!("call_fake_{id}"), "type": "function",
                       "function": {"name": name, "arguments": input.to_string()}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": text});
        if !reasoning.is_empty() {
            message["reasoning_content"] = json!(reasoning);
        }
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        return Json(json!({"id": id, "object": "chat.completion", "created": 0,
            "model": c.model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage}))
        .into_response();
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": c.model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut frames = vec![data(&chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    ))];
    let mut call_index = 0;
    for block in &blocks {
        match block {
            Block::Thinking(parts) => {
                for p in parts {
                    frames.push(data(&chunk(json!({"reasoning_content": p}), None)));
                }
            }
            Block::Text(parts) => {
                for p in parts {
                    let mut f = data(&chunk(json!({"content": p}), None));
                    f.delay = delay;
                    frames.push(f);
                }
                if broken {
                    frames.push(data(&json!({"error": {"message":
                        "The fake model failed mid-stream.", "type": "server_error",
                        "code": "server_error"}})));
                    return sse(frames);
                }
            }
            Block::Call { id, name, input } => {
                let args = input.to_string();
                let [a, b] = halves(&args);
                frames.push(data(&chunk(
                    json!({"tool_calls": [{"index": call_index, "id": format!("call_fake_{id}"),
                        "type": "function", "function": {"name": name, "arguments": a}}]}),
                    None,
                )));
                frames.push(data(&chunk(
                    json!({"tool_calls": [{"index": call_index, "function": {"arguments": b}}]}),
                    None,
                )));
                call_index += 1;
            }
        }
    }
    let mut last = chunk(json!({}), Some(finish));
    last["usage"] = usage;
    frames.push(data(&last));
    frames.push(frame("data: [DONE]\n\n".into()));
    sse(frames)
}

fn gemini(plan: Plan, c: &Conversation) -> Response {
    let (blocks, delay, broken) = match plan {
        Plan::Reply { blocks, delay } => (blocks, delay, false),
        Plan::Midstream(text) => (vec![Block::Text(text)], Duration::ZERO, c.stream),
        Plan::Structured(v) => (
            vec![Block::Text(vec![v.to_string()])],
            Duration::ZERO,
            false,
        ),
        Plan::Fail(_) => unreachable!("handled by the caller"),
    };
    let out = output_tokens(&blocks);
    let usage = json!({"promptTokenCount": INPUT_TOKENS, "candidatesTokenCount": out,
                       "totalTokenCount": INPUT_TOKENS as usize + out});
    let response = |parts: Vec<Value>, finish: Option<&str>| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate], "modelVersion": c.model})
    };
    let call_part =
        |name: &String, input: &Value| json!({"functionCall": {"name": name, "args": input}});
    if !c.stream {
        let parts = blocks
            .iter()
            .map(|b| match b {
                Block::Thinking(d) => json!({"text": d.concat(), "thought": true}),
                Block::Text(d) => json!({"text": d.concat()}),
                Block::Call { name, input, .. } => call_part(name, input),
            })
            .collect();
        let mut body = response(parts, Some("STOP"));
        body["usageMetadata"] = usage;
        return Json(body).into_response();
    }
    let mut frames = Vec::new();
    let mut calls = Vec::new();
    for block in &blocks {
        match block {
            Block::Thinking(parts) => {
                for p in parts {
                    frames.push(data(&response(
                        vec![json!({"text": p, "thought": true})],
                        None,
                    )));
                }
            }
            Block::Text(parts) => {
                for p in parts {
                    let mut f = data(&response(vec![json!({"text": p})], None));
                    f.delay = delay;
                    frames.push(f);
                }
                if broken {
                    frames.push(data(&json!({"error": {"code": 500,
                        "message": "The fake model failed mid-stream.", "status": "INTERNAL"}})));
                    return sse(frames);
                }
            }
            Block::Call { name, input, .. } => calls.push(call_part(name, input)),
        }
    }
    let mut last = response(calls, Some("STOP"));
    last["usageMetadata"] = usage;
    frames.push(data(&last));
    sse(frames)
}

/// `agentwire-testkit fake-model`: serves on `addr` until Ctrl-C, after printing
/// `fake-model: listening http://ADDR` on stdout.
pub async fn run(addr: SocketAddr) -> Result<(), FakeModelError> {
    let server = start(addr).await?;
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "fake-model: listening http://{}", server.addr);
        let _ = stdout.flush();
    }
    let _ = tokio::signal::ctrl_c().await;
    server.task.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anthropic_request(messages: Value, tools: &[&str]) -> Value {
        let tools: Vec<Value> = tools.iter().map(|t| json!({"name": t})).collect();
        json!({"model": "m", "stream": true, "messages": messages, "tools": tools})
    }

    #[test]
    fn keywords_pick_scenarios_in_order_and_ignore_system_reminders() {
        assert_eq!(Scenario::of("hi"), Scenario::Plain);
        assert_eq!(Scenario::of("please use a TOOL"), Scenario::Tool);
        assert_eq!(Scenario::of("think, then tool"), Scenario::Think);
        assert_eq!(Scenario::of("http401 tool"), Scenario::Http(401));
        assert_eq!(Scenario::of("slow please"), Scenario::Slow);
        assert_eq!(
            Scenario::of("<system-reminder>Use a tool, think slowly</system-reminder>hello"),
            Scenario::Plain
        );
        assert_eq!(
            Scenario::of("<task-notification>background task done</task-notification>"),
            Scenario::Wake
        );
        assert_eq!(
            command_override("tool\n$ touch x && echo done"),
            Some("touch x && echo done".into())
        );
    }

    #[test]
    fn an_outage_fails_its_scenario_until_it_ends() {
        let shared = Shared::default();
        let request = anthropic_request(json!([{"role": "user", "content": "outage"}]), &[]);
        let c = Conversation::read(&Api::Anthropic, &request);
        assert!(matches!(Plan::of(&c, &shared), Plan::Reply { .. }));
        shared.outage.store(true, Ordering::SeqCst);
        assert!(matches!(Plan::of(&c, &shared), Plan::Fail(500)));
        let other = anthropic_request(json!([{"role": "user", "content": "hello"}]), &[]);
        let other = Conversation::read(&Api::Anthropic, &other);
        assert!(
            matches!(Plan::of(&other, &shared), Plan::Reply { .. }),
            "only its scenario"
        );
        shared.outage.store(false, Ordering::SeqCst);
        assert!(matches!(Plan::of(&c, &shared), Plan::Reply { .. }));
    }

    #[test]
    fn a_tool_turn_uses_the_requests_own_shell_tool_then_echoes_its_output() {
        let shared = Shared::default();
        let first = anthropic_request(
            json!([{"role": "user", "content": [{"type": "text", "text": "use a tool"}]}]),
            &["Read", "Bash"],
        );
        let c = Conversation::read(&Api::Anthropic, &first);
        let Plan::Reply { blocks, .. } = Plan::of(&c, &shared) else {
            panic!("a reply")
        };
        assert!(matches!(&blocks[1], Block::Call { name, input, .. }
            if name == "Bash" && input["command"] == DEFAULT_COMMAND));
        let follow = anthropic_request(
            json!([
                {"role": "user", "content": "use a tool"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                    "content": "hello-from-tool"}, {"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
            ]),
            &["Bash"],
        );
        let c = Conversation::read(&Api::Anthropic, &follow);
        let Plan::Reply { blocks, .. } = Plan::of(&c, &shared) else {
            panic!("a reply")
        };
        assert!(
            matches!(&blocks[..], [Block::Text(d)] if d.concat() == "The tool said: hello-from-tool")
        );
    }

    #[test]
    fn merged_user_messages_are_read_from_their_last_prompt() {
        // Claude Code merges a failed turn's prompt with the next one into one user message.
        let body = anthropic_request(
            json!([{"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                {"type": "text", "text": "http401"},
                {"type": "text", "text": "hello"},
                {"type": "text", "text": "<system-reminder>more</system-reminder>"}]}]),
            &[],
        );
        let c = Conversation::read(&Api::Anthropic, &body);
        assert_eq!(c.last_turn(), (vec![], "hello"));
    }

    #[test]
    fn each_api_names_its_tools_and_tool_outputs() {
        let responses = json!({"model": "gpt", "tools": [{"type": "function", "name": "exec_command"}],
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tool"}]},
                      {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c", "output": "out"}]});
        let c = Conversation::read(&Api::Responses, &responses);
        assert_eq!(c.shell_tool(), Some("exec_command"));
        assert_eq!(c.last_turn(), (vec!["out"], "tool"));
        let chat = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash"}}],
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "think"}]});
        let c = Conversation::read(&Api::Chat, &chat);
        assert_eq!(c.shell_tool(), Some("bash"));
        assert_eq!(c.last_turn(), (vec![], "think"));
        let gemini = json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
            "contents": [{"role": "user", "parts": [{"text": "tool"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
                         {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command",
                             "response": {"output": "hi"}}}]}]});
        let api = Api::Gemini {
            model: "g".into(),
            stream: true,
        };
        let c = Conversation::read(&api, &gemini);
        assert_eq!(c.shell_tool(), Some("run_shell_command"));
        assert_eq!(c.last_turn(), (vec!["hi"], "tool"));
    }

    #[test]
    fn deltas_rejoin_to_the_text() {
        for text in ["Hello from the fake model.", "one", "", "a b c d e f g"] {
            assert_eq!(deltas(text).concat(), text);
        }
        assert_eq!(halves("{\"é\":1}").concat(), "{\"é\":1}");
    }
}
