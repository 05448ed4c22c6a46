//! The embedded store: one SQLite file in WAL mode, written by one thread with group commit.
//!
//! Shape, as invariants:
//!
//! * Only the writer thread writes. It owns the one write connection and the per-session
//!   sequence cache, takes requests over a bounded channel, and commits everything pending
//!   in ONE transaction (one fsync, `synchronous=FULL`), whatever sessions they are for (group
//!   commit across sessions). Each request other than an append runs inside its own
//!   SAVEPOINT, so a refused request (duplicate session, …) is rolled back alone and never
//!   poisons the others in its group; an append is refused (unknown session) before it writes
//!   anything, and one that fails after writing (an I/O error) fails its whole group, which
//!   its callers retry (appends are idempotent by id).
//! * An append costs three prepared statements per new event: a probe of the cold id table
//!   and an insert into the hot one (the id's 128 bits, a 16-byte key; a stored id is found
//!   in either and its event read back), then the event into the events table,
//!   keyed by (session, sequence) with no rowid. The id index is two levels (schema 6): ids
//!   are hashes, so a group's inserts land on random leaves and every leaf a commit touches
//!   is written whole to the WAL; the hot table stays small (tens of thousands of ids, a few
//!   hundred pages whatever the log's size), and once it holds
//!   [`SqliteOptions::merge_ids_at`] ids (more with a large log: `merge_threshold`) the
//!   writer merges it into the cold table in id order, in a transaction of its own, right
//!   after the group that filled it committed (that group is answered after the merge). An
//!   id is always in exactly one of the two tables, so idempotence holds across the merge, a
//!   restart, or a crash halfway through one. A Bloom filter of the cold ids, in memory
//!   (2.5–5 bytes per id: built on open, given each merge's ids after its commit), lets a new
//!   id skip the cold probe; it has no false negatives, so it only ever saves a probe.
//!   Filters by run, type or time scan the session's rows in sequence order. The appending
//!   task encodes the bodies (and the copies the recent tail keeps), not the writer; what a
//!   group leaves to free (events evicted from the recent tail, bound bodies) is freed on a
//!   dropper thread. New files have 16 KiB pages.
//! * Checkpoints run on a thread and connection of their own (PASSIVE: they never block the
//!   writer), woken every `CHECKPOINT_BYTES` of committed bodies; only if the WAL outgrew
//!   `WAL_HARD_PAGES` all the same does the writer checkpoint between two groups.
//! * A request is answered only after its group's COMMIT returned; [`Committed`] is broadcast
//!   only after the answers. So whoever hears of a commit can read its events.
//! * Reads never touch the writer: a small pool of WAL reader connections runs them through
//!   `spawn_blocking`. WAL readers see the last commit that finished before they started.
//! * The sequence cache is only advanced after a COMMIT succeeded; a failed group drops the
//!   entries of the sessions it appended to, which are then re-read from the file (a failed
//!   COMMIT may still have made its frames durable).
//! * Projections (schema 5) are two more tables: `projections`, one checkpoint row per session,
//!   and `projected_items`, keyed by (session, index) with no rowid. A save is a request like
//!   the others that are not appends: in its own SAVEPOINT inside the group's transaction (so
//!   under the group's one fsync, and never half-written), the checkpoint then its items, one
//!   prepared upsert each. Reads run on the reader pool, one query per range.
//! * One `SqliteStore` per file: the sequence cache assumes no other process appends.
//!
//! Dropping the store closes the request channel; the writer commits what is still queued
//! (including appends whose callers gave up waiting), then the drop joins it. So a dropped
//! store has released the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::{
    checkpoint_row, contiguous_items, decode, missing_item, new_epoch, Appended, Committed,
    EventQuery, SessionRecord, SessionState, Store, StoreError, StoredProjection,
};
use crate::core::event::Event;
use crate::core::time::Timestamp;

/// The schema, one step per version: step `i` takes `user_version` from `i` to `i + 1`.
/// Steps are only ever appended; a released step is never edited.
const MIGRATIONS: &[&str] = &[
    // 1: the log.
    "CREATE TABLE meta (
         key   TEXT PRIMARY KEY NOT NULL,
         value TEXT NOT NULL
     ) STRICT;
     CREATE TABLE sessions (
         id                  TEXT PRIMARY KEY NOT NULL,
         provider            TEXT NOT NULL,
         cwd                 TEXT NOT NULL,
         state               TEXT NOT NULL,
         provider_session_id TEXT,
         created_at          INTEGER NOT NULL,
         updated_at          INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE events (
         session_id   TEXT NOT NULL REFERENCES sessions(id),
         seq          INTEGER NOT NULL CHECK (seq >= 1),
         id           TEXT NOT NULL UNIQUE,
         run_id       TEXT,
         type         TEXT NOT NULL,
         timestamp_ms INTEGER NOT NULL,
         body         TEXT NOT NULL,
         PRIMARY KEY (session_id, seq)
     ) STRICT;
     CREATE INDEX events_by_run  ON events (session_id, run_id, seq);
     CREATE INDEX events_by_type ON events (session_id, type, seq);
     CREATE INDEX events_by_time ON events (session_id, timestamp_ms);",
    // 2: the companion that hosts each session.
    "ALTER TABLE sessions ADD COLUMN node TEXT NOT NULL DEFAULT '';",
    // 3: each companion's lease.
    "CREATE TABLE nodes (
         name    TEXT PRIMARY KEY NOT NULL,
         seen_at INTEGER NOT NULL
     ) STRICT;",
    // 4: two b-trees per event instead of six: the (session, sequence) key is the table's own
    // (no rowid), the id is the only index; run, type and time filters scan the session's
    // rows in sequence order.
    "CREATE TABLE events_v4 (
         session_id   TEXT NOT NULL REFERENCES sessions(id),
         seq          INTEGER NOT NULL CHECK (seq >= 1),
         id           TEXT NOT NULL,
         run_id       TEXT,
         type         TEXT NOT NULL,
         timestamp_ms INTEGER NOT NULL,
         body         TEXT NOT NULL,
         PRIMARY KEY (session_id, seq)
     ) STRICT, WITHOUT ROWID;
     INSERT INTO events_v4 (session_id, seq, id, run_id, type, timestamp_ms, body)
         SELECT session_id, seq, id, run_id, type, timestamp_ms, body FROM events
         ORDER BY session_id, seq;
     DROP TABLE events;
     ALTER TABLE events_v4 RENAME TO events;
     CREATE UNIQUE INDEX events_by_id ON events (id);",
    // 5: projections, derived data beside the log (see the module docs of `store`): each
    // session's checkpoint, and its final timeline items keyed by (session, index).
    "CREATE TABLE projections (
         session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id),
         format     INTEGER NOT NULL,
         after      INTEGER NOT NULL CHECK (after >= 0),
         items      INTEGER NOT NULL CHECK (items >= 0),
         body       BLOB NOT NULL
     ) STRICT;
     CREATE TABLE projected_items (
         session_id TEXT NOT NULL REFERENCES sessions(id),
         idx        INTEGER NOT NULL CHECK (idx >= 0),
         format     INTEGER NOT NULL,
         body       BLOB NOT NULL,
         PRIMARY KEY (session_id, idx)
     ) STRICT, WITHOUT ROWID;",
    // 6: the id index in two levels, keyed by the id's 128 bits (16 bytes, big-endian): new
    // ids go to the small `ids_hot`, which the writer merges into `ids_cold` in id order, in
    // one transaction, once it holds enough (see `Writer::merge_ids`). An id is in exactly
    // one of them, with the (session, sequence) that stored it; `events.id` stays as the
    // text the index was built from, without an index of its own.
    "CREATE TABLE ids_cold (
         id         BLOB PRIMARY KEY NOT NULL CHECK (length(id) = 16),
         session_id TEXT NOT NULL,
         seq        INTEGER NOT NULL
     ) STRICT, WITHOUT ROWID;
     CREATE TABLE ids_hot (
         id         BLOB PRIMARY KEY NOT NULL CHECK (length(id) = 16),
         session_id TEXT NOT NULL,
         seq        INTEGER NOT NULL
     ) STRICT, WITHOUT ROWID;
     INSERT INTO ids_cold (id, session_id, seq)
         SELECT unhex(substr(id, 5)), session_id, seq FROM events ORDER BY 1;
     INSERT INTO meta (key, value) SELECT 'ids_cold', CAST(count(*) AS TEXT) FROM ids_cold;
     DROP INDEX events_by_id;",
];

/// Requests waiting for the writer before `append` callers wait for room.
const QUEUE: usize = 1024;
/// At most this many requests share one transaction.
const MAX_GROUP: usize = 1024;
/// Read connections kept open.
const READERS: usize = 4;
/// Room in the [`Committed`] broadcast before slow receivers lag (and must re-read).
const BROADCAST: usize = 1024;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of event bodies committed between two wake-ups of the checkpointer (about as many
/// WAL pages again are index and interior pages).
const CHECKPOINT_BYTES: usize = 16 << 20;
/// WAL pages beyond which the writer checkpoints itself (the checkpointer never caught up
/// with the log: readers held it, or it failed), so the WAL stays bounded.
const WAL_HARD_PAGES: i64 = 65_536;
/// Bytes per page of a new file (SQLite's default is 4096).
const PAGE_SIZE: i64 = 16_384;
/// The writer's page cache, in KiB (a negative `cache_size`).
const WRITER_CACHE_KIB: i64 = -65_536;
/// Ids the hot id table holds, at least, before the writer merges it into the cold one.
const MERGE_IDS_AT: u64 = 65_536;

/// How a [`SqliteStore`] is opened; [`SqliteStore::open`] takes the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// The hot id table is merged into the cold one once it holds this many ids, or more
    /// with a large log (`merge_threshold`). Small values cross merges quickly (tests).
    pub merge_ids_at: u64,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            merge_ids_at: MERGE_IDS_AT,
        }
    }
}

/// The hot table's size at which it is merged, with `cold` ids in the cold table:
/// `max(at, sqrt(cold * at) / 4)`, at the default `at` `sqrt(cold * 4096)`. Every commit
/// rewrites the hot leaves it touches (nearly all of them: ids are hashes), every merge
/// rewrites every cold leaf, so per event the hot table costs about `hot / group` and the
/// merge `cold / hot`: least at `hot = sqrt(cold * group)`, with groups of ~4,096 events
/// under load. The hot table grows with the square root of the log, never below `at`.
fn merge_threshold(at: u64, cold: u64) -> u64 {
    at.max(cold.saturating_mul(at).isqrt() / 4)
}

/// The embedded SQLite store. See the module docs for its shape; share it as `Arc<dyn Store>`.
pub struct SqliteStore {
    epoch: String,
    /// `None` only while dropping.
    requests: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    checkpointer: Option<JoinHandle<()>>,
    dropper: Option<JoinHandle<()>>,
    readers: Arc<Readers>,
    recent: Arc<RecentTail>,
    committed: broadcast::Sender<Committed>,
    commits: Arc<AtomicU64>,
}

/// Events kept in memory per session, newest last.
const RECENT: usize = 512;

/// The latest committed events of each session, in memory. Followers woken by a commit read
/// the tail from here instead of each querying SQLite: with a hundred subscribers on one
/// session, one commit would otherwise cost a hundred reads. Only the writer adds to it, after
/// COMMIT and before subscribers are told, in commit order, so each session's entries are a
/// contiguous run of its log; a read it cannot answer whole goes to SQLite.
#[derive(Default)]
struct RecentTail {
    sessions: std::sync::Mutex<HashMap<String, std::collections::VecDeque<Event>>>,
}

impl RecentTail {
    /// Adds the session's newest events; returns those it no longer keeps (for the caller to
    /// drop outside the lock).
    fn extend(&self, session_id: &str, events: Vec<Event>) -> Vec<Event> {
        let mut sessions = self.sessions.lock().expect("recent tail lock");
        let tail = sessions.entry(session_id.to_owned()).or_default();
        tail.extend(events);
        let excess = tail.len().saturating_sub(RECENT);
        tail.drain(..excess).collect()
    }

    /// The events after `after` (at most `limit`), if memory holds the next one.
    fn read(&self, session_id: &str, query: &EventQuery) -> Option<Vec<Event>> {
        let plain = query.before.is_none()
            && query.since.is_none()
            && query.run_id.is_none()
            && query.kind.is_none();
        let after = query.after.filter(|_| plain)?;
        let sessions = self.sessions.lock().expect("recent tail lock");
        let tail = sessions.get(session_id)?;
        let first = tail.front()?.sequence();
        // `after >= last` first: a cursor of u64::MAX must not overflow `after + 1`.
        if after >= tail.back()?.sequence() || after + 1 < first {
            return None;
        }
        let skip = (after + 1 - first) as usize;
        let take = query.limit.unwrap_or(usize::MAX);
        Some(tail.iter().skip(skip).take(take).cloned().collect())
    }
}

impl SqliteStore {
    /// The `PRAGMA user_version` this build migrates to.
    pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

    /// Opens (creating if absent) the store at `path`, migrates it and starts the writer.
    ///
    /// Synchronous: it does file I/O and may run migrations, so call it at startup or inside
    /// `spawn_blocking`. It needs no runtime; the store's async methods need a tokio runtime.
    /// A file whose schema is newer than this build is refused.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// [`SqliteStore::open`] with `options`.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        make_private(path)?;
        let mut conn = Connection::open(path)?;
        // Only a new (empty) file takes it: a split moves fewer cells per event stored. An
        // existing file keeps its page size.
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Database(format!(
                "cannot use WAL mode (journal_mode is {mode})"
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // A group of thousands of events must not spill pages to the WAL before COMMIT, nor
        // re-read index pages from the file; savepoint journals stay in memory.
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Checkpoints run on the checkpointer's own thread and connection.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(32);
        let epoch = migrate(&mut conn)?;
        let ids = IdIndex::read(&conn, options.merge_ids_at.max(1))?;

        let (trash, bins) = std::sync::mpsc::channel::<Trash>();
        let dropper = std::thread::Builder::new()
            .name("agentwire-store-dropper".into())
            .spawn(move || bins.into_iter().for_each(drop))
            .map_err(|e| StoreError::Database(format!("cannot start the dropper: {e}")))?;
        let wal_pages = Arc::new(AtomicI64::new(0));
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let checkpointer = Checkpointer {
            conn: Connection::open(path)?,
            woken,
            wal_pages: wal_pages.clone(),
        };
        checkpointer
            .conn
            .pragma_update(None, "synchronous", "FULL")?;
        checkpointer.conn.busy_timeout(BUSY_TIMEOUT)?;
        let checkpointer = std::thread::Builder::new()
            .name("agentwire-store-checkpointer".into())
            .spawn(move || checkpointer.run())
            .map_err(|e| StoreError::Database(format!("cannot start the checkpointer: {e}")))?;

        let (requests, rx) = mpsc::channel(QUEUE);
        let (committed, _) = broadcast::channel(BROADCAST);
        let commits = Arc::new(AtomicU64::new(0));
        let recent = Arc::new(RecentTail::default());
        let writer = Writer {
            conn,
            latest: HashMap::new(),
            recent: recent.clone(),
            committed: committed.clone(),
            commits: commits.clone(),
            wake,
            unchecked_bytes: 0,
            wal_pages,
            trash,
            ids,
        };
        let writer = std::thread::Builder::new()
            .name("agentwire-store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Database(format!("cannot start the writer: {e}")))?;
        Ok(SqliteStore {
            epoch,
            requests: Some(requests),
            writer: Some(writer),
            checkpointer: Some(checkpointer),
            dropper: Some(dropper),
            readers: Arc::new(Readers::new(path.to_owned())),
            recent,
            committed,
            commits,
        })
    }

    /// How many write transactions the writer has committed. Under concurrent appends this
    /// stays below the number of appends: that is group commit.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Hands `op` to the writer and waits for its answer, which comes after the commit.
    /// If the caller stops waiting, the request still commits.
    async fn submit(&self, op: Op) -> Result<Done, StoreError> {
        let (reply, answer) = oneshot::channel();
        let requests = self.requests.as_ref().ok_or(StoreError::Closed)?;
        requests
            .send(Request { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer drain what is queued and exit.
        self.requests.take();
        if let Some(writer) = self.writer.take() {
            // A panicked writer has already failed its requests; nothing more to report.
            let _ = writer.join();
        }
        // The writer's end closed the checkpointer's channel.
        if let Some(checkpointer) = self.checkpointer.take() {
            let _ = checkpointer.join();
        }
        if let Some(dropper) = self.dropper.take() {
            let _ = dropper.join();
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.readers.path)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Database(e.to_string())
    }
}

/// Brings the schema to [`SqliteStore::SCHEMA_VERSION`] in one transaction and returns the
/// epoch, drawing it when the log is new.
fn migrate(conn: &mut Connection) -> Result<String, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SqliteStore::SCHEMA_VERSION {
        return Err(StoreError::Database(format!(
            "schema version {version} is newer than this build's {}",
            SqliteStore::SCHEMA_VERSION
        )));
    }
    for step in &MIGRATIONS[version as usize..] {
        tx.execute_batch(step)?;
    }
    tx.pragma_update(None, "user_version", SqliteStore::SCHEMA_VERSION)?;
    let existing: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| {
            r.get(0)
        })
        .optional()?;
    let epoch = match existing {
        Some(epoch) => epoch,
        None => {
            let epoch = new_epoch()?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('epoch', ?1)",
                [&epoch],
            )?;
            epoch
        }
    };
    tx.commit()?;
    Ok(epoch)
}

// ---------------------------------------------------------------------------------------------
// The writer.

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Done, StoreError>>,
}

enum Op {
    Append {
        session_id: String,
        rows: Vec<Row>,
    },
    CreateSession(SessionRecord),
    SetState {
        id: String,
        state: SessionState,
        now: Timestamp,
    },
    SetProviderSessionId {
        id: String,
        provider_session_id: String,
    },
    Claim {
        id: String,
        node: String,
        now: Timestamp,
    },
    Beat {
        node: String,
        now: Timestamp,
    },
    TakeOver {
        node: String,
        cutoff: Timestamp,
        now: Timestamp,
    },
    SaveProjection {
        session_id: String,
        from: u64,
        items: Vec<Vec<u8>>,
        checkpoint: StoredProjection,
    },
}

/// An event made ready for the writer by the appending task: its body encoded (with sequence
/// 0: the row's sequence is authoritative) and the copy the recent tail keeps, so the writer
/// only numbers and inserts.
struct Row {
    event: Event,
    /// The id's 128 bits: the key that finds a repeated id inside the batch.
    key: u128,
    body: String,
    copy: Event,
}

impl Row {
    fn new(event: Event) -> Row {
        let event = event.into_sequenced(0);
        Row {
            key: event.id().bits(),
            body: event.to_json(),
            copy: event.clone(),
            event,
        }
    }
}

enum Done {
    Appended(Vec<Appended>),
    Session(SessionRecord),
    Claimed(bool),
    TakenOver(Vec<SessionRecord>),
    Unit,
}

struct Writer {
    conn: Connection,
    /// Committed latest sequence per known session. Sessions are never deleted, so an entry
    /// also means "this session exists".
    latest: HashMap<String, u64>,
    recent: Arc<RecentTail>,
    committed: broadcast::Sender<Committed>,
    commits: Arc<AtomicU64>,
    /// Wakes the checkpointer (a full channel means it is already awake).
    wake: std::sync::mpsc::SyncSender<()>,
    /// Body bytes committed since the checkpointer was last woken.
    unchecked_bytes: usize,
    /// The WAL's size in pages, as the checkpointer last saw it.
    wal_pages: Arc<AtomicI64>,
    /// To the dropper thread: what a group leaves to free (evicted tail events, bodies).
    trash: std::sync::mpsc::Sender<Trash>,
    ids: IdIndex,
}

/// What the writer knows of the two id tables (schema 6): how many ids each holds, as
/// committed, and when to merge the hot one into the cold one.
struct IdIndex {
    /// Ids in `ids_hot` (counted on open, then counted by the writer).
    hot: u64,
    /// Ids in `ids_cold`, as the last merge recorded in `meta` (only sizes the hot table).
    cold: u64,
    /// [`SqliteOptions::merge_ids_at`].
    merge_at: u64,
    /// After a failed merge, the next is tried only once the hot table holds this many.
    retry_at: u64,
    /// Every id of `ids_cold` (and maybe others): a new id skips the cold probe.
    filter: ColdFilter,
}

/// A Bloom filter of the cold table's ids, in memory (10 bits per id of its capacity, which
/// is twice the cold ids when built, rounded up to a power of two: under 1 % false
/// positives): built from the table on open, given each merge's ids after it committed, and
/// rebuilt larger once the table outgrew it. It has no false negatives, so an id it does not
/// hold is not in `ids_cold`: the append skips that probe (a b-tree of the whole log).
struct ColdFilter {
    bits: Vec<u64>,
    /// Ids it was sized for; past them it is rebuilt.
    capacity: u64,
}

impl ColdFilter {
    const HASHES: u64 = 7;

    fn new(capacity: u64) -> ColdFilter {
        let capacity = capacity.max(1 << 16);
        let words = (capacity * 10).div_ceil(64).next_power_of_two();
        ColdFilter {
            bits: vec![0; words as usize],
            capacity,
        }
    }

    /// Every id of `ids_cold`, in a filter with room for twice as many.
    fn read(conn: &Connection, cold: u64) -> Result<ColdFilter, StoreError> {
        let mut filter = ColdFilter::new(cold.saturating_mul(2));
        let mut stmt = conn.prepare("SELECT id FROM ids_cold")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let id = row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?;
            let bits: [u8; 16] = id.try_into().map_err(|_| {
                StoreError::Corrupt(format!("an id of {} bytes in ids_cold", id.len()))
            })?;
            filter.insert(u128::from_be_bytes(bits));
        }
        Ok(filter)
    }

    /// The bit positions of `key` among `len` bits, a power of two (ids are hashes already;
    /// mixed so both halves count).
    fn positions(len: usize, key: u128) -> impl Iterator<Item = usize> {
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        let h1 = (lo ^ hi.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let h2 = hi.wrapping_mul(0xc2b2_ae3d_27d4_eb4f) | 1;
        let mask = len as u64 - 1;
        (0..Self::HASHES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) & mask) as usize)
    }

    fn insert(&mut self, key: u128) {
        for bit in Self::positions(self.bits.len() * 64, key) {
            self.bits[bit / 64] |= 1 << (bit % 64);
        }
    }

    fn may_hold(&self, key: u128) -> bool {
        Self::positions(self.bits.len() * 64, key)
            .all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

impl IdIndex {
    fn read(conn: &Connection, merge_at: u64) -> Result<IdIndex, StoreError> {
        let hot: i64 = conn.query_row("SELECT count(*) FROM ids_hot", [], |r| r.get(0))?;
        let cold: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'ids_cold'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let cold = cold.and_then(|c| c.parse().ok()).unwrap_or(0);
        Ok(IdIndex {
            hot: hot as u64,
            cold,
            merge_at,
            retry_at: 0,
            filter: ColdFilter::read(conn, cold)?,
        })
    }

    fn due(&self) -> bool {
        self.hot >= merge_threshold(self.merge_at, self.cold).max(self.retry_at)
    }
}

/// Freed on the dropper thread.
type Trash = (Vec<Event>, Vec<String>);

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
        }
    }

    /// Runs a group in one transaction, then answers each request, then tells subscribers.
    fn commit_group(&mut self, group: Vec<Request>) {
        let (ops, replies): (Vec<Op>, Vec<_>) = group.into_iter().map(|r| (r.op, r.reply)).unzip();
        // Sessions this group appends to: if it fails, their cached sequences are re-read.
        let appending: Vec<String> = (ops.iter())
            .filter_map(|op| match op {
                Op::Append { session_id, .. } => Some(session_id.clone()),
                _ => None,
            })
            .collect();
        // Latest sequences written by this group, merged into the cache after COMMIT.
        let mut pending: HashMap<String, u64> = HashMap::new();
        let mut touched: Vec<String> = Vec::new();
        // Events this group stored, per session in commit order, for the recent tail.
        let mut fresh: Vec<(String, Vec<Event>)> = Vec::new();
        let mut bytes = 0;
        let mut new_ids = 0;
        let mut spent: Vec<String> = Vec::new();
        let latest = &self.latest;
        let cold_filter = &self.ids.filter;
        let outcome = (|| -> Result<Vec<Result<Done, StoreError>>, StoreError> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut results = Vec::with_capacity(ops.len());
            for op in ops {
                // An append is refused (unknown session) before it writes, so it needs no
                // savepoint, and copying every page it touches into one would cost more than
                // the inserts; an append that fails after writing fails the whole group.
                let guarded = !matches!(op, Op::Append { .. });
                if guarded {
                    tx.execute_batch("SAVEPOINT request")?;
                }
                let mut step = Step {
                    conn: &tx,
                    latest,
                    pending: &pending,
                    writes: Vec::new(),
                    wrote: false,
                    tail: Vec::new(),
                    bytes: 0,
                    spent: Vec::new(),
                    new_ids: 0,
                    cold_filter,
                };
                let result = step.apply(op);
                let (writes, wrote, tail) = (step.writes, step.wrote, step.tail);
                bytes += step.bytes;
                new_ids += step.new_ids;
                spent.extend(step.spent);
                match result {
                    Ok(done) => {
                        if guarded {
                            tx.execute_batch("RELEASE request")?;
                        }
                        if let (false, Some((session, _))) = (tail.is_empty(), writes.first()) {
                            fresh.push((session.clone(), tail));
                        }
                        for (session, seq) in writes {
                            let new_events = match pending.get(&session).or(latest.get(&session)) {
                                Some(&before) => seq > before,
                                None => seq > 0,
                            };
                            if new_events && !touched.contains(&session) {
                                touched.push(session.clone());
                            }
                            pending.insert(session, seq);
                        }
                        results.push(Ok(done));
                    }
                    Err(e) if guarded => {
                        // Rolls back to the savepoint and releases it; an error aborts the group.
                        tx.execute_batch("ROLLBACK TO request; RELEASE request")?;
                        results.push(Err(e));
                    }
                    Err(e) if !wrote => results.push(Err(e)),
                    Err(e) => return Err(e),
                }
            }
            tx.commit()?;
            Ok(results)
        })();
        match outcome {
            Ok(results) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.latest
                    .extend(pending.iter().map(|(k, v)| (k.clone(), *v)));
                let mut evicted = Vec::new();
                for (session_id, events) in fresh {
                    evicted.extend(self.recent.extend(&session_id, events));
                }
                // Freeing ten thousand events is the dropper's work, not the writer's.
                let _ = self.trash.send((evicted, spent));
                // The group that filled the hot id table is answered after its merge.
                self.ids.hot += new_ids;
                if self.ids.due() {
                    self.merge_ids();
                }
                for (reply, result) in replies.into_iter().zip(results) {
                    // A caller that stopped waiting still had its request committed.
                    let _ = reply.send(result);
                }
                for session_id in touched {
                    let latest_sequence = self.latest[&session_id];
                    let _ = self.committed.send(Committed {
                        session_id,
                        latest_sequence,
                    });
                }
                self.after_commit(bytes);
            }
            Err(e) => {
                // The transaction rolled back (dropping it does), so the cache should still
                // be right; but a failed COMMIT (disk full, I/O error) may have left its
                // frames durable all the same: the sessions it appended to are re-read from
                // the file on their next append, and the callers' retries are then found
                // stored (idempotence by id) instead of colliding with a stale sequence.
                for session_id in &appending {
                    self.latest.remove(session_id);
                }
                let message = match e {
                    StoreError::Database(message) => message,
                    other => other.to_string(),
                };
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Database(message.clone())));
                }
            }
        }
    }
}

impl Writer {
    /// Wakes the checkpointer every `CHECKPOINT_BYTES`; checkpoints here only if the WAL grew
    /// past `WAL_HARD_PAGES` all the same.
    fn after_commit(&mut self, bytes: usize) {
        self.unchecked_bytes += bytes;
        if self.unchecked_bytes >= CHECKPOINT_BYTES {
            self.unchecked_bytes = 0;
            let _ = self.wake.try_send(());
        }
        if self.wal_pages.load(Ordering::Relaxed) > WAL_HARD_PAGES {
            // RESTART: the next commit writes the WAL from its start again. A failure (busy,
            // disk full) leaves the WAL as it was; the next commit tries again.
            let log = self
                .conn
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                });
            if let Ok((0, _)) = log {
                self.wal_pages.store(0, Ordering::Relaxed);
            }
        }
    }
}

impl Writer {
    /// Moves every id of the hot table into the cold one, in id order (the hot table's key
    /// order: each cold leaf is written once), in a transaction of its own: a failure or a
    /// crash halfway leaves both tables as they were, and an id is never in neither.
    /// A failed merge is tried again once the hot table has grown by `merge_at`.
    fn merge_ids(&mut self) {
        let cold = self.ids.cold;
        let merged = (|| -> Result<(u64, Vec<u128>), StoreError> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // For the filter, once the merge committed.
            let mut moving: Vec<u128> = Vec::with_capacity(self.ids.hot as usize);
            {
                let mut stmt = tx.prepare("SELECT id FROM ids_hot")?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    let id: Vec<u8> = row.get(0)?;
                    let bits: [u8; 16] = id.as_slice().try_into().map_err(|_| {
                        StoreError::Corrupt(format!("an id of {} bytes in ids_hot", id.len()))
                    })?;
                    moving.push(u128::from_be_bytes(bits));
                }
            }
            // An id is in one table only (the append probes the cold one before adding it
            // to the hot one); if ever in both, the cold row, the older, stays. `OR IGNORE`,
            // not `ON CONFLICT DO NOTHING`: a statement that cannot abort needs no statement
            // journal (a copy of every cold page it touches). Every hot row passed the same
            // constraints, so none is ignored for another reason.
            let moved = tx.execute(
                "INSERT OR IGNORE INTO ids_cold (id, session_id, seq)
                 SELECT id, session_id, seq FROM ids_hot ORDER BY id",
                [],
            )?;
            tx.execute("DELETE FROM ids_hot", [])?;
            let cold = cold + moved as u64;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('ids_cold', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [cold.to_string()],
            )?;
            tx.commit()?;
            Ok((cold, moving))
        })();
        match merged {
            Ok((cold, moving)) => {
                if cold > self.ids.filter.capacity {
                    match ColdFilter::read(&self.conn, cold) {
                        Ok(filter) => self.ids.filter = filter,
                        // Too full, but it still holds every cold id.
                        Err(_) => moving.into_iter().for_each(|k| self.ids.filter.insert(k)),
                    }
                } else {
                    moving.into_iter().for_each(|k| self.ids.filter.insert(k));
                }
                self.ids.cold = cold;
                self.ids.hot = 0;
                self.ids.retry_at = 0;
                // The merge rewrote the cold leaves: a checkpoint's worth of WAL.
                let _ = self.wake.try_send(());
            }
            // Disk full, I/O error: both tables are as they were, and still probed.
            Err(_) => self.ids.retry_at = self.ids.hot + self.ids.merge_at,
        }
    }
}

/// Copies the WAL back into the database file on its own thread and connection, so commits
/// do not wait for it. Woken by the writer; a PASSIVE checkpoint never blocks the writer or
/// the readers, and once it has copied the whole WAL the writer's next transaction starts the
/// WAL over.
struct Checkpointer {
    conn: Connection,
    woken: std::sync::mpsc::Receiver<()>,
    wal_pages: Arc<AtomicI64>,
}

impl Checkpointer {
    fn run(self) {
        while self.woken.recv().is_ok() {
            // Commits made while it copies are copied by the next round.
            for _ in 0..4 {
                let done = self
                    .conn
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                    });
                match done {
                    Ok((log, copied)) => {
                        self.wal_pages.store(log, Ordering::Relaxed);
                        if copied >= log {
                            break;
                        }
                    }
                    // Disk full, I/O error: the writer's hard limit takes over.
                    Err(_) => break,
                }
            }
        }
    }
}

/// One request inside the group's transaction.
struct Step<'a> {
    conn: &'a Connection,
    latest: &'a HashMap<String, u64>,
    pending: &'a HashMap<String, u64>,
    /// Sessions this request moved (or established), with their latest sequence after it.
    writes: Vec<(String, u64)>,
    /// Whether an append tried to write (after which its failure cannot be undone alone).
    wrote: bool,
    /// The events an append stored, for the recent tail.
    tail: Vec<Event>,
    /// Body bytes a request wrote (events, projections).
    bytes: usize,
    /// The bodies it bound, freed by the dropper.
    spent: Vec<String>,
    /// Ids it added to the hot id table.
    new_ids: u64,
    /// Holds every id of the cold table.
    cold_filter: &'a ColdFilter,
}

impl Step<'_> {
    fn apply(&mut self, op: Op) -> Result<Done, StoreError> {
        match op {
            Op::Append { session_id, rows } => self.append(session_id, rows).map(Done::Appended),
            Op::CreateSession(record) => self.create_session(record).map(Done::Session),
            Op::SetState { id, state, now } => {
                let n = self.conn.execute(
                    "UPDATE sessions SET state = ?2, updated_at = ?3 WHERE id = ?1",
                    params![id, state.as_str(), now.unix_millis()],
                )?;
                if n == 0 {
                    return Err(StoreError::UnknownSession(id));
                }
                Ok(Done::Unit)
            }
            Op::SetProviderSessionId {
                id,
                provider_session_id,
            } => {
                let n = self.conn.execute(
                    "UPDATE sessions SET provider_session_id = ?2 WHERE id = ?1",
                    params![id, provider_session_id],
                )?;
                if n == 0 {
                    return Err(StoreError::UnknownSession(id));
                }
                Ok(Done::Unit)
            }
            Op::Claim { id, node, now } => {
                let n = self.conn.execute(
                    "UPDATE sessions SET node = ?2, state = 'starting', updated_at = ?3
                     WHERE id = ?1 AND state NOT IN ('starting', 'running')",
                    params![id, node, now.unix_millis()],
                )?;
                if n == 0 && !session_exists(self.conn, &id)? {
                    return Err(StoreError::UnknownSession(id));
                }
                Ok(Done::Claimed(n == 1))
            }
            Op::Beat { node, now } => {
                self.conn.execute(
                    "INSERT INTO nodes (name, seen_at) VALUES (?1, ?2)
                     ON CONFLICT (name) DO UPDATE SET seen_at = max(seen_at, excluded.seen_at)",
                    params![node, now.unix_millis()],
                )?;
                Ok(Done::Unit)
            }
            Op::TakeOver { node, cutoff, now } => {
                let sql = format!(
                    "UPDATE sessions SET node = ?1, state = 'starting', updated_at = ?3
                     WHERE state IN ('starting', 'running') AND node != ?1
                       AND coalesce((SELECT seen_at FROM nodes WHERE name = sessions.node), 0)
                           < ?2
                     RETURNING {SESSION_COLUMNS}"
                );
                let mut stmt = self.conn.prepare_cached(&sql)?;
                let rows = stmt.query_map(
                    params![node, cutoff.unix_millis(), now.unix_millis()],
                    session_row,
                )?;
                let taken = rows
                    .map(|row| session_state(row?))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                Ok(Done::TakenOver(taken))
            }
            Op::SaveProjection {
                session_id,
                from,
                items,
                checkpoint,
            } => self
                .save_projection(session_id, from, items, checkpoint)
                .map(|()| Done::Unit),
        }
    }

    /// The checkpoint, then the items, inside the request's savepoint: a failure halfway
    /// rolls back both.
    fn save_projection(
        &mut self,
        session_id: String,
        from: u64,
        items: Vec<Vec<u8>>,
        checkpoint: StoredProjection,
    ) -> Result<(), StoreError> {
        if !self.latest.contains_key(&session_id)
            && !self.pending.contains_key(&session_id)
            && !session_exists(self.conn, &session_id)?
        {
            return Err(StoreError::UnknownSession(session_id));
        }
        let (after, count, first) = (
            sql_int("after", checkpoint.after)?,
            sql_int("items", checkpoint.items)?,
            sql_int("from", from)?,
        );
        // The last index must fit too.
        sql_int("from + items", from.saturating_add(items.len() as u64))?;
        self.conn
            .prepare_cached(
                "INSERT INTO projections (session_id, format, after, items, body)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_id) DO UPDATE SET format = excluded.format,
                     after = excluded.after, items = excluded.items, body = excluded.body",
            )?
            .execute(params![
                session_id,
                checkpoint.format,
                after,
                count,
                checkpoint.body
            ])?;
        self.bytes += checkpoint.body.len();
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO projected_items (session_id, idx, format, body) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (session_id, idx) DO UPDATE
             SET format = excluded.format, body = excluded.body",
        )?;
        for (i, body) in items.iter().enumerate() {
            insert.execute(params![
                session_id,
                first + i as i64,
                checkpoint.format,
                body
            ])?;
            self.bytes += body.len();
        }
        Ok(())
    }

    /// The session's latest sequence as this transaction sees it; `UnknownSession` if absent.
    fn latest_of(&self, session_id: &str) -> Result<u64, StoreError> {
        if let Some(&seq) = self.pending.get(session_id).or(self.latest.get(session_id)) {
            return Ok(seq);
        }
        let (exists, max): (bool, Option<i64>) = self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1),
                    (SELECT max(seq) FROM events WHERE session_id = ?1)",
            [session_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if !exists {
            return Err(StoreError::UnknownSession(session_id.to_owned()));
        }
        Ok(max.unwrap_or(0) as u64)
    }

    fn append(&mut self, session_id: String, rows: Vec<Row>) -> Result<Vec<Appended>, StoreError> {
        let mut seq = self.latest_of(&session_id)?;
        let mut out: Vec<Appended> = Vec::with_capacity(rows.len());
        // Id (its 128 bits, taken on the appending task) -> index in `out` of its first
        // occurrence in this batch: no copy of the id, no hashing of its text, per event.
        let mut seen: HashMap<u128, usize> = HashMap::with_capacity(rows.len());
        // Three statements per new event: a probe of the cold id table, the id added to the
        // hot one unless it holds it (the insert's own probe), then the event. A stored id is
        // read back from its row. (One `INSERT … SELECT … WHERE NOT EXISTS` for the first two
        // would be a statement that may write several rows: SQLite then copies every page
        // it touches into a statement journal, and the writer's CPU per event doubled.)
        let mut cold = self
            .conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM ids_cold WHERE id = ?1)")?;
        let mut claim = self.conn.prepare_cached(
            "INSERT INTO ids_hot (id, session_id, seq) VALUES (?1, ?2, ?3)
             ON CONFLICT (id) DO NOTHING",
        )?;
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO events (session_id, seq, id, run_id, type, timestamp_ms, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for Row {
            event,
            key,
            body,
            copy,
        } in rows
        {
            if let Some(&first) = seen.get(&key) {
                out.push(Appended {
                    event: out[first].event.clone(),
                    duplicate: true,
                });
                continue;
            }
            seen.insert(key, out.len());
            self.wrote = true;
            let bits = key.to_be_bytes();
            let in_cold = self.cold_filter.may_hold(key)
                && cold.query_row([&bits[..]], |r| r.get::<_, bool>(0))?;
            let stored =
                in_cold || claim.execute(params![&bits[..], session_id, (seq + 1) as i64])? == 0;
            if stored {
                out.push(Appended {
                    event: stored_event(self.conn, event.id().as_str(), &bits)?,
                    duplicate: true,
                });
                continue;
            }
            self.new_ids += 1;
            insert.execute(params![
                session_id,
                (seq + 1) as i64,
                event.id().as_str(),
                event.run_id(),
                event.kind().as_str(),
                event.timestamp().unix_millis(),
                body,
            ])?;
            seq += 1;
            self.bytes += body.len();
            self.spent.push(body);
            self.tail.push(copy.into_sequenced(seq));
            out.push(Appended {
                event: event.into_sequenced(seq),
                duplicate: false,
            });
        }
        self.writes.push((session_id, seq));
        Ok(out)
    }

    fn create_session(&mut self, record: SessionRecord) -> Result<SessionRecord, StoreError> {
        let exists: bool = self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
            [&record.id],
            |r| r.get(0),
        )?;
        if exists {
            return Err(StoreError::SessionExists(record.id));
        }
        self.conn.execute(
            "INSERT INTO sessions
                 (id, provider, cwd, state, provider_session_id, created_at, updated_at, node)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                record.id,
                record.provider,
                record.cwd,
                record.state.as_str(),
                record.provider_session_id,
                record.created_at.unix_millis(),
                record.updated_at.unix_millis(),
                record.node,
            ],
        )?;
        self.writes.push((record.id.clone(), 0));
        Ok(record)
    }
}

// ---------------------------------------------------------------------------------------------
// The readers.

struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Readers {
    fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(READERS)),
        }
    }

    /// Runs `f` on an idle read connection (opening one if none is idle) on the blocking pool.
    async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let permit: OwnedSemaphorePermit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let idle = this.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let conn = match idle {
                Some(conn) => conn,
                None => this.open()?,
            };
            let result = f(&conn);
            this.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Database(format!("read task failed: {e}")))?
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open(&self.path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "query_only", "ON")?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(conn)
    }
}

/// The log holds every prompt and every output: its file is created 0600 (an existing one is
/// narrowed to 0600), so SQLite creates `-wal` and `-shm` with the same mode; those left by an
/// earlier run are narrowed too.
fn make_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let io = |e: std::io::Error| StoreError::Database(format!("{}: {e}", path.display()));
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let files: Vec<std::path::PathBuf> = ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            name.into()
        })
        .collect();
    // A log (or a link to one) someone else planted, in a shared directory, would stay
    // readable by them: refused before anything is opened.
    for file in &files {
        let link = std::fs::symlink_metadata(file).ok().map(|m| m.uid());
        let target = std::fs::metadata(file).ok().map(|m| m.uid());
        if link.into_iter().chain(target).any(|uid| uid != me) {
            return Err(StoreError::Database(format!(
                "{} belongs to another user: refusing to keep the log there",
                file.display()
            )));
        }
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    for file in &files {
        if let Ok(meta) = std::fs::metadata(file) {
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))
                    .map_err(io)?;
            }
        }
    }
    Ok(())
}

/// A count or index as SQLite's INTEGER holds it; past `i64::MAX` is refused.
fn sql_int(what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Database(format!("{what} {n} is too large to store")))
}

fn read_projection(
    conn: &Connection,
    session_id: &str,
    format: u32,
) -> Result<Option<StoredProjection>, StoreError> {
    let row: Option<(i64, i64, i64, Vec<u8>)> = conn
        .prepare_cached("SELECT format, after, items, body FROM projections WHERE session_id = ?1")?
        .query_row([session_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    row.map_or(Ok(None), |row| checkpoint_row(session_id, format, row))
}

/// One query for the range; the first index missing from it (absent, or of another format)
/// is `Corrupt`, or `UnknownSession` if the session is.
fn read_projected_items(
    conn: &Connection,
    session_id: &str,
    format: u32,
    from: u64,
    to: u64,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT idx, body FROM projected_items
         WHERE session_id = ?1 AND idx >= ?2 AND idx < ?3 AND format = ?4
         ORDER BY idx",
    )?;
    let rows = stmt.query_map(params![session_id, clamp(from), clamp(to), format], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    match contiguous_items(rows, from, to)? {
        Ok(items) => Ok(items),
        Err(_) if !session_exists(conn, session_id)? => {
            Err(StoreError::UnknownSession(session_id.to_owned()))
        }
        Err(missing) => Err(missing_item(session_id, format, missing, from, to)),
    }
}

/// The stored event of an id that either id table holds (`bits`: its 16 bytes).
fn stored_event(conn: &Connection, id: &str, bits: &[u8; 16]) -> Result<Event, StoreError> {
    let row: Option<(String, i64, String)> = conn
        .prepare_cached(
            "SELECT session_id, seq, body FROM events WHERE (session_id, seq) = (
                 SELECT session_id, seq FROM ids_hot WHERE id = ?1
                 UNION ALL SELECT session_id, seq FROM ids_cold WHERE id = ?1
                 LIMIT 1)",
        )?
        .query_row([&bits[..]], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (session_id, seq, body) = row.ok_or_else(|| {
        StoreError::Corrupt(format!("id {id} is indexed but its event is not stored"))
    })?;
    decode(&session_id, seq, &body)
}

fn session_exists(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
        [id],
        |r| r.get(0),
    )?)
}

const SESSION_COLUMNS: &str =
    "id, provider, cwd, state, provider_session_id, created_at, updated_at, node";

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(SessionRecord, String)> {
    let state: String = r.get(3)?;
    Ok((
        SessionRecord {
            id: r.get(0)?,
            provider: r.get(1)?,
            cwd: r.get(2)?,
            // Checked by `session_state` once the row is out of rusqlite's hands.
            state: SessionState::Starting,
            provider_session_id: r.get(4)?,
            created_at: Timestamp::from_unix_millis(r.get(5)?),
            updated_at: Timestamp::from_unix_millis(r.get(6)?),
            node: r.get(7)?,
        },
        state,
    ))
}

fn session_state(
    (mut record, state): (SessionRecord, String),
) -> Result<SessionRecord, StoreError> {
    record.state = SessionState::parse(&state).ok_or_else(|| {
        StoreError::Corrupt(format!("session {:?}: unknown state {state:?}", record.id))
    })?;
    Ok(record)
}

/// One query for the whole filter; see the module docs of `store` for the semantics.
fn read_events(
    conn: &Connection,
    session_id: &str,
    query: &EventQuery,
) -> Result<Vec<Event>, StoreError> {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut sql = String::from("SELECT seq, body FROM events WHERE session_id = ?1");
    let mut args: Vec<SqlValue> = vec![SqlValue::Text(session_id.to_owned())];
    let mut bind = |sql: &mut String, clause: &str, value: SqlValue| {
        args.push(value);
        sql.push_str(&format!(" AND {clause} ?{}", args.len()));
    };
    if let Some(after) = query.after {
        bind(&mut sql, "seq >", SqlValue::Integer(clamp(after)));
    }
    if let Some(before) = query.before {
        bind(&mut sql, "seq <", SqlValue::Integer(clamp(before)));
    }
    if let Some(since) = query.since {
        bind(
            &mut sql,
            "timestamp_ms >=",
            SqlValue::Integer(since.unix_millis()),
        );
    }
    if let Some(run_id) = &query.run_id {
        bind(&mut sql, "run_id =", SqlValue::Text(run_id.clone()));
    }
    if let Some(kind) = query.kind {
        bind(&mut sql, "type =", SqlValue::Text(kind.as_str().to_owned()));
    }
    sql.push_str(" ORDER BY seq");
    if let Some(limit) = query.limit {
        args.push(SqlValue::Integer(clamp(limit as u64)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
    let mut events = Vec::new();
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let body: rusqlite::types::ValueRef<'_> = row.get_ref(1)?;
        let body = body.as_str().map_err(|_| {
            StoreError::Corrupt(format!(
                "session {session_id:?} seq {seq}: body is not text"
            ))
        })?;
        events.push(decode(session_id, seq, body)?);
    }
    if events.is_empty() && !session_exists(conn, session_id)? {
        return Err(StoreError::UnknownSession(session_id.to_owned()));
    }
    Ok(events)
}

#[async_trait]
impl Store for SqliteStore {
    fn epoch(&self) -> &str {
        &self.epoch
    }

    fn subscribe(&self) -> broadcast::Receiver<Committed> {
        self.committed.subscribe()
    }

    async fn create_session(&self, session: SessionRecord) -> Result<SessionRecord, StoreError> {
        match self.submit(Op::CreateSession(session)).await? {
            Done::Session(record) => Ok(record),
            _ => unreachable!("the writer answers CreateSession with Session"),
        }
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_owned();
        self.readers
            .run(move |conn| {
                let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
                let row = conn
                    .prepare_cached(&sql)?
                    .query_row([&id], session_row)
                    .optional()?;
                row.map(session_state).transpose()
            })
            .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.readers
            .run(|conn| {
                let sql =
                    format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, rowid");
                let mut stmt = conn.prepare_cached(&sql)?;
                let rows = stmt.query_map([], session_row)?;
                rows.map(|row| session_state(row?)).collect()
            })
            .await
    }

    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let op = Op::SetState {
            id: id.to_owned(),
            state,
            now,
        };
        self.submit(op).await.map(|_| ())
    }

    async fn set_provider_session_id(
        &self,
        id: &str,
        provider_session_id: &str,
    ) -> Result<(), StoreError> {
        let op = Op::SetProviderSessionId {
            id: id.to_owned(),
            provider_session_id: provider_session_id.to_owned(),
        };
        self.submit(op).await.map(|_| ())
    }

    async fn claim_session(
        &self,
        id: &str,
        node: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let op = Op::Claim {
            id: id.to_owned(),
            node: node.to_owned(),
            now,
        };
        match self.submit(op).await? {
            Done::Claimed(claimed) => Ok(claimed),
            _ => unreachable!("a claim is answered with Claimed"),
        }
    }

    async fn beat(&self, node: &str, now: Timestamp) -> Result<(), StoreError> {
        let op = Op::Beat {
            node: node.to_owned(),
            now,
        };
        self.submit(op).await.map(|_| ())
    }

    async fn take_over_stale(
        &self,
        node: &str,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let op = Op::TakeOver {
            node: node.to_owned(),
            cutoff,
            now,
        };
        match self.submit(op).await? {
            Done::TakenOver(taken) => Ok(taken),
            _ => unreachable!("a take-over is answered with TakenOver"),
        }
    }

    async fn append(
        &self,
        session_id: &str,
        events: Vec<Event>,
    ) -> Result<Vec<Appended>, StoreError> {
        super::check_batch(session_id, &events)?;
        // Encoded here, on the appending task, not on the writer.
        let op = Op::Append {
            session_id: session_id.to_owned(),
            rows: events.into_iter().map(Row::new).collect(),
        };
        match self.submit(op).await? {
            Done::Appended(appended) => Ok(appended),
            _ => unreachable!("the writer answers Append with Appended"),
        }
    }

    async fn get_events(
        &self,
        session_id: &str,
        query: &EventQuery,
    ) -> Result<Vec<Event>, StoreError> {
        if let Some(events) = self.recent.read(session_id, query) {
            return Ok(events);
        }
        let (session_id, query) = (session_id.to_owned(), query.clone());
        self.readers
            .run(move |conn| read_events(conn, &session_id, &query))
            .await
    }

    async fn latest_sequence(&self, session_id: &str) -> Result<u64, StoreError> {
        let session_id = session_id.to_owned();
        self.readers
            .run(move |conn| {
                let (exists, max): (bool, Option<i64>) = conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1),
                                (SELECT max(seq) FROM events WHERE session_id = ?1)",
                    )?
                    .query_row([&session_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
                if !exists {
                    return Err(StoreError::UnknownSession(session_id));
                }
                Ok(max.unwrap_or(0) as u64)
            })
            .await
    }

    async fn wait_events(
        &self,
        session_id: &str,
        query: &EventQuery,
        wait_ms: u64,
    ) -> Result<Vec<Event>, StoreError> {
        // Subscribe before the first read: a commit after the read is then always heard.
        let mut commits = self.committed.subscribe();
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(Duration::from_millis(wait_ms))
            .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400));
        let after = query.after.unwrap_or(0);
        loop {
            let events = self.get_events(session_id, query).await?;
            if !events.is_empty() {
                return Ok(events);
            }
            // Wait for a commit that could change the answer.
            loop {
                match tokio::time::timeout_at(deadline, commits.recv()).await {
                    Err(_elapsed) => return Ok(Vec::new()),
                    Ok(Ok(c)) if c.session_id == session_id && c.latest_sequence > after => break,
                    Ok(Ok(_)) => continue,
                    // Missed some commits: one of them may have been ours.
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => break,
                    Ok(Err(broadcast::error::RecvError::Closed)) => return Err(StoreError::Closed),
                }
            }
        }
    }

    async fn load_projection(
        &self,
        session_id: &str,
        format: u32,
    ) -> Result<Option<StoredProjection>, StoreError> {
        let session_id = session_id.to_owned();
        self.readers
            .run(move |conn| read_projection(conn, &session_id, format))
            .await
    }

    async fn save_projection(
        &self,
        session_id: &str,
        from: u64,
        items: Vec<Vec<u8>>,
        checkpoint: StoredProjection,
    ) -> Result<(), StoreError> {
        let op = Op::SaveProjection {
            session_id: session_id.to_owned(),
            from,
            items,
            checkpoint,
        };
        self.submit(op).await.map(|_| ())
    }

    async fn projected_items(
        &self,
        session_id: &str,
        format: u32,
        from: u64,
        to: u64,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let session_id = session_id.to_owned();
        self.readers
            .run(move |conn| read_projected_items(conn, &session_id, format, from, to))
            .await
    }
}
