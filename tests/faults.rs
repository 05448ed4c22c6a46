//! Provider faults: an agent that hangs, ignores an interrupt, floods stderr, prints
//! unreadable output or crashes ends in the documented terminal event with a useful
//! `provider_error`, within a bounded time, while another session keeps streaming.

#![cfg(not(target_arch = "wasm32"))]

mod common;

use agentwire::core::event::{Event, EventType};
use common::*;

fn terminal<'a>(events: &'a [Event], run: &str) -> &'a Event {
    events
        .iter()
        .find(|e| e.kind().is_run_terminal() && e.run_id() == Some(run))
        .expect("a terminal")
}

#[test]
fn every_fault_ends_its_turn_and_the_others_keep_streaming() {
    let dir = tempfile::tempdir().unwrap();
    // The deaf answer streams 100 chunks, 10 ms apart: about a second, several times the
    // cancel grace, so it is still streaming when the grace runs out even on a loaded machine
    // (at 5 ms and a 500 ms grace, it sometimes finished first).
    let server = Server::start_with_delay(
        &dir.path().join("a.db"),
        0,
        10,
        &[
            "--turn-idle-limit-ms",
            "1500",
            "--cancel-grace-ms",
            "250",
            "--stall-ms",
            "500",
        ],
    );
    let healthy = server.create_demo_session();
    let healthy_turn = server.start_turn(&healthy, "a slow answer");

    // Hangs: writes nothing more. It is shown stalled after 500 ms, then the watchdog fails it.
    let hung = server.create_demo_session();
    let hung_turn = server.start_turn(&hung, "hang please");
    // Ignores the interrupt: after the grace, the turn is cancelled anyway.
    let deaf = server.create_demo_session();
    let deaf_turn = server.start_turn(&deaf, "deaf answer");
    server.wait_events(&deaf, "the deaf agent to stream", |e| {
        e.iter().any(|e| e.kind() == EventType::MessageStreamed)
    });
    let (status, body) = server.api("POST", &format!("/api/sessions/{deaf}/interrupt"), None);
    assert_eq!(status, 204, "{body}");
    // Floods stderr, then answers.
    let noisy = server.create_demo_session();
    let noisy_turn = server.start_turn(&noisy, "noisy answer");
    // Crashes mid-turn.
    let crashed = server.create_demo_session();
    let crashed_turn = server.start_turn(&crashed, "crash");

    let events = server.wait_events(&hung, "the watchdog", |e| ended(e, &hung_turn));
    let t = terminal(&events, &hung_turn);
    assert_eq!(t.kind(), EventType::RunFailed);
    assert_eq!(t.data()["provider_error"]["kind"], "watchdog");
    let stalls: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind() == EventType::RunStalled)
        .collect();
    assert_eq!(stalls.len(), 1, "one stall notice per silence");
    assert_eq!(stalls[0].run_id(), Some(hung_turn.as_str()));
    assert_eq!(stalls[0].data()["synthetic"], true);
    assert!(stalls[0].data()["silent_ms"].as_i64().unwrap() >= 500);
    assert!(
        stalls[0].sequence() < t.sequence(),
        "the stall comes before the watchdog"
    );

    let events = server.wait_events(&deaf, "the cancel grace", |e| ended(e, &deaf_turn));
    let t = terminal(&events, &deaf_turn);
    assert_eq!(
        (t.kind(), t.data_str("reason")),
        (EventType::RunCancelled, Some("interrupt_timeout"))
    );
    // What the deaf agent still writes for that turn is dropped: one terminal, nothing after.
    // A next turn plays only once the deaf one has finished writing.
    let next = server.start_turn(&deaf, "hello");
    let events = server.wait_events(&deaf, "the next turn", |e| ended(e, &next));
    let end = events
        .iter()
        .position(|e| e.kind().is_run_terminal() && e.run_id() == Some(deaf_turn.as_str()))
        .unwrap();
    assert!(
        events[end + 1..]
            .iter()
            .all(|e| e.run_id() != Some(deaf_turn.as_str())),
        "an event of the cancelled turn was stored after its terminal"
    );
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);

    let events = server.wait_events(&noisy, "the noisy turn", |e| ended(e, &noisy_turn));
    assert_eq!(
        terminal(&events, &noisy_turn).kind(),
        EventType::RunCompleted
    );

    let events = server.wait_events(&crashed, "the crash", |e| ended(e, &crashed_turn));
    let t = terminal(&events, &crashed_turn);
    assert_eq!(t.kind(), EventType::RunFailed);
    assert_eq!(t.data()["provider_error"]["exit_code"], 3);

    let events = server.wait_events(&healthy, "the healthy turn", |e| ended(e, &healthy_turn));
    assert_eq!(
        terminal(&events, &healthy_turn).kind(),
        EventType::RunCompleted
    );
    assert_contiguous(&events);
}
