//! `agentwire tail --format text`: a session's events as lines for people. Pure: events in,
//! lines out.
//!
//! One line per event that says something, `HH:MM:SS label: text`: the prompt, each assistant
//! message and reasoning block whole (its streamed chunks are joined and printed when it ends:
//! `message_received`, or the turn's end for one that never did), a tool call's start, result
//! and failure on a line each (input and output cut to one short line), approvals, usage,
//! todo lists, and the turn's start and end with its status. Chunks of tool output and other
//! bookkeeping print nothing.

use serde_json::{Map, Value};

use crate::core::event::{Event, EventType};

/// The longest summary of a tool's input or output, in characters.
const SUMMARY: usize = 120;

/// What is being streamed and not printed yet.
#[derive(Debug, Default)]
pub struct TextFormat {
    /// The assistant's text and reasoning so far, by message id: (reasoning?, id, text).
    open: Vec<(bool, String, String)>,
}

impl TextFormat {
    pub fn new() -> TextFormat {
        TextFormat::default()
    }

    /// The lines `event` prints (often none: a chunk waits for the end of its message).
    pub fn handle(&mut self, event: &Event) -> Vec<String> {
        let data = event.data();
        let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or("");
        let mut lines = Vec::new();
        let mut line = |label: &str, body: String| {
            let time = event.timestamp().to_string();
            let time = time.get(11..19).unwrap_or("");
            lines.push(if body.is_empty() {
                format!("{time} {label}")
            } else {
                format!("{time} {label}: {body}")
            });
        };
        let kind = event.kind();
        match kind {
            EventType::MessageStreamed | EventType::ReasoningStreamed => {
                let reasoning = kind == EventType::ReasoningStreamed;
                let id = text("message_id");
                match self
                    .open
                    .iter_mut()
                    .find(|(r, i, _)| *r == reasoning && i == id)
                {
                    Some((_, _, so_far)) => so_far.push_str(text("delta")),
                    None => self
                        .open
                        .push((reasoning, id.to_owned(), text("delta").to_owned())),
                }
            }
            EventType::MessageReceived | EventType::ReasoningReceived => {
                let reasoning = kind == EventType::ReasoningReceived;
                let streamed = self.take(reasoning, text("message_id"));
                let whole = match text("content") {
                    "" => streamed.unwrap_or_default(),
                    content => content.to_owned(),
                };
                let discarded = data.get("discarded").and_then(Value::as_bool) == Some(true);
                if !discarded && !whole.trim().is_empty() {
                    line(label(reasoning), one_line(&whole, usize::MAX));
                }
            }
            EventType::MessageSent => line("you", one_line(text("content"), usize::MAX)),
            EventType::SessionCreated => line("session created", String::new()),
            EventType::SessionStarted => {
                let mut about = Vec::new();
                for key in ["model", "cwd"] {
                    if !text(key).is_empty() {
                        about.push(format!("{key} {}", text(key)));
                    }
                }
                line(
                    &format!("session started ({})", event.provider().as_str()),
                    about.join(", "),
                );
            }
            EventType::SessionFailed => line("session failed", failure(data)),
            EventType::SessionCompleted
            | EventType::SessionCancelled
            | EventType::SessionPaused
            | EventType::SessionResumed => line(&kind.as_str().replace('_', " "), String::new()),
            EventType::RunStarted => line("turn started", String::new()),
            EventType::RunCompleted
            | EventType::RunFailed
            | EventType::RunCancelled
            | EventType::RunTimeout => {
                // A message that never ended is printed as far as it came.
                for (reasoning, _, so_far) in std::mem::take(&mut self.open) {
                    if !so_far.trim().is_empty() {
                        line(
                            &format!("{} (unfinished)", label(reasoning)),
                            one_line(&so_far, usize::MAX),
                        );
                    }
                }
                let (status, detail) = match kind {
                    EventType::RunCompleted => ("completed", duration(data)),
                    EventType::RunFailed => ("failed", failure(data)),
                    EventType::RunCancelled => ("cancelled", text("reason").to_owned()),
                    _ => ("timed out", String::new()),
                };
                line(&format!("turn {status}"), detail);
            }
            EventType::RunStalled => {
                let silent = data.get("silent_ms").and_then(Value::as_i64).unwrap_or(0);
                line("turn stalled", format!("silent for {} s", silent / 1000));
            }
            EventType::ToolCallStarted => line(
                &format!("tool {}", tool_name(data)),
                summary(data.get("tool_input")),
            ),
            EventType::ToolCallCompleted => line(
                &format!("tool {} done", tool_name(data)),
                summary(data.get("tool_output")),
            ),
            EventType::ToolCallFailed => line(
                &format!("tool {} failed", tool_name(data)),
                summary(data.get("error")),
            ),
            EventType::ToolCallCancelled => line(
                &format!("tool {} cancelled", tool_name(data)),
                String::new(),
            ),
            EventType::ToolApprovalRequested => line(
                &format!("approval asked for {}", tool_name(data)),
                format!(
                    "{} (request {})",
                    summary(data.get("tool_input")),
                    text("request_id")
                ),
            ),
            EventType::ToolApprovalGranted => line("approval granted", text("request_id").into()),
            EventType::ToolApprovalDenied => line("approval denied", text("request_id").into()),
            EventType::TokenUsageUpdated => {
                let n = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
                let mut usage = format!("{} in, {} out", n("input_tokens"), n("output_tokens"));
                if let Some(cost) = data.get("cost_usd").and_then(Value::as_f64) {
                    usage.push_str(&format!(", ${cost:.4}"));
                }
                line("usage", usage);
            }
            EventType::TodoUpdated => {
                let items = data.get("items").and_then(Value::as_array);
                let items: Vec<String> = items
                    .into_iter()
                    .flatten()
                    .map(|item| {
                        let mark = match item.get("status").and_then(Value::as_str) {
                            Some("completed") => "[x]",
                            Some("in_progress") => "[~]",
                            _ => "[ ]",
                        };
                        let text = item.get("text").and_then(Value::as_str).unwrap_or("");
                        format!("{mark} {}", one_line(text, SUMMARY))
                    })
                    .collect();
                line("todo", items.join("  "));
            }
            EventType::ErrorOccurred => {
                let severity = match text("severity") {
                    "" => "error",
                    severity => severity,
                };
                line(severity, failure(data));
            }
            EventType::ModeChanged => line("mode", text("mode").into()),
            EventType::ModelChanged => line("model", text("model").into()),
            EventType::ThinkingOptionChanged => line("thinking", text("thinking_option").into()),
            EventType::AttentionRequired => line("attention", text("reason").into()),
            EventType::ContextCompacted => line("context compacted", String::new()),
            // Progress of a tool (its output comes whole when it ends) and the rest.
            _ => {}
        }
        lines
    }

    /// What is still being streamed, as far as it came (at exit).
    pub fn finish(&mut self) -> Vec<String> {
        std::mem::take(&mut self.open)
            .into_iter()
            .filter(|(_, _, text)| !text.trim().is_empty())
            .map(|(reasoning, _, text)| {
                format!(
                    "{} (unfinished): {}",
                    label(reasoning),
                    one_line(&text, usize::MAX)
                )
            })
            .collect()
    }

    fn take(&mut self, reasoning: bool, id: &str) -> Option<String> {
        let at = self
            .open
            .iter()
            .position(|(r, i, _)| *r == reasoning && i == id)?;
        Some(self.open.remove(at).2)
    }
}

fn label(reasoning: bool) -> &'static str {
    if reasoning {
        "thinking"
    } else {
        "assistant"
    }
}

fn tool_name(data: &Map<String, Value>) -> &str {
    data.get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("(unknown)")
}

/// A tool's input or output on one short line: a string as it is, an object by its telling
/// field (`command`, a path, a pattern, a URL) or else as compact JSON.
fn summary(value: Option<&Value>) -> String {
    let text = match value {
        None | Some(Value::Null) => return String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(map)) => ["command", "file_path", "path", "pattern", "url", "query"]
            .iter()
            .find_map(|key| map.get(*key).and_then(Value::as_str))
            .map_or_else(|| Value::Object(map.clone()).to_string(), str::to_owned),
        Some(other) => other.to_string(),
    };
    one_line(&text, SUMMARY)
}

/// The error message of a failure, with the provider error's kind.
fn failure(data: &Map<String, Value>) -> String {
    let message = data
        .get("error_message")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = data
        .get("provider_error")
        .and_then(|e| e.get("kind"))
        .and_then(Value::as_str);
    match kind {
        Some(kind) => format!("{} ({kind})", one_line(message, usize::MAX)),
        None => one_line(message, usize::MAX),
    }
}

fn duration(data: &Map<String, Value>) -> String {
    data.get("duration_ms")
        .and_then(Value::as_u64)
        .map_or_else(String::new, |ms| format!("in {:.1} s", ms as f64 / 1000.0))
}

/// `text` on one line: line breaks become ` ⏎ `, other control characters spaces; cut at `max`
/// characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let text = text.trim();
    let mut out = String::new();
    for (i, part) in text.lines().enumerate() {
        if i > 0 {
            out.push_str(" ⏎ ");
        }
        out.extend(
            part.trim_end()
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c }),
        );
    }
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::event::{EventInit, Provider};
    use crate::core::time::Timestamp;

    fn event(kind: EventType, data: Value) -> Event {
        let at = Timestamp::parse_rfc3339("2026-12-01T12:34:56.789Z").unwrap();
        let mut init = EventInit::new(kind, "s1", Provider::Demo, at);
        init.run_id = Some("r1".into());
        init.data = data.as_object().unwrap().clone();
        Event::new(init).unwrap()
    }

    /// An event's type and data.
    type Fed = (EventType, Value);

    /// Feeds `events` to one formatter, then finishes it; compares every line printed.
    fn check(events: &[Fed], want: &[&str]) {
        let mut format = TextFormat::new();
        let mut lines: Vec<String> = events
            .iter()
            .flat_map(|(kind, data)| format.handle(&event(*kind, data.clone())))
            .collect();
        lines.extend(format.finish());
        assert_eq!(lines, want, "{events:?}");
    }

    #[test]
    fn events_become_lines_for_people() {
        use EventType::*;
        let t = "12:34:56";
        let cases: Vec<(Vec<Fed>, Vec<String>)> = vec![
            // Streamed text is joined, printed once at the message's end (its whole content).
            (
                vec![
                    (RunStarted, json!({})),
                    (MessageStreamed, json!({"delta": "Hel", "message_id": "m1"})),
                    (MessageStreamed, json!({"delta": "lo", "message_id": "m1"})),
                    (
                        MessageReceived,
                        json!({"content": "Hello", "message_id": "m1"}),
                    ),
                    (RunCompleted, json!({"duration_ms": 1234})),
                ],
                vec![
                    format!("{t} turn started"),
                    format!("{t} assistant: Hello"),
                    format!("{t} turn completed: in 1.2 s"),
                ],
            ),
            // Reasoning and text interleaved, by message; an empty content takes the chunks.
            (
                vec![
                    (
                        ReasoningStreamed,
                        json!({"delta": "hm", "message_id": "m1"}),
                    ),
                    (MessageStreamed, json!({"delta": "a", "message_id": "m1"})),
                    (
                        ReasoningReceived,
                        json!({"content": "hmm.", "message_id": "m1"}),
                    ),
                    (MessageStreamed, json!({"delta": "b", "message_id": "m1"})),
                    (MessageReceived, json!({"content": "", "message_id": "m1"})),
                ],
                vec![format!("{t} thinking: hmm."), format!("{t} assistant: ab")],
            ),
            // A discarded message prints nothing; one that never ended prints at the turn's end.
            (
                vec![
                    (
                        MessageStreamed,
                        json!({"delta": "oops", "message_id": "m1"}),
                    ),
                    (
                        MessageReceived,
                        json!({"content": "", "message_id": "m1", "discarded": true}),
                    ),
                    (
                        MessageStreamed,
                        json!({"delta": "half", "message_id": "m2"}),
                    ),
                    (
                        RunFailed,
                        json!({"error_message": "boom", "provider_error": {"kind": "rate_limit"}}),
                    ),
                ],
                vec![
                    format!("{t} assistant (unfinished): half"),
                    format!("{t} turn failed: boom (rate_limit)"),
                ],
            ),
            // At exit, what is still streaming.
            (
                vec![(
                    MessageStreamed,
                    json!({"delta": "so far", "message_id": "m1"}),
                )],
                vec!["assistant (unfinished): so far".into()],
            ),
            // Tool calls: one line each for start, result, failure; progress prints nothing.
            (
                vec![
                    (
                        ToolCallStarted,
                        json!({"tool_name": "Bash", "tool_input": {"command": "ls", "description": "List"}}),
                    ),
                    (ToolCallUpdated, json!({"output_delta": "Cargo"})),
                    (
                        ToolCallCompleted,
                        json!({"tool_name": "Bash", "tool_output": "Cargo.toml\nsrc\n"}),
                    ),
                    (
                        ToolCallFailed,
                        json!({"tool_name": "Edit", "error": "no such file"}),
                    ),
                    (
                        ToolCallStarted,
                        json!({"tool_name": "Grep", "tool_input": {"n": 1}}),
                    ),
                    (ToolCallCancelled, json!({"tool_name": "Grep"})),
                ],
                vec![
                    format!("{t} tool Bash: ls"),
                    format!("{t} tool Bash done: Cargo.toml ⏎ src"),
                    format!("{t} tool Edit failed: no such file"),
                    format!("{t} tool Grep: {{\"n\":1}}"),
                    format!("{t} tool Grep cancelled"),
                ],
            ),
            // Long outputs are cut.
            (
                vec![(
                    ToolCallCompleted,
                    json!({"tool_name": "Read", "tool_output": "x".repeat(500)}),
                )],
                vec![format!("{t} tool Read done: {}…", "x".repeat(119))],
            ),
            // The prompt, approvals, usage, todos, session and turn states.
            (
                vec![
                    (MessageSent, json!({"content": "fix it\nplease"})),
                    (
                        SessionStarted,
                        json!({"model": "demo-1", "cwd": "/w", "tools": []}),
                    ),
                    (
                        ToolApprovalRequested,
                        json!({"request_id": "q1", "tool_name": "Bash", "tool_input": {"command": "rm x"}}),
                    ),
                    (ToolApprovalDenied, json!({"request_id": "q1"})),
                    (
                        TokenUsageUpdated,
                        json!({"input_tokens": 36, "output_tokens": 12, "cost_usd": 0.000813}),
                    ),
                    (
                        TodoUpdated,
                        json!({"items": [{"text": "a", "status": "completed"}, {"text": "b", "status": "pending"}]}),
                    ),
                    (RunCancelled, json!({"reason": "interrupted"})),
                    (RunStalled, json!({"silent_ms": 90500, "synthetic": true})),
                    (
                        ErrorOccurred,
                        json!({"error_message": "retrying", "severity": "warning"}),
                    ),
                    (SessionFailed, json!({"error_message": "exited 3"})),
                ],
                vec![
                    format!("{t} you: fix it ⏎ please"),
                    format!("{t} session started (demo): model demo-1, cwd /w"),
                    format!("{t} approval asked for Bash: rm x (request q1)"),
                    format!("{t} approval denied: q1"),
                    format!("{t} usage: 36 in, 12 out, $0.0008"),
                    format!("{t} todo: [x] a  [ ] b"),
                    format!("{t} turn cancelled: interrupted"),
                    format!("{t} turn stalled: silent for 90 s"),
                    format!("{t} warning: retrying"),
                    format!("{t} session failed: exited 3"),
                ],
            ),
        ];
        for (events, want) in cases {
            let want: Vec<&str> = want.iter().map(String::as_str).collect();
            check(&events, &want);
        }
    }
}
