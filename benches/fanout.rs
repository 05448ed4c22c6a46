//! Fan-out latency: one session, 100 WebSocket subscribers, events appended one at a time.
//! Measures, per event and subscriber, the time from the start of `Store::append` (durable:
//! WAL + fsync) to the subscriber's socket receiving it, through the real server
//! (axum, `companion::ws`) on 127.0.0.1. Prints p50/p99/max; numbers go to BENCHMARKS.md.
//!
//! Run: `cargo bench --bench fanout` (`-- --subscribers N --events N` to change the load,
//! `-- --store postgres` for a PostgreSQL store on a throwaway server started as the tests do).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::companion::host::{Hub, HubConfig};
use agentwire::companion::server::{self, AppState, ServerConfig};
use agentwire::companion::store::{PostgresStore, SessionRecord, SessionState, SqliteStore, Store};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;
use agentwire::core::wire::{ClientMsg, ServerMsg};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[path = "../tests/common/postgres.rs"]
mod postgres;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let subscribers = arg("--subscribers", 100);
    let events = arg("--events", 500);
    let backend = std::env::args()
        .skip_while(|a| a != "--store")
        .nth(1)
        .unwrap_or_else(|| "sqlite".into());
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store: Arc<dyn Store> = match backend.as_str() {
        "sqlite" => Arc::new(SqliteStore::open(&dir.path().join("bench.db")).unwrap()),
        "postgres" => {
            let url = postgres::fresh_database().await;
            Arc::new(PostgresStore::connect(&url).await.unwrap())
        }
        other => panic!("--store {other}: expected sqlite or postgres"),
    };
    let at = Timestamp::EPOCH;
    let session = "ses_fa0";
    store
        .create_session(SessionRecord {
            id: session.into(),
            provider: "demo".into(),
            cwd: "/".into(),
            state: SessionState::Running,
            provider_session_id: None,
            created_at: at,
            updated_at: at,
            node: "local".into(),
        })
        .await
        .unwrap();
    let hub = Hub::new(
        store.clone(),
        HubConfig::new(std::env::current_exe().unwrap()),
    );
    let token = "bench-token-0123456789".to_owned();
    let state = AppState::new(
        hub,
        Arc::new(ServerConfig::new(token.clone(), dir.path().into())),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server::serve(listener, state, std::future::pending()));

    let origin = Instant::now();
    let mut clients = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(subscribers);
    for _ in 0..subscribers {
        let url = format!("ws://{addr}/ws?token={token}");
        let ready = ready_tx.clone();
        clients.push(tokio::spawn(async move {
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
                session: session.into(),
                after: 0,
                epoch: None,
            };
            ws.send(Message::Text(sub.encode().into())).await.unwrap();
            let mut latencies = Vec::with_capacity(events);
            while latencies.len() < events {
                let Some(Ok(Message::Text(text))) = ws.next().await else {
                    panic!("socket closed")
                };
                match ServerMsg::decode(&text, usize::MAX).unwrap() {
                    ServerMsg::CaughtUp { latest: 0, .. } => ready.send(()).await.unwrap(),
                    ServerMsg::Events { events, .. } => {
                        let now = origin.elapsed();
                        for e in events {
                            let sent = Duration::from_nanos(e.data()["sent_ns"].as_u64().unwrap());
                            latencies.push(now - sent);
                        }
                    }
                    _ => {}
                }
            }
            latencies
        }));
    }
    for _ in 0..subscribers {
        ready_rx.recv().await.unwrap();
    }
    let started = Instant::now();
    for i in 0..events {
        let mut init = EventInit::new(EventType::MessageStreamed, session, Provider::Demo, at);
        init.id = Some(EventId::derive(&[session, &i.to_string()]));
        init.data
            .insert("delta".into(), json!("twenty chars of text"));
        init.data
            .insert("sent_ns".into(), json!(origin.elapsed().as_nanos() as u64));
        store
            .append(session, vec![Event::new(init).unwrap()])
            .await
            .unwrap();
    }
    let mut all: Vec<Duration> = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    println!(
        "fan-out ({backend}): {events} events x {subscribers} subscribers = {} deliveries in {:.2} s; \
         latency append->socket p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.0} deliveries/s",
        all.len(),
        elapsed.as_secs_f64(),
        percentile(&all, 0.50).as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3,
        all.last().unwrap().as_secs_f64() * 1e3,
        all.len() as f64 / elapsed.as_secs_f64(),
    );
}
