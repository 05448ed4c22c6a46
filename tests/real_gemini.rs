//! The real Gemini CLI (pinned by `scripts/install-clis`) hosted through the Agent Client
//! Protocol (`gemini --experimental-acp`, the generic ACP adapter) by a real `agentwire serve`,
//! talking to `agentwire-testkit fake-model` on 127.0.0.1 through `GOOGLE_GEMINI_BASE_URL`
//! (tests/common/real.rs). The model is the only fake. `RECORD_TRANSCRIPTS=1` keeps each
//! session's traffic as tests/data/gemini-acp/agentwire-fake__<name>.jsonl (see the README
//! there).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use agentwire::core::event::EventType;
use common::ended;
use common::real::{of_run, terminal, texts, Rig};
use serde_json::json;

/// Every request reached the Gemini API: the router's classifier (`generateContent`) and
/// the streamed turns.
fn assert_only_gemini_traffic(rig: &Rig) {
    rig.assert_only_traffic(|method, path| method == "POST" && path.starts_with("/v1beta/models/"));
}

#[test]
fn plain_turns_stream_the_models_text_and_complete_with_distinct_run_ids() {
    let rig = Rig::gemini();
    let (session, _, _, _) = rig.two_plain_turns();
    // The session describes itself.
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["runtime"]["version"], "0.61.0", "{body}");
    assert_eq!(body["current_mode"], "default", "{body}");
    let modes: Vec<&str> = body["modes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(modes.contains(&"yolo"), "{modes:?}");
    assert!(
        body["commands"].as_array().is_some_and(|c| !c.is_empty()),
        "{body}"
    );
    assert_eq!(body["capabilities"]["thinking"], false);
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "plain");
}

#[test]
fn a_shell_command_waits_for_approval_and_runs_once_allowed() {
    let rig = Rig::gemini();
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
    assert_eq!(
        of_run(&events, &turn, EventType::ToolCallCompleted).len(),
        1
    );
    assert!(rig.cwd.path().join("approved.txt").exists());
    // What will run is shown before it runs (the CLI sends the command only as the title).
    let asked = of_run(&events, &turn, EventType::ToolApprovalRequested);
    let command = "touch approved.txt && echo hello-from-tool";
    assert_eq!(asked[0].data()["tool_input"]["command"], command);
    let started = of_run(&events, &turn, EventType::ToolCallStarted);
    assert_eq!(started[0].data()["tool_input"]["command"], command);
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
    assert!(terminal(&events, &turn).kind().is_run_terminal());
    assert!(!rig.cwd.path().join("denied.txt").exists());
    // The session goes on.
    let (next, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "tool");
}

#[test]
fn interrupting_a_slow_turn_cancels_it_and_the_session_goes_on() {
    let rig = Rig::gemini();
    let (session, _, _) = rig.interrupted_slow_turn();
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "interrupted");
}

#[test]
fn an_http_401_fails_the_turn_with_a_provider_error() {
    let rig = Rig::gemini();
    let session = rig.failed_turn_then_another(&["authentication_failed"]);
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "http401");
}

#[test]
fn the_mode_changes_through_the_api_and_an_unknown_one_is_refused() {
    let rig = Rig::gemini();
    let session = rig.create_session();
    let (turn, _) = rig.turn(&session, "hello");
    let path = format!("/api/sessions/{session}/mode");
    let (status, body) = rig.server.api("POST", &path, Some(json!({"mode": "warp"})));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_mode");
    let (status, body) = rig.server.api("POST", &path, Some(json!({"mode": "yolo"})));
    assert_eq!(status, 204, "{body}");
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["current_mode"], "yolo", "{body}");
    // Thinking is not something an ACP client can set.
    let (status, body) = rig.server.api(
        "POST",
        &format!("/api/sessions/{session}/model"),
        Some(json!({"thinking": "high"})),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unsupported");
    // In yolo mode the command runs without asking.
    let (next, events) = rig.turn(&session, "tool\n$ touch yolo.txt && echo ok");
    assert_ne!(turn, next);
    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert!(of_run(&events, &next, EventType::ToolApprovalRequested).is_empty());
    assert!(rig.cwd.path().join("yolo.txt").exists());
    let changed: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == EventType::ModeChanged)
        .filter_map(|e| e.data_str("mode"))
        .collect();
    assert_eq!(changed, ["yolo"], "reported once, from the agent's answer");
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "mode");
}

/// Whether the Gemini CLI 0.61.0 can `session/load` a session depends on the clock: within
/// the UTC minute its chat file was created, loading resets that file first and then answers
/// "No previous sessions found for this project." ([`Rig::age_gemini_sessions`]). The adapter
/// then falls back to a new ACP session (the failed load is an `error_occurred` in the log,
/// and the model does not see the earlier turn); a minute later the load works, and the
/// replayed history stays out of the log (see
/// `a_resumed_session_keeps_the_replayed_history_out_of_the_log`). This accepts both and
/// checks each is consistent.
#[test]
fn a_resumed_session_loads_or_falls_back_to_a_new_acp_session() {
    let mut rig = Rig::gemini();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "remember the word pineapple");
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    let handle = body["session"]["provider_session_id"].clone();
    let events = rig.resumed_turn(&session, &first);
    let sent: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == EventType::MessageSent)
        .filter_map(|e| e.data_str("content"))
        .collect();
    assert_eq!(
        sent,
        [
            "remember the word pineapple",
            "which word did I ask you to remember?"
        ]
    );
    let load_failed = events.iter().any(|e| {
        e.kind() == EventType::ErrorOccurred && e.data()["details"]["method"] == "session/load"
    });
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    let requests = rig.fake.requests();
    let last = requests
        .iter()
        .rfind(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.contains("streamGenerateContent"))
        })
        .unwrap();
    let remembered = last["body"]["contents"].to_string().contains("pineapple");
    eprintln!("gemini session/load after kill -9: failed={load_failed}");
    if load_failed {
        assert!(!remembered, "a new session starts empty");
        assert_ne!(
            body["session"]["provider_session_id"], handle,
            "the new ACP session is the next resume handle"
        );
    } else {
        assert!(remembered, "the loaded session carries the earlier turn");
        assert_eq!(body["session"]["provider_session_id"], handle);
    }
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "resumed");
}

/// The id of our `session/prompt` whose text is `text`, in the recorded traffic.
fn prompt_id(lines: &[serde_json::Value], text: &str) -> Option<serde_json::Value> {
    lines
        .iter()
        .find(|l| l["method"] == "session/prompt" && l["params"]["prompt"][0]["text"] == text)
        .map(|l| l["id"].clone())
}

/// The agent's answer to our request `id`, in the recorded traffic.
fn answer<'a>(
    lines: &'a [serde_json::Value],
    id: &serde_json::Value,
) -> Option<&'a serde_json::Value> {
    lines
        .iter()
        .find(|l| l["id"] == *id && l.get("method").is_none())
}

/// Issue 13, item 2: the model fails (HTTP 500) and the CLI retries; the turn is interrupted,
/// the CLI does not answer within the grace, and the turn is cancelled for it
/// (`interrupt_timeout`). The next prompt is answered while the CLI still retries the old
/// one, and only then (the model back) does the CLI answer the old request, `cancelled`. That
/// late answer is matched to its own, ended turn by its JSON-RPC id and dropped: the new turn
/// keeps its answer and ends `run_completed`, and no other turn appears.
#[test]
fn a_late_answer_to_an_interrupted_turn_leaves_the_next_turn_alone() {
    let rig = Rig::gemini();
    let session = rig.create_session();
    let (first, events) = rig.turn(&session, "hello");
    assert_eq!(terminal(&events, &first).kind(), EventType::RunCompleted);

    rig.outage(true);
    let stuck_prompt = "outage: the model fails for a while";
    let stuck = rig.server.start_turn(&session, stuck_prompt);
    // The CLI's router asks the model first; its requests fail and it retries them.
    rig.wait_request("the model to fail the prompt", |r| {
        r["body"].to_string().contains(stuck_prompt)
    });
    let path = format!("/api/sessions/{session}/interrupt");
    let (status, body) = rig.server.api("POST", &path, None);
    assert_eq!(status, 204, "{body}");
    let events = rig.wait(&session, "the grace to end the turn", |e| ended(e, &stuck));
    let end = terminal(&events, &stuck);
    assert_eq!(end.kind(), EventType::RunCancelled, "{}", end.to_json());
    assert_eq!(
        end.data_str("reason"),
        Some("interrupt_timeout"),
        "{}",
        end.to_json()
    );
    let old = prompt_id(&rig.recording(&session), stuck_prompt).expect("the stuck prompt");
    assert!(
        answer(&rig.recording(&session), &old).is_none(),
        "the CLI has not answered the interrupted prompt yet"
    );

    let next = rig.server.start_turn(&session, "next prompt");
    let lines = rig.wait_recording(&session, "the answer to the next prompt", |l| {
        prompt_id(l, "next prompt").is_some_and(|id| answer(l, &id).is_some())
    });
    assert!(
        answer(&lines, &old).is_none(),
        "the new turn was answered first"
    );
    rig.outage(false);
    let lines = rig.wait_recording(&session, "the late answer to the old prompt", |l| {
        answer(l, &old).is_some()
    });
    eprintln!("late answer: {}", answer(&lines, &old).unwrap());
    // A turn after it: everything before is in the log.
    let (last, events) = rig.turn(&session, "and a last one");

    assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
    assert_eq!(texts(&events, &next), ["Hello from the fake model."]);
    assert_eq!(of_run(&events, &next, EventType::MessageSent).len(), 1);
    assert_eq!(
        terminal(&events, &stuck).data_str("reason"),
        Some("interrupt_timeout")
    );
    assert_eq!(terminal(&events, &last).kind(), EventType::RunCompleted);
    assert_eq!(texts(&events, &last), ["Hello from the fake model."]);
    let runs: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e.run_id()).collect();
    let expected: std::collections::BTreeSet<&str> =
        [first.as_str(), stuck.as_str(), next.as_str(), last.as_str()].into();
    assert_eq!(runs, expected, "no other turn");
    common::assert_contiguous(&events);
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "late-answer");
}

/// Issue 13, item 3: two text turns and an interrupted one, `kill -9` of the companion, a
/// restart and a resume, then "third prompt". The CLI loads its session (the session files
/// dated back: see [`Rig::age_gemini_sessions`]) and replays its history, the first update
/// before its answer to `session/load` and the rest after it; none of it reaches the log
/// (it is there already): the new turn holds its own answer only, no turn appears that
/// nobody started, and the model saw the earlier turns.
#[test]
fn a_resumed_session_keeps_the_replayed_history_out_of_the_log() {
    let mut rig = Rig::gemini();
    let session = rig.create_session();
    let (first, _) = rig.turn(&session, "first prompt");
    let (second, _) = rig.turn(&session, "second prompt");
    let slow = rig.server.start_turn(&session, "slow");
    rig.wait(&session, "the answer to stream", |e| {
        e.iter()
            .any(|e| e.kind() == EventType::MessageStreamed && e.run_id() == Some(&slow))
    });
    let path = format!("/api/sessions/{session}/interrupt");
    let (status, body) = rig.server.api("POST", &path, None);
    assert_eq!(status, 204, "{body}");
    let events = rig.wait(&session, "the turn to end", |e| ended(e, &slow));
    assert_eq!(terminal(&events, &slow).kind(), EventType::RunCancelled);
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    let handle = body["session"]["provider_session_id"].clone();
    // The CLI's own record of the session holds the turns.
    rig.wait_for_file(rig.home(), "session-", "second prompt");

    rig.restart_after(Rig::age_gemini_sessions);
    let (status, body) = rig
        .server
        .api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(status, 200, "{body}");
    let (third, events) = rig.turn(&session, "third prompt");

    // The load worked, and the CLI replayed the history after answering it.
    let lines = rig.recording(&session);
    let load = lines
        .iter()
        .rposition(|l| l["method"] == "session/load")
        .expect("a session/load");
    let load_id = &lines[load]["id"];
    let answered = lines
        .iter()
        .position(|l| l["id"] == *load_id && l.get("method").is_none())
        .expect("an answer to session/load");
    assert!(
        lines[answered].get("result").is_some(),
        "{}",
        lines[answered]
    );
    let replayed_after = lines[answered..].iter().any(|l| {
        l["params"]["update"]["sessionUpdate"] == "user_message_chunk"
            && l["params"]["update"]["content"]["text"] == "second prompt"
    });
    assert!(replayed_after, "the replay comes after the answer");
    let (_, body) = rig
        .server
        .api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["session"]["provider_session_id"], handle);
    let requests = rig.fake.requests();
    let last = requests
        .iter()
        .rfind(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.contains("streamGenerateContent"))
        })
        .unwrap();
    assert!(
        last["body"]["contents"]
            .to_string()
            .contains("second prompt"),
        "the model sees the earlier turns"
    );

    // None of the replay is in the log.
    let end = terminal(&events, &third);
    assert_eq!(end.kind(), EventType::RunCompleted, "{}", end.to_json());
    assert!(end.data().get("inferred").is_none(), "{}", end.to_json());
    assert_eq!(texts(&events, &third), ["Hello from the fake model."]);
    let streamed: String = of_run(&events, &third, EventType::MessageStreamed)
        .iter()
        .filter_map(|e| e.data_str("delta"))
        .collect();
    assert_eq!(streamed, "Hello from the fake model.");
    let sent: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == EventType::MessageSent)
        .filter_map(|e| e.data_str("content"))
        .collect();
    assert_eq!(
        sent,
        ["first prompt", "second prompt", "slow", "third prompt"]
    );
    let runs: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e.run_id()).collect();
    let expected: std::collections::BTreeSet<&str> = [
        first.as_str(),
        second.as_str(),
        slow.as_str(),
        third.as_str(),
    ]
    .into();
    assert_eq!(runs, expected, "no turn that nobody started");
    assert!(
        !events.iter().any(|e| e.kind() == EventType::ErrorOccurred),
        "no error"
    );
    common::assert_contiguous(&events);
    assert_only_gemini_traffic(&rig);
    rig.keep_transcript(&session, "gemini-acp", "resumed-load");
}
