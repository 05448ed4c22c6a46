//! Store benchmarks, for each backend: durable appends per second (100 sessions appending
//! batches of 100 at once; one at a time, batched, and from 64 concurrent tasks on one session,
//! which group commit folds into few transactions) and reads of a
//! 100k-event session (all at once, and in pages of 1000). Every append is acknowledged only
//! after its fsync, so the append numbers measure the disk as much as the code. SQLite is a
//! file under target/; PostgreSQL is a fresh database on the throwaway local server that the
//! tests use (`scripts/throwaway-postgres`: fsync on, data under `$TMPDIR`, loopback TCP).
//! Numbers go to BENCHMARKS.md; nothing here asserts.
//!
//! Run: `cargo bench --bench store` (add `-- --quick` for a shorter run, `-- postgres` for
//! PostgreSQL only). The sustained figure of issue 14 (100 sessions appending for
//! `STORE_BENCH_SECS`, default 5, with the commit latency of a single append meanwhile) and
//! its `BENCH` lines: `cargo bench --bench store -- sustained` (`-- store_sustained`: SQLite
//! alone). It also reports the CPU per event (the process's, and the writer thread's; with
//! PostgreSQL also the throwaway server's processes', from `/proc`), and
//! `STORE_BENCH_PREFILL=N` fills the log with N events (in 100 other sessions) first, so the
//! id index is as large as after a while (and SQLite's hot id table has been merged into the
//! cold one a few times).
//! The projection checkpoints of issue 16 (a save of 1,000 items, a cold snapshot's reads of
//! 200 and 10,000) and their `BENCH` lines: `cargo bench --bench store -- projection`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Map, Value};
use tempfile::TempDir;
use tokio::runtime::Runtime;

use agentwire::companion::store::{
    EventQuery, PostgresStore, SessionRecord, SessionState, SqliteStore, Store, StoredProjection,
};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;

#[path = "../tests/common/postgres.rs"]
mod postgres;

/// The binary's allocator, so that this measures what it runs (`companion::alloc`).
#[global_allocator]
static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;

/// Whether criterion's filter (the first free argument) can select a benchmark of `group`, so
/// a filtered run skips the setup (stores, 100k-event logs) of the groups it does not run.
fn selected(group: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filter = args.iter().enumerate().find(|(i, a)| {
        !a.starts_with('-')
            && (*i == 0
                || ![
                    "--save-baseline",
                    "--baseline",
                    "--profile-time",
                    "--measurement-time",
                    "--warm-up-time",
                    "--sample-size",
                ]
                .contains(&args[i - 1].as_str()))
    });
    match filter {
        None => true,
        Some((_, f)) => {
            let head = f.split('/').next().unwrap_or_default();
            group.contains(head) || f.starts_with(group)
        }
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A store with one session, and its commit counter.
struct Bench {
    store: Arc<dyn Store>,
    commits: Box<dyn Fn() -> u64>,
    /// The SQLite file's directory, deleted on drop.
    _dir: Option<TempDir>,
}

type Open = fn(&Runtime) -> Bench;

/// A fresh store in a temporary directory on the target's disk (not tmpfs: fsync is real).
fn sqlite(_rt: &Runtime) -> Bench {
    let dir = TempDir::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("bench.db")).unwrap());
    Bench {
        store: store.clone(),
        commits: Box::new(move || store.commits()),
        _dir: Some(dir),
    }
}

/// A fresh database on the throwaway PostgreSQL server.
fn postgres(rt: &Runtime) -> Bench {
    let store = rt.block_on(async {
        let url = postgres::fresh_database().await;
        Arc::new(PostgresStore::connect(&url).await.unwrap())
    });
    Bench {
        store: store.clone(),
        commits: Box::new(move || store.commits()),
        _dir: None,
    }
}

fn with_session(rt: &Runtime, open: Open, session: &str) -> Bench {
    let bench = open(rt);
    rt.block_on(bench.store.create_session(SessionRecord::new(
        session,
        "claude",
        "/work/project",
        SessionState::Running,
        "local",
        Timestamp::EPOCH,
    )))
    .unwrap();
    bench
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

fn appends(c: &mut Criterion, name: &str, open: Open) {
    if !selected(&format!("{name}_append/")) {
        return;
    }
    let rt = runtime();
    let Bench { store, commits, .. } = &with_session(&rt, open, "s");
    let next = AtomicU64::new(0);
    let take = |n: u64| next.fetch_add(n, Ordering::Relaxed);

    let mut g = c.benchmark_group(format!("{name}_append"));
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
    let (commits_before, mut rounds) = (commits(), 0u64);
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
    if rounds > 0 {
        eprintln!(
            "{name}_append/concurrent/{TASKS}: {:.1} commits per {TASKS} appends",
            (commits() - commits_before) as f64 / rounds as f64
        );
    }
    g.finish();
}

/// 100 sessions appending at once, each a batch of `BATCH` per append and one append in
/// flight (as each session's store queue does): group commit across sessions.
fn sessions_at_once(c: &mut Criterion, name: &str, open: Open) {
    const SESSIONS: usize = 100;
    const BATCH: u64 = 100;
    if !selected(&format!("{name}_append_sessions")) {
        return;
    }
    let rt = runtime();
    let bench = open(&rt);
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s{i:03}")).collect();
    for id in &ids {
        rt.block_on(bench.store.create_session(SessionRecord::new(
            id.as_str(),
            "claude",
            "/work/project",
            SessionState::Running,
            "local",
            Timestamp::EPOCH,
        )))
        .unwrap();
    }
    let store = &bench.store;
    let next = AtomicU64::new(0);
    let mut g = c.benchmark_group(format!("{name}_append_sessions"));
    g.sample_size(10);
    g.throughput(Throughput::Elements(SESSIONS as u64 * BATCH));
    let (commits_before, mut rounds) = ((bench.commits)(), 0u64);
    g.bench_function(
        BenchmarkId::new(format!("{SESSIONS}_at_once"), BATCH),
        |b| {
            b.iter(|| {
                rounds += 1;
                let first = next.fetch_add(BATCH, Ordering::Relaxed);
                rt.block_on(async {
                    let tasks: Vec<_> = (ids.iter())
                        .map(|id| {
                            let (store, id) = (store.clone(), id.clone());
                            // Built in each task, as each session's loop builds its own.
                            tokio::spawn(async move {
                                let batch = (first..first + BATCH).map(|n| event(&id, n)).collect();
                                store.append(&id, batch).await
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap().unwrap();
                    }
                })
            })
        },
    );
    if rounds > 0 {
        eprintln!(
            "{name}_append_sessions: {:.1} commits per round of {SESSIONS} appends of {BATCH}",
            ((bench.commits)() - commits_before) as f64 / rounds as f64
        );
    }
    g.finish();
}

/// The sustained figure (issue 14, goal 4): 100 sessions appending batches of 100 for a few
/// seconds, each session one append in flight (as each session's store queue does), every
/// event acknowledged after its commit's fsync; meanwhile one more session appends single small
/// events one after another, and the latency of each (call to acknowledgement) is recorded.
/// Prints the machine lines `BENCH store.<name>.sessions_100x100` (events/s, target 200k) and
/// `BENCH store.<name>.commit_latency_under_load.p50/p99` (ms). Seconds: `STORE_BENCH_SECS`
/// (default 5).
fn sustained(_c: &mut Criterion, name: &str, open: Open) {
    const SESSIONS: usize = 100;
    const BATCH: u64 = 100;
    const TARGET: f64 = 200_000.0;
    if !selected(&format!("{name}_sustained")) {
        return;
    }
    let secs: f64 = std::env::var("STORE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let rt = runtime();
    let bench = open(&rt);
    let ids: Vec<String> = (0..=SESSIONS).map(|i| format!("s{i:03}")).collect();
    for id in &ids {
        rt.block_on(bench.store.create_session(SessionRecord::new(
            id.as_str(),
            "claude",
            "/work/project",
            SessionState::Running,
            "local",
            Timestamp::EPOCH,
        )))
        .unwrap();
    }
    // A log that already holds events, so the id index is as large as a companion's after a
    // while (`STORE_BENCH_PREFILL` events in 100 other sessions, batches of 1000; default 0).
    let prefill: u64 = std::env::var("STORE_BENCH_PREFILL")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if prefill > 0 {
        let fill: Vec<String> = (0..SESSIONS).map(|i| format!("f{i:03}")).collect();
        rt.block_on(async {
            for id in &fill {
                let record = SessionRecord::new(
                    id.as_str(),
                    "claude",
                    "/work/project",
                    SessionState::Running,
                    "local",
                    Timestamp::EPOCH,
                );
                bench.store.create_session(record).await.unwrap();
            }
            let per_session = prefill.div_ceil(SESSIONS as u64);
            let tasks: Vec<_> = (fill.iter())
                .map(|id| {
                    let (store, id) = (bench.store.clone(), id.clone());
                    tokio::spawn(async move {
                        for first in (0..per_session).step_by(1000) {
                            let last = (first + 1000).min(per_session);
                            let batch = (first..last).map(|n| event(&id, n)).collect();
                            store.append(&id, batch).await.unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        eprintln!("{name}_sustained: the log holds {prefill} events before the run");
    }
    // What building the events costs (the load, not the store): part of the process's CPU
    // below. A companion's normalizer builds its events too.
    let building = {
        let start = thread_cpu_now();
        for n in 0..20_000 {
            black_box(event("s000", n));
        }
        (thread_cpu_now() - start) / 20_000.0
    };
    let commits_before = (bench.commits)();
    let cpu_before = thread_cpu();
    let server_before = descendants_cpu();
    let (events, latencies, elapsed) = rt.block_on(async {
        let start = std::time::Instant::now();
        let deadline = start + std::time::Duration::from_secs_f64(secs);
        let loaders: Vec<_> = ids[..SESSIONS]
            .iter()
            .map(|id| {
                let (store, id) = (bench.store.clone(), id.clone());
                tokio::spawn(async move {
                    let mut next = 0u64;
                    while std::time::Instant::now() < deadline {
                        // Built in each task, as each session's loop builds its own.
                        let batch = (next..next + BATCH).map(|n| event(&id, n)).collect();
                        store.append(&id, batch).await.unwrap();
                        next += BATCH;
                    }
                    next
                })
            })
            .collect();
        let (store, probe) = (bench.store.clone(), ids[SESSIONS].clone());
        let prober = tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while std::time::Instant::now() < deadline {
                let e = event(&probe, n);
                let sent = std::time::Instant::now();
                store.append(&probe, vec![e]).await.unwrap();
                latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                n += 1;
            }
            latencies
        });
        let mut events = 0u64;
        for l in loaders {
            events += l.await.unwrap();
        }
        let elapsed = start.elapsed().as_secs_f64();
        (events, prober.await.unwrap(), elapsed)
    });
    let rate = events as f64 / elapsed;
    let (all, writer) = cpu_since(&cpu_before);
    let (server, backend_cpu) = descendants_since(&server_before);
    eprintln!(
        "{name}_sustained: CPU per event {:.2} us (the process), {:.2} us (its busiest store \
         thread: the writer), of which building the events (the bench's load) {:.2} us",
        all * 1e6 / events as f64,
        writer * 1e6 / events as f64,
        building * 1e6
    );
    let mut sorted = latencies;
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let commits = (bench.commits)() - commits_before;
    eprintln!(
        "{name}_sustained: {events} events in {elapsed:.2} s = {rate:.0} events/s, {commits} \
         commits ({:.0} events per commit); a single append meanwhile: p50 {:.2} ms, p99 {:.2} \
         ms ({} probes)",
        events as f64 / commits.max(1) as f64,
        pct(0.5),
        pct(0.99),
        sorted.len()
    );
    let backend = if name == "store" { "sqlite" } else { name };
    println!(
        "BENCH\tstore.{backend}.sessions_100x100\t{rate:.0}\tevents/s\ttarget {TARGET:.0}\t{:.2}x\t\
         {SESSIONS} sessions x batches of {BATCH}, {secs} s, fsync per commit",
        rate / TARGET
    );
    println!(
        "BENCH\tstore.{backend}.cpu_per_event\t{:.2}\tus\t-\t-\tthe whole process; the writer \
         thread {:.2} us; building the events {:.2} us{}",
        all * 1e6 / events as f64,
        writer * 1e6 / events as f64,
        building * 1e6,
        if prefill > 0 {
            format!(", log prefilled with {prefill} events")
        } else {
            String::new()
        }
    );
    if server > 0.0 {
        println!(
            "BENCH\tstore.{backend}.server_cpu_per_event\t{:.2}\tus\t-\t-\tthe throwaway \
             server's processes; its busiest (the writer's backend) {:.2} us",
            server * 1e6 / events as f64,
            backend_cpu * 1e6 / events as f64,
        );
    }
    for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
        println!(
            "BENCH\tstore.{backend}.commit_latency_under_load.{label}\t{:.2}\tms\t-\t-\t\
             one 1-event append while {SESSIONS} sessions append batches",
            pct(p)
        );
    }
}

/// CPU seconds the calling thread has used.
fn thread_cpu_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds per thread of this process (Linux: `/proc/self/task/*/stat`), with its name.
fn thread_cpu() -> std::collections::HashMap<u64, (String, f64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut threads = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for task in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        // After the name: state is field 3, utime 14 and stime 15.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
        if let (Ok(tid), Some(user), Some(system)) = (
            task.file_name().to_string_lossy().parse(),
            ticks(14),
            ticks(15),
        ) {
            threads.insert(tid, (comm, (user + system) / hz));
        }
    }
    threads
}

/// CPU seconds of every process descended from this one (Linux: `/proc/*/stat`), by pid:
/// the throwaway PostgreSQL server's postmaster and backends (a server named by
/// `AGENTWIRE_TEST_POSTGRES` is not counted). Each figure includes the reaped children's.
fn descendants_cpu() -> std::collections::HashMap<u64, f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut procs: Vec<(u64, u64, f64)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        // After the name: ppid is field 4; utime, stime, cutime, cstime 14 to 17.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
        if let (Some(ppid), Some(a), Some(b), Some(c), Some(d)) =
            (field(4), field(14), field(15), field(16), field(17))
        {
            procs.push((pid, ppid as u64, (a + b + c + d) / hz));
        }
    }
    let mut mine = std::collections::HashSet::from([std::process::id() as u64]);
    loop {
        let before = mine.len();
        for (pid, ppid, _) in &procs {
            if mine.contains(ppid) {
                mine.insert(*pid);
            }
        }
        if mine.len() == before {
            break;
        }
    }
    mine.remove(&(std::process::id() as u64));
    (procs.into_iter())
        .filter(|(pid, _, _)| mine.contains(pid))
        .map(|(pid, _, cpu)| (pid, cpu))
        .collect()
}

/// Descendants' CPU seconds since `before`: all of them, and the busiest process (with
/// PostgreSQL, the writer's backend).
fn descendants_since(before: &std::collections::HashMap<u64, f64>) -> (f64, f64) {
    let (mut all, mut busiest) = (0.0, 0.0f64);
    for (pid, cpu) in descendants_cpu() {
        let spent = cpu - before.get(&pid).copied().unwrap_or(0.0);
        all += spent;
        busiest = busiest.max(spent);
    }
    (all, busiest)
}

/// CPU seconds since `before`: the whole process's, and the busiest store thread's.
fn cpu_since(before: &std::collections::HashMap<u64, (String, f64)>) -> (f64, f64) {
    let (mut all, mut writer) = (0.0, 0.0f64);
    for (tid, (comm, cpu)) in thread_cpu() {
        let spent = cpu - before.get(&tid).map_or(0.0, |(_, c)| *c);
        all += spent;
        if comm.starts_with("agentwire-store") {
            writer = writer.max(spent);
        }
    }
    (all, writer)
}

fn reads(c: &mut Criterion, name: &str, open: Open) {
    const N: u64 = 100_000;
    if !selected(&format!("{name}_read_100k")) {
        return;
    }
    let rt = runtime();
    let Bench { store, .. } = &with_session(&rt, open, "big");
    for chunk in 0..N / 1000 {
        let batch = (chunk * 1000..(chunk + 1) * 1000)
            .map(|n| event("big", n))
            .collect();
        rt.block_on(store.append("big", batch)).unwrap();
    }

    let mut g = c.benchmark_group(format!("{name}_read_100k"));
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

/// Issue 16: projections kept beside the log. A session holding 10,000 final items of 1 KiB
/// (saved 1,000 at a time); then `ROUNDS` saves of 1,000 items (replacing the last 1,000) with
/// a 16 KiB checkpoint, as a companion checkpointing a long session does, and a cold
/// snapshot's reads: the checkpoint and the last 200 items, and the checkpoint and all 10,000
/// (one range each). Prints `BENCH store.<backend>.projection.save_1000x1k`, `.load_read_200`
/// and `.load_read_10k` (ms, medians of `ROUNDS`). Saves commit as appends do (SQLite: in
/// the writer's group, `synchronous=FULL`; PostgreSQL: `synchronous_commit = on`).
fn projections(_c: &mut Criterion, name: &str, open: Open) {
    const ITEMS: u64 = 10_000;
    const SAVE: u64 = 1_000;
    const ROUNDS: usize = 20;
    if !selected(&format!("{name}_projection")) {
        return;
    }
    let rt = runtime();
    let bench = with_session(&rt, open, "p");
    let store = &bench.store;
    let item = |i: u64| {
        let mut body = format!("{{\"item\":{i},\"text\":\"").into_bytes();
        body.resize(1024, b'x');
        body
    };
    let checkpoint = |after: u64| StoredProjection {
        format: 1,
        after,
        items: ITEMS,
        body: vec![7; 16 << 10],
    };
    for chunk in 0..ITEMS / SAVE {
        let items = (chunk * SAVE..(chunk + 1) * SAVE).map(item).collect();
        rt.block_on(store.save_projection("p", chunk * SAVE, items, checkpoint(chunk)))
            .unwrap();
    }
    let median = |mut ms: Vec<f64>| {
        ms.sort_by(f64::total_cmp);
        ms[ms.len() / 2]
    };
    let last: Vec<Vec<u8>> = (ITEMS - SAVE..ITEMS).map(item).collect();
    let saves: Vec<f64> = (0..ROUNDS)
        .map(|round| {
            let (items, checkpoint) = (last.clone(), checkpoint(100 + round as u64));
            let start = std::time::Instant::now();
            rt.block_on(store.save_projection("p", ITEMS - SAVE, items, checkpoint))
                .unwrap();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let read = |n: u64| -> Vec<f64> {
        (0..ROUNDS)
            .map(|_| {
                let start = std::time::Instant::now();
                rt.block_on(async {
                    let checkpoint = store.load_projection("p", 1).await.unwrap().unwrap();
                    let items = (store.projected_items("p", 1, ITEMS - n, checkpoint.items))
                        .await
                        .unwrap();
                    assert_eq!(items.len() as u64, n);
                    black_box((checkpoint, items))
                });
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    };
    let (read_200, read_10k) = (read(200), read(ITEMS));
    let backend = if name == "store" { "sqlite" } else { name };
    let figures = [
        (
            "save_1000x1k",
            median(saves),
            "1,000 items of 1 KiB + a 16 KiB checkpoint, one transaction, committed",
        ),
        (
            "load_read_200",
            median(read_200),
            "the checkpoint + the last 200 of 10,000 items of 1 KiB, one range",
        ),
        (
            "load_read_10k",
            median(read_10k),
            "the checkpoint + all 10,000 items of 1 KiB, one range",
        ),
    ];
    for (id, ms, note) in figures {
        eprintln!("{name}_projection/{id}: {ms:.2} ms (median of {ROUNDS})");
        println!("BENCH\tstore.{backend}.projection.{id}\t{ms:.2}\tms\t-\t-\t{note}");
    }
}

fn sqlite_projections(c: &mut Criterion) {
    projections(c, "store", sqlite);
}

fn postgres_projections(c: &mut Criterion) {
    projections(c, "postgres", postgres);
}

fn sqlite_appends(c: &mut Criterion) {
    appends(c, "store", sqlite);
}

fn sqlite_sustained(c: &mut Criterion) {
    sustained(c, "store", sqlite);
}

fn postgres_sustained(c: &mut Criterion) {
    sustained(c, "postgres", postgres);
}

fn sqlite_sessions(c: &mut Criterion) {
    sessions_at_once(c, "store", sqlite);
}

fn postgres_sessions(c: &mut Criterion) {
    sessions_at_once(c, "postgres", postgres);
}

fn sqlite_reads(c: &mut Criterion) {
    reads(c, "store", sqlite);
}

fn postgres_appends(c: &mut Criterion) {
    appends(c, "postgres", postgres);
}

fn postgres_reads(c: &mut Criterion) {
    reads(c, "postgres", postgres);
}

criterion_group!(
    benches,
    sqlite_sustained,
    postgres_sustained,
    sqlite_projections,
    postgres_projections,
    sqlite_sessions,
    sqlite_appends,
    sqlite_reads,
    postgres_sessions,
    postgres_appends,
    postgres_reads
);
criterion_main!(benches);
