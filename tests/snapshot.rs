//! Snapshots and history against a real `agentwire serve` over a real WebSocket: a seeded
//! session (`agentwire-testkit seed`) and a live demo turn are opened from a snapshot, paged
//! back to their first item, and end exactly as one pass over their stored log projects;
//! every frame respects a small negotiated `max_frame`; the core `Client` asks for a snapshot
//! once and resumes by cursor after a drop.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use agentwire::companion::seed::{seed, SeedOptions};
use agentwire::companion::snapshot::{Projections, CHECKPOINT_EVERY};
use agentwire::companion::store::{
    EventQuery, PostgresStore, SqliteStore, Store, StoredProjection,
};
use agentwire::core::client::{Action, Client, ClientConfig};
use agentwire::core::event::Event;
use agentwire::core::projector::{Note, Projector, Signal};
use agentwire::core::snapshot::{Projection, Snapshot, SnapshotRequest, PROJECTION_FORMAT};
use agentwire::core::timeline::Item;
use agentwire::core::wire::{ClientMsg, MIN_MAX_FRAME};
use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const SESSION: &str = "ses_5eed";

/// The items one pass over the stored log projects.
fn reference(events: &[Event]) -> Vec<Item> {
    let mut p = Projection::new(SESSION);
    for e in events {
        p.handle_event(e, 0);
    }
    p.timeline().items().to_vec()
}

async fn hello_with(url: &str, max_frame: usize) -> Socket {
    let mut socket = ws_connect(url, &[]).await.expect("websocket connects");
    let hello = ClientMsg::Hello {
        protocols: vec![1],
        max_frame: Some(max_frame),
        client: None,
        features: Vec::new(),
    };
    send(&mut socket, &hello).await;
    socket
}

/// The next text frame, raw; fails after the deadline.
async fn next_text(socket: &mut Socket) -> String {
    loop {
        let next = tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("a frame before the deadline");
        match next {
            Some(Ok(Message::Text(t))) => return t.to_string(),
            Some(Ok(_)) => continue,
            other => panic!("the socket ended: {other:?}"),
        }
    }
}

/// Feeds frames to `p` until `done` says so on a signal; every frame at most `max_frame`.
async fn pump(
    socket: &mut Socket,
    p: &mut Projector,
    max_frame: usize,
    mut done: impl FnMut(&Signal) -> bool,
) -> usize {
    let start = Instant::now();
    let mut frames = 0;
    loop {
        assert!(start.elapsed() < DEADLINE, "not done in time");
        let text = next_text(socket).await;
        assert!(text.len() <= max_frame, "a frame of {} bytes", text.len());
        frames += 1;
        let signal = p.handle_frame(&text, 0).expect("a server frame");
        if done(&signal) {
            return frames;
        }
    }
}

/// Pages back to the first item with `history`; returns how many pages it took.
async fn page_back(socket: &mut Socket, p: &mut Projector, max_frame: usize) -> usize {
    let mut pages = 0;
    while p.start(SESSION) > 0 {
        pages += 1;
        let id = format!("h{pages}");
        let before = p.start(SESSION);
        let ask = ClientMsg::History {
            id: id.clone(),
            session: SESSION.into(),
            before,
            limit: 300,
        };
        send(socket, &ask).await;
        pump(
            socket,
            p,
            max_frame,
            |s| matches!(s, Signal::Reply { id: r, .. } if *r == id),
        )
        .await;
        assert!(p.start(SESSION) < before, "a page moves the start back");
    }
    pages
}

fn no_gaps(p: &mut Projector) {
    let batch = p.drain();
    for s in &batch.sessions {
        for n in &s.notes {
            assert!(!matches!(n, Note::Gap { .. } | Note::Error { .. }), "{n:?}");
        }
    }
    assert_eq!(p.duplicates(SESSION), 0);
}

#[tokio::test]
async fn a_seeded_session_opens_from_a_snapshot_in_small_frames_and_pages_back_to_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let seeded = Command::new(env!("CARGO_BIN_EXE_agentwire-testkit"))
        .args(["seed", "--db"])
        .arg(&db)
        .args(["--session", SESSION, "--events", "3000"])
        .output()
        .expect("seed runs");
    assert!(seeded.status.success(), "{seeded:?}");
    let server = Server::start(&db, 0, &[]);
    let stored = server.events(SESSION);
    let want = reference(&stored);

    let mut socket = hello_with(&server.ws_url(), MIN_MAX_FRAME).await;
    let subscribe = ClientMsg::Subscribe {
        session: SESSION.into(),
        after: 0,
        epoch: None,
        snapshot: Some(SnapshotRequest { items: 40 }),
    };
    send(&mut socket, &subscribe).await;
    let mut p = Projector::new();
    let frames = pump(&mut socket, &mut p, MIN_MAX_FRAME, |s| {
        matches!(s, Signal::CaughtUp { .. })
    })
    .await;
    // The welcome, the snapshot in parts, the caught_up: no event was replayed.
    assert!(frames < 200, "{frames} frames for a snapshot of 40 items");
    assert_eq!(p.cursor(SESSION).unwrap().after, stored.len() as u64);
    let start = p.start(SESSION);
    assert!(start > 0 && p.items(SESSION).len() >= 40);
    assert_eq!(p.items(SESSION), &want[start..]);
    no_gaps(&mut p);

    let pages = page_back(&mut socket, &mut p, MIN_MAX_FRAME).await;
    assert_eq!(pages, start.div_ceil(300));
    assert_eq!(p.items(SESSION), want.as_slice());
    no_gaps(&mut p);

    // The same pages over the HTTP fallback: a POST answered by the `history` frame.
    let history =
        json!({"t": "history", "id": "h1", "session": SESSION, "before": start, "limit": 50});
    let (status, page) = server.api("POST", "/api/wire", Some(history));
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["t"], "history", "{page}");
    assert_eq!(page["start"], start - 50);
    let items: Vec<Item> = serde_json::from_value(page["items"].clone()).unwrap();
    assert_eq!(items, want[start - 50..start]);
}

#[tokio::test]
async fn a_live_turn_follows_its_snapshot_without_gap_or_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_delay(&dir.path().join("a.db"), 0, 5, &[]);
    let session = server.create_demo_session();
    let first = server.start_turn(&session, "a first answer");
    server.wait_events(&session, "the first turn ends", |e| ended(e, &first));
    let turn = server.start_turn(&session, "a slow second answer");
    server.wait_events(&session, "the second turn starts", |e| {
        e.iter().any(|e| e.run_id() == Some(turn.as_str()))
    });

    let mut socket = hello_with(&server.ws_url(), MIN_MAX_FRAME).await;
    let subscribe = ClientMsg::Subscribe {
        session: session.clone(),
        after: 0,
        epoch: None,
        snapshot: Some(SnapshotRequest { items: 2 }),
    };
    send(&mut socket, &subscribe).await;
    let mut p = Projector::new();
    pump(&mut socket, &mut p, MIN_MAX_FRAME, |s| {
        matches!(s, Signal::CaughtUp { .. })
    })
    .await;
    // Then live until the turn ends in the projector.
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < DEADLINE, "the turn did not end in time");
        let text = next_text(&mut socket).await;
        assert!(text.len() <= MIN_MAX_FRAME);
        p.handle_frame(&text, 0).unwrap();
        let stored = server.events(&session);
        if ended(&stored, &turn) && p.cursor(&session).unwrap().after == stored.len() as u64 {
            break;
        }
    }
    let stored = server.events(&session);
    let mut want = Projection::new(&session);
    for e in &stored {
        want.handle_event(e, 0);
    }
    assert!(p.start(&session) > 0, "the snapshot left older items out");
    let start = p.start(&session);
    assert_eq!(p.items(&session), &want.timeline().items()[start..]);
    assert_eq!(p.lifecycle(&session).unwrap(), want.lifecycle_state());
    let batch = p.drain();
    for n in batch.sessions.iter().flat_map(|s| &s.notes) {
        assert!(!matches!(n, Note::Gap { .. }), "{n:?}");
    }
}

/// Drives a core `Client` over real sockets until `done`; returns the subscribes it sent.
async fn drive(
    client: &mut Client,
    socket: &mut Option<Socket>,
    url: &str,
    mut done: impl FnMut(&Client) -> bool,
) -> Vec<ClientMsg> {
    let mut subscribes = Vec::new();
    let mut conn = 0;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the client did not get there in time"
        );
        while let Some(action) = client.poll_action() {
            match action {
                Action::Connect { conn: c } => {
                    *socket = Some(ws_connect(url, &[]).await.expect("connects"));
                    conn = c;
                    client.handle_open(c, 0);
                }
                Action::Disconnect { .. } => *socket = None,
                Action::ConnectSse { .. } => panic!("no fallback here"),
            }
        }
        let s = socket.as_mut().expect("connected");
        while let Some(frame) = client.poll_transmit() {
            let msg = ClientMsg::decode(&frame, usize::MAX).unwrap();
            if matches!(msg, ClientMsg::Subscribe { .. }) {
                subscribes.push(msg);
            }
            s.send(Message::Text(frame.into())).await.unwrap();
        }
        client.drain();
        if done(client) {
            return subscribes;
        }
        let text = next_text(s).await;
        client.handle_frame(conn, &text, 0);
    }
}

#[tokio::test]
async fn the_client_asks_for_a_snapshot_once_and_resumes_by_cursor_after_a_drop() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let seeded = Command::new(env!("CARGO_BIN_EXE_agentwire-testkit"))
        .args(["seed", "--db"])
        .arg(&db)
        .args(["--session", SESSION, "--events", "500"])
        .output()
        .expect("seed runs");
    assert!(seeded.status.success());
    let server = Server::start(&db, 0, &[]);
    let stored = server.events(SESSION);
    let config = ClientConfig {
        snapshot: Some(20),
        fallback: false,
        ..ClientConfig::default()
    };
    let mut client = Client::new(config, 0);
    client.subscribe(SESSION);
    let mut socket = None;
    let latest = stored.len() as u64;
    let caught_up = |c: &Client| {
        c.projector()
            .cursor(SESSION)
            .is_some_and(|k| k.after == latest)
    };
    let first = drive(&mut client, &mut socket, &server.ws_url(), caught_up).await;
    assert!(
        matches!(
            &first[..],
            [ClientMsg::Subscribe {
                after: 0,
                snapshot: Some(SnapshotRequest { items: 20 }),
                ..
            }]
        ),
        "{first:?}"
    );
    let start = client.projector().start(SESSION);
    assert!(start > 0);
    // The connection drops; the next one resumes from the cursor, with no snapshot.
    client.handle_close(1, 0);
    socket = None;
    let mut second = Vec::new();
    let started = Instant::now();
    while second.is_empty() {
        assert!(started.elapsed() < DEADLINE);
        client.handle_timeout(started.elapsed().as_millis() as i64 + 10_000);
        second = drive(&mut client, &mut socket, &server.ws_url(), |c| {
            c.state() == agentwire::core::client::ConnectionState::CaughtUp
        })
        .await;
    }
    assert!(
        matches!(&second[..], [ClientMsg::Subscribe { after, snapshot: None, .. }] if *after == latest),
        "{second:?}"
    );
    assert_eq!(
        client.projector().start(SESSION),
        start,
        "nothing was snapshotted again"
    );
    let want = reference(&stored);
    assert_eq!(client.projector().items(SESSION), &want[start..]);
}

/// A full projection of the stored log and that log.
async fn stored_log(store: &Arc<dyn Store>) -> (Vec<Event>, Projection) {
    let events = store
        .get_events(SESSION, &EventQuery::default())
        .await
        .unwrap();
    let mut p = Projection::new(SESSION);
    for e in &events {
        p.handle_event(e, 0);
    }
    (events, p)
}

/// What a cold companion answers (a fresh cache over `store`): a snapshot of `items` items,
/// then history pages of `page` items back to the start, checked against one pass. Returns
/// how many events the cold cache applied to answer the snapshot.
async fn check_cold(store: &Arc<dyn Store>, whole: &Projection, items: usize, page: usize) -> u64 {
    let cold = Projections::new(store.clone());
    let s = cold.snapshot(SESSION, items).await.expect("a snapshot");
    let applied = cold.applied();
    let want = whole.snapshot(store.epoch(), items);
    assert_eq!(
        (
            s.start,
            &s.items,
            &s.lifecycle,
            &s.usage,
            &s.approvals,
            s.after
        ),
        (
            want.start,
            &want.items,
            &want.lifecycle,
            &want.usage,
            &want.approvals,
            want.after
        ),
        "a snapshot of {items}"
    );
    let mut before = s.start;
    let mut all = s.items;
    while before > 0 {
        let (start, older) = cold.history(SESSION, before, page).await.expect("a page");
        assert_eq!(
            start + older.len(),
            before,
            "a page of {page} ends where asked"
        );
        assert_eq!(older.len(), page.min(before));
        all.splice(0..0, older);
        before = start;
    }
    assert_eq!(
        all,
        whole.timeline().items(),
        "paged back in pages of {page}"
    );
    // Pages from anywhere, also across where the stored items end and the held begin.
    let total = whole.timeline().len();
    for before in [total, total - 1, total / 2, 1, 0] {
        let (start, got) = cold.history(SESSION, before, page).await.expect("a page");
        assert_eq!(start, before.saturating_sub(page));
        assert_eq!(got, &whole.timeline().items()[start..before]);
    }
    applied
}

/// A session seeded into `store`, its projection brought up to date by one cache, then
/// snapshots and history of every size from cold caches, as one pass over the log.
async fn stored_projections_answer_as_one_pass(store: Arc<dyn Store>) {
    let options = SeedOptions {
        session: SESSION.into(),
        events: 20_000,
        tool_updates: Some((500, 300)),
    };
    seed(store.as_ref(), &options).await.unwrap();
    let (events, whole) = stored_log(&store).await;
    // A companion brings the session's projection up to date, checkpointing on the way...
    let after = Projections::new(store.clone())
        .refresh(SESSION)
        .await
        .unwrap();
    assert!(
        after + CHECKPOINT_EVERY > events.len() as u64,
        "checkpointed at {after}"
    );
    let stored = (store.load_projection(SESSION, PROJECTION_FORMAT).await)
        .unwrap()
        .expect("a stored checkpoint");
    assert_eq!(stored.after, after);
    assert!(stored.items > 1000, "{} final items stored", stored.items);
    // ...and every cold one answers from it as one pass over the log does.
    for (items, page) in [(1, 7), (40, 300), (1000, 1000), (5000, 2500)] {
        let applied = check_cold(&store, &whole, items, page).await;
        assert_eq!(
            applied,
            events.len() as u64 - after,
            "only the events after the checkpoint"
        );
    }
    // Of another format, nothing is read.
    assert!(
        (store.load_projection(SESSION, PROJECTION_FORMAT + 1).await)
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_projection_answers_snapshots_and_history_as_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("a.db")).unwrap();
    stored_projections_answer_as_one_pass(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_projection_on_postgres_answers_snapshots_and_history_as_one_pass() {
    let url = postgres::fresh_database().await;
    let store = PostgresStore::connect(&url).await.unwrap();
    stored_projections_answer_as_one_pass(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_projection_that_does_not_fit_the_log_is_rebuilt_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("a.db")).unwrap());
    let options = SeedOptions {
        session: SESSION.into(),
        events: 9_000,
        tool_updates: None,
    };
    seed(store.as_ref(), &options).await.unwrap();
    let (_, whole) = stored_log(&store).await;
    Projections::new(store.clone())
        .refresh(SESSION)
        .await
        .unwrap();
    let good = (store.load_projection(SESSION, PROJECTION_FORMAT).await)
        .unwrap()
        .expect("a stored checkpoint");
    let mut snapshot: Snapshot = serde_json::from_slice(&good.body).unwrap();
    snapshot.epoch = "another log".into();
    let other_epoch = serde_json::to_vec(&snapshot).unwrap();
    let bad = |after: u64, items: u64, body: &[u8]| StoredProjection {
        format: PROJECTION_FORMAT,
        after,
        items,
        body: body.to_vec(),
    };
    let cases = [
        ("not JSON", bad(good.after, good.items, b"{not json")),
        ("another epoch", bad(good.after, good.items, &other_epoch)),
        (
            "ahead of the log",
            bad(good.after + 100_000, good.items, &good.body),
        ),
        (
            "its items miscounted",
            bad(good.after, good.items + 1, &good.body),
        ),
    ];
    for (what, checkpoint) in cases {
        store
            .save_projection(SESSION, 0, Vec::new(), checkpoint)
            .await
            .unwrap();
        let applied = check_cold(&store, &whole, 40, 500).await;
        assert_eq!(applied, whole.after(), "{what}: the whole log replayed");
        // The rebuild stored a good one again.
        let now = store
            .load_projection(SESSION, PROJECTION_FORMAT)
            .await
            .unwrap()
            .unwrap();
        assert!(
            serde_json::from_slice::<Snapshot>(&now.body).is_ok(),
            "{what}"
        );
        assert_eq!(now.items, good.items, "{what}");
    }
}

/// Waits (with a deadline) until `session` has a stored checkpoint at `at_least` or later.
async fn checkpointed(store: &Arc<dyn Store>, session: &str, at_least: u64) -> StoredProjection {
    let start = Instant::now();
    loop {
        let stored = store
            .load_projection(session, PROJECTION_FORMAT)
            .await
            .unwrap();
        match stored {
            Some(p) if p.after >= at_least => return p,
            _ => assert!(
                start.elapsed() < DEADLINE,
                "{session} was not checkpointed in time"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_companion_keeps_the_stored_projections_of_a_growing_log() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("a.db")).unwrap());
    let options = |session: &str| SeedOptions {
        session: session.into(),
        events: 6_000,
        tool_updates: None,
    };
    // A session stored before (no projection), and one written while the companion runs.
    let old = seed(store.as_ref(), &options("ses_01d")).await.unwrap();
    let projections = Projections::new(store.clone());
    tokio::spawn(projections.clone().keep_checkpoints());
    checkpointed(&store, "ses_01d", old - CHECKPOINT_EVERY + 1).await;
    let new = seed(store.as_ref(), &options("ses_0e1")).await.unwrap();
    checkpointed(&store, "ses_0e1", new - CHECKPOINT_EVERY + 1).await;
    // Only what pages ask for is held: the background's projections are let go.
    let start = Instant::now();
    while projections.held() > 0 {
        assert!(start.elapsed() < DEADLINE, "{} held", projections.held());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
