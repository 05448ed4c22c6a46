//! Reconnect chaos: `agentwire tail` follows a long demo-agent session through a proxy of ours
//! that cuts, stalls and delays its connection at seeded random points (at least 100 cuts);
//! at the end it has printed exactly the stored log: no gap, no duplicate.
//! `CHAOS_TURNS=N` lengthens the run (the long mode); the default keeps it to seconds.

#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use agentwire::core::event::{Event, EventType};
use common::*;

#[test]
fn tail_through_a_cutting_proxy_prints_the_log_exactly_once() {
    let turns: usize = std::env::var("CHAOS_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    // The proxy's address is a name of the server's too (clients send it as their Host), so
    // the server is told it first, as a reverse proxy's would be.
    let proxy_listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let server = Server::start_with_delay(
        &dir.path().join("a.db"),
        0,
        20,
        &["--allow-host", &proxy_listen],
    );
    let mut proxy = Command::new(env!("CARGO_BIN_EXE_agentwire-testkit"))
        .args([
            "chaos-proxy",
            "--listen",
            &proxy_listen,
            "--upstream",
            &server.addr.to_string(),
            "--seed",
            "7",
        ])
        .args([
            "--cut-min-ms",
            "30",
            "--cut-max-ms",
            "150",
            "--stall-per-mille",
            "30",
            "--max-delay-ms",
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (proxy_tx, proxy_rx) = mpsc::channel::<String>();
    let proxy_out = proxy.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(proxy_out).lines().map_while(Result::ok) {
            let _ = proxy_tx.send(line);
        }
    });
    let listening = proxy_rx.recv_timeout(DEADLINE).unwrap();
    let proxy_addr = listening
        .strip_prefix("chaos-proxy: listening ")
        .unwrap()
        .to_owned();

    let session = server.create_demo_session();
    let mut tail = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "tail",
            &session,
            "--url",
            &format!("ws://{proxy_addr}/ws"),
            "--token",
            TOKEN,
            "--backoff-ms",
            "20",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<Event>();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).expect("tail prints events"));
        }
    });

    let mut printed: Vec<Event> = Vec::new();
    for _ in 0..turns {
        let turn = server.start_turn(&session, "a slow answer please");
        while !ended(&printed, &turn) {
            printed.push(
                rx.recv_timeout(DEADLINE)
                    .expect("tail keeps printing through the chaos"),
            );
        }
    }
    let _ = tail.kill();
    let _ = proxy.kill();
    let _ = tail.wait();
    let _ = proxy.wait();
    let cuts = proxy_rx
        .try_iter()
        .filter(|l| l.starts_with("cut "))
        .count();
    let log = server.events(&session);
    assert_eq!(
        printed,
        log[..printed.len()],
        "tail printed the log in order, once each"
    );
    assert_eq!(printed.len(), log.len(), "nothing was left out");
    assert_eq!(
        printed
            .iter()
            .filter(|e| e.kind() == EventType::RunCompleted)
            .count(),
        turns
    );
    assert!(
        cuts >= 100,
        "the proxy cut the connection {cuts} times; the run needs at least 100"
    );
}
