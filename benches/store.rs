//! Store benchmarks: durable appends per second (one at a time, batched, and from 64
//! concurrent tasks, which group commit folds into few transactions) and reads of a
//! 100k-event session (all at once, and in pages of 1000). Every append is acknowledged only
//! after its fsync, so the append numbers measure the disk as much as the code. Numbers go to
//! BENCHMARKS.md; nothing here asserts.
//!
//! Run: `cargo bench --bench store` (add `-- --quick` for a shorter run).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Map, Value};
use tempfile::TempDir;
use tokio::runtime::Runtime;

use agentwire::companion::store::{EventQuery, SessionRecord, SessionState, SqliteStore, Store};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A fresh store in a temporary directory on the target's disk (not tmpfs: fsync is real).
fn store_with_session(rt: &Runtime, session: &str) -> (TempDir, Arc<SqliteStore>) {
    let dir = TempDir::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("bench.db")).unwrap());
    rt.block_on(store.create_session(SessionRecord {
        id: session.to_owned(),
        provider: "claude".to_owned(),
        cwd: "/work/project".to_owned(),
        state: SessionState::Running,
        provider_session_id: None,
        created_at: Timestamp::EPOCH,
        updated_at: Timestamp::EPOCH,
        node: "local".into(),
    }))
    .unwrap();
    (dir, store)
}

/// The `n`th event of a typical stream: a ~20-character text delta in a run of 50.
fn event(session: &str, n: u64) -> Event {
    let data: Map<String, Value> = serde_json::from_value(
        json!({"delta": "twenty chars of text", "message_id": format!("msg_{}", n / 50)}),
    )
    .unwrap();
    let mut init = EventInit::new(
        EventType::MessageStreamed,
        session,
        Provider::Claude,
        Timestamp::from_unix_millis(1_700_000_000_000 + n as i64),
    );
    init.id = Some(EventId::derive(&[session, &n.to_string()]));
    init.run_id = Some(format!("run_{}", n / 50));
    init.data = data;
    Event::new(init).unwrap()
}

fn appends(c: &mut Criterion) {
    let rt = runtime();
    let (_dir, store) = store_with_session(&rt, "s");
    let next = AtomicU64::new(0);
    let take = |n: u64| next.fetch_add(n, Ordering::Relaxed);

    let mut g = c.benchmark_group("store_append");
    g.sample_size(20);

    g.throughput(Throughput::Elements(1));
    g.bench_function("single", |b| {
        b.iter(|| {
            let e = event("s", take(1));
            rt.block_on(store.append("s", vec![e])).unwrap()
        })
    });

    g.throughput(Throughput::Elements(100));
    g.bench_function("batch_100", |b| {
        b.iter(|| {
            let first = take(100);
            let batch = (first..first + 100).map(|n| event("s", n)).collect();
            rt.block_on(store.append("s", batch)).unwrap()
        })
    });

    const TASKS: u64 = 64;
    g.throughput(Throughput::Elements(TASKS));
    let (commits_before, mut rounds) = (store.commits(), 0u64);
    g.bench_function(BenchmarkId::new("concurrent", TASKS), |b| {
        b.iter(|| {
            rounds += 1;
            let first = take(TASKS);
            rt.block_on(async {
                let tasks: Vec<_> = (first..first + TASKS)
                    .map(|n| {
                        let store = store.clone();
                        tokio::spawn(async move { store.append("s", vec![event("s", n)]).await })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap().unwrap();
                }
            })
        })
    });
    eprintln!(
        "store_append/concurrent/{TASKS}: {:.1} commits per {TASKS} appends",
        (store.commits() - commits_before) as f64 / rounds.max(1) as f64
    );
    g.finish();
}

fn reads(c: &mut Criterion) {
    const N: u64 = 100_000;
    let rt = runtime();
    let (_dir, store) = store_with_session(&rt, "big");
    for chunk in 0..N / 1000 {
        let batch = (chunk * 1000..(chunk + 1) * 1000)
            .map(|n| event("big", n))
            .collect();
        rt.block_on(store.append("big", batch)).unwrap();
    }

    let mut g = c.benchmark_group("store_read_100k");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N));
    g.bench_function("all", |b| {
        b.iter(|| {
            let events = rt
                .block_on(store.get_events("big", &EventQuery::default()))
                .unwrap();
            black_box(events.len())
        })
    });
    g.bench_function("pages_of_1000", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut after = 0;
                loop {
                    let query = EventQuery {
                        after: Some(after),
                        limit: Some(1000),
                        ..EventQuery::default()
                    };
                    let page = store.get_events("big", &query).await.unwrap();
                    match page.last() {
                        Some(last) => after = last.sequence(),
                        None => break after,
                    }
                }
            })
        })
    });
    g.throughput(Throughput::Elements(1000));
    g.bench_function("one_page_of_1000", |b| {
        let query = EventQuery {
            after: Some(N / 2),
            limit: Some(1000),
            ..EventQuery::default()
        };
        b.iter(|| black_box(rt.block_on(store.get_events("big", &query)).unwrap().len()))
    });
    g.finish();
}

criterion_group!(benches, appends, reads);
criterion_main!(benches);
