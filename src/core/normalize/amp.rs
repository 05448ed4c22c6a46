//! Decoder for Amp's `amp --execute --stream-json` output: the Claude Code stream-json
//! envelope with a smaller field set, decoded by the Claude decoder stamped `Provider::Amp`.
//!
//! What differs from Claude, and where it is handled (all in `claude.rs`):
//! * `system/init` names the thread (`session_id` = `T-…`), `cwd`, `tools`, `mcp_servers`, and
//!   usually no model or version: `session_started` carries what is there.
//! * No `stream_event` partials; thinking blocks only with `--stream-json-thinking` (they
//!   become `reasoning_received` as for Claude).
//! * Error results (`error_during_execution`, `error_max_turns`) carry the reason as an `error`
//!   string instead of `result` / `errors[]`: it becomes the `run_failed` message, with the
//!   kind taken from the subtype (`error_during_execution`, `max_turns`).
//! * `permission_denials` is a list of strings: it is passed through under `data.details`.
//!
//! No real Amp capture is public (see tests/data/amp/README.md); the tests below and the
//! golden of tests/data/amp/synthetic-amp.jsonl follow the documented shapes.

use serde_json::Value;

use super::claude::Claude;
use super::{Decoder, Out};
use crate::core::event::Provider;

pub(crate) struct Amp(Claude);

impl Amp {
    pub(crate) fn new() -> Amp {
        Amp(Claude::new(Provider::Amp))
    }
}

impl Decoder for Amp {
    fn record_owned(&mut self, record: Value, out: &mut Out<'_>) {
        self.0.record_owned(record, out);
    }

    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        self.0.record(record, out);
    }

    fn finish(&mut self, out: &mut Out<'_>) {
        self.0.finish(out);
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::expect;

    use crate::core::event::Provider;
    use crate::core::normalize::tests::check;
    use crate::core::normalize::{normalize, Config, Format};
    use crate::core::time::Timestamp;

    #[wasm_bindgen_test(unsupported = test)]
    fn a_tool_turn_then_a_success() {
        check(
            Format::Amp,
            r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"T-1","tools":["Bash","Read"],"mcp_servers":[]}
{"type":"user","session_id":"T-1","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"text","text":"list files"}]}}
{"type":"assistant","session_id":"T-1","parent_tool_use_id":null,"message":{"id":"m1","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"Listing."},{"type":"tool_use","id":"tu1","name":"Bash","input":{"cmd":"ls"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5}}}
{"type":"user","session_id":"T-1","parent_tool_use_id":null,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"a.txt\n","is_error":false}]}}
{"type":"assistant","session_id":"T-1","parent_tool_use_id":null,"message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"One file: a.txt"}],"stop_reason":"end_turn"}}
{"type":"result","subtype":"success","session_id":"T-1","is_error":false,"result":"One file: a.txt","duration_ms":900,"num_turns":2,"usage":{"input_tokens":30,"output_tokens":12},"permission_denials":[]}
"#,
            expect![[r#"
                  1 -- session_started
                  2 t1 run_started
                  3 t1 message_sent role="user" content="list files"
                  4 t1 message_received role="assistant" content="Listing."
                  5 t1 tool_call_started tool_name="Bash" tool_call_id="tu1" tool_input={"cmd":"ls"}
                  6 t1 tool_call_completed tool_name="Bash" tool_call_id="tu1" tool_input={"cmd":"ls"} tool_output="a.txt\n"
                  7 t1 message_received role="assistant" content="One file: a.txt"
                  8 t1 token_usage_updated input_tokens=30 output_tokens=12
                  9 t1 run_completed
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn error_results_carry_an_error_string() {
        check(
            Format::Amp,
            r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"T-2","tools":[],"mcp_servers":[]}
{"type":"result","subtype":"error_during_execution","session_id":"T-2","is_error":true,"error":"Thread T-2 is not accessible","duration_ms":12,"num_turns":0,"permission_denials":["Bash"]}
{"type":"system","subtype":"init","cwd":"/w","session_id":"T-2","tools":[],"mcp_servers":[]}
{"type":"result","subtype":"error_max_turns","session_id":"T-2","is_error":true,"error":"Reached max turns (3)","duration_ms":50,"num_turns":3}
"#,
            expect![[r#"
                1 -- session_started
                2 t1 run_started
                3 t1 run_failed error_message="Thread T-2 is not accessible" provider_error.kind="agent_error"
                4 t2 run_started
                5 t2 run_failed error_message="Reached max turns (3)" provider_error.kind="max_turns"
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn events_are_stamped_amp() {
        let input = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"T-3","tools":[],"mcp_servers":[]}
{"type":"result","subtype":"error_during_execution","session_id":"T-3","is_error":true,"error":"boom"}"#;
        let out = normalize(
            Some(Format::Amp),
            Config::new("s1"),
            input.as_bytes(),
            Timestamp::EPOCH,
        );
        assert_eq!(out.events.len(), 3);
        assert!(out.events.iter().all(|e| e.provider() == Provider::Amp));
        let failed = &out.events[2];
        let pe = failed.data().get("provider_error");
        assert_eq!(pe.and_then(|p| p.get("provider")), Some(&"amp".into()));
        assert_eq!(failed.data_str("error_message"), Some("boom"));
        // Detection picks Amp from the thread id.
        assert_eq!(
            normalize(None, Config::new("s1"), input.as_bytes(), Timestamp::EPOCH).format,
            Some(Format::Amp)
        );
    }
}
