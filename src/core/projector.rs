//! The client's state without a transport: server frames (or a provider's raw output) in,
//! one compact [`Batch`] of changes per drain out. The wasm package's `Projector` and
//! `Client` are thin shells over this type; `agentwire tail` could be too.
//!
//! Per session the pipeline is the one the companion guarantees end to end:
//! [`Cursor`] (each sequence once, in order, across replays) → [`Dedup`] (by id) →
//! [`TurnProjector`] (lifecycle) → [`Timeline`] (the items a page shows).
//!
//! **Driving rule.** Feed every text frame of the WebSocket, in arrival order, to
//! [`Projector::handle_frame`] (or a transcript's bytes to [`Projector::handle_provider_text`]
//! then [`Projector::handle_eof`]), acting on the returned [`Signal`] (a transport
//! resubscribes on [`Signal::Resubscribe`]). Call [`Projector::drain`] whenever the page should
//! catch up (once per animation frame, not per frame): it costs O(what changed).
//!
//! Invariants:
//! - Replay invariance: however the log is cut into frames, replayed from earlier cursors,
//!   duplicated or interrupted by reconnects, the timeline of a session ends the same as one
//!   uninterrupted pass over its log, and applying every drained batch in order to an empty
//!   list rebuilds [`Projector::timeline`] exactly (a batch with `reset` starts over).
//! - Invalid external input (a malformed frame) is an `Err` and a note, never a panic; the
//!   state it leaves is the state before the frame.
//! - Memory per session is the timeline plus bounded filters: nothing here keeps the frames.

use std::mem;

use serde::Serialize;
use serde_json::Value;

use super::dedup::Dedup;
use super::error::ErrorCode;
use super::event::{Event, Provider};
use super::event_ref::{packed, EventRef, EventView, EventsRef};
use super::hash::FastMap;
use super::json::{
    json_write, json_write_names, json_write_tagged, to_json, to_json_sized, ToJson,
};
use super::lifecycle::{Lifecycle, LifecycleConfig, Stall, TurnProjector, ViolationKind};
use super::normalize::{Config, DiagnosticKind, Format, Normalizer};
use super::snapshot::{Projection, Snapshot};
use super::time::Timestamp;
use super::timeline::{Change, Drained, Item, Timeline};
use super::wire::{
    frame_text, Cursor, DecodeError, MessageParts, ServerMsg, StoreStatus, WireError,
};

/// What the transport should know about a frame it just handed over.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal {
    /// Nothing for the transport (events, heartbeats, pongs, resets…).
    None,
    /// The server's `welcome`: subscriptions may be sent now.
    Welcome {
        epoch: String,
        max_frame: usize,
        heartbeat_ms: u64,
    },
    /// A gap in the session's stream: subscribe again from its cursor.
    Resubscribe { session: String },
    /// Everything stored for the session was delivered; what follows is live.
    CaughtUp { session: String },
    /// The server fell behind and is catching the session up again (a `caught_up` follows).
    Resync { session: String },
    /// The answer to a command.
    Reply {
        id: String,
        result: Result<Value, WireError>,
    },
    /// A protocol error from the server (also noted in the batch).
    Error {
        session: Option<String>,
        error: WireError,
    },
}

/// Something a page (or a transport) should know besides the changes, as data.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum Note {
    /// Everything stored up to `latest` was delivered.
    CaughtUp { latest: u64 },
    /// The server rebuilt its log (`stale_epoch`) or the cursor lay beyond it (`cursor_ahead`):
    /// the session's items were dropped and the log is replayed from the start.
    Reset { epoch: String, reason: String },
    /// The server switched the session back to catch-up from `after` (nothing is skipped).
    Resync { after: u64 },
    /// Sequences were missing; the transport resubscribes from `after`.
    Gap { after: u64, next_received: u64 },
    /// An event broke a lifecycle invariant (it was applied or skipped as `applied` says).
    Violation {
        kind: ViolationKind,
        sequence: u64,
        applied: bool,
    },
    /// A line of a raw transcript that could not be read.
    Diagnostic {
        line: u64,
        kind: DiagnosticKind,
        message: String,
    },
    /// A protocol error, or a frame this client could not read.
    Error { code: String, message: String },
    /// The session's store changed state (`session_status`): `unavailable` while its events
    /// wait on the companion (`unstored` of them), `available` again once they are stored.
    Store(StoreStatus),
}

/// A session's lifecycle as a page shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LifecycleState {
    pub state: Lifecycle,
    /// The turn in progress (the foreground one when there is one), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_turn: Option<String>,
    /// Present while that turn is stalled: a `run_stalled` came and nothing since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled: Option<Stall>,
}

super::json::json_struct!(LifecycleState {
    state,
    active_turn,
    stalled
});

impl LifecycleState {
    /// What `lifecycle` says now: the turn in progress is the foreground one, else the first
    /// active.
    pub fn of(lifecycle: &TurnProjector) -> LifecycleState {
        let active =
            (lifecycle.active_foreground()).or_else(|| lifecycle.active_turns().first().copied());
        LifecycleState {
            state: lifecycle.lifecycle(),
            active_turn: active.map(str::to_owned),
            stalled: lifecycle.stalled().cloned(),
        }
    }
}

/// What changed in one session since the previous drain (`C`: the changes, as `Change`s or,
/// when a drain is written straight to JSON, read from the timeline).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionBatch<C = Vec<Change>> {
    pub session: String,
    /// Drop every item held for this session before applying `changes`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    pub changes: C,
    /// Present when the lifecycle or the active turn changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<LifecycleState>,
    /// The index of the first item held, when it changed: after a snapshot (with `reset`)
    /// or a history page (with `older`). Absent: as before (0 after a plain `reset`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    /// Older items, to put before those held (a history page): they end where the held
    /// items began and begin at `start`. Applied before `changes`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub older: Vec<Item>,
    /// The cursor: the last sequence applied, and its epoch.
    pub after: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

/// One drain: the sessions that changed, in order of first change, and notes that belong to
/// no session (protocol errors).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Batch<S = SessionBatch> {
    pub sessions: Vec<S>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

impl<S> Default for Batch<S> {
    fn default() -> Batch<S> {
        Batch {
            sessions: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl<S> SessionBatch<S> {
    /// The same batch with its changes made by `f` from these.
    fn map_changes<T>(self, f: impl FnOnce(S) -> T) -> SessionBatch<T> {
        SessionBatch {
            session: self.session,
            reset: self.reset,
            changes: f(self.changes),
            lifecycle: self.lifecycle,
            start: self.start,
            older: self.older,
            after: self.after,
            epoch: self.epoch,
            notes: self.notes,
        }
    }
}

/// The changes of a session's drain, written as JSON straight from its timeline (as the
/// `Vec<Change>` they would be is written, without copying each changed item out first).
pub(crate) struct ChangesOf<'a> {
    timeline: &'a Timeline,
    drained: Drained,
}

impl ToJson for ChangesOf<'_> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, change) in self.timeline.changes(&self.drained).enumerate() {
            if i > 0 {
                out.push(',');
            }
            change.write_json(out);
        }
        out.push(']');
    }
}

impl<S> Batch<S> {
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.notes.is_empty()
    }
}

impl Batch {
    /// The batch as JSON: what the wasm package hands the page (what serde's `Serialize`
    /// writes, by `core::json`'s writer).
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

json_write!(Batch<S> { sessions, notes? });
json_write!(SessionBatch<C> {
    session,
    reset?,
    changes,
    lifecycle?,
    start?,
    older?,
    after,
    epoch?,
    notes?,
});
json_write!(LifecycleState {
    state,
    active_turn?,
    stalled?
});
json_write_tagged!(Note: "note" {
    CaughtUp "caught_up" { latest },
    Reset "reset" { epoch, reason },
    Resync "resync" { after },
    Gap "gap" { after, next_received },
    Violation "violation" { kind, sequence, applied },
    Diagnostic "diagnostic" { line, kind, message },
    Error "error" { code, message },
    Store "store" (StoreStatus),
});
json_write_names!(DiagnosticKind);

/// One session's pipeline.
struct Session {
    id: String,
    cursor: Cursor,
    dedup: Dedup,
    lifecycle: TurnProjector,
    timeline: Timeline,
    /// Touched since the last drain (listed in `Projector::touched`).
    touched: bool,
    reset: bool,
    notes: Vec<Note>,
    reported_lifecycle: Option<LifecycleState>,
    reported_after: u64,
    duplicates: u64,
    /// The store's state from the last `session_status` (none yet: available).
    store: StoreStatus,
    /// The first item held moved (a snapshot, a history page) since the last drain.
    start_moved: bool,
    /// History items prepended since the last drain, oldest first.
    older: Vec<Item>,
}

impl Session {
    fn new(id: &str) -> Session {
        Session {
            id: id.to_owned(),
            cursor: Cursor::default(),
            dedup: Dedup::new(),
            lifecycle: TurnProjector::new(LifecycleConfig::new(id, Provider::Generic)),
            timeline: Timeline::new(),
            touched: false,
            reset: false,
            notes: Vec::new(),
            reported_lifecycle: None,
            reported_after: 0,
            duplicates: 0,
            store: StoreStatus::available(0),
            start_moved: false,
            older: Vec::new(),
        }
    }

    /// Forgets everything: the log is replayed from the start of `epoch`.
    fn reset(&mut self, epoch: &str) {
        let fresh = Session::new(&self.id);
        self.dedup = fresh.dedup;
        self.lifecycle = fresh.lifecycle;
        self.timeline = fresh.timeline;
        self.cursor.reset(epoch);
        self.reset = true;
        self.reported_lifecycle = None;
        self.reported_after = 0;
        self.start_moved = false;
        self.older.clear();
    }

    /// Starts over from a snapshot: its items held, its cursor resumed. False (and nothing
    /// changed) when the snapshot does not hold together.
    fn restore(&mut self, snapshot: Snapshot) -> bool {
        let epoch = snapshot.epoch.clone();
        let Some(projection) = Projection::restore(snapshot) else {
            return false;
        };
        let (dedup, lifecycle, timeline, after) = projection.into_parts();
        self.reset(&epoch);
        self.dedup = dedup;
        self.lifecycle = lifecycle;
        self.timeline = timeline;
        self.cursor = Cursor::resume(after, Some(epoch));
        self.start_moved = true;
        true
    }

    /// One event the cursor admitted: dedup, lifecycle, timeline. Returns whether it was new.
    fn apply(&mut self, event: &impl EventView, now_ms: i64) -> bool {
        if !self.dedup.admit(event).is_new() {
            self.duplicates += 1;
            return false;
        }
        self.lifecycle.handle_event(event, now_ms);
        while let Some(v) = self.lifecycle.poll_violation() {
            self.notes.push(Note::Violation {
                kind: v.kind,
                sequence: v.sequence,
                applied: v.applied,
            });
        }
        // Only timeouts, interrupts and closes synthesize events, and a client calls none.
        while self.lifecycle.poll_event().is_some() {}
        // As `agentwire project` does: the timeline sees every event of the log.
        self.timeline.handle_admitted(event);
        true
    }

    fn lifecycle_state(&self) -> LifecycleState {
        LifecycleState::of(&self.lifecycle)
    }

    fn drain(&mut self) -> Option<SessionBatch> {
        let batch = self.take()?;
        let timeline = &self.timeline;
        Some(batch.map_changes(|drained| {
            (timeline.changes(&drained))
                .map(|c| c.to_change())
                .collect()
        }))
    }

    /// What [`Session::drain`] drains, the changes not yet read from the timeline.
    fn take(&mut self) -> Option<SessionBatch<Drained>> {
        self.touched = false;
        let changes = self.timeline.take_changes();
        let now = self.lifecycle_state();
        let lifecycle = (self.reported_lifecycle.as_ref() != Some(&now)).then(|| {
            self.reported_lifecycle = Some(now.clone());
            now
        });
        let moved = self.cursor.after != self.reported_after;
        self.reported_after = self.cursor.after;
        let reset = mem::take(&mut self.reset);
        let notes = mem::take(&mut self.notes);
        let start = mem::take(&mut self.start_moved).then(|| self.timeline.start());
        let older = mem::take(&mut self.older);
        let empty = changes.is_empty()
            && lifecycle.is_none()
            && !moved
            && !reset
            && start.is_none()
            && older.is_empty();
        if empty && notes.is_empty() {
            return None;
        }
        Some(SessionBatch {
            session: self.id.clone(),
            reset,
            changes,
            lifecycle,
            start,
            older,
            after: self.cursor.after,
            epoch: self.cursor.epoch.clone(),
            notes,
        })
    }
}

/// Where events come from.
enum Source {
    /// Server frames (docs/protocol.md).
    Wire,
    /// A provider's raw output, normalized here; the events belong to session 0.
    Transcript(Box<Normalizer>),
}

/// The epoch given to a transcript's events (they come from no server log).
const TRANSCRIPT_EPOCH: &str = "transcript";

/// Client state for any number of sessions. See the module docs for the driving rule.
pub struct Projector {
    source: Source,
    sessions: Vec<Session>,
    index: FastMap<String, usize>,
    /// The session last looked up (a page follows one, or a few): found again without hashing.
    last: usize,
    /// Sessions touched since the last drain, in order of first touch.
    touched: Vec<usize>,
    notes: Vec<Note>,
    /// Admitted events are also kept for [`Projector::take_events`].
    keep_events: bool,
    kept: Vec<Event>,
    /// `message_part`s being reassembled, by session.
    parts: FastMap<String, MessageParts>,
    /// The size to write the next drain's JSON in ([`to_json_sized`]).
    drain_size: usize,
}

impl Default for Projector {
    fn default() -> Projector {
        Projector::new()
    }
}

/// Why a frame could not be handled: the frame was not a server message.
pub type FrameError = DecodeError;

impl Projector {
    /// A projector of server frames.
    pub fn new() -> Projector {
        Projector {
            source: Source::Wire,
            sessions: Vec::new(),
            index: FastMap::default(),
            last: 0,
            touched: Vec::new(),
            notes: Vec::new(),
            keep_events: false,
            kept: Vec::new(),
            parts: FastMap::default(),
            drain_size: 0,
        }
    }

    /// From now on, every event admitted (once, in log order, after dedup) is also kept for
    /// [`Projector::take_events`]: a client that prints the log itself (`agentwire tail`).
    pub fn keep_events(&mut self) {
        self.keep_events = true;
    }

    /// The events admitted since the last call (see [`Projector::keep_events`]).
    pub fn take_events(&mut self) -> Vec<Event> {
        mem::take(&mut self.kept)
    }

    /// Registers a session whose log is read after sequence `after` (a client that starts
    /// there); a session already tracked keeps its cursor.
    pub fn track_after(&mut self, session: &str, after: u64) {
        if !self.index.contains_key(session) {
            let i = self.session_index(session);
            self.sessions[i].cursor = Cursor::resume(after, None);
        }
    }

    /// A projector of one provider transcript (`format: None` detects it), as session
    /// `session`: what `agentwire project` shows, live as the bytes arrive.
    pub fn transcript(format: Option<Format>, session: &str) -> Projector {
        let mut p = Projector::new();
        p.source = Source::Transcript(Box::new(Normalizer::new(format, Config::new(session))));
        p.session_index(session);
        p
    }

    /// Registers a session (a page that follows it before any frame arrives).
    pub fn track(&mut self, session: &str) {
        self.session_index(session);
    }

    /// Handles one server text frame. An `Err` is also noted in the next batch.
    pub fn handle_frame(&mut self, frame: &str, now_ms: i64) -> Result<Signal, FrameError> {
        // Events, the frames that matter, are read borrowed from the frame; every other frame,
        // and any this cannot read (for the error), as a `ServerMsg`.
        if let Some(f) = EventsRef::decode(frame) {
            return Ok(self.accept(&f.session, &f.epoch, f.events, now_ms));
        }
        self.handle_decoded(ServerMsg::decode(frame, usize::MAX), now_ms)
    }

    /// Handles one server frame that came as bytes (a binary WebSocket message, asked for
    /// with the `binary_frames` feature): the same UTF-8 JSON text as a text frame, handled
    /// the same, without the JS string in between.
    pub fn handle_frame_bytes(&mut self, frame: &[u8], now_ms: i64) -> Result<Signal, FrameError> {
        if packed::is_packed(frame) {
            return match packed::unpack(frame) {
                Ok(f) => Ok(self.accept(&f.session, &f.epoch, f.events, now_ms)),
                Err(e) => self.handle_decoded(Err(DecodeError::Malformed(e)), now_ms),
            };
        }
        match frame_text(frame, usize::MAX) {
            Ok(text) => self.handle_frame(text, now_ms),
            Err(e) => self.handle_decoded(Err(e), now_ms),
        }
    }

    fn handle_decoded(
        &mut self,
        decoded: Result<ServerMsg, DecodeError>,
        now_ms: i64,
    ) -> Result<Signal, FrameError> {
        match decoded {
            Ok(msg) => Ok(self.handle_msg(msg, now_ms)),
            Err(e) => {
                self.notes.push(Note::Error {
                    code: e.code().as_str().to_owned(),
                    message: e.to_string(),
                });
                Err(e)
            }
        }
    }

    /// Handles one decoded server message.
    pub fn handle_msg(&mut self, msg: ServerMsg, now_ms: i64) -> Signal {
        match msg {
            ServerMsg::Welcome {
                epoch,
                max_frame,
                heartbeat_ms,
                ..
            } => Signal::Welcome {
                epoch,
                max_frame,
                heartbeat_ms,
            },
            ServerMsg::Events {
                session,
                epoch,
                events,
            } => {
                // Through the same (borrowed) path as the frames `handle_frame` reads.
                let events = events.iter().map(EventRef::of).collect();
                self.accept(&session, &epoch, events, now_ms)
            }
            ServerMsg::EventPart {
                session,
                epoch,
                sequence,
                index,
                last,
                text,
            } => {
                let i = self.session_index(&session);
                match self.sessions[i]
                    .cursor
                    .accept_part(sequence, index, last, text)
                {
                    Ok(None) => Signal::None,
                    Ok(Some(event)) => {
                        self.accept(&session, &epoch, vec![EventRef::of(&event)], now_ms)
                    }
                    Err(e) => {
                        let message = e.to_string();
                        self.note(
                            i,
                            Note::Error {
                                code: "malformed_event".into(),
                                message,
                            },
                        );
                        Signal::Resubscribe { session }
                    }
                }
            }
            ServerMsg::Snapshot(snapshot) => self.handle_snapshot(*snapshot),
            ServerMsg::History {
                id,
                session,
                start,
                items,
            } => self.handle_history(id, &session, start, items),
            ServerMsg::MessagePart {
                session,
                index,
                last,
                text,
            } => {
                let parts = self.parts.entry(session.clone()).or_default();
                match parts.accept(index, last, &text) {
                    Ok(None) => Signal::None,
                    Ok(Some(msg)) => self.handle_msg(msg, now_ms),
                    Err(e) => {
                        let i = self.session_index(&session);
                        let message = e.to_string();
                        self.note(
                            i,
                            Note::Error {
                                code: e.code().as_str().to_owned(),
                                message,
                            },
                        );
                        Signal::None
                    }
                }
            }
            ServerMsg::CaughtUp { session, latest } => {
                let i = self.session_index(&session);
                self.note(i, Note::CaughtUp { latest });
                Signal::CaughtUp { session }
            }
            ServerMsg::Reset {
                session,
                epoch,
                reason,
            } => {
                let i = self.session_index(&session);
                self.sessions[i].reset(&epoch);
                self.note(i, Note::Reset { epoch, reason });
                Signal::None
            }
            ServerMsg::Resync { session, after } => {
                let i = self.session_index(&session);
                self.note(i, Note::Resync { after });
                Signal::Resync { session }
            }
            ServerMsg::SessionStatus { session, store } => {
                let i = self.session_index(&session);
                // Noted when it changes, and each time it is said again while unavailable
                // (more events wait, more attempts failed); every subscription starts with
                // the status, which is "available" again and again.
                let held = mem::replace(&mut self.sessions[i].store, store.clone());
                if held != store && !(held.is_available() && store.is_available()) {
                    self.note(i, Note::Store(store));
                }
                Signal::None
            }
            ServerMsg::Heartbeat { .. } | ServerMsg::Pong { .. } => Signal::None,
            ServerMsg::Reply {
                id,
                ok,
                result,
                error,
            } => {
                let result = if ok {
                    Ok(result.unwrap_or(Value::Null))
                } else {
                    Err(error.unwrap_or_else(|| {
                        WireError::new(
                            ErrorCode::UnknownError,
                            "the server refused without a reason",
                        )
                    }))
                };
                Signal::Reply { id, result }
            }
            ServerMsg::Error { error, session } => {
                let note = Note::Error {
                    code: error.code.clone(),
                    message: error.message.clone(),
                };
                match &session {
                    Some(s) => {
                        let i = self.session_index(s);
                        self.note(i, note);
                    }
                    None => self.notes.push(note),
                }
                Signal::Error { session, error }
            }
        }
    }

    /// A snapshot: the session starts over from it (the next batch has `reset` and `start`).
    /// One that does not hold together is noted, and the session waits for the log from 0
    /// (its next events make a gap, and the transport resubscribes).
    fn handle_snapshot(&mut self, snapshot: Snapshot) -> Signal {
        let i = self.session_index(&snapshot.session);
        self.touch(i);
        let epoch = snapshot.epoch.clone();
        if !self.sessions[i].restore(snapshot) {
            self.sessions[i].reset(&epoch);
            self.note(
                i,
                Note::Error {
                    code: ErrorCode::MalformedFrame.as_str().to_owned(),
                    message: "a snapshot points outside its items".into(),
                },
            );
        }
        Signal::None
    }

    /// A history page: its items go before those held (the next batch has `older` and
    /// `start`); one that does not end where they begin (a page asked twice, or before a
    /// reset) is dropped. Answers the command with `{start, items}`: the first index held
    /// and how many items were added.
    fn handle_history(
        &mut self,
        id: String,
        session: &str,
        start: usize,
        items: Vec<Item>,
    ) -> Signal {
        let i = self.session_index(session);
        let s = &mut self.sessions[i];
        let added = items.len();
        let added = if s.timeline.prepend(start, items.clone()) {
            let mut older = items;
            older.append(&mut s.older);
            s.older = older;
            s.start_moved = true;
            self.touch(i);
            added
        } else {
            0
        };
        let s = &self.sessions[i];
        Signal::Reply {
            id,
            result: Ok(serde_json::json!({ "start": s.timeline.start(), "items": added })),
        }
    }

    /// The index of the first item held for `session` (0 unless it started from a snapshot
    /// and has not paged back to the beginning): the `before` of the next history page.
    pub fn start(&self, session: &str) -> usize {
        self.timeline(session).map_or(0, Timeline::start)
    }

    /// Feeds a piece of a provider's raw output (any chunking) to a transcript projector.
    /// On a projector of server frames it is an error (`not_a_transcript`).
    pub fn handle_provider_text(&mut self, text: &str, now_ms: i64) -> Result<(), WireError> {
        self.handle_provider_bytes(text.as_bytes(), now_ms)
    }

    /// [`Projector::handle_provider_text`] for bytes (a piece may end inside a character).
    pub fn handle_provider_bytes(&mut self, bytes: &[u8], now_ms: i64) -> Result<(), WireError> {
        let Source::Transcript(n) = &mut self.source else {
            return Err(not_a_transcript());
        };
        n.handle_bytes(bytes, Timestamp::from_unix_millis(now_ms));
        self.pump_transcript(now_ms);
        Ok(())
    }

    /// The end of a transcript: a last line without a newline is read now.
    pub fn handle_eof(&mut self, now_ms: i64) -> Result<(), WireError> {
        let Source::Transcript(n) = &mut self.source else {
            return Err(not_a_transcript());
        };
        n.handle_eof(Timestamp::from_unix_millis(now_ms));
        self.pump_transcript(now_ms);
        Ok(())
    }

    /// True for a transcript projector.
    pub fn is_transcript(&self) -> bool {
        matches!(self.source, Source::Transcript(_))
    }

    fn pump_transcript(&mut self, now_ms: i64) {
        let Source::Transcript(n) = &mut self.source else {
            return;
        };
        let events: Vec<Event> = std::iter::from_fn(|| n.poll_event()).collect();
        let diagnostics: Vec<_> = std::iter::from_fn(|| n.poll_diagnostic()).collect();
        let session = self.sessions[0].id.clone();
        for d in diagnostics {
            self.note(
                0,
                Note::Diagnostic {
                    line: d.line,
                    kind: d.kind,
                    message: d.message,
                },
            );
        }
        if !events.is_empty() {
            self.accept(&session, TRANSCRIPT_EPOCH, events, now_ms);
        }
    }

    /// The changes since the previous drain. O(what changed).
    pub fn drain(&mut self) -> Batch {
        let mut sessions = Vec::with_capacity(self.touched.len());
        for i in self.touched.drain(..) {
            sessions.extend(self.sessions[i].drain());
        }
        Batch {
            sessions,
            notes: mem::take(&mut self.notes),
        }
    }

    /// [`Projector::drain`] as JSON, `drain().to_json()` byte for byte, written from the
    /// timelines without copying each changed item into the batch first.
    pub fn drain_json(&mut self) -> String {
        let mut size = self.drain_size;
        let json = self.drain_borrowed(|batch| to_json_sized(&batch, &mut size));
        self.drain_size = size;
        json
    }

    /// [`Projector::drain`], its changes borrowed from the timelines, for `f` to write.
    pub(crate) fn drain_borrowed<R>(
        &mut self,
        f: impl FnOnce(Batch<SessionBatch<ChangesOf<'_>>>) -> R,
    ) -> R {
        let mut taken = Vec::with_capacity(self.touched.len());
        for i in self.touched.drain(..) {
            taken.extend(self.sessions[i].take().map(|batch| (i, batch)));
        }
        let notes = mem::take(&mut self.notes);
        // A loop, not `collect`: its in-place specialization is 0.9 KB of wasm.
        let mut sessions = Vec::with_capacity(taken.len());
        for (i, batch) in taken {
            let timeline = &self.sessions[i].timeline;
            sessions.push(batch.map_changes(|drained| ChangesOf { timeline, drained }));
        }
        f(Batch { sessions, notes })
    }

    /// The sessions known, in order of first appearance.
    pub fn sessions(&self) -> impl Iterator<Item = &str> + '_ {
        self.sessions.iter().map(|s| s.id.as_str())
    }

    pub fn cursor(&self, session: &str) -> Option<&Cursor> {
        self.session(session).map(|s| &s.cursor)
    }

    pub fn lifecycle(&self, session: &str) -> Option<LifecycleState> {
        self.session(session).map(Session::lifecycle_state)
    }

    pub fn timeline(&self, session: &str) -> Option<&Timeline> {
        self.session(session).map(|s| &s.timeline)
    }

    /// The session's items now (for a page that mounts late).
    pub fn items(&self, session: &str) -> &[Item] {
        self.timeline(session).map_or(&[], Timeline::items)
    }

    /// The session's store as the last `session_status` said (available until one says
    /// otherwise).
    pub fn store(&self, session: &str) -> Option<&StoreStatus> {
        self.session(session).map(|s| &s.store)
    }

    /// Events dropped by the dedup after the cursor admitted them (same id, other sequence).
    pub fn duplicates(&self, session: &str) -> u64 {
        self.session(session).map_or(0, |s| s.duplicates)
    }

    fn session(&self, session: &str) -> Option<&Session> {
        self.index.get(session).map(|&i| &self.sessions[i])
    }

    fn session_index(&mut self, session: &str) -> usize {
        if self
            .sessions
            .get(self.last)
            .is_some_and(|s| s.id == session)
        {
            return self.last;
        }
        let i = match self.index.get(session) {
            Some(&i) => i,
            None => {
                let i = self.sessions.len();
                self.sessions.push(Session::new(session));
                self.index.insert(session.to_owned(), i);
                i
            }
        };
        self.last = i;
        i
    }

    fn touch(&mut self, i: usize) {
        if !self.sessions[i].touched {
            self.sessions[i].touched = true;
            self.touched.push(i);
        }
    }

    fn note(&mut self, i: usize, note: Note) {
        self.sessions[i].notes.push(note);
        self.touch(i);
    }

    fn accept<E: EventView>(
        &mut self,
        session: &str,
        epoch: &str,
        events: Vec<E>,
        now_ms: i64,
    ) -> Signal {
        let i = self.session_index(session);
        self.touch(i);
        let s = &mut self.sessions[i];
        let accepted = s.cursor.accept(epoch, events);
        for event in accepted.events {
            if s.apply(&event, now_ms) && self.keep_events {
                self.kept.push(event.into_event());
            }
        }
        match accepted.gap {
            Some(gap) => {
                s.notes.push(Note::Gap {
                    after: gap.after,
                    next_received: gap.next_received,
                });
                Signal::Resubscribe {
                    session: session.to_owned(),
                }
            }
            None => Signal::None,
        }
    }
}

fn not_a_transcript() -> WireError {
    WireError::new(
        ErrorCode::NotATranscript,
        "this projector reads server frames; make one with Projector.transcript() for raw lines",
    )
}

#[cfg(test)]
mod tests;
