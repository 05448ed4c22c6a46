//! Load: 100 demo-agent sessions streaming at once while 50 WebSocket subscribers follow them
//! (each follows two sessions). Checks that every subscriber received exactly each session's
//! stored log, and writes the figures (events/s, delivery latency p50/p99, server peak memory)
//! to target/reliability/load.txt. `LOAD_SESSIONS`, `LOAD_TURNS` scale it (the long mode).

#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::time::{Duration, Instant};

use agentwire::core::event::Event;
use agentwire::core::wire::{ClientMsg, ServerMsg};
use common::*;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sessions_and_fifty_subscribers_lose_nothing() {
    let sessions_n = env("LOAD_SESSIONS", 100);
    let turns = env("LOAD_TURNS", 1);
    let subscribers_n = sessions_n / 2;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_delay(&dir.path().join("a.db"), 0, 5, &[]);
    let sessions: Vec<String> = (0..sessions_n)
        .map(|_| server.create_demo_session())
        .collect();

    // Each subscriber follows two sessions and records, per event, when it arrived.
    let mut subscribers = Vec::new();
    for pair in sessions.chunks(2) {
        let (mut socket, _) = hello(&server.ws_url()).await;
        for s in pair {
            send(
                &mut socket,
                &ClientMsg::Subscribe {
                    session: s.clone(),
                    after: 0,
                    epoch: None,
                    snapshot: None,
                },
            )
            .await;
        }
        let pair = pair.to_vec();
        let want_terminals = turns * pair.len();
        subscribers.push(tokio::spawn(async move {
            let mut got: Vec<(Event, i64)> = Vec::new();
            let start = Instant::now();
            while got
                .iter()
                .filter(|(e, _)| e.kind().is_run_terminal())
                .count()
                < want_terminals
            {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "load run did not finish"
                );
                match recv(&mut socket).await {
                    Some(ServerMsg::Events { events, .. }) => {
                        let now = agentwire::companion::now().unix_millis();
                        got.extend(events.into_iter().map(|e| (e, now)));
                    }
                    Some(ServerMsg::Error { error, .. }) => {
                        panic!("{}: {}", error.code, error.message)
                    }
                    Some(_) => {}
                    None => panic!("socket closed"),
                }
            }
            (pair, got)
        }));
    }
    assert_eq!(subscribers.len(), subscribers_n);

    let started = Instant::now();
    for _ in 0..turns {
        let runs: Vec<String> = sessions
            .iter()
            .map(|s| server.start_turn(s, "a slow answer"))
            .collect();
        for (s, run) in sessions.iter().zip(&runs) {
            server.wait_events(s, "the turn to end", |e| ended(e, run));
        }
    }
    let elapsed = started.elapsed();
    let rss = peak_rss_kib(server.child.id());

    let mut latencies = Vec::new();
    let mut delivered = 0usize;
    for sub in subscribers {
        let (pair, got) = sub.await.unwrap();
        for s in &pair {
            let mine: Vec<Event> = got
                .iter()
                .filter(|(e, _)| e.session_id() == s)
                .map(|(e, _)| e.clone())
                .collect();
            let log = server.events(s);
            assert_eq!(
                mine, log,
                "the subscriber of {s} got its whole log, in order, once each"
            );
        }
        delivered += got.len();
        latencies.extend(
            got.iter()
                .map(|(e, at)| (at - e.timestamp().unix_millis()).max(0)),
        );
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    let report = format!(
        "load: {sessions_n} sessions x {turns} turn(s), {subscribers_n} subscribers: {delivered} events delivered in {:.1} s \
         ({:.0} events/s); delivery latency (host read -> subscriber) p50 {} ms, p99 {} ms, max {} ms; \
         server peak RSS {} MiB; nothing lost\n",
        elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        latencies.last().unwrap(),
        rss / 1024,
    );
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../reliability");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("load.txt"), &report).unwrap();
    eprint!("{report}");
}
