//! Framing tests, and the `check` helper every decoder's tests use.

use expect_test::{expect, Expect};
use proptest::prelude::*;
use wasm_bindgen_test::wasm_bindgen_test;

use super::*;
use crate::core::render::{render_diagnostics, render_events};

/// Normalizes `input` as `format` for session `s1` at the epoch, checks the conventions every
/// output keeps ([`check_invariants`]) and compares the rendering (events, then diagnostics)
/// with `expect`.
pub(crate) fn check(format: Format, input: &str, expect: Expect) {
    check_invariants(format, input.as_bytes());
    expect.assert_eq(&render(Some(format), input.as_bytes()));
}
/// Checks the canonical conventions on a whole normalized input: a run starts with
/// `run_started`, ends at most once and has nothing after its terminal; every streamed
/// message or reasoning block is received; tool calls start before anything else about
/// them and end at most once; ids are unique and sequences increase.
pub(crate) fn check_invariants(format: Format, input: &[u8]) {
    use std::collections::{HashMap, HashSet};

    use crate::core::event::EventType as T;

    let out = crate::core::normalize::normalize(
        Some(format),
        crate::core::normalize::Config::new("s1"),
        input,
        crate::core::time::Timestamp::EPOCH,
    );
    let mut runs: HashMap<&str, (bool, bool)> = HashMap::new(); // (started, ended)
    let mut streamed: HashSet<(bool, &str)> = HashSet::new();
    let mut tools: HashMap<&str, bool> = HashMap::new(); // ended?
    let mut ids = HashSet::new();
    let mut last = 0;
    for e in &out.events {
        let what = format!("{format} {} {}", e.sequence(), e.kind());
        assert!(ids.insert(e.id().clone()), "duplicate id: {what}");
        assert!(e.sequence() > last, "sequence: {what}");
        last = e.sequence();
        if let Some(run) = e.run_id() {
            let state = runs.entry(run).or_insert((false, false));
            assert!(!state.1, "event after the terminal: {what}");
            if e.kind() == T::RunStarted {
                assert!(!state.0, "second run_started: {what}");
                state.0 = true;
            }
            assert!(state.0, "run not started: {what}");
            if e.kind().is_run_terminal() {
                state.1 = true;
            }
        } else {
            assert!(
                matches!(
                    e.kind(),
                    T::SessionStarted | T::ErrorOccurred | T::ModeChanged | T::ModelChanged
                ),
                "turn-scoped event without a run: {what}"
            );
        }
        // The closed vocabularies (docs/events.md) and the one tool-cancel payload.
        if e.kind() == T::RunCancelled {
            let reason = e.data_str("reason").unwrap_or("");
            assert!(
                crate::core::event::CancelReason::parse(reason).is_some(),
                "reason {reason:?}: {what}"
            );
        }
        if let Some(kind) = e.data().get("provider_error").and_then(|p| p.get("kind")) {
            let kind = kind.as_str().unwrap_or("");
            assert!(
                crate::core::provider_error::ErrorKind::parse(kind).is_some(),
                "kind {kind:?}: {what}"
            );
        }
        if e.kind() == T::ToolCallCancelled {
            let d = e.data();
            let reason = e.data_str("reason").unwrap_or("");
            assert!(
                ["run_completed", "run_failed", "run_cancelled"].contains(&reason)
                    && d.contains_key("tool_name")
                    && d.contains_key("tool_input"),
                "tool_call_cancelled payload: {what} {}",
                e.to_json()
            );
        }
        let message = e.data_str("message_id").unwrap_or("");
        match e.kind() {
            T::MessageStreamed | T::ReasoningStreamed => {
                assert!(!message.is_empty(), "stream without message_id: {what}");
                streamed.insert((e.kind() == T::MessageStreamed, message));
            }
            T::MessageReceived => {
                streamed.remove(&(true, message));
            }
            T::ReasoningReceived => {
                streamed.remove(&(false, message));
            }
            _ => {}
        }
        if let Some(call) = e.data_str("tool_call_id") {
            match e.kind() {
                T::ToolCallStarted => {
                    assert!(tools.insert(call, false).is_none(), "restarted: {what}");
                }
                T::ToolCallUpdated => {
                    assert_eq!(tools.get(call), Some(&false), "update: {what}");
                }
                T::ToolCallCompleted | T::ToolCallFailed | T::ToolCallCancelled => {
                    assert_eq!(tools.insert(call, true), Some(false), "end: {what}");
                }
                _ => {}
            }
            if matches!(
                e.kind(),
                T::ToolCallStarted
                    | T::ToolCallUpdated
                    | T::ToolCallCompleted
                    | T::ToolCallFailed
                    | T::ToolCallCancelled
            ) {
                assert_eq!(e.correlation_id(), Some(call), "correlation: {what}");
            }
        }
    }
    assert!(
        streamed.is_empty(),
        "{format}: dangling streams {streamed:?}"
    );
}

pub(crate) fn render(format: Option<Format>, input: &[u8]) -> String {
    let out = normalize(format, Config::new("s1"), input, Timestamp::EPOCH);
    render_events(&out.events) + &render_diagnostics(&out.diagnostics)
}

#[wasm_bindgen_test(unsupported = test)]
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

#[wasm_bindgen_test(unsupported = test)]
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

#[wasm_bindgen_test(unsupported = test)]
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

#[wasm_bindgen_test(unsupported = test)]
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
            r#"{"id":0,"result":{"thread":{"id":"t"}}}"#,
            Format::CodexAppServer,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#,
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
    #[wasm_bindgen_test(unsupported = test)]
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

    #[wasm_bindgen_test(unsupported = test)]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        for format in Format::ALL.iter().copied().map(Some).chain([None]) {
            let out = normalize(format, Config::new("s1"), &bytes, Timestamp::EPOCH);
            prop_assert_eq!(out.stats.events as usize, out.events.len());
        }
    }
}

/// Normalizes `input` as `format` twice: as always (typed fast paths, owned records), and
/// with every record read through `Decoder::record` from a `serde_json::Value`. Events (as
/// JSON), diagnostics and stats must be the same, byte for byte.
fn check_fast_path(format: Format, input: &[u8]) {
    let run = |fast: bool| {
        let mut n = Normalizer::new(Some(format), Config::new("s1"));
        n.fast = fast;
        n.handle_bytes(input, Timestamp::EPOCH);
        n.handle_eof(Timestamp::EPOCH);
        let events: Vec<String> = std::iter::from_fn(|| n.poll_event())
            .map(|e| e.to_json())
            .collect();
        let diagnostics: Vec<String> = std::iter::from_fn(|| n.poll_diagnostic())
            .map(|d| d.to_string())
            .collect();
        (events, diagnostics, n.stats())
    };
    let (fast, slow) = (run(true), run(false));
    assert_eq!(fast, slow, "{format}: {}", String::from_utf8_lossy(input));
}

#[wasm_bindgen_test(unsupported = test)]
fn excerpts_in_diagnostics_are_written_as_debug_writes_them() {
    for s in [
        "",
        "plain {\"a\":1}",
        "back\\slash 'quote'",
        "tab\there",
        "nul\0 del\u{7f}",
        "é and \u{301} and \u{200b}",
        "~ !",
    ] {
        let mut out = String::new();
        super::push_debug(&mut out, s);
        assert_eq!(out, format!("{s:?}"));
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn the_newline_search_finds_the_first_newline() {
    // A newline at every offset of a word and past it, two of them, none.
    for len in 0..40 {
        for at in 0..=len {
            let mut bytes = vec![b'a'; len];
            if at < len {
                bytes[at] = b'\n';
                if at + 9 < len {
                    bytes[at + 9] = b'\n';
                }
            }
            let want = bytes.iter().position(|&b| b == b'\n');
            assert_eq!(super::find_newline(&bytes), want, "len {len}, at {at}");
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn the_fast_paths_read_every_record_as_the_value_path_does() {
    // Escapes, nulls, fields of another type, duplicate fields, absent fields, timestamps of
    // every JSON type, leading space, arrays, trailing garbage, invalid JSON.
    let common = [
        r#"  {"type":"message","role":"user","content":"lead space"}"#,
        r#"[{"type":"message","role":"user","content":"x"}]"#,
        r#"{"type":"message","role":"user","content":"x"} trailing"#,
        r#"{"type":"message","role":"user","content":"x","#,
        r#"{"type":5}"#,
        r#"{"type":null}"#,
        r#"{}"#,
        "\"just a string\"",
    ];
    let gemini = [
        r#"{"type":"init","timestamp":"2026-11-29T21:31:07.000Z","session_id":"s-1","model":"m"}"#,
        r#"{"type":"message","role":"assistant","content":"a\"b\u00e9\n","delta":true,"timestamp":"2026-11-29T21:31:07.200Z"}"#,
        r#"{"type":"message","role":"assistant","content":"x","delta":"yes"}"#,
        r#"{"type":"message","role":"assistant","content":"x","delta":null}"#,
        r#"{"type":"message","role":"assistant","content":"whole"}"#,
        r#"{"type":"message","role":null,"content":"x"}"#,
        r#"{"type":"message","role":"system","content":"x"}"#,
        r#"{"type":"message","role":"user"}"#,
        r#"{"type":"message","role":"user","content":7}"#,
        r#"{"type":"message","type":"tool_use","role":"user","content":"dup"}"#,
        r#"{"type":"message","role":"user","content":"a","content":"b"}"#,
        r#"{"type":"tool_use","tool_id":"t1","parameters":null}"#,
        r#"{"type":"tool_use","tool_id":"t1","tool_name":"n","parameters":{"a":[1,2.5,-3,"x"]}}"#,
        r#"{"type":"tool_use","tool_id":"run_shell__1"}"#,
        r#"{"type":"tool_use","tool_id":"t9","tool_name":3}"#,
        r#"{"type":"tool_use"}"#,
        r#"{"type":"tool_result","tool_id":"t1","error":null}"#,
        r#"{"type":"tool_result","tool_id":"t2","status":"error","output":"boom"}"#,
        r#"{"type":"tool_result","tool_id":"t3","output":{"a":1},"timestamp":1700000000000}"#,
        r#"{"type":"tool_result","tool_id":"t4","status":"error","error":{"message":"m","type":"x"},"timestamp":-5}"#,
        r#"{"type":"tool_result","tool_id":"t5","status":5,"timestamp":1.5}"#,
        r#"{"type":"tool_result","tool_id":"t6","timestamp":18446744073709551615}"#,
        r#"{"type":"tool_result","tool_id":"t7","timestamp":[1]}"#,
        r#"{"type":"tool_result","tool_id":"t8","timestamp":{"a":1}}"#,
        r#"{"type":"tool_result","tool_id":"t9","timestamp":true}"#,
        r#"{"type":"tool_result","tool_id":"t10","timestamp":"not a time"}"#,
        r#"{"type":"error","severity":"warning","message":"Loop detected"}"#,
        r#"{"type":"result","status":"success","stats":{"input_tokens":1}}"#,
        r#"{"type":"init","session_id":5,"model":null}"#,
        r#"{"type":"init","session_id":"s-2","model":{"a":1}}"#,
        r#"{"type":"init","session_id":"s-2","session_id":"s-3"}"#,
        r#"{"type":"error","severity":3,"message":"m"}"#,
        r#"{"type":"error","message":"Quota","status":429,"reason":"RATE_LIMIT_EXCEEDED","category":null}"#,
        r#"{"type":"error","error":{"type":"E"},"reason":"r","message":"x","timestamp":"2026-01-01T00:00:00Z"}"#,
        r#"{"type":"error","error":[1],"category":"c"}"#,
        r#"{"type":"error","message":"a","message":"b"}"#,
        r#"{"type":"result","status":"success","stats":{"total_tokens":3,"input_tokens":1,"output_tokens":2,"cached":0,"input":1,"duration_ms":5,"tool_calls":0,"models":{"m":{"a":1}}}}"#,
        // Types read only as a `Value`: first, after another key, escaped, repeated.
        r#"{"type":"future_event","content":"x"}"#,
        r#"{"content":"x","type":"future_event","role":"user"}"#,
        r#"{"type":"mess\u0061ge","role":"user","content":"escaped type"}"#,
        r#"{"type":"message","role":"user","content":"x","type":"future_event"}"#,
        r#"{"type":"future_event","type":"message","role":"user","content":"x"}"#,
        r#"{"type":"future_event",<invalid>}"#,
        // Stats read typed: of every JSON type, a field repeated, unknown or escaped, a
        // number that is not an integer, an invalid value where the map skips it.
        r#"{"type":"result","status":"success","stats":null}"#,
        r#"{"type":"result","status":"success","stats":[1,{"input_tokens":2}]}"#,
        r#"{"type":"result","status":"success","stats":"none"}"#,
        r#"{"type":"result","status":"success","stats":7}"#,
        r#"{"type":"result","status":"success","stats":{}}"#,
        r#"{"type":"result","status":"success","stats":{"input_tokens":1,"input_tokens":9,"cached":null}}"#,
        r#"{"type":"result","status":"success","stats":{"extra":{"deep":[1,2]},"output_tokens":2.50,"duration_ms":-1}}"#,
        r#"{"type":"result","status":"error","stats":{"dur\u0061tion_ms":12,"models":[]},"error":{"message":"m"}}"#,
        r#"{"type":"result","status":"success","stats":{"extra":1e999,"input_tokens":1}}"#,
        r#"{"type":"tool_use","tool_id":"t20","tool_name":"n"}"#,
        r#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"m","code":53},"stats":{"duration_ms":1}}"#,
        r#"{"type":"result","error":null,"stats":[1]}"#,
        r#"{"type":"result","status":5,"stats":null,"timestamp":"2026-11-29T21:31:09.500Z"}"#,
        r#"{"type":"result","status":"success","stats":{"duration_ms":<DURATION>,"tool_calls":0}}"#,
        r#"{"type":"result","status":"success","stats":{"input_tokens":1e400}}"#,
        r#"{"type":"result","stats":{"a":"\ud800"}}"#,
        r#"{"type":"result","status":"success"} trailing"#,
        r#"{"type":"result","status":"success""#,
        r#"{"type":"result","result":"x","status":"success"}"#,
    ];
    let codex = [
        r#"{"type":"thread.started","thread_id":"th\u0041"}"#,
        r#"{"type":"thread.started"}"#,
        r#"{"type":"thread.started","thread_id":5}"#,
        r#"{"type":"turn.started","timestamp":"2026-11-29T21:31:07.000Z"}"#,
        r#"{"type":"item.started","item":{"id":"c1","type":"command_execution","command":"ls","status":"in_progress"}}"#,
        r#"{"type":"item.updated","item":{"id":"c1","type":"command_execution","command":"ls","aggregated_output":"a"}}"#,
        r#"{"type":"item.completed","item":{"id":"c1","type":"command_execution","command":"ls","aggregated_output":"ab","exit_code":0}}"#,
        r#"{"type":"item.completed","item":{"id":"w1","type":"web_search","id":"ws_2","query":"q"}}"#,
        r#"{"type":"item.completed","item":null}"#,
        r#"{"type":"item.completed","item":[1]}"#,
        r#"{"type":"item.completed"}"#,
        r#"{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"hi","phase":null}}"#,
        r#"{"type":"item.completed","item":{"id":"i2","type":"reasoning","text":"hm"},"item":{}}"#,
        r#"{"type":"item.completed","item":{"id":"i3","type":"future_item"}}"#,
        r#"{"type":"item.plan.delta","item_id":"p1","delta":"d"}"#,
        r#"{"type":"turn.completed","usage":null}"#,
        r#"{"type":"turn.started"}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":3,"cached_input_tokens":1.5}}"#,
        r#"{"type":"turn.completed","usage":7}"#,
        r#"{"type":"turn.started"}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":null,"inputTokens":4,"output_tokens":"7","outputTokens":2,"cached_input_tokens":2,"cached_input_tokens":3,"totalTokens":9,"reasoning_output_tokens":-1,"cacheWriteInputTokens":0.5,"other":[1,{"x":null}]}}"#,
        r#"{"type":"turn.completed","usage":[1,{"input_tokens":2}]}"#,
        r#"{"type":"turn.completed","usage":"x"}"#,
        r#"{"type":"turn.completed","usage":{"other":1e400}}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":1},"usage":{"output_tokens":2}}"#,
        r#"{"type":"turn.failed","error":{"message":"Usage limit \"hit\""}}"#,
        r#"{"type":"turn.failed"}"#,
        r#"{"type":"turn.failed","error":"plain","timestamp":"2026-11-29T21:31:08.000Z"}"#,
        r#"{"type":"turn.failed","error":{"message":5},"error":null}"#,
        r#"{"type":"error"}"#,
        r#"{"type":"error","message":null}"#,
        r#"{"type":"error","message":7}"#,
        r#"{"type":"error","message":"a","message":"b"}"#,
        r#"{"type":"error","message":"\u0041 rate limit","timestamp":5}"#,
        r#"{"type":"error","message":"Reconnecting... 1/1"}"#,
        r#"{"type":"item.completed","item":{"type":"agent_message","id":"i4","text":null,"phase":"final"}}"#,
        r#"{"type":"item.completed","item":{"id":"i5","type":"agent_message","text":5}}"#,
        r#"{"type":"item.completed","item":{"id":"i6","id":"i7","type":"reasoning","text":"x"}}"#,
        r#"{"type":"item.completed","item":{"id":"i8","type":"plan","text":"p","text":"q"}}"#,
        r#"{"type":"item.completed","item":{"id":"i8","type":"plan","text":"p","type":"reasoning"}}"#,
        r#"{"type":"item.started","item":{"id":"i9","type":"agent_message","extra":[1,{"b":2}]}}"#,
        r#"{"type":"item.completed","item":{"text":"t","id":"i10","type":"reasoning"}}"#,
        r#"{"type":"item.completed","item":{"id":5,"type":"reasoning"}}"#,
        r#"{"type":"item.completed","item":{"id":"c2","type":"command_execution","id":"c3","command":"ls","exit_code":1}}"#,
        r#"{"type":"item.completed","item":{"id":"i\u0031","type":"agent_\u006dessage","text":"esc\n","phase":{"p":[null]}}}"#,
        r#"{"type":"item.completed","item":{"id":"i11","type":"agent_message","phase":"a","phase":"b"}}"#,
        // Tool items (read typed as their fields): every kind, both spellings, repeats.
        r#"{"type":"item.started","item":{"id":"t1","type":"command_execution","command":["bash","-lc","ls"],"cwd":"/w","aggregated_output":"","exit_code":null,"status":"in_progress","extra":{"a":[1e5,-0.5,true,null]}}}"#,
        r#"{"type":"item.updated","item":{"id":"t1","type":"command_execution","command":"ls","aggregatedOutput":"a\nb","status":"in_progress"}}"#,
        r#"{"type":"item.updated","item":{"id":"t1","type":"command_execution","aggregated_output":null,"aggregatedOutput":"a\nbc"}}"#,
        r#"{"type":"item.completed","item":{"id":"t1","type":"command_execution","command":"ls","aggregated_output":"x","exit_code":2,"exitCode":0,"duration_ms":12,"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"t2","type":"command_execution","status":"declined","status":"failed","exit_code":-1.5}}"#,
        r#"{"type":"item.completed","item":{"id":"t3","type":"command_execution","exitCode":3,"durationMs":"7"}}"#,
        r#"{"type":"item.completed","item":{"id":"t4","type":"command_execution","status":7,"aggregated_output":5}}"#,
        r#"{"type":"item.completed","item":{"type":"file_change","id":"t5","changes":[{"path":"a","kind":"add"},{"path":"b","kind":{"type":"update"}},{"kind":3}],"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"t6","type":"file_change","changes":{"a":1},"status":"failed"}}"#,
        r#"{"type":"item.started","item":{"id":"t7","type":"mcp_tool_call","server":"gh","tool":"search","arguments":{"q":"x"},"result":null,"error":null,"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"t7","type":"mcp_tool_call","server":"gh","tool":"search","arguments":null,"result":{"content":[{"type":"text","text":"A"},{"type":"image"},{"type":"text","text":"B"}],"structuredContent":{"n":1}},"durationMs":4}}"#,
        r#"{"type":"item.completed","item":{"id":"t8","type":"mcp_tool_call","server":5,"result":{"content":"x","structured_content":null}}}"#,
        r#"{"type":"item.completed","item":{"id":"t9","type":"mcp_tool_call","error":{"message":"timeout"},"status":"failed"}}"#,
        r#"{"type":"item.completed","item":{"id":"t10","type":"mcp_tool_call","error":"plain"}}"#,
        r#"{"type":"item.completed","item":{"id":"t11","type":"web_search","query":"q","action":{"type":"search"},"status":"failed"}}"#,
        r#"{"type":"item.started","item":{"id":"t12","type":"collab_tool_call","tool":"spawn_agent","receiverThreadIds":["w"],"receiver_thread_ids":null,"prompt":"p","model":"m","agents_states":{},"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"t12","type":"collab_tool_call","tool":"spawn_agent","agentsStates":{"w":{"message":"no"},"v":{"status":"x"}},"status":"failed"}}"#,
        r#"{"type":"item.completed","item":{"id":"t13","type":"collabAgentToolCall","agents_states":{"w":{"status":"completed"}}}}"#,
        r#"{"type":"item.completed","item":{"id":"t14","type":"dynamicToolCall","namespace":"ns","tool":"t","arguments":[1],"contentItems":[{"type":"inputText","text":"out"}],"success":false}}"#,
        r#"{"type":"item.completed","item":{"id":"t15","type":"dynamicToolCall","namespace":"","content_items":[{"type":"inputText","text":"o"}],"success":true,"duration_ms":1}}"#,
        r#"{"type":"item.completed","item":{"id":"t16","type":"imageView","path":"/p.png"}}"#,
        r#"{"type":"item.completed","item":{"id":"t17","type":"imageGeneration","revisedPrompt":"cat","saved_path":null,"savedPath":"/c.png"}}"#,
        r#"{"type":"item.completed","item":{"id":"t18","type":"imageGeneration","status":"failed"}}"#,
        r#"{"type":"item.started","item":{"id":"l1","type":"todo_list","items":[{"text":"a","completed":false},{"text":"b","completed":true},{"completed":"yes"},5]}}"#,
        r#"{"type":"item.updated","item":{"id":"l1","type":"todo_list","items":{"text":"a"}}}"#,
        r#"{"type":"item.completed","item":{"id":"l1","type":"todo_list","items":[{"text":"\u00e9\"q\"","completed":true,"completed":false},{"text":7},null]}}"#,
        r#"{"type":"item.completed","item":{"id":"e1","type":"error","message":"truncated","message":null}}"#,
        r#"{"type":"item.completed","item":{"id":"e2","type":"error","message":{"m":1}}}"#,
        r#"{"type":"item.completed","item":{"type":"command_execution","command":"no id"}}"#,
        r#"{"type":"item.completed","item":{"id":"t19","command":"no type"}}"#,
        r#"{"type":"item.completed","item":{"id":"t20","type":5}}"#,
        r#"{"type":"item.completed","item":{"id":"t21","type":"command_execution","id":"t22","type":"web_search","query":"last wins"}}"#,
        r#"{"type":"item.completed","item":{"id":"t\u0032\u0033","type":"command_\u0065xecution","comm\u0061nd":"esc","aggregated_output":"\u00e9\t"}}"#,
        r#"{"type":"item.completed","item":{"status":"completed","id":"t24","type":"command_execution"}}"#,
        r#"{"type":"item.completed","item":{"id":"t25","type":"command_execution","big":1e400}}"#,
        r#"{"type":"item.completed","item":{"id":"t26","type":"command_execution","bad":"\ud800"}}"#,
        r#"{"type":"item.completed","item":{"id":"t27","type":"command_execution","cut":[1,}}"#,
    ];
    let opencode = [
        r#"{"type":"server.connected","properties":{}}"#,
        r#"{"type":"plugin.added","properties":null}"#,
        r#"{"type":"plugin.added","properties":[1,{"a":2}]}"#,
        r#"{"type":"plugin.added"}"#,
        r#"{"type":"session.updated","properties":{"info":{"id":"ses_0"}}}"#,
        r#"{"type":"session.created","properties":{"info":{"id":"ses_1","version":"1","directory":"/d","title":"t"}}}"#,
        r#"{"type":"session.updated","properties":{"info":{"id":"ses_1"}}}"#,
        r#"{"type":"session.updated","properties":{"info":{"id":5}}}"#,
        r#"{"type":"session.updated","properties":{"info":null}}"#,
        r#"{"type":"session.updated","properties":{}}"#,
        r#"{"type":"session.updated","properties":"x"}"#,
        r#"{"type":"session.created","properties":{"info":{"id":"ses_2","parentID":"ses_1"}}}"#,
        r#"{"type":"session.updated","properties":{"info":{"id":"ses_1"},"info":{"id":"ses_3"}}}"#,
        r#"{"type":"session.diff","properties":{"sessionID":"ses_1","diff":[]}}"#,
        r#"{"type":"lsp.updated","properties":{"info":{"id":[]}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}"#,
        r#"{"id":"evt_1","type":"message.updated","properties":{"sessionID":"ses_1","info":{"id":"msg_u","sessionID":"ses_1","role":"user","time":{"created":1}}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_a","sessionID":"ses_1","role":"assistant","modelID":"m1","providerID":"p","time":{"created":2}}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_a","role":"assistant","modelID":"m2","providerID":null,"time":{"completed":null},"finish":"stop","tokens":{"input":3,"output":4,"cache":{"read":1}},"cost":0.5}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_a","role":"assistant","modelID":"m2","time":{"completed":8},"finish":"stop","tokens":{"input":3},"cost":"x"}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_b","role":"assistant","time":{"completed":9},"tokens":[1],"finish":null}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_c","role":"assistant","time":5}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_d","role":"assistant","time":null,"modelID":7}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":"msg_e","sessionID":"ses_other","role":"assistant"}}}"#,
        r#"{"type":"message.updated","properties":{"sessionID":"ses_other","info":{"id":"msg_f","role":"assistant"}}}"#,
        r#"{"type":"message.updated","properties":{"sessionID":5,"info":{"id":"msg_g","role":"assistant"}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"id":5,"role":"assistant"}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"role":"system"}}}"#,
        r#"{"type":"message.updated","properties":{"info":{"role":"assistant","role":"user"}}}"#,
        r#"{"type":"message.updated","properties":{"info":["msg_h","ses_1"]}}"#,
        r#"{"type":"message.updated","properties":{"info":"x"}}"#,
        r#"{"type":"message.updated","properties":{}}"#,
        r#"{"type":"message.updated","properties":null}"#,
        r#"{"type":"session.updated","properties":{"info":["ses_9"]}}"#,
        // Parts, their deltas and a session's status (a user message `msg_u`, an assistant
        // one `msg_a`, above).
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","text":"hello","messageID":"msg_u","sessionID":"ses_1","id":"prt_u1"}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","text":"again","messageID":"msg_u","sessionID":"ses_1","id":"prt_u2","synthetic":true}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"step-start","messageID":"msg_a","sessionID":"ses_1","id":"prt_s"}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"reasoning","text":"","messageID":"msg_a","sessionID":"ses_1","id":"prt_r","time":{"start":1}}}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_r","field":"text","delta":"think"}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"reasoning","text":"think","messageID":"msg_a","sessionID":"ses_1","id":"prt_r","time":{"start":1,"end":2}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","text":"","messageID":"msg_a","sessionID":"ses_1","id":"prt_t"},"delta":"He"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":"llo \u00e9"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"other","delta":"x"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","field":"text","delta":"no part"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":""}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":7,"field":"text","delta":"n"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_other","messageID":"msg_a","partID":"prt_t","field":"text","delta":"o"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":"a","delta":"b"}}"#,
        r#"{"type":"message.part.delta","properties":{"messageID":"msg_u","partID":"prt_u1","field":"text","delta":"u"}}"#,
        r#"{"type":"message.part.delta","properties":{"sessionID":"ses_1","partID":"prt_q","field":"text","delta":null}}"#,
        r#"{"type":"message.part.delta","properties":[1]}"#,
        r#"{"properties":{"sessionID":"ses_1","messageID":"msg_a","partID":"prt_t","field":"text","delta":"!"},"type":"message.part.delta"}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","text":"Hello \u00e9!","messageID":"msg_a","sessionID":"ses_1","id":"prt_t","time":{"start":1,"end":3}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","callID":"call_1","tool":"bash","messageID":"msg_a","sessionID":"ses_1","id":"prt_c","state":{"status":"pending","input":{}}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","callID":"call_1","tool":"bash","messageID":"msg_a","sessionID":"ses_1","id":"prt_c","state":{"status":"running","input":{"command":"ls"},"title":"ls"}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","callID":"call_1","tool":"bash","messageID":"msg_a","sessionID":"ses_1","id":"prt_c","state":{"status":"completed","input":{"command":"ls"},"output":"a\nb","metadata":{"exit":0},"title":"ls"}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","id":"prt_d","tool":"edit","messageID":"msg_a","state":{"status":"error","input":{},"error":{"m":1}}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","callID":"call_2","messageID":"msg_a","state":{"status":"weird","metadata":{"exitCode":2}}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"tool","messageID":"msg_a","state":null}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"step-finish","reason":"stop","messageID":"msg_a","sessionID":"ses_1","id":"prt_f","tokens":{"input":1}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","text":"x","messageID":"msg_a","sessionID":"ses_other","id":"prt_o"}}}"#,
        r#"{"type":"message.part.updated","properties":{"sessionID":"ses_other","part":{"type":"text","text":"x","messageID":"msg_a","id":"prt_o2"}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","id":"prt_x","id":"prt_y","messageID":"msg_a","text":"dup","time":{"end":1}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","messageID":"msg_a","text":"no id"}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","id":"prt_z","messageID":"msg_a","text":"bad","big":1e400}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":7,"id":"prt_n","messageID":["msg_a"],"text":{"t":1}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":null}}"#,
        r#"{"type":"message.part.updated","properties":{"part":["x"]}}"#,
        r#"{"type":"message.part.updated","properties":{"part":"x"}}"#,
        r#"{"type":"message.part.updated","properties":{}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text"},"part":{"type":"reasoning","id":"prt_w","messageID":"msg_a","text":"w","time":{"end":1}}}}"#,
        r#"{"type":"message.part.updated","properties":{"part":{"type":"text","id":"prt_v","messageID":"msg_a","text":"v"},"delta":5}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"retry","message":"slow down","attempt":2}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"retry","message":3}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"weird"}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":"busy"}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":null}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1"}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"idle","type":"busy"}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_other","status":{"type":"idle"}}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"idle"}}}"#,
        r#"{"type":"session.idle","properties":{"sessionID":"ses_1"}}"#,
        r#"{"type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}"#,
        r#"{"type":"session.idle","properties":{"sessionID":5}}"#,
        r#"{"type":"session.idle","properties":{"sessionID":"ses_1"}}"#,
        r#"{"type":"session.idle","properties":"x"}"#,
    ];
    let claude = [
        r#"{"type":"system","subtype":"init","session_id":"sess-1","model":"m","permissionMode":"default"}"#,
        r#"{"type":"system","subtype":"init","session_id":"sess-1","model":"m2","permissionMode":"plan","cwd":"/w"}"#,
        r#"{"type":"system","subtype":"init","session_id":"sess-2","cwd":"/w","tools":["Bash",{"n":1}],"model":"m","permissionMode":"default","claude_code_version":"2.1","slash_commands":["c"],"mcp_servers":[{"name":"x","status":"ok"}],"agents":null,"skills":[],"plugins":{"p":1},"output_style":"default","apiKeySource":"none","uuid":"u","timestamp":"2026-11-29T21:31:07.000Z"}"#,
        r#"{"type":"system","subtype":"init","session_id":5,"model":null,"permissionMode":7,"cwd":null}"#,
        r#"{"type":"system","subtype":"init","session_id":"","model":"","permissionMode":""}"#,
        r#"{"type":"system","subtype":"init","session_id":"sess-2","model":{"id":"m"},"permissionMode":["plan"]}"#,
        r#"{"type":"system","subtype":"init","session_id":"sess-3","tools":[],"tools":["Read"]}"#,
        r#"{"type":"system","subtype":"init","timestamp":{"t":1}}"#,
        r#"{"type":"system","subtype":"init","session_id":"sess-3","model":"m3"}"#,
        r#"{"type":"system","subtype":"hook_response","hook_id":"h","output":{"a":[1]},"timestamp":"2026-11-29T21:31:07.000Z"}"#,
        r#"{"type":"system","subtype":"hook_started","subtype":"status"}"#,
        r#"{"type":"system","subtype":5}"#,
        r#"{"type":"system"}"#,
        r#"{"type":"system","subtype":"thinking_tokens","timestamp":[1]}"#,
        r#"{"type":"system","subtype":"status","permissionMode":"plan","timestamp":1700000000000}"#,
        r#"{"type":"system","subtype":"status","permissionMode":"plan"}"#,
        r#"{"type":"system","subtype":"status","permissionMode":null}"#,
        r#"{"type":"system","subtype":"status","permissionMode":7}"#,
        r#"{"type":"system","subtype":"status","permissionMode":"a","permissionMode":"b"}"#,
        r#"{"type":"system","subtype":"future_thing"}"#,
        r#"{"type" : "user", "message": {"role":"user","content":[{"type":"text","text":"hi \u00e9\n"}]}, "timestamp":"2026-11-29T21:31:08.000Z"}"#,
        r#"{"type":"user","message":{"content":"plain"},"parent_tool_use_id":"tu_p","isSynthetic":true}"#,
        r#"{"type":"user","message":{"content":"<local-command-stdout>x</local-command-stdout>"},"isReplay":true}"#,
        r#"{"type":"user","message":{"content":"  <local-command-stdout>y"},"isReplay":false}"#,
        r#"{"type":"user","message":{"content":"[Request interrupted by user]"}}"#,
        r#"{"type":"user","message":{"content":""}}"#,
        r#"{"type":"user","message":{"content":null}}"#,
        r#"{"type":"user","message":{}}"#,
        r#"{"type":"user","message":null}"#,
        r#"{"type":"user","message":["x"]}"#,
        r#"{"type":"user","message":{"content":5}}"#,
        r#"{"type":"user","message":{"content":{"a":1}}}"#,
        r#"{"type":"user"}"#,
        r#"{"type":"user","message":{"content":"a"},"message":{"content":"b"}}"#,
        r#"{"type":"user","type":"assistant","message":{"content":"a"}}"#,
        r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"Read","input":{"f":"a"}}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":"a\"b\\c\n","is_error":false}]},"tool_use_result":{"file":{"content":"x"}}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":"again"}]},"tool_use_result":null}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_2","content":[{"type":"text","text":"B1"},{"type":"image"},{"text":null},{"type":"text","text":"B2"}],"is_error":true}]},"tool_use_result":"Error"}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_3","content":null},{"type":"tool_result","tool_use_id":"tu_4"},{"type":"text","text":"two results"}]},"tool_use_result":{"a":1}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"no id"},{"type":"text"},{"type":"text","text":null},{"type":"image","source":{"data":"x"}}]},"parent_tool_use_id":""}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_5","content":"[Request interrupted by user for tool use]","is_error":true}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_6","content":[{"text":5}]}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_7","content":["s"]}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_8","content":{"a":1}}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":9}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"tu_9","is_error":"yes"}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":5}]}}"#,
        r#"{"type":"user","message":{"content":["x",{"type":"text","text":"y"}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"text","text":"a","text":"b"}]}}"#,
        r#"{"type":"user","message":{"content":[]},"parent_tool_use_id":5}"#,
        r#"{"type":"user","message":{"content":"x"},"isReplay":"yes"}"#,
        r#"{"type":"user","message":{"content":"x"},"tool_use_result":{"a":1},"tool_use_result":2}"#,
        r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1","usage":{"a":1},"content":[]}},"parent_tool_use_id":null}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"He\"l\u006co"}},"timestamp":"2026-11-29T21:31:09.000Z"}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"second"}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":""}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"neg"}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2.5,"delta":{"type":"thinking_delta","thinking":"hm"}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"thinking_delta","text":"wrong field"}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{\"a\""}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":7}}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":["text_delta"]}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":null}}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}}"#,
        r#"{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}}"#,
        r#"{"type":"stream_event","event":{"type":"message_stop"}}"#,
        r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":""}},"parent_tool_use_id":"tu_lane"}"#,
        r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"in lane"}},"parent_tool_use_id":"tu_lane"}"#,
        r#"{"type":"stream_event","event":{"type":"message_start","message":["id"]},"parent_tool_use_id":"tu_lane"}"#,
        r#"{"type":"stream_event","event":{"type":"message_start","message":null},"parent_tool_use_id":""}"#,
        r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":5}}}"#,
        r#"{"type":"stream_event","event":{"type":"future_event"}}"#,
        r#"{"type":"stream_event","event":{"type":5}}"#,
        r#"{"type":"stream_event","event":{}}"#,
        r#"{"type":"stream_event","event":[1]}"#,
        r#"{"type":"stream_event"}"#,
        r#"{"type":"stream_event","event":{"type":"ping"},"event":{"type":"message_stop"}}"#,
        r#"{"type":"stream_event","event":{"type":"ping"},"parent_tool_use_id":3}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#,
    ];
    let cases: [(Format, &[&str]); 6] = [
        (Format::Gemini, &gemini),
        (Format::Codex, &codex),
        (Format::Opencode, &opencode),
        (Format::Claude, &claude),
        (Format::CodexAppServer, &[]),
        (Format::GeminiAcp, &[]),
    ];
    for (format, lines) in cases {
        let mut input = lines.join("\n");
        input.push('\n');
        input.push_str(&common.join("\n"));
        check_fast_path(format, input.as_bytes());
        for line in lines.iter().chain(&common) {
            check_fast_path(format, line.as_bytes());
        }
    }
}

/// `fast::Valid` fails exactly where, and as, a `serde_json::Value` read fails, and
/// passes what it passes.
#[wasm_bindgen_test(unsupported = test)]
fn the_validating_read_fails_as_the_value_read_does() {
    let texts = [
        r#"{"a":1}"#,
        r#"  {"a":[1,2.5e3,-0,true,false,null,"s\n\u00e9",{"b":{}}],"a":2}  "#,
        r#"{"duration_ms":<DURATION>}"#,
        r#"{"n":1e400}"#,
        r#"{"n":-1e400}"#,
        r#"{"n":18446744073709551616}"#,
        r#"{"n":01}"#,
        r#"{"n":1.}"#,
        r#"{"s":"\ud800"}"#,
        r#"{"s":"\udc00x"}"#,
        r#"{"s":"\x"}"#,
        "{\"s\":\"tab\there\"}",
        r#"{"\ud800":1}"#,
        r#"{1:2}"#,
        r#"{"a" 1}"#,
        r#"{"a":1,}"#,
        r#"[1,2,]"#,
        r#"{"a":1} x"#,
        r#"{"a":"#,
        r#"{"a":tru}"#,
        r#""#,
        r#"nul"#,
        &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        &format!("{{\"a\":{}1{}}}", "[".repeat(127), "]".repeat(127)),
    ];
    for text in texts {
        let value = serde_json::from_str::<serde_json::Value>(text).map(|_| ());
        let valid = serde_json::from_str::<super::fast::Valid>(text).map(|_| ());
        assert_eq!(
            valid.map_err(|e| e.to_string()),
            value.map_err(|e| e.to_string()),
            "{text}"
        );
    }
}

/// Transcripts of tests/data (embedded: the core reads no files), each in every format.
#[wasm_bindgen_test(unsupported = test)]
fn the_fast_paths_read_the_transcripts_as_the_value_path_does() {
    macro_rules! data {
        ($($path:literal),* $(,)?) => {
            [$(include_bytes!(concat!("../../../tests/data/", $path)).as_slice()),*]
        };
    }
    let transcripts = data![
        "claude/agentwire-fake__tool.jsonl",
        "claude/agentwire-fake__interrupted.jsonl",
        "claude/agentwire-fake__midstream.jsonl",
        "claude/Claude-Debussy__task_tool_output.jsonl",
        "codex/takopi__codex_exec_json_all_formats.jsonl",
        "codex/takopi__codex_exec_json_phase_and_unknown.jsonl",
        "codex/agentcmd__stream-output-multi-1.jsonl",
        "codex-app-server/agentwire-fake__tool.jsonl",
        "gemini/gemini-cli__snap-extract__tool-use-stream.jsonl",
        "gemini/gemini-cli__snap-extract__max-session-turns-error.jsonl",
        "opencode/agentwire-fake__tool.jsonl",
        "opencode/agentwire-fake__interrupted.jsonl",
        "opencode/takopi__opencode_run_json.jsonl",
        "opencode/sandbox-agent__native__all-events.json",
    ];
    for input in transcripts {
        for &format in Format::ALL {
            check_fast_path(format, input);
        }
    }
}

/// The cheap look at a record's leading `type` finds it exactly when it is the first key
/// and a string without escapes.
#[wasm_bindgen_test(unsupported = test)]
fn the_leading_type_is_the_first_keys_plain_string() {
    for (text, ty) in [
        (r#"{"type":"message","role":"user"}"#, Some("message")),
        (" \t{ \"type\" :\n \"a.b\" }", Some("a.b")),
        (r#"{"type":"é ü","x":1}"#, Some("é ü")),
        (r#"{"type":""}"#, Some("")),
        (r#"{"type":"me\u0073sage"}"#, None),
        (r#"{"type":"a\"b"}"#, None),
        (r#"{"id":1,"type":"x"}"#, None),
        (r#"{"type":5}"#, None),
        (r#"{"type":"unterminated"#, None),
        (r#"["type","x"]"#, None),
        ("", None),
    ] {
        assert_eq!(super::fast::leading_type(text), ty, "{text}");
    }
}

/// A record of each kind of field `fast::Scan` reads, for the scanner's test.
#[derive(Default, Debug, PartialEq)]
struct Probe {
    s: Option<String>,
    o: Option<Option<String>>,
    b: Option<Option<bool>>,
    t: Option<Option<Timestamp>>,
    v: Option<Value>,
    /// Whether `w` is an object, and its `a` and `b`.
    w: Option<(bool, Option<Value>, Option<Value>)>,
}

struct AB;

impl fast::SlotKeys for AB {
    fn slot(key: &str) -> Option<usize> {
        ["a", "b"].iter().position(|&k| k == key)
    }
}

impl<'a> fast::Record<'a> for Probe {
    const REQUIRED: u32 = 0;

    fn field(&mut self, key: &str, value: &mut fast::Scan<'a>) -> Result<u32, fast::Unread> {
        Ok(match key {
            "s" => {
                self.s = Some(value.str()?.0.into_owned());
                1
            }
            "o" => {
                self.o = Some(value.opt_str()?.map(|s| s.0.into_owned()));
                2
            }
            "b" => {
                self.b = Some(value.opt_bool()?);
                4
            }
            "t" => {
                self.t = Some(value.stamp()?.0);
                8
            }
            "v" => {
                self.v = Some(value.value()?);
                16
            }
            "w" => {
                let w = value.slots::<AB, 2>()?;
                self.w = Some((w.object, w.get("a").cloned(), w.get("b").cloned()));
                32
            }
            _ => 0,
        })
    }
}

/// Checks the scanner's read of `text` against serde_json's: what it takes must be what
/// serde_json reads; a `whole` text (not cut or changed) that it refuses, serde_json must
/// refuse too (a value nested 127 deep in the line among them), or hold a field of a type its
/// reader refuses.
fn check_scan(text: &str, whole: bool) {
    let mut probe = Probe::default();
    let read = fast::read_record(text, &mut probe, &mut String::new());
    let want = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| probe_of(&v));
    if read.is_ok() {
        assert_eq!(Some(&probe), want.as_ref(), "{text}");
    } else if whole {
        assert!(want.is_none(), "{text}");
    }
}

/// The scanner's edges, each once: nesting at serde_json's limit and one past it, a key given
/// twice or written with an escape, and whitespace where JSON allows it.
#[wasm_bindgen_test(unsupported = test)]
fn the_scanner_stops_where_serde_json_does() {
    let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    for key in ["v", "w", "other"] {
        for n in [125, 126, 127] {
            check_scan(&format!(r#"{{"{key}":{}}}"#, deep(n)), true);
            check_scan(&format!(r#"{{"{key}":{{"a":{}}}}}"#, deep(n)), true);
            check_scan(&format!(r#"{{"{key}":{{"c":{}}}}}"#, deep(n)), true);
        }
    }
    assert!(fast::read_record(
        &format!(r#"{{"v":{}}}"#, deep(126)),
        &mut Probe::default(),
        &mut String::new()
    )
    .is_ok());
    let mut twice = Probe::default();
    assert!(
        fast::read_record(r#"{"s":"a","\u0073":"b"}"#, &mut twice, &mut String::new()).is_err()
    );
    let mut spaced = Probe::default();
    fast::read_record(
        " \n{ \"s\" :\t\"x\" ,\r\"b\":true , \"z\" : [ ] }\n ",
        &mut spaced,
        &mut String::new(),
    )
    .expect("spaced");
    assert_eq!(
        (spaced.s.as_deref(), spaced.b),
        (Some("x"), Some(Some(true)))
    );
    // Every escape, `\u` of each kind of character, an escape last.
    for key in ["s", "o", "v", "w"] {
        for value in [
            r#""a\/b\b\f\r\t\n\"\\ \u00E9\u001b[31m\\""#,
            r#""\ud83d\ude00""#,
        ] {
            let text = format!(r#"{{"{key}":{value}}}"#);
            check_scan(&text, true);
            assert!(
                fast::read_record(&text, &mut Probe::default(), &mut String::new()).is_ok(),
                "{text}"
            );
        }
    }
    // A lone surrogate: serde_json refuses it in a string it reads (only `IgnoredAny` skips
    // one, the fast path's one known difference, in a field it does not read).
    for key in ["s", "o", "v", "w"] {
        check_scan(&format!(r#"{{"{key}":"a\ud800b"}}"#), true);
        check_scan(&format!(r#"{{"{key}":"\udc00"}}"#), true);
        check_scan(&format!(r#"{{"{key}":"\ud800\u0041"}}"#), true);
    }
    for text in [
        r#"{"s":"a",}"#,
        r#"{"s":"a""#,
        r#"{"s":"a"} x"#,
        r#"{,}"#,
        r#"{"s"}"#,
    ] {
        check_scan(text, true);
    }
}

/// What the scanner must read into a [`Probe`] from `text`, from serde_json's `Value` of it:
/// `None` where a field is of a type its reader refuses (or the text is not an object).
fn probe_of(value: &Value) -> Option<Probe> {
    let obj = value.as_object()?;
    let mut p = Probe::default();
    if let Some(s) = obj.get("s") {
        p.s = Some(s.as_str()?.to_owned());
    }
    if let Some(o) = obj.get("o") {
        p.o = Some(match o {
            Value::Null => None,
            o => Some(o.as_str()?.to_owned()),
        });
    }
    if let Some(b) = obj.get("b") {
        p.b = Some(match b {
            Value::Null => None,
            b => Some(b.as_bool()?),
        });
    }
    if let Some(t) = obj.get("t") {
        p.t = Some(match t {
            Value::String(s) => Timestamp::parse_rfc3339(s),
            Value::Number(n) if n.is_i64() => n.as_i64().map(Timestamp::from_unix_millis),
            Value::Number(n) if n.is_u64() => None,
            Value::Array(_) | Value::Object(_) => return None,
            _ => None,
        });
    }
    p.v = obj.get("v").cloned();
    p.w = obj.get("w").map(|w| match w.as_object() {
        Some(w) => (true, w.get("a").cloned(), w.get("b").cloned()),
        None => (false, None, None),
    });
    Some(p)
}

proptest! {
    // Many cases: each of the ~55 values comes in a field the scanner reads in few of them.
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The scanner reads what serde_json reads, or nothing: any text it takes, serde_json
    /// takes too, with the same values; a well-formed object of fields of the right types is
    /// taken. Texts are objects of unique keys (the scanner refuses a repeated one) with
    /// whitespace anywhere, values of every kind (escapes, control characters, every
    /// literal, numbers, nesting up to serde_json's limit and past it), some cut short or with
    /// a byte changed.
    #[wasm_bindgen_test(unsupported = test)]
    fn the_scanner_reads_what_serde_json_reads(
        fields in proptest::collection::vec((0usize..8, 0usize..64, 0usize..4), 0..6),
        cut in proptest::option::of(0usize..400),
        flip in proptest::option::of((0usize..400, any::<u8>())),
    ) {
        let keys = ["s", "o", "b", "t", "v", "w", "other", "\\u0073"];
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let values: Vec<String> = [
            r#""plain""#, r#""""#, r#""seven77""#, r#""eight888""#, r#""nine 9999 and more than sixteen""#,
            r#""q\"uote""#, r#""back\\slash""#, r#""\u00e9\n""#, "\"tab\tin\"", "\"é ü ✓ 𝄞\"",
            r#""a\/b\b\f\r\t""#, r#""\u00E9\u001b[31m é\u0000""#, r#""\ud83d\ude00 pair""#, r#""\x""#,
            r#""\u12""#, r#""\u12G4""#, r#""ends\\""#, r#""\"""#, "\"\\\u{1}\"",
            r#""2026-11-29T21:31:07.200Z""#, r#""2026-11-29T21:31:07.2\u0030Z""#, r#""not a time""#,
            "true", "false", "null", "nul", "truex", "tru",
            "0", "-1", "1.5e3", "1700000000000", "18446744073709551615", "123456789012345678901234567890",
            "01", "1.", "-",
            "{}", "[]", r#"{"a":[1,{"b":null}],"c":"d"}"#, r#"{"b":"x","a":1,"a":2.5,"\u0062":true}"#,
            r#"{"a":0,"b":1834,"c":01}"#, "007", "12345678901234567890", "1 ", "0]", "[1, 2 ]", "[1,]", r#"{"a":1,}"#, "{\"a\" : \"\\u00e9\"}",
            "\"unterminated", "{", "]",
        ].iter().map(|s| s.to_string()).chain([deep(126), deep(127), format!(r#"{{"c":{}}}"#, deep(125)), format!(r#"{{"c":{}}}"#, deep(126))]).collect();
        let spaces = ["", " ", "\n\t", "\r "];
        let mut text = String::from(spaces[fields.len() % 4]);
        text.push('{');
        let mut used = std::collections::HashSet::new();
        for &(k, v, w) in &fields {
            // Each key once (`\u0073` is `s`).
            if !used.insert(if k == 7 { 0 } else { k }) {
                continue;
            }
            if used.len() > 1 {
                text.push(',');
            }
            text.push_str(spaces[w]);
            text.push_str(&format!("\"{}\"{}:{}", keys[k], spaces[(w + 1) % 4], spaces[(w + 2) % 4]));
            text.push_str(&values[v % values.len()]);
            text.push_str(spaces[(w + 3) % 4]);
        }
        text.push('}');
        let whole = text.clone();
        let mut bytes = text.into_bytes();
        if let Some(c) = cut {
            bytes.truncate(c % (bytes.len() + 1));
        }
        if let Some((at, b)) = flip {
            if !bytes.is_empty() {
                let at = at % bytes.len();
                bytes[at] = b;
            }
        }
        let Ok(text) = String::from_utf8(bytes) else { return Ok(()) };
        check_scan(&text, text == whole);
    }
}
