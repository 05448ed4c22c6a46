//! The real Claude Code CLI (pinned by `scripts/install-clis`), hosted by a real `agentwire
//! serve`, talking to `agentwire fake-model` on 127.0.0.1: the model is the only fake part.
//!
//! The server's environment is cleared down to `PATH` plus what the CLI needs to run offline
//! (tests/common/real.rs), so nothing of the caller's own settings or credentials reaches the
//! CLI. `RECORD_TRANSCRIPTS=1` keeps each test's session traffic as
//! tests/data/claude/agentwire-fake__<name>.jsonl (see the README there).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use agentwire::core::event::{Event, EventType};
use common::real::{of_run, terminal, Rig};
use common::*;
use serde_json::{json, Value};

/// Every request reached the Messages API, besides the CLI's preconnect `HEAD /`.
fn assert_only_messages_traffic(rig: &Rig) {
    rig.assert_only_traffic(|method, path| {
        let messages = method == "POST" && path.starts_with("/v1/messages");
        let preconnect = method == "HEAD" && path == "/";
        messages || preconnect
    });
    assert!(rig.fake.requests().iter().any(|r| r["method"] == "POST"
        && r["headers"]["user-agent"]
            .as_str()
            .is_some_and(|ua| ua.starts_with("claude-cli/2.1.197"))));
}

fn posts(rig: &Rig) -> usize {
    rig.traffic().iter().filter(|(m, _)| m == "POST").count()
}

#[test]
fn plain_turns_stream_the_models_text_and_complete_with_distinct_run_ids() {
    let rig = Rig::claude();
    let (status, info) = rig.server.api("GET", "/api/info", None);
    assert_eq!(status, 200);
    assert_eq!(
        info["providers"],
        json!(["demo", "claude", "codex", "gemini", "opencode"])
    );
    let (session, first, second, events) = rig.two_plain_turns();
    let sent = of_run(&events, &first, EventType::MessageSent);
    assert_eq!(sent[0].data_str("content"), Some("hello"));
    let received = of_run(&events, &first, EventType::MessageReceived);
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].data_str("content"),
        Some("Hello from the fake model.")
    );
    assert!(events.iter().any(|e| e.kind() == EventType::SessionStarted));
    assert_eq!(of_run(&events, &second, EventType::RunStarted).len(), 1);
    assert_only_messages_traffic(&rig);
    assert_eq!(posts(&rig), 2, "one model request per turn");
    rig.keep_transcript(&session, "claude", "plain");
}

#[test]
fn a_tool_call_waits_for_approval_and_runs_once_allowed() {
    let rig = Rig::claude();
    let session = rig.create_session();
    // `touch` is not read-only, so Claude Code asks before running it.
    let turn = rig.server.start_turn(
        &session,
        "tool\n$ touch approved.txt && echo hello-from-tool",
    );
    let events = rig.wait(&session, "an approval request", |e| {
        e.iter()
            .any(|e| e.kind() == EventType::ToolApprovalRequested)
    });
    let request = events
        .iter()
        .find(|e| e.kind() == EventType::ToolApprovalRequested)
        .unwrap();
    assert_eq!(request.run_id(), Some(turn.as_str()));
    assert_eq!(request.data_str("tool_name"), Some("Bash"));
    assert!(!rig.cwd.path().join("approved.txt").exists());
    let request_id = request.data_str("request_id").unwrap();
    let (status, body) = rig.server.api(
        "POST",
        &format!("/api/sessions/{session}/approvals/{request_id}"),
        Some(json!({"decision": "allow"})),
    );
    assert_eq!(status, 204, "{body}");
    let events = rig.wait(&session, "the turn to end", |e| ended(e, &turn));
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert_eq!(
        of_run(&events, &turn, EventType::ToolApprovalGranted).len(),
        1
    );
    let done = of_run(&events, &turn, EventType::ToolCallCompleted);
    assert_eq!(done.len(), 1);
    assert!(done[0].data()["tool_output"]
        .as_str()
        .is_some_and(|o| o.contains("hello-from-tool")));
    let texts: Vec<_> = of_run(&events, &turn, EventType::MessageReceived)
        .iter()
        .filter_map(|e| e.data_str("content"))
        .collect();
    assert_eq!(
        texts,
        ["Running a command.", "The tool said: hello-from-tool"]
    );
    assert!(rig.cwd.path().join("approved.txt").exists());

    // Denied: the tool does not run, the model hears why, the turn still ends.
    let turn = rig
        .server
        .start_turn(&session, "tool\n$ touch denied.txt && echo nope");
    let events = rig.wait(&session, "a second request", |e| {
        e.iter().any(|e| {
            e.kind() == EventType::ToolApprovalRequested && e.run_id() == Some(turn.as_str())
        })
    });
    let request = of_run(&events, &turn, EventType::ToolApprovalRequested)[0];
    let request_id = request.data_str("request_id").unwrap();
    let (status, _) = rig.server.api(
        "POST",
        &format!("/api/sessions/{session}/approvals/{request_id}"),
        Some(json!({"decision": "deny"})),
    );
    assert_eq!(status, 204);
    let events = rig.wait(&session, "the turn to end", |e| ended(e, &turn));
    assert_eq!(
        of_run(&events, &turn, EventType::ToolApprovalDenied).len(),
        1
    );
    assert_eq!(of_run(&events, &turn, EventType::ToolCallFailed).len(), 1);
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert!(!rig.cwd.path().join("denied.txt").exists());
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "tool");
}

#[test]
fn interrupting_a_slow_turn_cancels_it_and_the_session_goes_on() {
    let rig = Rig::claude();
    let (session, turn, events) = rig.interrupted_slow_turn();
    let streamed = of_run(&events, &turn, EventType::MessageStreamed).len();
    assert!(
        streamed < 50,
        "the interrupt stopped the stream ({streamed} deltas)"
    );
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "interrupted");
}

#[test]
fn an_http_401_fails_the_turn_with_a_provider_error() {
    let rig = Rig::claude();
    let session = rig.create_session();
    let (turn, events) = rig.turn(&session, "http401");
    let end = terminal(&events, &turn);
    assert_eq!(end.kind(), EventType::RunFailed);
    let error: &Value = &end.data()["provider_error"];
    let kind = error["kind"].as_str().unwrap();
    assert!(
        ["authentication_failed"].contains(&kind),
        "{}",
        end.to_json()
    );
    // The retry the CLI made is reported as a warning first.
    assert!(!of_run(&events, &turn, EventType::ErrorOccurred).is_empty());
    assert_eq!(
        posts(&rig),
        2,
        "CLAUDE_CODE_MAX_RETRIES=1: one try and one retry"
    );
    // The session survives a failed turn.
    let (next, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "http401");
}

#[test]
fn a_provider_whose_cli_is_missing_fails_with_cli_not_found() {
    let db = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let empty_path = empty.path().to_str().unwrap();
    let server = Server::start_with_env(
        &db.path().join("a.db"),
        &["--cli-dir", empty_path],
        &[("PATH", empty_path), ("HOME", empty_path)],
    );
    let (_, info) = server.api("GET", "/api/info", None);
    assert_eq!(info["providers"], json!(["demo"]));
    let (status, body) = server.api(
        "POST",
        "/api/sessions",
        Some(json!({"provider": "claude", "cwd": empty.path()})),
    );
    assert_eq!(status, 424, "{body}");
    assert_eq!(body["error"]["code"], "cli_not_found");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("scripts/install-clis") && message.contains("@anthropic-ai/claude-code"),
        "{message}"
    );
    // Amp is not among the pinned CLIs: its message says how to get it and sign in.
    let (status, body) = server.api(
        "POST",
        "/api/sessions",
        Some(json!({"provider": "amp", "cwd": empty.path()})),
    );
    assert_eq!(status, 424, "{body}");
    assert_eq!(body["error"]["code"], "cli_not_found");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("npm install -g @sourcegraph/amp") && message.contains("AMP_API_KEY"),
        "{message}"
    );
}

#[test]
fn thinking_and_two_parallel_tool_calls_complete_in_one_turn() {
    let rig = Rig::claude();
    let session = rig.create_session();
    // `echo` is read-only: Claude Code runs it without asking.
    let (turn, events) = rig.turn(&session, "think");
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert!(!of_run(&events, &turn, EventType::ReasoningReceived).is_empty());
    assert_eq!(of_run(&events, &turn, EventType::ToolCallStarted).len(), 2);
    let mut outputs: Vec<_> = of_run(&events, &turn, EventType::ToolCallCompleted)
        .iter()
        .filter_map(|e| e.data_str("tool_output"))
        .collect();
    outputs.sort_unstable();
    assert_eq!(outputs, ["one", "two"]);
    let last = of_run(&events, &turn, EventType::MessageReceived);
    let said = last.last().unwrap().data_str("content").unwrap();
    assert!(said.starts_with("The tool said: "), "{said}");
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "think");
}

#[test]
fn a_midstream_error_is_retried_and_the_abandoned_partial_is_discarded() {
    let rig = Rig::claude();
    let session = rig.create_session();
    let (turn, events) = rig.turn(&session, "midstream");
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    let whole: Vec<_> = of_run(&events, &turn, EventType::MessageReceived)
        .iter()
        .filter(|e| e.data().get("discarded").is_none())
        .filter_map(|e| e.data_str("content"))
        .collect();
    assert_eq!(whole, ["This answer breaks off midway."]);
    let requests = rig.fake.requests();
    let streams: Vec<_> = requests
        .iter()
        .filter(|r| r["method"] == "POST")
        .map(|r| r["body"]["stream"].as_bool())
        .collect();
    assert_eq!(
        streams.first(),
        Some(&Some(true)),
        "the CLI streams first, then retries"
    );
    assert!(streams.len() >= 2, "{streams:?}");
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "midstream");
}

#[test]
fn a_background_task_wakes_the_agent_into_an_autonomous_turn() {
    let rig = Rig::claude();
    let session = rig.create_session();
    let (turn, _) = rig.turn(&session, "background");
    // The task ends about a second later; Claude Code then starts a turn of its own.
    let events = rig.wait(&session, "the autonomous turn", |e| {
        e.iter()
            .any(|e| e.kind() == EventType::RunCompleted && e.run_id().is_some_and(|r| r != turn))
    });
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    let woken = events
        .iter()
        .find(|e| e.kind() == EventType::RunStarted && e.run_id() != Some(turn.as_str()))
        .and_then(Event::run_id)
        .unwrap();
    assert!(of_run(&events, woken, EventType::MessageSent).is_empty());
    let texts: Vec<_> = of_run(&events, woken, EventType::MessageReceived)
        .iter()
        .filter_map(|e| e.data_str("content"))
        .collect();
    assert_eq!(texts, ["The background task finished."]);
    assert_eq!(terminal(&events, woken).kind(), EventType::RunCompleted);
    // The session takes prompts again afterwards.
    let (next, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "background");
}

#[test]
fn a_session_resumes_after_a_kill_9_and_the_cli_remembers_the_conversation() {
    let mut rig = Rig::claude();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "remember the word pineapple");
    // The server dies between turns, and the CLI with it: once the CLI has written the turn to
    // its session file (it does so on its own schedule, so a kill a few milliseconds after the
    // turn can find nothing to resume).
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    let handle = body["session"]["provider_session_id"].as_str().unwrap();
    rig.wait_for_file(&rig.home().join(".claude"), handle, "pineapple");
    rig.restart();
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["session"]["state"], "failed", "{body}");
    // Resumed explicitly here (a prompt would resume it too: tests/server.rs).
    let (status, body) = rig
        .server
        .api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "running", "{body}");
    let (status, body) = rig
        .server
        .api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "already_running");

    let (next, events) = rig.turn(&session, "which word did I ask you to remember?");
    assert_ne!(first, next);
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_contiguous(&events);
    let kinds: Vec<EventType> = events.iter().map(Event::kind).collect();
    let failed = kinds.iter().position(|k| *k == EventType::SessionFailed);
    let resumed = kinds.iter().position(|k| *k == EventType::SessionResumed);
    assert!(failed < resumed && failed.is_some(), "{kinds:?}");
    // The CLI's own memory: the model sees the first turn in the resumed turn's request.
    let requests = rig.fake.requests();
    let last = requests.iter().rfind(|r| r["method"] == "POST").unwrap();
    let conversation = last["body"]["messages"].to_string();
    assert!(conversation.contains("pineapple"), "{conversation}");
    // Claude Code 2.1.197 writes the prompt to its session file at once and the answer
    // later: killed right after the turn, it resumes without the answer and adds
    // "Continue from where you left off." to the interrupted-looking turn.
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "resumed");
}

#[test]
fn the_permission_mode_changes_live_and_the_cli_confirms_it() {
    let rig = Rig::claude();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "hello");
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["current_mode"], "default", "{body}");
    assert_eq!(body["runtime"]["version"], "2.1.197", "{body}");
    assert!(body["runtime"]["model"].is_string(), "{body}");
    assert!(body["runtime"]["cwd"].is_string(), "{body}");
    assert!(
        body["commands"].as_array().is_some_and(|c| !c.is_empty()),
        "{body}"
    );
    assert_eq!(body["capabilities"]["set_mode"], true);
    assert_eq!(body["modes"].as_array().unwrap().len(), 6, "{body}");
    let path = format!("/api/sessions/{session}/mode");
    let (status, body) = rig
        .server
        .api("POST", &path, Some(json!({"mode": "dontAsk"})));
    assert_eq!(status, 204, "{body}");
    // In dontAsk mode Claude Code refuses instead of asking.
    let (turn, events) = rig.turn(&session, "tool\n$ touch refused.txt && echo no");
    assert_ne!(first, turn);
    assert_eq!(terminal(&events, &turn).kind(), EventType::RunCompleted);
    assert!(of_run(&events, &turn, EventType::ToolApprovalRequested).is_empty());
    assert!(!rig.cwd.path().join("refused.txt").exists());
    // The CLI's next init reports the mode we set.
    let confirmed = events.iter().any(|e| {
        e.kind() == EventType::ModeChanged
            && e.data_str("mode") == Some("dontAsk")
            && e.data().get("source").is_none()
    });
    assert!(confirmed, "the CLI reported the new mode");
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["current_mode"], "dontAsk", "{body}");
    assert_eq!(body["pending_approvals"], json!([]));
    // The model changes live too (the `set_model` control request).
    let (status, body) = rig.server.api(
        "POST",
        &format!("/api/sessions/{session}/model"),
        Some(json!({"model": "claude-sonnet-4-5", "thinking": "off"})),
    );
    assert_eq!(status, 204, "{body}");
    let (last, events) = rig.turn(&session, "hello again");
    assert_eq!(terminal(&events, &last).kind(), EventType::RunCompleted);
    let requests = rig.fake.requests();
    let asked = requests.iter().rfind(|r| r["method"] == "POST").unwrap();
    assert_eq!(
        asked["body"]["model"], "claude-sonnet-4-5",
        "{}",
        asked["body"]["model"]
    );
    assert_only_messages_traffic(&rig);
    rig.keep_transcript(&session, "claude", "mode");
}
