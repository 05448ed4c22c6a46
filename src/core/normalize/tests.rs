//! Framing tests, and the `check` helper every decoder's tests use.

use expect_test::{expect, Expect};
use proptest::prelude::*;

use super::*;
use crate::core::render::{render_diagnostics, render_events};

/// Normalizes `input` as `format` for session `s1` at the epoch and compares the rendering
/// (events, then diagnostics) with `expect`.
pub(crate) fn check(format: Format, input: &str, expect: Expect) {
    expect.assert_eq(&render(Some(format), input.as_bytes()));
}

pub(crate) fn render(format: Option<Format>, input: &[u8]) -> String {
    let out = normalize(format, Config::new("s1"), input, Timestamp::EPOCH);
    render_events(&out.events) + &render_diagnostics(&out.diagnostics)
}

#[test]
fn jsonl_sse_and_documents_frame_the_same_records() {
    let jsonl = "{\"type\":\"run_start\"}\r\n\n{\"type\":\"delta\",\"content\":\"hi\"}\n";
    let sse = "event: x\ndata: {\"type\":\"run_start\"}\n\n: comment\ndata: {\"type\":\"delta\",\n data: \"content\":\"hi\"}\n\n";
    let sse = sse.replace("\n data:", "\ndata:");
    let doc = "[\n  {\"type\": \"run_start\"},\n  {\"type\": \"delta\", \"content\": \"hi\"}\n]\n";
    let want = render(Some(Format::Generic), jsonl.as_bytes());
    assert_eq!(render(Some(Format::Generic), sse.as_bytes()), want);
    assert_eq!(render(Some(Format::Generic), doc.as_bytes()), want);
    expect![[r#"
          1 t1 run_started
          2 t1 message_streamed content="hi" delta="hi"
    "#]]
    .assert_eq(&want);
}

#[test]
fn unreadable_lines_become_numbered_diagnostics() {
    let input = b"{\"type\":\"run_start\"}\n{\"type\":\"init\",\"timestamp\":<TIMESTAMP>}\n\xff\xfe\n[1,2]\n{\"type\":\"warp\"}\n{\"no_type\":1}\n{\"type\":\"done\"}";
    expect![[r#"
          1 t1 run_started
          2 t1 run_completed
        ! line 2: invalid_json: expected value at line 1 column 28; line starts "{\"type\":\"init\",\"timestamp\":<TIMESTAMP>}"
        ! line 3: invalid_utf8: invalid UTF-8 at byte 0
        ! line 4: not_an_object: expected a JSON object, got an array
        ! line 5: unknown_type: unknown type "warp"
        ! line 6: missing_field: missing field `type`
    "#]]
    .assert_eq(&render(Some(Format::Generic), input));
}

#[test]
fn over_long_lines_are_skipped_with_a_diagnostic() {
    let mut config = Config::new("s1");
    config.max_line_bytes = 64;
    let long = format!("{{\"type\":\"delta\",\"content\":\"{}\"}}", "x".repeat(200));
    let input = format!("{long}\n{{\"type\":\"run_start\"}}\n{long}");
    for chunk in [1, 7, 1000] {
        let mut n = Normalizer::new(Some(Format::Generic), config.clone());
        for piece in input.as_bytes().chunks(chunk) {
            n.handle_bytes(piece, Timestamp::EPOCH);
        }
        n.handle_eof(Timestamp::EPOCH);
        let events: Vec<_> = std::iter::from_fn(|| n.poll_event()).collect();
        let diags: Vec<_> = std::iter::from_fn(|| n.poll_diagnostic()).collect();
        assert_eq!(events.len(), 1, "chunk {chunk}");
        assert_eq!(diags.len(), 2, "chunk {chunk}");
        assert_eq!((diags[0].line, diags[1].line), (1, 3));
        assert!(diags.iter().all(|d| d.kind == DiagnosticKind::LineTooLong));
        assert_eq!(n.stats().records, 3);
    }
}

#[test]
fn detection_picks_the_format_from_the_first_object() {
    let cases: &[(&str, Format)] = &[
        (
            r#"{"type":"system","subtype":"init","session_id":"abc"}"#,
            Format::Claude,
        ),
        (
            r#"{"type":"system","subtype":"init","session_id":"T-123"}"#,
            Format::Amp,
        ),
        (
            r#"{"type":"thread.started","thread_id":"t"}"#,
            Format::Codex,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"turn/started","params":{}}"#,
            Format::CodexAppServer,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#,
            Format::GeminiAcp,
        ),
        (
            r#"{"type":"init","timestamp":"2026-01-01T00:00:00Z","session_id":"x"}"#,
            Format::Gemini,
        ),
        (
            r#"{"type":"step_start","timestamp":1,"sessionID":"s","part":{}}"#,
            Format::Opencode,
        ),
        (
            r#"{"type":"server.connected","properties":{}}"#,
            Format::Opencode,
        ),
        (
            r#"{"type":"assistant_message","content":"x"}"#,
            Format::Generic,
        ),
    ];
    for (line, want) in cases {
        let value: Value = serde_json::from_str(line).unwrap();
        assert_eq!(Format::detect(&value), Some(*want), "{line}");
    }
}

proptest! {
    #[test]
    fn chunking_never_changes_the_output(cuts in proptest::collection::vec(0usize..400, 0..12)) {
        let input: &[u8] = b"{\"type\":\"run_start\"}\ndata: {\"type\":\"delta\",\"content\":\"\xc3\xa9\"}\n\n\xff\n{\"type\":\"done\"}\n{\"bad\n";
        let whole = render(Some(Format::Generic), input);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % input.len()).collect();
        cuts.sort_unstable();
        let mut n = Normalizer::new(Some(Format::Generic), Config::new("s1"));
        let mut last = 0;
        for c in cuts.into_iter().chain([input.len()]) {
            n.handle_bytes(&input[last..c], Timestamp::EPOCH);
            last = c;
        }
        n.handle_eof(Timestamp::EPOCH);
        let events: Vec<_> = std::iter::from_fn(|| n.poll_event()).collect();
        let diags: Vec<_> = std::iter::from_fn(|| n.poll_diagnostic()).collect();
        prop_assert_eq!(render_events(&events) + &render_diagnostics(&diags), whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        for format in Format::ALL.iter().copied().map(Some).chain([None]) {
            let out = normalize(format, Config::new("s1"), &bytes, Timestamp::EPOCH);
            prop_assert_eq!(out.stats.events as usize, out.events.len());
        }
    }
}
