//! The seed's generic alias vocabulary, batch normalization, sorting and filtering.
//!
//! A generic record is `{"type": <alias>, …fields}`. The type goes through the alias table
//! ([`canonical_type`]); every canonical snake_case name is accepted as itself. The record's
//! other fields become `data`, with the conventional keys filled from common spellings
//! (`text` → `content`, `name` → `tool_name`, `id`/`call_id` → `tool_call_id`, `input`/
//! `arguments` → `tool_input`, `output`/`result` → `tool_output`, `message` → `error_message`).
//! Unlike the seed (v0.8 turned an unknown type into `error_occurred`), an unknown type is a
//! diagnostic: it is counted and reported, and no invented event enters the log.

use serde_json::{json, Map, Value};

use super::{Config, Decoder, Normalized, Normalizer, Out};
use crate::core::event::{CancelReason, Event, EventType, Provider};
use crate::core::provider_error::add_details;
use crate::core::time::Timestamp;

/// Maps a raw type name, refined by an optional `status`, to a canonical type.
pub fn canonical_type(raw: &str, status: Option<&str>) -> Option<EventType> {
    use EventType::*;
    let base = match raw {
        "user_message" | "human_message" | "user" => MessageSent,
        "assistant_message" | "ai_message" | "assistant" | "message" => MessageReceived,
        "delta" | "content_block_delta" | "text_delta" | "stream" | "chunk" => MessageStreamed,
        "tool_use" | "tool_call" | "function_call" => ToolCallStarted,
        "tool_result" | "function_result" => ToolCallCompleted,
        "run_start" | "run_started" | "start" => RunStarted,
        "run_end" | "run_completed" | "end" | "done" | "complete" => RunCompleted,
        "error" | "exception" => ErrorOccurred,
        "usage" | "token_usage" => TokenUsageUpdated,
        other => EventType::parse(other)?,
    };
    Some(match (base, status) {
        (ToolCallStarted | ToolCallCompleted, Some("completed")) => ToolCallCompleted,
        (ToolCallStarted | ToolCallCompleted, Some("failed" | "error")) => ToolCallFailed,
        (RunCompleted, Some("failed" | "error")) => RunFailed,
        (RunCompleted, Some("cancelled" | "canceled")) => RunCancelled,
        (RunCompleted, Some("timeout")) => RunTimeout,
        (t, _) => t,
    })
}

/// Fields copied under a conventional name when the record spells them otherwise.
const RENAMES: &[(&str, &str)] = &[
    ("text", "content"),
    ("name", "tool_name"),
    ("call_id", "tool_call_id"),
    ("id", "tool_call_id"),
    ("input", "tool_input"),
    ("arguments", "tool_input"),
    ("output", "tool_output"),
    ("result", "tool_output"),
    ("message", "error_message"),
];

/// Decoder for generic records. Runs: a record's own `run_id` wins; otherwise a
/// `run_started` opens a derived run that the next run terminal closes.
#[derive(Default)]
pub(crate) struct Generic {
    run: Option<String>,
}

impl Decoder for Generic {
    fn record(&mut self, record: &Value, out: &mut Out<'_>) {
        let Some(obj) = record.as_object() else {
            return out.unknown("record");
        };
        let Some(raw) = obj.get("type").and_then(Value::as_str) else {
            return out.missing("type");
        };
        let status = obj.get("status").and_then(Value::as_str);
        let Some(kind) = canonical_type(raw, status) else {
            return out.unknown(format_args!("type {raw:?}"));
        };
        out.use_timestamp(obj.get("timestamp"));
        let mut data = Map::new();
        for (k, v) in obj {
            if !matches!(k.as_str(), "type" | "timestamp" | "run_id" | "session_id") {
                data.insert(k.clone(), v.clone());
            }
        }
        for (from, to) in RENAMES {
            if let (Some(v), false) = (obj.get(*from), data.contains_key(*to)) {
                let applies = match *to {
                    "tool_call_id" | "tool_name" | "tool_input" | "tool_output" => {
                        kind_is_tool(kind)
                    }
                    "error_message" => kind == EventType::ErrorOccurred || kind.is_run_terminal(),
                    _ => true,
                };
                if applies {
                    data.insert((*to).to_owned(), v.clone());
                }
            }
        }
        if kind == EventType::MessageStreamed && !data.contains_key("delta") {
            if let Some(c) = data.get("content").cloned() {
                data.insert("delta".into(), c);
            }
        }
        if kind == EventType::RunCancelled {
            // The closed vocabulary; the record's own word goes to `details.reason`.
            let own = data
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let reason = own
                .as_deref()
                .and_then(CancelReason::parse)
                .unwrap_or(CancelReason::Interrupted);
            if let Some(own) = own.filter(|o| o != reason.as_str()) {
                add_details(&mut data, json!({ "reason": own }));
            }
            data.insert("reason".into(), json!(reason.as_str()));
        }
        let own_run = obj.get("run_id").and_then(Value::as_str).map(str::to_owned);
        if kind == EventType::RunStarted && own_run.is_none() {
            self.run = Some(out.new_run_id());
        }
        let run = own_run.or_else(|| self.run.clone());
        out.emit(kind, run.as_deref(), Value::Object(data));
        if kind.is_run_terminal() {
            self.run = None;
        }
    }

    fn finish(&mut self, _out: &mut Out<'_>) {}
}

fn kind_is_tool(kind: EventType) -> bool {
    matches!(
        kind,
        EventType::ToolCallStarted
            | EventType::ToolCallCompleted
            | EventType::ToolCallFailed
            | EventType::ToolCallUpdated
    )
}

/// Normalizes a batch of generic raw events for one session, numbering them `offset + 1`,
/// `offset + 2`, … in order. Records that cannot be read are returned as diagnostics.
pub fn normalize_batch(
    raw_events: &[Value],
    session_id: &str,
    provider: Provider,
    offset: u64,
    now: Timestamp,
) -> Normalized {
    let mut config = Config::new(session_id);
    config.first_sequence = offset + 1;
    config.source = format!("batch:{offset}");
    let mut n = Normalizer::new(Some(super::Format::Generic), config);
    n.state.provider = provider;
    for (i, raw) in raw_events.iter().enumerate() {
        n.state.stats.records += 1;
        n.handle_record_ref(i as u64 + 1, raw, now);
    }
    n.handle_eof(now);
    Normalized {
        format: n.format(),
        events: std::iter::from_fn(|| n.poll_event()).collect(),
        diagnostics: std::iter::from_fn(|| n.poll_diagnostic()).collect(),
        stats: n.stats(),
    }
}

/// Sorts by sequence, then timestamp, then id (the seed's order).
pub fn sort_events(events: &mut [Event]) {
    events.sort_by(|a, b| {
        (a.sequence(), a.timestamp(), a.id()).cmp(&(b.sequence(), b.timestamp(), b.id()))
    });
}

/// The events of one type, in their order.
pub fn filter_by_type(events: &[Event], kind: EventType) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .cloned()
        .collect()
}

/// The events of one run, in their order.
pub fn filter_by_run(events: &[Event], run_id: &str) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.run_id() == Some(run_id))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use serde_json::json;

    #[wasm_bindgen_test(unsupported = test)]
    fn a_cancelled_runs_reason_is_from_the_closed_list() {
        let raw = [
            json!({"type": "run_end", "status": "cancelled", "reason": "user", "run_id": "r1"}),
            json!({"type": "run_end", "status": "cancelled", "run_id": "r2"}),
            json!({"type": "run_cancelled", "reason": "session_closed", "run_id": "r3"}),
        ];
        let out = normalize_batch(&raw, "s1", Provider::Generic, 0, Timestamp::EPOCH);
        let got: Vec<String> = out
            .events
            .iter()
            .map(|e| {
                serde_json::to_string(&(e.data_str("reason"), e.data().get("details"))).unwrap()
            })
            .collect();
        assert_eq!(
            got,
            [
                r#"["interrupted",{"reason":"user"}]"#,
                r#"["interrupted",null]"#,
                r#"["session_closed",null]"#
            ]
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_alias_table() {
        use EventType::*;
        let cases = [
            ("human_message", None, MessageSent),
            ("ai_message", None, MessageReceived),
            ("text_delta", None, MessageStreamed),
            ("function_call", None, ToolCallStarted),
            ("tool_call", Some("completed"), ToolCallCompleted),
            ("tool_call", Some("failed"), ToolCallFailed),
            ("function_result", None, ToolCallCompleted),
            ("start", None, RunStarted),
            ("done", None, RunCompleted),
            ("run_end", Some("cancelled"), RunCancelled),
            ("complete", Some("timeout"), RunTimeout),
            ("exception", None, ErrorOccurred),
            ("token_usage", None, TokenUsageUpdated),
            ("policy_violation", None, PolicyViolation),
        ];
        for (raw, status, want) in cases {
            assert_eq!(canonical_type(raw, status), Some(want), "{raw} {status:?}");
        }
        assert_eq!(canonical_type("teleported", None), None);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn batches_number_from_the_offset_and_report_unknowns() {
        let raw = [
            json!({"type": "run_start"}),
            json!({"type": "delta", "content": "Hel"}),
            json!({"type": "teleported"}),
            json!({"type": "assistant_message", "content": "Hello!", "model": "m"}),
            json!({"type": "run_end", "status": "failed", "message": "boom"}),
        ];
        let out = normalize_batch(&raw, "s1", Provider::Generic, 10, Timestamp::EPOCH);
        let got: Vec<_> = out
            .events
            .iter()
            .map(|e| (e.sequence(), e.kind()))
            .collect();
        use EventType::*;
        assert_eq!(
            got,
            [
                (11, RunStarted),
                (12, MessageStreamed),
                (13, MessageReceived),
                (14, RunFailed)
            ]
        );
        assert_eq!(out.events[1].data_str("delta"), Some("Hel"));
        assert_eq!(out.events[3].data_str("error_message"), Some("boom"));
        let run = out.events[0].run_id().unwrap();
        assert!(out.events.iter().all(|e| e.run_id() == Some(run)));
        assert_eq!(out.diagnostics.len(), 1);
        assert_eq!(out.diagnostics[0].line, 3);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn sort_and_filter() {
        let raw = [
            json!({"type": "run_start"}),
            json!({"type": "message", "content": "a"}),
        ];
        let mut events = normalize_batch(&raw, "s1", Provider::Generic, 0, Timestamp::EPOCH).events;
        events.reverse();
        sort_events(&mut events);
        assert_eq!(events[0].sequence(), 1);
        assert_eq!(filter_by_type(&events, EventType::MessageReceived).len(), 1);
        let run = events[0].run_id().unwrap().to_owned();
        assert_eq!(filter_by_run(&events, &run).len(), 2);
        assert!(filter_by_run(&events, "other").is_empty());
    }
}
