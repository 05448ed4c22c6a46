//! The WebSocket protocol (docs/protocol.md), written to an `Outlet`: the socket itself
//! ([`handle_socket`], the axum glue), or a channel of text frames, so that tests and
//! `POST /api/wire` drive it without a socket ([`run_connection`]).
//!
//! Every subscription is a [`Follower`] (see [`super::fanout`]): it reads the session's log
//! from the client's cursor in pages, then waits for the store's next commit and reads again,
//! and sends the frames that every subscriber of the session at the same cursor shares. On a
//! WebSocket it writes them itself, under the socket's lock: the commit wakes it, and it puts
//! the frame on the socket, with no queue and no other task between. A subscriber that cannot
//! keep up is simply still catching up from the store: when the socket could not take a live
//! page at once (or, over a channel, the bounded queue is found full), the subscriber is told
//! (`resync`) and keeps reading by cursor. Nothing is skipped. A write that fails ends the
//! connection, subscriptions and tasks with it: among them the write to a client that read
//! nothing for `--write-timeout-ms` while keeping its connection open, which the connection's
//! socket gives up on (`super::listen`), so nothing stays stuck on such a client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::SplitSink;
use futures_util::{FutureExt, SinkExt, Stream, StreamExt};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

use super::fanout::{Fanout, Follower, OutFrame, Outgoing, Page, Text};
use super::host::CommandError;
use super::host::Hub;
use super::now;
use super::store::Store;
use crate::core::error::ErrorCode;
use crate::core::wire::{self, ClientMsg, ServerMsg, StoreStatus, WireError};

/// Frames a channel connection (`/api/wire`) may have queued before its subscriptions wait.
pub const OUTGOING_FRAMES: usize = 32;
/// Events read from the store per page.
const PAGE: usize = 512;
/// Subscriptions one connection may hold at once.
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// The close code for a frame over the hard cap (RFC 6455: message too big).
const CLOSE_TOO_BIG: u16 = 1009;

/// How many SSE streams and WebSocket connections are open: each is counted by a guard its
/// task holds, so the count falls when the task really ends.
#[derive(Debug, Default)]
pub struct StreamCounts {
    pub sse: AtomicUsize,
    pub websocket: AtomicUsize,
}

/// Counts one open stream while it lives.
pub struct StreamGuard {
    counts: Arc<StreamCounts>,
    websocket: bool,
}

impl StreamGuard {
    pub fn sse(counts: &Arc<StreamCounts>) -> StreamGuard {
        counts.sse.fetch_add(1, Ordering::Relaxed);
        StreamGuard {
            counts: counts.clone(),
            websocket: false,
        }
    }

    pub fn websocket(counts: &Arc<StreamCounts>) -> StreamGuard {
        counts.websocket.fetch_add(1, Ordering::Relaxed);
        StreamGuard {
            counts: counts.clone(),
            websocket: true,
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let count = if self.websocket {
            &self.counts.websocket
        } else {
            &self.counts.sse
        };
        count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Limits and timings of one connection.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// The largest frame the server sends, before negotiation lowers it.
    pub max_frame: usize,
    /// The largest frame the server accepts from a client.
    pub client_frame_limit: usize,
    pub heartbeat_ms: u64,
}

/// The axum side: splits the socket, feeds received text frames to the protocol, and sends
/// heartbeats. Every task with a frame for this connection writes it to the socket itself
/// (`Outlet::Socket`): a subscription at the live edge is woken by the store's commit and
/// writes its frame, with no queue and no second task between.
/// `drops` closes the connection when it fires (`POST /api/connections/drop`); `open` counts
/// it while it lives.
pub async fn handle_socket(
    socket: WebSocket,
    hub: Arc<Hub>,
    limits: ConnectionLimits,
    mut drops: broadcast::Receiver<()>,
    open: StreamGuard,
) {
    let _open = open;
    let (sink, stream) = socket.split();
    let socket = Arc::new(SocketOut {
        sink: tokio::sync::Mutex::new(sink),
        binary: AtomicBool::new(false),
        dead: AtomicBool::new(false),
        died: tokio::sync::Notify::new(),
    });
    let heartbeat = Duration::from_millis(limits.heartbeat_ms);
    // Set when the connection must close with a code (a frame over the hard cap).
    let (close_tx, close_rx) = tokio::sync::oneshot::channel::<CloseFrame>();
    // Dropped when the protocol is done: the heartbeats stop and the socket closes.
    let (done_tx, mut done) = tokio::sync::oneshot::channel::<()>();
    let beating = socket.clone();
    let heartbeats = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(heartbeat);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut done => break,
                _ = ticker.tick() => {
                    let beat = ServerMsg::Heartbeat { now_ms: now().unix_millis() }.encode();
                    if beating.write(Batch::Own(vec![beat.into()])).await.is_err() {
                        break;
                    }
                }
            }
        }
        // A socket whose write failed gets no closing handshake: dropping it closes it.
        if beating.is_dead() {
            return;
        }
        let mut sink = beating.sink.lock().await;
        match close_rx.await {
            Ok(frame) => drop(sink.send(Message::Close(Some(frame))).await),
            Err(_) => drop(sink.close().await),
        }
    });
    // `POST /api/connections/drop` ends the incoming stream, which closes the connection, and
    // so does a failed write (the client is gone, or read nothing for the write timeout).
    let mut close_tx = Some(close_tx);
    let dying = socket.clone();
    let incoming = stream
        .take_until(async move {
            tokio::select! {
                _ = drops.recv() => {}
                _ = dying.died() => {}
            }
        })
        .map(move |m| match m {
            Ok(Message::Text(t)) => Some(Incoming::Text(t.to_string())),
            Ok(Message::Binary(_)) => Some(Incoming::Binary),
            Ok(_) => Some(Incoming::Control),
            Err(e) => {
                // tungstenite's capacity error: a frame over the hard cap.
                if e.to_string().contains("Space limit exceeded") {
                    if let Some(close) = close_tx.take() {
                        let _ = close.send(CloseFrame {
                            code: CLOSE_TOO_BIG,
                            reason: "frame too large".into(),
                        });
                    }
                }
                None
            }
        })
        .take_while(|m| std::future::ready(m.is_some()))
        .filter_map(|m| async move {
            match m {
                Some(Incoming::Control) | None => None,
                other => other,
            }
        });
    serve(Box::pin(incoming), Outlet::Socket(socket), hub, limits).await;
    drop(done_tx);
    let _ = heartbeats.await;
}

/// Where a connection's frames go: a channel that its owner drains ([`run_connection`]: tests,
/// `POST /api/wire`), or the WebSocket itself, written under its lock by the task that has
/// the frame, in the order that task writes them.
#[derive(Clone)]
enum Outlet {
    Channel(mpsc::Sender<Outgoing>),
    Socket(Arc<SocketOut>),
}

/// A WebSocket's sending half, shared by the tasks that write to it.
struct SocketOut {
    sink: tokio::sync::Mutex<SplitSink<WebSocket, Message>>,
    /// Set by the protocol when the hello asks for `binary_frames` (before the welcome is
    /// written): from then on each frame goes as a binary message of the same bytes. (An
    /// events frame that carries its packed form goes packed: `packed_events`.)
    binary: AtomicBool,
    /// Set when a write failed: every write fails from then on, and the connection ends
    /// (`died` wakes its reader, which may otherwise wait for ever on a silent client).
    dead: AtomicBool,
    died: tokio::sync::Notify,
}

/// The socket's answer to a write: whether it had to wait for the peer to read.
type Written = Result<bool, ()>;

/// The frames of one write.
enum Batch<'a> {
    /// A page of a session's frames, shared with its other subscribers, and whether this
    /// connection takes them packed.
    Page(&'a [OutFrame], bool),
    Own(Vec<Outgoing>),
}

impl SocketOut {
    /// Writes the frames in order and flushes them in one go; `Ok(true)` if the socket could
    /// not take them at once (its buffer was full: the peer reads slower than it is sent to),
    /// `Err` once the connection is gone.
    async fn write(&self, batch: Batch<'_>) -> Written {
        let binary = self.binary.load(Ordering::Acquire);
        let mut sink = self.sink.lock().await;
        if self.is_dead() {
            return Err(());
        }
        let mut write = std::pin::pin!(async {
            match batch {
                Batch::Page(frames, packs) => {
                    for frame in frames {
                        sink.feed(to_message(frame.outgoing(packs), binary)).await?;
                    }
                }
                Batch::Own(frames) => {
                    for frame in frames {
                        sink.feed(to_message(frame, binary)).await?;
                    }
                }
            }
            sink.flush().await
        });
        let written = match write.as_mut().now_or_never() {
            Some(done) => done.map(|()| false),
            None => write.await.map(|()| true),
        };
        written.map_err(|_| {
            self.dead.store(true, Ordering::Release);
            self.died.notify_one();
        })
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Resolves once a write has failed (at once if one already has).
    async fn died(&self) {
        let notified = self.died.notified();
        if !self.is_dead() {
            notified.await;
        }
    }
}

impl Outlet {
    /// Sends frames in order; false once the connection is gone.
    async fn send_all(&self, frames: Vec<Outgoing>) -> bool {
        match self {
            Outlet::Channel(tx) => {
                for frame in frames {
                    if tx.send(frame).await.is_err() {
                        return false;
                    }
                }
                true
            }
            Outlet::Socket(socket) => socket.write(Batch::Own(frames)).await.is_ok(),
        }
    }

    async fn send(&self, frame: Outgoing) -> bool {
        self.send_all(vec![frame]).await
    }
}

/// One received frame.
pub enum Incoming {
    Text(String),
    Binary,
    /// Ping, pong or close: nothing for the protocol.
    Control,
}

/// The protocol over channels: reads client frames until the stream ends, writes server
/// frames to `out` (shared buffers: an `events` frame is the same allocation for every
/// subscriber at the same cursor). Returns when the client is gone or must be dropped.
pub async fn run_connection<I>(
    incoming: I,
    out: mpsc::Sender<Outgoing>,
    hub: Arc<Hub>,
    limits: ConnectionLimits,
) where
    I: Stream<Item = Incoming> + Unpin,
{
    serve(incoming, Outlet::Channel(out), hub, limits).await
}

/// The WebSocket message of a frame: packed when it carries its packed form (only a
/// subscription that asked for `packed_events` gives it one) and it is an events frame; else
/// its text, as a binary message when the connection asked for `binary_frames`.
fn to_message(frame: Outgoing, binary: bool) -> Message {
    match frame.packed() {
        Some(packed) => Message::Binary(packed),
        None if binary => Message::Binary(frame.text.into()),
        None => Message::Text(frame.text),
    }
}

/// [`run_connection`] over either outlet. Only a WebSocket ([`Outlet::Socket`]) can send
/// binary messages: over a channel the `binary_frames` and `packed_events` features are
/// ignored.
async fn serve<I>(mut incoming: I, out: Outlet, hub: Arc<Hub>, limits: ConnectionLimits)
where
    I: Stream<Item = Incoming> + Unpin,
{
    let store = hub.store().clone();
    let fanout = hub.fanout();
    let send = |msg: ServerMsg| {
        let out = out.clone();
        async move { out.send(msg.encode().into()).await }
    };
    let error = |code: ErrorCode, message: String| ServerMsg::Error {
        error: WireError::new(code, message),
        session: None,
    };

    // Hello and version negotiation.
    let hello = tokio::time::timeout(Duration::from_secs(30), incoming.next()).await;
    // With whether the client asked for `session_status` (older clients do not know it).
    let (max_frame, wants_status, packs) = match hello {
        Ok(Some(Incoming::Text(frame))) => {
            match ClientMsg::decode(&frame, limits.client_frame_limit) {
                Ok(ClientMsg::Hello {
                    protocols,
                    max_frame,
                    features,
                    ..
                }) => {
                    let Some(protocol) = wire::negotiate(&protocols) else {
                        let msg = format!(
                            "no common protocol version: server speaks {:?}",
                            wire::PROTOCOL_VERSIONS
                        );
                        send(error(ErrorCode::UnsupportedProtocol, msg)).await;
                        return;
                    };
                    let max_frame = max_frame
                        .unwrap_or(wire::DEFAULT_MAX_FRAME)
                        .min(limits.max_frame)
                        .max(wire::MIN_MAX_FRAME);
                    let welcome = ServerMsg::Welcome {
                        protocol,
                        epoch: store.epoch().to_owned(),
                        max_frame,
                        heartbeat_ms: limits.heartbeat_ms,
                        server: concat!("agentwire/", env!("CARGO_PKG_VERSION")).to_owned(),
                    };
                    let asked = |feature| features.iter().any(|f| f == feature);
                    // Packed frames go only where binary messages can.
                    let socket = match &out {
                        Outlet::Socket(socket) => Some(socket),
                        Outlet::Channel(_) => None,
                    };
                    let packs = socket.is_some() && asked(wire::FEATURE_PACKED_EVENTS);
                    if let Some(socket) = socket.filter(|_| asked(wire::FEATURE_BINARY_FRAMES)) {
                        socket.binary.store(true, Ordering::Release);
                    }
                    if !send(welcome).await {
                        return;
                    }
                    let wants_status = asked(wire::FEATURE_SESSION_STATUS);
                    (max_frame, wants_status, packs)
                }
                Ok(_) => {
                    send(error(
                        ErrorCode::HelloRequired,
                        "the first message must be hello".into(),
                    ))
                    .await;
                    return;
                }
                Err(e) => {
                    send(error(e.code(), e.to_string())).await;
                    return;
                }
            }
        }
        Ok(Some(Incoming::Binary | Incoming::Control)) => {
            send(error(ErrorCode::BinaryFrame, "frames are JSON text".into())).await;
            return;
        }
        Ok(None) => return,
        Err(_) => {
            send(error(
                ErrorCode::HelloTimeout,
                "no hello within 30 s".into(),
            ))
            .await;
            return;
        }
    };

    let mut subscriptions: HashMap<String, JoinHandle<()>> = HashMap::new();
    // The one `history` page this connection may have in flight.
    let mut paging: Option<JoinHandle<()>> = None;
    // Held while a message goes out in `message_part`s, so that two of one session (a
    // history page and a snapshot) never interleave their parts.
    let parts = Arc::new(tokio::sync::Mutex::new(()));
    while let Some(frame) = incoming.next().await {
        let text = match frame {
            Incoming::Text(t) => t,
            Incoming::Binary => {
                send(error(ErrorCode::BinaryFrame, "frames are JSON text".into())).await;
                continue;
            }
            Incoming::Control => continue,
        };
        let msg = match ClientMsg::decode(&text, limits.client_frame_limit) {
            Ok(m) => m,
            Err(e) => {
                if !send(error(e.code(), e.to_string())).await {
                    break;
                }
                continue;
            }
        };
        // Nothing a client chose is echoed or kept before it is checked.
        if msg
            .command_id()
            .is_some_and(|id| id.len() > wire::MAX_COMMAND_ID)
        {
            let message = format!("a command id is at most {} bytes", wire::MAX_COMMAND_ID);
            send(error(ErrorCode::BadCommandId, message)).await;
            continue;
        }
        if msg.session().is_some_and(|s| !wire::is_session_id(s)) {
            let refusal = CommandError::new(ErrorCode::BadSessionId, wire::SESSION_ID_RULE);
            let frame = match msg.command_id() {
                Some(id) => reply(id.to_owned(), Err(refusal)),
                None => error(refusal.code, refusal.message),
            };
            send(frame).await;
            continue;
        }
        match msg {
            ClientMsg::Hello { .. } => {
                send(error(
                    ErrorCode::AlreadyHello,
                    "hello was already received".into(),
                ))
                .await;
            }
            ClientMsg::Subscribe {
                session,
                after,
                epoch,
                snapshot,
            } => {
                if let Some(old) = subscriptions.remove(&session) {
                    old.abort();
                }
                // A follow that ended (an unknown session, a store error) holds nothing.
                subscriptions.retain(|_, task| !task.is_finished());
                if subscriptions.len() >= MAX_SUBSCRIPTIONS {
                    let message = format!(
                        "a connection follows at most {MAX_SUBSCRIPTIONS} sessions at once: unsubscribe first"
                    );
                    let refusal = ServerMsg::Error {
                        error: WireError::new(ErrorCode::TooManySubscriptions, message),
                        session: Some(session),
                    };
                    send(refusal).await;
                    continue;
                }
                let status = wants_status.then(|| hub.watch_store(&session));
                let snapshot = snapshot.map(|s| (hub.projections(), s.items, parts.clone()));
                let task = tokio::spawn(follow(
                    fanout.clone(),
                    session.clone(),
                    Start {
                        after,
                        epoch,
                        snapshot,
                    },
                    Framing { max_frame, packs },
                    out.clone(),
                    status,
                ));
                subscriptions.insert(session, task);
            }
            ClientMsg::Unsubscribe { session } => {
                if let Some(task) = subscriptions.remove(&session) {
                    task.abort();
                }
            }
            ClientMsg::Ping { id } => {
                send(ServerMsg::Pong { id }).await;
            }
            ClientMsg::StartTurn {
                id,
                session,
                prompt,
                turn_id,
            } => {
                let result = hub.start_turn(&session, prompt, turn_id).await;
                send(reply(
                    id,
                    result.map(|turn| serde_json::json!({ "turnId": turn })),
                ))
                .await;
            }
            ClientMsg::Interrupt {
                id,
                session,
                turn_id,
            } => {
                let result = hub.interrupt(&session, turn_id).await;
                send(reply(id, result.map(|()| serde_json::json!({})))).await;
            }
            ClientMsg::AnswerApproval {
                id,
                session,
                request_id,
                decision,
            } => {
                let result = hub.answer_approval(&session, request_id, decision).await;
                send(reply(id, result.map(|()| serde_json::json!({})))).await;
            }
            ClientMsg::SetMode { id, session, mode } => {
                let result = hub.set_mode(&session, mode).await;
                send(reply(id, result.map(|()| serde_json::json!({})))).await;
            }
            ClientMsg::SetModel {
                id,
                session,
                model,
                thinking,
            } => {
                let result = hub.set_model(&session, model, thinking).await;
                send(reply(id, result.map(|()| serde_json::json!({})))).await;
            }
            ClientMsg::ResumeSession { id, session } => {
                let result = hub.resume_session(&session).await;
                send(reply(id, result.map(|s| serde_json::json!(s)))).await;
            }
            ClientMsg::DescribeSession { id, session } => {
                send(reply(id, hub.describe(&session).await)).await;
            }
            ClientMsg::History {
                id,
                session,
                before,
                limit,
            } => {
                if paging.as_ref().is_some_and(|task| !task.is_finished()) {
                    let message = "one history page at a time: wait for the last one's answer";
                    let refusal = CommandError::new(ErrorCode::TooManyRequests, message);
                    send(reply(id, Err(refusal))).await;
                    continue;
                }
                // A cold projection takes a while to build: the connection goes on meanwhile.
                paging = Some(tokio::spawn(history(
                    hub.clone(),
                    HistoryPage {
                        id,
                        session,
                        before,
                        limit,
                    },
                    max_frame,
                    out.clone(),
                    parts.clone(),
                )));
            }
        }
    }
    for (_, task) in subscriptions {
        task.abort();
    }
    // A page being answered is let finish: over HTTP (`POST /api/wire`) the command is the
    // whole input, and its answer comes after it; on a closed WebSocket its first send fails.
    if let Some(task) = paging {
        let _ = task.await;
    }
}

/// A `history` command.
struct HistoryPage {
    id: String,
    session: String,
    before: usize,
    limit: usize,
}

fn reply(id: String, result: Result<serde_json::Value, CommandError>) -> ServerMsg {
    match result {
        Ok(value) => ServerMsg::Reply {
            id,
            ok: true,
            result: Some(value),
            error: None,
        },
        Err(e) => ServerMsg::Reply {
            id,
            ok: false,
            result: None,
            error: Some(WireError::new(e.code, e.message)),
        },
    }
}

/// Answers `history`: the page as `history` frames (`message_part`s when it does not fit
/// one), or a failed reply.
async fn history(
    hub: Arc<Hub>,
    page: HistoryPage,
    max_frame: usize,
    out: Outlet,
    parts: Arc<tokio::sync::Mutex<()>>,
) {
    let HistoryPage {
        id,
        session,
        before,
        limit,
    } = page;
    let refusal = |code: ErrorCode, message: String| {
        reply(id.clone(), Err(CommandError::new(code, message)))
            .encode()
            .into()
    };
    let frames: Vec<Text> = match hub.store().get_session(&session).await {
        Ok(None) => vec![refusal(
            ErrorCode::UnknownSession,
            format!("no session {session:?}"),
        )],
        Err(e) => vec![refusal(ErrorCode::StoreError, e.to_string())],
        Ok(Some(_)) => match hub.projections().history(&session, before, limit).await {
            Ok((start, items)) => {
                let msg = ServerMsg::History {
                    id: id.clone(),
                    session: session.clone(),
                    start,
                    items,
                };
                wire::encode_message(&session, &msg, max_frame)
                    .into_iter()
                    .map(Text::from)
                    .collect()
            }
            Err(e) => vec![refusal(ErrorCode::StoreError, e.to_string())],
        },
    };
    let _parts = parts.lock().await;
    out.send_all(frames.into_iter().map(Outgoing::from).collect())
        .await;
}

/// Where a subscription starts: the client's cursor, and whether (and from which
/// projections, with how many items) it asked for a snapshot.
struct Start {
    after: u64,
    epoch: Option<String>,
    /// The projections, the items asked for, and the connection's lock on sending parts.
    snapshot: Option<(
        Arc<super::snapshot::Projections>,
        usize,
        Arc<tokio::sync::Mutex<()>>,
    )>,
}

/// How a subscription's frames go: their size bound, and whether the connection takes events
/// frames packed (then each carries the cell of its shared packed copy; else none is made).
struct Framing {
    max_frame: usize,
    packs: bool,
}

/// One subscription: replay from `after` (or, asked for a snapshot with no cursor, the
/// snapshot then the events after it), then tail, in `max_frame`-bounded frames. With
/// `status` (the client asked for `session_status`), the store's status of the session
/// first, then whenever it changes.
async fn follow(
    fanout: Arc<Fanout>,
    session: String,
    start: Start,
    framing: Framing,
    out: Outlet,
    mut status: Option<watch::Receiver<StoreStatus>>,
) {
    let Start {
        mut after,
        epoch,
        snapshot,
    } = start;
    let Framing { max_frame, packs } = framing;
    let store: &Arc<dyn Store> = fanout.store();
    let current = store.epoch().to_owned();
    let fail = |code: ErrorCode, message: String| -> Outgoing {
        ServerMsg::Error {
            error: WireError::new(code, message),
            session: Some(session.clone()),
        }
        .encode()
        .into()
    };
    match store.get_session(&session).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            let _ = out
                .send(fail(
                    ErrorCode::UnknownSession,
                    format!("no session {session:?}"),
                ))
                .await;
            return;
        }
        Err(e) => {
            let _ = out.send(fail(ErrorCode::StoreError, e.to_string())).await;
            return;
        }
    }
    let latest = store.latest_sequence(&session).await.unwrap_or(0);
    let reset_reason = match &epoch {
        Some(e) if *e != current => Some("stale_epoch"),
        _ if after > latest => Some("cursor_ahead"),
        _ => None,
    };
    if let Some(reason) = reset_reason {
        after = 0;
        let reset = ServerMsg::Reset {
            session: session.clone(),
            epoch: current.clone(),
            reason: reason.into(),
        };
        if !out.send(reset.encode().into()).await {
            return;
        }
    }
    if let (Some((projections, items, parts)), 0) = (snapshot, after) {
        let snapshot = match projections.snapshot(&session, items).await {
            Ok(s) => s,
            Err(e) => {
                let _ = out.send(fail(ErrorCode::StoreError, e.to_string())).await;
                return;
            }
        };
        after = snapshot.after;
        let msg = ServerMsg::Snapshot(Box::new(snapshot));
        let _parts = parts.lock().await;
        let frames = wire::encode_message(&session, &msg, max_frame);
        if !out
            .send_all(frames.into_iter().map(Outgoing::from).collect())
            .await
        {
            return;
        }
    }
    let status_frame = |store: StoreStatus| -> Outgoing {
        let session = session.clone();
        ServerMsg::SessionStatus { session, store }.encode().into()
    };
    // Whether the client was last told the store is available.
    let mut told_available = true;
    if let Some(rx) = &mut status {
        let now = rx.borrow_and_update().clone();
        told_available = now.is_available();
        if !out.send(status_frame(now)).await {
            return;
        }
    }
    let mut follower = Follower::new(&fanout, &session, after);
    let mut live = false;
    let mut sent = after;
    loop {
        let page = tokio::select! {
            page = follower.next_frames(PAGE, max_frame) => page,
            now = next_status(&mut status) => {
                // "Available" twice is no news; every word while unavailable is.
                if !(now.is_available() && told_available) {
                    told_available = now.is_available();
                    if !out.send(status_frame(now)).await {
                        return;
                    }
                }
                continue;
            }
        };
        let frames: Arc<[OutFrame]> = match page {
            Ok(Page::Events(frames)) => frames,
            // Said once per catch-up: at the live edge, each page ends with nothing more stored,
            // which the client already knows.
            Ok(Page::CaughtUp(_)) if live => continue,
            Ok(Page::CaughtUp(latest)) => {
                live = true;
                Arc::new([OutFrame::single(follower.caught_up(latest))])
            }
            Err(e) => {
                let _ = out.send(fail(ErrorCode::StoreError, e.to_string())).await;
                return;
            }
        };
        let tx = match &out {
            Outlet::Socket(socket) => {
                // At the live edge this is the whole path from the commit to the socket.
                let Ok(waited) = socket.write(Batch::Page(&frames, packs)).await else {
                    return;
                };
                sent = frames.iter().fold(sent, |s, f| s.max(f.last_sequence));
                if waited && live {
                    // The socket's buffer was full: this subscriber reads slower than the
                    // live tail moves. It goes on from the store by its cursor, and is told.
                    live = false;
                    let resync = ServerMsg::Resync {
                        session: session.clone(),
                        after: sent,
                    };
                    if !out.send(resync.encode().into()).await {
                        return;
                    }
                }
                continue;
            }
            Outlet::Channel(tx) => tx,
        };
        for frame in frames.iter() {
            let permit = match tx.try_reserve() {
                Ok(permit) => permit,
                Err(mpsc::error::TrySendError::Full(())) if live => {
                    // This subscriber fell behind the live tail: it is back to catching up
                    // from the store, and is told where that resumes.
                    live = false;
                    let Ok(permit) = tx.reserve().await else {
                        return;
                    };
                    permit.send(
                        ServerMsg::Resync {
                            session: session.clone(),
                            after: sent,
                        }
                        .encode()
                        .into(),
                    );
                    let Ok(permit) = tx.reserve().await else {
                        return;
                    };
                    permit
                }
                Err(mpsc::error::TrySendError::Full(())) => {
                    let Ok(permit) = tx.reserve().await else {
                        return;
                    };
                    permit
                }
                Err(mpsc::error::TrySendError::Closed(())) => return,
            };
            permit.send(frame.outgoing(packs));
            sent = sent.max(frame.last_sequence);
        }
    }
}

/// The store status when it next changes; never, for a client that did not ask for it.
async fn next_status(status: &mut Option<watch::Receiver<StoreStatus>>) -> StoreStatus {
    if let Some(rx) = status {
        if rx.changed().await.is_ok() {
            return rx.borrow_and_update().clone();
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event_ref::packed;

    /// A frame goes as its subscription asked: text, binary JSON, or packed (an events frame;
    /// any other as its text); and only a subscription that asked for `packed_events` makes
    /// the shared packed copy.
    #[test]
    fn a_frame_goes_as_its_subscription_asked_and_is_packed_only_for_one_that_did() {
        let events = r#"{"t":"events","session":"s1","epoch":"e1","events":[{"id":"evt_0123456789abcdef0123456789abcdef","type":"run_started","session_id":"s1","run_id":"r1","sequence":1,"timestamp":"2026-01-01T00:00:00.000Z","provider":"demo","data":{},"metadata":{},"schema_version":1}]}"#;
        let frame = OutFrame {
            last_sequence: 1,
            ..OutFrame::single(Text::from(events))
        };
        for binary in [false, true] {
            let message = to_message(frame.outgoing(false), binary);
            assert!(
                frame.packed.get().is_none(),
                "a JSON subscription packs nothing"
            );
            match (binary, message) {
                (false, Message::Text(t)) => assert_eq!(t.as_str(), events),
                (true, Message::Binary(b)) => assert_eq!(&b[..], events.as_bytes()),
                (binary, other) => panic!("{binary}: {other:?}"),
            }
        }
        let packed = packed::pack(events).unwrap();
        for binary in [false, true] {
            match to_message(frame.outgoing(true), binary) {
                Message::Binary(b) => assert_eq!(&b[..], &packed[..]),
                other => panic!("{other:?}"),
            }
        }
        assert!(
            frame.packed.get().is_some(),
            "packed once, kept for the next subscriber"
        );
        // Not an events frame: as the connection takes JSON.
        let pong = OutFrame::single(Text::from(r#"{"t":"pong"}"#));
        assert!(matches!(
            to_message(pong.outgoing(true), false),
            Message::Text(_)
        ));
        assert!(
            matches!(to_message(pong.outgoing(true), true), Message::Binary(b) if &b[..] == br#"{"t":"pong"}"#)
        );
    }
}
