//! The durable event log: per-session, gap-free sequences behind the [`Store`] trait.
//!
//! Two backends: [`SqliteStore`], embedded, one companion per file (the default), and
//! [`PostgresStore`], a log that several companions share. Semantics both keep (the
//! conformance tests in `tests/store.rs` run the same functions against each):
//!
//! * Sequences are per session, from 1, contiguous, assigned by the store in append order.
//! * Appending an event whose id is already stored returns the stored event with its
//!   sequence and adds nothing ([`Appended::duplicate`]); this holds across sessions, and for
//!   a repeated id inside one batch.
//! * A batch is atomic: all its new events get contiguous sequences, or none is stored.
//! * An append resolves only once its events are durable (committed and synced), and
//!   subscribers ([`Store::subscribe`]) are told of events only once they are durable and
//!   readable; with PostgreSQL, subscribers of every store on the same log are told.
//!   Concurrent appends share one commit (group commit).
//! * [`Store::get_events`] returns events oldest first; `after` and `before` are exclusive
//!   sequence bounds, `since` is an *inclusive* lower bound on the timestamp
//!   (`timestamp >= since`), then `run_id`, `kind`, and `limit`.
//! * [`Store::wait_events`] is the long-poll: it returns at once when a matching event exists,
//!   else waits (woken by commits, never polling in a loop) up to `wait_ms` and returns what
//!   matched, possibly nothing.
//! * Each session names the companion that hosts its agent ([`SessionRecord::node`]).
//!   [`Store::claim_session`] moves a session to a companion atomically, and only a session
//!   that no companion is running, so two companions (or two requests on one) never run the
//!   same session's agent. A live companion renews its lease ([`Store::beat`]); the live
//!   sessions of a node whose lease ran out are taken over by exactly one other
//!   ([`Store::take_over_stale`]), which then ends them as failed.
//! * Projections ([`Store::load_projection`], [`Store::save_projection`],
//!   [`Store::projected_items`]) are derived data kept beside the log so that a session's
//!   snapshot need not replay it from the start (`companion::snapshot`): a checkpoint per
//!   session and the session's *final* timeline items by index, both tagged with the
//!   projection `format` that wrote them. Reading only ever returns rows of the format asked
//!   for; a save replaces the session's checkpoint and the item rows it names, whatever their
//!   format, in one transaction. The store does not interpret either body. A store may keep
//!   none (the default methods: loading finds none, saving is refused): snapshots then
//!   replay the log.
//! * [`Store::epoch`] names this log's incarnation: it stays the same across restarts on the
//!   same file or database and changes only when the log is rebuilt, so a client can tell "resume" from
//!   "reset".

pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::core::event::{Event, EventType};
use crate::core::time::Timestamp;

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The state of a session as recorded in the sessions table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Created; its provider process is starting or not started.
    Starting,
    /// The provider process is up.
    Running,
    /// Closed by the user.
    Closed,
    /// The provider process died, or the server died while it ran.
    Failed,
}

impl SessionState {
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionState::Starting => "starting",
            SessionState::Running => "running",
            SessionState::Closed => "closed",
            SessionState::Failed => "failed",
        }
    }

    /// Whether a companion runs (or is starting) the session's agent.
    pub const fn is_live(self) -> bool {
        matches!(self, SessionState::Starting | SessionState::Running)
    }

    pub fn parse(s: &str) -> Option<SessionState> {
        [Self::Starting, Self::Running, Self::Closed, Self::Failed]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// A row of the sessions table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    /// The provider name (`claude`, `codex`, `demo`, …).
    pub provider: String,
    pub cwd: String,
    pub state: SessionState,
    /// The provider's own session id, used to resume it after a restart.
    pub provider_session_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The companion that hosts (or last hosted) the session's agent: its `serve --node`
    /// name. Only that companion marks the session failed when it restarts.
    #[serde(default)]
    pub node: String,
}

impl SessionRecord {
    /// A session created (and last updated) at `at`, with no provider session id yet.
    pub fn new(
        id: impl Into<String>,
        provider: impl Into<String>,
        cwd: impl Into<String>,
        state: SessionState,
        node: impl Into<String>,
        at: Timestamp,
    ) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            provider: provider.into(),
            cwd: cwd.into(),
            state,
            provider_session_id: None,
            created_at: at,
            updated_at: at,
            node: node.into(),
        }
    }
}

/// A filter over one session's events. All bounds optional; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventQuery {
    /// Only sequences greater than this.
    pub after: Option<u64>,
    /// Only sequences less than this.
    pub before: Option<u64>,
    /// Only timestamps at or after this (inclusive).
    pub since: Option<Timestamp>,
    pub run_id: Option<String>,
    pub kind: Option<EventType>,
    /// At most this many events (the oldest that match).
    pub limit: Option<usize>,
}

/// The outcome of appending one event.
#[derive(Clone, Debug, PartialEq)]
pub struct Appended {
    /// The stored event, with its sequence.
    pub event: Event,
    /// True when the id was already stored: nothing new was written.
    pub duplicate: bool,
}

/// Sent to subscribers after a commit made new events durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub session_id: String,
    /// The session's latest sequence after the commit.
    pub latest_sequence: u64,
}

/// A session's stored projection checkpoint (see the module docs): opaque to the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredProjection {
    /// The projection format that wrote it; rows of another format are never returned.
    pub format: u32,
    /// The last sequence the checkpoint has applied.
    pub after: u64,
    /// How many final items it counts on being stored (indices `0..items`).
    pub items: u64,
    pub body: Vec<u8>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown session {0:?}")]
    UnknownSession(String),
    #[error("session {0:?} already exists")]
    SessionExists(String),
    #[error("event {id} belongs to session {event_session:?}, appended to {session:?}")]
    SessionMismatch {
        id: String,
        event_session: String,
        session: String,
    },
    #[error("the store is closed")]
    Closed,
    #[error("database: {0}")]
    Database(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

/// The durable log. Implementations are cheap to share (`Arc<dyn Store>`).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// This log's incarnation; see the module docs.
    fn epoch(&self) -> &str;

    /// Told of every commit that made events durable (lagging receivers must re-read).
    fn subscribe(&self) -> broadcast::Receiver<Committed>;

    async fn create_session(&self, session: SessionRecord) -> Result<SessionRecord, StoreError>;
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// All sessions, oldest first.
    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        now: Timestamp,
    ) -> Result<(), StoreError>;
    async fn set_provider_session_id(
        &self,
        id: &str,
        provider_session_id: &str,
    ) -> Result<(), StoreError>;
    /// Makes `node` the session's host and its state `starting`, atomically, if no companion
    /// runs it (its state is neither `starting` nor `running`). `Ok(false)`: a companion runs
    /// it (see its `node`), and nothing changed.
    async fn claim_session(&self, id: &str, node: &str, now: Timestamp)
        -> Result<bool, StoreError>;
    /// Renews `node`'s lease: it is alive at `now`.
    async fn beat(&self, node: &str, now: Timestamp) -> Result<(), StoreError>;
    /// Makes `node` the host (state `starting`) of every live session of another node whose
    /// lease was last renewed before `cutoff` (or never), atomically, and returns them as they
    /// are now (hosted by `node`): each is taken by exactly one of the companions that try.
    async fn take_over_stale(
        &self,
        node: &str,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<SessionRecord>, StoreError>;

    /// Appends a batch to one session, atomically and durably; see the module docs. Events
    /// must belong to `session_id`; their own `sequence` is ignored.
    async fn append(
        &self,
        session_id: &str,
        events: Vec<Event>,
    ) -> Result<Vec<Appended>, StoreError>;

    async fn get_events(
        &self,
        session_id: &str,
        query: &EventQuery,
    ) -> Result<Vec<Event>, StoreError>;

    /// The session's highest sequence, 0 when it has no events.
    async fn latest_sequence(&self, session_id: &str) -> Result<u64, StoreError>;

    /// The long-poll: like `get_events`, but waits up to `wait_ms` for a first match.
    async fn wait_events(
        &self,
        session_id: &str,
        query: &EventQuery,
        wait_ms: u64,
    ) -> Result<Vec<Event>, StoreError>;

    /// The session's projection checkpoint of `format`, if one is stored.
    async fn load_projection(
        &self,
        session_id: &str,
        format: u32,
    ) -> Result<Option<StoredProjection>, StoreError> {
        let _ = (session_id, format);
        Ok(None)
    }

    /// In one transaction: stores `items` as the session's final items at indices
    /// `from..from + items.len()` (replacing rows at those indices) and makes `checkpoint`
    /// the session's checkpoint (replacing the one stored). The session must exist.
    async fn save_projection(
        &self,
        session_id: &str,
        from: u64,
        items: Vec<Vec<u8>>,
        checkpoint: StoredProjection,
    ) -> Result<(), StoreError> {
        let _ = (session_id, from, items, checkpoint);
        Err(StoreError::Database(
            "this store keeps no projections".into(),
        ))
    }

    /// The session's final items of `format` at indices `from..to`, in index order; a row
    /// missing in that range (or of another format) is [`StoreError::Corrupt`], so a
    /// caller never mistakes a hole for the session's start.
    async fn projected_items(
        &self,
        session_id: &str,
        format: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let _ = (session_id, format);
        if from < to {
            return Err(StoreError::Corrupt(format!(
                "no projected items are kept (asked for {from}..{to})"
            )));
        }
        Ok(Vec::new())
    }
}

/// What the filters of a stored row (one append's events) need to skip it whole: the range
/// of its timestamps, and its event types and runs, each once, in the order first seen.
#[derive(Default)]
pub(super) struct Summary {
    pub(super) min_ms: i64,
    pub(super) max_ms: i64,
    pub(super) types: Vec<&'static str>,
    pub(super) runs: Vec<String>,
}

impl Summary {
    /// Counts `event` in; `first`: the row's first event.
    pub(super) fn add(&mut self, event: &Event, first: bool) {
        let ms = event.timestamp().unix_millis();
        if first {
            (self.min_ms, self.max_ms) = (ms, ms);
        } else {
            self.min_ms = self.min_ms.min(ms);
            self.max_ms = self.max_ms.max(ms);
        }
        let kind = event.kind().as_str();
        if !self.types.contains(&kind) {
            self.types.push(kind);
        }
        if let Some(run) = event.run_id() {
            if self.runs.last().map(String::as_str) != Some(run)
                && !self.runs.iter().any(|r| r == run)
            {
                self.runs.push(run.to_owned());
            }
        }
    }
}

/// Ids are hashes already: their 128 bits folded to 64 are the hash (both stores' id maps).
#[derive(Clone, Copy, Default)]
pub(super) struct BuildIdHasher;

#[derive(Default)]
pub(super) struct IdHasher(u64);

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = (n as u64) ^ ((n >> 64) as u64).rotate_left(29);
    }
}

/// Decodes a stored body; the row's sequence is authoritative. Never panics.
/// Adds to `events` the events of one stored row (sequences `first..=last`, a line of `body`
/// each) that `query` keeps: in its range, at or after its time, of its type and run, up to
/// its limit. Both stores' reads end here for each row its summary did not rule out.
fn push_row_events(
    events: &mut Vec<Event>,
    session_id: &str,
    query: &EventQuery,
    (first, last): (u64, u64),
    body: &str,
) -> Result<(), StoreError> {
    let after = query.after.unwrap_or(0);
    let before = query.before.unwrap_or(u64::MAX);
    let limit = query.limit.unwrap_or(usize::MAX);
    let since = query.since.map(Timestamp::unix_millis);
    let mut lines = body.split('\n');
    for seq in first..=last {
        if seq >= before || events.len() >= limit {
            break;
        }
        let line = lines.next().ok_or_else(|| {
            StoreError::Corrupt(format!(
                "session {session_id:?} seq {seq}: missing from its row"
            ))
        })?;
        if seq <= after {
            continue;
        }
        let event = decode(session_id, seq as i64, line)?;
        let keep = since.is_none_or(|since| event.timestamp().unix_millis() >= since)
            && query.kind.is_none_or(|k| event.kind() == k)
            && (query.run_id.as_deref()).is_none_or(|r| event.run_id() == Some(r));
        if keep {
            events.push(event);
        }
    }
    Ok(())
}

fn decode(session_id: &str, seq: i64, body: &str) -> Result<Event, StoreError> {
    let corrupt =
        |why: String| StoreError::Corrupt(format!("session {session_id:?} seq {seq}: {why}"));
    // Read by `core::json`, keeping the stored `data` text as it is (no map is built).
    let event = Event::from_written_json(body).map_err(|e| corrupt(e.to_string()))?;
    if event.session_id() != session_id {
        return Err(corrupt(format!(
            "body names session {:?}",
            event.session_id()
        )));
    }
    let seq = u64::try_from(seq).map_err(|_| corrupt("negative sequence".into()))?;
    Ok(event.into_sequenced(seq))
}

/// A stored checkpoint row `(format, after, items, body)`, if it is of `format`; a negative
/// count is [`StoreError::Corrupt`].
fn checkpoint_row(
    session_id: &str,
    format: u32,
    (stored_format, after, items, body): (i64, i64, i64, Vec<u8>),
) -> Result<Option<StoredProjection>, StoreError> {
    if stored_format != i64::from(format) {
        return Ok(None);
    }
    let count = |what: &str, n: i64| {
        u64::try_from(n).map_err(|_| {
            StoreError::Corrupt(format!("session {session_id:?}: projection {what} {n}"))
        })
    };
    Ok(Some(StoredProjection {
        format,
        after: count("after", after)?,
        items: count("items", items)?,
        body,
    }))
}

/// The bodies of a range `from..to` of projected items from rows `(index, body)` in index
/// order, or the first index missing from them (see [`Store::projected_items`]).
fn contiguous_items<E>(
    rows: impl IntoIterator<Item = Result<(i64, Vec<u8>), E>>,
    from: u64,
    to: u64,
) -> Result<Result<Vec<Vec<u8>>, u64>, E> {
    let mut items = Vec::with_capacity((to - from).min(1 << 16) as usize);
    let mut next = from;
    for row in rows {
        let (idx, body) = row?;
        if u64::try_from(idx).ok() != Some(next) {
            return Ok(Err(next));
        }
        items.push(body);
        next += 1;
    }
    Ok(if next < to { Err(next) } else { Ok(items) })
}

/// The error for projected item `missing` of `format` absent from `from..to`.
fn missing_item(session_id: &str, format: u32, missing: u64, from: u64, to: u64) -> StoreError {
    StoreError::Corrupt(format!(
        "session {session_id:?}: projected item {missing} of format {format} is missing \
         (asked for {from}..{to})"
    ))
}

/// A new epoch: 128 random bits as 32 lowercase hex digits.
fn new_epoch() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Database(format!("no randomness for the epoch: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Refuses a batch holding an event of another session: `append`'s precondition, checked
/// before the batch reaches a store's writer.
pub(crate) fn check_batch(session_id: &str, events: &[Event]) -> Result<(), StoreError> {
    match events.iter().find(|e| e.session_id() != session_id) {
        Some(e) => Err(StoreError::SessionMismatch {
            id: e.id().to_string(),
            event_session: e.session_id().to_owned(),
            session: session_id.to_owned(),
        }),
        None => Ok(()),
    }
}
