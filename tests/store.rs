//! The store conformance suite, and each store's own tests.
//!
//! `conformance` is written once against `Arc<dyn Store>`: every backend runs the same
//! functions, SQLite through `sqlite_conformance!` and PostgreSQL through
//! `postgres_conformance!` (a fresh database per test on a throwaway server that the test
//! process starts itself: `tests/common/postgres.rs`). Below them, what only SQLite has
//! (migrations, the file, the writer thread and its group commit) and what only PostgreSQL
//! has (several stores on one log: concurrent appends from two companions, a tail woken
//! across them, migrations).
//!
//! Nothing here sleeps to wait: waits are on a store answer or a `Committed`, under a
//! generous deadline that only matters when something is broken.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use agentwire::companion::store::sqlite::SqliteOptions;
use agentwire::companion::store::{
    Appended, Committed, EventQuery, PostgresStore, SessionRecord, SessionState, SqliteStore,
    Store, StoreError, StoredProjection,
};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;
use tempfile::TempDir;

#[path = "common/postgres.rs"]
mod postgres;

/// How long anything may take before a test calls it broken. Never a timing assertion.
const DEADLINE: Duration = Duration::from_secs(30);

fn session(id: &str, created_ms: i64) -> SessionRecord {
    SessionRecord::new(
        id,
        "demo",
        "/tmp/project",
        SessionState::Starting,
        "local",
        Timestamp::from_unix_millis(created_ms),
    )
}

/// An event of `session` whose id is derived from `id_key` (so two sessions can share one).
fn event_with_id(
    session: &str,
    id_key: &str,
    kind: EventType,
    run: Option<&str>,
    ts_ms: i64,
) -> Event {
    let mut init = EventInit::new(
        kind,
        session,
        Provider::Demo,
        Timestamp::from_unix_millis(ts_ms),
    );
    init.id = Some(EventId::derive(&[id_key]));
    init.run_id = run.map(str::to_owned);
    init.data.insert("key".into(), id_key.into());
    Event::new(init).unwrap()
}

/// A text delta of `session`, its id derived from the session and `key`.
fn ev(session: &str, key: &str) -> Event {
    event_with_id(
        session,
        &format!("{session}/{key}"),
        EventType::MessageStreamed,
        None,
        1_000,
    )
}

/// Writes `event` into the `events` table of an older schema (3 to 5), as those stored it.
fn insert_old_event(conn: &rusqlite::Connection, event: &Event) {
    conn.execute(
        "INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        rusqlite::params![
            event.session_id(),
            event.sequence() as i64,
            event.id().as_str(),
            event.run_id(),
            event.kind().as_str(),
            event.timestamp().unix_millis(),
            event.to_json()
        ],
    )
    .unwrap();
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(Event::sequence).collect()
}

fn appended_seqs(appended: &[Appended]) -> Vec<(u64, bool)> {
    appended
        .iter()
        .map(|a| (a.event.sequence(), a.duplicate))
        .collect()
}

/// Polls `f` exactly once; `Some` if it finished.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *f).poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(DEADLINE, f)
        .await
        .expect("the store did not answer before the deadline")
}

/// Opens a store on one log, again and again.
type Opener<'a> = &'a dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + 'a>>;

/// `n` projected items of about 1 KiB each, from index `from`, each naming its index and `tag`.
fn items(tag: &str, from: u64, n: u64) -> Vec<Vec<u8>> {
    (from..from + n)
        .map(|i| {
            let mut body = format!("{tag}:{i}:").into_bytes();
            body.resize(1_000 + (i % 48) as usize, b'a' + (i % 26) as u8);
            body
        })
        .collect()
}

fn checkpoint(format: u32, after: u64, items: u64, body: &str) -> StoredProjection {
    StoredProjection {
        format,
        after,
        items,
        body: body.as_bytes().to_vec(),
    }
}

/// Asserts `result` is `Corrupt` naming the projected item `index` as the first one missing.
fn assert_missing<T: std::fmt::Debug>(result: Result<T, StoreError>, index: u64) {
    match result {
        Err(StoreError::Corrupt(message)) => assert!(
            message.contains(&format!("item {index} ")),
            "expected item {index} named missing: {message}"
        ),
        other => panic!("expected item {index} missing (Corrupt), got {other:?}"),
    }
}

/// The backend-independent semantics of [`Store`]; see `src/companion/store/mod.rs`.
mod conformance {
    use super::*;

    pub async fn sessions_round_trip(store: Arc<dyn Store>) {
        let s2 = store.create_session(session("s2", 2_000)).await.unwrap();
        assert_eq!(s2, session("s2", 2_000));
        store.create_session(session("s1", 1_000)).await.unwrap();
        assert!(matches!(
            store.create_session(session("s1", 5_000)).await,
            Err(StoreError::SessionExists(id)) if id == "s1"
        ));
        assert_eq!(store.get_session("s2").await.unwrap(), Some(s2));
        assert_eq!(store.get_session("nope").await.unwrap(), None);

        let ids: Vec<String> = store
            .list_sessions()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(ids, ["s1", "s2"], "oldest first");

        store
            .set_session_state(
                "s1",
                SessionState::Running,
                Timestamp::from_unix_millis(7_000),
            )
            .await
            .unwrap();
        store
            .set_provider_session_id("s1", "provider-abc")
            .await
            .unwrap();
        let s1 = store.get_session("s1").await.unwrap().unwrap();
        assert_eq!(s1.state, SessionState::Running);
        assert_eq!(s1.updated_at, Timestamp::from_unix_millis(7_000));
        assert_eq!(s1.created_at, Timestamp::from_unix_millis(1_000));
        assert_eq!(s1.provider_session_id.as_deref(), Some("provider-abc"));

        assert!(matches!(
            store
                .set_session_state("nope", SessionState::Closed, Timestamp::EPOCH)
                .await,
            Err(StoreError::UnknownSession(id)) if id == "nope"
        ));
        assert!(matches!(
            store.set_provider_session_id("nope", "x").await,
            Err(StoreError::UnknownSession(_))
        ));
    }

    pub async fn sequences_start_at_one_and_are_contiguous(store: Arc<dyn Store>) {
        store.create_session(session("a", 1)).await.unwrap();
        store.create_session(session("b", 2)).await.unwrap();
        let first = store
            .append("a", vec![ev("a", "1"), ev("a", "2"), ev("a", "3")])
            .await
            .unwrap();
        assert_eq!(appended_seqs(&first), [(1, false), (2, false), (3, false)]);
        let second = store
            .append("a", vec![ev("a", "4"), ev("a", "5")])
            .await
            .unwrap();
        assert_eq!(appended_seqs(&second), [(4, false), (5, false)]);
        let other = store.append("b", vec![ev("b", "1")]).await.unwrap();
        assert_eq!(
            appended_seqs(&other),
            [(1, false)],
            "sequences are per session"
        );

        let all = store.get_events("a", &EventQuery::default()).await.unwrap();
        let returned: Vec<Event> = first.into_iter().chain(second).map(|a| a.event).collect();
        assert_eq!(all, returned, "what append returned is what is stored");
        assert_eq!(store.latest_sequence("a").await.unwrap(), 5);
        assert_eq!(store.latest_sequence("b").await.unwrap(), 1);
    }

    pub async fn empty_and_unknown_sessions(store: Arc<dyn Store>) {
        store.create_session(session("empty", 1)).await.unwrap();
        assert_eq!(store.latest_sequence("empty").await.unwrap(), 0);
        assert_eq!(
            store
                .get_events("empty", &EventQuery::default())
                .await
                .unwrap(),
            []
        );
        assert_eq!(store.append("empty", vec![]).await.unwrap(), []);

        let unknown = |r: Result<_, StoreError>| matches!(r, Err(StoreError::UnknownSession(id)) if id == "nope");
        assert!(unknown(store.latest_sequence("nope").await.map(|_| ())));
        assert!(unknown(
            store
                .get_events("nope", &EventQuery::default())
                .await
                .map(|_| ())
        ));
        assert!(unknown(
            store
                .wait_events("nope", &EventQuery::default(), 10)
                .await
                .map(|_| ())
        ));
        assert!(unknown(
            store
                .append("nope", vec![ev("nope", "1")])
                .await
                .map(|_| ())
        ));
    }

    pub async fn append_is_idempotent(store: Arc<dyn Store>) {
        store.create_session(session("a", 1)).await.unwrap();
        store.create_session(session("b", 2)).await.unwrap();

        // Within one batch: the repeat returns the first occurrence.
        let batch = store
            .append("a", vec![ev("a", "1"), ev("a", "2"), ev("a", "1")])
            .await
            .unwrap();
        assert_eq!(appended_seqs(&batch), [(1, false), (2, false), (1, true)]);
        assert_eq!(batch[2].event, batch[0].event);

        // Across batches: the stored event with its sequence; nothing new.
        let again = store
            .append("a", vec![ev("a", "2"), ev("a", "3")])
            .await
            .unwrap();
        assert_eq!(appended_seqs(&again), [(2, true), (3, false)]);
        assert_eq!(again[0].event, batch[1].event);
        assert_eq!(store.latest_sequence("a").await.unwrap(), 3);

        // Across sessions: the id is already stored (in `a`), so `b` gets that event back.
        let shared = event_with_id("b", "a/1", EventType::MessageStreamed, None, 1_000);
        assert_eq!(shared.id(), batch[0].event.id());
        let cross = store.append("b", vec![shared]).await.unwrap();
        assert_eq!(appended_seqs(&cross), [(1, true)]);
        assert_eq!(cross[0].event, batch[0].event);
        assert_eq!(cross[0].event.session_id(), "a");
        assert_eq!(store.latest_sequence("b").await.unwrap(), 0);
        assert_eq!(
            seqs(&store.get_events("a", &EventQuery::default()).await.unwrap()),
            [1, 2, 3]
        );
    }

    pub async fn a_batch_is_atomic(store: Arc<dyn Store>) {
        store.create_session(session("a", 1)).await.unwrap();
        let stray = ev("other", "1");
        let refused = store
            .append("a", vec![ev("a", "1"), stray.clone(), ev("a", "2")])
            .await;
        match refused {
            Err(StoreError::SessionMismatch {
                id,
                event_session,
                session,
            }) => {
                assert_eq!(id, stray.id().as_str());
                assert_eq!((event_session.as_str(), session.as_str()), ("other", "a"));
            }
            other => panic!("expected SessionMismatch, got {other:?}"),
        }
        assert_eq!(
            store.latest_sequence("a").await.unwrap(),
            0,
            "nothing stored"
        );
        let next = store.append("a", vec![ev("a", "1")]).await.unwrap();
        assert_eq!(
            appended_seqs(&next),
            [(1, false)],
            "and no sequence consumed"
        );
    }

    pub async fn filters_and_their_combination(store: Arc<dyn Store>) {
        use EventType::*;
        store.create_session(session("f", 1)).await.unwrap();
        let rows = [
            (RunStarted, Some("r1"), 1_000),
            (MessageStreamed, Some("r1"), 1_000),
            (MessageStreamed, Some("r1"), 2_000),
            (RunCompleted, Some("r1"), 3_000),
            (RunStarted, Some("r2"), 3_000),
            (MessageStreamed, Some("r2"), 4_000),
            (ToolCallStarted, Some("r2"), 5_000),
            (MessageStreamed, None, 6_000),
        ];
        let events: Vec<Event> = rows
            .iter()
            .enumerate()
            .map(|(i, &(kind, run, ts))| event_with_id("f", &format!("f/{i}"), kind, run, ts))
            .collect();
        store.append("f", events).await.unwrap();

        let q = |f: &dyn Fn(&mut EventQuery)| {
            let mut q = EventQuery::default();
            f(&mut q);
            q
        };
        let cases: Vec<(EventQuery, Vec<u64>)> = vec![
            (EventQuery::default(), vec![1, 2, 3, 4, 5, 6, 7, 8]),
            (q(&|q| q.after = Some(3)), vec![4, 5, 6, 7, 8]),
            (q(&|q| q.after = Some(8)), vec![]),
            (q(&|q| q.before = Some(3)), vec![1, 2]),
            (q(&|q| q.before = Some(1)), vec![]),
            (
                q(&|q| {
                    q.after = Some(2);
                    q.before = Some(6);
                }),
                vec![3, 4, 5],
            ),
            // `since` is inclusive: both events at 3000 are in.
            (
                q(&|q| q.since = Some(Timestamp::from_unix_millis(3_000))),
                vec![4, 5, 6, 7, 8],
            ),
            (
                q(&|q| q.since = Some(Timestamp::from_unix_millis(6_001))),
                vec![],
            ),
            (q(&|q| q.run_id = Some("r1".into())), vec![1, 2, 3, 4]),
            (q(&|q| q.run_id = Some("r2".into())), vec![5, 6, 7]),
            (q(&|q| q.run_id = Some("r9".into())), vec![]),
            (q(&|q| q.kind = Some(MessageStreamed)), vec![2, 3, 6, 8]),
            (q(&|q| q.kind = Some(RunFailed)), vec![]),
            (q(&|q| q.limit = Some(3)), vec![1, 2, 3]),
            (q(&|q| q.limit = Some(0)), vec![]),
            (q(&|q| q.limit = Some(100)), vec![1, 2, 3, 4, 5, 6, 7, 8]),
            (
                q(&|q| {
                    q.after = Some(1);
                    q.before = Some(8);
                    q.since = Some(Timestamp::from_unix_millis(2_000));
                    q.kind = Some(MessageStreamed);
                }),
                vec![3, 6],
            ),
            (
                q(&|q| {
                    q.since = Some(Timestamp::from_unix_millis(2_000));
                    q.kind = Some(MessageStreamed);
                    q.limit = Some(1);
                }),
                vec![3],
            ),
            (
                q(&|q| {
                    q.after = Some(2);
                    q.before = Some(8);
                    q.since = Some(Timestamp::from_unix_millis(1_000));
                    q.run_id = Some("r2".into());
                    q.kind = Some(MessageStreamed);
                    q.limit = Some(10);
                }),
                vec![6],
            ),
        ];
        for (query, expected) in cases {
            let got = store.get_events("f", &query).await.unwrap();
            assert_eq!(seqs(&got), expected, "{query:?}");
            for e in &got {
                assert_eq!(e.session_id(), "f");
            }
        }
    }

    /// Text is text: a run id may hold any character, NUL included, and filters exactly.
    pub async fn run_ids_hold_any_text(store: Arc<dyn Store>) {
        store.create_session(session("t", 1)).await.unwrap();
        let runs = ["r\0x", "r", "r\u{1F600} ü", "r\\0x"];
        let events: Vec<Event> = runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                event_with_id("t", &format!("t/{i}"), EventType::RunStarted, Some(run), 1)
            })
            .collect();
        store.append("t", events.clone()).await.unwrap();
        for (i, run) in runs.iter().enumerate() {
            let query = EventQuery {
                run_id: Some((*run).to_owned()),
                ..EventQuery::default()
            };
            let got = store.get_events("t", &query).await.unwrap();
            assert_eq!(
                got,
                [events[i].clone().into_sequenced(i as u64 + 1)],
                "{run:?}"
            );
        }
    }

    pub async fn long_poll_returns_on_the_next_append(store: Arc<dyn Store>) {
        store.create_session(session("lp", 1)).await.unwrap();
        store.create_session(session("other", 2)).await.unwrap();
        store.append("lp", vec![ev("lp", "0")]).await.unwrap();

        // Only tool calls after sequence 1: commits to other sessions and non-matching events
        // wake the waiter without ending the wait.
        let query = EventQuery {
            after: Some(1),
            kind: Some(EventType::ToolCallStarted),
            ..EventQuery::default()
        };
        let mut wait = store.wait_events("lp", &query, DEADLINE.as_millis() as u64);
        // One poll subscribes and issues the first read, so the wait begins before the append.
        assert!(poll_once(&mut wait).await.is_none(), "nothing matches yet");

        let wanted = event_with_id("lp", "lp/tool", EventType::ToolCallStarted, None, 2_000);
        let appender = tokio::spawn({
            let store = store.clone();
            let wanted = wanted.clone();
            async move {
                store.append("other", vec![ev("other", "1")]).await.unwrap();
                store.append("lp", vec![ev("lp", "1")]).await.unwrap();
                store.append("lp", vec![wanted]).await.unwrap()
            }
        });
        let got = within(wait).await.unwrap();
        assert_eq!(got, [wanted.into_sequenced(3)]);
        let appended = within(appender).await.unwrap();
        assert_eq!(appended[0].event, got[0]);
    }

    pub async fn long_poll_returns_at_once_or_empty_on_timeout(store: Arc<dyn Store>) {
        store.create_session(session("lp", 1)).await.unwrap();
        store.append("lp", vec![ev("lp", "1")]).await.unwrap();
        let existing = within(store.wait_events("lp", &EventQuery::default(), 60_000))
            .await
            .unwrap();
        assert_eq!(seqs(&existing), [1], "a match exists: no wait");

        let after = EventQuery {
            after: Some(1),
            ..EventQuery::default()
        };
        let none = within(store.wait_events("lp", &after, 50)).await.unwrap();
        assert_eq!(none, []);
        let zero = within(store.wait_events("lp", &after, 0)).await.unwrap();
        assert_eq!(zero, []);
    }

    pub async fn concurrent_appenders_get_contiguous_sequences(store: Arc<dyn Store>) {
        store.create_session(session("c", 1)).await.unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for i in 0..8 {
                        let batch = (0..=(t + i) % 3)
                            .map(|j| ev("c", &format!("{t}.{i}.{j}")))
                            .collect();
                        let appended = store.append("c", batch).await.unwrap();
                        let seqs: Vec<u64> = appended.iter().map(|a| a.event.sequence()).collect();
                        assert!(
                            seqs.windows(2).all(|w| w[1] == w[0] + 1),
                            "a batch is contiguous: {seqs:?}"
                        );
                        got.extend(seqs);
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(within(task).await.unwrap());
        }
        all.sort_unstable();
        let n = all.len() as u64;
        assert_eq!(all, (1..=n).collect::<Vec<_>>(), "no gap, no duplicate");
        let stored = store.get_events("c", &EventQuery::default()).await.unwrap();
        assert_eq!(seqs(&stored), (1..=n).collect::<Vec<_>>());
        let mut ids: Vec<&str> = stored.iter().map(|e| e.id().as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len() as u64, n);
        assert_eq!(store.latest_sequence("c").await.unwrap(), n);
    }

    pub async fn subscribers_hear_only_after_commit(store: Arc<dyn Store>) {
        store.create_session(session("sub", 1)).await.unwrap();
        let mut commits = store.subscribe();
        let appender = tokio::spawn({
            let store = store.clone();
            async move {
                for i in 0..20 {
                    let batch = vec![ev("sub", &format!("{i}a")), ev("sub", &format!("{i}b"))];
                    store.append("sub", batch).await.unwrap();
                }
            }
        });
        let mut heard = 0;
        while heard < 40 {
            let Committed {
                session_id,
                latest_sequence,
            } = within(commits.recv()).await.unwrap();
            assert_eq!(session_id, "sub");
            assert!(latest_sequence > heard, "announcements only move forward");
            // Told means durable and readable.
            let query = EventQuery {
                after: Some(heard),
                ..EventQuery::default()
            };
            let events = store.get_events("sub", &query).await.unwrap();
            assert!(
                events.len() as u64 >= latest_sequence - heard,
                "told of {latest_sequence} but could read only {} after {heard}",
                events.len()
            );
            heard = latest_sequence;
        }
        within(appender).await.unwrap();
    }

    pub async fn a_session_is_claimed_by_one_companion_at_a_time(store: Arc<dyn Store>) {
        let at = Timestamp::from_unix_millis(5_000);
        let mut record = session("c", 1);
        record.node = "a".into();
        record.state = SessionState::Running;
        store.create_session(record.clone()).await.unwrap();
        // Running on a: neither b nor a itself can claim it again, and nothing changes.
        assert!(!store.claim_session("c", "b", at).await.unwrap());
        assert!(!store.claim_session("c", "a", at).await.unwrap());
        assert_eq!(store.get_session("c").await.unwrap(), Some(record));
        // Once nobody runs it, anyone may: the claimant hosts it, starting.
        store
            .set_session_state("c", SessionState::Failed, at)
            .await
            .unwrap();
        assert!(store.claim_session("c", "b", at).await.unwrap());
        let claimed = store.get_session("c").await.unwrap().unwrap();
        assert_eq!(
            (claimed.node.as_str(), claimed.state, claimed.updated_at),
            ("b", SessionState::Starting, at)
        );
        // Of two companions racing for a stopped session, exactly one gets it.
        store
            .set_session_state("c", SessionState::Closed, at)
            .await
            .unwrap();
        let (x, y) = tokio::join!(
            store.claim_session("c", "x", at),
            store.claim_session("c", "y", at)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "x claimed: {x}, y claimed: {y}");
        let winner = store.get_session("c").await.unwrap().unwrap().node;
        assert_eq!(winner, if x { "x" } else { "y" });
        assert!(matches!(
            store.claim_session("nope", "a", at).await,
            Err(StoreError::UnknownSession(id)) if id == "nope"
        ));
    }

    pub async fn the_sessions_of_a_node_whose_lease_ran_out_are_taken_over_once(
        store: Arc<dyn Store>,
    ) {
        let at = Timestamp::from_unix_millis;
        let on = |id: &str, node: &str, state: SessionState| {
            let mut s = session(id, 1);
            s.node = node.into();
            s.state = state;
            s
        };
        for s in [
            on("stale", "a", SessionState::Running),
            on("starting", "a", SessionState::Starting),
            on("done", "a", SessionState::Closed),
            on("fresh", "b", SessionState::Running),
            on("ghost", "never-beat", SessionState::Running),
            on("mine", "c", SessionState::Running),
        ] {
            store.create_session(s).await.unwrap();
        }
        store.beat("a", at(1_000)).await.unwrap();
        store.beat("b", at(5_000)).await.unwrap();
        // An older beat never moves a lease back.
        store.beat("b", at(2_000)).await.unwrap();
        store.beat("c", at(6_000)).await.unwrap();
        store.beat("d", at(6_000)).await.unwrap();
        // c and d race for what a and the node that never beat left running: each session
        // goes to exactly one of them.
        let (c, d) = tokio::join!(
            store.take_over_stale("c", at(3_000), at(6_000)),
            store.take_over_stale("d", at(3_000), at(6_000))
        );
        let (c, d) = (c.unwrap(), d.unwrap());
        let mut taken: Vec<(&str, &str)> = c
            .iter()
            .map(|s| (s.id.as_str(), "c"))
            .chain(d.iter().map(|s| (s.id.as_str(), "d")))
            .collect();
        taken.sort();
        let ids: Vec<&str> = taken.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, ["ghost", "stale", "starting"], "{taken:?}");
        for (id, node) in taken {
            let s = store.get_session(id).await.unwrap().unwrap();
            assert_eq!(
                (s.node.as_str(), s.state, s.updated_at),
                (node, SessionState::Starting, at(6_000))
            );
        }
        for (id, node) in [("done", "a"), ("fresh", "b"), ("mine", "c")] {
            assert_eq!(store.get_session(id).await.unwrap().unwrap().node, node);
        }
        // Nothing is left to take.
        let again = store
            .take_over_stale("c", at(3_000), at(7_000))
            .await
            .unwrap();
        assert_eq!(again, []);
    }

    pub async fn a_projection_round_trips(store: Arc<dyn Store>) {
        store.create_session(session("p", 1)).await.unwrap();
        store.create_session(session("other", 2)).await.unwrap();
        assert_eq!(store.load_projection("p", 1).await.unwrap(), None);
        let stored = items("one", 0, 10_000);
        let saved = checkpoint(1, 123_456, 10_000, "state at 123456");
        store
            .save_projection("p", 0, stored.clone(), saved.clone())
            .await
            .unwrap();
        assert_eq!(store.load_projection("p", 1).await.unwrap(), Some(saved));
        // Read back in two ranges.
        let (head, tail) = (
            store.projected_items("p", 1, 0, 4_000).await.unwrap(),
            store.projected_items("p", 1, 4_000, 10_000).await.unwrap(),
        );
        assert_eq!(head.len() + tail.len(), 10_000);
        assert!(head == stored[..4_000] && tail == stored[4_000..]);
        assert_eq!(
            store.projected_items("p", 1, 9_999, 10_000).await.unwrap(),
            stored[9_999..]
        );
        // Empty ranges read nothing, whatever is stored.
        for (from, to) in [(5, 5), (7, 3), (10_000, 10_000), (20_000, 20_000)] {
            assert_eq!(
                store.projected_items("p", 1, from, to).await.unwrap(),
                Vec::<Vec<u8>>::new(),
                "{from}..{to}"
            );
        }
        // Another format: no checkpoint, and its items are missing from the first index.
        assert_eq!(store.load_projection("p", 2).await.unwrap(), None);
        assert_missing(store.projected_items("p", 2, 0, 10).await, 0);
        // Past the end is a hole too.
        assert_missing(store.projected_items("p", 1, 9_990, 10_001).await, 10_000);
        // Another session has none.
        assert_eq!(store.load_projection("other", 1).await.unwrap(), None);
        assert_missing(store.projected_items("other", 1, 0, 1).await, 0);
    }

    pub async fn a_save_replaces_the_checkpoint_and_the_rows_it_names(store: Arc<dyn Store>) {
        store.create_session(session("p", 1)).await.unwrap();
        let first = items("first", 0, 10);
        store
            .save_projection("p", 0, first.clone(), checkpoint(1, 50, 10, "at 50"))
            .await
            .unwrap();
        // A later save from index 5: rows 5.. replaced, rows 0..5 kept.
        let second = items("second", 5, 10);
        let later = checkpoint(1, 90, 15, "at 90");
        store
            .save_projection("p", 5, second.clone(), later.clone())
            .await
            .unwrap();
        assert_eq!(store.load_projection("p", 1).await.unwrap(), Some(later));
        let want: Vec<Vec<u8>> = first[..5].iter().chain(&second).cloned().collect();
        assert_eq!(store.projected_items("p", 1, 0, 15).await.unwrap(), want);

        // A save of another format replaces the checkpoint and the rows it names, and rows of
        // the old format are no longer a whole range of either.
        let other = items("other", 10, 2);
        let newer = checkpoint(2, 95, 12, "format 2");
        store
            .save_projection("p", 10, other.clone(), newer.clone())
            .await
            .unwrap();
        assert_eq!(store.load_projection("p", 1).await.unwrap(), None);
        assert_eq!(store.load_projection("p", 2).await.unwrap(), Some(newer));
        assert_eq!(store.projected_items("p", 2, 10, 12).await.unwrap(), other);
        assert_missing(store.projected_items("p", 1, 0, 15).await, 10);
        assert_missing(store.projected_items("p", 2, 0, 12).await, 0);
        assert_eq!(
            store.projected_items("p", 1, 12, 15).await.unwrap(),
            want[12..]
        );

        // A checkpoint alone (no items) replaces only the checkpoint.
        let bare = checkpoint(2, 99, 12, "no new items");
        store
            .save_projection("p", 12, Vec::new(), bare.clone())
            .await
            .unwrap();
        assert_eq!(store.load_projection("p", 2).await.unwrap(), Some(bare));
        assert_eq!(store.projected_items("p", 2, 10, 12).await.unwrap(), other);
    }

    pub async fn a_hole_in_a_range_is_corrupt(store: Arc<dyn Store>) {
        store.create_session(session("p", 1)).await.unwrap();
        let (low, high) = (items("x", 0, 5), items("x", 8, 2));
        store
            .save_projection("p", 0, low.clone(), checkpoint(3, 5, 5, "a"))
            .await
            .unwrap();
        store
            .save_projection("p", 8, high.clone(), checkpoint(3, 10, 10, "b"))
            .await
            .unwrap();
        assert_eq!(store.projected_items("p", 3, 0, 5).await.unwrap(), low);
        assert_eq!(store.projected_items("p", 3, 8, 10).await.unwrap(), high);
        for (from, to, missing) in [(0, 10, 5), (4, 9, 5), (5, 6, 5), (7, 10, 7), (8, 11, 10)] {
            assert_missing(store.projected_items("p", 3, from, to).await, missing);
        }
    }

    pub async fn projections_of_an_unknown_session_are_refused(store: Arc<dyn Store>) {
        store.create_session(session("p", 1)).await.unwrap();
        // A refused save beside a good one (sharing a group, on SQLite): only it fails.
        let (refused, saved) = tokio::join!(
            store.save_projection("nope", 0, items("n", 0, 3), checkpoint(1, 1, 3, "n")),
            store.save_projection("p", 0, items("p", 0, 3), checkpoint(1, 1, 3, "p"))
        );
        assert!(
            matches!(&refused, Err(StoreError::UnknownSession(id)) if id == "nope"),
            "{refused:?}"
        );
        saved.unwrap();
        assert_eq!(store.load_projection("nope", 1).await.unwrap(), None);
        assert!(matches!(
            store.projected_items("nope", 1, 0, 3).await,
            Err(StoreError::UnknownSession(id)) if id == "nope"
        ));
        assert_eq!(
            store.projected_items("nope", 1, 0, 0).await.unwrap(),
            Vec::<Vec<u8>>::new()
        );
        assert_eq!(
            store.projected_items("p", 1, 0, 3).await.unwrap(),
            items("p", 0, 3)
        );
        // The session can still be created, with nothing of the refused save in it.
        store.create_session(session("nope", 2)).await.unwrap();
        assert_eq!(store.load_projection("nope", 1).await.unwrap(), None);
        assert_missing(store.projected_items("nope", 1, 0, 3).await, 0);
    }

    pub async fn a_projection_survives_reopening(open: Opener<'_>) {
        let store = open().await;
        store.create_session(session("p", 1)).await.unwrap();
        store.append("p", vec![ev("p", "1")]).await.unwrap();
        let saved = checkpoint(7, 1, 300, "after 1");
        store
            .save_projection("p", 0, items("kept", 0, 300), saved.clone())
            .await
            .unwrap();
        drop(store);

        let store = open().await;
        assert_eq!(store.load_projection("p", 7).await.unwrap(), Some(saved));
        assert_eq!(
            store.projected_items("p", 7, 0, 300).await.unwrap(),
            items("kept", 0, 300)
        );
        assert_eq!(store.latest_sequence("p").await.unwrap(), 1);
    }

    /// `open` opens the same log again (the same file, the same database).
    pub async fn reopen_preserves_the_log(open: Opener<'_>) {
        let store = open().await;
        let epoch = store.epoch().to_owned();
        assert!(epoch.len() >= 16, "epoch {epoch:?}");
        store.create_session(session("r", 1)).await.unwrap();
        let before = store
            .append("r", vec![ev("r", "1"), ev("r", "2")])
            .await
            .unwrap();
        drop(store);

        let store = open().await;
        assert_eq!(store.epoch(), epoch, "same log, same epoch");
        assert_eq!(store.latest_sequence("r").await.unwrap(), 2);
        let stored = store.get_events("r", &EventQuery::default()).await.unwrap();
        let before: Vec<Event> = before.into_iter().map(|a| a.event).collect();
        assert_eq!(stored, before);
        let next = store
            .append("r", vec![ev("r", "2"), ev("r", "3")])
            .await
            .unwrap();
        assert_eq!(appended_seqs(&next), [(2, true), (3, false)]);
    }
}

fn temp_dir() -> TempDir {
    // Under target/, on a real disk, so fsync is real.
    TempDir::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn open_sqlite(dir: &TempDir) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(&dir.path().join("log.db")).unwrap())
}

macro_rules! sqlite_conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite_conformance {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let dir = temp_dir();
                    conformance::$name(open_sqlite(&dir)).await;
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reopen_preserves_the_log() {
                let dir = temp_dir();
                conformance::reopen_preserves_the_log(&|| {
                    Box::pin(async { open_sqlite(&dir) as Arc<dyn Store> })
                })
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_projection_survives_reopening() {
                let dir = temp_dir();
                conformance::a_projection_survives_reopening(&|| {
                    Box::pin(async { open_sqlite(&dir) as Arc<dyn Store> })
                })
                .await;
            }
        }
    };
}

async fn open_postgres(url: &str) -> Arc<PostgresStore> {
    Arc::new(PostgresStore::connect(url).await.unwrap())
}

macro_rules! postgres_conformance {
    ($($name:ident),* $(,)?) => {
        mod postgres_conformance {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let url = postgres::fresh_database().await;
                    conformance::$name(open_postgres(&url).await).await;
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reopen_preserves_the_log() {
                let url = postgres::fresh_database().await;
                conformance::reopen_preserves_the_log(&|| {
                    Box::pin(async { open_postgres(&url).await as Arc<dyn Store> })
                })
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_projection_survives_reopening() {
                let url = postgres::fresh_database().await;
                conformance::a_projection_survives_reopening(&|| {
                    Box::pin(async { open_postgres(&url).await as Arc<dyn Store> })
                })
                .await;
            }
        }
    };
}

/// Every conformance function, once per backend.
macro_rules! conformance_suite {
    ($($backend:ident),*) => {$(
        $backend!(
            sessions_round_trip,
            sequences_start_at_one_and_are_contiguous,
            empty_and_unknown_sessions,
            append_is_idempotent,
            a_batch_is_atomic,
            filters_and_their_combination,
            run_ids_hold_any_text,
            long_poll_returns_on_the_next_append,
            long_poll_returns_at_once_or_empty_on_timeout,
            concurrent_appenders_get_contiguous_sequences,
            subscribers_hear_only_after_commit,
            a_session_is_claimed_by_one_companion_at_a_time,
            the_sessions_of_a_node_whose_lease_ran_out_are_taken_over_once,
            a_projection_round_trips,
            a_save_replaces_the_checkpoint_and_the_rows_it_names,
            a_hole_in_a_range_is_corrupt,
            projections_of_an_unknown_session_are_refused,
        );
    )*};
}

conformance_suite!(sqlite_conformance, postgres_conformance);

// ---------------------------------------------------------------------------------------------
// SQLite only.

fn user_version(path: &std::path::Path) -> u32 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_version_0_database_is_migrated_and_keeps_its_epoch() {
    let dir = temp_dir();
    let path = dir.path().join("old.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 0; CREATE TABLE scratch (x);")
        .unwrap();
    assert_eq!(user_version(&path), 0);

    let store = SqliteStore::open(&path).unwrap();
    let epoch = store.epoch().to_owned();
    assert!(
        epoch.len() >= 16 && epoch.bytes().all(|b| b.is_ascii_hexdigit()),
        "{epoch:?}"
    );
    drop(store);
    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables.retain(|t| t != "scratch");
    assert_eq!(
        tables,
        [
            "events",
            "ids_cold",
            "ids_hot",
            "meta",
            "nodes",
            "projected_items",
            "projections",
            "sessions"
        ]
    );
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(conn);

    // Opening again migrates nothing and keeps the epoch.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), epoch);
    drop(store);
    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);

    // Another file is another log.
    let fresh = SqliteStore::open(&dir.path().join("new.db")).unwrap();
    assert_ne!(fresh.epoch(), epoch);
}

/// A log as schema version 3 left it (six b-trees per event: a rowid table, its primary key,
/// the unique id, and indexes by run, type and time), with the epoch `epoch`.
const SCHEMA_3: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL, provider TEXT NOT NULL, cwd TEXT NOT NULL,
        state TEXT NOT NULL, provider_session_id TEXT, created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL, node TEXT NOT NULL DEFAULT ''
    ) STRICT;
    CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL CHECK (seq >= 1), id TEXT NOT NULL UNIQUE, run_id TEXT,
        type TEXT NOT NULL, timestamp_ms INTEGER NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) STRICT;
    CREATE INDEX events_by_run  ON events (session_id, run_id, seq);
    CREATE INDEX events_by_type ON events (session_id, type, seq);
    CREATE INDEX events_by_time ON events (session_id, timestamp_ms);
    CREATE TABLE nodes (name TEXT PRIMARY KEY NOT NULL, seen_at INTEGER NOT NULL) STRICT;
    INSERT INTO meta VALUES ('epoch', '0123456789abcdef0123456789abcdef');
    INSERT INTO sessions VALUES ('a', 'demo', '/tmp', 'closed', NULL, 1, 1, 'local');
    INSERT INTO sessions VALUES ('b', 'demo', '/tmp', 'closed', NULL, 2, 2, 'local');
    PRAGMA user_version = 3;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_log_is_migrated_with_its_events_and_filters() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    // Session a: a turn r1 (started, two deltas), then r2 (one delta); b: one delta. Stored
    // as version 3 stored them, the body with its sequence.
    let old = [
        (
            "a",
            1,
            event_with_id("a", "a1", EventType::RunStarted, Some("r1"), 10),
        ),
        (
            "a",
            2,
            event_with_id("a", "a2", EventType::MessageStreamed, Some("r1"), 20),
        ),
        (
            "a",
            3,
            event_with_id("a", "a3", EventType::MessageStreamed, Some("r1"), 30),
        ),
        (
            "a",
            4,
            event_with_id("a", "a4", EventType::MessageStreamed, Some("r2"), 40),
        ),
        (
            "b",
            1,
            event_with_id("b", "b1", EventType::MessageStreamed, None, 15),
        ),
    ];
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_3).unwrap();
        for (session, seq, event) in &old {
            assert_eq!(event.session_id(), *session);
            insert_old_event(&conn, &event.with_sequence(*seq));
        }
    }

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), "0123456789abcdef0123456789abcdef");
    let want: Vec<Event> = old[..4]
        .iter()
        .map(|(_, n, e)| e.with_sequence(*n))
        .collect();
    let read = |query: EventQuery| {
        let store = &store;
        async move { store.get_events("a", &query).await.unwrap() }
    };
    assert_eq!(read(EventQuery::default()).await, want);
    let run = EventQuery {
        run_id: Some("r1".into()),
        after: Some(1),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&read(run).await), [2, 3]);
    let kind = EventQuery {
        kind: Some(EventType::RunStarted),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&read(kind).await), [1]);
    let since = EventQuery {
        since: Some(Timestamp::from_unix_millis(30)),
        limit: Some(1),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&read(since).await), [3]);
    assert_eq!(store.latest_sequence("b").await.unwrap(), 1);

    // Appends number on from the migrated rows, and a migrated id is still found stored.
    let appended = store
        .append(
            "a",
            vec![old[4].2.clone(), ev("a", "new"), old[1].2.clone()],
        )
        .await;
    assert!(matches!(appended, Err(StoreError::SessionMismatch { .. })));
    let appended = store
        .append("a", vec![old[1].2.clone(), ev("a", "new")])
        .await
        .unwrap();
    assert_eq!(appended_seqs(&appended), [(2, true), (5, false)]);
    let appended = store.append("b", vec![old[4].2.clone()]).await.unwrap();
    assert_eq!(appended_seqs(&appended), [(1, true)]);
    drop(store);

    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master
             WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        indexes,
        ["events_by_seq"],
        "one index, (session, last sequence), beside the rowid (the ids have tables of their own)"
    );
    assert_eq!(
        id_tables(&path),
        (5, 1),
        "every migrated id in the cold table, the new one in the hot one"
    );
    // Schema 8: rows of ~32 KiB overflow their page, so the table is keyed by its rowid.
    let table: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'events'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!table.contains("WITHOUT ROWID"), "{table}");
}

/// The tables of schema version 4, which version 5 kept (it added the projections).
macro_rules! schema_4_tables {
    () => {
        "
    CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL, provider TEXT NOT NULL, cwd TEXT NOT NULL,
        state TEXT NOT NULL, provider_session_id TEXT, created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL, node TEXT NOT NULL DEFAULT ''
    ) STRICT;
    CREATE TABLE nodes (name TEXT PRIMARY KEY NOT NULL, seen_at INTEGER NOT NULL) STRICT;
    CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL CHECK (seq >= 1), id TEXT NOT NULL, run_id TEXT,
        type TEXT NOT NULL, timestamp_ms INTEGER NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) STRICT, WITHOUT ROWID;
    CREATE UNIQUE INDEX events_by_id ON events (id);
"
    };
}

/// A log as schema version 4 left it (no projections), with the epoch `epoch`.
const SCHEMA_4: &str = concat!(
    schema_4_tables!(),
    "INSERT INTO meta VALUES ('epoch', 'fedcba9876543210fedcba9876543210');
    INSERT INTO sessions VALUES ('a', 'demo', '/tmp', 'closed', NULL, 1, 1, 'local');
    PRAGMA user_version = 4;",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_log_is_migrated_keeping_its_events_and_epoch() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let old: Vec<Event> = (1..=3)
        .map(|n| ev("a", &n.to_string()).with_sequence(n))
        .collect();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_4).unwrap();
        for event in &old {
            insert_old_event(&conn, event);
        }
    }
    assert_eq!(user_version(&path), 4);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), "fedcba9876543210fedcba9876543210");
    assert_eq!(
        store.get_events("a", &EventQuery::default()).await.unwrap(),
        old
    );
    assert_eq!(store.load_projection("a", 1).await.unwrap(), None);
    let saved = checkpoint(1, 3, 2, "after 3");
    store
        .save_projection("a", 0, items("a", 0, 2), saved.clone())
        .await
        .unwrap();
    let appended = store
        .append("a", vec![ev("a", "3"), ev("a", "4")])
        .await
        .unwrap();
    assert_eq!(appended_seqs(&appended), [(3, true), (4, false)]);
    drop(store);
    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), "fedcba9876543210fedcba9876543210");
    assert_eq!(store.load_projection("a", 1).await.unwrap(), Some(saved));
    assert_eq!(
        store.projected_items("a", 1, 0, 2).await.unwrap(),
        items("a", 0, 2)
    );
    assert_eq!(store.latest_sequence("a").await.unwrap(), 4);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let without_rowid: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'projected_items'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(without_rowid.contains("WITHOUT ROWID"), "{without_rowid}");
}

/// The ids each id table holds: `(ids_cold, ids_hot)` (schema 7: a row of `ids_hot` holds
/// an append's ids, 16 bytes each).
fn id_tables(path: &std::path::Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(DEADLINE).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get(0)).unwrap();
    (
        count("SELECT count(*) FROM ids_cold"),
        count("SELECT coalesce(sum(length(ids)), 0) / 16 FROM ids_hot"),
    )
}

/// [`id_tables`] once `store`'s writer is done with what it was given: a merge of the id
/// tables runs after the answer to the group that made it due, and the writer takes the
/// next request (here a beat) only after that merge.
async fn settled_id_tables(store: &dyn Store, path: &std::path::Path) -> (i64, i64) {
    within(store.beat("settle", Timestamp::EPOCH))
        .await
        .unwrap();
    id_tables(path)
}

/// Appends to `session` one event per row of `want`, its id derived from the row's key, and
/// checks each answer: `(key, the session that stores it, its sequence there, duplicate)`.
async fn check_appends(store: &dyn Store, session: &str, want: &[(&str, &str, u64, bool)]) {
    let batch = (want.iter())
        .map(|(key, ..)| event_with_id(session, key, EventType::MessageStreamed, None, 1_000))
        .collect();
    let got = within(store.append(session, batch)).await.unwrap();
    let got: Vec<(EventId, String, u64, bool)> = (got.iter())
        .map(|a| {
            let e = &a.event;
            (
                e.id().clone(),
                e.session_id().to_owned(),
                e.sequence(),
                a.duplicate,
            )
        })
        .collect();
    let want: Vec<(EventId, String, u64, bool)> = (want.iter())
        .map(|(key, owner, seq, dup)| (EventId::derive(&[key]), owner.to_string(), *seq, *dup))
        .collect();
    assert_eq!(got, want, "appending to {session}");
}

/// `count` batches of 3 new ids `{session}{n}` from `first`, in `session` from sequence `seq`.
async fn append_new(store: &dyn Store, session: &str, first: u64, seq: u64, count: u64) {
    for b in 0..count {
        let keys: Vec<String> = (0..3)
            .map(|i| format!("{session}{}", first + b * 3 + i))
            .collect();
        let want: Vec<(&str, &str, u64, bool)> = (keys.iter().enumerate())
            .map(|(i, k)| (k.as_str(), session, seq + b * 3 + i as u64, false))
            .collect();
        check_appends(store, session, &want).await;
    }
}

/// A store merging every hot id at once, once they number `merge_ids_at`.
fn open_merging_at(path: &std::path::Path, merge_ids_at: u64) -> Arc<SqliteStore> {
    let options = SqliteOptions {
        merge_ids_at,
        merge_slices: 1,
    };
    Arc::new(SqliteStore::open_with(path, options).unwrap())
}

/// New ids go to the hot id table, which is merged into the cold one once it holds
/// `merge_ids_at` (here 4): an id is found stored wherever it is, across sessions, in the
/// same batch, after a restart, and with another threshold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_found_stored_across_merges_of_the_id_index_and_restarts() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let store = open_merging_at(&path, 4);
    store.create_session(session("a", 1)).await.unwrap();
    store.create_session(session("b", 2)).await.unwrap();
    // Five batches of 3: merged after the 2nd and the 4th (6 ids each time).
    append_new(&*store, "a", 0, 1, 5).await;
    assert_eq!(settled_id_tables(&*store, &path).await, (12, 3));

    let cold_hot_new = [
        ("a0", "a", 1, true),
        ("a13", "a", 14, true),
        ("b-new", "b", 1, false),
        ("a0", "a", 1, true),
        ("b-new", "b", 1, true),
    ];
    check_appends(&*store, "b", &cold_hot_new).await;
    // 3 + 1 new ids: merged.
    assert_eq!(settled_id_tables(&*store, &path).await, (16, 0));
    let own = [
        ("a5", "a", 6, true),
        ("a14", "a", 15, true),
        ("a-new", "a", 16, false),
    ];
    check_appends(&*store, "a", &own).await;
    assert_eq!(settled_id_tables(&*store, &path).await, (16, 1));
    drop(store);

    let every = [
        ("a0", "a", 1, true),
        ("a11", "a", 12, true),
        ("a14", "a", 15, true),
        ("a-new", "a", 16, true),
        ("b-new", "b", 1, true),
        ("b1", "b", 2, false),
    ];
    for merge_ids_at in [4, 65_536] {
        let store = open_merging_at(&path, merge_ids_at);
        check_appends(&*store, "b", &every[..every.len() - 1]).await;
        check_appends(&*store, "a", &[("a-new", "a", 16, true)]).await;
        drop(store);
    }
    let store = open_merging_at(&path, 4);
    check_appends(&*store, "b", &every).await;
    assert_eq!(store.latest_sequence("a").await.unwrap(), 16);
    assert_eq!(store.latest_sequence("b").await.unwrap(), 2);
}

/// A merge of the id tables that fails halfway (here a trigger refuses the hot table's
/// delete, after the cold table took its ids) is rolled back whole, as a crash halfway
/// would be: every id is still found, and the next open merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_of_the_id_index_that_fails_halfway_leaves_every_id_found() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let store = open_merging_at(&path, 4);
    store.create_session(session("a", 1)).await.unwrap();
    drop(store);
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER refuse BEFORE DELETE ON ids_hot
         BEGIN SELECT RAISE(ABORT, 'merge refused'); END;",
    )
    .unwrap();

    let store = open_merging_at(&path, 4);
    append_new(&*store, "a", 0, 1, 3).await;
    assert_eq!(
        settled_id_tables(&*store, &path).await,
        (0, 9),
        "no merge went through"
    );
    let stored = [
        ("a0", "a", 1, true),
        ("a8", "a", 9, true),
        ("a9", "a", 10, false),
    ];
    check_appends(&*store, "a", &stored).await;
    drop(store);

    raw.execute_batch("DROP TRIGGER refuse").unwrap();
    let store = open_merging_at(&path, 4);
    let after = [
        ("a0", "a", 1, true),
        ("a9", "a", 10, true),
        ("a10", "a", 11, false),
    ];
    check_appends(&*store, "a", &after).await;
    assert_eq!(settled_id_tables(&*store, &path).await, (11, 0), "merged");
    check_appends(&*store, "a", &after[..2]).await;
    drop(store);
}

/// With the id space cut into slices, a merge moves one slice's hot ids: an id is found
/// stored whichever slices were merged, after a restart, and after a restart with another
/// number of slices (which merges every hot id first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_found_stored_across_merges_of_one_slice_and_a_change_of_slices() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let open = |merge_slices| {
        let options = SqliteOptions {
            merge_ids_at: 4,
            merge_slices,
        };
        Arc::new(SqliteStore::open_with(&path, options).unwrap())
    };
    let store = open(4);
    store.create_session(session("a", 1)).await.unwrap();
    store.create_session(session("b", 2)).await.unwrap();
    // Ten batches of 3 new ids: a merge of one slice of four after each from the second on.
    append_new(&*store, "a", 0, 1, 10).await;
    let (cold, _) = settled_id_tables(&*store, &path).await;
    assert!(
        cold > 0 && cold < 30,
        "some slices merged, not all: {cold} cold"
    );
    let keys: Vec<String> = (0..30).map(|n| format!("a{n}")).collect();
    let mut every: Vec<(&str, &str, u64, bool)> = (keys.iter().enumerate())
        .map(|(n, k)| (k.as_str(), "a", n as u64 + 1, true))
        .collect();
    let mut new = every.clone();
    new.push(("b0", "b", 1, false));
    check_appends(&*store, "b", &new).await;
    every.push(("b0", "b", 1, true));
    check_appends(&*store, "b", &every).await;
    drop(store);

    for merge_slices in [4, 2, 2, 1, 8] {
        let store = open(merge_slices);
        check_appends(&*store, "b", &every).await;
        check_appends(&*store, "a", &every[..3]).await;
        drop(store);
    }
    assert_eq!(
        id_tables(&path),
        (31, 0),
        "a change of slices merged every id"
    );
    let store = open(8);
    append_new(&*store, "b", 100, 2, 4).await;
    check_appends(&*store, "a", &every).await;
    assert_eq!(store.latest_sequence("b").await.unwrap(), 13);
}

/// A log as schema version 5 left it: one unique index on the text id.
const SCHEMA_5: &str = concat!(
    schema_4_tables!(),
    "CREATE TABLE projections (
        session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id),
        format INTEGER NOT NULL, after INTEGER NOT NULL CHECK (after >= 0),
        items INTEGER NOT NULL CHECK (items >= 0), body BLOB NOT NULL
    ) STRICT;
    CREATE TABLE projected_items (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        idx INTEGER NOT NULL CHECK (idx >= 0), format INTEGER NOT NULL, body BLOB NOT NULL,
        PRIMARY KEY (session_id, idx)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO meta VALUES ('epoch', '00112233445566778899aabbccddeeff');
    INSERT INTO sessions VALUES ('a', 'demo', '/tmp', 'closed', NULL, 1, 1, 'local');
    INSERT INTO sessions VALUES ('b', 'demo', '/tmp', 'closed', NULL, 2, 2, 'local');
    INSERT INTO projections VALUES ('a', 1, 3, 0, x'c0ffee');
    PRAGMA user_version = 5;",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_log_is_migrated_keeping_its_events_and_every_id_stored() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let old: Vec<(&str, &str, u64)> = vec![
        ("a", "a1", 1),
        ("a", "a2", 2),
        ("a", "a3", 3),
        ("b", "b1", 1),
        ("b", "b2", 2),
    ];
    let event = |(session, key, seq): &(&str, &str, u64)| {
        event_with_id(session, key, EventType::MessageStreamed, None, 1_000).with_sequence(*seq)
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_5).unwrap();
        for row in &old {
            insert_old_event(&conn, &event(row));
        }
    }

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), "00112233445566778899aabbccddeeff");
    let want: Vec<Event> = old[..3].iter().map(event).collect();
    assert_eq!(
        store.get_events("a", &EventQuery::default()).await.unwrap(),
        want
    );
    assert_eq!(
        store.load_projection("a", 1).await.unwrap(),
        Some(StoredProjection {
            format: 1,
            after: 3,
            items: 0,
            body: vec![0xc0, 0xff, 0xee]
        })
    );
    let stored = [
        ("a2", "a", 2, true),
        ("b2", "b", 2, true),
        ("b3", "b", 3, false),
    ];
    check_appends(&store, "b", &stored).await;
    check_appends(&store, "a", &[("a1", "a", 1, true), ("a4", "a", 4, false)]).await;
    drop(store);
    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);
    assert_eq!(
        id_tables(&path),
        (5, 2),
        "the migrated ids cold, the new ones hot"
    );

    let store = SqliteStore::open(&path).unwrap();
    let every: Vec<(&str, &str, u64, bool)> = (old.iter())
        .map(|(s, k, n)| (*k, *s, *n, true))
        .chain([("a4", "a", 4, true), ("b3", "b", 3, true)])
        .collect();
    check_appends(&store, "b", &every).await;
    assert_eq!(store.latest_sequence("b").await.unwrap(), 3);
}

/// The log of `split_log`: batches of 3, 1, 5, 2 and 4 events (schema 7 stores each append
/// as one row), types, runs and timestamps varying inside and across them; the fourth batch
/// repeats an id of its own and one stored before, so its row is rebuilt without them.
fn split_batches() -> Vec<Vec<Event>> {
    let kinds = [
        EventType::RunStarted,
        EventType::MessageStreamed,
        EventType::ToolCallStarted,
        EventType::MessageStreamed,
    ];
    let event = |n: usize| {
        let run = match n {
            0..=5 => Some("r1"),
            6..=8 => None,
            _ => Some("r2"),
        };
        // Not in sequence order: 10, 37, 24, 51, 38, …
        let ms = 10 + (n as i64 * 27) % 41;
        event_with_id("r", &format!("split{n}"), kinds[n % 4], run, ms)
    };
    let mut n = 0;
    let mut batch = |size: usize| {
        let b: Vec<Event> = (n..n + size).map(event).collect();
        n += size;
        b
    };
    let (a, b, c) = (batch(3), batch(1), batch(5));
    let mut d = batch(2);
    d.insert(1, d[0].clone());
    d.push(a[1].clone());
    let e = batch(4);
    vec![a, b, c, d, e]
}

/// Appends [`split_batches`] to `session`, one append per batch; the events stored, in order.
async fn append_split_batches(store: &dyn Store, session: &str) -> Vec<Event> {
    let mut log: Vec<Event> = Vec::new();
    for batch in split_batches() {
        for appended in store.append(session, batch).await.unwrap() {
            if !appended.duplicate {
                log.push(appended.event);
            }
        }
    }
    log
}

/// Every id of [`split_batches`] appended again to `session` is found stored, as the event
/// `log` holds, wherever its row is.
async fn assert_every_id_found_stored(store: &dyn Store, session: &str, log: &[Event]) {
    let again: Vec<Event> = split_batches().concat();
    let appended = store.append(session, again).await.unwrap();
    assert!(appended.iter().all(|a| a.duplicate));
    let mut found: Vec<Event> = appended.into_iter().map(|a| a.event).collect();
    found.sort_by_key(Event::sequence);
    found.dedup();
    assert_eq!(found, log);
}

/// Every range and filter of `get_events` over the rows `split_batches` made, against the
/// same filter applied to the whole log in memory, on the store given.
async fn check_every_range(store: &dyn Store, log: &[Event]) {
    let last = log.len() as u64;
    let cursors = [None, Some(0), Some(1), Some(2), Some(3), Some(4), Some(8)];
    let cursors = cursors
        .into_iter()
        .chain([9, 10, 11, 13, last - 1, last, last + 5, u64::MAX].map(Some));
    let befores = [
        None,
        Some(0),
        Some(1),
        Some(2),
        Some(4),
        Some(5),
        Some(9),
        Some(10),
    ];
    let befores = befores
        .into_iter()
        .chain([last, last + 1, u64::MAX].map(Some));
    let filters: Vec<EventQuery> = vec![
        EventQuery::default(),
        EventQuery {
            kind: Some(EventType::MessageStreamed),
            ..EventQuery::default()
        },
        EventQuery {
            kind: Some(EventType::RunStarted),
            ..EventQuery::default()
        },
        EventQuery {
            kind: Some(EventType::SessionFailed),
            ..EventQuery::default()
        },
        EventQuery {
            run_id: Some("r1".into()),
            ..EventQuery::default()
        },
        EventQuery {
            run_id: Some("r2".into()),
            kind: Some(EventType::ToolCallStarted),
            ..EventQuery::default()
        },
        EventQuery {
            since: Some(Timestamp::from_unix_millis(37)),
            ..EventQuery::default()
        },
        EventQuery {
            since: Some(Timestamp::from_unix_millis(45)),
            run_id: Some("r2".into()),
            ..EventQuery::default()
        },
    ];
    let befores: Vec<Option<u64>> = befores.collect();
    for after in cursors {
        for &before in &befores {
            for limit in [None, Some(0), Some(1), Some(3)] {
                for filter in &filters {
                    let query = EventQuery {
                        after,
                        before,
                        limit,
                        ..filter.clone()
                    };
                    let want: Vec<Event> = (log.iter())
                        .filter(|e| after.is_none_or(|a| e.sequence() > a))
                        .filter(|e| before.is_none_or(|b| e.sequence() < b))
                        .filter(|e| query.since.is_none_or(|s| e.timestamp() >= s))
                        .filter(|e| query.kind.is_none_or(|k| e.kind() == k))
                        .filter(|e| (query.run_id.as_deref()).is_none_or(|r| e.run_id() == Some(r)))
                        .take(limit.unwrap_or(usize::MAX))
                        .cloned()
                        .collect();
                    let got = store.get_events("r", &query).await.unwrap();
                    assert_eq!(seqs(&got), seqs(&want), "{query:?}");
                    assert_eq!(got, want, "{query:?}");
                }
            }
        }
    }
}

/// Schema 7 stores an append as one row: whatever range and filter a read asks for, across
/// rows and inside them, it gets what a row per event would give (the store's recent tail,
/// then a fresh store that reads every range from the file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_split_over_rows_read_back_by_every_range_and_filter() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let store = open_merging_at(&path, 4);
    store.create_session(session("r", 1)).await.unwrap();
    let log = append_split_batches(&*store, "r").await;
    assert_eq!(seqs(&log), (1..=15).collect::<Vec<_>>());
    let rows: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 5, "one row per append");
    check_every_range(&*store, &log).await;
    assert_eq!(store.latest_sequence("r").await.unwrap(), 15);
    drop(store);

    let store = open_merging_at(&path, 65_536);
    check_every_range(&*store, &log).await;
    assert_every_id_found_stored(&*store, "r", &log).await;
    assert!(matches!(
        store.get_events("nope", &EventQuery::default()).await,
        Err(StoreError::UnknownSession(_))
    ));
}

/// An append that fails after it started writing (here a trigger refuses its row of the hot
/// id table, after its row of events went in) fails its group whole: nothing of it is read,
/// its ids are not taken for stored, and the same batch stores later with the same sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_that_fails_halfway_leaves_nothing_half_written() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let store = open_sqlite(&dir);
    store.create_session(session("h", 1)).await.unwrap();
    let first: Vec<Event> = (0..3).map(|i| ev("h", &i.to_string())).collect();
    store.append("h", first.clone()).await.unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.busy_timeout(DEADLINE).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON ids_hot
         BEGIN SELECT RAISE(ABORT, 'append refused'); END;",
    )
    .unwrap();

    let second: Vec<Event> = (3..8).map(|i| ev("h", &i.to_string())).collect();
    let failed = store.append("h", second.clone()).await;
    assert!(matches!(failed, Err(StoreError::Database(_))), "{failed:?}");
    assert_eq!(store.latest_sequence("h").await.unwrap(), 3);
    let stored = store.get_events("h", &EventQuery::default()).await.unwrap();
    assert_eq!(seqs(&stored), [1, 2, 3]);
    let raw_rows: i64 = raw
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(raw_rows, 1);
    assert_eq!(id_tables(&path), (0, 3));

    raw.execute_batch("DROP TRIGGER refuse").unwrap();
    let appended = store.append("h", second.clone()).await.unwrap();
    assert_eq!(
        appended_seqs(&appended),
        [(4, false), (5, false), (6, false), (7, false), (8, false)]
    );
    let appended = store.append("h", second.clone()).await.unwrap();
    assert!(appended.iter().all(|a| a.duplicate));
    drop(store);
    let store = open_sqlite(&dir);
    let want: Vec<Event> = (first.into_iter().chain(second))
        .enumerate()
        .map(|(i, e)| e.into_sequenced(i as u64 + 1))
        .collect();
    assert_eq!(
        store.get_events("h", &EventQuery::default()).await.unwrap(),
        want
    );
}

/// A log as schema version 6 left it: one row per event, the ids in two tables of their own
/// keyed by their 16 bytes.
const SCHEMA_6: &str = concat!(
    schema_4_tables!(),
    "DROP INDEX events_by_id;
    CREATE TABLE projections (
        session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id),
        format INTEGER NOT NULL, after INTEGER NOT NULL CHECK (after >= 0),
        items INTEGER NOT NULL CHECK (items >= 0), body BLOB NOT NULL
    ) STRICT;
    CREATE TABLE projected_items (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        idx INTEGER NOT NULL CHECK (idx >= 0), format INTEGER NOT NULL, body BLOB NOT NULL,
        PRIMARY KEY (session_id, idx)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE ids_cold (
        id BLOB PRIMARY KEY NOT NULL CHECK (length(id) = 16), session_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE ids_hot (
        id BLOB PRIMARY KEY NOT NULL CHECK (length(id) = 16), session_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    INSERT INTO meta VALUES ('epoch', '66666666666666666666666666666666');
    INSERT INTO sessions VALUES ('a', 'demo', '/tmp', 'closed', NULL, 1, 1, 'local');
    INSERT INTO sessions VALUES ('b', 'demo', '/tmp', 'closed', NULL, 2, 2, 'local');
    PRAGMA user_version = 6;",
);

/// A schema-6 log (a row per event; some ids merged into the cold table, the newest still
/// in the hot one) is migrated: every event reads back with every filter, every id is found
/// stored where it was, and appends number on.
/// What the writer's page cache holds once `cached_bytes` stops changing: polled, since the
/// release has no answer to wait on.
async fn cache_settled_below(store: &SqliteStore, bytes: u64) -> u64 {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let cached = store.cached_bytes();
        if cached < bytes || std::time::Instant::now() > deadline {
            return cached;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_store_frees_its_page_cache_and_a_write_fills_it_again() {
    let dir = temp_dir();
    let store = open_sqlite(&dir);
    store.create_session(session("ses_a", 1_000)).await.unwrap();
    // About 8 MB of bodies: their pages stay in the writer's cache after each commit.
    let pad = "x".repeat(2_000);
    for batch in 0..40 {
        let events = (0..100)
            .map(|i| ev("ses_a", &format!("{batch}/{i}/{pad}")))
            .collect();
        store.append("ses_a", events).await.unwrap();
    }
    let busy = store.cached_bytes();
    assert!(
        busy > 4 << 20,
        "after 8 MB written the cache held {busy} bytes"
    );

    let idle = cache_settled_below(&store, 1 << 20).await;
    assert!(
        idle < 1 << 20,
        "idle, the cache still held {idle} of {busy} bytes"
    );
    // Nothing was lost with the pages: the log reads back whole, and the next append is
    // stored after it.
    let all = store
        .get_events("ses_a", &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(seqs(&all), (1..=4_000).collect::<Vec<_>>());
    let more = store
        .append("ses_a", vec![ev("ses_a", "after the release")])
        .await
        .unwrap();
    assert_eq!(appended_seqs(&more), [(4_001, false)]);
    assert!(
        store.cached_bytes() > 0,
        "a commit reads pages into the cache again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_log_is_migrated_keeping_its_events_and_every_id_stored() {
    let dir = temp_dir();
    let path = dir.path().join("log.db");
    let old = [
        ("a", "a1", 1, EventType::RunStarted, Some("r1"), 10),
        ("a", "a2", 2, EventType::MessageStreamed, Some("r1"), 30),
        ("a", "a3", 3, EventType::MessageStreamed, Some("r2"), 20),
        ("b", "b1", 1, EventType::MessageStreamed, None, 15),
        ("b", "b2", 2, EventType::ToolCallStarted, None, 16),
    ];
    let event = |(s, key, seq, kind, run, ms): &(&str, &str, u64, EventType, Option<&str>, i64)| {
        event_with_id(s, key, *kind, *run, *ms).with_sequence(*seq)
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA_6).unwrap();
        for (i, row) in old.iter().enumerate() {
            let e = event(row);
            insert_old_event(&conn, &e);
            // The first three ids merged, the last two still hot.
            let table = if i < 3 { "ids_cold" } else { "ids_hot" };
            conn.execute(
                &format!("INSERT INTO {table} VALUES (?1, ?2, ?3)"),
                rusqlite::params![&e.id().bits().to_be_bytes()[..], row.0, row.2 as i64],
            )
            .unwrap();
        }
        conn.execute("INSERT INTO meta VALUES ('ids_cold', '3')", [])
            .unwrap();
    }

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.epoch(), "66666666666666666666666666666666");
    let a: Vec<Event> = old[..3].iter().map(event).collect();
    assert_eq!(
        store.get_events("a", &EventQuery::default()).await.unwrap(),
        a
    );
    let filtered = [
        (
            EventQuery {
                run_id: Some("r1".into()),
                ..EventQuery::default()
            },
            vec![1, 2],
        ),
        (
            EventQuery {
                kind: Some(EventType::MessageStreamed),
                after: Some(2),
                ..EventQuery::default()
            },
            vec![3],
        ),
        (
            EventQuery {
                since: Some(Timestamp::from_unix_millis(20)),
                ..EventQuery::default()
            },
            vec![2, 3],
        ),
    ];
    for (query, want) in filtered {
        assert_eq!(
            seqs(&store.get_events("a", &query).await.unwrap()),
            want,
            "{query:?}"
        );
    }
    assert_eq!(store.latest_sequence("b").await.unwrap(), 2);
    let stored = [
        ("a1", "a", 1, true),
        ("b2", "b", 2, true),
        ("b3", "b", 3, false),
    ];
    check_appends(&store, "b", &stored).await;
    check_appends(&store, "a", &[("a3", "a", 3, true), ("a4", "a", 4, false)]).await;
    drop(store);
    assert_eq!(user_version(&path), SqliteStore::SCHEMA_VERSION);
    assert_eq!(
        id_tables(&path),
        (5, 2),
        "the migrated ids cold, the new ones hot"
    );

    let store = SqliteStore::open(&path).unwrap();
    let every: Vec<(&str, &str, u64, bool)> = (old.iter())
        .map(|(s, k, n, ..)| (*k, *s, *n, true))
        .chain([("a4", "a", 4, true), ("b3", "b", 3, true)])
        .collect();
    check_appends(&store, "b", &every).await;
    assert_eq!(store.latest_sequence("a").await.unwrap(), 4);
}

#[test]
fn a_database_from_a_newer_build_is_refused() {
    let dir = temp_dir();
    let path = dir.path().join("future.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", SqliteStore::SCHEMA_VERSION + 1)
        .unwrap();
    match SqliteStore::open(&path) {
        Err(StoreError::Database(message)) => assert!(message.contains("newer"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_commits() {
    let dir = temp_dir();
    let store = open_sqlite(&dir);
    store.create_session(session("g", 1)).await.unwrap();
    let commits_before = store.commits();

    const TASKS: usize = 256;
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                // Every eighth request is refused; it must not take its group down with it.
                if i % 8 == 7 {
                    store.append("nope", vec![ev("nope", &i.to_string())]).await
                } else {
                    store.append("g", vec![ev("g", &i.to_string())]).await
                }
            })
        })
        .collect();
    let mut sequences = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let result = within(task).await.unwrap();
        if i % 8 == 7 {
            assert!(matches!(result, Err(StoreError::UnknownSession(_))));
        } else {
            sequences.push(result.unwrap()[0].event.sequence());
        }
    }
    sequences.sort_unstable();
    let good = sequences.len() as u64;
    assert_eq!(sequences, (1..=good).collect::<Vec<_>>());
    let commits = store.commits() - commits_before;
    assert!(
        commits < TASKS as u64,
        "{TASKS} appends took {commits} commits: no group commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_is_an_error_not_a_panic() {
    let dir = temp_dir();
    let store = open_sqlite(&dir);
    store.create_session(session("s", 1)).await.unwrap();
    store
        .append("s", vec![ev("s", "1"), ev("s", "2"), ev("s", "3")])
        .await
        .unwrap();

    let raw = rusqlite::Connection::open(dir.path().join("log.db")).unwrap();
    raw.busy_timeout(DEADLINE).unwrap();
    // The three events are one row (schema 7): its second line is replaced.
    let body: String = raw
        .query_row("SELECT body FROM events WHERE session_id = 's'", [], |r| {
            r.get(0)
        })
        .unwrap();
    let mut lines: Vec<&str> = body.split('\n').collect();
    assert_eq!(lines.len(), 3);
    lines[1] = "{\"not\": \"an event\"}";
    raw.execute(
        "UPDATE events SET body = ?1 WHERE session_id = 's'",
        [lines.join("\n")],
    )
    .unwrap();
    match store.get_events("s", &EventQuery::default()).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("\"s\" seq 2"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The rows around it still read.
    let before = EventQuery {
        before: Some(2),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&store.get_events("s", &before).await.unwrap()), [1]);

    raw.execute("UPDATE sessions SET state = 'exploded' WHERE id = 's'", [])
        .unwrap();
    assert!(matches!(
        store.get_session("s").await,
        Err(StoreError::Corrupt(message)) if message.contains("exploded")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_store_commits_what_was_queued() {
    let dir = temp_dir();
    let store = open_sqlite(&dir);
    store.create_session(session("d", 1)).await.unwrap();
    let event = ev("d", "1");
    {
        // The append reaches the writer on its first poll; then its caller gives up.
        let mut append = store.append("d", vec![event.clone()]);
        let _ = poll_once(&mut append).await;
    }
    drop(store);

    let store = open_sqlite(&dir);
    let stored = store.get_events("d", &EventQuery::default()).await.unwrap();
    assert_eq!(stored, [event.into_sequenced(1)]);
}

/// Reads of the newest events come from the in-memory tail, older ones from the file; both
/// must give exactly the file's answer, wherever the cursor falls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_the_memory_tail_agree_with_the_file() {
    let dir = temp_dir();
    let store = open_sqlite(&dir);
    store.create_session(session("t", 1)).await.unwrap();
    for batch in 0..7 {
        let events = (0..100).map(|i| ev("t", &format!("{batch}-{i}"))).collect();
        store.append("t", events).await.unwrap();
    }
    // A duplicate append adds nothing to either.
    store.append("t", vec![ev("t", "6-99")]).await.unwrap();
    let hot: Vec<Vec<Event>> = {
        let mut pages = Vec::new();
        for after in [0, 87, 187, 188, 189, 500, 650, 699, 700, 701] {
            let q = EventQuery {
                after: Some(after),
                limit: Some(50),
                ..EventQuery::default()
            };
            pages.push(store.get_events("t", &q).await.unwrap());
        }
        pages
    };
    drop(store);
    // A fresh store has an empty tail: everything comes from the file.
    let store = open_sqlite(&dir);
    for (page, after) in hot
        .iter()
        .zip([0u64, 87, 187, 188, 189, 500, 650, 699, 700, 701])
    {
        let q = EventQuery {
            after: Some(after),
            limit: Some(50),
            ..EventQuery::default()
        };
        let cold = store.get_events("t", &q).await.unwrap();
        assert_eq!(page, &cold, "after {after}");
        let want: Vec<u64> = (after + 1..=(after + 50).min(700)).collect();
        assert_eq!(seqs(&cold), want, "after {after}");
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL only: several stores (companions) on one log.

/// Two companions append to one session at once, each batch from either; ids that both append
/// are stored once. Sequences stay contiguous with no duplicate, and both read the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_companions_appending_to_one_session_get_contiguous_sequences() {
    let url = postgres::fresh_database().await;
    let (a, b) = (open_postgres(&url).await, open_postgres(&url).await);
    assert_eq!(a.epoch(), b.epoch(), "one log, one epoch");
    a.create_session(session("shared", 1)).await.unwrap();
    let companions: [Arc<dyn Store>; 2] = [a.clone(), b.clone()];

    const TASKS: usize = 16;
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, barrier) = (companions[t % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut got = Vec::new();
                for i in 0..8 {
                    let mut batch: Vec<Event> = (0..=(t + i) % 3)
                        .map(|j| ev("shared", &format!("{t}.{i}.{j}")))
                        .collect();
                    // Task 2k (companion A) and task 2k+1 (companion B) both append this one.
                    batch.push(ev("shared", &format!("both.{}.{i}", t / 2)));
                    let appended = store.append("shared", batch).await.unwrap();
                    let new: Vec<u64> = appended
                        .iter()
                        .filter(|a| !a.duplicate)
                        .map(|a| a.event.sequence())
                        .collect();
                    assert!(
                        new.windows(2).all(|w| w[1] == w[0] + 1),
                        "a batch is contiguous: {new:?}"
                    );
                    got.extend(appended);
                }
                got
            })
        })
        .collect();
    let mut appended = Vec::new();
    for task in tasks {
        appended.extend(within(task).await.unwrap());
    }

    let mut fresh: Vec<u64> = appended
        .iter()
        .filter(|a| !a.duplicate)
        .map(|a| a.event.sequence())
        .collect();
    fresh.sort_unstable();
    let n = fresh.len() as u64;
    assert_eq!(fresh, (1..=n).collect::<Vec<_>>(), "no gap, no duplicate");
    assert_eq!(
        n,
        (TASKS * 8 / 2
            + (0..TASKS)
                .map(|t| (0..8).map(|i| (t + i) % 3 + 1).sum::<usize>())
                .sum::<usize>()) as u64
    );

    let stored = a
        .get_events("shared", &EventQuery::default())
        .await
        .unwrap();
    assert_eq!(seqs(&stored), (1..=n).collect::<Vec<_>>());
    assert_eq!(
        stored,
        b.get_events("shared", &EventQuery::default())
            .await
            .unwrap()
    );
    // Whoever lost the race for a shared id got the stored event back, with its sequence.
    for a in &appended {
        assert_eq!(&stored[a.event.sequence() as usize - 1], &a.event);
    }
    assert_eq!(a.latest_sequence("shared").await.unwrap(), n);
    assert_eq!(b.latest_sequence("shared").await.unwrap(), n);
}

/// One id appended at the same moment to two sessions through two companions: one stores it,
/// the other gets the stored event back, and neither session is left with a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_one_id_into_two_sessions_leaves_no_gap() {
    let url = postgres::fresh_database().await;
    let (a, b) = (open_postgres(&url).await, open_postgres(&url).await);
    a.create_session(session("left", 1)).await.unwrap();
    b.create_session(session("right", 2)).await.unwrap();
    for k in 0..40 {
        let id = format!("race/{k}");
        let left = event_with_id("left", &id, EventType::MessageStreamed, None, 1_000);
        let right = event_with_id("right", &id, EventType::MessageStreamed, None, 1_000);
        // Each batch also carries an event of its own, numbered after the contested one.
        let left = vec![left, ev("left", &format!("own/{k}"))];
        let right = vec![right, ev("right", &format!("own/{k}"))];
        let (l, r) = tokio::join!(a.append("left", left), b.append("right", right));
        let (l, r) = (l.unwrap(), r.unwrap());
        assert!(
            l[0].duplicate != r[0].duplicate,
            "exactly one stores race/{k}"
        );
        assert_eq!(l[0].event, r[0].event);
    }
    for (store, name) in [(&a, "left"), (&b, "right")] {
        let events = store
            .get_events(name, &EventQuery::default())
            .await
            .unwrap();
        let latest = store.latest_sequence(name).await.unwrap();
        assert_eq!(seqs(&events), (1..=latest).collect::<Vec<_>>(), "{name}");
        assert!(events.iter().all(|e| e.session_id() == name));
    }
    let total =
        a.latest_sequence("left").await.unwrap() + b.latest_sequence("right").await.unwrap();
    assert_eq!(total, 40 * 3, "each contested id once, each own event once");
}

/// A subscriber of companion B hears of an append made through companion A (LISTEN/NOTIFY
/// wakes B, which re-reads), and B's long-poll returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_on_one_companion_is_woken_by_an_append_through_another() {
    let url = postgres::fresh_database().await;
    let (a, b) = (open_postgres(&url).await, open_postgres(&url).await);
    a.create_session(session("tail", 1)).await.unwrap();
    let mut commits = b.subscribe();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let query = EventQuery {
                after: Some(0),
                ..EventQuery::default()
            };
            b.wait_events("tail", &query, DEADLINE.as_millis() as u64)
                .await
        }
    });
    let mut heard = 0;
    for i in 1..=20 {
        let appended = a
            .append("tail", vec![ev("tail", &format!("{i}"))])
            .await
            .unwrap();
        assert_eq!(appended[0].event.sequence(), i);
        // B never appends: whatever it hears came through the database.
        while heard < i {
            let Committed {
                session_id,
                latest_sequence,
            } = within(commits.recv()).await.unwrap();
            assert_eq!(session_id, "tail");
            assert!(latest_sequence > heard, "announcements only move forward");
            let query = EventQuery {
                after: Some(heard),
                ..EventQuery::default()
            };
            let events = b.get_events("tail", &query).await.unwrap();
            assert_eq!(
                seqs(&events),
                (heard + 1..=latest_sequence).collect::<Vec<_>>(),
                "told means readable"
            );
            heard = latest_sequence;
        }
    }
    let first = within(waiting).await.unwrap().unwrap();
    assert_eq!(seqs(&first[..1]), [1]);
    assert_eq!(b.commits(), 0, "B wrote nothing");
}

/// Two companions save one session's projection at once, again and again: each save
/// succeeds, and what is left is one of the two saves whole (its checkpoint and every row it
/// named), never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_saves_of_one_session_leave_one_of_them_whole() {
    const N: u64 = 2_000;
    let url = postgres::fresh_database().await;
    let (a, b) = (open_postgres(&url).await, open_postgres(&url).await);
    a.create_session(session("p", 1)).await.unwrap();
    let mut winners = Vec::new();
    for round in 0..6u64 {
        let save = |store: &Arc<PostgresStore>, tag: &str| {
            let tag = format!("{tag}{round}");
            let (store, body) = (store.clone(), tag.clone());
            async move {
                let saved = checkpoint(1, round, N, &body);
                store
                    .save_projection("p", 0, items(&tag, 0, N), saved)
                    .await
            }
        };
        let (x, y) = within(async { tokio::join!(save(&a, "a"), save(&b, "b")) }).await;
        x.unwrap();
        y.unwrap();
        for reader in [&a, &b] {
            let kept = reader.load_projection("p", 1).await.unwrap().unwrap();
            let tag = String::from_utf8(kept.body.clone()).unwrap();
            assert!(
                tag == format!("a{round}") || tag == format!("b{round}"),
                "{tag}"
            );
            assert_eq!((kept.after, kept.items), (round, N));
            let rows = reader.projected_items("p", 1, 0, N).await.unwrap();
            let mixed = rows
                .iter()
                .zip(items(&tag, 0, N))
                .position(|(row, want)| *row != want);
            assert_eq!(
                mixed, None,
                "round {round}: rows differ from the {tag} checkpoint's"
            );
            winners.push(tag);
        }
    }
    // The same store saving at once with itself is one of the two too.
    let (x, y) = tokio::join!(
        a.save_projection("p", 0, items("s1", 0, N), checkpoint(1, 9, N, "s1")),
        a.save_projection("p", 0, items("s2", 0, N), checkpoint(1, 9, N, "s2"))
    );
    x.unwrap();
    y.unwrap();
    let kept = b.load_projection("p", 1).await.unwrap().unwrap();
    let tag = String::from_utf8(kept.body).unwrap();
    assert_eq!(
        b.projected_items("p", 1, 0, N).await.unwrap(),
        items(&tag, 0, N)
    );
    eprintln!("winners: {winners:?}");
}

/// The tables a PostgreSQL log had from schema 3 on (a row per event, text ids), as `version`
/// with `epoch`: each old-schema test adds what its version had beside them.
fn postgres_schema_3_tables(version: i32, epoch: &str) -> String {
    format!(
        "CREATE SCHEMA agentwire;
         CREATE TABLE agentwire.schema_version (
             only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
             version  integer NOT NULL
         );
         INSERT INTO agentwire.schema_version (version) VALUES ({version});
         CREATE TABLE agentwire.meta (key text PRIMARY KEY, value text NOT NULL);
         INSERT INTO agentwire.meta VALUES ('epoch', '{epoch}');
         CREATE TABLE agentwire.sessions (
             id text PRIMARY KEY, ord bigint GENERATED ALWAYS AS IDENTITY,
             provider text NOT NULL, cwd text NOT NULL, state text NOT NULL,
             provider_session_id text, created_at bigint NOT NULL, updated_at bigint NOT NULL,
             latest_seq bigint NOT NULL DEFAULT 0 CHECK (latest_seq >= 0),
             node text NOT NULL DEFAULT ''
         );
         CREATE TABLE agentwire.events (
             session_id text NOT NULL REFERENCES agentwire.sessions (id),
             seq bigint NOT NULL CHECK (seq >= 1), id text NOT NULL UNIQUE, run_id text,
             type text NOT NULL, timestamp_ms bigint NOT NULL, body text NOT NULL,
             PRIMARY KEY (session_id, seq)
         );"
    )
}

/// Writes `event` into the events table of [`postgres_schema_3_tables`], as schemas 3 and 4
/// stored it (a run id with a NUL as the text column holds it).
async fn insert_postgres_schema_3_event(raw: &tokio_postgres::Client, event: &Event) {
    raw.execute(
        "INSERT INTO agentwire.events VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &event.session_id(),
            &(event.sequence() as i64),
            &event.id().as_str(),
            &event.run_id().map(|r| r.replace('\0', "\u{FFFD}")),
            &event.kind().as_str(),
            &event.timestamp().unix_millis(),
            &event.to_json(),
        ],
    )
    .await
    .unwrap();
}

/// The schema version a PostgreSQL log records.
async fn postgres_schema_version(raw: &tokio_postgres::Client) -> i32 {
    raw.query_one("SELECT version FROM agentwire.schema_version", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_postgres_log_is_migrated_keeping_its_events_and_epoch() {
    let url = postgres::fresh_database().await;
    let raw = postgres::connect(&url).await;
    raw.batch_execute(&format!(
        "{}
         CREATE TABLE agentwire.nodes (name text PRIMARY KEY, seen_at bigint NOT NULL);
         INSERT INTO agentwire.sessions (id, provider, cwd, state, created_at, updated_at,
                                         latest_seq, node)
             VALUES ('a', 'demo', '/tmp', 'closed', 1, 1, 1, 'local');",
        postgres_schema_3_tables(3, "fedcba9876543210fedcba9876543210"),
    ))
    .await
    .unwrap();
    let old = ev("a", "1").with_sequence(1);
    insert_postgres_schema_3_event(&raw, &old).await;

    let store = open_postgres(&url).await;
    assert_eq!(PostgresStore::SCHEMA_VERSION, 5);
    assert_eq!(store.epoch(), "fedcba9876543210fedcba9876543210");
    assert_eq!(
        store.get_events("a", &EventQuery::default()).await.unwrap(),
        [old]
    );
    let saved = checkpoint(1, 1, 2, "after 1");
    store
        .save_projection("a", 0, items("a", 0, 2), saved.clone())
        .await
        .unwrap();
    assert_eq!(store.load_projection("a", 1).await.unwrap(), Some(saved));
    let version = postgres_schema_version(&raw).await;
    assert_eq!(version, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn companions_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let url = postgres::fresh_database().await;
    let (a, b) = tokio::join!(PostgresStore::connect(&url), PostgresStore::connect(&url));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.epoch(), b.epoch());
    assert!(
        a.epoch().len() == 32 && a.epoch().bytes().all(|c| c.is_ascii_hexdigit()),
        "{:?}",
        a.epoch()
    );
    drop((a, b));

    let raw = postgres::connect(&url).await;
    let version = postgres_schema_version(&raw).await;
    assert_eq!(version, PostgresStore::SCHEMA_VERSION);
    raw.execute(
        "UPDATE agentwire.schema_version SET version = $1",
        &[&(PostgresStore::SCHEMA_VERSION + 1)],
    )
    .await
    .unwrap();
    match PostgresStore::connect(&url).await {
        Err(StoreError::Database(message)) => assert!(message.contains("newer"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_postgres_row_is_an_error_not_a_panic() {
    let url = postgres::fresh_database().await;
    let store = open_postgres(&url).await;
    store.create_session(session("s", 1)).await.unwrap();
    store
        .append("s", vec![ev("s", "1"), ev("s", "2"), ev("s", "3")])
        .await
        .unwrap();
    let raw = postgres::connect(&url).await;
    raw.batch_execute(
        // The second line of the append's row (schema 5: a row per append).
        "UPDATE agentwire.events SET body = (
             SELECT string_agg(CASE WHEN n = 2 THEN '{\"not\": \"an event\"}' ELSE line END,
                               E'\\n' ORDER BY n)
             FROM unnest(string_to_array(body, E'\\n')) WITH ORDINALITY AS l (line, n))
         WHERE session_id = 's' AND first_seq <= 2 AND last_seq >= 2;
         UPDATE agentwire.sessions SET state = 'exploded' WHERE id = 's';",
    )
    .await
    .unwrap();
    match store.get_events("s", &EventQuery::default()).await {
        Err(StoreError::Corrupt(message)) => assert!(message.contains("\"s\" seq 2"), "{message}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let before = EventQuery {
        before: Some(2),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&store.get_events("s", &before).await.unwrap()), [1]);
    assert!(matches!(
        store.get_session("s").await,
        Err(StoreError::Corrupt(message)) if message.contains("exploded")
    ));
    // Appending the corrupt event's id again is refused, and stores nothing.
    assert!(matches!(
        store.append("s", vec![ev("s", "4"), ev("s", "2")]).await,
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(store.latest_sequence("s").await.unwrap(), 3);
}

/// Schema 5 stores an append as one row: whatever range and filter a read asks for, across
/// rows and inside them (the filters skip rows by their summary on the server, reads with a
/// limit go by pages), it gets what a row per event would give, from this store and from
/// another one on the same database. Every id is found stored again, wherever its row is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_split_over_postgres_rows_read_back_by_every_range_and_filter() {
    let url = postgres::fresh_database().await;
    let store = open_postgres(&url).await;
    store.create_session(session("r", 1)).await.unwrap();
    let log = append_split_batches(&*store, "r").await;
    assert_eq!(seqs(&log), (1..=15).collect::<Vec<_>>());
    let raw = postgres::connect(&url).await;
    let rows: i64 = raw
        .query_one("SELECT count(*) FROM agentwire.events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 5, "one row per append");
    check_every_range(&*store, &log).await;

    let other = open_postgres(&url).await;
    check_every_range(&*other, &log).await;
    assert_every_id_found_stored(&*other, "r", &log).await;
    // A batch of stored and new ids, in one group: the new ones only, numbered on.
    let mixed = vec![log[3].clone(), ev("r", "new"), log[14].clone()];
    let appended = store.append("r", mixed).await.unwrap();
    assert_eq!(
        appended_seqs(&appended),
        [(4, true), (16, false), (15, true)]
    );
    assert_eq!(store.latest_sequence("r").await.unwrap(), 16);
    let tail = EventQuery {
        after: Some(14),
        ..EventQuery::default()
    };
    assert_eq!(seqs(&other.get_events("r", &tail).await.unwrap()), [15, 16]);
}

/// A schema-4 database (a row per event, text ids, the secondary indexes) is migrated on
/// connect: every event reads back under its sequence and filters, every id is found
/// stored, from any session, and the sessions number on from where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_postgres_log_is_migrated_keeping_its_events_and_ids() {
    let url = postgres::fresh_database().await;
    let raw = postgres::connect(&url).await;
    raw.batch_execute(&format!(
        "{}
         CREATE INDEX events_by_run  ON agentwire.events (session_id, run_id, seq);
         CREATE INDEX events_by_type ON agentwire.events (session_id, type, seq);
         CREATE INDEX events_by_time ON agentwire.events (session_id, timestamp_ms);
         CREATE TABLE agentwire.nodes (name text PRIMARY KEY, seen_at bigint NOT NULL);
         CREATE TABLE agentwire.projections (
             session_id text PRIMARY KEY REFERENCES agentwire.sessions (id),
             format bigint NOT NULL, after bigint NOT NULL CHECK (after >= 0),
             items bigint NOT NULL CHECK (items >= 0), body bytea NOT NULL
         );
         CREATE TABLE agentwire.projected_items (
             session_id text NOT NULL REFERENCES agentwire.sessions (id),
             idx bigint NOT NULL CHECK (idx >= 0), format bigint NOT NULL,
             body bytea NOT NULL, PRIMARY KEY (session_id, idx)
         );
         INSERT INTO agentwire.sessions (id, provider, cwd, state, created_at, updated_at,
                                         latest_seq, node)
             VALUES ('a', 'demo', '/tmp', 'closed', 1, 1, 3, 'local'),
                    ('b', 'demo', '/tmp', 'closed', 2, 2, 1, 'local');",
        postgres_schema_3_tables(4, "0123456789abcdef0123456789abcdef"),
    ))
    .await
    .unwrap();
    let old = [
        event_with_id("a", "a1", EventType::RunStarted, Some("r1"), 30).with_sequence(1),
        event_with_id("a", "a2", EventType::MessageStreamed, Some("r1"), 10).with_sequence(2),
        event_with_id("a", "a3", EventType::MessageStreamed, None, 20).with_sequence(3),
        event_with_id("b", "b1", EventType::ToolCallStarted, Some("r\0x"), 5).with_sequence(1),
    ];
    for e in &old {
        insert_postgres_schema_3_event(&raw, e).await;
    }

    let store = open_postgres(&url).await;
    assert_eq!(store.epoch(), "0123456789abcdef0123456789abcdef");
    let version = postgres_schema_version(&raw).await;
    assert_eq!(version, PostgresStore::SCHEMA_VERSION);
    let all = EventQuery::default();
    assert_eq!(store.get_events("a", &all).await.unwrap(), old[..3]);
    assert_eq!(store.get_events("b", &all).await.unwrap(), old[3..]);
    let filtered = |run_id: Option<&str>, kind, since: Option<i64>| EventQuery {
        run_id: run_id.map(str::to_owned),
        kind,
        since: since.map(Timestamp::from_unix_millis),
        ..EventQuery::default()
    };
    let runs = filtered(Some("r1"), None, None);
    assert_eq!(seqs(&store.get_events("a", &runs).await.unwrap()), [1, 2]);
    let kind = filtered(None, Some(EventType::MessageStreamed), Some(15));
    assert_eq!(seqs(&store.get_events("a", &kind).await.unwrap()), [3]);
    let nul = filtered(Some("r\0x"), None, None);
    assert_eq!(store.get_events("b", &nul).await.unwrap(), old[3..]);
    // Every old id is stored, appended to its own session or another one.
    let again = vec![
        event_with_id("b", "a2", EventType::MessageStreamed, None, 1),
        event_with_id("b", "b1", EventType::MessageStreamed, None, 1),
        event_with_id("b", "b2", EventType::MessageStreamed, None, 1),
    ];
    let appended = store.append("b", again).await.unwrap();
    assert_eq!(appended_seqs(&appended), [(2, true), (1, true), (2, false)]);
    assert_eq!(appended[0].event, old[1]);
    assert_eq!(appended[1].event, old[3]);
    let appended = store.append("a", vec![ev("a", "4")]).await.unwrap();
    assert_eq!(appended_seqs(&appended), [(4, false)]);
    for (table, want) in [("agentwire.events", 6), ("agentwire.event_ids", 6)] {
        let n: i64 = raw
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, want, "{table}");
    }
}

/// Connections carry no TLS, so only a server on this machine is accepted; nothing is dialed.
#[tokio::test]
async fn a_postgres_server_elsewhere_is_refused() {
    for url in [
        "postgres://agentwire@db.example.com/agentwire",
        "postgres://agentwire@10.1.2.3:5432/agentwire",
        "host=192.168.0.9 user=agentwire",
    ] {
        match PostgresStore::connect(url).await {
            Err(StoreError::Database(message)) => {
                assert!(message.contains("not on this machine"), "{url}: {message}")
            }
            other => panic!("{url}: expected a refusal, got {other:?}"),
        }
    }
    assert!(matches!(
        PostgresStore::connect("postgres://[::1").await,
        Err(StoreError::Database(message)) if message.contains("bad PostgreSQL URL")
    ));
}
