//! Fan-out through the real server (axum, `companion::ws`) on 127.0.0.1, three loads:
//!
//! * `live 1x1000`: one session, 1,000 WebSocket subscribers, one event appended every 20 ms
//!   (≈ 50 events/s, a demo agent's pace);
//! * `live 100x5`: 100 sessions, 5 subscribers each, each session appending one event every
//!   20 ms (≈ 5,000 events/s in all);
//! * `burst 1x1000`: one session, 1,000 subscribers, events appended one at a time as fast as
//!   the store acknowledges them: deliveries/s at saturation;
//! * `line 1x1000` and `line 100x5`: the same two live loads through the whole pipeline: demo
//!   agents (`agentwire demo-agent`, a chunk every 20 ms) hosted by a real `Hub`, their lines
//!   read, normalized and queued by each session's task as in `agentwire serve`;
//! * `floor 1x1000` and `floor 100x5`, the baseline of the live loads, measured in the same run:
//!   what this machine's kernel takes to put the same frame on every socket with no server at
//!   all. Plain loopback TCP sockets, the frame's bytes written by one thread with `write(2)`
//!   (no runtime, no WebSocket framing, no store), read by another over `epoll`; latency from
//!   the start of the event's writes. The live loads' `fan-out` part is compared with it.
//!
//! Latency is per event and subscriber. In the append loads, from the start of `Store::append`
//! (durable: WAL + fsync) to the subscriber's socket receiving it, split where the store
//! announced the commit (`commit`: the writer's queue, the transaction and its fsync; heard on
//! a thread of its own) and the rest (`fan-out`: dispatch, follower, encoding, WebSocket write,
//! the client's read). In the line loads, from the event's timestamp (stamped when the host
//! read the agent's line, in whole milliseconds, so up to 1 ms early) to the socket, split also
//! at the append's start (`line->append`: normalizer, session, store queue), found by wrapping
//! the store. The subscribers are WebSocket clients in the same process, as cheap as a client
//! can be (the handshake and frame headers read by hand, each frame checked as UTF-8, each
//! event's sequence found without decoding the frame; `-- --client tungstenite` for
//! `tokio-tungstenite` clients), so that most of the two cores go to the server. Prints
//! p50/p99/max and deliveries/s per load, and one `BENCH` line per figure (see scripts/bench);
//! numbers go to BENCHMARKS.md.
//!
//! Run: `cargo bench --bench fanout` (`-- --quick` for 3 s loads, `-- --seconds N` for the live
//! loads' length, `-- --only NAME` for one load (`floor1000`, `floor100x5`, `live1000`,
//! `live100x5`, `burst`, `line1000`, `line100x5`), `-- --client tungstenite` (see above),
//! `-- --store postgres` for a PostgreSQL store on a throwaway server started as the tests do).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentwire::companion::host::{Hub, HubConfig};
use agentwire::companion::listen::ListenLimits;
use agentwire::companion::server::{self, AppState, ServerConfig};
use agentwire::companion::store::{
    Appended, Committed, EventQuery, PostgresStore, SessionRecord, SessionState, SqliteStore,
    Store, StoreError,
};
use agentwire::core::event::{Event, EventId, EventInit, EventType, Provider};
use agentwire::core::time::Timestamp;
use agentwire::core::wire::ClientMsg;
use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

#[path = "../tests/common/postgres.rs"]
mod postgres;

/// The binary's allocator, so that this measures what it runs (`companion::alloc`).
#[global_allocator]
static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Wall-clock nanoseconds since the Unix epoch: the line loads compare with event timestamps.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The value at quantile `p` of sorted nanoseconds, in ms.
fn pct_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e6
}

/// The numbers after each `key` in one `events` frame, found without decoding it.
fn numbers<'a>(frame: &'a str, key: &'static str) -> impl Iterator<Item = u64> + 'a {
    frame.match_indices(key).map(move |(at, _)| {
        let digits = &frame[at + key.len()..];
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        digits[..end].parse().expect("a number")
    })
}

/// One machine line for scripts/bench: id, value, unit, baseline or target, ratio, note.
fn bench_line(id: &str, value: f64, unit: &str, target: Option<(f64, &str)>, note: &str) {
    let (target, ratio) = match target {
        Some((t, what)) => (format!("{what} {t}"), format!("{:.2}x", t / value)),
        None => ("-".into(), "-".into()),
    };
    println!("BENCH\t{id}\t{value:.2}\t{unit}\t{target}\t{ratio}\t{note}");
}

/// Per event (session index, sequence): when the host read its line (line loads), when its
/// append started and when the store acknowledged it, in wall-clock ns.
#[derive(Clone, Copy, Default)]
struct Stamps {
    read: u64,
    append: u64,
    acked: u64,
}

type Ledger = Arc<Mutex<HashMap<(String, u64), Stamps>>>;

/// Per session, each commit's latest sequence and when the store announced it (wall ns), heard
/// on a thread of its own, so the tokio workers' queues do not delay the stamp.
type Commits = Arc<Mutex<HashMap<String, Vec<(u64, u64)>>>>;

/// When the commit that made `seq` durable was announced.
fn durable_at(commits: &HashMap<String, Vec<(u64, u64)>>, session: &str, seq: u64) -> Option<u64> {
    let list = commits.get(session)?;
    let i = list.partition_point(|(latest, _)| *latest < seq);
    list.get(i).map(|(_, at)| *at)
}

/// The store, with every appended event's append and acknowledgement times noted.
struct Timed {
    inner: Arc<dyn Store>,
    ledger: Ledger,
}

#[async_trait]
impl Store for Timed {
    fn epoch(&self) -> &str {
        self.inner.epoch()
    }
    fn subscribe(&self) -> broadcast::Receiver<Committed> {
        self.inner.subscribe()
    }
    async fn create_session(&self, s: SessionRecord) -> Result<SessionRecord, StoreError> {
        self.inner.create_session(s).await
    }
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.inner.get_session(id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.list_sessions().await
    }
    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.inner.set_session_state(id, state, now).await
    }
    async fn set_provider_session_id(&self, id: &str, p: &str) -> Result<(), StoreError> {
        self.inner.set_provider_session_id(id, p).await
    }
    async fn claim_session(
        &self,
        id: &str,
        node: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.inner.claim_session(id, node, now).await
    }
    async fn beat(&self, node: &str, now: Timestamp) -> Result<(), StoreError> {
        self.inner.beat(node, now).await
    }
    async fn take_over_stale(
        &self,
        node: &str,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.take_over_stale(node, cutoff, now).await
    }
    async fn append(&self, session: &str, events: Vec<Event>) -> Result<Vec<Appended>, StoreError> {
        let append = wall_ns();
        let appended = self.inner.append(session, events).await?;
        let acked = wall_ns();
        let mut ledger = self.ledger.lock().unwrap();
        for a in appended.iter().filter(|a| !a.duplicate) {
            let read = a.event.timestamp().unix_millis() as u64 * 1_000_000;
            let stamps = Stamps {
                read,
                append,
                acked,
            };
            ledger.insert((session.to_owned(), a.event.sequence()), stamps);
        }
        Ok(appended)
    }
    async fn get_events(&self, id: &str, q: &EventQuery) -> Result<Vec<Event>, StoreError> {
        self.inner.get_events(id, q).await
    }
    async fn latest_sequence(&self, id: &str) -> Result<u64, StoreError> {
        self.inner.latest_sequence(id).await
    }
    async fn wait_events(
        &self,
        id: &str,
        q: &EventQuery,
        wait_ms: u64,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.wait_events(id, q, wait_ms).await
    }
}

/// What one subscriber saw: per event, its sequence and when its frame arrived (wall ns).
type Seen = Vec<(u64, u64)>;

/// Which WebSocket client the subscribers are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Client {
    /// A minimal reader (the default): the RFC 6455 handshake and frame header by hand over a
    /// plain `TcpStream`, every frame read whole and checked as UTF-8, each event's sequence
    /// found by scanning. What a real client must do per frame and no more, so that the
    /// server's share of the two cores is what the bench measures.
    Raw,
    /// `tokio-tungstenite` (`--client tungstenite`): what the bench used before (its clients
    /// took a third of the CPU in the profile, the raw ones a fifth, mostly `recvfrom`).
    Tungstenite,
}

/// What one subscriber does with each text frame: the first `caught_up` makes it ready, and
/// every `events` frame after that is one delivery per event in it.
struct Subscriber {
    seen: Seen,
    ready: Option<tokio::sync::mpsc::Sender<()>>,
    last: u64,
}

impl Subscriber {
    async fn frame(&mut self, text: &str) {
        if text.starts_with(r#"{"t":"caught_up""#) {
            // The first one (another comes only after a `resync`).
            if let Some(ready) = self.ready.take() {
                ready.send(()).await.unwrap();
            }
        } else if text.starts_with(r#"{"t":"events""#) {
            let now = wall_ns();
            for seq in numbers(text, "\"sequence\":") {
                self.last = seq;
                // Events stored before the subscriber was ready are no deliveries.
                if self.ready.is_none() {
                    self.seen.push((seq, now));
                }
            }
        }
    }
}

fn hello_and_subscribe(session: String) -> [String; 2] {
    let hello = ClientMsg::Hello {
        protocols: vec![1],
        max_frame: None,
        client: None,
        features: Vec::new(),
    };
    let sub = ClientMsg::Subscribe {
        session,
        after: 0,
        epoch: None,
        snapshot: None,
    };
    [hello.encode(), sub.encode()]
}

async fn tungstenite_client(
    addr: std::net::SocketAddr,
    token: &str,
    session: String,
    ready: tokio::sync::mpsc::Sender<()>,
    mut done: tokio::sync::watch::Receiver<u64>,
) -> Seen {
    let url = format!("ws://{addr}/ws?token={token}");
    // tungstenite zeroes its whole read buffer (128 KiB by default) before every
    // read: with a thousand clients that memset was a third of the bench's CPU.
    let config = WebSocketConfig::default().read_buffer_size(8 << 10);
    let (mut ws, _) =
        tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true)
            .await
            .unwrap();
    for msg in hello_and_subscribe(session) {
        ws.send(Message::Text(msg.into())).await.unwrap();
    }
    let mut sub = Subscriber {
        seen: Seen::new(),
        ready: Some(ready),
        last: 0,
    };
    loop {
        let end = *done.borrow_and_update();
        if end > 0 && sub.last >= end {
            return sub.seen;
        }
        let frame = tokio::select! {
            frame = ws.next() => frame,
            _ = done.changed() => continue,
        };
        let Some(Ok(Message::Text(text))) = frame else {
            panic!("socket closed")
        };
        sub.frame(&text).await;
    }
}

/// A client frame (masked, as RFC 6455 requires of clients; the key is zero, which leaves
/// the payload as it is).
fn client_frame(text: &str) -> Vec<u8> {
    let mut frame = vec![0x81u8];
    match text.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n <= 0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(text.as_bytes());
    frame
}

/// The next whole server frame at the start of `buf`: (opcode, payload range, its length).
fn server_frame(buf: &[u8]) -> Option<(u8, std::ops::Range<usize>)> {
    let (&b0, &b1) = (buf.first()?, buf.get(1)?);
    assert!(b0 & 0x80 != 0 && b1 & 0x80 == 0, "a whole, unmasked frame");
    let (len, head) = match b1 & 0x7f {
        126 => (
            u16::from_be_bytes(buf.get(2..4)?.try_into().unwrap()) as usize,
            4,
        ),
        127 => (
            u64::from_be_bytes(buf.get(2..10)?.try_into().unwrap()) as usize,
            10,
        ),
        n => (n as usize, 2),
    };
    (buf.len() >= head + len).then_some((b0 & 0x0f, head..head + len))
}

async fn raw_client(
    addr: std::net::SocketAddr,
    token: &str,
    session: String,
    ready: tokio::sync::mpsc::Sender<()>,
    mut done: tokio::sync::watch::Receiver<u64>,
) -> Seen {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let request = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 16 << 10];
    let mut end = 0;
    // The response head; what follows it is frames.
    let mut start = loop {
        let n = tcp.read(&mut buf[end..]).await.unwrap();
        assert!(n > 0, "closed during the handshake");
        end += n;
        if let Some(at) = buf[..end].windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.1 101"), "upgraded");
            break at + 4;
        }
    };
    for msg in hello_and_subscribe(session) {
        tcp.write_all(&client_frame(&msg)).await.unwrap();
    }
    let mut sub = Subscriber {
        seen: Seen::new(),
        ready: Some(ready),
        last: 0,
    };
    loop {
        while let Some((opcode, payload)) = server_frame(&buf[start..end]) {
            let range = start + payload.start..start + payload.end;
            start = range.end;
            match opcode {
                0x1 => sub.frame(std::str::from_utf8(&buf[range]).unwrap()).await,
                0x8 => panic!("socket closed"),
                _ => {}
            }
        }
        let end_seq = *done.borrow_and_update();
        if end_seq > 0 && sub.last >= end_seq {
            return sub.seen;
        }
        // Keep the partial frame at the front; grow for a frame larger than the buffer.
        buf.copy_within(start..end, 0);
        (start, end) = (0, end - start);
        if end == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = tokio::select! {
            n = tcp.read(&mut buf[end..]) => n.unwrap(),
            _ = done.changed() => continue,
        };
        assert!(n > 0, "socket closed");
        end += n;
    }
}

struct Bench {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    ledger: Ledger,
    commits: Commits,
    addr: std::net::SocketAddr,
    token: String,
    _dir: tempfile::TempDir,
}

impl Bench {
    async fn start(backend: &str) -> Bench {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let inner: Arc<dyn Store> = match backend {
            "sqlite" => Arc::new(SqliteStore::open(&dir.path().join("bench.db")).unwrap()),
            "postgres" => {
                let url = postgres::fresh_database().await;
                Arc::new(PostgresStore::connect(&url).await.unwrap())
            }
            other => panic!("--store {other}: expected sqlite or postgres"),
        };
        let ledger = Ledger::default();
        let commits = Commits::default();
        let mut heard = inner.subscribe();
        let noted = commits.clone();
        std::thread::spawn(move || loop {
            match heard.blocking_recv() {
                Ok(c) => {
                    let at = wall_ns();
                    let mut noted = noted.lock().unwrap();
                    noted
                        .entry(c.session_id)
                        .or_default()
                        .push((c.latest_sequence, at));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        });
        let store: Arc<dyn Store> = Arc::new(Timed {
            inner,
            ledger: ledger.clone(),
        });
        // The demo agent is `agentwire demo-agent`, a chunk every 20 ms (≈ 50 events/s).
        let mut hub_config = HubConfig::new(env!("CARGO_BIN_EXE_agentwire").into());
        hub_config.demo_delay_ms = 20;
        let hub = Hub::new(store.clone(), hub_config);
        let token = "bench-token-0123456789".to_owned();
        let mut config = ServerConfig::new(token.clone(), dir.path().into());
        config.listen = ListenLimits {
            max_connections: 4096,
            ..ListenLimits::default()
        };
        let state = AppState::new(hub.clone(), Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server::serve(listener, state, std::future::pending()));
        Bench {
            store,
            hub,
            ledger,
            commits,
            addr,
            token,
            _dir: dir,
        }
    }

    async fn session(&self, id: &str) {
        let at = Timestamp::EPOCH;
        self.store
            .create_session(SessionRecord::new(
                id,
                "demo",
                "/",
                SessionState::Running,
                "local",
                at,
            ))
            .await
            .unwrap();
    }

    /// `subscribers` clients of `session`, each returning what it saw once the session's
    /// `done` flag is set and it has every event up to `done`'s sequence; returns when all of
    /// them are caught up.
    async fn subscribe(
        &self,
        session: &str,
        subscribers: usize,
        done: tokio::sync::watch::Receiver<u64>,
        client: Client,
    ) -> Vec<tokio::task::JoinHandle<Seen>> {
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(subscribers);
        let mut clients = Vec::new();
        for _ in 0..subscribers {
            let (addr, token) = (self.addr, self.token.clone());
            let ready = ready_tx.clone();
            let session = session.to_owned();
            let done = done.clone();
            clients.push(tokio::spawn(async move {
                match client {
                    Client::Raw => raw_client(addr, &token, session, ready, done).await,
                    Client::Tungstenite => {
                        tungstenite_client(addr, &token, session, ready, done).await
                    }
                }
            }));
        }
        for _ in 0..subscribers {
            ready_rx.recv().await.unwrap();
        }
        clients
    }

    /// Appends `n` events to `session`, one per append, `every` apart (back to back if zero);
    /// returns the last sequence.
    async fn append(store: Arc<dyn Store>, session: String, n: usize, every: Duration) -> u64 {
        let mut ticker = tokio::time::interval(every.max(Duration::from_micros(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = 0;
        for i in 0..n {
            if !every.is_zero() {
                ticker.tick().await;
            }
            let at = Timestamp::EPOCH;
            let mut init = EventInit::new(EventType::MessageStreamed, &session, Provider::Demo, at);
            init.id = Some(EventId::derive(&[&session, &i.to_string()]));
            init.data
                .insert("delta".into(), json!("twenty chars of text"));
            let appended = store
                .append(&session, vec![Event::new(init).unwrap()])
                .await
                .unwrap();
            last = appended.last().map_or(last, |a| a.event.sequence());
        }
        last
    }

    /// Runs demo-agent turns (the `slow` answer: 200 chunks) in `session` until `until`;
    /// returns the last stored sequence once its last turn ended.
    async fn drive(hub: Arc<Hub>, store: Arc<dyn Store>, session: String, until: Instant) -> u64 {
        let mut after = 0;
        while Instant::now() < until {
            let turn = hub
                .start_turn(&session, "a slow answer, please".into(), None)
                .await
                .unwrap();
            // Wait for the turn's terminal event.
            'turn: loop {
                let query = EventQuery {
                    after: Some(after),
                    ..EventQuery::default()
                };
                for e in store.wait_events(&session, &query, 1_000).await.unwrap() {
                    after = e.sequence();
                    if e.run_id() == Some(turn.as_str()) && e.kind().is_run_terminal() {
                        break 'turn;
                    }
                }
            }
        }
        store.latest_sequence(&session).await.unwrap()
    }
}

/// What to run: `sessions` × `subscribers`, fed by appends or by demo agents.
#[derive(Clone, Copy)]
enum Feed {
    /// `events` appends per session, `every` apart.
    Appends { events: usize, every: Duration },
    /// Demo agents streaming for this long.
    Agents { seconds: f64 },
}

/// Runs one load; prints its figures and BENCH lines under `id`. Returns the p99 of its
/// `fan-out` part, in ms.
async fn load(
    backend: &str,
    client: Client,
    id: &str,
    sessions: usize,
    subscribers: usize,
    feed: Feed,
    target: &[(f64, f64)],
) -> f64 {
    let bench = Bench::start(backend).await;
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    let mut dones = Vec::new();
    for i in 0..sessions {
        let id = match feed {
            Feed::Appends { .. } => {
                let id = format!("ses_fa{i:03}");
                bench.session(&id).await;
                id
            }
            Feed::Agents { .. } => {
                let record = bench.hub.create_session("demo", None).await.unwrap();
                record.id
            }
        };
        let (done_tx, done_rx) = tokio::sync::watch::channel(0u64);
        clients.push((
            id.clone(),
            bench.subscribe(&id, subscribers, done_rx, client).await,
        ));
        ids.push(id);
        dones.push(done_tx);
    }
    let started = Instant::now();
    let started_ns = wall_ns();
    let feeders: Vec<_> = (ids.iter().enumerate())
        .map(|(i, id)| {
            let (store, hub, id) = (bench.store.clone(), bench.hub.clone(), id.clone());
            tokio::spawn(async move {
                match feed {
                    Feed::Appends { events, every } => {
                        // Spread the sessions' ticks over one period.
                        tokio::time::sleep(every.mul_f64(i as f64 / sessions as f64)).await;
                        Bench::append(store, id, events, every).await
                    }
                    Feed::Agents { seconds } => {
                        let until = Instant::now() + Duration::from_secs_f64(seconds);
                        Bench::drive(hub, store, id, until).await
                    }
                }
            })
        })
        .collect();
    let mut lasts = Vec::new();
    for f in feeders {
        lasts.push(f.await.unwrap());
    }
    let appended = started.elapsed();
    // The last event's frames are still on their way: telling every subscriber now that the
    // feed is over would wake all of them in the middle of that last sweep (for 1 x 1,000, a
    // thousand wake-ups that made most of the p99, 150 events' top 1 %). The sweep is over
    // long before this; the rate counts up to the last delivery, not this wait.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for (last, done) in lasts.into_iter().zip(&dones) {
        done.send_replace(last);
    }
    if let Feed::Agents { .. } = feed {
        bench.hub.shutdown().await;
    }
    let ledger = bench.ledger.lock().unwrap().clone();
    let commits = bench.commits.lock().unwrap().clone();
    // Per delivery: total, before the append, the append until durable, after that.
    let (mut total, mut before, mut commit, mut after) = (vec![], vec![], vec![], vec![]);
    let mut last_delivery = started_ns;
    for (session, handles) in clients {
        for c in handles {
            for (seq, at) in c.await.unwrap() {
                last_delivery = last_delivery.max(at);
                let Some(s) = ledger.get(&(session.clone(), seq)) else {
                    continue;
                };
                let start = match feed {
                    Feed::Appends { .. } => s.append,
                    Feed::Agents { .. } => s.read,
                };
                let durable = durable_at(&commits, &session, seq).unwrap_or(s.acked);
                total.push(at.saturating_sub(start));
                before.push(s.append.saturating_sub(s.read));
                commit.push(durable.saturating_sub(s.append));
                after.push(at.saturating_sub(durable));
            }
        }
    }
    // Until the last delivery.
    let elapsed = Duration::from_nanos(last_delivery.saturating_sub(started_ns));
    for v in [&mut total, &mut before, &mut commit, &mut after] {
        v.sort_unstable();
    }
    let rate = total.len() as f64 / elapsed.as_secs_f64();
    let from = match feed {
        Feed::Appends { .. } => "append->socket",
        Feed::Agents { .. } => "line->socket",
    };
    println!(
        "{id:<16} ({backend}): {sessions} x {subscribers} subscribers = {} deliveries in {:.2} s \
         (fed in {:.2} s); {from} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {rate:.0} deliveries/s",
        total.len(),
        elapsed.as_secs_f64(),
        appended.as_secs_f64(),
        pct_ms(&total, 0.50),
        pct_ms(&total, 0.99),
        pct_ms(&total, 1.0),
    );
    let parts: &[(&str, &[u64])] = match feed {
        Feed::Appends { .. } => &[("commit", &commit), ("fan-out", &after)],
        Feed::Agents { .. } => &[
            ("line->append", &before),
            ("commit", &commit),
            ("fan-out", &after),
        ],
    };
    for (name, v) in parts {
        println!(
            "{:<16}   {name:<13} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            "",
            pct_ms(v, 0.5),
            pct_ms(v, 0.99),
            pct_ms(v, 1.0)
        );
    }
    let note = format!("{from}, {backend}, {sessions}x{subscribers}");
    let quantiles = [("p50", 0.5), ("p99", 0.99)];
    for (q, p) in quantiles {
        let t = target
            .iter()
            .find(|(tp, _)| *tp == p)
            .map(|(_, t)| (*t, "target"));
        bench_line(&format!("{id}.{q}"), pct_ms(&total, p), "ms", t, &note);
    }
    for (name, v) in parts {
        let name = name.replace("->", "_").replace('-', "");
        bench_line(
            &format!("{id}.{name}.p99"),
            pct_ms(v, 0.99),
            "ms",
            None,
            &note,
        );
    }
    bench_line(&format!("{id}.rate"), rate, "deliveries/s", None, &note);
    pct_ms(&after, 0.99)
}

#[cfg(not(target_os = "linux"))]
fn floor(id: &str, _: usize, _: usize, _: usize, _: Duration) -> f64 {
    println!("{id:<16} skipped: the floor reads with epoll (Linux only)");
    f64::NAN
}

/// The fan-out's p99 against the floor's, measured in the same run (see [`floor`]).
fn over_floor(id: &str, fan_out: f64, floor: Option<f64>) {
    if let Some(floor) = floor.filter(|f| f.is_finite()) {
        println!(
            "{:<16}   fan-out p99 is {:.2}x the floor's ({floor:.2} ms)",
            "",
            fan_out / floor
        );
        let note = format!("fan-out p99 / floor p99 ({floor:.2} ms), same run");
        bench_line(
            &format!("{id}.fanout_over_floor"),
            fan_out / floor,
            "x",
            None,
            &note,
        );
    }
}

/// The floor of `sessions` × `subscribers` (see the module docs): `events` frames per session,
/// `every` apart, each as long as the append loads' frame (the same event in an `events`
/// frame, under an epoch as long as the store's; the WebSocket header aside), written to the
/// session's sockets by one thread and read by another over epoll. Prints p50/p99/max and a
/// BENCH line per quantile; returns the p99 in ms. Linux only (epoll).
#[cfg(target_os = "linux")]
fn floor(id: &str, sessions: usize, subscribers: usize, events: usize, every: Duration) -> f64 {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};

    // The frame the append loads deliver: one `message_streamed` event in an `events` frame.
    let session = "ses_fa000";
    let mut init = EventInit::new(
        EventType::MessageStreamed,
        session,
        Provider::Demo,
        Timestamp::EPOCH,
    );
    init.id = Some(EventId::derive(&[session, "0"]));
    init.data
        .insert("delta".into(), json!("twenty chars of text"));
    let event = Event::new(init).unwrap().into_sequenced(1).to_json();
    let frame_len = agentwire::core::wire::frame_encoded(
        session,
        &"e".repeat(32),
        [(1, event.as_str())],
        usize::MAX,
    )[0]
    .text
    .len();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut writers, mut readers) = (Vec::new(), Vec::new());
    for _ in 0..sessions * subscribers {
        let reader = TcpStream::connect(addr).unwrap();
        let (writer, _) = listener.accept().unwrap();
        writer.set_nodelay(true).unwrap();
        reader.set_nonblocking(true).unwrap();
        writers.push(writer);
        readers.push(reader);
    }
    // Each frame starts with its (session, event) number, so the reader knows when it was sent.
    let epoch = Instant::now();
    let sent: Arc<Vec<AtomicU64>> =
        Arc::new((0..sessions * events).map(|_| AtomicU64::new(0)).collect());
    let expected = sessions * subscribers * events;
    let reader_sent = sent.clone();
    let reader = std::thread::spawn(move || {
        // SAFETY (every `unsafe` below): plain epoll calls on sockets this thread owns, with
        // buffers it owns.
        let ep = unsafe { libc::epoll_create1(0) };
        assert!(ep >= 0, "epoll_create1");
        for (i, r) in readers.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            let added = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, r.as_raw_fd(), &mut ev) };
            assert_eq!(added, 0, "epoll_ctl");
        }
        let mut latencies = Vec::with_capacity(expected);
        let mut ready = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut buf = vec![0u8; 64 * 1024];
        // Per socket, how much of the current frame was read, and its number's bytes.
        let mut at_frame = vec![(0usize, [0u8; 4]); readers.len()];
        let deadline = Instant::now() + Duration::from_secs(60);
        while latencies.len() < expected && Instant::now() < deadline {
            let n = unsafe { libc::epoll_wait(ep, ready.as_mut_ptr(), ready.len() as i32, 100) };
            let now = epoch.elapsed().as_nanos() as u64;
            for ev in &ready[..n.max(0) as usize] {
                let i = ev.u64 as usize;
                while let Ok(got) = readers[i].read(&mut buf) {
                    if got == 0 {
                        break;
                    }
                    let (pos, head) = &mut at_frame[i];
                    let mut at = 0;
                    while at < got {
                        let take = if *pos < 4 {
                            let take = (4 - *pos).min(got - at);
                            head[*pos..*pos + take].copy_from_slice(&buf[at..at + take]);
                            if *pos + take == 4 {
                                let k = u32::from_le_bytes(*head) as usize;
                                let start = reader_sent[k].load(Ordering::Acquire);
                                latencies.push(now.saturating_sub(start));
                            }
                            take
                        } else {
                            (frame_len - *pos).min(got - at)
                        };
                        at += take;
                        *pos = (*pos + take) % frame_len;
                    }
                }
            }
        }
        unsafe { libc::close(ep) };
        latencies
    });
    let started = Instant::now();
    let mut frame = vec![b' '; frame_len];
    for round in 0..events {
        for s in 0..sessions {
            // The sessions' ticks spread over one period, as the append loads do.
            let due = started + every.mul_f64(round as f64 + s as f64 / sessions as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let k = s * events + round;
            sent[k].store(epoch.elapsed().as_nanos() as u64, Ordering::Release);
            frame[..4].copy_from_slice(&(k as u32).to_le_bytes());
            for w in &mut writers[s * subscribers..(s + 1) * subscribers] {
                w.write_all(&frame).unwrap();
            }
        }
    }
    let mut latencies = reader.join().unwrap();
    latencies.sort_unstable();
    println!(
        "{id:<16} (no server): {sessions} x {subscribers} sockets, {} frames of {frame_len} bytes \
         delivered; write->read p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        pct_ms(&latencies, 0.5),
        pct_ms(&latencies, 0.99),
        pct_ms(&latencies, 1.0),
    );
    let note =
        format!("plain loopback sockets, {sessions}x{subscribers}, the live loads' baseline");
    for (q, p) in [("p50", 0.5), ("p99", 0.99)] {
        bench_line(
            &format!("{id}.{q}"),
            pct_ms(&latencies, p),
            "ms",
            None,
            &note,
        );
    }
    pct_ms(&latencies, 0.99)
}

#[tokio::main]
async fn main() {
    let backend = arg("--store").unwrap_or_else(|| "sqlite".into());
    let client = match arg("--client").as_deref() {
        None | Some("raw") => Client::Raw,
        Some("tungstenite") => Client::Tungstenite,
        Some(other) => panic!("--client {other}: expected raw or tungstenite"),
    };
    let quick = flag("--quick") || std::env::var_os("BENCH_QUICK").is_some();
    let seconds: f64 =
        arg("--seconds").map_or(if quick { 3.0 } else { 10.0 }, |s| s.parse().unwrap());
    let only = arg("--only");
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let tick = Duration::from_millis(20);
    let live = (seconds / tick.as_secs_f64()) as usize;
    let appends = Feed::Appends {
        events: live,
        every: tick,
    };
    // Issue 14's targets: (quantile, ms).
    let one = [(0.99, 10.0)];
    let hundred = [(0.5, 5.0), (0.99, 20.0)];
    // The baselines first, on a thread of their own (no tokio worker is busy meanwhile).
    let floor_of = |id: &'static str, sessions: usize, subscribers: usize| async move {
        tokio::task::spawn_blocking(move || floor(id, sessions, subscribers, live, tick))
            .await
            .unwrap()
    };
    let floor_one = match run("floor1000") {
        true => Some(floor_of("fanout.floor.1x1000", 1, 1000).await),
        false => None,
    };
    let floor_hundred = match run("floor100x5") {
        true => Some(floor_of("fanout.floor.100x5", 100, 5).await),
        false => None,
    };
    if run("live1000") {
        let fan_out = load(
            &backend,
            client,
            "fanout.append.1x1000",
            1,
            1000,
            appends,
            &one,
        )
        .await;
        over_floor("fanout.append.1x1000", fan_out, floor_one);
    }
    if run("live100x5") {
        let fan_out = load(
            &backend,
            client,
            "fanout.append.100x5",
            100,
            5,
            appends,
            &hundred,
        )
        .await;
        over_floor("fanout.append.100x5", fan_out, floor_hundred);
    }
    if run("line1000") {
        let agents = Feed::Agents { seconds };
        let fan_out = load(
            &backend,
            client,
            "fanout.line.1x1000",
            1,
            1000,
            agents,
            &one,
        )
        .await;
        over_floor("fanout.line.1x1000", fan_out, floor_one);
    }
    if run("line100x5") {
        let agents = Feed::Agents { seconds };
        let fan_out = load(
            &backend,
            client,
            "fanout.line.100x5",
            100,
            5,
            agents,
            &hundred,
        )
        .await;
        over_floor("fanout.line.100x5", fan_out, floor_hundred);
    }
    if run("burst") {
        let burst = Feed::Appends {
            events: if quick { 200 } else { 500 },
            every: Duration::ZERO,
        };
        load(&backend, client, "fanout.burst.1x1000", 1, 1000, burst, &[]).await;
    }
}
