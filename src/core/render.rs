//! A compact, readable rendering of events, one per line, for goldens and the CLI; and the
//! exact text `agentwire normalize` and `agentwire project` print, rendered here once so the
//! binary and the wasm package (`normalize()`, `project()`) cannot drift apart.
//!
//! `3 t1 tool_call_started tool_name="Bash" tool_call_id="toolu_01"`: the sequence, the
//! run as `t1`, `t2`… in order of first appearance (`--` for none), the type, then the data
//! fields that say the most, in a fixed order, strings quoted and cut to 60 characters.

use std::collections::HashMap;
use std::fmt::Write;

use serde_json::Value;

use super::event::Event;
use super::lifecycle::{LifecycleConfig, TurnProjector};
use super::normalize::{excerpt, Diagnostic, Format, Normalized};
use super::timeline::Timeline;

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

/// What `agentwire normalize` prints on stdout: one canonical event per line, as JSON.
pub fn normalize_output(out: &Normalized) -> String {
    let mut text = String::new();
    for event in &out.events {
        text.push_str(&event.to_json());
        text.push('\n');
    }
    text
}

/// What `agentwire project` prints on stdout: the lifecycle, then the timeline, that the
/// events of `out` project to for `session`, with `now_ms` as the projector's clock.
pub fn project_output(out: &Normalized, session: &str, now_ms: i64) -> String {
    let provider = out
        .format
        .map_or(super::event::Provider::Generic, Format::provider);
    let mut lifecycle = TurnProjector::new(LifecycleConfig::new(session, provider));
    let mut timeline = Timeline::new();
    for event in &out.events {
        lifecycle.handle_event(event, now_ms);
        timeline.handle_event(event);
    }
    let mut text = lifecycle.render();
    text.push_str(&timeline.render());
    text
}

/// What both commands print on stderr: the diagnostics, then a one-line summary.
pub fn report(out: &Normalized) -> String {
    let format = out.format.map_or("nothing (empty input)", Format::as_str);
    let s = out.stats;
    format!(
        "{}agentwire: read {} records as {format}: {} events, {} ignored, {} diagnostics\n",
        render_diagnostics(&out.diagnostics),
        s.records,
        s.events,
        s.ignored,
        s.diagnostics
    )
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
