//! The shared store: one PostgreSQL database that several companions append to and read from.
//!
//! Shape, as invariants:
//!
//! * **The session row is the sequence lock.** `sessions.latest_seq` holds each session's
//!   latest sequence. Every write transaction first locks the rows of the sessions it touches
//!   (`SELECT … FOR NO KEY UPDATE`, sorted by id, so two companions never deadlock on each
//!   other) and numbers new events from the locked value. Nothing is cached across
//!   transactions: another companion may have appended since.
//! * **An append is one row, an event one key** (schema 5). `events` holds a row per append,
//!   keyed by (session, last sequence): the run of consecutive events it stored
//!   (`first_seq..=last_seq`), their bodies as JSON lines, and a summary for the filters
//!   (earliest and latest timestamp, distinct types, distinct run ids, as JSON arrays).
//!   `event_ids` holds a row per event, keyed by the id's 128 bits (16 bytes), naming the
//!   (session, sequence) that stored it. No other index, no foreign key: per event the server
//!   writes one heap tuple and one b-tree entry (a group's ids go in key order); the bodies are
//!   one value per append (lz4 where the server has it). The appending task encodes the bodies,
//!   joins them and packs the ids; the writer sends them as they are unless an id was stored.
//! * **Idempotence is the primary key of `event_ids`.** A group inserts its ids without
//!   looking them up first (the insert's unique check is the lookup). If the insert collides
//!   with a stored id (a unique violation: an id stored before, or one another companion
//!   committed meanwhile, in another session whose row this transaction does not hold),
//!   nothing commits and the group runs again, now reading the stored events of its ids
//!   before numbering. After a group that found ids stored, the next one reads them first
//!   too (a guess about the next group, never about the data). Deadlocks and serialization
//!   failures are retried the same way.
//! * **One writer per store, group commit.** Each store has one writer task and connection;
//!   it commits everything pending in ONE transaction. A refused request (unknown session,
//!   duplicate session, corrupt stored row) is refused before it writes anything, so it never
//!   needs a savepoint and never spoils its group.
//! * **Two round trips per group of appends, whatever it holds.** BEGIN and the session locks
//!   (and the stored ids, when looked up), pipelined; then one statement that inserts the
//!   group's rows and ids (`unnest` arrays), advances its sessions and notifies, pipelined
//!   with COMMIT (if the insert fails, that COMMIT only ends the failed transaction). A group
//!   that collided runs again: two more. Other requests in the group add one round trip each.
//!   Statements are prepared once per connection.
//! * **LISTEN/NOTIFY is only a wake-up.** A group that moved a session sends
//!   `pg_notify('agentwire_commits')` inside its transaction (delivered only if it commits). Each
//!   store's listener connection, woken by any notification (the payload is ignored), re-reads
//!   every session's `latest_seq` (one query per burst of notifications, linear in the number
//!   of sessions) and announces the sessions that moved as [`Committed`]:
//!   subscribers then read the events by cursor, as for local commits. The writer announces its
//!   own commits directly after COMMIT; announcements per session only move forward, whoever
//!   makes them. While the listener is reconnecting, other companions' commits are heard late
//!   (on reconnect it re-reads everything), never lost.
//! * Reads go to a small pool of read-only connections; `READ COMMITTED` statements see every
//!   commit that finished before they started, so whoever hears of a commit can read it. A
//!   read finds the session's first row whose last sequence is past the cursor and decodes
//!   only the lines in range; a filter by run, type or time skips rows by their summary on the
//!   server (`max_ms`, jsonb `?`), and the lines of the rows sent are filtered exactly.
//! * Migrations run on connect, under a transaction-scoped advisory lock, so two companions
//!   starting at once migrate once. The schema version is the `schema_version` table and the
//!   epoch a row of `meta`, all in the `agentwire` schema of the database.
//! * **Projections** (schema 4: `projections`, one checkpoint row per session, and
//!   `projected_items`, keyed by (session, index)) are saved on a connection of their own, not
//!   the writer's, in one transaction and one round trip: BEGIN, the checkpoint's upsert (the
//!   session's projections row is locked first, so concurrent saves of one session, from any
//!   companion, serialize: the last one wins, whole), every item in one upsert from `unnest`
//!   arrays, COMMIT, pipelined.
//!
//! Connections use no TLS: the server must be on this machine (a loopback address or a Unix
//! socket directory); [`PostgresStore::connect`] refuses any other host. Reach a remote server
//! through a local tunnel (for example `ssh -L`).
//!
//! Dropping the store closes its request channel: the writer task commits what is still queued
//! and ends, without the drop waiting for it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Statement};

use super::{
    checkpoint_row, contiguous_items, decode, missing_item, new_epoch, push_row_events, Appended,
    BuildIdHasher, Committed, EventQuery, SessionRecord, SessionState, Store, StoreError,
    StoredProjection, Summary,
};
use crate::core::event::Event;
use crate::core::json::ToJson;
use crate::core::time::Timestamp;

/// The schema, one step per version: step `i` takes `schema_version` from `i` to `i + 1`.
/// Steps are only ever appended; a released step is never edited.
const MIGRATIONS: &[&str] = &[
    // 1: the log.
    "CREATE TABLE agentwire.meta (
         key   text PRIMARY KEY,
         value text NOT NULL
     );
     CREATE TABLE agentwire.sessions (
         id                  text PRIMARY KEY,
         ord                 bigint GENERATED ALWAYS AS IDENTITY,
         provider            text NOT NULL,
         cwd                 text NOT NULL,
         state               text NOT NULL,
         provider_session_id text,
         created_at          bigint NOT NULL,
         updated_at          bigint NOT NULL,
         latest_seq          bigint NOT NULL DEFAULT 0 CHECK (latest_seq >= 0)
     );
     CREATE TABLE agentwire.events (
         session_id   text NOT NULL REFERENCES agentwire.sessions (id),
         seq          bigint NOT NULL CHECK (seq >= 1),
         id           text NOT NULL UNIQUE,
         run_id       text,
         type         text NOT NULL,
         timestamp_ms bigint NOT NULL,
         body         text NOT NULL,
         PRIMARY KEY (session_id, seq)
     );
     CREATE INDEX events_by_run  ON agentwire.events (session_id, run_id, seq);
     CREATE INDEX events_by_type ON agentwire.events (session_id, type, seq);
     CREATE INDEX events_by_time ON agentwire.events (session_id, timestamp_ms);",
    // 2: the companion that hosts each session.
    "ALTER TABLE agentwire.sessions ADD COLUMN node text NOT NULL DEFAULT '';",
    // 3: each companion's lease.
    "CREATE TABLE agentwire.nodes (
         name    text PRIMARY KEY,
         seen_at bigint NOT NULL
     );",
    // 4: projections, derived data beside the log (see the module docs of `store`): each
    // session's checkpoint, and its final timeline items keyed by (session, index).
    "CREATE TABLE agentwire.projections (
         session_id text PRIMARY KEY REFERENCES agentwire.sessions (id),
         format     bigint NOT NULL,
         after      bigint NOT NULL CHECK (after >= 0),
         items      bigint NOT NULL CHECK (items >= 0),
         body       bytea NOT NULL
     );
     CREATE TABLE agentwire.projected_items (
         session_id text NOT NULL REFERENCES agentwire.sessions (id),
         idx        bigint NOT NULL CHECK (idx >= 0),
         format     bigint NOT NULL,
         body       bytea NOT NULL,
         PRIMARY KEY (session_id, idx)
     );",
    // 5: one row per append, not per event, and no secondary index: a row holds a run of one
    // session's consecutive events, `first_seq..=last_seq`, keyed by (session, last
    // sequence), its bodies as JSON lines, and what the filters need to skip it whole: its
    // events' earliest and latest timestamps, their distinct types and run ids (JSON arrays).
    // The ids move to a table of their own, one row per event keyed by the id's 128 bits (16
    // bytes, big-endian), naming the (session, sequence) that stored it. No foreign keys:
    // sessions are never deleted, and the writer holds a session's row while it appends. The
    // migration keeps each stored event as a row of its own.
    "CREATE TABLE agentwire.events_v5 (
         session_id text NOT NULL,
         last_seq   bigint NOT NULL,
         first_seq  bigint NOT NULL CHECK (first_seq >= 1 AND first_seq <= last_seq),
         min_ms     bigint NOT NULL,
         max_ms     bigint NOT NULL,
         types      jsonb NOT NULL,
         runs       jsonb NOT NULL,
         body       text NOT NULL,
         PRIMARY KEY (session_id, last_seq)
     );
     CREATE TABLE agentwire.event_ids (
         id         bytea PRIMARY KEY,
         session_id text NOT NULL,
         seq        bigint NOT NULL
     );
     INSERT INTO agentwire.events_v5
         (session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body)
         SELECT session_id, seq, seq, timestamp_ms, timestamp_ms, jsonb_build_array(type),
                CASE WHEN run_id IS NULL THEN '[]' ELSE jsonb_build_array(run_id) END, body
         FROM agentwire.events;
     INSERT INTO agentwire.event_ids (id, session_id, seq)
         SELECT decode(substr(id, 5), 'hex'), session_id, seq FROM agentwire.events;
     DROP TABLE agentwire.events;
     ALTER TABLE agentwire.events_v5 RENAME TO events;
     ALTER TABLE agentwire.events RENAME CONSTRAINT events_v5_pkey TO events_pkey;
     DO $$ BEGIN
         IF EXISTS (SELECT FROM pg_settings WHERE name = 'default_toast_compression'
                    AND 'lz4' = ANY (enumvals)) THEN
             ALTER TABLE agentwire.events ALTER COLUMN body SET COMPRESSION lz4;
         END IF;
     END $$;",
];

/// The advisory lock key that serializes migrations ("agentwir" in ASCII).
const MIGRATION_LOCK: i64 = 0x6167_656e_7477_6972;
/// The notification channel; its payload is never read.
const CHANNEL: &str = "agentwire_commits";

/// Requests waiting for the writer before `append` callers wait for room.
const QUEUE: usize = 1024;
/// At most this many requests share one transaction.
const MAX_GROUP: usize = 1024;
/// Times a group is run again after losing a race with another companion.
const RETRIES: usize = 16;
/// Read connections kept open.
const READERS: usize = 4;
/// Distinct read statements prepared per read connection (one per filter shape).
const STATEMENTS: usize = 64;
/// Room in the [`Committed`] broadcast before slow receivers lag (and must re-read).
const BROADCAST: usize = 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The listener's reconnect delays.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// The PostgreSQL store. See the module docs for its shape; share it as `Arc<dyn Store>`.
pub struct PostgresStore {
    epoch: String,
    /// Where it connects, without credentials (for `Debug` and the CLI).
    target: String,
    /// `None` only while dropping.
    requests: Option<mpsc::Sender<Request>>,
    readers: Arc<Readers>,
    announcer: Arc<Announcer>,
    listener: JoinHandle<()>,
    commits: Arc<AtomicU64>,
    saver: Arc<Saver>,
}

impl PostgresStore {
    /// The `schema_version` this build migrates to.
    pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

    /// Connects to the database at `url` (`postgres://user@127.0.0.1:5432/db`, or a Unix
    /// socket directory: `postgres://user@%2Fvar%2Frun%2Fpostgresql/db`), migrates it, and
    /// starts the writer and the listener on the current tokio runtime.
    ///
    /// A database whose schema is newer than this build is refused, and so is a server that is
    /// not on this machine (no TLS; see the module docs).
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let mut config: Config = url
            .parse()
            .map_err(|e| StoreError::Database(format!("bad PostgreSQL URL: {e}")))?;
        check_local(&config)?;
        config
            .application_name("agentwire")
            .connect_timeout(CONNECT_TIMEOUT);
        let target = describe_target(&config);

        let mut client = connect(&config).await?;
        let epoch = migrate(&mut client).await?;
        let writer = Writer::new(config.clone(), client).await?;

        let (committed, _) = broadcast::channel(BROADCAST);
        let announcer = Arc::new(Announcer {
            known: Mutex::new(HashMap::new()),
            committed,
        });
        // LISTEN before the first read of the sessions, so no commit falls between them.
        let listening = Listening::start(&config).await?;
        listening.catch_up(&announcer, false).await?;
        let listener = tokio::spawn(listen(config.clone(), announcer.clone(), listening));

        let (requests, rx) = mpsc::channel(QUEUE);
        let commits = writer.commits.clone();
        tokio::spawn(writer.run(rx, announcer.clone()));
        Ok(PostgresStore {
            epoch,
            target,
            requests: Some(requests),
            readers: Arc::new(Readers::new(config.clone())),
            announcer,
            listener,
            commits,
            saver: Arc::new(Saver {
                config,
                conn: tokio::sync::Mutex::new(None),
            }),
        })
    }

    /// Where this store connects, without credentials: `postgres://user@host:port/db`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// How many write transactions this store's writer has committed. Under concurrent appends
    /// this stays below the number of appends: that is group commit.
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

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Closing the channel lets the writer commit what is queued and end.
        self.requests.take();
        self.listener.abort();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        StoreError::Database(describe(&e))
    }
}

/// The error with the server's message, or with its cause (tokio-postgres's own `Display`
/// says only "db error" or "error connecting to server").
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.to_string();
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Refuses a server that is not on this machine: connections carry no TLS.
fn check_local(config: &Config) -> Result<(), StoreError> {
    let refuse = |host: &str| {
        Err(StoreError::Database(format!(
            "PostgreSQL host {host:?} is not on this machine; agentwire connects without TLS, \
             so only a loopback address or a Unix socket is allowed (tunnel to a remote server)"
        )))
    };
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err(StoreError::Database(
            "the PostgreSQL URL names no host (use 127.0.0.1 or a socket directory)".into(),
        ));
    }
    for host in config.get_hosts() {
        match host {
            Host::Tcp(name) => {
                let loopback = name.eq_ignore_ascii_case("localhost")
                    || name
                        .trim_matches(|c| c == '[' || c == ']')
                        .parse::<IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    return refuse(name);
                }
            }
            Host::Unix(_) => {}
        }
    }
    for addr in config.get_hostaddrs() {
        if !addr.is_loopback() {
            return refuse(&addr.to_string());
        }
    }
    Ok(())
}

/// A run id as its (filter-only) column holds it: PostgreSQL text cannot hold NUL, so NUL
/// becomes U+FFFD, in the column and in the filter alike. The body keeps the exact value.
fn column_text(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// Refuses a session field that PostgreSQL text cannot hold, before it reaches a group (where
/// the server's error would fail every request of the group).
fn check_text(field: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::Database(format!(
            "{field} {value:?} contains NUL, which PostgreSQL text cannot hold"
        )));
    }
    Ok(())
}

/// `postgres://user@host:port/db`, never the password.
fn describe_target(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(dir)) => dir.display().to_string(),
        None => config
            .get_hostaddrs()
            .first()
            .map_or_else(String::new, IpAddr::to_string),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db}")
}

/// Opens a connection whose driver runs on its own task. Commits made on it are durable when
/// they return, whatever the server's default (`synchronous_commit = on`).
async fn connect(config: &Config) -> Result<Client, StoreError> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; `is_closed` tells callers.
        let _ = connection.await;
    });
    client.batch_execute("SET synchronous_commit = on").await?;
    Ok(client)
}

/// Brings the schema to [`PostgresStore::SCHEMA_VERSION`] in one transaction and returns the
/// epoch, drawing it when the log is new.
async fn migrate(client: &mut Client) -> Result<String, StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS agentwire;
         CREATE TABLE IF NOT EXISTS agentwire.schema_version (
             only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
             version  integer NOT NULL
         );",
    )
    .await?;
    let version: i32 = tx
        .query_opt("SELECT version FROM agentwire.schema_version", &[])
        .await?
        .map_or(0, |row| row.get(0));
    if version > PostgresStore::SCHEMA_VERSION {
        return Err(StoreError::Database(format!(
            "schema version {version} is newer than this build's {}",
            PostgresStore::SCHEMA_VERSION
        )));
    }
    let from = usize::try_from(version)
        .map_err(|_| StoreError::Corrupt(format!("schema version {version}")))?;
    for step in &MIGRATIONS[from..] {
        tx.batch_execute(step).await?;
    }
    tx.execute(
        "INSERT INTO agentwire.schema_version (version) VALUES ($1)
         ON CONFLICT (only_row) DO UPDATE SET version = excluded.version",
        &[&PostgresStore::SCHEMA_VERSION],
    )
    .await?;
    tx.execute(
        "INSERT INTO agentwire.meta (key, value) VALUES ('epoch', $1)
         ON CONFLICT (key) DO NOTHING",
        &[&new_epoch()?],
    )
    .await?;
    let epoch: String = tx
        .query_one("SELECT value FROM agentwire.meta WHERE key = 'epoch'", &[])
        .await?
        .get(0);
    tx.commit().await?;
    Ok(epoch)
}

// ---------------------------------------------------------------------------------------------
// Announcements.

/// Tells subscribers of sessions that moved, once per new latest sequence, whether the writer
/// (after its COMMIT) or the listener (after a re-read) saw it first.
struct Announcer {
    /// The latest sequence announced per session.
    known: Mutex<HashMap<String, u64>>,
    committed: broadcast::Sender<Committed>,
}

impl Announcer {
    /// Records `latest` for the session; tells subscribers if it moved and `tell` is set.
    fn observe(&self, session_id: &str, latest: u64, tell: bool) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let seen = known.get(session_id).copied().unwrap_or(0);
        if latest <= seen {
            return;
        }
        known.insert(session_id.to_owned(), latest);
        if tell {
            // Sent under the lock, so each session's announcements leave in order.
            let _ = self.committed.send(Committed {
                session_id: session_id.to_owned(),
                latest_sequence: latest,
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The listener.

/// A connection that has run `LISTEN`, and the wake-ups its notifications turn into.
struct Listening {
    client: Client,
    sessions: Statement,
    /// One message per burst of notifications; closed when the connection ends.
    wake: mpsc::Receiver<()>,
}

impl Listening {
    async fn start(config: &Config) -> Result<Listening, StoreError> {
        let (client, mut connection) = config.connect(NoTls).await?;
        let (wake_tx, wake) = mpsc::channel(1);
        tokio::spawn(async move {
            // Drives the connection (the client's queries too) and turns notifications into
            // wake-ups. The payload is never read.
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let AsyncMessage::Notification(_) = message {
                    // A full channel already holds a wake-up that will see this commit.
                    let _ = wake_tx.try_send(());
                }
            }
        });
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        let sessions = client
            .prepare("SELECT id, latest_seq FROM agentwire.sessions")
            .await?;
        Ok(Listening {
            client,
            sessions,
            wake,
        })
    }

    /// Re-reads every session's latest sequence; announces the moves if `tell`.
    async fn catch_up(&self, announcer: &Announcer, tell: bool) -> Result<(), StoreError> {
        for row in self.client.query(&self.sessions, &[]).await? {
            let latest: i64 = row.try_get(1)?;
            announcer.observe(row.try_get(0)?, latest.max(0) as u64, tell);
        }
        Ok(())
    }
}

/// The listener task: re-reads on every wake-up; reconnects (and re-reads) when the connection
/// ends. Runs until the store aborts it.
async fn listen(config: Config, announcer: Arc<Announcer>, first: Listening) {
    let mut listening = Some(first);
    let mut backoff = BACKOFF_MIN;
    loop {
        let current = match listening.take() {
            Some(l) => Ok(l),
            None => Listening::start(&config).await,
        };
        if let Ok(mut l) = current {
            // Commits made while disconnected were not heard: re-read first.
            while l.catch_up(&announcer, true).await.is_ok() {
                backoff = BACKOFF_MIN;
                if l.wake.recv().await.is_none() {
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
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
}

impl Op {
    /// The existing session whose row this request locks, if any.
    fn locks(&self) -> Option<&str> {
        match self {
            Op::Append { session_id, .. } => Some(session_id),
            Op::SetState { id, .. }
            | Op::SetProviderSessionId { id, .. }
            | Op::Claim { id, .. } => Some(id),
            Op::CreateSession(_) | Op::Beat { .. } | Op::TakeOver { .. } => None,
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

/// Why a group did not commit.
enum GroupError {
    /// Lost a race with another companion; nothing was committed: run the group again.
    Retry,
    Failed(StoreError),
}

impl From<tokio_postgres::Error> for GroupError {
    fn from(e: tokio_postgres::Error) -> GroupError {
        match e.code() {
            Some(&SqlState::T_R_DEADLOCK_DETECTED) | Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                GroupError::Retry
            }
            _ => GroupError::Failed(e.into()),
        }
    }
}

impl From<StoreError> for GroupError {
    fn from(e: StoreError) -> GroupError {
        GroupError::Failed(e)
    }
}

/// A committed group: each request's answer, and the sessions that moved.
struct Outcome {
    results: Vec<Result<Done, StoreError>>,
    moved: Vec<(String, u64)>,
    /// Whether the group looked its ids up and found some stored.
    found: bool,
}

/// The writer's connection and its prepared statements (prepared again on reconnect).
struct WriteConn {
    client: Client,
    lock: Statement,
    find: Statement,
    write: Statement,
    create: Statement,
    set_state: Statement,
    set_provider_session_id: Statement,
    claim: Statement,
    beat: Statement,
    take_over: Statement,
}

impl WriteConn {
    async fn prepare(client: Client) -> Result<WriteConn, StoreError> {
        Ok(WriteConn {
            lock: client
                .prepare(
                    "SELECT id, latest_seq FROM agentwire.sessions WHERE id = ANY($1::text[])
                     ORDER BY id FOR NO KEY UPDATE",
                )
                .await?,
            // Each stored id with the row that holds its event (the first row of its session
            // whose last sequence reaches it).
            find: client
                .prepare(
                    "SELECT i.id, i.session_id, i.seq, e.first_seq, e.body
                     FROM agentwire.event_ids AS i
                     LEFT JOIN LATERAL (
                         SELECT first_seq, body FROM agentwire.events AS e
                         WHERE e.session_id = i.session_id AND e.last_seq >= i.seq
                         ORDER BY e.last_seq LIMIT 1
                     ) AS e ON true
                     WHERE i.id = ANY($1::bytea[])",
                )
                .await?,
            // The group's rows (one per append), its ids, its sessions' new latest sequences
            // and the wake-up, in one statement (data-modifying CTEs run to completion whether
            // read or not).
            write: client
                .prepare(&format!(
                    "WITH appended AS (
                         INSERT INTO agentwire.events
                             (session_id, last_seq, first_seq, min_ms, max_ms, types, runs, body)
                         SELECT u.s, u.l, u.f, u.lo, u.hi, u.t::jsonb, u.r::jsonb, u.b
                         FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[],
                                     $5::int8[], $6::text[], $7::text[], $8::text[])
                              AS u (s, l, f, lo, hi, t, r, b)
                     ), ids AS (
                         INSERT INTO agentwire.event_ids (id, session_id, seq)
                         SELECT * FROM unnest($9::bytea[], $10::text[], $11::int8[])
                     ), advanced AS (
                         UPDATE agentwire.sessions AS s SET latest_seq = u.seq
                         FROM unnest($12::text[], $13::int8[]) AS u (id, seq)
                         WHERE s.id = u.id
                     )
                     SELECT pg_notify('{CHANNEL}', '')"
                ))
                .await?,
            create: client
                .prepare(
                    "INSERT INTO agentwire.sessions
                         (id, provider, cwd, state, provider_session_id, created_at, updated_at,
                          node)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (id) DO NOTHING",
                )
                .await?,
            set_state: client
                .prepare("UPDATE agentwire.sessions SET state = $2, updated_at = $3 WHERE id = $1")
                .await?,
            set_provider_session_id: client
                .prepare("UPDATE agentwire.sessions SET provider_session_id = $2 WHERE id = $1")
                .await?,
            claim: client
                .prepare(
                    "UPDATE agentwire.sessions SET node = $2, state = 'starting', updated_at = $3
                     WHERE id = $1 AND state NOT IN ('starting', 'running')",
                )
                .await?,
            beat: client
                .prepare(
                    "INSERT INTO agentwire.nodes (name, seen_at) VALUES ($1, $2)
                     ON CONFLICT (name) DO UPDATE
                     SET seen_at = greatest(agentwire.nodes.seen_at, excluded.seen_at)",
                )
                .await?,
            take_over: client
                .prepare(&format!(
                    "UPDATE agentwire.sessions AS s SET node = $1, state = 'starting',
                         updated_at = $3
                     WHERE s.state IN ('starting', 'running') AND s.node != $1
                       AND coalesce((SELECT n.seen_at FROM agentwire.nodes AS n
                                     WHERE n.name = s.node), 0) < $2
                     RETURNING {SESSION_COLUMNS}"
                ))
                .await?,
            client,
        })
    }
}

struct Writer {
    config: Config,
    /// `None` after the connection failed, until the next group reconnects.
    conn: Option<WriteConn>,
    commits: Arc<AtomicU64>,
    /// Whether the next group looks its ids up before inserting them: only after a group
    /// found one stored (or collided with one). Otherwise the insert's own unique check is the
    /// lookup, and a collision runs the group again with the lookup. Only a guess about the
    /// next group, never about the data: it can cost a group one try more, nothing else.
    find_first: bool,
}

impl Writer {
    async fn new(config: Config, client: Client) -> Result<Writer, StoreError> {
        Ok(Writer {
            config,
            conn: Some(WriteConn::prepare(client).await?),
            commits: Arc::new(AtomicU64::new(0)),
            find_first: false,
        })
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Request>, announcer: Arc<Announcer>) {
        while let Some(first) = rx.recv().await {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            self.commit_group(group, &announcer).await;
        }
    }

    /// Runs a group in one transaction (again, after a lost race), then answers each request,
    /// then tells subscribers.
    async fn commit_group(&mut self, group: Vec<Request>, announcer: &Announcer) {
        let (ops, replies): (Vec<Op>, Vec<_>) = group.into_iter().map(|r| (r.op, r.reply)).unzip();
        let mut outcome = Err(StoreError::Database(format!(
            "gave up after {RETRIES} conflicts with other companions"
        )));
        let mut find = self.find_first;
        // One try more than RETRIES when the first did not look the ids up.
        for _ in 0..=RETRIES + usize::from(!find) {
            match self.try_group(&ops, find).await {
                Ok(done) => {
                    outcome = Ok(done);
                    break;
                }
                Err(GroupError::Retry) => {
                    find = true;
                    continue;
                }
                Err(GroupError::Failed(e)) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        match outcome {
            Ok(Outcome {
                results,
                moved,
                found,
            }) => {
                self.find_first = found;
                self.commits.fetch_add(1, Ordering::Relaxed);
                for (reply, result) in replies.into_iter().zip(results) {
                    // A caller that stopped waiting still had its request committed.
                    let _ = reply.send(result);
                }
                for (session_id, latest) in moved {
                    announcer.observe(&session_id, latest, true);
                }
            }
            Err(e) => {
                if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
                    self.conn = None;
                }
                let message = e.to_string();
                for reply in replies {
                    let _ = reply.send(Err(StoreError::Database(message.clone())));
                }
            }
        }
    }

    async fn try_group(&mut self, ops: &[Op], find: bool) -> Result<Outcome, GroupError> {
        if self.conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            self.conn = None;
            let client = connect(&self.config).await?;
            self.conn = Some(WriteConn::prepare(client).await?);
        }
        let conn = self.conn.as_ref().expect("connected above");
        let outcome = run_group(conn, ops, find).await;
        if outcome.is_err() {
            // Whatever failed, the connection is left outside a transaction (a ROLLBACK
            // outside one is only a warning); a broken connection is replaced next group.
            let _ = conn.client.batch_execute("ROLLBACK").await;
        }
        outcome
    }
}

/// One try of a group: BEGIN, the locks (and, if `find`, the stored ids) in one round trip;
/// the requests other than appends one by one; then the group's rows and COMMIT in one more.
/// A row that collides with a stored id (one this try did not look up, or one another
/// companion committed meanwhile) fails the insert (a unique violation): the COMMIT after it
/// then only rolls back, and the group runs again, looking its ids up.
async fn run_group(conn: &WriteConn, ops: &[Op], find: bool) -> Result<Outcome, GroupError> {
    let tx = &conn.client;

    // Lock the sessions this group touches, in one order for every companion.
    let mut ids: Vec<&str> = ops.iter().filter_map(Op::locks).collect();
    ids.sort_unstable();
    ids.dedup();
    // The events already stored under this group's ids.
    let event_ids: Vec<&[u8]> = match find {
        false => Vec::new(),
        true => ops
            .iter()
            .filter_map(|op| match op {
                Op::Append { batch, .. } => Some(batch.keys.iter().map(|k| &k[..])),
                _ => None,
            })
            .flatten()
            .collect(),
    };
    // BEGIN and both reads in one round trip: tokio-postgres sends queries polled
    // together back to back, in the order first polled.
    let begin = tx.batch_execute("BEGIN");
    let lock = async {
        match ids.is_empty() {
            true => Ok(Vec::new()),
            false => tx.query(&conn.lock, &[&ids]).await,
        }
    };
    let find = async {
        match event_ids.is_empty() {
            true => Ok(Vec::new()),
            false => tx.query(&conn.find, &[&event_ids]).await,
        }
    };
    let (began, locked, found) = futures_util::future::join3(begin, lock, find).await;
    began?;
    let (locked, found) = (locked?, found?);
    let mut latest: HashMap<String, u64> = HashMap::new();
    for row in locked {
        let seq: i64 = row.try_get(1)?;
        latest.insert(row.try_get(0)?, seq.max(0) as u64);
    }
    let before = latest.clone();
    let mut stored: HashMap<u128, StoredId, BuildIdHasher> = HashMap::default();
    for row in &found {
        let key: &[u8] = row.try_get(0)?;
        let key = <[u8; 16]>::try_from(key)
            .map_err(|_| StoreError::Corrupt(format!("a stored id of {} bytes", key.len())))?;
        let first: Option<i64> = row.try_get(3)?;
        let body: Option<String> = row.try_get(4)?;
        stored.insert(
            u128::from_be_bytes(key),
            StoredId {
                session: row.try_get(1)?,
                seq: row.try_get(2)?,
                row: first.zip(body),
            },
        );
    }

    let mut plan = Plan {
        latest,
        stored,
        fresh: HashMap::default(),
        rows: Rows::default(),
    };
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        let result = match op {
            Op::Append { session_id, batch } => plan
                .append(results.len(), session_id, batch, &results)
                .map(Done::Appended),
            Op::CreateSession(record) => {
                let n = tx
                    .execute(
                        &conn.create,
                        &[
                            &record.id,
                            &record.provider,
                            &record.cwd,
                            &record.state.as_str(),
                            &record.provider_session_id,
                            &record.created_at.unix_millis(),
                            &record.updated_at.unix_millis(),
                            &record.node,
                        ],
                    )
                    .await?;
                if n == 0 {
                    Err(StoreError::SessionExists(record.id.clone()))
                } else {
                    plan.latest.insert(record.id.clone(), 0);
                    Ok(Done::Session(record.clone()))
                }
            }
            Op::SetState { id, state, now } => {
                let params: [&(dyn ToSql + Sync); 3] = [id, &state.as_str(), &now.unix_millis()];
                match tx.execute(&conn.set_state, &params).await? {
                    0 => Err(StoreError::UnknownSession(id.clone())),
                    _ => Ok(Done::Unit),
                }
            }
            Op::SetProviderSessionId {
                id,
                provider_session_id,
            } => {
                let params: [&(dyn ToSql + Sync); 2] = [id, provider_session_id];
                match tx.execute(&conn.set_provider_session_id, &params).await? {
                    0 => Err(StoreError::UnknownSession(id.clone())),
                    _ => Ok(Done::Unit),
                }
            }
            Op::Claim { id, node, now } => {
                let params: [&(dyn ToSql + Sync); 3] = [id, node, &now.unix_millis()];
                match tx.execute(&conn.claim, &params).await? {
                    // The row is locked above: absent from the lock, it does not exist.
                    0 if !plan.latest.contains_key(id) => {
                        Err(StoreError::UnknownSession(id.clone()))
                    }
                    n => Ok(Done::Claimed(n == 1)),
                }
            }
            Op::Beat { node, now } => {
                let params: [&(dyn ToSql + Sync); 2] = [node, &now.unix_millis()];
                tx.execute(&conn.beat, &params).await?;
                Ok(Done::Unit)
            }
            Op::TakeOver { node, cutoff, now } => {
                let params: [&(dyn ToSql + Sync); 3] =
                    [node, &cutoff.unix_millis(), &now.unix_millis()];
                let rows = tx.query(&conn.take_over, &params).await?;
                rows.iter()
                    .map(session_row)
                    .collect::<Result<Vec<_>, _>>()
                    .map(Done::TakenOver)
            }
        };
        results.push(result);
    }

    let found = !found.is_empty();
    let moved: Vec<(String, u64)> = plan
        .latest
        .iter()
        .filter(|(id, &seq)| seq > before.get(*id).copied().unwrap_or(0))
        .map(|(id, &seq)| (id.clone(), seq))
        .collect();
    if !moved.is_empty() {
        plan.rows.sort_ids();
        let rows = &plan.rows;
        let (sessions, seqs): (Vec<&str>, Vec<i64>) = moved
            .iter()
            .map(|(id, seq)| (id.as_str(), *seq as i64))
            .unzip();
        let params: [&(dyn ToSql + Sync); 13] = [
            &rows.sessions,
            &rows.lasts,
            &rows.firsts,
            &rows.min_ms,
            &rows.max_ms,
            &rows.types,
            &rows.runs,
            &rows.bodies,
            &rows.ids,
            &rows.id_sessions,
            &rows.id_seqs,
            &sessions,
            &seqs,
        ];
        let write = tx.execute(&conn.write, &params);
        // If the insert fails, this COMMIT ends the failed transaction: it rolls back.
        let commit = tx.batch_execute("COMMIT");
        let (written, committed) = futures_util::future::join(write, commit).await;
        match written {
            // An id stored before this try (that it did not look up), or that another
            // companion committed after `find` read: its number would be a gap. Nothing
            // was committed; run again.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                return Err(GroupError::Retry)
            }
            other => other?,
        };
        committed?;
        return Ok(Outcome {
            results,
            moved,
            found,
        });
    }
    tx.batch_execute("COMMIT").await?;
    Ok(Outcome {
        results,
        moved,
        found,
    })
}

/// An append made ready for the writer by the appending task ([`PostgresStore::append`]):
/// each event's body encoded (with sequence 0: the row's sequences are authoritative) and
/// joined into the row's body, the ids' bits packed, the summary taken. When the batch holds
/// no stored or repeated id (nearly always) the writer sends `body` as it is and does no
/// per-event work but numbering and the id lookups in memory.
struct Batch {
    events: Vec<Event>,
    /// Each event's id, its 128 bits big-endian (the key of `event_ids`).
    keys: Vec<[u8; 16]>,
    /// The bodies, one JSON line each, `\n` between them (JSON has no raw newline).
    body: String,
    /// Each event's line in `body`.
    lines: Vec<std::ops::Range<usize>>,
    /// Of every event of the batch.
    summary: Summary,
}

impl Batch {
    fn new(events: Vec<Event>) -> Batch {
        let mut body = String::with_capacity(events.len() * 320);
        let mut keys = Vec::with_capacity(events.len());
        let mut lines = Vec::with_capacity(events.len());
        let mut summary = Summary::default();
        let events: Vec<Event> = (events.into_iter())
            .map(|event| {
                let event = event.into_sequenced(0);
                if !body.is_empty() {
                    body.push('\n');
                }
                let start = body.len();
                event.write_json(&mut body);
                lines.push(start..body.len());
                keys.push(event.id().bits().to_be_bytes());
                summary.add(&event, keys.len() == 1);
                event
            })
            .collect();
        Batch {
            events,
            keys,
            body,
            lines,
            summary,
        }
    }
}

impl Summary {
    /// The `types` and `runs` columns: JSON arrays of strings, the runs as the filter
    /// compares them ([`column_text`]: jsonb cannot hold NUL either).
    fn columns(&self) -> (String, String) {
        let json = |v: &[String]| serde_json::to_string(v).unwrap_or_else(|_| "[]".to_owned());
        let mut runs: Vec<String> = Vec::with_capacity(self.runs.len());
        for run in self.runs.iter().map(|run| column_text(run)) {
            if !runs.contains(&run) {
                runs.push(run);
            }
        }
        (
            serde_json::to_string(&self.types).unwrap_or_else(|_| "[]".to_owned()),
            json(&runs),
        )
    }
}

/// An id the transaction found stored, with the row that holds its event (`None`: no row
/// reaches its sequence, which is corrupt).
struct StoredId {
    session: String,
    seq: i64,
    /// `(first_seq, body)` of the row.
    row: Option<(i64, String)>,
}

impl StoredId {
    fn event(&self) -> Result<Event, StoreError> {
        let corrupt = |why: &str| {
            StoreError::Corrupt(format!(
                "session {:?} seq {}: {why}",
                self.session, self.seq
            ))
        };
        let (first, body) = self
            .row
            .as_ref()
            .ok_or_else(|| corrupt("no row holds it"))?;
        let line = usize::try_from(self.seq - first)
            .ok()
            .and_then(|n| body.split('\n').nth(n))
            .ok_or_else(|| corrupt("missing from its row"))?;
        decode(&self.session, self.seq, line)
    }
}

/// The new rows of a group, as the columns of the write statement's `unnest` arrays: one
/// per append (its events' run) and one per new id.
#[derive(Default)]
struct Rows<'a> {
    sessions: Vec<&'a str>,
    lasts: Vec<i64>,
    firsts: Vec<i64>,
    min_ms: Vec<i64>,
    max_ms: Vec<i64>,
    types: Vec<String>,
    runs: Vec<String>,
    bodies: Vec<std::borrow::Cow<'a, str>>,
    ids: Vec<&'a [u8]>,
    id_sessions: Vec<&'a str>,
    id_seqs: Vec<i64>,
}

impl Rows<'_> {
    /// Puts the id rows in key order, so the unique index takes them leaf after leaf.
    fn sort_ids(&mut self) {
        let mut order: Vec<usize> = (0..self.ids.len()).collect();
        order.sort_unstable_by_key(|&i| self.ids[i]);
        self.ids = order.iter().map(|&i| self.ids[i]).collect();
        self.id_sessions = order.iter().map(|&i| self.id_sessions[i]).collect();
        self.id_seqs = order.iter().map(|&i| self.id_seqs[i]).collect();
    }
}

/// A group's writes, planned in memory in request order over what the transaction read.
struct Plan<'a> {
    /// Latest sequence per locked (or created) session, as this group leaves it so far.
    latest: HashMap<String, u64>,
    /// The stored events of the group's ids that the transaction looked up.
    stored: HashMap<u128, StoredId, BuildIdHasher>,
    /// Events this group numbered, by id: (request, position in its answer).
    fresh: HashMap<u128, (usize, usize), BuildIdHasher>,
    rows: Rows<'a>,
}

impl<'a> Plan<'a> {
    /// Numbers one append's new events (request `index` of the group; `answered` holds the
    /// answers of the requests before it); adds nothing unless it succeeds.
    fn append(
        &mut self,
        index: usize,
        session_id: &'a str,
        batch: &'a Batch,
        answered: &[Result<Done, StoreError>],
    ) -> Result<Vec<Appended>, StoreError> {
        let latest = *self
            .latest
            .get(session_id)
            .ok_or_else(|| StoreError::UnknownSession(session_id.to_owned()))?;
        let mut seq = latest;
        let mut out: Vec<Appended> = Vec::with_capacity(batch.events.len());
        // Id -> index in `out` of its first occurrence in this batch.
        let mut seen: HashMap<u128, usize, BuildIdHasher> =
            HashMap::with_capacity_and_hasher(batch.events.len(), BuildIdHasher);
        // The positions (in the batch) of the events stored now.
        let mut kept: Vec<usize> = Vec::with_capacity(batch.events.len());
        for (i, (event, key)) in batch.events.iter().zip(&batch.keys).enumerate() {
            let key = u128::from_be_bytes(*key);
            if let Some(&first) = seen.get(&key) {
                out.push(Appended {
                    event: out[first].event.clone(),
                    duplicate: true,
                });
                continue;
            }
            seen.insert(key, out.len());
            let earlier = match (self.fresh.get(&key), self.stored.get(&key)) {
                (Some(&(request, at)), _) => match &answered[request] {
                    Ok(Done::Appended(appended)) => Some(appended[at].event.clone()),
                    _ => unreachable!("a fresh id comes from an answered append"),
                },
                (None, Some(stored)) => Some(stored.event()?),
                (None, None) => None,
            };
            if let Some(event) = earlier {
                out.push(Appended {
                    event,
                    duplicate: true,
                });
                continue;
            }
            seq += 1;
            kept.push(i);
            out.push(Appended {
                event: event.clone().into_sequenced(seq),
                duplicate: false,
            });
        }
        self.latest.insert(session_id.to_owned(), seq);
        if kept.is_empty() {
            return Ok(out);
        }
        let rows = &mut self.rows;
        let (body, summary) = if kept.len() == batch.events.len() {
            (std::borrow::Cow::Borrowed(batch.body.as_str()), None)
        } else {
            // Rebuilt without the events stored before.
            let mut body = String::with_capacity(batch.body.len());
            let mut summary = Summary::default();
            for (n, &i) in kept.iter().enumerate() {
                if n > 0 {
                    body.push('\n');
                }
                body.push_str(&batch.body[batch.lines[i].clone()]);
                summary.add(&batch.events[i], n == 0);
            }
            (std::borrow::Cow::Owned(body), Some(summary))
        };
        let summary = summary.as_ref().unwrap_or(&batch.summary);
        let (types, runs) = summary.columns();
        rows.sessions.push(session_id);
        rows.lasts.push(seq as i64);
        rows.firsts.push(latest as i64 + 1);
        rows.min_ms.push(summary.min_ms);
        rows.max_ms.push(summary.max_ms);
        rows.types.push(types);
        rows.runs.push(runs);
        rows.bodies.push(body);
        for (n, &i) in kept.iter().enumerate() {
            let key = &batch.keys[i];
            rows.ids.push(&key[..]);
            rows.id_sessions.push(session_id);
            rows.id_seqs.push((latest + 1) as i64 + n as i64);
        }
        for (at, appended) in out.iter().enumerate().filter(|(_, a)| !a.duplicate) {
            self.fresh.insert(appended.event.id().bits(), (index, at));
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Projection saves.

/// The connection projection saves run on, beside the writer's: a save is large and not
/// urgent, so it never holds up a group of appends (nor holds their session locks). One save
/// at a time per store; saves from other companions serialize on the session's projections
/// row, which each save locks first (its upsert), then its item rows: last writer wins, whole.
struct Saver {
    config: Config,
    /// `None` until the first save, and after the connection failed.
    conn: tokio::sync::Mutex<Option<SaveConn>>,
}

struct SaveConn {
    client: Client,
    checkpoint: Statement,
    items: Statement,
}

impl SaveConn {
    async fn prepare(client: Client) -> Result<SaveConn, StoreError> {
        Ok(SaveConn {
            checkpoint: client
                .prepare(
                    "INSERT INTO agentwire.projections (session_id, format, after, items, body)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (session_id) DO UPDATE SET format = excluded.format,
                         after = excluded.after, items = excluded.items, body = excluded.body",
                )
                .await?,
            items: client
                .prepare(
                    "INSERT INTO agentwire.projected_items (session_id, idx, format, body)
                     SELECT $1, $3::int8 + u.n - 1, $2, u.body
                     FROM unnest($4::bytea[]) WITH ORDINALITY AS u (body, n)
                     ON CONFLICT (session_id, idx) DO UPDATE
                     SET format = excluded.format, body = excluded.body",
                )
                .await?,
            client,
        })
    }
}

/// A count or index as a `bigint` column holds it; past `i64::MAX` is refused.
fn sql_int(what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Database(format!("{what} {n} is too large to store")))
}

impl Saver {
    /// One transaction in one round trip: BEGIN, the checkpoint's upsert (which locks the
    /// session's projections row, or finds the session unknown), every item in one upsert from
    /// an `unnest` array, COMMIT, pipelined. If a statement fails, the COMMIT behind it only
    /// ends the failed transaction.
    async fn save(
        &self,
        session_id: &str,
        from: u64,
        items: &[Vec<u8>],
        checkpoint: &StoredProjection,
    ) -> Result<(), StoreError> {
        check_text("session id", session_id)?;
        let format = i64::from(checkpoint.format);
        let after = sql_int("after", checkpoint.after)?;
        let count = sql_int("items", checkpoint.items)?;
        let first = sql_int("from", from)?;
        sql_int("from + items", from.saturating_add(items.len() as u64))?;
        let mut conn = self.conn.lock().await;
        let mut result = Err(StoreError::Database(format!(
            "gave up after {RETRIES} conflicts with other companions"
        )));
        for _ in 0..=RETRIES {
            if conn.as_ref().is_none_or(|c| c.client.is_closed()) {
                *conn = None;
                *conn = Some(SaveConn::prepare(connect(&self.config).await?).await?);
            }
            let c = conn.as_ref().expect("connected above");
            let begin = c.client.batch_execute("BEGIN");
            let params: [&(dyn ToSql + Sync); 5] =
                [&session_id, &format, &after, &count, &checkpoint.body];
            let upsert = c.client.execute(&c.checkpoint, &params);
            let rows = async {
                match items.is_empty() {
                    true => Ok(0),
                    false => {
                        let params: [&(dyn ToSql + Sync); 4] =
                            [&session_id, &format, &first, &items];
                        c.client.execute(&c.items, &params).await
                    }
                }
            };
            let commit = c.client.batch_execute("COMMIT");
            let (began, upserted, wrote, committed) =
                futures_util::future::join4(begin, upsert, rows, commit).await;
            let outcome = began.and(upserted).and(wrote).and(committed).map(|_| ());
            match outcome {
                Ok(()) => return Ok(()),
                Err(e) => {
                    // Out of any transaction (a ROLLBACK outside one is only a warning).
                    let _ = c.client.batch_execute("ROLLBACK").await;
                    match e.code() {
                        Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
                            return Err(StoreError::UnknownSession(session_id.to_owned()))
                        }
                        Some(&SqlState::T_R_DEADLOCK_DETECTED)
                        | Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                            result = Err(e.into());
                            continue;
                        }
                        _ => {
                            if c.client.is_closed() {
                                *conn = None;
                            }
                            return Err(e.into());
                        }
                    }
                }
            }
        }
        result
    }
}

async fn read_projection(
    reader: &mut Reader,
    session_id: &str,
    format: u32,
) -> Result<Option<StoredProjection>, StoreError> {
    let rows = reader
        .query(
            "SELECT format, after, items, body FROM agentwire.projections WHERE session_id = $1",
            &[&session_id],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let row = (
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
    );
    checkpoint_row(session_id, format, row)
}

/// One query for the range; the first index missing from it (absent, or of another format)
/// is `Corrupt`, or `UnknownSession` if the session is.
async fn read_projected_items(
    reader: &mut Reader,
    session_id: &str,
    format: u32,
    from: u64,
    to: u64,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let rows = reader
        .query(
            "SELECT idx, body FROM agentwire.projected_items
             WHERE session_id = $1 AND idx >= $2 AND idx < $3 AND format = $4
             ORDER BY idx",
            &[&session_id, &clamp(from), &clamp(to), &i64::from(format)],
        )
        .await?;
    let rows = rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?)));
    match contiguous_items::<tokio_postgres::Error>(rows, from, to)? {
        Ok(items) => Ok(items),
        Err(missing) => {
            // Distinguishes a hole from no such session.
            latest_of(reader, session_id).await?;
            Err(missing_item(session_id, format, missing, from, to))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The readers.

/// A read connection and the statements prepared on it, by SQL text.
struct Reader {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl Reader {
    async fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        if self.statements.len() >= STATEMENTS {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let statement = self.statement(sql).await?;
        Ok(self.client.query(&statement, params).await?)
    }
}

struct Readers {
    config: Config,
    idle: Mutex<Vec<Reader>>,
    permits: Arc<Semaphore>,
}

/// A reader on loan; back to the pool when dropped, unless its connection ended.
struct Loan<'a> {
    readers: &'a Readers,
    reader: Option<Reader>,
    _permit: OwnedSemaphorePermit,
}

impl std::ops::Deref for Loan<'_> {
    type Target = Reader;
    fn deref(&self) -> &Reader {
        self.reader.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Loan<'_> {
    fn deref_mut(&mut self) -> &mut Reader {
        self.reader.as_mut().expect("present until dropped")
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take().filter(|r| !r.client.is_closed()) {
            self.readers
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(reader);
        }
    }
}

impl Readers {
    fn new(config: Config) -> Readers {
        Readers {
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(READERS)),
        }
    }

    /// An idle read connection, or a new one.
    async fn take(&self) -> Result<Loan<'_>, StoreError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        // A connection that ended while idle (the server restarted) is dropped, not lent.
        let idle = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            std::iter::from_fn(|| idle.pop()).find(|r| !r.client.is_closed())
        };
        let reader = match idle {
            Some(reader) => reader,
            None => {
                let client = connect(&self.config).await?;
                client
                    .batch_execute("SET default_transaction_read_only = on")
                    .await?;
                Reader {
                    client,
                    statements: HashMap::new(),
                }
            }
        };
        Ok(Loan {
            readers: self,
            reader: Some(reader),
            _permit: permit,
        })
    }
}

const SESSION_COLUMNS: &str =
    "id, provider, cwd, state, provider_session_id, created_at, updated_at, node";

fn session_row(row: &tokio_postgres::Row) -> Result<SessionRecord, StoreError> {
    let id: String = row.try_get(0)?;
    let state: &str = row.try_get(3)?;
    let state = SessionState::parse(state)
        .ok_or_else(|| StoreError::Corrupt(format!("session {id:?}: unknown state {state:?}")))?;
    Ok(SessionRecord {
        provider: row.try_get(1)?,
        cwd: row.try_get(2)?,
        state,
        provider_session_id: row.try_get(4)?,
        created_at: Timestamp::from_unix_millis(row.try_get(5)?),
        updated_at: Timestamp::from_unix_millis(row.try_get(6)?),
        node: row.try_get(7)?,
        id,
    })
}

/// The session's latest sequence, or `UnknownSession`.
async fn latest_of(reader: &mut Reader, session_id: &str) -> Result<u64, StoreError> {
    let rows = reader
        .query(
            "SELECT latest_seq FROM agentwire.sessions WHERE id = $1",
            &[&session_id],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::UnknownSession(session_id.to_owned()))?;
    let latest: i64 = row.try_get(0)?;
    Ok(latest.max(0) as u64)
}

/// The session's rows from the first that can hold `after + 1`, in sequence order until
/// `before` or `limit`; see the module docs of `store` for the semantics. The filters skip a
/// row whose summary rules them out on the server (its body is not sent); in the rows sent,
/// each line in range is decoded and filtered. One query, unless a filter and a limit are
/// both given: then pages of rows (a few first, twice as many each time), until the limit.
/// A limit without a filter reads only the rows that can hold `after + 1 ..= after + limit`
/// (sequences are contiguous).
async fn read_events(
    reader: &mut Reader,
    session_id: &str,
    query: &EventQuery,
) -> Result<Vec<Event>, StoreError> {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut cursor = clamp(query.after.unwrap_or(0));
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(usize::MAX);
    let since = query.since.map(Timestamp::unix_millis);
    let kind = query.kind.map(|k| k.as_str());
    let run_id = query.run_id.as_deref().map(column_text);
    let filtered = since.is_some() || kind.is_some() || run_id.is_some();
    // Rows past the limit's last sequence hold nothing for an unfiltered read.
    let cap = (query.limit)
        .filter(|_| !filtered)
        .map(|n| clamp(after.saturating_add(n as u64)));
    // With a filter and a limit, rows are read by pages of this many, doubling.
    let mut page = (query.limit)
        .filter(|_| filtered)
        .map(|n| clamp(n as u64).clamp(1, 8));
    let before_bound = query.before.map(clamp);
    let mut sql = String::from(
        "SELECT first_seq, last_seq, body FROM agentwire.events
         WHERE session_id = $1 AND last_seq > $2",
    );
    // After `$1` (the session) and `$2` (the cursor, which moves from page to page).
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
    let mut clauses: Vec<(&str, &(dyn ToSql + Sync))> = Vec::new();
    if let Some(before) = &before_bound {
        clauses.push(("first_seq < $", before));
    }
    if let Some(cap) = &cap {
        clauses.push(("first_seq <= $", cap));
    }
    if let Some(since) = &since {
        clauses.push(("max_ms >= $", since));
    }
    if let Some(kind) = &kind {
        clauses.push(("types ? $", kind));
    }
    if let Some(run_id) = &run_id {
        clauses.push(("runs ? $", run_id));
    }
    for (clause, value) in clauses {
        params.push(value);
        sql.push_str(&format!(" AND {clause}{}", params.len() + 2));
    }
    sql.push_str(" ORDER BY last_seq");
    if page.is_some() {
        sql.push_str(&format!(" LIMIT ${}", params.len() + 3));
    }
    let corrupt = |seq: i64, why: &str| {
        StoreError::Corrupt(format!("session {session_id:?} seq {seq}: {why}"))
    };
    let mut events = Vec::new();
    loop {
        let (at, rows_at_most) = (cursor, page);
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&session_id, &at];
        all.extend_from_slice(&params);
        if let Some(n) = &rows_at_most {
            all.push(n);
        }
        let rows = reader.query(&sql, &all).await?;
        for row in &rows {
            if events.len() >= limit {
                break;
            }
            let (first, last): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            let first = u64::try_from(first)
                .ok()
                .filter(|&f| f >= 1 && i64::try_from(f).is_ok_and(|f| f <= last))
                .ok_or_else(|| corrupt(last, "its row starts at a bad sequence"))?;
            let body: &str = row.try_get(2)?;
            push_row_events(&mut events, session_id, query, (first, last as u64), body)?;
        }
        // Another page only if this one was full and the limit is not reached yet.
        let full = page.is_some_and(|page| rows.len() as i64 >= page);
        match rows.last() {
            Some(row) if full && events.len() < limit => {
                let last: i64 = row.try_get(1)?;
                if query.before.is_some_and(|b| last as u64 + 1 >= b) {
                    break;
                }
                cursor = last;
                page = page.map(|n| (n * 2).min(1024));
            }
            _ => break,
        }
    }
    if events.is_empty() {
        // Distinguishes "no match" from "no such session".
        latest_of(reader, session_id).await?;
    }
    Ok(events)
}

#[async_trait]
impl Store for PostgresStore {
    fn epoch(&self) -> &str {
        &self.epoch
    }

    fn subscribe(&self) -> broadcast::Receiver<Committed> {
        self.announcer.committed.subscribe()
    }

    async fn create_session(&self, session: SessionRecord) -> Result<SessionRecord, StoreError> {
        check_text("session id", &session.id)?;
        check_text("provider", &session.provider)?;
        check_text("cwd", &session.cwd)?;
        if let Some(id) = &session.provider_session_id {
            check_text("provider session id", id)?;
        }
        match self.submit(Op::CreateSession(session)).await? {
            Done::Session(record) => Ok(record),
            _ => unreachable!("the writer answers CreateSession with Session"),
        }
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM agentwire.sessions WHERE id = $1");
        let rows = self.readers.take().await?.query(&sql, &[&id]).await?;
        rows.first().map(session_row).transpose()
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let sql =
            format!("SELECT {SESSION_COLUMNS} FROM agentwire.sessions ORDER BY created_at, ord");
        let rows = self.readers.take().await?.query(&sql, &[]).await?;
        rows.iter().map(session_row).collect()
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
        check_text("provider session id", provider_session_id)?;
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
        check_text("node", node)?;
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
        check_text("node", node)?;
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
        read_events(&mut *self.readers.take().await?, session_id, query).await
    }

    async fn latest_sequence(&self, session_id: &str) -> Result<u64, StoreError> {
        latest_of(&mut *self.readers.take().await?, session_id).await
    }

    async fn wait_events(
        &self,
        session_id: &str,
        query: &EventQuery,
        wait_ms: u64,
    ) -> Result<Vec<Event>, StoreError> {
        // Subscribe before the first read: a commit after the read is then always heard.
        let mut commits = self.subscribe();
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
        read_projection(&mut *self.readers.take().await?, session_id, format).await
    }

    async fn save_projection(
        &self,
        session_id: &str,
        from: u64,
        items: Vec<Vec<u8>>,
        checkpoint: StoredProjection,
    ) -> Result<(), StoreError> {
        let saver = self.saver.clone();
        let session_id = session_id.to_owned();
        // On a task of its own: a caller that stops waiting does not cut the save short.
        tokio::spawn(async move { saver.save(&session_id, from, &items, &checkpoint).await })
            .await
            .map_err(|e| StoreError::Database(format!("save task failed: {e}")))?
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
        let mut reader = self.readers.take().await?;
        read_projected_items(&mut reader, session_id, format, from, to).await
    }
}
