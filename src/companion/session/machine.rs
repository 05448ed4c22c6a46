//! One hosted session's rules, sans-IO: [`Session`].
//!
//! The agent's output goes through the pipeline normalizer → user-echo filter →
//! [`TurnProjector`] (policy `drop`) into store batches; the session keeps the live state
//! (runtime, modes, commands, pending approvals), turns user requests into stdin bytes with
//! the adapter (refusing what the adapter cannot do), mints turn ids, ends what is active when
//! the process exits, and queues every store write in its [`StoreQueue`].
//!
//! Driving rule: input through `handle_*`, each with the time as `now_ms`; after each, the
//! caller drains [`Session::poll_stdin`] (bytes for the agent, in order),
//! [`Session::poll_write`] (the store write to start; one at a time, answered by
//! [`Session::handle_written`]), [`Session::poll_reply`], [`Session::poll_action`] and
//! [`Session::poll_note`] until `None`, and sleeps until [`Session::poll_timeout`] at most.
//! It reads the agent's output only while [`Session::wants_output`] holds, and stops when
//! [`Session::is_done`]. The adapter is only asked for protocol bytes and facts here; starting
//! the process and its event stream is the host's. No I/O, no clock, no randomness: ids are
//! derived from the `seed` the host draws.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::{StoreNote, StoreOp, StoreQueue, StoreQueueConfig, Written};
use crate::companion::adapter::{Adapter, Thinking};
use crate::companion::store::{SessionState, StoreError};
use crate::core::dedup::UserEchoFilter;
use crate::core::error::ErrorCode;
use crate::core::event::{Event, EventId, EventInit, EventType};
use crate::core::lifecycle::{Disposition, LifecycleConfig, Policy, TurnProjector};
use crate::core::normalize::{Config, Normalizer};
use crate::core::provider_error::{ErrorKind, ProviderError, StderrLimits};
use crate::core::time::Timestamp;
use crate::core::wire::{Decision, StoreStatus};

/// A refused command, with a stable code for the wire and the HTTP API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CommandError {
    pub code: ErrorCode,
    pub message: String,
}

impl CommandError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn unknown_session(id: &str) -> CommandError {
        CommandError::new(ErrorCode::UnknownSession, format!("no session {id:?}"))
    }

    pub(crate) fn closed(id: &str) -> CommandError {
        CommandError::new(
            ErrorCode::NotConnected,
            format!("session {id:?} is not running"),
        )
    }

    pub(crate) fn unsupported(provider: &str, what: &str) -> CommandError {
        CommandError::new(
            ErrorCode::Unsupported,
            format!("the {provider} adapter cannot {what}"),
        )
    }
}

impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> CommandError {
        match e {
            StoreError::UnknownSession(id) => CommandError::unknown_session(&id),
            other => CommandError::new(ErrorCode::StoreError, other.to_string()),
        }
    }
}

/// A user's request to the session.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Starts a foreground turn; answered with its id. With a turn id a client chose, a turn
    /// of that id this session already started is answered again, never started twice.
    StartTurn {
        prompt: String,
        turn_id: Option<String>,
    },
    /// Interrupts the turn in progress; with a turn id, only that turn (and a turn of that id
    /// that already ended counts as done).
    Interrupt(Option<String>),
    Answer(String, Decision),
    SetMode(String),
    SetModel(Option<String>, Option<Thinking>),
    /// The live state; answered with [`Response::Described`].
    Describe,
    /// Stop the agent and end the session as closed; answered once the end is stored (or the
    /// store is unavailable: it is stored when the store is back).
    Close,
    /// Another companion took the session over: stop the agent, write nothing more.
    Abandon,
}

/// A successful answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    Turn(String),
    Done,
    Described(Value),
}

/// The host's correlation of a request with its reply.
pub type ReplyId = u64;

/// What the host must do to the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Close its stdin and kill it.
    Kill,
}

/// What the host should log (and count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    Store(StoreNote),
    /// The projector dropped a provider event (after a terminal, a stale terminal, …).
    Dropped {
        event_id: String,
        kind: String,
    },
    /// Bytes for the agent could not be written.
    Stdin(String),
    /// Events given up on: never stored.
    Lost {
        events: usize,
        why: &'static str,
    },
}

/// How a [`Session`] runs.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub id: String,
    /// Random, drawn by the host: the source of minted turn and event ids.
    pub seed: String,
    pub cwd: PathBuf,
    pub cancel_grace_ms: i64,
    pub autonomous_idle_limit_ms: i64,
    pub foreground_idle_limit_ms: i64,
    pub stall_after_ms: i64,
    pub stderr_limits: StderrLimits,
    /// Bound on the stderr kept (the oldest bytes go first).
    pub stderr_keep_bytes: usize,
    pub store_queue: StoreQueueConfig,
    /// After [`Session::handle_shutdown`], how long unstored writes are still tried.
    pub store_drain_ms: i64,
    /// Bytes waiting for the agent's stdin beyond which requests are refused (`agent_busy`):
    /// an agent that does not read its input cannot grow them without bound.
    pub max_stdin_bytes: usize,
}

impl SessionConfig {
    pub fn new(id: &str, seed: &str) -> SessionConfig {
        SessionConfig {
            id: id.to_owned(),
            seed: seed.to_owned(),
            cwd: PathBuf::from("."),
            cancel_grace_ms: 2_000,
            autonomous_idle_limit_ms: 10 * 60_000,
            foreground_idle_limit_ms: crate::core::lifecycle::DEFAULT_FOREGROUND_IDLE_LIMIT_MS,
            stall_after_ms: crate::core::lifecycle::DEFAULT_STALL_AFTER_MS,
            stderr_limits: StderrLimits::default(),
            stderr_keep_bytes: 256 << 10,
            store_queue: StoreQueueConfig::default(),
            store_drain_ms: 10_000,
            max_stdin_bytes: 4 << 20,
        }
    }
}

/// One hosted session's state and rules; see the module docs for the driving rule.
pub struct Session {
    id: String,
    seed: String,
    minted: u64,
    cwd: PathBuf,
    adapter: Box<dyn Adapter>,
    normalizer: Normalizer,
    projector: TurnProjector,
    echo: UserEchoFilter,
    /// Pending approval requests: id -> the request's data.
    approvals: HashMap<String, Value>,
    /// Approvals answered, with the decision: the same answer again is done, not an error.
    answered: HashMap<String, Decision>,
    /// Every turn this process started, so a repeated `StartTurn` with the same id starts
    /// nothing (the host checks the log for turns of earlier processes).
    turns: HashSet<String>,
    stderr: VecDeque<u8>,
    stderr_keep: usize,
    stderr_limits: StderrLimits,
    interrupts: u64,
    provider_session_seen: bool,
    /// Stdout split into lines for [`Adapter::observe`].
    lines: LineSplitter,
    /// Stdout that is only a log, split into lines for [`Adapter::observe_log`].
    log_lines: LineSplitter,
    /// The normalizer reads whole lines, ours included ([`Adapter::feeds_requests`]).
    feed_lines: bool,
    /// Model, version, cwd, the CLI's session id: from `session_started`, `model_changed`.
    runtime: Map<String, Value>,
    current_mode: Option<String>,
    /// Slash commands from `session_started`, when the adapter does not track them.
    commands: Option<Value>,
    /// Why the session must end, when a request to the agent failed for good.
    fatal: Option<ProviderError>,
    /// Another companion took the session over: nothing more is written to it.
    abandoned: bool,
    queue: StoreQueue,
    stdin: VecDeque<Vec<u8>>,
    stdin_bytes: usize,
    max_stdin_bytes: usize,
    stdin_open: bool,
    /// The process is being stopped (close, abandon, a fatal error).
    killing: bool,
    exited: bool,
    /// The close (or abandon) request, answered once the end is settled.
    closing: Option<ReplyId>,
    closed_by_user: bool,
    store_drain_ms: i64,
    give_up_at: Option<i64>,
    replies: VecDeque<(ReplyId, Result<Response, CommandError>)>,
    actions: VecDeque<Action>,
    notes: VecDeque<Note>,
}

impl Session {
    /// A session whose process was just started; [`Session::handle_start`] comes next.
    pub fn new(config: SessionConfig, adapter: Box<dyn Adapter>) -> Session {
        let mut normalizer_config = Config::new(&config.id);
        normalizer_config.source = config.seed.chars().take(16).collect();
        let mut lifecycle = LifecycleConfig::new(&config.id, adapter.provider());
        lifecycle.policy = Policy::Drop;
        lifecycle.cancel_grace_ms = config.cancel_grace_ms;
        lifecycle.autonomous_idle_limit_ms = config.autonomous_idle_limit_ms;
        lifecycle.foreground_idle_limit_ms = config.foreground_idle_limit_ms;
        lifecycle.stall_after_ms = config.stall_after_ms;
        let mut projector = TurnProjector::new(lifecycle);
        projector.mark_connected();
        Session {
            id: config.id,
            seed: config.seed,
            minted: 0,
            cwd: config.cwd,
            normalizer: Normalizer::new(Some(adapter.format()), normalizer_config),
            feed_lines: adapter.feeds_requests(),
            adapter,
            projector,
            echo: UserEchoFilter::default(),
            approvals: HashMap::new(),
            answered: HashMap::new(),
            turns: HashSet::new(),
            stderr: VecDeque::new(),
            stderr_keep: config.stderr_keep_bytes,
            stderr_limits: config.stderr_limits,
            interrupts: 0,
            provider_session_seen: false,
            lines: LineSplitter::default(),
            log_lines: LineSplitter::default(),
            runtime: Map::new(),
            current_mode: None,
            commands: None,
            fatal: None,
            abandoned: false,
            queue: StoreQueue::new(config.store_queue),
            stdin: VecDeque::new(),
            stdin_bytes: 0,
            max_stdin_bytes: config.max_stdin_bytes,
            stdin_open: true,
            killing: false,
            exited: false,
            closing: None,
            closed_by_user: false,
            store_drain_ms: config.store_drain_ms,
            give_up_at: None,
            replies: VecDeque::new(),
            actions: VecDeque::new(),
            notes: VecDeque::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The working directory the agent runs in.
    pub fn cwd(&self) -> &std::path::Path {
        &self.cwd
    }

    // -----------------------------------------------------------------------------------------
    // Input.

    /// The process runs: the adapter's handshake is the first stdin.
    pub fn handle_start(&mut self, now_ms: i64) {
        let hello = self.adapter.start(&self.cwd);
        self.send(hello, now_ms);
    }

    /// Bytes of the agent's output (its stdout, or the event stream its adapter opened).
    pub fn handle_output(&mut self, bytes: &[u8], now_ms: i64) {
        let at = Timestamp::from_unix_millis(now_ms);
        if !self.feed_lines {
            self.normalizer.handle_bytes(bytes, at);
            self.flush(now_ms);
        }
        for mut line in self.lines.push(bytes) {
            let replies = self.adapter.observe(&line);
            if self.feed_lines && !self.adapter.quiet() {
                line.push(b'\n');
                self.normalizer.handle_bytes(&line, at);
                self.flush(now_ms);
            }
            self.send(replies, now_ms);
        }
        self.settle();
    }

    /// The end of the agent's output.
    pub fn handle_output_eof(&mut self, now_ms: i64) {
        let at = Timestamp::from_unix_millis(now_ms);
        if self.feed_lines {
            let rest = std::mem::take(&mut self.lines).rest();
            if !rest.is_empty() {
                let replies = self.adapter.observe(&rest);
                self.normalizer.handle_bytes(&rest, at);
                self.send(replies, now_ms);
            }
        }
        self.normalizer.handle_eof(at);
        self.flush(now_ms);
        self.settle();
    }

    /// Bytes of the stdout of an agent whose events come on a stream of its adapter's
    /// ([`Adapter::connect`]): kept like stderr, and shown to the adapter line by line
    /// ([`Adapter::observe_log`]).
    pub fn handle_stdout_log(&mut self, bytes: &[u8]) {
        self.handle_stderr(bytes);
        for line in self.log_lines.push(bytes) {
            self.adapter.observe_log(&line);
        }
    }

    /// Bytes of the agent's stderr: kept, bounded, for the `provider_error` of a process that
    /// exits.
    pub fn handle_stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend(bytes);
        let excess = self.stderr.len().saturating_sub(self.stderr_keep);
        self.stderr.drain(..excess);
    }

    /// A request the adapter made to the agent itself failed: the turn fails with it; a fatal
    /// one also ends the session (the process is killed).
    pub fn handle_request_failed(
        &mut self,
        kind: ErrorKind,
        message: String,
        fatal: bool,
        now_ms: i64,
    ) {
        let error = ProviderError::new(self.adapter.provider(), kind, message);
        let ended = self.projector.end_active(
            EventType::RunFailed,
            &Value::Object(error.to_data()),
            now_ms,
        );
        if ended == 0 && !fatal {
            let mut data = error.to_data();
            data.insert("severity".into(), json!("error"));
            let event = self.event(None, EventType::ErrorOccurred, data, now_ms);
            self.append(vec![event]);
        }
        self.flush(now_ms);
        if fatal {
            self.fatal = Some(error);
            self.kill();
        }
        self.settle();
    }

    /// `n` bytes of [`Session::poll_stdin`] reached the agent's stdin.
    pub fn handle_stdin_written(&mut self, n: usize) {
        self.stdin_bytes = self.stdin_bytes.saturating_sub(n);
    }

    /// Writing to the agent's stdin failed: what waits for it is dropped, and requests that
    /// need it are refused from now on. The process ending is what ends the session.
    pub fn handle_stdin_failed(&mut self, error: String) {
        self.stdin_open = false;
        self.stdin.clear();
        self.stdin_bytes = 0;
        self.notes.push_back(Note::Stdin(error));
    }

    /// A user's request; its answer comes out of [`Session::poll_reply`] with `reply`.
    pub fn handle_request(&mut self, reply: ReplyId, request: Request, now_ms: i64) {
        let result = match request {
            Request::Close | Request::Abandon if self.closing.is_some() => Ok(Response::Done),
            Request::Close => {
                self.closing = Some(reply);
                self.closed_by_user = true;
                self.kill();
                self.settle();
                return;
            }
            Request::Abandon => {
                self.closing = Some(reply);
                self.abandon();
                self.kill();
                self.settle();
                return;
            }
            Request::Describe => Ok(Response::Described(self.describe())),
            _ if self.exited || self.killing => Err(CommandError::closed(&self.id)),
            Request::StartTurn { prompt, turn_id } => {
                self.start_turn(prompt, turn_id, now_ms).map(Response::Turn)
            }
            Request::Interrupt(turn_id) => self.interrupt(turn_id.as_deref(), now_ms),
            Request::Answer(request_id, decision) => self.answer(request_id, decision, now_ms),
            Request::SetMode(mode) => self.set_mode(mode, now_ms),
            Request::SetModel(model, thinking) => self.set_model(model, thinking, now_ms),
        };
        self.replies.push_back((reply, result));
        self.settle();
    }

    /// The process is gone (`exit_code` `None`: killed by a signal): what is active ends, and
    /// why is recorded; the session is marked closed or failed.
    pub fn handle_exit(&mut self, exit_code: Option<i32>, now_ms: i64) {
        if !self.exited {
            self.exited = true;
            self.stdin_open = false;
            self.stdin.clear();
            self.stdin_bytes = 0;
            if !self.abandoned {
                self.finish(exit_code, now_ms);
            }
        }
        self.settle();
    }

    /// The time of [`Session::poll_timeout`] has come (or any time after).
    pub fn handle_timeout(&mut self, now_ms: i64) {
        self.projector.handle_timeout(now_ms);
        self.flush(now_ms);
        if self.give_up_at.is_some_and(|at| now_ms >= at) && !self.queue.is_empty() {
            let events = self.queue.give_up();
            self.notes.push_back(Note::Lost {
                events,
                why: "could not be stored before shutdown",
            });
        }
        self.settle();
    }

    /// The outcome of the store write [`Session::poll_write`] gave.
    pub fn handle_written(&mut self, written: Written, now_ms: i64) {
        self.queue.handle_written(written, now_ms);
        while let Some(note) = self.queue.poll_note() {
            self.notes.push_back(Note::Store(note));
        }
        self.settle();
    }

    /// The companion is shutting down: unstored writes are tried for `store_drain_ms` more.
    pub fn handle_shutdown(&mut self, now_ms: i64) {
        self.give_up_at.get_or_insert(now_ms + self.store_drain_ms);
    }

    // -----------------------------------------------------------------------------------------
    // Output.

    /// The next bytes for the agent's stdin, in order. They count against
    /// `max_stdin_bytes` until [`Session::handle_stdin_written`] says they were written.
    pub fn poll_stdin(&mut self) -> Option<Vec<u8>> {
        self.stdin.pop_front()
    }

    /// The store write to start now (at most one is in flight).
    pub fn poll_write(&mut self, now_ms: i64) -> Option<StoreOp> {
        if self.abandoned {
            return None;
        }
        self.queue.poll_write(now_ms)
    }

    pub fn poll_reply(&mut self) -> Option<(ReplyId, Result<Response, CommandError>)> {
        self.replies.pop_front()
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    pub fn poll_note(&mut self) -> Option<Note> {
        self.notes.pop_front()
    }

    /// When [`Session::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<i64> {
        let give_up = self.give_up_at.filter(|_| !self.queue.is_empty());
        [
            self.projector.poll_timeout(),
            self.queue.poll_timeout(),
            give_up,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether to read the agent's output now: not while too many events wait for the store
    /// (the agent then blocks on its pipe and nothing is lost), except while the process is
    /// being stopped (its pipe holds a bounded rest).
    pub fn wants_output(&self) -> bool {
        self.killing || !self.queue.is_full()
    }

    /// The process is gone and everything is stored (or given up on, or not ours to store).
    pub fn is_done(&self) -> bool {
        self.exited && (self.queue.is_empty() || self.abandoned)
    }

    /// Events waiting for the store.
    pub fn unstored(&self) -> usize {
        self.queue.unstored()
    }

    /// Whether the session's events reach the store (`describe`'s `store`).
    pub fn store_status(&self) -> StoreStatus {
        self.queue.status()
    }

    // -----------------------------------------------------------------------------------------
    // Rules.

    fn kill(&mut self) {
        if !self.killing {
            self.killing = true;
            self.stdin_open = false;
            self.stdin.clear();
            self.stdin_bytes = 0;
            self.actions.push_back(Action::Kill);
        }
    }

    fn abandon(&mut self) {
        self.abandoned = true;
        let events = self.queue.give_up();
        if events > 0 {
            self.notes.push_back(Note::Lost {
                events,
                why: "not stored: the session was taken over",
            });
        }
    }

    /// Answers the close once the process is gone and its end is stored, or cannot be yet.
    fn settle(&mut self) {
        if !self.exited {
            return;
        }
        let settled = self.queue.is_empty() || self.queue.is_unavailable() || self.abandoned;
        if settled {
            if let Some(reply) = self.closing.take() {
                self.replies.push_back((reply, Ok(Response::Done)));
            }
        }
    }

    /// A fresh id, derived from the seed.
    fn mint(&mut self, what: &str) -> String {
        self.minted += 1;
        let id = EventId::derive(&[&self.seed, what, &self.minted.to_string()]);
        id.as_str()["evt_".len()..].to_owned()
    }

    /// An event the companion itself emits.
    fn event(
        &mut self,
        run_id: Option<&str>,
        kind: EventType,
        data: Map<String, Value>,
        now_ms: i64,
    ) -> Event {
        let id = format!("evt_{}", self.mint("event"));
        let init = EventInit {
            id: Some(EventId::parse(&id).expect("32 lowercase hex digits")),
            run_id: run_id.map(str::to_owned),
            data,
            ..EventInit::new(
                kind,
                &self.id,
                self.adapter.provider(),
                Timestamp::from_unix_millis(now_ms),
            )
        };
        Event::new(init).expect("host events have a session id")
    }

    fn append(&mut self, events: Vec<Event>) {
        if !self.abandoned {
            self.queue.push(StoreOp::Append(events));
        }
    }

    /// Protocol bytes the adapter asked for (a handshake, an answer to the agent).
    fn send(&mut self, bytes: Vec<u8>, now_ms: i64) {
        if bytes.is_empty() {
            return;
        }
        if let Err(e) = self.write(bytes, now_ms) {
            self.notes.push_back(Note::Stdin(e.message));
        }
    }

    /// Queues bytes for the agent (and, for a decoder that reads requests, normalizes them).
    fn write(&mut self, bytes: Vec<u8>, now_ms: i64) -> Result<(), CommandError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if !self.stdin_open {
            return Err(CommandError::new(
                ErrorCode::NotConnected,
                "the agent's stdin is closed",
            ));
        }
        if self.stdin_bytes + bytes.len() > self.max_stdin_bytes {
            return Err(CommandError::new(
                ErrorCode::AgentBusy,
                format!(
                    "the agent is not reading its input ({} bytes wait for it)",
                    self.stdin_bytes
                ),
            ));
        }
        if self.feed_lines {
            self.normalizer
                .handle_bytes(&bytes, Timestamp::from_unix_millis(now_ms));
            self.flush(now_ms);
        }
        self.stdin_bytes += bytes.len();
        self.stdin.push_back(bytes);
        Ok(())
    }

    fn start_turn(
        &mut self,
        prompt: String,
        turn_id: Option<String>,
        now_ms: i64,
    ) -> Result<String, CommandError> {
        if let Some(id) = turn_id.as_ref().filter(|id| self.turns.contains(*id)) {
            return Ok(id.clone());
        }
        let turn_id = turn_id.unwrap_or_else(|| format!("turn_{}", &self.mint("turn")[..24]));
        if let Err(e) = self.projector.start_foreground(&turn_id, now_ms) {
            return Err(CommandError::new(e.code(), e.to_string()));
        }
        self.turns.insert(turn_id.clone());
        if !self.stdin_open {
            // The prompt cannot reach the agent: the turn ends at once.
            let message = "the agent's stdin is closed";
            let error =
                ProviderError::new(self.adapter.provider(), ErrorKind::StdinClosed, message);
            let data = Value::Object(error.to_data());
            self.projector
                .end_active(EventType::RunFailed, &data, now_ms);
            self.flush(now_ms);
            return Err(CommandError::new(ErrorCode::NotConnected, message));
        }
        let bytes = self.adapter.prompt(&prompt);
        self.normalizer.expect_run(&turn_id);
        self.echo.note_prompt(&turn_id, &prompt);
        let data = obj(json!({"content": prompt, "role": "user"}));
        let sent = self.event(Some(&turn_id), EventType::MessageSent, data, now_ms);
        self.append(vec![sent]);
        // A prompt is never refused for its size: it is the user's turn.
        if self.feed_lines && !bytes.is_empty() {
            self.normalizer
                .handle_bytes(&bytes, Timestamp::from_unix_millis(now_ms));
            self.flush(now_ms);
        }
        if !bytes.is_empty() {
            self.stdin_bytes += bytes.len();
            self.stdin.push_back(bytes);
        }
        Ok(turn_id)
    }

    fn interrupt(&mut self, turn: Option<&str>, now_ms: i64) -> Result<Response, CommandError> {
        if let Some(turn) = turn {
            let active = self.projector.active_turns().contains(&turn);
            if !active && self.turns.contains(turn) {
                // That turn has ended already: what was asked for holds.
                return Ok(Response::Done);
            }
            if !active {
                let msg = format!("turn {turn:?} is not running");
                return Err(CommandError::new(ErrorCode::NoActiveTurn, msg));
            }
        }
        if !self.projector.interrupt(now_ms) {
            return Err(CommandError::new(
                ErrorCode::NoActiveTurn,
                "no turn is running",
            ));
        }
        self.interrupts += 1;
        let request_id = format!("interrupt_{}", self.interrupts);
        let bytes = self.adapter.interrupt(&request_id);
        self.write(bytes, now_ms)?;
        Ok(Response::Done)
    }

    fn answer(
        &mut self,
        request_id: String,
        decision: Decision,
        now_ms: i64,
    ) -> Result<Response, CommandError> {
        if !self.approvals.contains_key(&request_id) {
            if let Some(&earlier) = self.answered.get(&request_id) {
                if earlier == decision {
                    return Ok(Response::Done);
                }
                let earlier = match earlier {
                    Decision::Allow => "allow",
                    Decision::Deny => "deny",
                };
                let msg = format!("approval {request_id:?} was already answered {earlier}");
                return Err(CommandError::new(ErrorCode::UnknownRequest, msg));
            }
        }
        let Some(request) = self.approvals.remove(&request_id) else {
            let msg = format!("no pending approval {request_id:?}");
            return Err(CommandError::new(ErrorCode::UnknownRequest, msg));
        };
        let bytes = self.adapter.answer(&request_id, decision, &request);
        if let Err(e) = self.write(bytes, now_ms) {
            self.approvals.insert(request_id, request);
            return Err(e);
        }
        self.answered.insert(request_id.clone(), decision);
        if self.adapter.reports_answers() {
            // The agent's output reports the answer.
            return Ok(Response::Done);
        }
        let kind = match decision {
            Decision::Allow => EventType::ToolApprovalGranted,
            Decision::Deny => EventType::ToolApprovalDenied,
        };
        let run = request
            .get("run_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let data =
            obj(json!({"request_id": request_id, "tool_call_id": request.get("tool_call_id")}));
        let event = self.event(run.as_deref(), kind, data, now_ms);
        self.append(vec![event]);
        Ok(Response::Done)
    }

    fn set_mode(&mut self, mode: String, now_ms: i64) -> Result<Response, CommandError> {
        let provider = self.adapter.provider().as_str();
        if !self.adapter.capabilities().set_mode {
            return Err(CommandError::unsupported(provider, "change modes"));
        }
        let modes = self.adapter.modes();
        if !modes.iter().any(|m| m.id == mode) {
            let known: Vec<&str> = modes.iter().map(|m| m.id.as_str()).collect();
            let msg = format!("unknown mode {mode:?}; this session has {known:?}");
            return Err(CommandError::new(ErrorCode::UnknownMode, msg));
        }
        let bytes = self.adapter.set_mode(&mode);
        self.write(bytes, now_ms)?;
        self.current_mode = Some(mode.clone());
        let data = obj(json!({"mode": mode, "source": "user"}));
        self.log_user_change(EventType::ModeChanged, data, now_ms);
        Ok(Response::Done)
    }

    fn set_model(
        &mut self,
        model: Option<String>,
        thinking: Option<Thinking>,
        now_ms: i64,
    ) -> Result<Response, CommandError> {
        let caps = self.adapter.capabilities();
        let provider = self.adapter.provider().as_str();
        if model.is_some() && !caps.set_model {
            return Err(CommandError::unsupported(provider, "change the model"));
        }
        if thinking.is_some() && !caps.thinking {
            return Err(CommandError::unsupported(
                provider,
                "change the thinking level",
            ));
        }
        let bytes = self.adapter.set_model(model.as_deref(), thinking);
        self.write(bytes, now_ms)?;
        let mut data = Map::new();
        data.insert("source".into(), json!("user"));
        if let Some(m) = &model {
            data.insert("model".into(), json!(m));
            self.runtime.insert("model".into(), json!(m));
        }
        if let Some(t) = thinking {
            data.insert("thinking".into(), json!(t));
            self.runtime.insert("thinking".into(), json!(t));
        }
        self.log_user_change(EventType::ModelChanged, data, now_ms);
        Ok(Response::Done)
    }

    /// Logs a change the user made (mode, model) on the active turn, if any. An adapter whose
    /// decoder reads our requests ([`Adapter::feeds_requests`]) reports it from the agent's
    /// answer instead.
    fn log_user_change(&mut self, kind: EventType, data: Map<String, Value>, now_ms: i64) {
        if self.feed_lines {
            return;
        }
        let run = self.projector.active_turns().first().map(|r| r.to_string());
        let event = self.event(run.as_deref(), kind, data, now_ms);
        self.append(vec![event]);
    }

    /// The live state `GET /api/sessions/{id}` shows.
    fn describe(&self) -> Value {
        let mut pending: Vec<&Value> = self.approvals.values().collect();
        pending.sort_by(|a, b| {
            let key = |v: &Value| v.get("request_id").map(Value::to_string);
            key(a).cmp(&key(b))
        });
        let commands = match self.adapter.commands() {
            Some(list) => Value::Array(list),
            None => self.commands.clone().unwrap_or(Value::Null),
        };
        json!({
            "runtime": self.runtime,
            "modes": self.adapter.modes(),
            "current_mode": self.adapter.current_mode().or_else(|| self.current_mode.clone()),
            "commands": commands,
            "pending_approvals": pending,
            "capabilities": self.adapter.capabilities(),
            "store": self.queue.status(),
        })
    }

    /// Moves what the normalizer and the projector produced into the store queue.
    fn flush(&mut self, now_ms: i64) {
        let mut batch = Vec::new();
        while let Some(event) = self.normalizer.poll_event() {
            if event.kind() == EventType::MessageSent && self.echo.is_echo(&event) {
                continue;
            }
            if self.projector.handle_event(&event, now_ms) != Disposition::Applied {
                continue;
            }
            self.observe(&event);
            batch.push(event.into_sequenced(0));
            batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
        }
        batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
        // Output the normalizer could not read is recorded in the log, not only on stderr.
        while let Some(d) = self.normalizer.poll_diagnostic() {
            let message = format!("unreadable provider output: {d}");
            let error = ProviderError::new(
                self.adapter.provider(),
                ErrorKind::UnreadableOutput,
                message,
            );
            let mut data = error.to_data();
            data.insert("severity".into(), json!("warning"));
            data.insert("line".into(), json!(d.line));
            data.insert("reason".into(), json!(d.kind.as_str()));
            batch.push(self.event(None, EventType::ErrorOccurred, data, now_ms));
        }
        while let Some(v) = self.projector.poll_violation() {
            self.notes.push_back(Note::Dropped {
                event_id: v.event_id.as_str().to_owned(),
                kind: format!("{:?}", v.kind),
            });
        }
        if !batch.is_empty() {
            self.append(batch);
        }
    }

    /// Side effects of provider events: pending approvals, the live state, the resume handle.
    fn observe(&mut self, event: &Event) {
        match event.kind() {
            EventType::ToolApprovalRequested => {
                if let Some(id) = event.data_str("request_id") {
                    let mut data = event.data().clone();
                    if let Some(run) = event.run_id() {
                        data.insert("run_id".into(), json!(run));
                    }
                    self.approvals.insert(id.to_owned(), Value::Object(data));
                }
            }
            EventType::SessionStarted => {
                let data = event.data();
                update_runtime(&mut self.runtime, data);
                let mode = ["permission_mode", "approval_policy", "mode"]
                    .iter()
                    .find_map(|k| data.get(*k).and_then(Value::as_str));
                if let Some(mode) = mode {
                    self.current_mode = Some(mode.to_owned());
                }
                if let Some(commands) = data.get("slash_commands") {
                    self.commands = Some(commands.clone());
                }
                if !self.provider_session_seen {
                    if let Some(handle) = event.data_str("provider_session_id") {
                        self.provider_session_seen = true;
                        (self.queue).push(StoreOp::ProviderSessionId(handle.to_owned()));
                    }
                }
            }
            EventType::ModelChanged => {
                if let Some(model) = event.data().get("model") {
                    self.runtime.insert("model".into(), model.clone());
                }
            }
            EventType::ModeChanged => {
                if let Some(mode) = event.data_str("mode") {
                    self.current_mode = Some(mode.to_owned());
                }
            }
            kind if kind.is_run_terminal() => {
                if let Some(run) = event.run_id() {
                    self.approvals
                        .retain(|_, r| r.get("run_id").and_then(Value::as_str) != Some(run));
                }
            }
            _ => {}
        }
    }

    /// The process is gone: end what is active, mark the session, record why. The turns'
    /// terminals come first, then the state, then `session_completed` / `session_failed`:
    /// whoever reads that last event also reads the state.
    fn finish(&mut self, exit_code: Option<i32>, now_ms: i64) {
        let stderr: Vec<u8> = self.stderr.iter().copied().collect();
        let stderr = String::from_utf8_lossy(&stderr);
        let provider = self.adapter.provider();
        let (state, kind, data) = if self.closed_by_user {
            self.projector.close(now_ms);
            let data = obj(json!({"reason": "closed"}));
            (SessionState::Closed, EventType::SessionCompleted, data)
        } else {
            let message = match exit_code {
                Some(0) => "the agent process exited".to_owned(),
                Some(code) => format!("the agent process exited with code {code}"),
                None => "the agent process was killed by a signal".to_owned(),
            };
            let error = self
                .fatal
                .take()
                .unwrap_or_else(|| ProviderError::new(provider, ErrorKind::ProcessExit, message))
                .with_process(exit_code, &stderr, self.stderr_limits);
            let ended = self.projector.end_active(
                EventType::RunFailed,
                &Value::Object(error.to_data()),
                now_ms,
            );
            if exit_code == Some(0) && ended == 0 {
                let data = obj(json!({"reason": "exited"}));
                (SessionState::Closed, EventType::SessionCompleted, data)
            } else {
                (
                    SessionState::Failed,
                    EventType::SessionFailed,
                    error.to_data(),
                )
            }
        };
        let ended: Vec<Event> = std::iter::from_fn(|| self.projector.poll_event()).collect();
        self.append(ended);
        let at = Timestamp::from_unix_millis(now_ms);
        self.queue.push(StoreOp::State(state, at));
        let last = self.event(None, kind, data, now_ms);
        self.append(vec![last]);
    }
}

/// The runtime fields of a `session_started` (or `model_changed`) event's data.
pub(crate) fn update_runtime(runtime: &mut Map<String, Value>, data: &Map<String, Value>) {
    for key in ["model", "version", "cwd", "provider_session_id", "agent"] {
        if let Some(v) = data.get(key).filter(|v| !v.is_null()) {
            runtime.insert(key.into(), v.clone());
        }
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Splits a byte stream into lines (without the newline). A line longer than the limit is
/// dropped whole, so that a runaway line cannot grow memory without bound.
#[derive(Default)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
    /// Inside an over-long line: skip to its end.
    skipping: bool,
}

impl LineSplitter {
    pub(crate) const MAX_LINE: usize = 16 << 20;

    /// What follows the last newline (an unterminated last line), with a newline added.
    pub(crate) fn rest(self) -> Vec<u8> {
        let mut rest = self.partial;
        if !rest.is_empty() && !self.skipping {
            rest.push(b'\n');
            return rest;
        }
        Vec::new()
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !std::mem::take(&mut self.skipping) {
                self.partial.extend_from_slice(&rest[..end]);
                lines.push(std::mem::take(&mut self.partial));
            }
            rest = &rest[end + 1..];
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > Self::MAX_LINE {
                self.partial = Vec::new();
                self.skipping = true;
            }
        }
        lines
    }
}
