//! An agent that never reads its stdin while it streams (the demo agent's `plugged` answer)
//! cannot block its session: its output is still read and stored, commands are still
//! answered while their bytes wait for the pipe, an interrupt still ends the turn (after the
//! cancel grace), and the session can be closed.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::time::{Duration, Instant};

use agentwire::core::event::{Event, EventType};
use common::{assert_contiguous, ended, Server};
use serde_json::json;

fn chunks(events: &[Event], turn: &str) -> usize {
    events
        .iter()
        .filter(|e| e.run_id() == Some(turn) && e.kind() == EventType::MessageStreamed)
        .count()
}

#[test]
fn an_agent_that_never_reads_its_stdin_does_not_block_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("log.db");
    let server = Server::start_with_delay(&db, 0, 10, &["--cancel-grace-ms", "300"]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "a plugged answer");
    server.wait_events(&session, "the answer to stream", |e| chunks(e, &turn) >= 5);

    // A mode change writes about 110 bytes to the agent's stdin: a thousand of them fill its
    // pipe (64 KiB) and more. Each is answered; none waits for the agent.
    let start = Instant::now();
    for i in 0..1_000 {
        let mode = if i % 2 == 0 { "dontAsk" } else { "default" };
        let path = format!("/api/sessions/{session}/mode");
        let (status, body) = server.api("POST", &path, Some(json!({ "mode": mode })));
        assert_eq!(status, 204, "mode change {i}: {body}");
    }
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");

    // Its output is still read and stored.
    let seen = chunks(&server.events(&session), &turn);
    server.wait_events(&session, "more chunks", |e| chunks(e, &turn) >= seen + 5);

    // The interrupt never reaches it; the turn ends after the cancel grace all the same.
    let (status, body) = server.api("POST", &format!("/api/sessions/{session}/interrupt"), None);
    assert!((200..300).contains(&status), "{status} {body}");
    let events = server.wait_events(&session, "the cancel grace", |e| ended(e, &turn));
    let terminal = events
        .iter()
        .find(|e| e.kind().is_run_terminal() && e.run_id() == Some(turn.as_str()))
        .unwrap();
    assert_eq!(terminal.kind(), EventType::RunCancelled, "{terminal:?}");
    assert_eq!(terminal.data_str("reason"), Some("interrupt_timeout"));

    // And it can be closed.
    let (status, body) = server.api("DELETE", &format!("/api/sessions/{session}"), None);
    assert_eq!(status, 204, "{body}");
    let events = server.wait_events(&session, "the session's end", |e| {
        e.last()
            .is_some_and(|e| e.kind() == EventType::SessionCompleted)
    });
    assert_contiguous(&events);
    let terminals = (events.iter())
        .filter(|e| e.kind().is_run_terminal() && e.run_id() == Some(turn.as_str()))
        .count();
    assert_eq!(terminals, 1);
    let (_, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["session"]["state"], "closed", "{body}");
}
