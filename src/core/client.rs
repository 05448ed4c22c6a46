//! The connection half of a client, sans-IO: when to open a socket, what to send on it, when
//! it is dead, when to reconnect, and which command a reply answers. The wasm `Client` (and
//! `agentwire tail`) owns the WebSocket and the timers and does exactly what this type says;
//! the data half is a [`Projector`].
//!
//! **Driving rule.** After [`Client::new`] and after every `handle_*` call or command, drain
//! [`Client::poll_action`] (open or close a socket), [`Client::poll_transmit`] (frames to send
//! on the open socket) and [`Client::poll_reply`] (answers to commands) until `None`, then
//! arm one timer for [`Client::poll_timeout`] and call [`Client::handle_timeout`] when it
//! fires. Every socket callback carries the connection id of the [`Action::Connect`] that
//! opened it; callbacks of an older socket are ignored. Time is always an argument.
//!
//! Rules (docs/protocol.md): after any drop (a close, an error, or silence for
//! `missed_heartbeats` heartbeat periods) the client reconnects after a backoff that doubles
//! from `backoff_min_ms` to `backoff_max_ms`, with jitter drawn from a seeded generator (the
//! core draws no entropy itself), says hello, and subscribes every session from its cursor,
//! so the page sees every event once, in order.
//!
//! Commands: the three a user gives while reading (`start_turn`, `interrupt` of a turn seen
//! running, `answer_approval`) are idempotent on the server (a turn id the client chose, the
//! turn interrupted, the same answer), so they are *kept*: given while disconnected they wait
//! (up to [`MAX_QUEUED`], then `queue_full`), and one in flight when the connection drops is
//! sent again; both go out once the next connection is welcomed and subscribed, in the order
//! they were given, and each is answered once. The others (`set_mode`, `set_model`,
//! `describe_session`, `resume_session`) are refused while disconnected (`not_connected`)
//! and fail with `connection_lost` if the connection drops before their reply (they may or
//! may not have been carried out).

use std::collections::VecDeque;

use serde::Serialize;
use serde_json::Value;

use super::error::ErrorCode;
use super::json::{json_write, json_write_names, to_json, to_json_sized};
use super::projector::{Batch, Projector, SessionBatch, Signal};
use super::sorted::{SortedMap, SortedSet};
use super::wire::{
    is_turn_id, ClientMsg, Decision, ServerMsg, Thinking, WireError, DEFAULT_MAX_FRAME,
    FEATURE_BINARY_FRAMES, FEATURE_PACKED_EVENTS, FEATURE_SESSION_STATUS, PROTOCOL_VERSIONS,
};

/// How a [`Client`] connects and retries.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The first reconnect delay; it doubles after each failed attempt.
    pub backoff_min_ms: i64,
    pub backoff_max_ms: i64,
    /// How long opening a socket and getting `welcome` may take.
    pub connect_timeout_ms: i64,
    /// Heartbeat periods of silence after which the connection counts as dead.
    pub missed_heartbeats: u32,
    /// Seeds the jitter (give it a random number; tests give a constant).
    pub seed: u64,
    /// Sent in `hello`.
    pub client_name: String,
    /// After [`Client::handle_wake`], how long an open connection has to answer a ping.
    pub wake_probe_ms: i64,
    /// Fall back to Server-Sent Events (and HTTP for commands) where the WebSocket cannot be
    /// opened or keeps being cut ([`Action::ConnectSse`]); `agentwire tail` does not.
    pub fallback: bool,
    /// WebSocket connections in a row that could not be opened (closed before `welcome`)
    /// before the client falls back.
    pub ws_failures_to_fall_back: u32,
    /// Or welcomed WebSocket connections in a row that were cut less than `ws_short_ms` after
    /// their welcome (a proxy that kills upgraded connections).
    pub ws_cuts_to_fall_back: u32,
    pub ws_short_ms: i64,
    /// On the fallback, how long before the WebSocket is tried again.
    pub ws_retry_ms: i64,
    /// Ask for a snapshot of (at least) this many items when subscribing with no cursor:
    /// the session's end is shown at once and older items are paged in with
    /// [`Client::history`]. `None`: replay the log from the start. A subscription that has a
    /// cursor always resumes from it, whatever this says.
    pub snapshot: Option<usize>,
    /// Ask for every WebSocket frame as a binary message (`binary_frames` in `hello`), to be
    /// given to [`Client::handle_frame_bytes`]: the browser's package does, where the bytes
    /// reach wasm memory in one copy; off by default (text frames, as every other client).
    pub binary_frames: bool,
    /// Ask for `events` frames packed (`packed_events` in `hello`), binary messages given to
    /// [`Client::handle_frame_bytes`] like the others: read without scanning JSON. The
    /// browser's package does; off by default.
    pub packed_events: bool,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            backoff_min_ms: 100,
            backoff_max_ms: 5_000,
            connect_timeout_ms: 10_000,
            missed_heartbeats: 3,
            seed: 0x9e37_79b9_7f4a_7c15,
            client_name: concat!("agentwire-wasm/", env!("CARGO_PKG_VERSION")).to_owned(),
            wake_probe_ms: 3_000,
            fallback: true,
            ws_failures_to_fall_back: 2,
            ws_cuts_to_fall_back: 5,
            ws_short_ms: 5_000,
            ws_retry_ms: 5 * 60_000,
            snapshot: None,
            binary_frames: false,
            packed_events: false,
        }
    }
}

/// The connection as a page shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// The first connection is being opened.
    Connecting,
    /// Connected and subscribed; some session is still catching up.
    Live,
    /// Connected, and every session has caught up: what arrives now is live.
    CaughtUp,
    /// The connection dropped; waiting to reconnect, or reconnecting.
    Reconnecting,
    /// Closed by the page, or by a server that speaks no common protocol.
    Closed,
}

impl ConnectionState {
    pub const fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Connecting => "connecting",
            ConnectionState::Live => "live",
            ConnectionState::CaughtUp => "caught_up",
            ConnectionState::Reconnecting => "reconnecting",
            ConnectionState::Closed => "closed",
        }
    }
}

/// How the client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    #[serde(rename = "websocket")]
    WebSocket,
    /// Server-Sent Events from `GET /api/wire` for what the server sends, `POST /api/wire`
    /// for commands: the fallback where WebSockets do not get through.
    Sse,
}

impl Transport {
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Sse => "sse",
        }
    }
}

/// What the transport must do with sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a WebSocket; report its events with this connection id.
    Connect { conn: u64 },
    /// Open an event stream (`GET /api/wire?frames=…`) whose opening client frames are
    /// `frames` (a JSON array: hello and the subscriptions); report its events with this
    /// connection id, and POST what [`Client::poll_post`] gives to `/api/wire`.
    ConnectSse { conn: u64, frames: String },
    /// Close the socket (or stream) of this connection (its close event is then ignored).
    Disconnect { conn: u64 },
}

/// One drain for the page: the connection state when it changed, and the projector's batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClientBatch<S = SessionBatch> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ConnectionState>,
    /// The transport, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    #[serde(flatten)]
    pub batch: Batch<S>,
}

impl<S> ClientBatch<S> {
    pub fn is_empty(&self) -> bool {
        self.state.is_none() && self.transport.is_none() && self.batch.is_empty()
    }
}

impl ClientBatch {
    /// The batch as JSON: what serde's `Serialize` writes, by `core::json`'s writer.
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

json_write!(ClientBatch<S> {
    state?,
    transport?,
    ..batch
});
json_write_names!(ConnectionState);
json_write_names!(Transport);

/// The answer to a command: the reply's `result`, or why it failed.
pub type Reply = (String, Result<Value, WireError>);

/// Commands kept while disconnected, at most; one more is refused with `queue_full`.
pub const MAX_QUEUED: usize = 64;

/// A command not answered yet.
struct Command {
    msg: ClientMsg,
    /// Safe to send again (the server makes it idempotent): kept across drops.
    kept: bool,
}

/// The sans-IO client. See the module docs for the driving rule.
pub struct Client {
    config: ClientConfig,
    projector: Projector,
    /// Sessions followed, in subscription order.
    sessions: Vec<String>,
    state: ConnectionState,
    reported_state: Option<ConnectionState>,
    /// The current connection id; a socket for it exists while `socket` is set.
    conn: u64,
    socket: bool,
    open: bool,
    welcomed: bool,
    heartbeat_ms: i64,
    last_heard_ms: i64,
    awaiting_caught_up: SortedSet<String>,
    reconnect_at: Option<i64>,
    backoff_ms: i64,
    rng: u64,
    /// Set by [`Client::handle_wake`] on an open connection: dead unless a frame comes by then.
    probe_until: Option<i64>,
    /// The transport of the current (or next) connection, and the last one reported.
    transport: Transport,
    reported_transport: Option<Transport>,
    /// The size to write the next batch's JSON in (`json::to_json_sized`).
    drain_size: usize,
    /// WebSocket connections in a row that could not be opened, or were cut soon; when the
    /// current one was welcomed.
    ws_failures: u32,
    ws_cuts: u32,
    welcomed_at: i64,
    /// On the fallback: when to try the WebSocket again.
    ws_retry_at: Option<i64>,
    /// Commands to POST (on the fallback transport).
    posts: VecDeque<String>,
    next_command: u64,
    /// Commands not answered yet, by number (the order they were given).
    pending: SortedMap<u64, Command>,
    transmit: VecDeque<String>,
    actions: VecDeque<Action>,
    replies: VecDeque<Reply>,
    drops: u64,
}

/// The number of one of this client's command ids (`c7` → 7).
fn command_number(id: &str) -> Option<u64> {
    id.strip_prefix('c').and_then(|n| n.parse().ok())
}

fn error(code: ErrorCode, message: impl Into<String>) -> WireError {
    WireError::new(code, message)
}

impl Client {
    /// A client that connects at once (the first [`Action::Connect`] is queued).
    pub fn new(config: ClientConfig, now_ms: i64) -> Client {
        let mut c = Client {
            backoff_ms: config.backoff_min_ms.max(1),
            rng: config.seed,
            config,
            projector: Projector::new(),
            sessions: Vec::new(),
            state: ConnectionState::Connecting,
            reported_state: None,
            conn: 0,
            socket: false,
            open: false,
            welcomed: false,
            heartbeat_ms: 15_000,
            last_heard_ms: now_ms,
            awaiting_caught_up: SortedSet::new(),
            reconnect_at: None,
            next_command: 0,
            probe_until: None,
            transport: Transport::WebSocket,
            reported_transport: None,
            drain_size: 0,
            ws_failures: 0,
            ws_cuts: 0,
            welcomed_at: 0,
            ws_retry_at: None,
            posts: VecDeque::new(),
            pending: SortedMap::new(),
            transmit: VecDeque::new(),
            actions: VecDeque::new(),
            replies: VecDeque::new(),
            drops: 0,
        };
        c.connect(now_ms);
        c
    }

    pub fn state(&self) -> ConnectionState {
        self.state
    }

    pub fn projector(&self) -> &Projector {
        &self.projector
    }

    /// How many connections dropped so far.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Follows a session from its cursor (now if connected, else on the next connection).
    pub fn subscribe(&mut self, session: &str) {
        if !self.sessions.iter().any(|s| s == session) {
            self.sessions.push(session.to_owned());
        }
        self.projector.track(session);
        if self.socket && self.transport == Transport::Sse {
            // The stream's subscriptions are fixed when it opens (even one still opening):
            // open another.
            self.reopen();
        } else if self.welcomed {
            self.send_subscribe(session);
        }
    }

    /// Follows a session from sequence `after` (the log before it is not read).
    pub fn subscribe_after(&mut self, session: &str, after: u64) {
        self.projector.track_after(session, after);
        self.subscribe(session);
    }

    /// Keeps every admitted event for [`Client::take_events`] ([`Projector::keep_events`]).
    pub fn keep_events(&mut self) {
        self.projector.keep_events();
    }

    /// The events admitted since the last call, once each, in log order.
    pub fn take_events(&mut self) -> Vec<crate::core::event::Event> {
        self.projector.take_events()
    }

    pub fn unsubscribe(&mut self, session: &str) {
        self.sessions.retain(|s| s != session);
        if self.awaiting_caught_up.remove(session) {
            self.update_caught_up();
        }
        if self.socket && self.transport == Transport::Sse {
            self.reopen();
        } else if self.welcomed {
            self.send(&ClientMsg::Unsubscribe {
                session: session.to_owned(),
            });
        }
    }

    /// The transport in use (or about to be).
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// A command to POST to `/api/wire` on the fallback transport; its response body goes to
    /// [`Client::handle_frame`] (a failed request to [`Client::handle_close`]).
    pub fn poll_post(&mut self) -> Option<String> {
        self.posts.pop_front()
    }

    /// Starts a foreground turn; the reply's result is `{turnId}`. Returns the command id.
    /// The turn's id is `turn_id`, or one drawn here: either way the server starts it once,
    /// however often the command is sent (see the module docs).
    pub fn start_turn(
        &mut self,
        session: &str,
        prompt: &str,
        turn_id: Option<&str>,
    ) -> Result<String, WireError> {
        let turn_id = match turn_id {
            Some(id) if is_turn_id(id) => id.to_owned(),
            Some(_) => {
                return Err(error(
                    ErrorCode::BadTurnId,
                    "a turn id is 1-128 ASCII letters, digits, '_', '-', '.' or ':'",
                ))
            }
            None => format!("turn_{:016x}{:08x}", self.draw(), self.draw() as u32),
        };
        self.command(true, |id| ClientMsg::StartTurn {
            id,
            session: session.to_owned(),
            prompt: prompt.to_owned(),
            turn_id: Some(turn_id),
        })
    }

    /// Interrupts the session's turn. While a turn is known to be running, the command names
    /// it, so it is kept across drops and never stops a later turn.
    pub fn interrupt(&mut self, session: &str) -> Result<String, WireError> {
        let turn_id = self
            .projector
            .lifecycle(session)
            .and_then(|l| l.active_turn);
        let kept = turn_id.is_some();
        self.command(kept, |id| ClientMsg::Interrupt {
            id,
            session: session.to_owned(),
            turn_id,
        })
    }

    /// Commands given and not answered yet (kept ones wait here while disconnected).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn answer_approval(
        &mut self,
        session: &str,
        request_id: &str,
        decision: Decision,
    ) -> Result<String, WireError> {
        self.command(true, |id| ClientMsg::AnswerApproval {
            id,
            session: session.to_owned(),
            request_id: request_id.to_owned(),
            decision,
        })
    }

    /// Switches the session's agent to one of its `modes`.
    pub fn set_mode(&mut self, session: &str, mode: &str) -> Result<String, WireError> {
        self.command(false, |id| ClientMsg::SetMode {
            id,
            session: session.to_owned(),
            mode: mode.to_owned(),
        })
    }

    /// Changes the model, the thinking level, or both.
    pub fn set_model(
        &mut self,
        session: &str,
        model: Option<&str>,
        thinking: Option<Thinking>,
    ) -> Result<String, WireError> {
        self.command(false, |id| ClientMsg::SetModel {
            id,
            session: session.to_owned(),
            model: model.map(str::to_owned),
            thinking,
        })
    }

    /// The session's record and live state (runtime, modes, commands, pending approvals,
    /// capabilities); the reply's result is what `GET /api/sessions/{id}` answers.
    pub fn describe_session(&mut self, session: &str) -> Result<String, WireError> {
        self.command(false, |id| ClientMsg::DescribeSession {
            id,
            session: session.to_owned(),
        })
    }

    /// Asks for up to `limit` items older than those held (a session that started from a
    /// snapshot); they arrive in a batch's `older`, and the reply's result is `{start,
    /// items}`: the first index now held and how many were added. With `start` 0 there is
    /// nothing older.
    pub fn history(&mut self, session: &str, limit: usize) -> Result<String, WireError> {
        let before = self.projector.start(session);
        self.command(false, |id| ClientMsg::History {
            id,
            session: session.to_owned(),
            before,
            limit,
        })
    }

    /// Reopens a session whose agent process is gone; the reply's result is the session.
    pub fn resume_session(&mut self, session: &str) -> Result<String, WireError> {
        self.command(false, |id| ClientMsg::ResumeSession {
            id,
            session: session.to_owned(),
        })
    }

    /// Closes for good: the socket is closed, pending commands fail with `closed`.
    pub fn close(&mut self) {
        if self.socket {
            self.actions
                .push_back(Action::Disconnect { conn: self.conn });
        }
        self.lose_connection(ErrorCode::Closed, "the client was closed");
        self.reconnect_at = None;
        self.set_state(ConnectionState::Closed);
    }

    /// The socket of `conn` opened: say hello.
    pub fn handle_open(&mut self, conn: u64, now_ms: i64) {
        if !self.is_current(conn) {
            return;
        }
        self.open = true;
        self.last_heard_ms = now_ms;
        if self.transport == Transport::WebSocket {
            let hello = self.hello();
            self.send(&hello);
        }
    }

    fn hello(&self) -> ClientMsg {
        ClientMsg::Hello {
            protocols: PROTOCOL_VERSIONS.to_vec(),
            max_frame: Some(DEFAULT_MAX_FRAME),
            client: Some(self.config.client_name.clone()),
            features: [FEATURE_SESSION_STATUS]
                .into_iter()
                .chain(self.config.binary_frames.then_some(FEATURE_BINARY_FRAMES))
                .chain(self.config.packed_events.then_some(FEATURE_PACKED_EVENTS))
                .map(str::to_owned)
                .collect(),
        }
    }

    /// A text frame arrived on `conn`. A frame that is not a server message is noted in the
    /// batch and otherwise ignored.
    pub fn handle_frame(&mut self, conn: u64, frame: &str, now_ms: i64) {
        if !self.is_current(conn) {
            return;
        }
        self.last_heard_ms = now_ms;
        self.probe_until = None;
        self.take_frame(frame, now_ms);
    }

    /// A binary frame arrived on `conn` (asked for with [`ClientConfig::binary_frames`] or
    /// [`ClientConfig::packed_events`]): the same UTF-8 JSON text as a text frame, or a
    /// packed events frame, handled the same.
    pub fn handle_frame_bytes(&mut self, conn: u64, frame: &[u8], now_ms: i64) {
        if !self.is_current(conn) {
            return;
        }
        self.last_heard_ms = now_ms;
        self.probe_until = None;
        if let Ok(signal) = self.projector.handle_frame_bytes(frame, now_ms) {
            self.take_signal(signal, now_ms);
        }
    }

    /// The response body of a command POSTed on the fallback transport: `posted` is the body
    /// [`Client::poll_post`] gave, `body` what came back, one server frame per line (its
    /// `reply`, or a `history` page, in `message_part`s when it is long). What settles the
    /// command settles it; an `error` frame (the server refused the command unread) fails it
    /// with that error; anything else (a proxy's page, a truncated body) leaves its fate
    /// unknown, so the stream is dropped as if the request had failed and the command is sent
    /// again on the next one if it is kept (commands are idempotent by id), failed with
    /// `connection_lost` if not. A command never waits for an answer that will not come.
    pub fn handle_post_reply(&mut self, posted: &str, body: &str, now_ms: i64) {
        // Only its `id` (a command's, or a ping's) is read back: this is our own JSON.
        struct Posted {
            id: Option<String>,
        }
        super::json::json_struct!(Posted { id });
        let number = super::json::Reader::read_all::<Posted>(posted)
            .ok()
            .and_then(|posted| posted.id)
            .and_then(|id| command_number(&id));
        for frame in body.lines().filter(|line| !line.trim().is_empty()) {
            match ServerMsg::decode(frame, usize::MAX) {
                Ok(ServerMsg::Error { error, .. }) => {
                    match number.filter(|n| self.pending.contains_key(n)) {
                        Some(n) => {
                            self.pending.remove(&n);
                            self.replies.push_back((format!("c{n}"), Err(error)));
                        }
                        None => self.take_frame(frame, now_ms),
                    }
                }
                Ok(
                    ServerMsg::Reply { .. }
                    | ServerMsg::History { .. }
                    | ServerMsg::MessagePart { .. },
                ) => self.take_frame(frame, now_ms),
                _ => break,
            }
        }
        let unsettled = number.is_some_and(|n| self.pending.contains_key(&n));
        if unsettled && self.socket && self.transport == Transport::Sse {
            self.actions
                .push_back(Action::Disconnect { conn: self.conn });
            self.drop_connection(now_ms);
        }
    }

    fn take_frame(&mut self, frame: &str, now_ms: i64) {
        if let Ok(signal) = self.projector.handle_frame(frame, now_ms) {
            self.take_signal(signal, now_ms);
        }
    }

    fn take_signal(&mut self, signal: Signal, now_ms: i64) {
        match signal {
            Signal::None => {}
            Signal::Welcome { heartbeat_ms, .. } => {
                self.welcomed = true;
                self.welcomed_at = now_ms;
                self.heartbeat_ms = i64::try_from(heartbeat_ms).unwrap_or(i64::MAX).max(100);
                self.backoff_ms = self.config.backoff_min_ms.max(1);
                for session in self.sessions.clone() {
                    match self.transport {
                        Transport::WebSocket => self.send_subscribe(&session),
                        // The stream was opened with the subscriptions.
                        Transport::Sse => drop(self.awaiting_caught_up.insert(session)),
                    }
                }
                // Then what was given while disconnected, or lost in flight, in order.
                let kept: Vec<String> = self.pending.values().map(|c| c.msg.encode()).collect();
                match self.transport {
                    Transport::WebSocket => self.transmit.extend(kept),
                    Transport::Sse => self.posts.extend(kept),
                }
                self.update_caught_up();
            }
            Signal::Resubscribe { session } => {
                if self.welcomed && self.sessions.contains(&session) {
                    self.send_subscribe(&session);
                }
            }
            Signal::CaughtUp { session } => {
                self.awaiting_caught_up.remove(&session);
                self.update_caught_up();
            }
            Signal::Resync { session } => {
                if self.sessions.contains(&session) {
                    self.awaiting_caught_up.insert(session);
                    self.update_caught_up();
                }
            }
            Signal::Reply { id, result } => {
                let number = command_number(&id);
                if number.is_some_and(|n| self.pending.remove(&n).is_some()) {
                    self.replies.push_back((id, result));
                }
            }
            Signal::Error { session, error } => match session {
                // The subscription failed (`unknown_session`, `store_error`): nothing to await.
                Some(session) if self.awaiting_caught_up.remove(&session) => {
                    self.update_caught_up();
                }
                Some(_) => {}
                None if error.code == "unsupported_protocol" => self.close(),
                None => {}
            },
        }
    }

    /// The socket of `conn` closed or failed.
    pub fn handle_close(&mut self, conn: u64, now_ms: i64) {
        if !self.is_current(conn) {
            return;
        }
        self.drop_connection(now_ms);
    }

    /// The page became visible again, or the network came back: what the timers say may be
    /// stale (a tab in the background runs them late, a laptop slept). A connection waiting
    /// for its backoff is opened now; an open one is pinged and counts as dead unless a frame
    /// arrives within `wake_probe_ms`.
    pub fn handle_wake(&mut self, now_ms: i64) {
        if self.state == ConnectionState::Closed {
            return;
        }
        if self.reconnect_at.is_some() {
            self.reconnect_at = None;
            self.backoff_ms = self.config.backoff_min_ms.max(1);
            self.connect(now_ms);
        } else if self.welcomed && self.transport == Transport::Sse {
            // No ping on a one-way stream: a fresh one proves the way.
            self.reopen();
        } else if self.welcomed {
            self.send(&ClientMsg::Ping {
                id: Some("wake".to_owned()),
            });
            self.probe_until = Some(now_ms.saturating_add(self.config.wake_probe_ms.max(1)));
        }
    }

    /// The earliest time [`Client::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<i64> {
        let dead = self.socket.then(|| self.dead_at());
        match (self.reconnect_at, dead) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Reconnects when the backoff is over; drops a connection that went silent.
    pub fn handle_timeout(&mut self, now_ms: i64) {
        if self.socket && now_ms >= self.dead_at() {
            self.actions
                .push_back(Action::Disconnect { conn: self.conn });
            self.drop_connection(now_ms);
        }
        if self.reconnect_at.is_some_and(|at| now_ms >= at) {
            self.reconnect_at = None;
            self.connect(now_ms);
        }
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    pub fn poll_transmit(&mut self) -> Option<String> {
        self.transmit.pop_front()
    }

    pub fn poll_reply(&mut self) -> Option<Reply> {
        self.replies.pop_front()
    }

    /// The changes since the previous drain, with the connection state if it changed.
    pub fn drain(&mut self) -> ClientBatch {
        let (state, transport) = self.take_reported();
        ClientBatch {
            state,
            transport,
            batch: self.projector.drain(),
        }
    }

    /// [`Client::drain`] as JSON (`drain().to_json()` byte for byte), `None` when it is
    /// empty; written without copying the changed items into a batch first.
    pub fn drain_json(&mut self) -> Option<String> {
        let (state, transport) = self.take_reported();
        let mut size = self.drain_size;
        let json = self.projector.drain_borrowed(|batch| {
            let batch = ClientBatch {
                state,
                transport,
                batch,
            };
            (!batch.is_empty()).then(|| to_json_sized(&batch, &mut size))
        });
        self.drain_size = size;
        json
    }

    /// The connection state and the transport, each when it changed since last reported.
    fn take_reported(&mut self) -> (Option<ConnectionState>, Option<Transport>) {
        let state = (self.reported_state != Some(self.state)).then(|| {
            self.reported_state = Some(self.state);
            self.state
        });
        let transport = (self.reported_transport != Some(self.transport)).then(|| {
            self.reported_transport = Some(self.transport);
            self.transport
        });
        (state, transport)
    }

    fn is_current(&self, conn: u64) -> bool {
        self.socket && conn == self.conn
    }

    fn dead_at(&self) -> i64 {
        let silence = if self.welcomed {
            self.heartbeat_ms
                .saturating_mul(i64::from(self.config.missed_heartbeats.max(1)))
        } else {
            self.config.connect_timeout_ms
        };
        let dead = self.last_heard_ms.saturating_add(silence);
        self.probe_until.map_or(dead, |probe| probe.min(dead))
    }

    fn connect(&mut self, now_ms: i64) {
        if self.transport == Transport::Sse && self.ws_retry_at.is_some_and(|at| now_ms >= at) {
            // Time to try the WebSocket again; one more failure and it is the fallback again.
            self.transport = Transport::WebSocket;
            self.ws_retry_at = None;
            self.ws_failures = self.config.ws_failures_to_fall_back.saturating_sub(1);
            self.ws_cuts = self.config.ws_cuts_to_fall_back.saturating_sub(1);
        }
        self.probe_until = None;
        self.conn += 1;
        self.socket = true;
        self.open = false;
        self.welcomed = false;
        self.last_heard_ms = now_ms;
        self.transmit.clear();
        let conn = self.conn;
        self.actions.push_back(match self.transport {
            Transport::WebSocket => Action::Connect { conn },
            Transport::Sse => {
                let mut frames = vec![self.hello()];
                for session in &self.sessions {
                    frames.push(self.subscribe_msg(session));
                }
                let frames = to_json(&frames);
                Action::ConnectSse { conn, frames }
            }
        });
    }

    /// Closes the current stream and opens another at once, from the cursors (the fallback's
    /// subscriptions changed, or it must prove it is alive): nothing kept is lost, nothing in
    /// flight fails.
    fn reopen(&mut self) {
        let now_ms = self.last_heard_ms;
        self.actions
            .push_back(Action::Disconnect { conn: self.conn });
        // Commands in flight are POSTs, whose answers do not ride on the stream: they wait.
        let was_welcomed = self.welcomed;
        self.awaiting_caught_up.clear();
        self.connect(now_ms);
        if was_welcomed {
            self.set_state(ConnectionState::Live);
        }
    }

    /// The connection is gone (closed, failed, or declared dead): fail what was in flight and
    /// schedule the next attempt.
    fn drop_connection(&mut self, now_ms: i64) {
        let was_welcomed = self.welcomed;
        self.lose_connection(
            ErrorCode::ConnectionLost,
            "the connection dropped before the reply",
        );
        if self.state == ConnectionState::Closed {
            return;
        }
        if was_welcomed {
            self.drops += 1;
        }
        if self.transport == Transport::WebSocket && self.config.fallback {
            if !was_welcomed {
                self.ws_failures += 1;
            } else {
                self.ws_failures = 0;
                let short = now_ms - self.welcomed_at < self.config.ws_short_ms;
                self.ws_cuts = if short { self.ws_cuts + 1 } else { 0 };
            }
            if self.ws_failures >= self.config.ws_failures_to_fall_back.max(1)
                || self.ws_cuts >= self.config.ws_cuts_to_fall_back.max(1)
            {
                self.ws_failures = 0;
                self.ws_cuts = 0;
                self.transport = Transport::Sse;
                self.ws_retry_at = Some(now_ms.saturating_add(self.config.ws_retry_ms));
                // The fallback is tried at once: the WebSocket's backoff says nothing of it.
                self.backoff_ms = self.config.backoff_min_ms.max(1);
            }
        }
        let delay = self.jittered(self.backoff_ms);
        self.backoff_ms = (self.backoff_ms * 2).min(self.config.backoff_max_ms.max(1));
        self.reconnect_at = Some(now_ms + delay);
        self.set_state(ConnectionState::Reconnecting);
    }

    fn lose_connection(&mut self, code: ErrorCode, message: &str) {
        self.socket = false;
        self.open = false;
        self.welcomed = false;
        self.transmit.clear();
        self.awaiting_caught_up.clear();
        let closed = code == ErrorCode::Closed;
        let lost: Vec<u64> = (self.pending.iter())
            .filter(|(_, c)| closed || !c.kept)
            .map(|(&n, _)| n)
            .collect();
        for n in lost {
            self.pending.remove(&n);
            self.replies
                .push_back((format!("c{n}"), Err(error(code, message))));
        }
    }

    /// The next number of the seeded generator (splitmix64: deterministic for a seed).
    fn draw(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `base` scaled by a factor in [0.5, 1.0): never all clients at once, never slower.
    fn jittered(&mut self, base: i64) -> i64 {
        let z = self.draw();
        let half = base / 2;
        half + i64::try_from(z % (base - half).max(1) as u64).unwrap_or(0)
    }

    fn send(&mut self, msg: &ClientMsg) {
        if !self.open {
            return;
        }
        match self.transport {
            Transport::WebSocket => self.transmit.push_back(msg.encode()),
            // On the fallback only commands travel (subscriptions are the stream's own).
            Transport::Sse
                if msg.command_id().is_some() && !matches!(msg, ClientMsg::Ping { .. }) =>
            {
                self.posts.push_back(msg.encode())
            }
            Transport::Sse => {}
        }
    }

    /// The subscribe that resumes the session from its cursor; with no cursor (nothing
    /// applied yet, or lost to a reset), one that asks for a snapshot when configured.
    fn subscribe_msg(&self, session: &str) -> ClientMsg {
        let snapshot = self
            .config
            .snapshot
            .map(|items| crate::core::snapshot::SnapshotRequest { items });
        match self.projector.cursor(session) {
            Some(cursor) if cursor.after > 0 => cursor.subscribe(session),
            cursor => ClientMsg::Subscribe {
                session: session.to_owned(),
                after: 0,
                epoch: cursor.and_then(|c| c.epoch.clone()),
                snapshot,
            },
        }
    }

    fn send_subscribe(&mut self, session: &str) {
        let msg = self.subscribe_msg(session);
        self.send(&msg);
        self.awaiting_caught_up.insert(session.to_owned());
    }

    fn update_caught_up(&mut self) {
        if !self.welcomed {
            return;
        }
        self.set_state(if self.awaiting_caught_up.is_empty() {
            ConnectionState::CaughtUp
        } else {
            ConnectionState::Live
        });
    }

    fn set_state(&mut self, state: ConnectionState) {
        if self.state != ConnectionState::Closed {
            self.state = state;
        }
    }

    /// Sends a command now, or keeps it for the next connection when `kept`.
    fn command(
        &mut self,
        kept: bool,
        msg: impl FnOnce(String) -> ClientMsg,
    ) -> Result<String, WireError> {
        if self.state == ConnectionState::Closed {
            return Err(error(ErrorCode::Closed, "the client was closed"));
        }
        if !self.welcomed && !kept {
            return Err(error(
                ErrorCode::NotConnected,
                "not connected to the server (reconnecting); try again when live",
            ));
        }
        if !self.welcomed && self.pending.len() >= MAX_QUEUED {
            let message = format!("{MAX_QUEUED} commands already wait for the connection");
            return Err(error(ErrorCode::QueueFull, message));
        }
        self.next_command += 1;
        let id = format!("c{}", self.next_command);
        let msg = msg(id.clone());
        if self.welcomed {
            self.send(&msg);
        }
        self.pending
            .insert(self.next_command, Command { msg, kept });
        Ok(id)
    }
}

#[cfg(test)]
mod tests;
