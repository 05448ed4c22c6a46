//! The real OpenCode CLI (pinned by `scripts/install-clis`) as `opencode serve` on a loopback
//! port the adapter picks, hosted by a real `agentwire serve` over HTTP and its `/event`
//! stream, its model an OpenAI-compatible provider at `agentwire fake-model` on 127.0.0.1
//! (tests/common/real.rs). The model is the only fake. `RECORD_TRANSCRIPTS=1` keeps each
//! session's event stream as tests/data/opencode/agentwire-fake__<name>.jsonl (see the README
//! there).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use agentwire::core::event::EventType;
use common::real::{of_run, terminal, texts, Rig};
use serde_json::json;

/// Every request reached the Chat Completions API (turns, and OpenCode's title request).
fn assert_only_chat_traffic(rig: &Rig) {
    rig.assert_only_traffic(|method, path| method == "POST" && path == "/v1/chat/completions");
}

#[test]
fn plain_turns_stream_the_models_text_and_complete_with_distinct_run_ids() {
    let rig = Rig::opencode();
    let (session, _, _, events) = rig.two_plain_turns();
    let unread: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == EventType::ErrorOccurred)
        .map(|e| e.to_json())
        .collect();
    assert!(
        unread.is_empty(),
        "every event of the stream was read: {unread:#?}"
    );
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["runtime"]["version"], "1.18.33", "{body}");
    assert_only_chat_traffic(&rig);
    rig.keep_transcript(&session, "opencode", "plain");
}

#[test]
fn a_shell_command_waits_for_approval_and_runs_once_allowed() {
    let rig = Rig::opencode();
    let session = rig.create_session();
    let turn = rig.server.start_turn(
        &session,
        "tool\n$ touch approved.txt && echo hello-from-tool",
    );
    let events = rig.approve(&session, &turn, "allow");
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    let done = of_run(&events, &turn, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1);
    assert!(rig.cwd.path().join("approved.txt").exists());
    assert_eq!(
        texts(&events, &turn),
        ["Running a command.", "The tool said: hello-from-tool"]
    );

    let turn = rig
        .server
        .start_turn(&session, "tool\n$ touch denied.txt && echo nope");
    let events = rig.approve(&session, &turn, "deny");
    assert_eq!(
        of_run(&events, &turn, EventType::ToolApprovalDenied).len(),
        1
    );
    assert_eq!(of_run(&events, &turn, EventType::ToolCallFailed).len(), 1);
    assert!(terminal(&events, &turn).kind().is_run_terminal());
    assert!(!rig.cwd.path().join("denied.txt").exists());
    let (next, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_only_chat_traffic(&rig);
    rig.keep_transcript(&session, "opencode", "tool");
}

#[test]
fn interrupting_a_slow_turn_cancels_it_and_the_session_goes_on() {
    let rig = Rig::opencode();
    let (session, _, _) = rig.interrupted_slow_turn();
    assert_only_chat_traffic(&rig);
    rig.keep_transcript(&session, "opencode", "interrupted");
}

#[test]
fn an_http_401_fails_the_turn_with_a_provider_error() {
    let rig = Rig::opencode();
    let session = rig.failed_turn_then_another(&["authentication_failed"]);
    assert_only_chat_traffic(&rig);
    rig.keep_transcript(&session, "opencode", "http401");
}

#[test]
fn the_plan_agent_is_a_mode_and_thinking_is_unsupported() {
    let rig = Rig::opencode();
    let session = rig.create_session();
    let describe = |rig: &Rig| {
        let (status, body) = rig
            .server
            .api("GET", &format!("/api/sessions/{session}"), None);
        assert_eq!(status, 200, "{body}");
        body
    };
    // OpenCode's default agent is in use until another is chosen.
    let body = describe(&rig);
    assert_eq!(body["current_mode"], "build", "{body}");
    let path = format!("/api/sessions/{session}/mode");
    let (status, body) = rig.server.api("POST", &path, Some(json!({"mode": "plan"})));
    assert_eq!(status, 204, "{body}");
    let (status, body) = rig.server.api(
        "POST",
        &format!("/api/sessions/{session}/model"),
        Some(json!({"thinking": "low"})),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unsupported");
    let (turn, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    let body = describe(&rig);
    assert_eq!(body["current_mode"], "plan", "{body}");
    let requests = rig.fake.requests();
    let prompt = requests
        .iter()
        .rfind(|r| r["body"]["tools"].is_array())
        .unwrap();
    let system = prompt["body"]["messages"][0]["content"].to_string();
    assert!(
        system.to_lowercase().contains("plan"),
        "the plan agent's prompt"
    );
}

#[test]
fn a_session_resumes_after_a_kill_9_and_the_model_sees_the_earlier_turn() {
    let mut rig = Rig::opencode();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "remember the word pineapple");
    rig.resumed_turn(&session, &first);
    let requests = rig.fake.requests();
    let last = requests
        .iter()
        .rfind(|r| r["body"]["tools"].is_array())
        .unwrap();
    let conversation = last["body"]["messages"].to_string();
    assert!(conversation.contains("pineapple"), "{conversation}");
    assert!(
        conversation.contains("Hello from the fake model."),
        "{conversation}"
    );
    assert_only_chat_traffic(&rig);
}
