//! Turn bookkeeping the decoders share: the tool calls of the open run that still wait for
//! their result, and the one rule for them when the run ends.
//!
//! **The rule.** A run terminal closes every tool call of the run that got no result: each
//! gets one `tool_call_cancelled`, in the order the calls started, before the terminal, with
//! one payload whatever the provider (docs/events.md):
//! `{tool_call_id, tool_name, tool_input, reason}`, where `reason` is the type of the terminal
//! that ended the run (`run_completed`, `run_failed` or `run_cancelled`). A decoder that keeps
//! its own tool state (it needs more than this) still emits through [`cancel_tool_call`].

use serde_json::{Map, Value};

use super::Out;
use crate::core::event::EventType;

/// One tool call waiting for its result, with what the decoder keeps about it (`extra`).
pub(crate) struct OpenTool<T> {
    pub(crate) id: String,
    pub(crate) name: Value,
    pub(crate) input: Value,
    pub(crate) extra: T,
}

/// The open tool calls of one run, in the order they started. Small (the calls in flight),
/// looked up by id.
pub(crate) struct OpenTools<T = ()> {
    calls: Vec<OpenTool<T>>,
}

impl<T> Default for OpenTools<T> {
    fn default() -> Self {
        OpenTools { calls: Vec::new() }
    }
}

impl<T> OpenTools<T> {
    /// Opens a call; `false` (and nothing changes) when it is open already.
    pub(crate) fn open(&mut self, id: &str, name: Value, input: Value, extra: T) -> bool {
        if self.is_open(id) {
            return false;
        }
        self.calls.push(OpenTool {
            id: id.to_owned(),
            name,
            input,
            extra,
        });
        true
    }

    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    pub(crate) fn get(&self, id: &str) -> Option<&OpenTool<T>> {
        self.calls.iter().find(|c| c.id == id)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut OpenTool<T>> {
        self.calls.iter_mut().find(|c| c.id == id)
    }

    /// The call got its result: it is no longer open.
    pub(crate) fn close(&mut self, id: &str) -> Option<OpenTool<T>> {
        let i = self.calls.iter().position(|c| c.id == id)?;
        Some(self.calls.remove(i))
    }

    /// Forgets every call (the run was abandoned without a terminal).
    pub(crate) fn clear(&mut self) {
        self.calls.clear();
    }

    /// The run ends with `terminal`: every call still open is cancelled (see the module
    /// docs), and none is open any more.
    pub(crate) fn cancel_all(&mut self, out: &mut Out<'_>, run: &str, terminal: EventType) {
        for call in std::mem::take(&mut self.calls) {
            cancel_tool_call(out, run, &call.id, &call.name, &call.input, terminal);
        }
    }
}

/// Emits the one `tool_call_cancelled` of a call left open by a run that ended with
/// `terminal` (correlated by the call's id).
pub(crate) fn cancel_tool_call(
    out: &mut Out<'_>,
    run: &str,
    id: &str,
    name: &Value,
    input: &Value,
    terminal: EventType,
) {
    out.emit_full(
        EventType::ToolCallCancelled,
        Some(run),
        cancelled_data(id, name, input, terminal),
        Some(id),
        Map::new(),
    );
}

/// The payload of [`cancel_tool_call`], for decoders that emit through their own helper.
pub(crate) fn cancelled_data(id: &str, name: &Value, input: &Value, terminal: EventType) -> Value {
    // Clones, not `json!` (which would copy the values through their serializer).
    Value::Object(Map::from_iter([
        ("tool_call_id".to_owned(), Value::from(id)),
        ("tool_name".to_owned(), name.clone()),
        ("tool_input".to_owned(), input.clone()),
        ("reason".to_owned(), Value::from(terminal.as_str())),
    ]))
}
