//! The `agentwire normalize` and `project` command lines: output, diagnostics and exit codes.

#![cfg(not(target_arch = "wasm32"))]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use agentwire::core::event::{Event, EventType};

fn agentwire(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn data(path: &str) -> String {
    format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn normalize_prints_one_event_per_line_numbered_from_one() {
    let file = data("claude/takopi__claude_stream_json_session.jsonl");
    let out = agentwire(
        &[
            "normalize",
            "--provider",
            "claude",
            "--now",
            "2026-01-01T00:00:00Z",
            &file,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Event> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = events.iter().map(Event::sequence).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.session_id() == "local"));
    assert_eq!(
        events.iter().filter(|e| e.kind().is_run_terminal()).count(),
        2
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "agentwire: read 9 records as claude: 15 events, 0 ignored, 0 diagnostics\n"
    );
}

#[test]
fn the_format_is_detected_and_stdin_is_read() {
    let input = std::fs::read(data("codex/agentcmd__stream-output-2.jsonl")).unwrap();
    let out = agentwire(&["normalize", "--session", "s9", "-"], &input);
    assert_eq!(out.status.code(), Some(0));
    let last: Event = serde_json::from_str(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (last.kind(), last.session_id()),
        (EventType::RunCompleted, "s9")
    );
    assert!(String::from_utf8(out.stderr).unwrap().contains("as codex:"));
}

#[test]
fn diagnostics_go_to_stderr_and_strict_turns_them_into_exit_1() {
    let input = b"{\"type\":\"run_start\"}\nnot json\n{\"type\":\"done\"}\n";
    let out = agentwire(&["normalize", "--provider", "generic"], input);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("! line 2: invalid_json: "), "{stderr}");
    assert!(stderr.ends_with("1 diagnostics\n"), "{stderr}");
    let strict = agentwire(&["normalize", "--provider", "generic", "--strict"], input);
    assert_eq!(strict.status.code(), Some(1));
}

#[test]
fn unreadable_input_and_bad_arguments_exit_2() {
    let missing = agentwire(&["normalize", "/no/such/file.jsonl"], b"");
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8(missing.stderr)
        .unwrap()
        .contains("reading /no/such/file.jsonl"));
    let bad = agentwire(&["normalize", "--provider", "cursor"], b"");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8(bad.stderr)
        .unwrap()
        .contains("unknown provider \"cursor\""));
    let bad_time = agentwire(&["normalize", "--now", "yesterday"], b"");
    assert_eq!(bad_time.status.code(), Some(2));
}

#[test]
fn project_prints_the_lifecycle_and_the_timeline() {
    let file = data("claude/takopi__claude_stream_json_session.jsonl");
    let out = agentwire(
        &[
            "project",
            "--provider",
            "claude",
            "--now",
            "2026-01-01T00:00:00Z",
            &file,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("lifecycle: error\nturns: 2 finished, 0 active\n"),
        "{text}"
    );
    assert!(text.contains("tool_call Bash completed"), "{text}");
}
