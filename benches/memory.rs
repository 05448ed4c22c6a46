//! The companion's memory with a big log and many idle sessions (issue 14, goal 7): a release
//! `agentwire serve` on a SQLite log seeded with 1M events in one session (`seed`, as
//! `agentwire-testkit seed` writes it; the seeded file is kept in target/bench/ and copied for
//! each run), then 100 demo sessions created and left idle (their agents run, no turn), then
//! one WebSocket subscriber replaying the big session from 0 to its `caught_up`, then nothing.
//! Reads the server's VmRSS and VmHWM (/proc/PID/status) after start, with the idle sessions
//! (once the server's CPU went quiet: opening a log with no stored projection builds the
//! long session's first), right after the replay, and once idle again; prints them, what the
//! RSS is made of (/proc/PID/smaps_rollup), and `BENCH` lines (see scripts/bench).
//! `MEMORY_BENCH_HOLD=SECS` holds the server that long before the replay, to look at it;
//! `MEMORY_BENCH_SERVER=PATH` measures another build's `agentwire`. Target: RSS ≤ 100 MB
//! with 1M stored events and 100 idle sessions.
//!
//! Run: `cargo bench --bench memory` (`-- --quick`: 200k events; `-- --events N`, `-- --sessions
//! N`).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use agentwire::companion::seed::{seed, SeedOptions};
use agentwire::companion::store::SqliteStore;
use agentwire::core::wire::ClientMsg;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

const TOKEN: &str = "bench-token-0123456789abcdef";
const SESSION: &str = "ses_0e0e1";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// `name`'s value in a /proc file of `kB` lines, in MiB.
fn kib_field(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// VmRSS and VmHWM of `pid`, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (kib_field(&status, "VmRSS:"), kib_field(&status, "VmHWM:"))
}

/// `pid`'s CPU time so far (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Waits until `pid` is idle: under 20 ms of CPU in each of two half seconds in a row (at
/// most a minute), then 2 s more, for the store's idle release (`IDLE_RELEASE`, 1 s).
/// Returns how long that took, in seconds.
async fn settle(pid: u32) -> f64 {
    let started = Instant::now();
    let (mut last, mut quiet) = (cpu_ticks(pid), 0);
    while quiet < 2 && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_ticks(pid);
        quiet = if now - last < 2 { quiet + 1 } else { 0 };
        last = now;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    started.elapsed().as_secs_f64()
}

/// What `pid`'s RSS is made of, for the log: anonymous (the heap, stacks) and file-backed or
/// shared (the binary's pages, SQLite's shared-memory index of the WAL).
fn breakdown(pid: u32) -> String {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let rss = kib_field(&rollup, "Rss:");
    let anon = kib_field(&rollup, "Anonymous:");
    format!(
        "anonymous {anon:.1} MiB, file-backed or shared {:.1} MiB",
        rss - anon
    )
}

fn bench_line(id: &str, value: f64, unit: &str, target: Option<f64>, note: &str) {
    let (target, ratio) = match target {
        Some(t) => (format!("target {t}"), format!("{:.2}x", t / value)),
        None => ("-".into(), "-".into()),
    };
    println!("BENCH\t{id}\t{value:.1}\t{unit}\t{target}\t{ratio}\t{note}");
}

/// One HTTP/1.1 request to the server; returns the status and the body.
async fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// The seeded log for `events`, made once and kept in target/bench/.
async fn seeded(events: u64) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("memory-{events}.db"));
    if !path.exists() {
        let partial = dir.join(format!("memory-{events}.db.partial"));
        let _ = std::fs::remove_file(&partial);
        let started = Instant::now();
        let store = SqliteStore::open(&partial).unwrap();
        let options = SeedOptions {
            session: SESSION.into(),
            events,
            tool_updates: None,
        };
        let n = seed(&store, &options).await.unwrap();
        drop(store);
        std::fs::rename(&partial, &path).unwrap();
        eprintln!(
            "seeded {n} events in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    path
}

#[tokio::main]
async fn main() {
    let quick =
        std::env::args().any(|a| a == "--quick") || std::env::var_os("BENCH_QUICK").is_some();
    let events: u64 = arg("--events").map_or(if quick { 200_000 } else { 1_000_000 }, |s| {
        s.parse().unwrap()
    });
    let sessions: usize = arg("--sessions").map_or(100, |s| s.parse().unwrap());
    let source = seeded(events).await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = dir.path().join("log.db");
    std::fs::copy(&source, &db).unwrap();

    // Another build's server (its schema must read this one's seeded file), for a before
    // and after in one sitting.
    let bin = std::env::var_os("MEMORY_BENCH_SERVER")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agentwire").into());
    let mut server = tokio::process::Command::new(bin)
        .args(["serve", "--addr", "127.0.0.1:0", "--db"])
        .arg(&db)
        .env("AGENTWIRE_TOKEN", TOKEN)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = server.id().unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("serve printed its address");
        if let Some(rest) = line.strip_prefix("agentwire: serving http://") {
            break rest.split('/').next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = memory(pid);
    eprintln!(
        "memory: serving on {addr}, RSS {:.1} MiB ({}); creating {sessions} sessions",
        start.0,
        breakdown(pid)
    );

    for _ in 0..sessions {
        let (status, body) = http(&addr, "POST", "/api/sessions", r#"{"provider":"demo"}"#).await;
        assert_eq!(status, 201, "{body}");
    }
    // Opening a log with no stored projection builds the long session's in the background
    // (`snapshot::Projections::keep_checkpoints`): idle means after it.
    let settled = settle(pid).await;
    let idle_sessions = memory(pid);
    eprintln!(
        "memory: {sessions} sessions, idle after {settled:.1} s, RSS {:.1} MiB ({}); replaying",
        idle_sessions.0,
        breakdown(pid)
    );
    if let Some(secs) = std::env::var_os("MEMORY_BENCH_HOLD") {
        // Time to look at the server from outside (gdb, /proc/PID/smaps) before the replay.
        let secs: u64 = secs.to_str().and_then(|s| s.parse().ok()).unwrap_or(60);
        eprintln!("memory: holding {secs} s, server pid {pid}");
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    // One subscriber replays the big session from 0 to its caught_up.
    let url = format!("ws://{addr}/ws?token={TOKEN}");
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let hello = ClientMsg::Hello {
        protocols: vec![1],
        max_frame: None,
        client: None,
        features: Vec::new(),
    };
    ws.send(Message::Text(hello.encode().into())).await.unwrap();
    let sub = ClientMsg::Subscribe {
        session: SESSION.into(),
        after: 0,
        epoch: None,
        snapshot: None,
    };
    ws.send(Message::Text(sub.encode().into())).await.unwrap();
    let replay = Instant::now();
    let mut bytes = 0usize;
    let mut peak_during = 0f64;
    let mut frames = 0usize;
    loop {
        let Some(Ok(msg)) = ws.next().await else {
            panic!("socket closed")
        };
        if let Message::Text(text) = msg {
            bytes += text.len();
            frames += 1;
            if frames % 200 == 0 {
                peak_during = peak_during.max(memory(pid).0);
                eprintln!(
                    "memory: {frames} frames, {:.0} MB, RSS {peak_during:.1} MiB",
                    bytes as f64 / 1e6
                );
            }
            if text.starts_with(r#"{"t":"caught_up""#) {
                break;
            }
            assert!(!text.starts_with(r#"{"t":"error""#), "{text}");
        }
    }
    let replay_s = replay.elapsed().as_secs_f64();
    let after_replay = memory(pid);
    peak_during = peak_during.max(after_replay.0);
    drop(ws);
    let settled = settle(pid).await;
    let idle_again = memory(pid);
    eprintln!(
        "memory: idle again after {settled:.1} s ({})",
        breakdown(pid)
    );
    let _ = server.start_kill();

    println!(
        "memory: {events} stored events, {sessions} idle demo sessions; RSS (HWM) in MiB: \
         after start {:.1} ({:.1}), with the sessions {:.1} ({:.1}), after replaying \
         {:.0} MB in {replay_s:.1} s {:.1} ({:.1}; RSS peak sampled {peak_during:.1}), idle again \
         {:.1} ({:.1})",
        start.0,
        start.1,
        idle_sessions.0,
        idle_sessions.1,
        bytes as f64 / 1e6,
        after_replay.0,
        after_replay.1,
        idle_again.0,
        idle_again.1,
    );
    let k = format!("{}k", events / 1000);
    let note = format!("{events} events, {sessions} idle sessions, release serve");
    bench_line(&format!("memory.{k}.start"), start.0, "MiB", None, &note);
    bench_line(
        &format!("memory.{k}.sessions"),
        idle_sessions.0,
        "MiB",
        Some(100.0),
        &note,
    );
    bench_line(
        &format!("memory.{k}.replay.hwm"),
        after_replay.1,
        "MiB",
        None,
        &note,
    );
    bench_line(
        &format!("memory.{k}.idle"),
        idle_again.0,
        "MiB",
        Some(100.0),
        &note,
    );
    bench_line(
        &format!("memory.{k}.replay.rate"),
        events as f64 / replay_s,
        "events/s",
        None,
        "one WebSocket subscriber from 0, release serve",
    );
}
