//! The WebSocket protocol against a real SQLite store, driven in-process over channels (the
//! socket-free side of `companion::ws`) and over real WebSockets: a subscriber that stops
//! reading is switched back to catch-up from the store, told so, and then gets every event
//! exactly once; one that never reads again is closed after the write timeout.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

use std::sync::Arc;
use std::time::Duration;

use agentwire::companion::fanout::Outgoing;
use agentwire::companion::host::{Hub, HubConfig};
use agentwire::companion::server::ServerConfig;
use agentwire::companion::store::{SessionRecord, SessionState, SqliteStore, Store};
use agentwire::companion::ws::{run_connection, Incoming};
use agentwire::core::event::{Event, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;
use agentwire::core::wire::{ClientMsg, Cursor, ServerMsg, MIN_MAX_FRAME};
use serde_json::json;
use tokio::sync::mpsc;

fn event(session: &str, n: usize) -> Event {
    let mut init = EventInit::new(
        EventType::MessageStreamed,
        session,
        Provider::Demo,
        Timestamp::from_unix_millis(n as i64),
    );
    init.id = Some(agentwire::core::event::EventId::derive(&[
        session,
        &n.to_string(),
    ]));
    init.data.insert(
        "delta".into(),
        json!(format!(
            "chunk {n} of a long answer, padded to be a bit longer"
        )),
    );
    Event::new(init).unwrap()
}

/// A SQLite store in `dir` holding one running session, and a hub over it.
async fn hub_with_session(dir: &std::path::Path, session: &str) -> (Arc<dyn Store>, Arc<Hub>) {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.join("a.db")).unwrap());
    let record = SessionRecord::new(
        session,
        "demo",
        "/",
        SessionState::Running,
        "local",
        Timestamp::from_unix_millis(0),
    );
    store.create_session(record).await.unwrap();
    let hub = Hub::new(
        store.clone(),
        HubConfig::new(std::env::current_exe().unwrap()),
    );
    (store, hub)
}

/// A WebSocket client of the server at `addr` that said hello and subscribed to `session` from
/// its start. Its receive buffer is small: the server's side fills soon after it stops reading.
async fn subscribed_client(
    addr: std::net::SocketAddr,
    token: &str,
    session: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(addr).await.unwrap();
    let url = format!("ws://{addr}/ws?token={token}");
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    let hello = ClientMsg::Hello {
        protocols: vec![1],
        max_frame: None,
        client: None,
        features: Vec::new(),
    };
    let subscribe = ClientMsg::Subscribe {
        session: session.into(),
        after: 0,
        epoch: None,
        snapshot: None,
    };
    for msg in [hello.encode(), subscribe.encode()] {
        ws.send(Message::Text(msg.into())).await.unwrap();
    }
    ws
}

async fn next(rx: &mut mpsc::Receiver<Outgoing>) -> ServerMsg {
    let frame = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a frame in time")
        .expect("open");
    ServerMsg::decode(&frame.text, usize::MAX).unwrap()
}

#[tokio::test]
async fn a_slow_subscriber_is_resynced_from_the_store_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let session = "ses_5100";
    let (store, hub) = hub_with_session(dir.path(), session).await;
    let limits = ServerConfig::new("t".repeat(16), dir.path().into()).limits;

    let (in_tx, in_rx) = mpsc::channel::<Incoming>(8);
    let incoming = Box::pin(futures_util::stream::unfold(in_rx, |mut rx| async move {
        rx.recv().await.map(|m| (m, rx))
    }));
    // A tiny outgoing queue: the subscriber overflows it as soon as it stops reading.
    let (out_tx, mut out_rx) = mpsc::channel::<Outgoing>(2);
    tokio::spawn(run_connection(incoming, out_tx, hub, limits));
    let hello = ClientMsg::Hello {
        protocols: vec![1],
        max_frame: Some(MIN_MAX_FRAME),
        client: None,
        features: Vec::new(),
    };
    in_tx.send(Incoming::Text(hello.encode())).await.unwrap();
    assert!(matches!(next(&mut out_rx).await, ServerMsg::Welcome { .. }));
    let subscribe = ClientMsg::Subscribe {
        session: session.into(),
        after: 0,
        epoch: None,
        snapshot: None,
    };
    in_tx
        .send(Incoming::Text(subscribe.encode()))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut out_rx).await,
        ServerMsg::CaughtUp { latest: 0, .. }
    ));

    // 600 events arrive while the client reads nothing.
    for batch in 0..6 {
        let events = (0..100).map(|i| event(session, batch * 100 + i)).collect();
        store.append(session, events).await.unwrap();
    }
    let mut cursor = Cursor::default();
    let mut got = Vec::new();
    let mut resyncs = 0;
    let mut caught_up_after_resync = false;
    while got.len() < 600 || !caught_up_after_resync {
        match next(&mut out_rx).await {
            ServerMsg::Events { epoch, events, .. } => {
                let accepted = cursor.accept(&epoch, events);
                assert!(accepted.gap.is_none(), "gap: {:?}", accepted.gap);
                assert_eq!(accepted.duplicates, 0);
                got.extend(accepted.events);
            }
            ServerMsg::Resync { after, .. } => {
                assert_eq!(
                    after, cursor.after,
                    "resync resumes right after what was sent"
                );
                resyncs += 1;
            }
            ServerMsg::CaughtUp { latest, .. } => {
                caught_up_after_resync = resyncs > 0 && latest == 600;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(resyncs >= 1, "the subscriber was told it fell behind");
    let seqs: Vec<u64> = got.iter().map(Event::sequence).collect();
    assert_eq!(seqs, (1..=600).collect::<Vec<u64>>());
}

/// The same over a real WebSocket, where a subscription writes to the socket itself: a client
/// that stops reading fills the socket's buffer, and the subscription is told it fell behind
/// (`resync`), goes on from the store, and the client gets every event exactly once, then a
/// `caught_up` at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_websocket_reader_is_resynced_not_skipped() {
    use agentwire::companion::server::{self, AppState};
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;

    let dir = tempfile::tempdir().unwrap();
    let session = "ses_5101";
    let (store, hub) = hub_with_session(dir.path(), session).await;
    let at = Timestamp::from_unix_millis(0);
    let token = "t".repeat(16);
    let config = ServerConfig::new(token.clone(), dir.path().into());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(hub, Arc::new(config));
    tokio::spawn(server::serve(listener, state, std::future::pending()));

    let mut ws = subscribed_client(addr, &token, session).await;
    async fn next(ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> ServerMsg {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next());
        match frame.await.expect("a frame in time") {
            Some(Ok(Message::Text(t))) => ServerMsg::decode(&t, usize::MAX).unwrap(),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
    assert!(matches!(next(&mut ws).await, ServerMsg::Welcome { .. }));
    assert!(matches!(
        next(&mut ws).await,
        ServerMsg::CaughtUp { latest: 0, .. }
    ));

    // About 10 MB of events, appended one at a time (each its own live page), while the
    // client reads nothing.
    let big = "x".repeat(8 << 10);
    let total = 1200;
    for n in 0..total {
        let mut init = EventInit::new(EventType::MessageStreamed, session, Provider::Demo, at);
        init.id = Some(event(session, n).id().clone());
        init.data.insert("delta".into(), json!(big));
        store
            .append(session, vec![Event::new(init).unwrap()])
            .await
            .unwrap();
    }
    let mut cursor = Cursor::default();
    let mut got = 0u64;
    let mut resyncs = 0;
    let read = async {
        loop {
            match next(&mut ws).await {
                ServerMsg::Events { epoch, events, .. } => {
                    let accepted = cursor.accept(&epoch, events);
                    assert!(accepted.gap.is_none(), "gap: {:?}", accepted.gap);
                    assert_eq!(accepted.duplicates, 0);
                    got += accepted.events.len() as u64;
                }
                ServerMsg::Resync { after, .. } => {
                    assert_eq!(after, cursor.after, "resync resumes after what was sent");
                    resyncs += 1;
                }
                ServerMsg::CaughtUp { latest, .. } => {
                    assert!(resyncs > 0, "caught_up again only after a resync");
                    if latest == total as u64 {
                        return;
                    }
                }
                ServerMsg::Heartbeat { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    // Heartbeats keep the socket busy: the whole read has its own deadline.
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap_or_else(|_| panic!("no caught_up after a resync; {got} events, {resyncs} resyncs"));
    assert_eq!(got, total as u64);
    assert!(resyncs >= 1, "the subscriber was told it fell behind");
    assert_eq!(cursor.after, total as u64);
}

/// A client that stops reading for good (its buffers full, its connection open) is closed once
/// a write has been blocked for the write timeout: its socket, subscriptions and tasks go
/// with it, and what it was sent before is all it reads before the end. (That a slow reader
/// whose writes progress is not cut is `listen`'s unit test.)
#[tokio::test]
async fn a_websocket_client_that_never_reads_again_is_closed_after_the_write_timeout() {
    use std::sync::atomic::Ordering;

    use agentwire::companion::server::{self, AppState};
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;

    let dir = tempfile::tempdir().unwrap();
    let session = "ses_5102";
    let (store, hub) = hub_with_session(dir.path(), session).await;
    let token = "t".repeat(16);
    let mut config = ServerConfig::new(token.clone(), dir.path().into());
    config.listen.write_timeout = Duration::from_millis(500);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(hub, Arc::new(config));
    let streams = state.streams.clone();
    tokio::spawn(server::serve(listener, state, std::future::pending()));

    let mut ws = subscribed_client(addr, &token, session).await;
    for _ in 0..2 {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next()).await;
        assert!(matches!(frame, Ok(Some(Ok(Message::Text(_))))), "{frame:?}");
    }
    assert_eq!(streams.websocket.load(Ordering::Relaxed), 1);

    // Far more than the socket buffers on both sides hold, while the client reads nothing.
    let big = "x".repeat(8 << 10);
    for n in 0..400 {
        let mut init = EventInit::new(
            EventType::MessageStreamed,
            session,
            Provider::Demo,
            Timestamp::from_unix_millis(0),
        );
        init.id = Some(event(session, n).id().clone());
        init.data.insert("delta".into(), json!(big));
        let events = vec![Event::new(init).unwrap()];
        store.append(session, events).await.unwrap();
    }
    let closed = async {
        while streams.websocket.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), closed)
        .await
        .expect("the connection closed after its write timeout");

    // The client reads what reached it, then the end: no frame is left half-sent for ever.
    let drained = async {
        let mut frames = 0;
        while let Some(Ok(_)) = ws.next().await {
            frames += 1;
        }
        frames
    };
    let frames = tokio::time::timeout(Duration::from_secs(20), drained)
        .await
        .expect("the socket ends once read");
    assert!(frames < 400, "{frames} frames read: the writes had stopped");
}
