//! The real Codex CLI (pinned by `scripts/install-clis`) as `codex app-server`, hosted by a
//! real `agentwire serve`, talking to `agentwire fake-model` on 127.0.0.1 through a model
//! provider in `$CODEX_HOME/config.toml` (tests/common/real.rs). The model is the only fake.
//! `RECORD_TRANSCRIPTS=1` keeps each session's traffic as
//! tests/data/codex-app-server/agentwire-fake__<name>.jsonl (see the README there).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use agentwire::core::event::EventType;
use common::real::{of_run, terminal, texts, Rig};
use common::*;

/// Every request reached the Responses API.
fn assert_only_responses_traffic(rig: &Rig) {
    rig.assert_only_traffic(|method, path| method == "POST" && path == "/v1/responses");
}

#[test]
fn plain_turns_stream_the_models_text_and_complete_with_distinct_run_ids() {
    let rig = Rig::codex();
    let (session, _, _, _) = rig.two_plain_turns();
    assert_only_responses_traffic(&rig);
    assert_eq!(rig.traffic().len(), 2, "one model request per turn");
    rig.keep_transcript(&session, "codex-app-server", "plain");
}

#[test]
fn a_command_waits_for_approval_and_runs_once_allowed() {
    let rig = Rig::codex();
    let session = rig.create_session();
    let turn = rig.server.start_turn(
        &session,
        "tool\n$ touch approved.txt && echo hello-from-tool",
    );
    let events = rig.approve(&session, &turn, "allow");
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert_eq!(
        of_run(&events, &turn, EventType::ToolApprovalGranted).len(),
        1
    );
    let done = of_run(&events, &turn, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1);
    assert!(rig.cwd.path().join("approved.txt").exists());
    let said = texts(&events, &turn);
    assert_eq!(said[0], "Running a command.");
    assert!(said[1].contains("hello-from-tool"), "{said:?}");

    let turn = rig
        .server
        .start_turn(&session, "tool\n$ touch denied.txt && echo nope");
    let events = rig.approve(&session, &turn, "deny");
    assert_eq!(
        of_run(&events, &turn, EventType::ToolApprovalDenied).len(),
        1
    );
    assert_eq!(of_run(&events, &turn, EventType::ToolCallFailed).len(), 1);
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert!(!rig.cwd.path().join("denied.txt").exists());
    assert_only_responses_traffic(&rig);
    rig.keep_transcript(&session, "codex-app-server", "tool");
}

#[test]
fn interrupting_a_slow_turn_cancels_it_and_the_session_goes_on() {
    let rig = Rig::codex();
    let (session, _, _) = rig.interrupted_slow_turn();
    assert_only_responses_traffic(&rig);
    rig.keep_transcript(&session, "codex-app-server", "interrupted");
}

#[test]
fn an_http_401_fails_the_turn_with_a_provider_error() {
    let rig = Rig::codex();
    let session = rig.failed_turn_then_another(&["authentication_failed"]);
    assert_only_responses_traffic(&rig);
    rig.keep_transcript(&session, "codex-app-server", "http401");
}

#[test]
fn reasoning_text_and_two_parallel_commands_complete_in_one_turn() {
    let rig = Rig::codex();
    let session = rig.create_session();
    // The untrusted policy asks even for `bash -lc 'echo one'`: both calls wait together.
    let turn = rig.server.start_turn(&session, "think");
    let events = rig.wait(&session, "two approval requests", |e| {
        of_run(e, &turn, EventType::ToolApprovalRequested).len() == 2
    });
    for request in of_run(&events, &turn, EventType::ToolApprovalRequested) {
        let request_id = request.data_str("request_id").unwrap();
        let (status, body) = rig.server.api(
            "POST",
            &format!("/api/sessions/{session}/approvals/{request_id}"),
            Some(serde_json::json!({"decision": "allow"})),
        );
        assert_eq!(status, 204, "{body}");
    }
    let events = rig.wait(&session, "the turn to end", |e| ended(e, &turn));
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert!(!of_run(&events, &turn, EventType::ReasoningReceived).is_empty());
    assert_eq!(
        of_run(&events, &turn, EventType::ToolCallCompleted).len(),
        2
    );
    assert_only_responses_traffic(&rig);
    rig.keep_transcript(&session, "codex-app-server", "think");
}

#[test]
fn a_thread_resumes_after_a_kill_9_and_the_model_sees_the_earlier_turn() {
    let mut rig = Rig::codex();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "remember the word pineapple");
    rig.resumed_turn(&session, &first);
    let requests = rig.fake.requests();
    let last = requests.last().unwrap();
    let input = last["body"]["input"].to_string();
    assert!(input.contains("pineapple"), "{input}");
    assert!(input.contains("Hello from the fake model."), "{input}");
    assert_only_responses_traffic(&rig);
    rig.keep_transcript(&session, "codex-app-server", "resumed");
}
