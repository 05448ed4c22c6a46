//! `POST /ag-ui/{provider}`: the companion as an [AG-UI](https://docs.ag-ui.com) 1.0 agent, so
//! AG-UI clients (`@ag-ui/client`'s `HttpAgent`, CopilotKit, assistant-ui) drive hosted
//! sessions with no agentwire code. docs/ag-ui.md is the contract; this is how it is built.
//!
//! A thread is a session: its id is derived from the thread id ([`session_for_thread`]), so
//! the log is the mapping and nothing else is stored; the first run on a thread creates the
//! session, later ones reuse it (resuming its CLI after a restart). One run is one turn,
//! or the rest of one: the handler decides what the run is from the input and the session's
//! log (a new prompt, the answers to an approval, or a reattach), then follows the log through
//! a [`Follower`] from the turn's start, exactly as the SSE and WebSocket followers do, and
//! [`Translator`] turns each canonical event into AG-UI events. What the client already has
//! (the part of a turn before an approval it answers) is translated and dropped, so the
//! translator always sees a turn from its start and its ids are the same in every run.
//!
//! The translation is pure ([`Translator`], [`conversation`]): no I/O, no clock; ids are
//! derived from the turn id and counters, so a replay gives the same events.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::fanout::{Follower, Page};
use super::host::CommandError;
use super::server::{ApiError, AppState};
use super::store::{EventQuery, Store};
use super::ws::StreamGuard;
use crate::core::error::ErrorCode;
use crate::core::event::{Event, EventId, EventType};
use crate::core::wire::Decision;

/// The session an AG-UI thread names: `ses_` and 32 hex digits derived from the thread id.
pub fn session_for_thread(thread_id: &str) -> String {
    let id = EventId::derive(&["ag-ui thread", thread_id]);
    format!("ses_{}", &id.as_str()["evt_".len()..])
}

/// The turn a client's user message starts: derived, so that the same message sent again (a
/// retry, a restarted server) names the same turn, which the session starts once.
fn turn_for_message(session: &str, message_id: &str) -> String {
    let id = EventId::derive(&["ag-ui message", session, message_id]);
    format!("turn_{}", &id.as_str()["evt_".len().."evt_".len() + 24])
}

/// The id of the user message of turn `turn` in a `MESSAGES_SNAPSHOT`.
fn user_message_id(turn: &str) -> String {
    format!("{turn}-user")
}

/// The longest thread id accepted.
const MAX_THREAD_ID: usize = 256;
/// How many (user message → turn) pairs [`Threads`] remembers before it starts over.
const MAX_KNOWN: usize = 10_000;

/// How many locks [`Threads`] stripes its threads over.
const SETUP_LOCKS: usize = 64;

/// What the endpoint keeps between runs, besides the log: which user message started which
/// turn (for this server's lifetime; a message from the log has a derived id instead), and
/// locks so that two runs on one thread do not both create its session or start a turn
/// (striped by session: a slow start on one thread holds up few others, in bounded memory).
pub struct Threads {
    setup: Vec<tokio::sync::Mutex<()>>,
    known: Mutex<HashMap<(String, String), String>>,
}

impl Default for Threads {
    fn default() -> Threads {
        Threads {
            setup: (0..SETUP_LOCKS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            known: Mutex::default(),
        }
    }
}

impl Threads {
    /// The setup lock of `session` (a derived id: its last hex digits spread evenly).
    fn setup_of(&self, session: &str) -> &tokio::sync::Mutex<()> {
        let tail =
            u64::from_str_radix(&session[session.len().saturating_sub(8)..], 16).unwrap_or(0);
        &self.setup[tail as usize % SETUP_LOCKS]
    }

    fn turn_of(&self, session: &str, message_id: &str) -> Option<String> {
        let known = self.known.lock().expect("known lock");
        known
            .get(&(session.to_owned(), message_id.to_owned()))
            .cloned()
    }

    /// The client's ids of the user messages that started turns of `session`, by turn.
    fn names(&self, session: &str) -> HashMap<String, String> {
        let known = self.known.lock().expect("known lock");
        known
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|((_, message), turn)| (turn.clone(), message.clone()))
            .collect()
    }

    fn remember(&self, session: &str, message_id: &str, turn: &str) {
        let mut known = self.known.lock().expect("known lock");
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert((session.to_owned(), message_id.to_owned()), turn.to_owned());
    }
}

/// The body: AG-UI's `RunAgentInput`. Only what the endpoint reads; the rest (`state`,
/// `tools`, `context`) is accepted and ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    pub thread_id: String,
    pub run_id: String,
    #[serde(default)]
    pub messages: Vec<Value>,
    #[serde(default)]
    pub forwarded_props: Value,
    #[serde(default)]
    pub resume: Vec<ResumeEntry>,
    /// The AG-UI version the client speaks (`1.0`); absent before 1.0.
    #[serde(default)]
    pub protocol_version: Option<String>,
}

/// An answer to one interrupt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default)]
    pub payload: Value,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

impl ResumeEntry {
    /// `resolved` with `payload.approved: true` allows; anything else denies.
    fn decision(&self) -> Decision {
        let approved = self.payload.get("approved").and_then(Value::as_bool);
        match (self.status, approved) {
            (ResumeStatus::Resolved, Some(true)) => Decision::Allow,
            _ => Decision::Deny,
        }
    }
}

/// The text of a user message's `content`: a string, or the `text` parts of a list.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    CommandError::new(ErrorCode::BadRequest, message).into()
}

/// What a run does, decided before the stream opens (errors are JSON, with a status).
struct Plan {
    /// The turn streamed, if any; none: the run only sends the conversation and finishes.
    turn: Option<String>,
    /// The follower starts after this sequence.
    from: u64,
    /// Events up to this sequence are translated and dropped: the client has them.
    seen: u64,
    /// Approvals answered by this run: no longer pending, whatever the log says yet.
    answered: Vec<String>,
    /// The `MESSAGES_SNAPSHOT` sent after `RUN_STARTED`.
    snapshot: Vec<Value>,
}

/// An AG-UI client sends the whole conversation with every run: the body may be this many
/// times the server's body limit.
pub const BODY_LIMIT_FACTOR: usize = 8;

/// The route `POST /ag-ui/{provider}`, its bodies limited to [`BODY_LIMIT_FACTOR`] times
/// `body_limit`.
pub fn route(body_limit: usize) -> MethodRouter<AppState> {
    post(run).layer(DefaultBodyLimit::max(
        body_limit.saturating_mul(BODY_LIMIT_FACTOR),
    ))
}

/// `POST /ag-ui/{provider}`.
pub async fn run(
    State(state): State<AppState>,
    UrlPath(provider): UrlPath<String>,
    Json(input): Json<RunAgentInput>,
) -> Result<Response, ApiError> {
    if input.thread_id.is_empty() || input.thread_id.len() > MAX_THREAD_ID {
        return Err(bad_request(format!(
            "threadId must have 1 to {MAX_THREAD_ID} bytes"
        )));
    }
    if input.run_id.is_empty() {
        return Err(bad_request("runId is empty"));
    }
    let session = session_for_thread(&input.thread_id);
    let plan = {
        let _setup = state.agui.setup_of(&session).lock().await;
        open_session(&state, &session, &provider, &input).await?;
        plan(&state, &session, &input).await?
    };
    Ok(stream(state, session, input, plan))
}

/// Creates the thread's session, or makes sure its agent runs (resuming it after a restart).
async fn open_session(
    state: &AppState,
    session: &str,
    provider: &str,
    input: &RunAgentInput,
) -> Result<(), ApiError> {
    let hub = &state.hub;
    match hub.store().get_session(session).await? {
        None => {
            let cwd = match input.forwarded_props.get("cwd") {
                None | Some(Value::Null) => None,
                Some(Value::String(dir)) => Some(PathBuf::from(dir)),
                Some(_) => return Err(bad_request("forwardedProps.cwd must be a string")),
            };
            hub.create_session_as(session, provider, cwd).await?;
        }
        Some(record) if record.provider != provider => {
            return Err(bad_request(format!(
                "thread {:?} is a {} session, not {provider}",
                input.thread_id, record.provider
            )));
        }
        Some(_) => match hub.resume_session(session).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::AlreadyRunning => {}
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// The whole log of a session.
async fn read_log(store: &Arc<dyn Store>, session: &str) -> Result<Vec<Event>, ApiError> {
    let mut events = Vec::new();
    loop {
        let query = EventQuery {
            after: Some(events.last().map_or(0, Event::sequence)),
            limit: Some(10_000),
            ..EventQuery::default()
        };
        let page = store.get_events(session, &query).await?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// Decides what the run does; starts the turn or answers the approvals it asks for.
async fn plan(state: &AppState, session: &str, input: &RunAgentInput) -> Result<Plan, ApiError> {
    let events = read_log(state.hub.store(), session).await?;
    let latest = events.last().map_or(0, Event::sequence);
    let turns = summarize(&events);
    let names = state.agui.names(session);
    // Answers to interrupts: the rest of their turn.
    if !input.resume.is_empty() {
        let mut turn = None;
        let mut answered = Vec::new();
        for entry in &input.resume {
            let id = &entry.interrupt_id;
            let Some(of) = turns.iter().find(|t| t.approvals.contains(id)) else {
                return Err(CommandError::new(
                    ErrorCode::UnknownRequest,
                    format!("no interrupt {id:?} on this thread"),
                )
                .into());
            };
            if of.pending.contains(id) {
                state
                    .hub
                    .answer_approval(session, id.clone(), entry.decision())
                    .await?;
                answered.push(id.clone());
            }
            turn = Some(of.clone());
        }
        let turn = turn.expect("resume is not empty");
        return Ok(Plan {
            turn: Some(turn.id),
            from: turn.start - 1,
            seen: latest,
            answered,
            snapshot: conversation(&events, &names),
        });
    }
    let last_user = input
        .messages
        .last()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let last_id = last_user
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let known = last_user.and_then(|_| {
        state.agui.turn_of(session, last_id).or_else(|| {
            let derived = turn_for_message(session, last_id);
            turns
                .iter()
                .find(|t| {
                    user_message_id(&t.id) == last_id || (!last_id.is_empty() && t.id == derived)
                })
                .map(|t| t.id.clone())
        })
    });
    // A new prompt: a new turn.
    if let (Some(message), None) = (last_user, &known) {
        let prompt = text_of(message.get("content").unwrap_or(&Value::Null));
        let turn_id = (!last_id.is_empty()).then(|| turn_for_message(session, last_id));
        let turn = state.hub.start_turn(session, prompt, turn_id).await?;
        if !last_id.is_empty() {
            state.agui.remember(session, last_id, &turn);
        }
        let mut snapshot = conversation(&events, &names);
        let mut message = message.clone();
        if last_id.is_empty() {
            message["id"] = json!(user_message_id(&turn));
        }
        snapshot.push(message);
        return Ok(Plan {
            turn: Some(turn),
            from: latest,
            seen: latest,
            answered: Vec::new(),
            snapshot,
        });
    }
    // No new message: reattach to the turn still running, if any.
    let target = match &known {
        Some(id) => turns.iter().find(|t| &t.id == id),
        None => turns.last(),
    };
    match target {
        Some(turn) if !turn.ended => {
            let before: Vec<Event> = events
                .iter()
                .filter(|e| {
                    e.sequence() < turn.start
                        || (e.kind() == EventType::MessageSent && e.run_id() == Some(&turn.id))
                })
                .cloned()
                .collect();
            Ok(Plan {
                turn: Some(turn.id.clone()),
                from: turn.start - 1,
                seen: turn.start - 1,
                answered: Vec::new(),
                snapshot: conversation(&before, &names),
            })
        }
        _ => Ok(Plan {
            turn: None,
            from: latest,
            seen: latest,
            answered: Vec::new(),
            snapshot: conversation(&events, &names),
        }),
    }
}

fn sse(event: &Value) -> SseEvent {
    SseEvent::default().data(event.to_string())
}

/// The response: `RUN_STARTED`, `MESSAGES_SNAPSHOT`, then the turn as the log has it, until
/// its terminal or an approval it waits for. A client that leaves before the end interrupts
/// the turn.
fn stream(state: AppState, session: String, input: RunAgentInput, plan: Plan) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let open = StreamGuard::sse(&state.streams);
    let thread_id = input.thread_id;
    let run_id = input.run_id;
    let protocol = input.protocol_version;
    tokio::spawn(async move {
        let _open = open;
        let started = json!({"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id,
            "metadata": {"agentwire": {"sessionId": session}}});
        let snapshot = json!({"type": "MESSAGES_SNAPSHOT", "messages": plan.snapshot});
        for event in [started, snapshot] {
            if tx.send(sse(&event)).await.is_err() {
                if plan.turn.is_some() {
                    // Gone before the turn's first event: it stops all the same.
                    let _ = state.hub.interrupt(&session, plan.turn.clone()).await;
                }
                return;
            }
        }
        let Some(turn) = plan.turn else {
            let finished = json!({"type": "RUN_FINISHED", "threadId": thread_id,
                "runId": run_id, "outcome": {"type": "success"}});
            let _ = tx.send(sse(&finished)).await;
            return;
        };
        let mut translator =
            Translator::new(&thread_id, &run_id, &turn).speaking(protocol.as_deref());
        for id in &plan.answered {
            translator.handle_answered(id);
        }
        let mut follower = Follower::new(&state.hub.fanout(), &session, plan.from);
        while !translator.is_done() {
            let page = tokio::select! {
                page = follower.next_events(512) => page,
                _ = tx.closed() => break,
            };
            let mut out = Vec::new();
            match page {
                Ok(Page::Events(encoded)) => {
                    // The shared tail holds events as the JSON they are sent as.
                    let events: Result<Vec<Event>, _> = encoded
                        .iter()
                        .map(|e| serde_json::from_str::<Event>(&e.json))
                        .collect();
                    let events = match events {
                        Ok(events) => events,
                        Err(e) => {
                            let error = json!({"type": "RUN_ERROR", "message": format!("a stored event is unreadable: {e}"),
                                "code": ErrorCode::StoreError.as_str()});
                            let _ = tx.send(sse(&error)).await;
                            return;
                        }
                    };
                    for event in &events {
                        translator.handle_event(event);
                        while let Some(e) = translator.poll_event() {
                            if event.sequence() > plan.seen || is_terminal(&e) {
                                out.push(e);
                            }
                        }
                    }
                }
                Ok(Page::CaughtUp(_)) => {
                    translator.handle_caught_up();
                    out.extend(std::iter::from_fn(|| translator.poll_event()));
                }
                Err(e) => {
                    let error = json!({"type": "RUN_ERROR", "message": e.to_string(),
                        "code": ErrorCode::StoreError.as_str()});
                    let _ = tx.send(sse(&error)).await;
                    return;
                }
            }
            for e in out {
                if tx.send(sse(&e)).await.is_err() {
                    break;
                }
            }
        }
        if !translator.is_done() {
            // The client left mid-turn: the turn stops with it (that turn, never a later one).
            let _ = state.hub.interrupt(&session, Some(turn)).await;
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn is_terminal(event: &Value) -> bool {
    matches!(
        event.get("type").and_then(Value::as_str),
        Some("RUN_FINISHED" | "RUN_ERROR")
    )
}

/// One turn of a session's log, as [`plan`] needs it.
#[derive(Clone, Debug, PartialEq)]
struct TurnSummary {
    id: String,
    /// The sequence of its first event.
    start: u64,
    ended: bool,
    /// Every approval it asked for, and those still unanswered.
    approvals: HashSet<String>,
    pending: HashSet<String>,
}

/// The turns of a log, in the order they began.
fn summarize(events: &[Event]) -> Vec<TurnSummary> {
    let mut turns: Vec<TurnSummary> = Vec::new();
    for e in events {
        let Some(run) = e.run_id() else { continue };
        let index = match turns.iter().rposition(|t| t.id == run) {
            Some(i) => i,
            None => {
                turns.push(TurnSummary {
                    id: run.to_owned(),
                    start: e.sequence(),
                    ended: false,
                    approvals: HashSet::new(),
                    pending: HashSet::new(),
                });
                turns.len() - 1
            }
        };
        let turn = &mut turns[index];
        let request = e.data_str("request_id").map(str::to_owned);
        match e.kind() {
            EventType::RunCompleted | EventType::RunFailed | EventType::RunCancelled => {
                turn.ended = true;
                turn.pending.clear();
            }
            EventType::ToolApprovalRequested => {
                if let Some(id) = request {
                    turn.approvals.insert(id.clone());
                    turn.pending.insert(id);
                }
            }
            EventType::ToolApprovalGranted | EventType::ToolApprovalDenied => {
                if let Some(id) = request {
                    turn.pending.remove(&id);
                }
            }
            _ => {}
        }
    }
    turns
}

/// An open text or reasoning message: its AG-UI id and the provider's message id.
#[derive(Debug)]
struct Open {
    id: String,
    source: Option<String>,
    /// What it streamed so far.
    streamed: String,
}

/// Whether a whole message (`source`, `content`) is the one `closed` streamed and closed
/// already (a tool call closed it before the provider said it was whole).
fn shown(
    closed: &Option<(Option<String>, String)>,
    source: &Option<String>,
    content: &str,
) -> bool {
    match closed {
        Some((Some(a), _)) if source.is_some() => source.as_deref() == Some(a.as_str()),
        Some((_, streamed)) => streamed == content,
        None => false,
    }
}

/// Translates one turn's canonical events into AG-UI events, sans-IO: feed the session's log
/// from the turn's start through [`handle_event`](Translator::handle_event) (events of other
/// turns are ignored), tell it when the log is caught up
/// ([`handle_caught_up`](Translator::handle_caught_up)) and which approvals were just
/// answered ([`handle_answered`](Translator::handle_answered)); after each, drain
/// [`poll_event`](Translator::poll_event) until `None`.
///
/// Text and reasoning stream as `TEXT_MESSAGE_*` and `REASONING_*`, each message closed
/// before anything else starts; a tool call is `TOOL_CALL_START`, `TOOL_CALL_ARGS` (its whole
/// input as JSON), `TOOL_CALL_END` when it starts, and `TOOL_CALL_RESULT` when it ends (its
/// output, its error, or `cancelled`), so no call is left looking like a frontend tool. The
/// run ends once: `RUN_FINISHED` (`success`, or `cancelled` for an interrupted turn),
/// `RUN_ERROR` for a failed turn (the provider error's message, its kind as `code`), or,
/// when the log is caught up and the turn waits for approvals, `RUN_FINISHED` with the
/// `interrupt` outcome. Ids are derived from the turn id and counters.
#[derive(Debug)]
pub struct Translator {
    thread_id: String,
    run_id: String,
    turn: String,
    out: VecDeque<Value>,
    text: Option<Open>,
    reasoning: Option<Open>,
    /// The last text and reasoning messages closed: their provider ids and streamed text.
    closed_text: Option<(Option<String>, String)>,
    closed_reasoning: Option<(Option<String>, String)>,
    minted: u64,
    tools: HashSet<String>,
    /// Approvals asked and not answered, in order: (request id, interrupt).
    pending: Vec<(String, Value)>,
    answered: HashSet<String>,
    usage: Option<Value>,
    done: bool,
    /// The client speaks AG-UI before 1.0, whose `RUN_FINISHED` has no `cancelled` outcome.
    pre_1_0: bool,
}

impl Translator {
    /// A translator for turn `turn`, reported as run `run_id` of thread `thread_id`.
    pub fn new(thread_id: &str, run_id: &str, turn: &str) -> Translator {
        Translator {
            thread_id: thread_id.to_owned(),
            run_id: run_id.to_owned(),
            turn: turn.to_owned(),
            out: VecDeque::new(),
            text: None,
            reasoning: None,
            closed_text: None,
            closed_reasoning: None,
            minted: 0,
            tools: HashSet::new(),
            pending: Vec::new(),
            answered: HashSet::new(),
            usage: None,
            done: false,
            pre_1_0: false,
        }
    }

    /// For a client of `protocol_version` (the input's `protocolVersion`; clients before
    /// 1.0 send none): before 1.0, whose outcomes are only `success` and `interrupt`, a
    /// cancelled turn ends with `RUN_ERROR {code: "cancelled"}`, as such a client reports its
    /// own abort.
    pub fn speaking(mut self, protocol_version: Option<&str>) -> Translator {
        let major = protocol_version
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse::<u64>().ok());
        self.pre_1_0 = major.is_none_or(|m| m < 1);
        self
    }

    /// The next AG-UI event, as JSON.
    pub fn poll_event(&mut self) -> Option<Value> {
        self.out.pop_front()
    }

    /// Whether the run's terminal was produced.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Approval `request_id` was answered by this run: it no longer interrupts it.
    pub fn handle_answered(&mut self, request_id: &str) {
        self.answered.insert(request_id.to_owned());
        self.pending.retain(|(id, _)| id != request_id);
    }

    /// Everything stored so far was handled: if the turn waits for approvals, the run ends
    /// with them as interrupts.
    pub fn handle_caught_up(&mut self) {
        if self.done || self.pending.is_empty() {
            return;
        }
        self.close_open();
        let interrupts: Vec<Value> = self.pending.iter().map(|(_, i)| i.clone()).collect();
        let outcome = json!({"type": "interrupt", "interrupts": interrupts});
        self.finish(outcome);
    }

    pub fn handle_event(&mut self, e: &Event) {
        if self.done || e.run_id() != Some(self.turn.as_str()) {
            return;
        }
        let data = e.data();
        let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
        let source = text("message_id");
        match e.kind() {
            EventType::MessageStreamed => {
                self.close_reasoning();
                let delta = text("delta").unwrap_or_default();
                let id = self.open_text(source);
                if !delta.is_empty() {
                    if let Some(open) = &mut self.text {
                        open.streamed.push_str(&delta);
                    }
                    self.push(
                        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta}),
                    );
                }
            }
            EventType::MessageReceived => {
                self.close_reasoning();
                let content = text("content").unwrap_or_default();
                let streamed = self
                    .text
                    .as_ref()
                    .is_some_and(|open| same_source(&open.source, &source));
                if !streamed {
                    self.close_text();
                    if !content.is_empty() && !shown(&self.closed_text, &source, &content) {
                        let id = self.open_text(source);
                        self.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": content}));
                    }
                }
                self.close_text();
            }
            EventType::ReasoningStreamed => {
                self.close_text();
                let delta = text("delta").unwrap_or_default();
                let id = self.open_reasoning(source);
                if !delta.is_empty() {
                    if let Some(open) = &mut self.reasoning {
                        open.streamed.push_str(&delta);
                    }
                    self.push(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": delta}));
                }
            }
            EventType::ReasoningReceived => {
                self.close_text();
                let content = text("content").unwrap_or_default();
                let streamed = self
                    .reasoning
                    .as_ref()
                    .is_some_and(|open| same_source(&open.source, &source));
                if !streamed {
                    self.close_reasoning();
                    if !content.is_empty() && !shown(&self.closed_reasoning, &source, &content) {
                        let id = self.open_reasoning(source);
                        self.push(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": content}));
                    }
                }
                self.close_reasoning();
            }
            EventType::ToolCallStarted => {
                self.close_open();
                self.start_tool(data);
            }
            EventType::ToolCallCompleted
            | EventType::ToolCallFailed
            | EventType::ToolCallCancelled => {
                self.close_open();
                self.start_tool(data);
                let content = match e.kind() {
                    EventType::ToolCallCompleted => match data.get("tool_output") {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => String::new(),
                        Some(other) => other.to_string(),
                    },
                    EventType::ToolCallFailed => text("error").unwrap_or_else(|| "failed".into()),
                    _ => format!("cancelled ({})", text("reason").unwrap_or_default()),
                };
                if let Some(call) = text("tool_call_id") {
                    let id = format!("{}-result-{call}", self.turn);
                    self.push(json!({"type": "TOOL_CALL_RESULT", "messageId": id,
                        "toolCallId": call, "content": content, "role": "tool"}));
                }
            }
            EventType::ToolApprovalRequested => {
                self.close_open();
                let Some(request) = text("request_id") else {
                    return;
                };
                self.start_tool(data);
                if self.answered.contains(&request) {
                    return;
                }
                let tool = text("tool_name").unwrap_or_else(|| "the tool".into());
                let message = match data
                    .get("tool_input")
                    .and_then(|i| i.get("command"))
                    .and_then(Value::as_str)
                {
                    Some(command) => format!("Allow {tool}: {command}?"),
                    None => format!("Allow {tool}?"),
                };
                let mut interrupt = json!({
                    "id": request,
                    "reason": "tool_call",
                    "message": message,
                    "responseSchema": {
                        "type": "object",
                        "properties": {"approved": {"type": "boolean"}},
                        "required": ["approved"],
                    },
                });
                if let Some(call) = text("tool_call_id") {
                    interrupt["toolCallId"] = json!(call);
                }
                self.pending.push((request, interrupt));
            }
            EventType::ToolApprovalGranted | EventType::ToolApprovalDenied => {
                if let Some(request) = text("request_id") {
                    self.pending.retain(|(id, _)| *id != request);
                }
            }
            EventType::TokenUsageUpdated => {
                let count = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
                let (input, output) = (count("input_tokens"), count("output_tokens"));
                self.usage = Some(json!({
                    "provider": e.provider().as_str(),
                    "inputTokens": input,
                    "outputTokens": output,
                    "totalTokens": input + output,
                }));
            }
            EventType::RunCompleted => {
                self.close_open();
                let mut outcome = json!({"type": "RUN_FINISHED", "outcome": {"type": "success"}});
                if let Some(result) = text("result") {
                    outcome["result"] = json!(result);
                }
                self.finish_with(outcome);
            }
            EventType::RunCancelled if self.pre_1_0 => {
                self.close_open();
                let reason = text("reason").unwrap_or_else(|| "interrupted".into());
                let message = format!("the turn was cancelled ({reason})");
                self.push(json!({"type": "RUN_ERROR", "message": message, "code": "cancelled"}));
                self.pending.clear();
                self.done = true;
            }
            EventType::RunCancelled => {
                self.close_open();
                self.finish(json!({"type": "cancelled"}));
            }
            EventType::RunFailed => {
                self.close_open();
                let error = data.get("provider_error");
                let message = error
                    .and_then(|p| p.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| text("error_message"))
                    .unwrap_or_else(|| "the turn failed".into());
                let code = error
                    .and_then(|p| p.get("kind"))
                    .and_then(Value::as_str)
                    .unwrap_or("run_failed");
                self.push(json!({"type": "RUN_ERROR", "message": message, "code": code}));
                self.pending.clear();
                self.done = true;
            }
            _ => {}
        }
    }

    fn push(&mut self, event: Value) {
        self.out.push_back(event);
    }

    fn mint(&mut self, what: &str) -> String {
        self.minted += 1;
        format!("{}-{what}-{}", self.turn, self.minted)
    }

    /// The open text message for `source`, opened if needed.
    fn open_text(&mut self, source: Option<String>) -> String {
        if let Some(open) = &self.text {
            if same_source(&open.source, &source) {
                return open.id.clone();
            }
            self.close_text();
        }
        let id = self.mint("text");
        self.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
        self.text = Some(Open {
            id: id.clone(),
            source,
            streamed: String::new(),
        });
        id
    }

    fn open_reasoning(&mut self, source: Option<String>) -> String {
        if let Some(open) = &self.reasoning {
            if same_source(&open.source, &source) {
                return open.id.clone();
            }
            self.close_reasoning();
        }
        let id = self.mint("reasoning");
        self.push(json!({"type": "REASONING_START", "messageId": id}));
        self.push(json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}));
        self.reasoning = Some(Open {
            id: id.clone(),
            source,
            streamed: String::new(),
        });
        id
    }

    fn close_text(&mut self) {
        if let Some(open) = self.text.take() {
            self.push(json!({"type": "TEXT_MESSAGE_END", "messageId": open.id}));
            self.closed_text = Some((open.source, open.streamed));
        }
    }

    fn close_reasoning(&mut self) {
        if let Some(open) = self.reasoning.take() {
            self.push(json!({"type": "REASONING_MESSAGE_END", "messageId": open.id}));
            self.push(json!({"type": "REASONING_END", "messageId": open.id}));
            self.closed_reasoning = Some((open.source, open.streamed));
        }
    }

    fn close_open(&mut self) {
        self.close_text();
        self.close_reasoning();
    }

    /// `TOOL_CALL_START`, `_ARGS`, `_END` for the call `data` names, once per call.
    fn start_tool(&mut self, data: &Map<String, Value>) {
        let Some(call) = data.get("tool_call_id").and_then(Value::as_str) else {
            return;
        };
        if !self.tools.insert(call.to_owned()) {
            return;
        }
        let name = data
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("tool");
        self.push(json!({"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": name}));
        match data.get("tool_input") {
            None | Some(Value::Null) => {}
            Some(input) => {
                self.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": input.to_string()}));
            }
        }
        self.push(json!({"type": "TOOL_CALL_END", "toolCallId": call}));
    }

    fn finish(&mut self, outcome: Value) {
        self.finish_with(json!({"type": "RUN_FINISHED", "outcome": outcome}));
    }

    /// Ends the run with `finished` (a `RUN_FINISHED` without ids): the ids and usage added.
    fn finish_with(&mut self, mut finished: Value) {
        finished["threadId"] = json!(self.thread_id);
        finished["runId"] = json!(self.run_id);
        if let Some(usage) = self
            .usage
            .as_ref()
            .filter(|_| finished["outcome"]["type"] == "success")
        {
            finished["usage"] = json!([usage]);
        }
        self.push(finished);
        self.pending.clear();
        self.done = true;
    }
}

/// Two message ids name the same message unless both are known and differ.
fn same_source(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The conversation a log holds, as AG-UI messages for a `MESSAGES_SNAPSHOT`: each turn's
/// prompt as a `user` message (the client's id, in `names` by turn, for the turns this
/// server started for a client, else `<turn>-user`), then what [`Translator`] makes of the turn,
/// applied as a client applies it (assistant text, reasoning, a tool call as an assistant
/// message with the call's id, its result as a `tool` message). Same ids as the streams.
pub fn conversation(events: &[Event], names: &HashMap<String, String>) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::new();
    let mut current: Option<Translator> = None;
    for e in events {
        let Some(run) = e.run_id() else { continue };
        if current.as_ref().is_none_or(|t| t.turn != run) {
            current = Some(Translator::new("", "", run));
        }
        let translator = current.as_mut().expect("set above");
        if e.kind() == EventType::MessageSent {
            let content = e.data_str("content").unwrap_or_default();
            let id = names
                .get(run)
                .cloned()
                .unwrap_or_else(|| user_message_id(run));
            messages.push(json!({"id": id, "role": "user", "content": content}));
            continue;
        }
        translator.handle_event(e);
        while let Some(event) = translator.poll_event() {
            apply(&mut messages, &event);
        }
    }
    messages
}

/// Applies one AG-UI event to a list of messages, as a client does.
fn apply(messages: &mut Vec<Value>, event: &Value) {
    let field = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
    let find = |messages: &mut Vec<Value>, id: &str| {
        messages
            .iter_mut()
            .rev()
            .position(|m| m["id"] == id)
            .map(|i| messages.len() - 1 - i)
    };
    match field("type") {
        "TEXT_MESSAGE_START" => {
            messages.push(json!({"id": field("messageId"), "role": "assistant", "content": ""}))
        }
        "REASONING_MESSAGE_START" => {
            messages.push(json!({"id": field("messageId"), "role": "reasoning", "content": ""}))
        }
        "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => {
            if let Some(i) = find(messages, field("messageId")) {
                let text = messages[i]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                messages[i]["content"] = json!(text + field("delta"));
            }
        }
        "TOOL_CALL_START" => messages.push(json!({
            "id": field("toolCallId"),
            "role": "assistant",
            "toolCalls": [{"id": field("toolCallId"), "type": "function",
                "function": {"name": field("toolCallName"), "arguments": ""}}],
        })),
        "TOOL_CALL_ARGS" => {
            if let Some(i) = find(messages, field("toolCallId")) {
                let call = &mut messages[i]["toolCalls"][0]["function"]["arguments"];
                *call = json!(call.as_str().unwrap_or_default().to_owned() + field("delta"));
            }
        }
        "TOOL_CALL_RESULT" => messages.push(json!({
            "id": field("messageId"),
            "role": "tool",
            "toolCallId": field("toolCallId"),
            "content": event["content"],
        })),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{EventInit, Provider};
    use crate::core::time::Timestamp;
    use expect_test::{expect, Expect};

    /// `(sequence, type, run, data)` → an event of session `ses_1`.
    fn event(seq: u64, kind: &str, run: &str, data: Value) -> Event {
        let kind = EventType::parse(kind).expect("a type");
        let mut init = EventInit::new(kind, "ses_1", Provider::Demo, Timestamp::EPOCH);
        init.sequence = seq;
        init.run_id = (!run.is_empty()).then(|| run.to_owned());
        init.data = data.as_object().cloned().unwrap_or_default();
        Event::new(init).expect("a valid event")
    }

    fn log(script: &[(&str, &str, Value)]) -> Vec<Event> {
        script
            .iter()
            .enumerate()
            .map(|(i, (kind, run, data))| event(i as u64 + 1, kind, run, data.clone()))
            .collect()
    }

    /// Feeds `script` (then caught up) to a translator of turn `t1`: one line per AG-UI event.
    fn check(script: &[(&str, &str, Value)], expect: Expect) {
        check_speaking(Some("1.0"), script, expect);
    }

    /// [`check`] for a client of `protocol`.
    fn check_speaking(protocol: Option<&str>, script: &[(&str, &str, Value)], expect: Expect) {
        let mut translator = Translator::new("th", "r1", "t1").speaking(protocol);
        let mut lines = Vec::new();
        let mut drain = |t: &mut Translator| {
            while let Some(mut e) = t.poll_event() {
                let kind = e["type"].as_str().unwrap().to_owned();
                e.as_object_mut().unwrap().remove("type");
                lines.push(format!("{kind} {e}"));
            }
        };
        for e in log(script) {
            translator.handle_event(&e);
            drain(&mut translator);
        }
        translator.handle_caught_up();
        drain(&mut translator);
        if lines.is_empty() {
            lines.push("(nothing)".into());
        }
        expect.assert_eq(&(lines.join("\n") + "\n"));
    }

    #[test]
    fn streamed_text_and_reasoning() {
        check(
            &[
                ("message_sent", "t1", json!({"content": "hi"})),
                ("run_started", "t1", json!({})),
                (
                    "reasoning_streamed",
                    "t1",
                    json!({"delta": "hm", "message_id": "m1"}),
                ),
                (
                    "reasoning_received",
                    "t1",
                    json!({"content": "hm", "message_id": "m1"}),
                ),
                (
                    "message_streamed",
                    "t1",
                    json!({"delta": "Hel", "message_id": "m1"}),
                ),
                (
                    "message_streamed",
                    "t1",
                    json!({"delta": "lo", "message_id": "m1"}),
                ),
                (
                    "message_received",
                    "t1",
                    json!({"content": "Hello", "message_id": "m1"}),
                ),
                (
                    "token_usage_updated",
                    "t1",
                    json!({"input_tokens": 3, "output_tokens": 4}),
                ),
                ("run_completed", "t1", json!({"result": "Hello"})),
            ],
            expect![[r#"
                REASONING_START {"messageId":"t1-reasoning-1"}
                REASONING_MESSAGE_START {"messageId":"t1-reasoning-1","role":"reasoning"}
                REASONING_MESSAGE_CONTENT {"delta":"hm","messageId":"t1-reasoning-1"}
                REASONING_MESSAGE_END {"messageId":"t1-reasoning-1"}
                REASONING_END {"messageId":"t1-reasoning-1"}
                TEXT_MESSAGE_START {"messageId":"t1-text-2","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"Hel","messageId":"t1-text-2"}
                TEXT_MESSAGE_CONTENT {"delta":"lo","messageId":"t1-text-2"}
                TEXT_MESSAGE_END {"messageId":"t1-text-2"}
                RUN_FINISHED {"outcome":{"type":"success"},"result":"Hello","runId":"r1","threadId":"th","usage":[{"inputTokens":3,"outputTokens":4,"provider":"demo","totalTokens":7}]}
            "#]],
        );
    }

    #[test]
    fn unstreamed_messages_and_other_turns() {
        check(
            &[
                ("message_received", "t0", json!({"content": "not ours"})),
                (
                    "message_received",
                    "t1",
                    json!({"content": "whole", "message_id": "a"}),
                ),
                (
                    "message_streamed",
                    "t1",
                    json!({"delta": "one", "message_id": "b"}),
                ),
                (
                    "message_streamed",
                    "t1",
                    json!({"delta": "two", "message_id": "c"}),
                ),
                (
                    "message_received",
                    "t1",
                    json!({"content": "", "message_id": "c", "discarded": true}),
                ),
                ("message_received", "t1", json!({"content": ""})),
                ("run_completed", "t1", json!({})),
                (
                    "message_received",
                    "t1",
                    json!({"content": "after the end"}),
                ),
            ],
            expect![[r#"
                TEXT_MESSAGE_START {"messageId":"t1-text-1","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"whole","messageId":"t1-text-1"}
                TEXT_MESSAGE_END {"messageId":"t1-text-1"}
                TEXT_MESSAGE_START {"messageId":"t1-text-2","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"one","messageId":"t1-text-2"}
                TEXT_MESSAGE_END {"messageId":"t1-text-2"}
                TEXT_MESSAGE_START {"messageId":"t1-text-3","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"two","messageId":"t1-text-3"}
                TEXT_MESSAGE_END {"messageId":"t1-text-3"}
                RUN_FINISHED {"outcome":{"type":"success"},"runId":"r1","threadId":"th"}
            "#]],
        );
    }

    #[test]
    fn a_message_closed_by_a_tool_call_is_not_repeated_when_it_is_whole() {
        check(
            &[
                (
                    "message_streamed",
                    "t1",
                    json!({"delta": "Let me", "message_id": "m1"}),
                ),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c1", "tool_name": "Read"}),
                ),
                (
                    "message_received",
                    "t1",
                    json!({"content": "Let me", "message_id": "m1"}),
                ),
                ("reasoning_streamed", "t1", json!({"delta": "hm"})),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c2", "tool_name": "Read"}),
                ),
                ("reasoning_received", "t1", json!({"content": "hm"})),
                (
                    "message_received",
                    "t1",
                    json!({"content": "Other", "message_id": "m2"}),
                ),
            ],
            expect![[r#"
                TEXT_MESSAGE_START {"messageId":"t1-text-1","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"Let me","messageId":"t1-text-1"}
                TEXT_MESSAGE_END {"messageId":"t1-text-1"}
                TOOL_CALL_START {"toolCallId":"c1","toolCallName":"Read"}
                TOOL_CALL_END {"toolCallId":"c1"}
                REASONING_START {"messageId":"t1-reasoning-2"}
                REASONING_MESSAGE_START {"messageId":"t1-reasoning-2","role":"reasoning"}
                REASONING_MESSAGE_CONTENT {"delta":"hm","messageId":"t1-reasoning-2"}
                REASONING_MESSAGE_END {"messageId":"t1-reasoning-2"}
                REASONING_END {"messageId":"t1-reasoning-2"}
                TOOL_CALL_START {"toolCallId":"c2","toolCallName":"Read"}
                TOOL_CALL_END {"toolCallId":"c2"}
                TEXT_MESSAGE_START {"messageId":"t1-text-3","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"Other","messageId":"t1-text-3"}
                TEXT_MESSAGE_END {"messageId":"t1-text-3"}
            "#]],
        );
    }

    #[test]
    fn tool_calls_get_one_start_and_a_result() {
        let input = json!({"command": "ls"});
        check(
            &[
                ("message_streamed", "t1", json!({"delta": "Let me look"})),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c1", "tool_name": "Bash", "tool_input": input}),
                ),
                (
                    "tool_call_completed",
                    "t1",
                    json!({"tool_call_id": "c1", "tool_name": "Bash", "tool_input": input, "tool_output": "a\nb"}),
                ),
                (
                    "tool_call_completed",
                    "t1",
                    json!({"tool_call_id": "c2", "tool_name": "Read", "tool_output": {"lines": 2}}),
                ),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c3", "tool_name": "Bash", "tool_input": input}),
                ),
                (
                    "tool_call_failed",
                    "t1",
                    json!({"tool_call_id": "c3", "error": "exit 1"}),
                ),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c4", "tool_name": "Bash", "tool_input": null}),
                ),
                (
                    "tool_call_cancelled",
                    "t1",
                    json!({"tool_call_id": "c4", "reason": "run_cancelled"}),
                ),
                ("run_cancelled", "t1", json!({"reason": "interrupted"})),
            ],
            expect![[r#"
                TEXT_MESSAGE_START {"messageId":"t1-text-1","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"Let me look","messageId":"t1-text-1"}
                TEXT_MESSAGE_END {"messageId":"t1-text-1"}
                TOOL_CALL_START {"toolCallId":"c1","toolCallName":"Bash"}
                TOOL_CALL_ARGS {"delta":"{\"command\":\"ls\"}","toolCallId":"c1"}
                TOOL_CALL_END {"toolCallId":"c1"}
                TOOL_CALL_RESULT {"content":"a\nb","messageId":"t1-result-c1","role":"tool","toolCallId":"c1"}
                TOOL_CALL_START {"toolCallId":"c2","toolCallName":"Read"}
                TOOL_CALL_END {"toolCallId":"c2"}
                TOOL_CALL_RESULT {"content":"{\"lines\":2}","messageId":"t1-result-c2","role":"tool","toolCallId":"c2"}
                TOOL_CALL_START {"toolCallId":"c3","toolCallName":"Bash"}
                TOOL_CALL_ARGS {"delta":"{\"command\":\"ls\"}","toolCallId":"c3"}
                TOOL_CALL_END {"toolCallId":"c3"}
                TOOL_CALL_RESULT {"content":"exit 1","messageId":"t1-result-c3","role":"tool","toolCallId":"c3"}
                TOOL_CALL_START {"toolCallId":"c4","toolCallName":"Bash"}
                TOOL_CALL_END {"toolCallId":"c4"}
                TOOL_CALL_RESULT {"content":"cancelled (run_cancelled)","messageId":"t1-result-c4","role":"tool","toolCallId":"c4"}
                RUN_FINISHED {"outcome":{"type":"cancelled"},"runId":"r1","threadId":"th"}
            "#]],
        );
    }

    #[test]
    fn a_pending_approval_ends_the_run_as_an_interrupt_once_caught_up() {
        let input = json!({"command": "ls"});
        check(
            &[
                ("message_streamed", "t1", json!({"delta": "Asking"})),
                (
                    "tool_approval_requested",
                    "t1",
                    json!({"request_id": "q1", "tool_call_id": "c1", "tool_name": "Bash", "tool_input": input}),
                ),
                (
                    "tool_call_started",
                    "t1",
                    json!({"tool_call_id": "c1", "tool_name": "Bash", "tool_input": input}),
                ),
            ],
            expect![[r#"
                TEXT_MESSAGE_START {"messageId":"t1-text-1","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"Asking","messageId":"t1-text-1"}
                TEXT_MESSAGE_END {"messageId":"t1-text-1"}
                TOOL_CALL_START {"toolCallId":"c1","toolCallName":"Bash"}
                TOOL_CALL_ARGS {"delta":"{\"command\":\"ls\"}","toolCallId":"c1"}
                TOOL_CALL_END {"toolCallId":"c1"}
                RUN_FINISHED {"outcome":{"interrupts":[{"id":"q1","message":"Allow Bash: ls?","reason":"tool_call","responseSchema":{"properties":{"approved":{"type":"boolean"}},"required":["approved"],"type":"object"},"toolCallId":"c1"}],"type":"interrupt"},"runId":"r1","threadId":"th"}
            "#]],
        );
        // Answered in the log before it is caught up: no interrupt; the run goes on.
        check(
            &[
                (
                    "tool_approval_requested",
                    "t1",
                    json!({"request_id": "q1", "tool_name": "Write"}),
                ),
                ("tool_approval_denied", "t1", json!({"request_id": "q1"})),
            ],
            expect![[r#"
                (nothing)
            "#]],
        );
    }

    #[test]
    fn a_failed_turn_is_a_run_error_with_the_provider_kind() {
        check(
            &[
                ("message_streamed", "t1", json!({"delta": "par"})),
                (
                    "run_failed",
                    "t1",
                    json!({"error_message": "API Error: 401",
                    "provider_error": {"kind": "authentication_failed", "message": "invalid x-api-key"}}),
                ),
            ],
            expect![[r#"
                TEXT_MESSAGE_START {"messageId":"t1-text-1","role":"assistant"}
                TEXT_MESSAGE_CONTENT {"delta":"par","messageId":"t1-text-1"}
                TEXT_MESSAGE_END {"messageId":"t1-text-1"}
                RUN_ERROR {"code":"authentication_failed","message":"invalid x-api-key"}
            "#]],
        );
        check(
            &[(
                "run_failed",
                "t1",
                json!({"error_message": "the process exited"}),
            )],
            expect![[r#"
                RUN_ERROR {"code":"run_failed","message":"the process exited"}
            "#]],
        );
    }

    #[test]
    fn clients_before_1_0_get_a_cancelled_turn_as_an_error() {
        let script = [("run_cancelled", "t1", json!({"reason": "interrupted"}))];
        for protocol in [None, Some("0.0.47"), Some("x")] {
            check_speaking(
                protocol,
                &script,
                expect![[r#"
                    RUN_ERROR {"code":"cancelled","message":"the turn was cancelled (interrupted)"}
                "#]],
            );
        }
        check_speaking(
            Some("1.2"),
            &script,
            expect![[r#"
                RUN_FINISHED {"outcome":{"type":"cancelled"},"runId":"r1","threadId":"th"}
            "#]],
        );
    }

    #[test]
    fn answered_approvals_do_not_interrupt_again() {
        let script = log(&[(
            "tool_approval_requested",
            "t1",
            json!({"request_id": "q1", "tool_call_id": "c1", "tool_name": "Bash"}),
        )]);
        let mut translator = Translator::new("th", "r2", "t1");
        translator.handle_answered("q1");
        translator.handle_event(&script[0]);
        translator.handle_caught_up();
        let types: Vec<Value> = std::iter::from_fn(|| translator.poll_event())
            .map(|e| e["type"].clone())
            .collect();
        assert_eq!(types, [json!("TOOL_CALL_START"), json!("TOOL_CALL_END")]);
        assert!(!translator.is_done());
    }

    #[test]
    fn the_conversation_uses_the_stream_ids() {
        let events = log(&[
            ("session_created", "", json!({})),
            ("message_sent", "t1", json!({"content": "list"})),
            ("message_streamed", "t1", json!({"delta": "Sure"})),
            (
                "tool_call_started",
                "t1",
                json!({"tool_call_id": "c1", "tool_name": "Bash", "tool_input": {"command": "ls"}}),
            ),
            (
                "tool_call_completed",
                "t1",
                json!({"tool_call_id": "c1", "tool_output": "a"}),
            ),
            ("message_received", "t1", json!({"content": "Done"})),
            ("run_completed", "t1", json!({})),
            ("message_sent", "t2", json!({"content": "again"})),
        ]);
        let names = HashMap::from([("t2".to_owned(), "u2".to_owned())]);
        let got: Vec<String> = conversation(&events, &names)
            .iter()
            .map(Value::to_string)
            .collect();
        expect![[r#"
            {"content":"list","id":"t1-user","role":"user"}
            {"content":"Sure","id":"t1-text-1","role":"assistant"}
            {"id":"c1","role":"assistant","toolCalls":[{"function":{"arguments":"{\"command\":\"ls\"}","name":"Bash"},"id":"c1","type":"function"}]}
            {"content":"a","id":"t1-result-c1","role":"tool","toolCallId":"c1"}
            {"content":"Done","id":"t1-text-2","role":"assistant"}
            {"content":"again","id":"u2","role":"user"}
        "#]]
        .assert_eq(&(got.join("\n") + "\n"));
        let turns = summarize(&events);
        assert_eq!(
            turns
                .iter()
                .map(|t| (t.id.as_str(), t.start, t.ended))
                .collect::<Vec<_>>(),
            [("t1", 2, true), ("t2", 8, false)]
        );
    }

    #[test]
    fn threads_name_sessions() {
        let id = session_for_thread("thread-1");
        assert!(crate::core::wire::is_session_id(&id), "{id}");
        assert_eq!(id, session_for_thread("thread-1"));
        assert_ne!(id, session_for_thread("thread-2"));
        let entry = |status: &str, payload: Value| -> ResumeEntry {
            serde_json::from_value(
                json!({"interruptId": "q", "status": status, "payload": payload}),
            )
            .unwrap()
        };
        assert_eq!(
            entry("resolved", json!({"approved": true})).decision(),
            Decision::Allow
        );
        assert_eq!(
            entry("resolved", json!({"approved": false})).decision(),
            Decision::Deny
        );
        assert_eq!(entry("resolved", Value::Null).decision(), Decision::Deny);
        assert_eq!(
            entry("cancelled", json!({"approved": true})).decision(),
            Decision::Deny
        );
        assert_eq!(
            text_of(
                &json!([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}])
            ),
            "a\nb"
        );
    }
}
