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
//! * An append costs two rows, whatever its size (schema 7): one row of the events table,
//!   found by (session, last sequence) (a unique index beside the rowid since schema 8: a
//!   row's bodies overflow its page, and a b-tree whose cells overflow is compared by copying
//!   each record out whole), holding the run of consecutive events
//!   it stored (`first_seq..=last_seq`, their bodies as JSON lines) and a summary for the
//!   filters (earliest and latest timestamp, distinct types, distinct run ids); and one row
//!   of `ids_hot`, the ids of those events, 16 bytes each. Per event the writer only looks
//!   the id up: in the batch, in the hot ids (kept in memory, `HotIds`: `ids_hot` is only
//!   read on open), and, if the Bloom filter of cold ids may hold it, in `ids_cold`. A stored
//!   id is read back from its row. The appending task encodes the bodies, joins them into
//!   the row's body and packs the ids; the writer inserts those as they are unless some id
//!   was already stored (then it rebuilds them without it).
//! * The id index is two levels (schemas 6 and 7), keyed by the id's 128 bits: the hot ids
//!   (a row per append, and in memory) and `ids_cold` (a row per id, in id order). The id
//!   space is cut into [`SqliteOptions::merge_slices`] slices by the ids' leading bits. Once
//!   the hot ids number [`SqliteOptions::merge_ids_at`] (more with a large log, an eighth
//!   of the cold ids up to a cap: `merge_threshold`) the writer merges the hot ids of one
//!   slice (round robin) into the cold table in id order (each cold leaf of that slice
//!   written once, the others not at all), in a transaction of its own, right after the
//!   group that filled it committed and was answered (the next group waits for it). `meta`'s `ids_merged` holds, per slice, the
//!   rowid of `ids_hot` its ids are merged up to; the rows every slice is past are deleted.
//!   An id is always in exactly one of the two, so idempotence holds across a merge, a
//!   restart, or a crash halfway through one; a group that fails takes its ids out of the
//!   hot ids again, and a file opened with another number of slices is merged whole first.
//!   A Bloom filter per slice of the cold ids, in memory (2.5–5 bytes per id: built on open,
//!   given each merge's ids after its commit, rebuilt from its slice of `ids_cold` alone
//!   once outgrown), has no false negatives, so it only ever saves a probe.
//! * Reads of a range find the session's first row whose last sequence is past the cursor
//!   and read rows in sequence order, decoding only the lines in range. Filters by run, type
//!   or time scan the session's rows in sequence order, skipping a row whose summary rules it
//!   out without reading its body, and filtering the lines of the others. What a group
//!   leaves to free (events evicted from the recent tail, bound bodies) is freed on a dropper
//!   thread. New files have 16 KiB pages.
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
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::{
    checkpoint_row, contiguous_items, decode, missing_item, new_epoch, push_row_events, Appended,
    BuildIdHasher, Committed, EventQuery, SessionRecord, SessionState, Store, StoreError,
    StoredProjection, Summary,
};
use crate::core::event::Event;
use crate::core::json::ToJson;
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
    // 7: one row per append, not per event: a row holds a run of one session's consecutive
    // events, `first_seq..=last_seq`, keyed by (session, last sequence), its bodies as JSON
    // lines, and what the filters need to skip it whole: its events' earliest and latest
    // timestamps, their distinct types (space-separated) and run ids (a JSON array). The hot
    // id table holds one row per append too, the ids of its events in sequence order (16
    // bytes each); the writer keeps them in memory (see `HotIds`). The migration keeps each
    // stored event as a row of its own and merges the hot ids into the cold table first.
    "CREATE TABLE events_v7 (
         session_id TEXT NOT NULL REFERENCES sessions(id),
         last_seq   INTEGER NOT NULL,
         first_seq  INTEGER NOT NULL CHECK (first_seq >= 1 AND first_seq <= last_seq),
         min_ms     INTEGER NOT NULL,
         max_ms     INTEGER NOT NULL,
         types      TEXT NOT NULL,
         runs       TEXT NOT NULL,
         body       TEXT NOT NULL,
         PRIMARY KEY (session_id, last_seq)
     ) STRICT, WITHOUT ROWID;
     INSERT INTO events_v7 (session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body)
         SELECT session_id, seq, seq, timestamp_ms, timestamp_ms, type,
                CASE WHEN run_id IS NULL THEN '[]' ELSE json_array(run_id) END, body
         FROM events ORDER BY session_id, seq;
     DROP TABLE events;
     ALTER TABLE events_v7 RENAME TO events;
     INSERT OR IGNORE INTO ids_cold (id, session_id, seq)
         SELECT id, session_id, seq FROM ids_hot ORDER BY id;
     DROP TABLE ids_hot;
     CREATE TABLE ids_hot (
         session_id TEXT NOT NULL,
         first_seq  INTEGER NOT NULL,
         ids        BLOB NOT NULL CHECK (length(ids) % 16 = 0)
     ) STRICT;
     INSERT INTO meta (key, value) SELECT 'ids_cold', CAST(count(*) AS TEXT) FROM ids_cold
         WHERE true ON CONFLICT (key) DO UPDATE SET value = excluded.value;",
    // 8: the events table has a rowid again, and (session, last sequence) is a unique index
    // beside it. A row's bodies (~32 KiB for an append of 100 events) overflow its page, and
    // SQLite compares a key with an overflowing cell of a `WITHOUT ROWID` table (or of an
    // index) by reading the whole record out of its overflow pages first: every insert's seek
    // copied a few such rows. Now the table's b-tree is keyed by the rowid (appends go to its
    // right edge, compared as integers) and the index's cells are small.
    "CREATE TABLE events_v8 (
         session_id TEXT NOT NULL REFERENCES sessions(id),
         last_seq   INTEGER NOT NULL,
         first_seq  INTEGER NOT NULL CHECK (first_seq >= 1 AND first_seq <= last_seq),
         min_ms     INTEGER NOT NULL,
         max_ms     INTEGER NOT NULL,
         types      TEXT NOT NULL,
         runs       TEXT NOT NULL,
         body       TEXT NOT NULL
     ) STRICT;
     INSERT INTO events_v8 (session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body)
         SELECT session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body
         FROM events ORDER BY session_id, last_seq;
     DROP TABLE events;
     ALTER TABLE events_v8 RENAME TO events;
     CREATE UNIQUE INDEX events_by_seq ON events (session_id, last_seq);",
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
/// The writer's page cache between transactions, in KiB (a negative `cache_size`): the
/// pages every append walks (the tables' rightmost leaves, the indexes' upper levels).
const WRITER_CACHE_KIB: i64 = -8_192;
/// Bytes of dirty pages a transaction may hold before SQLite spills them to the WAL ahead of
/// its COMMIT (`cache_spill`, in pages): the cache grows to hold a whole group, and shrinks
/// back to [`WRITER_CACHE_KIB`] as the commit makes its pages clean.
const WRITER_SPILL_BYTES: i64 = 64 << 20;
/// Once the store has neither written nor read for this long, the writer frees the page
/// caches (its own and the idle readers') and the allocator gives the freed memory back: an
/// idle companion holds what its sessions need, not the pages its last burst went through.
const IDLE_RELEASE: Duration = Duration::from_secs(1);
/// Ids the hot id table holds, at least, before the writer merges it into the cold one.
const MERGE_IDS_AT: u64 = 65_536;
/// Slices of the id space merged one at a time ([`SqliteOptions::merge_slices`]).
const MERGE_SLICES: u32 = 8;

/// How a [`SqliteStore`] is opened; [`SqliteStore::open`] takes the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// The hot ids are merged into the cold table once they number this many, or more
    /// with a large log (`merge_threshold`). Small values cross merges quickly (tests).
    pub merge_ids_at: u64,
    /// The id space is cut into this many slices (rounded up to a power of two, at most
    /// 256), by the ids' leading bits; a merge moves one slice's hot ids, so it rewrites
    /// that share of the cold table, not all of it. 1: every merge moves every hot id.
    pub merge_slices: u32,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            merge_ids_at: MERGE_IDS_AT,
            merge_slices: MERGE_SLICES,
        }
    }
}

/// A large log's merges move at least one hot id per this many cold ids
/// ([`merge_threshold`]).
const COLD_PER_HOT: u64 = 8;
/// ... until the hot ids number this many: 3/4 of 2^18, so that with a group's ids on top
/// (the merge runs after the group) they stay within the 7/8 of 2^18 that a map of 2^18
/// buckets holds (about 8.6 MiB: 33 bytes a bucket).
const HOT_IDS_CAP: u64 = 196_608;

/// The number of hot ids at which a merge is due, with `cold` ids in the cold table: at
/// least `at`, at least `cold / COLD_PER_HOT` up to `HOT_IDS_CAP` hot ids, and at least
/// `sqrt(cold * at) / 4` (which passes the cap at about 13 M cold ids with the default `at`).
///
/// A merge of a slice rewrites that slice's cold leaves to move its hot ids, so per id moved
/// it writes about `cold / hot` rows of the cold table (and the checkpointer copies them
/// again): with 2 M ids stored and the square root alone (90 k hot ids), 22 rows, most of
/// the writer's time and of the WAL (BENCHMARKS.md, the store section). The hot ids cost a
/// commit nothing but their row of `ids_hot`, and memory, 33 bytes a bucket of their map
/// (38–75 bytes an id), so the log's size buys them up to the cap: 8 rows per id moved up
/// to 1.6 M stored ids, then growing with the log again.
fn merge_threshold(at: u64, cold: u64) -> u64 {
    let linear = (cold / COLD_PER_HOT).min(HOT_IDS_CAP);
    at.max(linear).max(cold.saturating_mul(at).isqrt() / 4)
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
    /// The writer's page cache in bytes, as it last measured it (after each group, and after
    /// an idle release).
    cached: Arc<AtomicU64>,
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
        // Savepoint journals stay in memory.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Checkpoints run on the checkpointer's own thread and connection.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(32);
        // Opening reads the whole cold id table (the Bloom filters) and a migration copies
        // whole tables: with SQLite's default cache, so that pages read once are not kept
        // (a full 64 MiB cache of them was most of an idle companion's memory).
        let epoch = migrate(&mut conn)?;
        let ids = IdIndex::read(&mut conn, options.merge_ids_at.max(1), options.merge_slices)?;
        // A group of thousands of events must not spill pages to the WAL before COMMIT, nor
        // re-read the upper index pages from the file; the pages a group wrote once (its
        // bodies) need not stay.
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        conn.pragma_update(None, "cache_spill", WRITER_SPILL_BYTES / page_size.max(512))?;

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
        let readers = Arc::new(Readers::new(path.to_owned()));
        let cached = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            conn,
            readers: readers.clone(),
            cached: cached.clone(),
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
            readers,
            recent,
            committed,
            commits,
            cached,
        })
    }

    /// How many write transactions the writer has committed. Under concurrent appends this
    /// stays below the number of appends: that is group commit.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// The writer's page cache, in bytes, as of its last group, or of its last release once
    /// the store was idle for a second (then nearly nothing).
    pub fn cached_bytes(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
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
        batch: Batch,
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

/// An append made ready for the writer by the appending task: each event's body encoded
/// (with sequence 0: the row's sequences are authoritative) and joined into the row's body,
/// the ids packed as the hot id table stores them, and the copies the recent tail keeps. When
/// the batch holds no stored id (nearly always) the writer inserts `body` and `ids` as they
/// are, and does no per-event work but the id lookups.
struct Batch {
    rows: Vec<Row>,
    /// The bodies, one JSON line each, `\n` between them (JSON has no raw newline).
    body: String,
    /// The ids' 128 bits, 16 bytes each (big-endian), in the rows' order.
    ids: Vec<u8>,
}

struct Row {
    event: Event,
    /// The id's 128 bits: the key that finds a repeated id inside the batch.
    key: u128,
    /// Its line in [`Batch::body`].
    line: std::ops::Range<usize>,
    copy: Event,
}

impl Batch {
    fn new(events: Vec<Event>) -> Batch {
        let mut body = String::with_capacity(events.len() * 320);
        let mut ids = Vec::with_capacity(events.len() * 16);
        let rows = (events.into_iter())
            .map(|event| {
                let event = event.into_sequenced(0);
                let key = event.id().bits();
                if !body.is_empty() {
                    body.push('\n');
                }
                let start = body.len();
                event.write_json(&mut body);
                ids.extend_from_slice(&key.to_be_bytes());
                Row {
                    key,
                    line: start..body.len(),
                    copy: event.clone(),
                    event,
                }
            })
            .collect();
        Batch { rows, body, ids }
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
    /// Their idle connections' caches are freed with the writer's (`IDLE_RELEASE`).
    readers: Arc<Readers>,
    /// [`SqliteStore::cached_bytes`].
    cached: Arc<AtomicU64>,
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

/// What the writer knows of the two id tables (schemas 6 and 7): the hot ids themselves, how
/// many ids the cold table holds, as committed, and when to merge the hot ones into it.
struct IdIndex {
    /// Every id of `ids_hot`, with where it is stored (read on open, then kept by the writer:
    /// a group's ids are added as it inserts them and taken out again if it fails).
    hot: HotIds,
    /// Ids in `ids_cold`, as the last merge recorded in `meta` (only sizes the hot table).
    cold: u64,
    /// [`SqliteOptions::merge_ids_at`].
    merge_at: u64,
    /// After a failed merge, the next is tried only once the hot table holds this many.
    retry_at: u64,
    /// The slices of the id space, by the ids' leading `bits` bits.
    slices: Vec<Slice>,
    bits: u32,
    /// The slice the next merge moves (round robin).
    next: usize,
}

/// One slice of the id space.
struct Slice {
    /// Every id of the slice in `ids_cold` (and maybe others): a new id skips the cold probe.
    filter: ColdFilter,
    /// The rowid of `ids_hot` up to which this slice's ids are in `ids_cold` (`meta`'s
    /// `ids_merged`): a row's id of this slice is hot only if the row is past it.
    merged: i64,
}

/// The hot ids in memory: id -> (session, sequence). The table `ids_hot` holds the same ids,
/// one row per append, only so that they survive a restart; no statement reads it but the
/// open. So a new id costs a hash lookup here, not a b-tree probe and insert.
#[derive(Default)]
struct HotIds {
    ids: HashMap<u128, (u32, u64), BuildIdHasher>,
    /// The sessions that `ids` name, by index.
    sessions: Vec<String>,
    names: HashMap<String, u32>,
    /// Ids the group in progress added (taken out if it fails).
    added: Vec<u128>,
}

impl HotIds {
    fn len(&self) -> u64 {
        self.ids.len() as u64
    }

    fn session(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.names.get(name) {
            return i;
        }
        let i = self.sessions.len() as u32;
        self.sessions.push(name.to_owned());
        self.names.insert(name.to_owned(), i);
        i
    }

    /// Where `key` is stored, if it is a hot id.
    fn get(&self, key: u128) -> Option<(&str, u64)> {
        let &(session, seq) = self.ids.get(&key)?;
        Some((&self.sessions[session as usize], seq))
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.sessions.clear();
        self.names.clear();
        self.added.clear();
    }
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

    /// Every id of `ids_cold` in `range` (`lo..hi`, or `lo..` to the end), in a filter with
    /// room for twice `cold`.
    fn read(
        conn: &Connection,
        cold: u64,
        range: (u128, Option<u128>),
    ) -> Result<ColdFilter, StoreError> {
        let mut filter = ColdFilter::new(cold.saturating_mul(2));
        let (lo, hi) = (range.0.to_be_bytes(), range.1.map(u128::to_be_bytes));
        let mut stmt = conn
            .prepare_cached("SELECT id FROM ids_cold WHERE id >= ?1 AND (?2 IS NULL OR id < ?2)")?;
        let mut rows = stmt.query(params![&lo[..], hi.as_ref().map(|h| &h[..])])?;
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
    /// The hot ids (each row's ids of a slice it is past the mark of), the cold count, the
    /// filters. A file merged with another number of slices is first merged whole.
    fn read(conn: &mut Connection, merge_at: u64, slices: u32) -> Result<IdIndex, StoreError> {
        let bits = slices.clamp(1, 256).next_power_of_two().trailing_zeros();
        let marks: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'ids_merged'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let marks: Vec<i64> = match marks {
            Some(marks) => (marks.split(' '))
                .map(|m| m.parse().map_err(|_| ()))
                .collect::<Result<_, ()>>()
                .ok()
                .filter(|m: &Vec<i64>| m.len().is_power_of_two() && m.len() <= 256)
                .ok_or_else(|| StoreError::Corrupt(format!("meta ids_merged is {marks:?}")))?,
            None => vec![0; 1 << bits],
        };
        let stored_bits = marks.len().trailing_zeros();
        let mut hot = HotIds::default();
        {
            let mut stmt = conn.prepare("SELECT rowid, session_id, first_seq, ids FROM ids_hot")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let rowid: i64 = row.get(0)?;
                let session = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
                let session = hot.session(session);
                let first: i64 = row.get(2)?;
                let ids = row.get_ref(3)?.as_blob().map_err(rusqlite::Error::from)?;
                if ids.len() % 16 != 0 || first < 1 {
                    return Err(StoreError::Corrupt(format!(
                        "a row of ids_hot of {} bytes from sequence {first}",
                        ids.len()
                    )));
                }
                for (i, id) in ids.chunks_exact(16).enumerate() {
                    let key = u128::from_be_bytes(id.try_into().expect("16 bytes"));
                    if rowid > marks[slice_of(key, stored_bits)] {
                        hot.ids.insert(key, (session, first as u64 + i as u64));
                    }
                }
            }
        }
        let cold: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'ids_cold'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let mut cold = cold.and_then(|c| c.parse().ok()).unwrap_or(0);
        let mut marks = marks;
        if stored_bits != bits {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Every slice past every row: all of them merged, the table emptied.
            cold = merge_slice(&tx, &hot, cold, None, &vec![i64::MAX; 1 << bits])?.0;
            tx.commit()?;
            hot.clear();
            marks = vec![0; 1 << bits];
        }
        let per_slice = cold >> bits;
        let slices = (0..1usize << bits)
            .map(|s| {
                Ok(Slice {
                    filter: ColdFilter::read(conn, per_slice, slice_range(s, bits))?,
                    merged: marks[s],
                })
            })
            .collect::<Result<Vec<Slice>, StoreError>>()?;
        Ok(IdIndex {
            hot,
            cold,
            merge_at,
            retry_at: 0,
            slices,
            bits,
            next: 0,
        })
    }

    fn due(&self) -> bool {
        self.hot.len() >= merge_threshold(self.merge_at, self.cold).max(self.retry_at)
    }

    /// Whether `ids_cold` may hold `key` (no false negatives).
    fn may_be_cold(&self, key: u128) -> bool {
        self.slices[slice_of(key, self.bits)].filter.may_hold(key)
    }
}

/// The slice of `key` among `1 << bits`: its leading bits.
fn slice_of(key: u128, bits: u32) -> usize {
    key.checked_shr(128 - bits).unwrap_or(0) as usize
}

/// The ids of slice `s` among `1 << bits`: `lo..hi`, or `lo..` for the last.
fn slice_range(s: usize, bits: u32) -> (u128, Option<u128>) {
    let lo = (s as u128).checked_shl(128 - bits).unwrap_or(0);
    let hi = (s as u128 + 1)
        .checked_shl(128 - bits)
        .filter(|_| s + 1 < 1 << bits);
    (lo, hi)
}

/// Inside `tx`: moves the hot ids of slice `only` (every slice if `None`) into `ids_cold` in
/// id order, records `marks` (the slices' new marks) and deletes the rows of `ids_hot` that
/// every slice is past (all of them, marks reset to 0, once each slice is past its last
/// row). Returns the cold count and the ids moved, in id order.
fn merge_slice(
    tx: &Connection,
    hot: &HotIds,
    cold: u64,
    only: Option<(usize, u32)>,
    marks: &[i64],
) -> Result<(u64, Vec<u128>), StoreError> {
    let mut moving: Vec<(u128, u32, u64)> = (hot.ids.iter())
        .filter(|(&key, _)| only.is_none_or(|(s, bits)| slice_of(key, bits) == s))
        .map(|(&key, &(session, seq))| (key, session, seq))
        .collect();
    moving.sort_unstable_by_key(|m| m.0);
    let mut moved = 0;
    {
        // An id is in one table only (the append looks it up in both before adding it to
        // the hot ones); if ever in both, the cold row, the older, stays.
        let mut insert = tx.prepare_cached(
            "INSERT OR IGNORE INTO ids_cold (id, session_id, seq) VALUES (?1, ?2, ?3)",
        )?;
        for &(key, session, seq) in &moving {
            let session = &hot.sessions[session as usize];
            moved += insert.execute(params![&key.to_be_bytes()[..], session, seq as i64])?;
        }
    }
    let last: i64 = tx.query_row("SELECT coalesce(max(rowid), 0) FROM ids_hot", [], |r| {
        r.get(0)
    })?;
    let past = marks.iter().copied().min().unwrap_or(0);
    let marks: Vec<i64> = if past >= last {
        // Every slice is past every row: the table empties and rowids start over.
        tx.execute("DELETE FROM ids_hot", [])?;
        vec![0; marks.len()]
    } else {
        tx.execute("DELETE FROM ids_hot WHERE rowid <= ?1", [past])?;
        marks.to_vec()
    };
    let cold = cold + moved as u64;
    let text: Vec<String> = marks.iter().map(i64::to_string).collect();
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('ids_cold', ?1), ('ids_merged', ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![cold.to_string(), text.join(" ")],
    )?;
    Ok((cold, moving.into_iter().map(|m| m.0).collect()))
}

/// When the writer frees the caches: once a whole [`IDLE_RELEASE`] passed with the store's
/// activity (groups committed, reads run) unchanged, and once per quiet spell.
#[derive(Debug, Default)]
struct Idle {
    /// The activity at the last tick.
    seen: u64,
    /// Freed since the activity last changed.
    released: bool,
}

impl Idle {
    /// One tick per [`IDLE_RELEASE`] the writer waited in vain; true: free them now.
    fn tick(&mut self, activity: u64) -> bool {
        if activity != self.seen {
            self.seen = activity;
            self.released = false;
            return false;
        }
        !std::mem::replace(&mut self.released, true)
    }
}

/// The bytes `conn`'s page cache holds (`SQLITE_DBSTATUS_CACHE_USED`).
fn cache_used(conn: &Connection) -> u64 {
    let (mut current, mut highest) = (0, 0);
    // SAFETY: the handle lives as long as `conn`, and the call only reads the connection's
    // counters under its own mutex.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
            &mut current,
            &mut highest,
            0,
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        current.max(0) as u64
    } else {
        0
    }
}

/// Freed on the dropper thread.
type Trash = (Vec<Event>, Vec<String>);

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        // A clock for the idle release's timeout, nothing else: the writer blocks on its
        // queue on this thread. Without one (the OS refused a timer), caches are only ever
        // bounded by their size.
        let clock = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok();
        let mut idle = Idle::default();
        loop {
            let first = match &clock {
                Some(clock) => {
                    let next = clock
                        .block_on(async { tokio::time::timeout(IDLE_RELEASE, rx.recv()).await });
                    match next {
                        Ok(Some(request)) => request,
                        Ok(None) => return,
                        Err(_elapsed) => {
                            if idle.tick(self.activity()) {
                                self.release_memory();
                            }
                            continue;
                        }
                    }
                }
                None => match rx.blocking_recv() {
                    Some(request) => request,
                    None => return,
                },
            };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
            self.cached.store(cache_used(&self.conn), Ordering::Relaxed);
        }
    }

    /// Groups committed and reads run, so far: the store is idle while it stays the same.
    fn activity(&self) -> u64 {
        (self.commits.load(Ordering::Relaxed))
            .wrapping_add(self.readers.reads.load(Ordering::Relaxed))
    }

    /// Frees every page the writer's and the idle readers' caches hold (none is pinned
    /// between transactions: they are only copies of the file), then has the allocator give
    /// the freed memory back to the system.
    fn release_memory(&mut self) {
        let _ = self.conn.release_memory();
        for reader in self
            .readers
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = reader.release_memory();
        }
        crate::companion::alloc::release_free_memory();
        self.cached.store(cache_used(&self.conn), Ordering::Relaxed);
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
        let mut spent: Vec<String> = Vec::new();
        let latest = &self.latest;
        let ids = &mut self.ids;
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
                    ids: &mut *ids,
                };
                let result = step.apply(op);
                let (writes, wrote, tail) = (step.writes, step.wrote, step.tail);
                bytes += step.bytes;
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
                self.ids.hot.added.clear();
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
                // The group that filled the hot ids is answered before their merge, so its
                // callers make their next appends while it runs; the next group waits for it.
                if self.ids.due() {
                    self.merge_ids();
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
                // Its ids were rolled back with it.
                let hot = &mut self.ids.hot;
                for key in std::mem::take(&mut hot.added) {
                    hot.ids.remove(&key);
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
    /// Moves the hot ids of the next slice of the id space into the cold table, in id order
    /// (each cold leaf of the slice written once), in a transaction of its own: a failure or
    /// a crash halfway leaves both tables as they were, and an id is never in neither. The
    /// ids come from memory, sorted here; the slice's mark moves past the last row of
    /// `ids_hot`, and the rows every slice is past are deleted. A failed merge is tried again
    /// once the hot ids have grown by `merge_at`.
    fn merge_ids(&mut self) {
        let ids = &self.ids;
        let (slice, bits) = (ids.next, ids.bits);
        let merged = (|| -> Result<(u64, Vec<i64>, Vec<u128>), StoreError> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let last: i64 =
                tx.query_row("SELECT coalesce(max(rowid), 0) FROM ids_hot", [], |r| {
                    r.get(0)
                })?;
            let mut marks: Vec<i64> = ids.slices.iter().map(|s| s.merged).collect();
            marks[slice] = last;
            let (cold, moved) = merge_slice(&tx, &ids.hot, ids.cold, Some((slice, bits)), &marks)?;
            let marks =
                tx.query_row("SELECT value FROM meta WHERE key = 'ids_merged'", [], |r| {
                    r.get::<_, String>(0)
                })?;
            tx.commit()?;
            let marks = marks.split(' ').map(|m| m.parse().unwrap_or(0)).collect();
            Ok((cold, marks, moved))
        })();
        match merged {
            Ok((cold, marks, moved)) => {
                for key in &moved {
                    self.ids.hot.ids.remove(key);
                }
                if self.ids.hot.ids.is_empty() {
                    self.ids.hot.clear();
                }
                let per_slice = cold >> bits;
                let target = &mut self.ids.slices[slice];
                if per_slice > target.filter.capacity {
                    match ColdFilter::read(&self.conn, per_slice, slice_range(slice, bits)) {
                        Ok(filter) => target.filter = filter,
                        // Too full, but it still holds every cold id.
                        Err(_) => moved.iter().for_each(|&k| target.filter.insert(k)),
                    }
                } else {
                    moved.iter().for_each(|&k| target.filter.insert(k));
                }
                for (s, mark) in self.ids.slices.iter_mut().zip(marks) {
                    s.merged = mark;
                }
                self.ids.cold = cold;
                self.ids.next = (slice + 1) % self.ids.slices.len();
                self.ids.retry_at = 0;
                // The merge rewrote cold leaves: a checkpoint's worth of WAL.
                let _ = self.wake.try_send(());
            }
            // Disk full, I/O error: both tables are as they were, and still looked up.
            Err(_) => self.ids.retry_at = self.ids.hot.len() + self.ids.merge_at,
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
    /// The id index: the hot ids (an append adds its new ones) and the cold ids' filter.
    ids: &'a mut IdIndex,
}

impl Step<'_> {
    fn apply(&mut self, op: Op) -> Result<Done, StoreError> {
        match op {
            Op::Append { session_id, batch } => self.append(session_id, batch).map(Done::Appended),
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
                    (SELECT max(last_seq) FROM events WHERE session_id = ?1)",
            [session_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if !exists {
            return Err(StoreError::UnknownSession(session_id.to_owned()));
        }
        Ok(max.unwrap_or(0) as u64)
    }

    /// One row of the events table and one of `ids_hot` for the whole append, whatever its
    /// size: per event only the id lookups (the batch, the hot ids in memory, the cold
    /// filter, and for an id it may hold the cold table). A stored id is read back from its
    /// row. The appending task built the row's body and ids; they are rebuilt here only if
    /// some ids were already stored.
    fn append(&mut self, session_id: String, batch: Batch) -> Result<Vec<Appended>, StoreError> {
        let Batch { rows, body, ids } = batch;
        let latest = self.latest_of(&session_id)?;
        let mut seq = latest;
        let mut out: Vec<Appended> = Vec::with_capacity(rows.len());
        // Id (its 128 bits, taken on the appending task) -> index in `out` of its first
        // occurrence in this batch: no copy of the id, no hashing of its text, per event.
        let mut seen: HashMap<u128, usize, BuildIdHasher> =
            HashMap::with_capacity_and_hasher(rows.len(), BuildIdHasher);
        let mut cold = self
            .conn
            .prepare_cached("SELECT session_id, seq FROM ids_cold WHERE id = ?1")?;
        // The lines kept (all of them unless an id was stored), and the row's summary.
        let mut kept: Vec<std::ops::Range<usize>> = Vec::new();
        let mut all_kept = true;
        let mut summary = Summary::default();
        let session = self.ids.hot.session(&session_id);
        // From the first id on, a failure cannot be undone alone: the hot ids took some.
        self.wrote = !rows.is_empty();
        for Row {
            event,
            key,
            line,
            copy,
        } in rows
        {
            if let Some(&first) = seen.get(&key) {
                out.push(Appended {
                    event: out[first].event.clone(),
                    duplicate: true,
                });
                all_kept = false;
                continue;
            }
            seen.insert(key, out.len());
            let stored = match self.ids.hot.get(key) {
                Some((owner, at)) => Some((owner.to_owned(), at)),
                None if self.ids.may_be_cold(key) => cold
                    .query_row([&key.to_be_bytes()[..]], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                    })
                    .optional()?,
                None => None,
            };
            if let Some((owner, at)) = stored {
                out.push(Appended {
                    event: event_at(self.conn, &owner, at, event.id().as_str())?,
                    duplicate: true,
                });
                all_kept = false;
                continue;
            }
            seq += 1;
            self.ids.hot.ids.insert(key, (session, seq));
            self.ids.hot.added.push(key);
            summary.add(&event, seq == latest + 1);
            kept.push(line);
            self.tail.push(copy.into_sequenced(seq));
            out.push(Appended {
                event: event.into_sequenced(seq),
                duplicate: false,
            });
        }
        if seq > latest {
            let (body, ids) = if all_kept {
                (body, ids)
            } else {
                let mut lines = String::with_capacity(body.len());
                let mut packed = Vec::with_capacity(16 * kept.len());
                for (i, line) in kept.iter().enumerate() {
                    if i > 0 {
                        lines.push('\n');
                    }
                    lines.push_str(&body[line.clone()]);
                }
                for a in out.iter().filter(|a| !a.duplicate) {
                    packed.extend_from_slice(&a.event.id().bits().to_be_bytes());
                }
                self.spent.push(body);
                (lines, packed)
            };
            let runs = serde_json::to_string(&summary.runs)
                .map_err(|e| StoreError::Database(format!("cannot encode run ids: {e}")))?;
            let first = (latest + 1) as i64;
            self.conn
                .prepare_cached(
                    "INSERT INTO events
                         (session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(params![
                    session_id,
                    seq as i64,
                    first,
                    summary.min_ms,
                    summary.max_ms,
                    summary.types.join(" "),
                    runs,
                    body,
                ])?;
            self.conn
                .prepare_cached(
                    "INSERT INTO ids_hot (session_id, first_seq, ids) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![session_id, first, ids])?;
            self.bytes += body.len() + ids.len();
            self.spent.push(body);
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
    /// Reads run so far (the writer's idle release waits for them to stop too).
    reads: AtomicU64,
}

impl Readers {
    fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(READERS)),
            reads: AtomicU64::new(0),
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
            this.reads.fetch_add(1, Ordering::Relaxed);
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

/// The stored event at `seq` of `session_id`, which the id index names for `id`.
fn event_at(conn: &Connection, session_id: &str, seq: u64, id: &str) -> Result<Event, StoreError> {
    let row: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT first_seq, body FROM events WHERE session_id = ?1 AND last_seq >= ?2
             ORDER BY last_seq LIMIT 1",
        )?
        .query_row(params![session_id, sql_int("sequence", seq)?], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let line = row.and_then(|(first, body)| {
        let skip = usize::try_from(seq.checked_sub(u64::try_from(first).ok()?)?).ok()?;
        body.split('\n').nth(skip).map(str::to_owned)
    });
    let line = line.ok_or_else(|| {
        StoreError::Corrupt(format!("id {id} is indexed but its event is not stored"))
    })?;
    decode(session_id, seq as i64, &line)
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

/// One query for the session's rows from the first that can hold `after + 1`, read in
/// sequence order until `before` or `limit`; see the module docs of `store` for the
/// semantics. A row whose summary rules out the filter is skipped without reading its body;
/// in the others each line in range is decoded and filtered.
fn read_events(
    conn: &Connection,
    session_id: &str,
    query: &EventQuery,
) -> Result<Vec<Event>, StoreError> {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let after = query.after.unwrap_or(0);
    let before = query.before.unwrap_or(u64::MAX);
    let limit = query.limit.unwrap_or(usize::MAX);
    let since = query.since.map(|t| t.unix_millis());
    let kind = query.kind.map(|k| k.as_str());
    let mut events = Vec::new();
    let mut stmt = conn.prepare_cached(
        "SELECT first_seq, last_seq, max_ms, types, runs, body FROM events
         WHERE session_id = ?1 AND last_seq > ?2 ORDER BY last_seq",
    )?;
    let mut rows = stmt.query(params![session_id, clamp(after)])?;
    let corrupt = |seq: i64, why: &str| {
        StoreError::Corrupt(format!("session {session_id:?} seq {seq}: {why}"))
    };
    while events.len() < limit {
        let Some(row) = rows.next()? else { break };
        let (first, last): (i64, i64) = (row.get(0)?, row.get(1)?);
        let first = u64::try_from(first)
            .ok()
            .filter(|&f| f >= 1 && i64::try_from(f).is_ok_and(|f| f <= last))
            .ok_or_else(|| corrupt(last, "its row starts at a bad sequence"))?;
        if first >= before {
            break;
        }
        if since.is_some_and(|since| row.get::<_, i64>(2).is_ok_and(|max| max < since)) {
            continue;
        }
        if let Some(kind) = kind {
            let types = row.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
            if !types.split(' ').any(|t| t == kind) {
                continue;
            }
        }
        if let Some(run) = &query.run_id {
            let runs = row.get_ref(4)?.as_str().map_err(rusqlite::Error::from)?;
            let runs: Vec<std::borrow::Cow<'_, str>> =
                serde_json::from_str(runs).map_err(|e| corrupt(last, &format!("run ids: {e}")))?;
            if !runs.iter().any(|r| r == run) {
                continue;
            }
        }
        let body = row
            .get_ref(5)?
            .as_str()
            .map_err(|_| corrupt(last, "body is not text"))?;
        push_row_events(&mut events, session_id, query, (first, last as u64), body)?;
    }
    drop(rows);
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
            batch: Batch::new(events),
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
                                (SELECT max(last_seq) FROM events WHERE session_id = ?1)",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot ids grow with the log: at least `at`, an eighth of the cold ids up to the cap,
    /// and the square root past it.
    #[test]
    fn merges_wait_for_more_hot_ids_as_the_log_grows_up_to_a_cap() {
        let at = MERGE_IDS_AT;
        let due: Vec<(u64, u64)> = [0, 100_000, 524_288, 1_000_000, 2_000_000, 20_000_000]
            .into_iter()
            .map(|cold| (cold, merge_threshold(at, cold)))
            .collect();
        assert_eq!(
            due,
            [
                (0, 65_536),
                (100_000, 65_536),
                (524_288, 65_536),
                (1_000_000, 125_000),
                (2_000_000, HOT_IDS_CAP),
                (20_000_000, 286_216),
            ]
        );
        // Tests merge at a handful of ids while the log is small.
        assert_eq!(merge_threshold(4, 39), 4);
        assert_eq!(merge_threshold(4, 40), 5);
    }

    #[test]
    fn the_caches_are_freed_once_per_quiet_spell_after_a_whole_quiet_tick() {
        let mut idle = Idle::default();
        // A store opened and never used: freed at the first tick (the open's pages).
        assert!(idle.tick(0));
        assert!(!idle.tick(0), "freed once, not at every tick");
        // Activity since the last tick: not yet, and the next quiet tick frees.
        assert!(!idle.tick(3));
        assert!(idle.tick(3));
        assert!(!idle.tick(3));
        // Busy at every tick: never freed.
        for activity in 4..10 {
            assert!(!idle.tick(activity));
        }
        assert!(idle.tick(9));
    }
}
