//! Fan-out through the real server (axum, `companion::ws`) on 127.0.0.1, three loads:
//!
//! * `live 1x1000`: one session, 1,000 WebSocket subscribers, one event appended every 20 ms
//!   (≈ 50 events/s, a demo agent's pace);
//! * `live 100x5`: 100 sessions, 5 subscribers each, each session appending one event every
//!   20 ms (≈ 5,000 events/s in all);
//! * `burst 1x1000`: one session, 1,000 subscribers, events appended one at a time as fast as
//!   the store acknowledges them: deliveries/s at saturation.
//!
//! Latency is per event and subscriber, from the start of `Store::append` (where an event the
//! companion normalized from a line enters the store; durable: WAL + fsync) to the subscriber's
//! socket receiving it. The subscribers are plain WebSocket clients in the same process, which
//! find each event's stamp without decoding the frame. Prints p50/p99/max and deliveries/s per
//! load, beside the figures of BENCHMARKS.md measured before frames were shared; numbers go to
//! BENCHMARKS.md.
//!
//! Run: `cargo bench --bench fanout` (`-- --seconds N` for the live loads' length, `-- --only
//! NAME` for one load (`live1000`, `live100x5`, `burst`), `-- --store postgres` for a
//! PostgreSQL store on a throwaway server started as the tests do).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::companion::host::{Hub, HubConfig};
use agentwire::companion::listen::ListenLimits;
use agentwire::companion::server::{self, AppState, ServerConfig};
use agentwire::companion::store::{PostgresStore, SessionRecord, SessionState, SqliteStore, Store};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;
use agentwire::core::wire::ClientMsg;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[path = "../tests/common/postgres.rs"]
mod postgres;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The `sent_ns` stamps of the events in one `events` frame, found without decoding it.
fn stamps(frame: &str) -> impl Iterator<Item = u64> + '_ {
    const KEY: &str = "\"sent_ns\":";
    frame.match_indices(KEY).map(|(at, _)| {
        let digits = &frame[at + KEY.len()..];
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        digits[..end].parse().expect("a stamp")
    })
}

struct Bench {
    store: Arc<dyn Store>,
    addr: std::net::SocketAddr,
    token: String,
    origin: Instant,
    _dir: tempfile::TempDir,
}

impl Bench {
    async fn start(backend: &str) -> Bench {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let store: Arc<dyn Store> = match backend {
            "sqlite" => Arc::new(SqliteStore::open(&dir.path().join("bench.db")).unwrap()),
            "postgres" => {
                let url = postgres::fresh_database().await;
                Arc::new(PostgresStore::connect(&url).await.unwrap())
            }
            other => panic!("--store {other}: expected sqlite or postgres"),
        };
        let hub = Hub::new(
            store.clone(),
            HubConfig::new(std::env::current_exe().unwrap()),
        );
        let token = "bench-token-0123456789".to_owned();
        let mut config = ServerConfig::new(token.clone(), dir.path().into());
        config.listen = ListenLimits {
            max_connections: 4096,
            ..ListenLimits::default()
        };
        let state = AppState::new(hub, Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve(listener, state, std::future::pending()));
        Bench {
            store,
            addr,
            token,
            origin: Instant::now(),
            _dir: dir,
        }
    }

    async fn session(&self, id: &str) {
        let at = Timestamp::EPOCH;
        self.store
            .create_session(SessionRecord {
                id: id.into(),
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
    }

    /// `subscribers` clients of `session`, each returning its latencies once it has `events`;
    /// returns when all of them are caught up.
    async fn subscribe(
        &self,
        session: &str,
        subscribers: usize,
        events: usize,
    ) -> Vec<tokio::task::JoinHandle<Vec<Duration>>> {
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(subscribers);
        let mut clients = Vec::new();
        for _ in 0..subscribers {
            let url = format!("ws://{}/ws?token={}", self.addr, self.token);
            let ready = ready_tx.clone();
            let origin = self.origin;
            let session = session.to_owned();
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
                    session,
                    after: 0,
                    epoch: None,
                    snapshot: None,
                };
                ws.send(Message::Text(sub.encode().into())).await.unwrap();
                let mut latencies = Vec::with_capacity(events);
                let mut ready = Some(ready);
                while latencies.len() < events {
                    let Some(Ok(Message::Text(text))) = ws.next().await else {
                        panic!("socket closed")
                    };
                    if text.starts_with(r#"{"t":"caught_up""#) {
                        // The first one: later ones come after each live page.
                        if let Some(ready) = ready.take() {
                            ready.send(()).await.unwrap();
                        }
                    } else if text.starts_with(r#"{"t":"events""#) {
                        let now = origin.elapsed();
                        latencies.extend(stamps(&text).map(|ns| now - Duration::from_nanos(ns)));
                    }
                }
                latencies
            }));
        }
        for _ in 0..subscribers {
            ready_rx.recv().await.unwrap();
        }
        clients
    }

    /// Appends `n` events to `session`, one per append, `every` apart (back to back if zero).
    async fn append(
        store: Arc<dyn Store>,
        origin: Instant,
        session: String,
        n: usize,
        every: Duration,
    ) {
        let mut ticker = tokio::time::interval(every.max(Duration::from_micros(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for i in 0..n {
            if !every.is_zero() {
                ticker.tick().await;
            }
            let at = Timestamp::EPOCH;
            let mut init = EventInit::new(EventType::MessageStreamed, &session, Provider::Demo, at);
            init.id = Some(EventId::derive(&[&session, &i.to_string()]));
            init.data
                .insert("delta".into(), json!("twenty chars of text"));
            init.data
                .insert("sent_ns".into(), json!(origin.elapsed().as_nanos() as u64));
            store
                .append(&session, vec![Event::new(init).unwrap()])
                .await
                .unwrap();
        }
    }
}

/// Runs one load: `sessions` × `subscribers`, `events` per session `every` apart.
async fn load(
    backend: &str,
    name: &str,
    sessions: usize,
    subscribers: usize,
    events: usize,
    every: Duration,
    before: &str,
) {
    let bench = Bench::start(backend).await;
    let mut clients = Vec::new();
    let ids: Vec<String> = (0..sessions).map(|i| format!("ses_fa{i:03}")).collect();
    for id in &ids {
        bench.session(id).await;
        clients.extend(bench.subscribe(id, subscribers, events).await);
    }
    let started = Instant::now();
    let appenders: Vec<_> = (ids.iter().enumerate())
        .map(|(i, id)| {
            let (store, origin, id) = (bench.store.clone(), bench.origin, id.clone());
            // Spread the sessions' ticks over one period.
            let offset = every.mul_f64(i as f64 / sessions as f64);
            tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                Bench::append(store, origin, id, events, every).await
            })
        })
        .collect();
    for a in appenders {
        a.await.unwrap();
    }
    let appended = started.elapsed();
    let mut all: Vec<Duration> = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    println!(
        "{name:<13} ({backend}): {sessions} x {subscribers} subscribers, {events} events each = {} \
         deliveries in {:.2} s (appended in {:.2} s); append->socket p50 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms; {:.0} deliveries/s",
        all.len(),
        elapsed.as_secs_f64(),
        appended.as_secs_f64(),
        percentile(&all, 0.50).as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3,
        all.last().unwrap().as_secs_f64() * 1e3,
        all.len() as f64 / elapsed.as_secs_f64(),
    );
    println!("{:<13}  before shared frames (BENCHMARKS.md): {before}", "");
}

#[tokio::main]
async fn main() {
    let backend = arg("--store").unwrap_or_else(|| "sqlite".into());
    let seconds: f64 = arg("--seconds").map_or(10.0, |s| s.parse().unwrap());
    let only = arg("--only");
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let tick = Duration::from_millis(20);
    let live = (seconds / tick.as_secs_f64()) as usize;
    if run("live1000") {
        let before = "p50 15 ms, p99 37-40 ms (demo agents, line->socket)";
        load(&backend, "live 1x1000", 1, 1000, live, tick, before).await;
    }
    if run("live100x5") {
        let before = "p50 14 ms, p99 42-44 ms (demo agents, line->socket)";
        load(&backend, "live 100x5", 100, 5, live, tick, before).await;
    }
    if run("burst") {
        let before = "p99 600 ms at 1,000 subscribers; 143-154k deliveries/s at 100";
        load(
            &backend,
            "burst 1x1000",
            1,
            1000,
            500,
            Duration::ZERO,
            before,
        )
        .await;
    }
}
