//! A compact, readable rendering of events, one per line, for goldens and the CLI.
//!
//! `3 t1 tool_call_started tool_name="Bash" tool_call_id="toolu_01"`: the sequence, the
//! run as `t1`, `t2`… in order of first appearance (`--` for none), the type, then the data
//! fields that say the most, in a fixed order, strings quoted and cut to 60 characters.

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::Value;

use super::event::Event;
use super::normalize::{excerpt, Diagnostic};

/// The data fields shown, in this order, when present.
const SHOWN: &[&str] = &[
    "tool_name",
    "tool_call_id",
    "parent_tool_use_id",
    "role",
    "content",
    "delta",
    "discarded",
    "tool_input",
    "tool_output",
    "error",
    "error_message",
    "status",
    "reason",
    "model",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "items",
    "request_id",
];

/// Renders events one per line, with the runs labelled in order of appearance.
pub fn render_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> String {
    let mut runs: HashMap<&str, usize> = HashMap::new();
    let mut out = String::new();
    for e in events {
        let label = match e.run_id() {
            Some(r) => {
                let next = runs.len() + 1;
                format!("t{}", runs.entry(r).or_insert(next))
            }
            None => "--".to_owned(),
        };
        let _ = write!(out, "{} {label} {}", e.sequence(), e.kind());
        for key in SHOWN {
            if let Some(v) = e.data().get(*key) {
                let _ = write!(out, " {key}={}", render_value(v));
            }
        }
        if let Some(pe) = e.data().get("provider_error") {
            if let Some(kind) = pe.get("kind").and_then(Value::as_str) {
                let _ = write!(out, " provider_error.kind={kind:?}");
            }
            if let Some(code) = pe.get("exit_code").filter(|c| !c.is_null()) {
                let _ = write!(out, " provider_error.exit_code={code}");
            }
        }
        out.push('\n');
    }
    out
}

/// Renders diagnostics one per line, prefixed with `!`.
pub fn render_diagnostics<'a>(diagnostics: impl IntoIterator<Item = &'a Diagnostic>) -> String {
    diagnostics
        .into_iter()
        .map(|d| format!("! {d}\n"))
        .collect()
}

fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let cut = excerpt(s, 60);
            if cut.len() < s.len() {
                format!("{:?}…", cut)
            } else {
                format!("{cut:?}")
            }
        }
        Value::Array(items) => format!("[{} items]", items.len()),
        Value::Object(_) => {
            let json = v.to_string();
            let cut = excerpt(&json, 60);
            if cut.len() < json.len() {
                format!("{cut}…")
            } else {
                json
            }
        }
        other => other.to_string(),
    }
}
