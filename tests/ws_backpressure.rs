//! The WebSocket protocol driven in-process over channels (the socket-free side of
//! `companion::ws`), against a real SQLite store: a subscriber that stops reading is switched
//! back to catch-up from the store, told so, and then gets every event exactly once.
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
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("a.db")).unwrap());
    let at = Timestamp::from_unix_millis(0);
    let session = "ses_5100";
    store
        .create_session(SessionRecord::new(
            session,
            "demo",
            "/",
            SessionState::Running,
            "local",
            at,
        ))
        .await
        .unwrap();
    let hub = Hub::new(
        store.clone(),
        HubConfig::new(std::env::current_exe().unwrap()),
    );
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
