//! `agentwire-testkit seed`: a long session written straight into a store, for the benchmarks
//! and tests that need one (a replay of 100k or 1M events, a tool call with hundreds of
//! updates) without running an agent for hours. The events are the ones a coding agent's turn
//! normalizes to: a prompt, reasoning and text deltas of ~20 characters, tool calls with
//! results of 200–2,400 characters, usage and a terminal; ids are derived, so a seed gives
//! the same log every time.

use serde_json::{json, Map, Value};

use super::store::{SessionRecord, SessionState, Store, StoreError};
use crate::core::event::{Event, EventId, EventInit, EventType, Provider};
use crate::core::time::Timestamp;

/// What to write.
#[derive(Clone, Debug)]
pub struct SeedOptions {
    pub session: String,
    /// Stop after the turn in which the log reaches this many events.
    pub events: u64,
    /// The turn (0-based) whose tool call gets this many output updates, if any.
    pub tool_updates: Option<(u64, u64)>,
}

/// A generator of one session's events, turn by turn.
struct Turns {
    session: String,
    n: u64,
    clock: i64,
}

impl Turns {
    fn event(&mut self, kind: EventType, run: Option<&str>, data: Value) -> Event {
        self.n += 1;
        self.clock += 7;
        let mut init = EventInit::new(
            kind,
            &self.session,
            Provider::Claude,
            Timestamp::from_unix_millis(1_767_225_600_000 + self.clock),
        );
        init.id = Some(EventId::derive(&[
            "seed",
            &self.session,
            &self.n.to_string(),
        ]));
        init.run_id = run.map(str::to_owned);
        init.data = match data {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        Event::new(init).expect("seeded events are valid")
    }

    /// One turn: `updates` output deltas on its first tool call.
    fn turn(&mut self, t: u64, updates: u64) -> Vec<Event> {
        let run = format!("turn_{t:024x}");
        let r = Some(run.as_str());
        let mut out = vec![
            self.event(EventType::MessageSent, r, json!({"role": "user", "content": format!("Question {t}: what does module {t} do?")})),
            self.event(EventType::RunStarted, r, json!({})),
        ];
        let thought = format!("rsn_{t}");
        for k in 0..5 {
            out.push(self.event(
                EventType::ReasoningStreamed,
                r,
                json!({"delta": format!("thinking step {k} … "), "message_id": thought}),
            ));
        }
        for c in 0..1 + t % 4 {
            let call = format!("toolu_{t}_{c}");
            out.push(self.event(EventType::ToolCallStarted, r, json!({"tool_call_id": call, "tool_name": "Bash", "tool_input": {"command": format!("cat src/module_{t}_{c}.rs")}})));
            if c == 0 {
                for u in 0..updates {
                    out.push(self.event(EventType::ToolCallUpdated, r, json!({"tool_call_id": call, "output_delta": format!("line {u} of the running command\n")})));
                }
            }
            let output =
                "fn example() -> u32 { 42 }\n".repeat(8 + ((t * 7 + c * 13) % 80) as usize);
            out.push(self.event(
                EventType::ToolCallCompleted,
                r,
                json!({"tool_call_id": call, "tool_name": "Bash", "tool_output": output}),
            ));
        }
        let message = format!("msg_{t}");
        let mut text = String::new();
        for k in 0..30 {
            let delta = format!("word{k} of answer {t}. ");
            text.push_str(&delta);
            out.push(self.event(
                EventType::MessageStreamed,
                r,
                json!({"delta": delta, "message_id": message}),
            ));
        }
        out.push(self.event(
            EventType::MessageReceived,
            r,
            json!({"role": "assistant", "content": text, "message_id": message}),
        ));
        out.push(self.event(
            EventType::TokenUsageUpdated,
            r,
            json!({"input_tokens": 100 + t, "output_tokens": 50 + t}),
        ));
        out.push(self.event(EventType::RunCompleted, r, json!({})));
        out
    }
}

/// Writes the session (a closed `demo` session, so a companion serves it as it is) and
/// returns how many events it has.
pub async fn seed(store: &dyn Store, options: &SeedOptions) -> Result<u64, StoreError> {
    let now = Timestamp::from_unix_millis(1_767_225_600_000);
    store
        .create_session(SessionRecord::new(
            options.session.clone(),
            "demo",
            "/seed",
            SessionState::Closed,
            "",
            now,
        ))
        .await?;
    let mut batch = Vec::new();
    let mut n = 0;
    for event in events(options) {
        batch.push(event);
        n += 1;
        if batch.len() >= 5_000 {
            store
                .append(&options.session, std::mem::take(&mut batch))
                .await?;
        }
    }
    if !batch.is_empty() {
        store.append(&options.session, batch).await?;
    }
    Ok(n)
}

/// The session's events in order, not yet numbered (what [`seed`] stores): for a benchmark
/// that needs them without a store (`agentwire-testkit frames`).
pub fn events(options: &SeedOptions) -> impl Iterator<Item = Event> + '_ {
    let mut turns = Turns {
        session: options.session.clone(),
        n: 0,
        clock: 0,
    };
    let mut t = 0;
    std::iter::from_fn(move || {
        if turns.n >= options.events {
            return None;
        }
        let updates = match options.tool_updates {
            Some((turn, k)) if turn == t => k,
            _ => 0,
        };
        let turn = turns.turn(t, updates);
        t += 1;
        Some(turn)
    })
    .flatten()
}
