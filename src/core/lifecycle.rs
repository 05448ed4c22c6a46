//! The turn-lifecycle projection: from a session's events (and the host's own turn starts
//! and interrupts) to `initializing | idle | running | error | closed`, with no turn ever
//! left running and every invariant breach reported as a value.
//!
//! The rules are paseo's, made exact:
//!
//! * A **foreground** turn exists from the moment the host's start was accepted
//!   ([`TurnProjector::start_foreground`]); the lifecycle is `running` at once (some providers
//!   never say a turn started). Any other run id seen in events is an **autonomous** turn (the
//!   agent woke up by itself); it makes the lifecycle `running` too.
//! * A run terminal (`run_completed`, `run_cancelled` → idle; `run_failed`, `run_timeout` →
//!   error) ends its turn. The lifecycle is `running` while any turn is active.
//! * A terminal for a turn that already ended is **stale** and always dropped: it must not flip
//!   the lifecycle of a later turn.
//! * An interrupt that gets no terminal within `cancel_grace_ms` (2 s) of the caller's clock
//!   yields a synthetic `run_cancelled`; an autonomous turn silent for longer than
//!   `autonomous_idle_limit_ms` (a foreground one past `foreground_idle_limit_ms`, a provider
//!   that hangs) ends with a synthetic `run_failed` whose `provider_error.kind`
//!   is `watchdog`. Closing the session cancels what is still active. So nothing stays
//!   `running` forever.
//! * Silence is visible before the watchdog fires: an active turn silent for `stall_after_ms`
//!   gets one synthetic `run_stalled{silent_ms, synthetic: true}` (not a terminal) and is
//!   **stalled** ([`TurnProjector::stalled`]) until its next event. A `run_stalled` read from
//!   a log (a client's projector, which never ticks) marks its turn stalled the same way. A
//!   turn waiting for the user (an approval asked, not answered) or for its interrupt to land
//!   is not stalled.
//!
//! Invariants checked on every event, reported through [`TurnProjector::poll_violation`] and
//! handled by the [`Policy`] (warn: apply and report; drop: skip and report; fail: skip,
//! report and set the lifecycle to `error`); the stream itself is never aborted:
//! at most one user message per foreground turn; exactly one terminal per started turn; no
//! event for a turn after its terminal; distinct ids for autonomous turns; strictly increasing
//! sequence numbers (feed the projector deduplicated input: see [`crate::core::dedup`]).
//!
//! Driving rule: call `handle_*`/`start_foreground`/`interrupt`/`close` with the current time,
//! then drain [`TurnProjector::poll_event`] (synthetic events to persist and forward) and
//! [`TurnProjector::poll_violation`] until `None`; call [`TurnProjector::handle_timeout`] at
//! [`TurnProjector::poll_timeout`].

use std::collections::VecDeque;
use std::fmt::{self, Write};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::ErrorCode;
use super::event::{CancelReason, Event, EventId, EventInit, EventType, Provider};
use super::event_ref::EventView;
use super::hash::{FastMap, FastSet};
use super::json::{json_names, json_struct, json_write, json_write_names};
use super::provider_error::{ErrorKind, ProviderError};
use super::quoted::Quoted;
use super::sorted;
use super::time::Timestamp;

/// The session's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    Initializing,
    Idle,
    Running,
    Error,
    Closed,
}

impl Lifecycle {
    pub const fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Initializing => "initializing",
            Lifecycle::Idle => "idle",
            Lifecycle::Running => "running",
            Lifecycle::Error => "error",
            Lifecycle::Closed => "closed",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with an event that breaks an invariant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Apply it and report the breach.
    #[default]
    Warn,
    /// Skip it and report the breach.
    Drop,
    /// Skip it, report the breach and set the lifecycle to `error`.
    Fail,
}

/// Configuration of a [`TurnProjector`].
#[derive(Clone, Debug)]
pub struct LifecycleConfig {
    /// The session whose events are projected (stamped on synthetic events).
    pub session_id: String,
    /// The provider stamped on synthetic events.
    pub provider: Provider,
    /// How long an interrupt waits for the provider's terminal before a synthetic one.
    pub cancel_grace_ms: i64,
    /// How long an autonomous turn may stay silent before the watchdog fails it.
    pub autonomous_idle_limit_ms: i64,
    /// How long a foreground turn may stay silent before the watchdog fails it (a provider
    /// that hangs). Longer than the autonomous limit: a tool may run quietly for a while.
    pub foreground_idle_limit_ms: i64,
    /// How long an active turn may stay silent before a synthetic `run_stalled` says so.
    pub stall_after_ms: i64,
    pub policy: Policy,
}

/// The default of [`LifecycleConfig::stall_after_ms`]: 90 s of silence.
pub const DEFAULT_STALL_AFTER_MS: i64 = 90_000;
/// The default of [`LifecycleConfig::foreground_idle_limit_ms`]: 10 min of silence.
pub const DEFAULT_FOREGROUND_IDLE_LIMIT_MS: i64 = 10 * 60_000;

impl LifecycleConfig {
    pub fn new(session_id: impl Into<String>, provider: Provider) -> LifecycleConfig {
        LifecycleConfig {
            session_id: session_id.into(),
            provider,
            cancel_grace_ms: 2_000,
            autonomous_idle_limit_ms: 10 * 60_000,
            foreground_idle_limit_ms: DEFAULT_FOREGROUND_IDLE_LIMIT_MS,
            stall_after_ms: DEFAULT_STALL_AFTER_MS,
            policy: Policy::Warn,
        }
    }
}

/// Which invariant an event broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// A second `message_sent` in one foreground turn.
    DuplicateUserMessage,
    /// A terminal for a turn that had already ended (always dropped).
    StaleTerminal,
    /// A non-terminal event for a turn that had already ended.
    EventAfterTerminal,
    /// An autonomous turn reused the id of a turn that had ended.
    ReusedTurnId,
    /// A sequence number not greater than the previous one.
    NonIncreasingSequence,
}

/// One invariant breach, as a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub kind: ViolationKind,
    pub event_id: EventId,
    pub run_id: Option<String>,
    pub sequence: u64,
    /// Whether the event was applied (policy `warn`) or skipped.
    pub applied: bool,
}

/// What the projector did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    Applied,
    /// Skipped because it broke an invariant (see the violation reported with it).
    Dropped(ViolationKind),
}

/// Why a foreground turn could not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    #[error("a foreground turn is already active ({0})")]
    ForegroundTurnActive(String),
    #[error("the session is not connected (lifecycle {0})")]
    NotConnected(Lifecycle),
    #[error("turn id {} was already used", Quoted(.0))]
    TurnIdUsed(String),
}

impl StartError {
    /// A stable machine-readable code.
    pub const fn code(&self) -> ErrorCode {
        match self {
            StartError::ForegroundTurnActive(_) => ErrorCode::ForegroundTurnActive,
            StartError::NotConnected(_) => ErrorCode::NotConnected,
            StartError::TurnIdUsed(_) => ErrorCode::TurnIdUsed,
        }
    }
}

#[derive(Clone, Debug)]
struct Turn {
    foreground: bool,
    user_messages: u32,
    last_activity_ms: i64,
    cancel_deadline_ms: Option<i64>,
    /// Set by a `run_stalled` (synthesized or read), cleared by the turn's next event.
    stalled: Option<Stall>,
    /// Approvals asked and not yet answered: the turn waits for the user, not the agent, so
    /// its silence is no stall.
    pending_approvals: FastSet<String>,
}

/// A turn that has been silent for a while (see [`TurnProjector::stalled`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// The stalled turn.
    pub run_id: String,
    /// How long it had been silent when the stall was noticed.
    pub silent_ms: i64,
    /// When the stall was noticed (unix milliseconds): the `run_stalled` event's timestamp.
    pub at_ms: i64,
}

json_write!(Stall {
    run_id,
    silent_ms,
    at_ms
});
json_write_names!(Lifecycle);
json_write_names!(ViolationKind {
    DuplicateUserMessage = "duplicate_user_message",
    StaleTerminal = "stale_terminal",
    EventAfterTerminal = "event_after_terminal",
    ReusedTurnId = "reused_turn_id",
    NonIncreasingSequence = "non_increasing_sequence",
});

/// The lifecycle projection of one session. See the module docs for the rules and the
/// driving rule.
pub struct TurnProjector {
    config: LifecycleConfig,
    lifecycle: Lifecycle,
    /// Set after a failed turn until the next turn starts.
    errored: bool,
    foreground: Option<String>,
    active: FastMap<String, Turn>,
    /// Every run id that has ended, with the id of its terminal event.
    finished: FastMap<String, EventId>,
    last_sequence: u64,
    synthetic_count: u64,
    out: VecDeque<Event>,
    violations: VecDeque<Violation>,
    started_ids: FastSet<String>,
    /// The run of the last event applied as an active turn's (empty for none): active, not
    /// finished, started. Its next events skip three of the four lookups of their run id; a
    /// turn's end clears it.
    hot: String,
}

impl TurnProjector {
    pub fn new(config: LifecycleConfig) -> TurnProjector {
        TurnProjector {
            config,
            lifecycle: Lifecycle::Initializing,
            errored: false,
            foreground: None,
            active: FastMap::default(),
            finished: FastMap::default(),
            last_sequence: 0,
            synthetic_count: 0,
            out: VecDeque::new(),
            violations: VecDeque::new(),
            started_ids: FastSet::default(),
            hot: String::new(),
        }
    }

    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// The foreground turn in progress, if any.
    pub fn active_foreground(&self) -> Option<&str> {
        self.foreground.as_deref()
    }

    /// The turns in progress (foreground and autonomous), sorted.
    pub fn active_turns(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.active.keys().map(String::as_str).collect();
        sorted::sort_unstable(&mut ids);
        ids
    }

    /// The stall of the turn a page shows (the foreground one, else the first active), if
    /// that turn is stalled: set by `run_stalled`, cleared by the turn's next event.
    pub fn stalled(&self) -> Option<&Stall> {
        let shown = self
            .foreground
            .as_deref()
            .or_else(|| self.active_turns().first().copied())?;
        self.active.get(shown)?.stalled.as_ref()
    }

    /// The session is connected and ready for turns (the host's process is up).
    pub fn mark_connected(&mut self) {
        if self.lifecycle == Lifecycle::Initializing {
            self.lifecycle = Lifecycle::Idle;
        }
    }

    /// The host's start of a foreground turn was accepted by the provider. Rejects when a
    /// foreground turn is active, the session is not connected, or the id was used before.
    pub fn start_foreground(&mut self, run_id: &str, now_ms: i64) -> Result<(), StartError> {
        if let Some(active) = &self.foreground {
            return Err(StartError::ForegroundTurnActive(active.clone()));
        }
        if matches!(self.lifecycle, Lifecycle::Initializing | Lifecycle::Closed) {
            return Err(StartError::NotConnected(self.lifecycle));
        }
        if self.finished.contains_key(run_id) || self.active.contains_key(run_id) {
            return Err(StartError::TurnIdUsed(run_id.to_owned()));
        }
        self.foreground = Some(run_id.to_owned());
        self.active.insert(
            run_id.to_owned(),
            Turn {
                foreground: true,
                user_messages: 0,
                last_activity_ms: now_ms,
                cancel_deadline_ms: None,
                stalled: None,
                pending_approvals: FastSet::default(),
            },
        );
        self.errored = false;
        self.recompute();
        Ok(())
    }

    /// The host asked the provider to interrupt: every active turn gets `cancel_grace_ms` to
    /// end before a synthetic `run_cancelled`. Returns whether anything was active.
    pub fn interrupt(&mut self, now_ms: i64) -> bool {
        let deadline = now_ms + self.config.cancel_grace_ms;
        for turn in self.active.values_mut() {
            turn.cancel_deadline_ms.get_or_insert(deadline);
        }
        !self.active.is_empty()
    }

    /// The session ended: active turns are cancelled (synthetic terminals) and the lifecycle
    /// becomes `closed`.
    pub fn close(&mut self, now_ms: i64) {
        self.end_active(
            EventType::RunCancelled,
            &json!({"reason": CancelReason::SessionClosed.as_str()}),
            now_ms,
        );
        self.lifecycle = Lifecycle::Closed;
    }

    /// Ends every active turn with a synthetic terminal of `kind` carrying `data` (e.g. a
    /// `run_failed` with the `provider_error` of a process that died). Returns how many.
    pub fn end_active(&mut self, kind: EventType, data: &Value, now_ms: i64) -> usize {
        let active: Vec<String> = self.active_turns().into_iter().map(str::to_owned).collect();
        for run_id in &active {
            self.synthesize(run_id, kind, data.clone(), now_ms);
        }
        active.len()
    }

    /// When the watchdog fails `turn` if nothing happens before.
    fn watchdog_at(&self, turn: &Turn) -> i64 {
        let limit = if turn.foreground {
            self.config.foreground_idle_limit_ms
        } else {
            self.config.autonomous_idle_limit_ms
        };
        turn.last_activity_ms.saturating_add(limit)
    }

    /// When `turn` is noticed as stalled if nothing happens before (`None` once it is).
    fn stall_at(&self, turn: &Turn) -> Option<i64> {
        let quiet = turn.stalled.is_none()
            && turn.cancel_deadline_ms.is_none()
            && turn.pending_approvals.is_empty();
        quiet.then(|| {
            turn.last_activity_ms
                .saturating_add(self.config.stall_after_ms)
        })
    }

    /// The earliest time at which [`TurnProjector::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<i64> {
        self.active
            .values()
            .flat_map(|t| {
                [
                    t.cancel_deadline_ms,
                    Some(self.watchdog_at(t)),
                    self.stall_at(t),
                ]
            })
            .flatten()
            .min()
    }

    /// Fires the cancel grace, the watchdog and the stall deadlines that are due at `now_ms`.
    pub fn handle_timeout(&mut self, now_ms: i64) {
        let mut due: Vec<(String, bool, bool)> = Vec::new();
        let mut stalls: Vec<(String, i64)> = Vec::new();
        for (id, t) in &self.active {
            if t.cancel_deadline_ms.is_some_and(|d| d <= now_ms) {
                due.push((id.clone(), true, t.foreground));
            } else if self.watchdog_at(t) <= now_ms {
                due.push((id.clone(), false, t.foreground));
            } else if self.stall_at(t).is_some_and(|d| d <= now_ms) {
                stalls.push((id.clone(), t.last_activity_ms));
            }
        }
        sorted::sort_unstable(&mut stalls);
        for (run_id, since_ms) in stalls {
            self.stall(&run_id, since_ms, now_ms);
        }
        sorted::sort_unstable(&mut due);
        for (run_id, cancelled, foreground) in due {
            if cancelled {
                let reason = CancelReason::InterruptTimeout.as_str();
                let data = json!({"reason": reason, "synthetic": true});
                self.synthesize(&run_id, EventType::RunCancelled, data, now_ms);
            } else {
                let (which, limit) = if foreground {
                    ("foreground", self.config.foreground_idle_limit_ms)
                } else {
                    ("autonomous", self.config.autonomous_idle_limit_ms)
                };
                let message = format!("{which} turn silent for more than {limit} ms");
                let mut data =
                    ProviderError::new(self.config.provider, ErrorKind::Watchdog, message)
                        .to_data();
                data.insert("synthetic".into(), Value::Bool(true));
                self.synthesize(&run_id, EventType::RunFailed, Value::Object(data), now_ms);
            }
        }
    }

    /// Applies one event of the session (in log order, deduplicated).
    pub fn handle_event(&mut self, event: &impl EventView, now_ms: i64) -> Disposition {
        if event.sequence() > 0 {
            if event.sequence() <= self.last_sequence {
                if let Some(d) = self.breach(event, ViolationKind::NonIncreasingSequence) {
                    return d;
                }
            }
            self.last_sequence = self.last_sequence.max(event.sequence());
        }
        let Some(run_id) = event.run_id() else {
            self.apply_session_event(event.kind());
            return Disposition::Applied;
        };
        // Run ids are never empty, so an empty `hot` matches none.
        let hot = self.hot == run_id;
        let finished = if hot { None } else { self.finished.get(run_id) };
        if let Some(terminal_id) = finished {
            if terminal_id == event.id() {
                // Our own synthetic terminal (or the same terminal) coming back: a no-op.
                return Disposition::Applied;
            }
            if event.kind().is_run_terminal() {
                self.report(event, ViolationKind::StaleTerminal, false);
                return Disposition::Dropped(ViolationKind::StaleTerminal);
            }
            let kind = if self.started_ids.contains(run_id) && event.kind() == EventType::RunStarted
            {
                ViolationKind::ReusedTurnId
            } else {
                ViolationKind::EventAfterTerminal
            };
            if let Some(d) = self.breach(event, kind) {
                return d;
            }
            return Disposition::Applied;
        }
        // A sub-agent's prompt (Claude's Task tool) is not the user's.
        let user_message =
            event.kind() == EventType::MessageSent && !event.data_has("parent_tool_use_id");
        if user_message {
            let duplicate = self
                .active
                .get(run_id)
                .is_some_and(|t| t.foreground && t.user_messages >= 1);
            if duplicate {
                if let Some(d) = self.breach(event, ViolationKind::DuplicateUserMessage) {
                    return d;
                }
            }
        }
        // Looked up before inserting: no key is allocated for a turn already active.
        if !hot && !self.active.contains_key(run_id) {
            self.active.insert(
                run_id.to_owned(),
                Turn {
                    foreground: false,
                    user_messages: 0,
                    last_activity_ms: now_ms,
                    cancel_deadline_ms: None,
                    stalled: None,
                    pending_approvals: FastSet::default(),
                },
            );
        }
        let turn = self.active.get_mut(run_id).expect("inserted above");
        if event.kind() == EventType::RunStalled {
            // A stall read back (from a log, or our own): the turn is stalled, and the
            // notice is not activity.
            let silent_ms = event
                .data_value("silent_ms")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            turn.stalled = Some(Stall {
                run_id: run_id.to_owned(),
                silent_ms,
                at_ms: event.timestamp().unix_millis(),
            });
            self.started_ids.insert(run_id.to_owned());
            if self.lifecycle == Lifecycle::Initializing {
                self.lifecycle = Lifecycle::Idle;
            }
            self.recompute();
            return Disposition::Applied;
        }
        turn.last_activity_ms = now_ms;
        turn.stalled = None;
        if let Some(request) = event.data_str("request_id") {
            match event.kind() {
                EventType::ToolApprovalRequested => {
                    turn.pending_approvals.insert(request.to_owned());
                }
                EventType::ToolApprovalGranted | EventType::ToolApprovalDenied => {
                    turn.pending_approvals.remove(request);
                }
                _ => {}
            }
        }
        if user_message {
            turn.user_messages += 1;
        }
        if !hot && !self.started_ids.contains(run_id) {
            self.started_ids.insert(run_id.to_owned());
        }
        if event.kind().is_run_terminal() {
            self.end_turn(run_id, event.kind(), event.id().clone());
        } else {
            if self.lifecycle == Lifecycle::Initializing {
                self.lifecycle = Lifecycle::Idle;
            }
            self.recompute();
            if !hot {
                self.hot.clear();
                self.hot.push_str(run_id);
            }
        }
        Disposition::Applied
    }

    /// Synthetic events to persist and forward (their ids are stable: feeding them back is a
    /// no-op).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.pop_front()
    }

    pub fn poll_violation(&mut self) -> Option<Violation> {
        self.violations.pop_front()
    }

    /// A short text of the state, for the CLI.
    pub fn render(&self) -> String {
        let mut s = format!("lifecycle: {}\n", self.lifecycle);
        let _ = writeln!(
            s,
            "turns: {} finished, {} active{}",
            self.finished.len(),
            self.active.len(),
            match &self.foreground {
                Some(f) => format!(" (foreground {f})"),
                None => String::new(),
            }
        );
        s
    }

    fn apply_session_event(&mut self, kind: EventType) {
        match kind {
            EventType::SessionStarted | EventType::SessionCreated | EventType::SessionResumed
                if self.lifecycle == Lifecycle::Initializing =>
            {
                self.lifecycle = Lifecycle::Idle;
            }
            EventType::SessionFailed => {
                self.errored = true;
                self.recompute();
            }
            EventType::SessionCompleted | EventType::SessionCancelled => {
                self.lifecycle = Lifecycle::Closed;
            }
            _ => {}
        }
    }

    fn end_turn(&mut self, run_id: &str, kind: EventType, terminal_id: EventId) {
        self.hot.clear();
        self.active.remove(run_id);
        self.finished.insert(run_id.to_owned(), terminal_id);
        if self.foreground.as_deref() == Some(run_id) {
            self.foreground = None;
        }
        self.errored = matches!(kind, EventType::RunFailed | EventType::RunTimeout);
        if self.lifecycle == Lifecycle::Initializing {
            self.lifecycle = Lifecycle::Idle;
        }
        self.recompute();
    }

    fn recompute(&mut self) {
        if matches!(self.lifecycle, Lifecycle::Closed | Lifecycle::Initializing) {
            return;
        }
        self.lifecycle = if !self.active.is_empty() {
            Lifecycle::Running
        } else if self.errored {
            Lifecycle::Error
        } else {
            Lifecycle::Idle
        };
    }

    /// Reports a breach and applies the policy: `None` means apply the event anyway.
    fn breach(&mut self, event: &impl EventView, kind: ViolationKind) -> Option<Disposition> {
        match self.config.policy {
            Policy::Warn => {
                self.report(event, kind, true);
                None
            }
            Policy::Drop => {
                self.report(event, kind, false);
                Some(Disposition::Dropped(kind))
            }
            Policy::Fail => {
                self.report(event, kind, false);
                self.errored = true;
                if self.lifecycle != Lifecycle::Closed {
                    self.lifecycle = Lifecycle::Error;
                }
                Some(Disposition::Dropped(kind))
            }
        }
    }

    fn report(&mut self, event: &impl EventView, kind: ViolationKind, applied: bool) {
        self.violations.push_back(Violation {
            kind,
            event_id: event.id().clone(),
            run_id: event.run_id().map(str::to_owned),
            sequence: event.sequence(),
            applied,
        });
    }

    /// Marks `run_id` stalled and emits its `run_stalled` (id derived from the start of the
    /// silence, so each silence gets one notice).
    fn stall(&mut self, run_id: &str, since_ms: i64, now_ms: i64) {
        let silent_ms = now_ms - since_ms;
        if let Some(turn) = self.active.get_mut(run_id) {
            turn.stalled = Some(Stall {
                run_id: run_id.to_owned(),
                silent_ms,
                at_ms: now_ms,
            });
        }
        self.synthetic_count += 1;
        let since = since_ms.to_string();
        let id = EventId::derive(&[&self.config.session_id, run_id, "run_stalled", &since]);
        let data = json!({"silent_ms": silent_ms, "synthetic": true});
        let init = EventInit {
            id: Some(id),
            run_id: Some(run_id.to_owned()),
            data: match data {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            ..EventInit::new(
                EventType::RunStalled,
                self.config.session_id.clone(),
                self.config.provider,
                Timestamp::from_unix_millis(now_ms),
            )
        };
        // Only an empty session id can fail here; the turn is stalled all the same.
        if let Ok(event) = Event::new(init) {
            self.out.push_back(event);
        }
    }

    fn synthesize(&mut self, run_id: &str, kind: EventType, data: Value, now_ms: i64) {
        self.synthetic_count += 1;
        let id = EventId::derive(&[&self.config.session_id, run_id, "synthetic", kind.as_str()]);
        let data = match data {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let init = EventInit {
            id: Some(id.clone()),
            run_id: Some(run_id.to_owned()),
            data,
            ..EventInit::new(
                kind,
                self.config.session_id.clone(),
                self.config.provider,
                Timestamp::from_unix_millis(now_ms),
            )
        };
        match Event::new(init) {
            Ok(event) => {
                self.end_turn(run_id, kind, id);
                self.out.push_back(event);
            }
            // Only an empty session id can fail here; the turn still ends.
            Err(_) => self.end_turn(run_id, kind, id),
        }
    }
}

/// A [`TurnProjector`]'s state, to go on from a snapshot ([`TurnProjector::checkpoint`],
/// [`TurnProjector::restore`]): the turns in progress and what is known of the runs that
/// ended, limited to the runs the caller keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LifecycleCheckpoint {
    pub lifecycle: Lifecycle,
    #[serde(default)]
    pub errored: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreground: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<TurnCheckpoint>,
    /// Ended runs (kept ones) and the id of their terminal event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<(String, EventId)>,
    /// Run ids that started (kept ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<String>,
    pub last_sequence: u64,
    #[serde(default)]
    pub synthetic_count: u64,
}

/// A turn in progress in a [`LifecycleCheckpoint`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnCheckpoint {
    pub run_id: String,
    pub foreground: bool,
    pub user_messages: u32,
    pub last_activity_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_deadline_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled: Option<Stall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<String>,
}

json_struct!(LifecycleCheckpoint {
    lifecycle,
    errored = false,
    foreground,
    active = Vec::new(),
    finished = Vec::new(),
    started = Vec::new(),
    last_sequence,
    synthetic_count = 0,
});
json_struct!(TurnCheckpoint {
    run_id,
    foreground,
    user_messages,
    last_activity_ms,
    cancel_deadline_ms,
    stalled,
    pending_approvals = Vec::new(),
});
json_struct!(Stall {
    run_id,
    silent_ms,
    at_ms
});
json_names!(Lifecycle: [Initializing, Idle, Running, Error, Closed]);

impl TurnProjector {
    /// The state to restore from: every turn in progress, and the ended or started runs
    /// `keep` says (those a later event may still name; a later event of a run left out is
    /// taken for one of a new run).
    pub fn checkpoint(&self, keep: impl Fn(&str) -> bool) -> LifecycleCheckpoint {
        let mut active: Vec<TurnCheckpoint> = self
            .active
            .iter()
            .map(|(run_id, t)| {
                let mut pending_approvals: Vec<String> =
                    t.pending_approvals.iter().cloned().collect();
                sorted::sort_unstable(&mut pending_approvals);
                TurnCheckpoint {
                    run_id: run_id.clone(),
                    foreground: t.foreground,
                    user_messages: t.user_messages,
                    last_activity_ms: t.last_activity_ms,
                    cancel_deadline_ms: t.cancel_deadline_ms,
                    stalled: t.stalled.clone(),
                    pending_approvals,
                }
            })
            .collect();
        sorted::sort_unstable_by(&mut active, |a, b| a.run_id.cmp(&b.run_id));
        let mut finished: Vec<(String, EventId)> = self
            .finished
            .iter()
            .filter(|(r, _)| keep(r))
            .map(|(r, id)| (r.clone(), id.clone()))
            .collect();
        sorted::sort_unstable(&mut finished);
        let mut started: Vec<String> = self
            .started_ids
            .iter()
            .filter(|r| keep(r) || self.active.contains_key(*r))
            .cloned()
            .collect();
        sorted::sort_unstable(&mut started);
        LifecycleCheckpoint {
            lifecycle: self.lifecycle,
            errored: self.errored,
            foreground: self.foreground.clone(),
            active,
            finished,
            started,
            last_sequence: self.last_sequence,
            synthetic_count: self.synthetic_count,
        }
    }

    /// A projector in the state `checkpoint` describes.
    pub fn restore(config: LifecycleConfig, checkpoint: LifecycleCheckpoint) -> TurnProjector {
        let mut p = TurnProjector::new(config);
        p.lifecycle = checkpoint.lifecycle;
        p.errored = checkpoint.errored;
        p.foreground = checkpoint.foreground;
        p.active = checkpoint
            .active
            .into_iter()
            .map(|t| {
                let turn = Turn {
                    foreground: t.foreground,
                    user_messages: t.user_messages,
                    last_activity_ms: t.last_activity_ms,
                    cancel_deadline_ms: t.cancel_deadline_ms,
                    stalled: t.stalled,
                    pending_approvals: t.pending_approvals.into_iter().collect(),
                };
                (t.run_id, turn)
            })
            .collect();
        p.finished = checkpoint.finished.into_iter().collect();
        p.started_ids = checkpoint.started.into_iter().collect();
        p.last_sequence = checkpoint.last_sequence;
        p.synthetic_count = checkpoint.synthetic_count;
        p
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use expect_test::{expect, Expect};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn ev(seq: u64, kind: EventType, run: Option<&str>) -> Event {
        let init = EventInit {
            run_id: run.map(str::to_owned),
            sequence: seq,
            ..EventInit::new(kind, "s1", Provider::Claude, Timestamp::EPOCH)
        };
        Event::new(init).unwrap()
    }

    fn projector() -> TurnProjector {
        TurnProjector::new(LifecycleConfig::new("s1", Provider::Claude))
    }

    /// Runs a script of steps and renders the lifecycle after each one, with synthetic
    /// events (`+`) and violations (`!`).
    fn check(p: &mut TurnProjector, steps: &[Step], expect: Expect) {
        let mut log = String::new();
        for step in steps {
            let label = match step {
                Step::Ev(e, now) => {
                    let d = p.handle_event(e, *now);
                    let run = e.run_id().unwrap_or("-");
                    let dropped = if d == Disposition::Applied {
                        ""
                    } else {
                        " (dropped)"
                    };
                    format!("{} {} {run}{dropped}", e.sequence(), e.kind())
                }
                Step::Start(id, now) => match p.start_foreground(id, *now) {
                    Ok(()) => format!("start {id}"),
                    Err(e) => format!("start {id}: {} ({e})", e.code()),
                },
                Step::Interrupt(now) => format!("interrupt @{now}"),
                Step::Tick(now) => format!("tick @{now}"),
                Step::Connect => "connect".to_owned(),
                Step::Close(now) => format!("close @{now}"),
            };
            match step {
                Step::Interrupt(now) => {
                    p.interrupt(*now);
                }
                Step::Tick(now) => p.handle_timeout(*now),
                Step::Connect => p.mark_connected(),
                Step::Close(now) => p.close(*now),
                _ => {}
            }
            let stalled = match p.stalled() {
                Some(s) => format!(" (stalled {} for {} ms)", s.run_id, s.silent_ms),
                None => String::new(),
            };
            let _ = writeln!(log, "{label} -> {}{stalled}", p.lifecycle());
            while let Some(e) = p.poll_event() {
                let silent = e.data().get("silent_ms").map(|v| format!("silent_ms={v}"));
                let reason = e
                    .data_str("reason")
                    .or(e.data_str("error_message"))
                    .or(silent.as_deref())
                    .unwrap_or("");
                let _ = writeln!(
                    log,
                    "  + {} {} {reason}",
                    e.kind(),
                    e.run_id().unwrap_or("-")
                );
            }
            while let Some(v) = p.poll_violation() {
                let _ = writeln!(
                    log,
                    "  ! {:?} seq {} applied={}",
                    v.kind, v.sequence, v.applied
                );
            }
        }
        expect.assert_eq(&log);
    }

    enum Step {
        Ev(Event, i64),
        Start(&'static str, i64),
        Interrupt(i64),
        Tick(i64),
        Connect,
        Close(i64),
    }
    use EventType::*;
    use Step::*;

    #[wasm_bindgen_test(unsupported = test)]
    fn foreground_turn_runs_from_its_start_and_ends_on_its_terminal() {
        check(
            &mut projector(),
            &[
                Start("t1", 0),
                Connect,
                Start("t1", 0),
                Start("t2", 0),
                Ev(ev(1, RunStarted, Some("t1")), 1),
                Ev(ev(2, MessageSent, Some("t1")), 1),
                Ev(ev(3, RunCompleted, Some("t1")), 2),
                Ev(ev(4, RunFailed, Some("t1")), 3),
                Start("t1", 4),
                Start("t2", 4),
                Ev(ev(5, RunFailed, Some("t2")), 5),
            ],
            expect![[r#"
                start t1: not_connected (the session is not connected (lifecycle initializing)) -> initializing
                connect -> idle
                start t1 -> running
                start t2: foreground_turn_active (a foreground turn is already active (t1)) -> running
                1 run_started t1 -> running
                2 message_sent t1 -> running
                3 run_completed t1 -> idle
                4 run_failed t1 (dropped) -> idle
                  ! StaleTerminal seq 4 applied=false
                start t1: turn_id_used (turn id "t1" was already used) -> idle
                start t2 -> running
                5 run_failed t2 -> error
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn autonomous_turns_run_and_end_by_themselves() {
        check(
            &mut projector(),
            &[
                Ev(ev(1, SessionStarted, None), 0),
                Ev(ev(2, RunStarted, Some("a1")), 0),
                Ev(ev(3, MessageReceived, Some("a1")), 0),
                Ev(ev(4, RunCompleted, Some("a1")), 0),
                Ev(ev(5, MessageReceived, Some("a1")), 0),
                Ev(ev(6, RunStarted, Some("a1")), 0),
            ],
            expect![[r#"
                1 session_started - -> idle
                2 run_started a1 -> running
                3 message_received a1 -> running
                4 run_completed a1 -> idle
                5 message_received a1 -> idle
                  ! EventAfterTerminal seq 5 applied=true
                6 run_started a1 -> idle
                  ! ReusedTurnId seq 6 applied=true
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_unanswered_interrupt_is_cancelled_after_the_grace() {
        let mut p = projector();
        check(
            &mut p,
            &[
                Connect,
                Start("t1", 1_000),
                Interrupt(1_500),
                Tick(3_499),
                Tick(3_500),
                Ev(ev(1, RunCancelled, Some("t1")), 3_600),
            ],
            expect![[r#"
                connect -> idle
                start t1 -> running
                interrupt @1500 -> running
                tick @3499 -> running
                tick @3500 -> idle
                  + run_cancelled t1 interrupt_timeout
                1 run_cancelled t1 (dropped) -> idle
                  ! StaleTerminal seq 1 applied=false
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_silent_autonomous_turn_is_failed_by_the_watchdog() {
        let mut p = projector();
        p.config.autonomous_idle_limit_ms = 1_000;
        check(
            &mut p,
            &[
                Ev(ev(1, RunStarted, Some("a1")), 0),
                Ev(ev(2, MessageStreamed, Some("a1")), 900),
                Tick(1_500),
                Tick(1_900),
                Close(2_000),
            ],
            expect![[r#"
                1 run_started a1 -> running
                2 message_streamed a1 -> running
                tick @1500 -> running
                tick @1900 -> error
                  + run_failed a1 autonomous turn silent for more than 1000 ms
                close @2000 -> closed
            "#]],
        );
        assert_eq!(p.poll_timeout(), None);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_silent_turn_is_stalled_once_until_its_next_event() {
        let mut p = projector();
        p.config.stall_after_ms = 1_000;
        p.config.foreground_idle_limit_ms = 5_000;
        check(
            &mut p,
            &[
                Connect,
                Start("t1", 0),
                Tick(999),
                Tick(1_000),
                Tick(1_500),
                Ev(ev(1, MessageStreamed, Some("t1")), 1_600),
                Tick(2_599),
                Tick(2_700),
                Tick(6_600),
                Start("t2", 7_000),
                Interrupt(7_500),
                Tick(8_499),
                Tick(9_500),
            ],
            expect![[r#"
                connect -> idle
                start t1 -> running
                tick @999 -> running
                tick @1000 -> running (stalled t1 for 1000 ms)
                  + run_stalled t1 silent_ms=1000
                tick @1500 -> running (stalled t1 for 1000 ms)
                1 message_streamed t1 -> running
                tick @2599 -> running
                tick @2700 -> running (stalled t1 for 1100 ms)
                  + run_stalled t1 silent_ms=1100
                tick @6600 -> error
                  + run_failed t1 foreground turn silent for more than 5000 ms
                start t2 -> running
                interrupt @7500 -> running
                tick @8499 -> running
                tick @9500 -> idle
                  + run_cancelled t2 interrupt_timeout
            "#]],
        );
        assert_eq!(p.poll_timeout(), None);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_turn_waiting_for_an_approval_is_not_stalled() {
        let approval = |seq: u64, kind: EventType| {
            let init = EventInit {
                run_id: Some("t1".to_owned()),
                sequence: seq,
                data: json!({"request_id": "r1"}).as_object().cloned().unwrap(),
                ..EventInit::new(kind, "s1", Provider::Claude, Timestamp::EPOCH)
            };
            Event::new(init).unwrap()
        };
        let mut p = projector();
        p.config.stall_after_ms = 1_000;
        check(
            &mut p,
            &[
                Connect,
                Start("t1", 0),
                Ev(approval(1, ToolApprovalRequested), 100),
                Tick(5_000),
                Ev(approval(2, ToolApprovalGranted), 6_000),
                Tick(6_999),
                Tick(7_000),
            ],
            expect![[r#"
                connect -> idle
                start t1 -> running
                1 tool_approval_requested t1 -> running
                tick @5000 -> running
                2 tool_approval_granted t1 -> running
                tick @6999 -> running
                tick @7000 -> running (stalled t1 for 1000 ms)
                  + run_stalled t1 silent_ms=1000
            "#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_stall_read_from_the_log_marks_its_turn_until_the_next_event() {
        let stalled = |seq: u64, run: &str, silent_ms: i64| {
            let init = EventInit {
                run_id: Some(run.to_owned()),
                sequence: seq,
                data: json!({"silent_ms": silent_ms, "synthetic": true})
                    .as_object()
                    .cloned()
                    .unwrap(),
                ..EventInit::new(RunStalled, "s1", Provider::Claude, Timestamp::EPOCH)
            };
            Event::new(init).unwrap()
        };
        check(
            &mut projector(),
            &[
                Ev(ev(1, RunStarted, Some("a1")), 0),
                Ev(stalled(2, "a1", 90_000), 0),
                Ev(ev(3, ToolCallStarted, Some("a1")), 0),
                Ev(stalled(4, "a1", 120_000), 0),
                Ev(ev(5, RunCompleted, Some("a1")), 0),
            ],
            expect![[r#"
                1 run_started a1 -> running
                2 run_stalled a1 -> running (stalled a1 for 90000 ms)
                3 tool_call_started a1 -> running
                4 run_stalled a1 -> running (stalled a1 for 120000 ms)
                5 run_completed a1 -> idle
            "#]],
        );
        // A log read from the middle: the stall is the first thing seen of its turn.
        let mut p = projector();
        p.handle_event(&stalled(7, "b1", 5), 0);
        let got = (p.lifecycle(), p.stalled().map(|s| s.silent_ms));
        assert_eq!(got, (Lifecycle::Running, Some(5)));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn closing_cancels_active_turns_and_synthetic_terminals_fed_back_are_no_ops() {
        let mut p = projector();
        p.mark_connected();
        p.start_foreground("t1", 0).unwrap();
        p.close(10);
        let synthetic = p.poll_event().unwrap();
        assert_eq!(synthetic.kind(), RunCancelled);
        assert_eq!(
            p.handle_event(&synthetic.with_sequence(9), 11),
            Disposition::Applied
        );
        assert_eq!(p.poll_violation(), None);
        assert_eq!(p.lifecycle(), Lifecycle::Closed);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn policies_decide_what_a_breach_does() {
        for (policy, want) in [
            (Policy::Warn, "applied running"),
            (Policy::Drop, "dropped running"),
            (Policy::Fail, "dropped error"),
        ] {
            let mut p = projector();
            p.config.policy = policy;
            p.mark_connected();
            p.start_foreground("t1", 0).unwrap();
            p.handle_event(&ev(1, MessageSent, Some("t1")), 0);
            let d = p.handle_event(&ev(2, MessageSent, Some("t1")), 0);
            let v = p.poll_violation().unwrap();
            assert_eq!(v.kind, ViolationKind::DuplicateUserMessage);
            let got = format!(
                "{} {}",
                if d == Disposition::Applied {
                    "applied"
                } else {
                    "dropped"
                },
                p.lifecycle()
            );
            assert_eq!(got, want, "{policy:?}");
        }
        let mut p = projector();
        p.handle_event(&ev(5, RunStarted, Some("a")), 0);
        p.handle_event(&ev(5, MessageReceived, Some("a")), 0);
        assert_eq!(
            p.poll_violation().unwrap().kind,
            ViolationKind::NonIncreasingSequence
        );
    }

    proptest! {
        /// Whatever the provider sends and whenever the host interrupts, once time passes
        /// every turn has ended exactly once and nothing is left running.
        #[wasm_bindgen_test(unsupported = test)]
        fn every_turn_ends_exactly_once(ops in proptest::collection::vec((0u8..6, 0u8..4), 1..60)) {
            let mut p = projector();
            p.config.autonomous_idle_limit_ms = 5_000;
            p.config.stall_after_ms = 300;
            p.mark_connected();
            let mut now = 0i64;
            let mut seq = 0u64;
            let mut terminals: HashMap<String, u32> = HashMap::new();
            let drain = |p: &mut TurnProjector, terminals: &mut HashMap<String, u32>| {
                while let Some(s) = p.poll_event() {
                    let run = s.run_id().unwrap().to_owned();
                    if s.kind().is_run_terminal() {
                        *terminals.entry(run).or_default() += 1;
                    } else {
                        // A stall notice is for a turn still active, never after its end.
                        assert_eq!(s.kind(), RunStalled);
                        assert!(p.active.contains_key(&run), "stall of ended {run}");
                    }
                }
            };
            for (op, turn) in ops {
                now += 100;
                let run = format!("r{turn}");
                match op {
                    0 => { let _ = p.start_foreground(&run, now); }
                    1 => { p.interrupt(now); }
                    2 => p.handle_timeout(now),
                    _ => {
                        seq += 1;
                        let kind = [MessageStreamed, RunCompleted, RunFailed][usize::from(op - 3)];
                        let e = ev(seq, kind, Some(&run));
                        let was_finished = p.finished.contains_key(&run);
                        let d = p.handle_event(&e, now);
                        if kind.is_run_terminal() {
                            if was_finished {
                                prop_assert_eq!(d, Disposition::Dropped(ViolationKind::StaleTerminal));
                            } else {
                                *terminals.entry(run.clone()).or_default() += 1;
                            }
                        }
                    }
                }
                drain(&mut p, &mut terminals);
            }
            p.interrupt(now);
            p.handle_timeout(now + 10_000);
            drain(&mut p, &mut terminals);
            prop_assert!(p.active.is_empty());
            prop_assert_ne!(p.lifecycle(), Lifecycle::Running);
            prop_assert_eq!(terminals.len(), p.finished.len());
            for (run, n) in &terminals {
                prop_assert_eq!(*n, 1, "run {} ended {} times", run, n);
            }
        }
    }
}
