//! Test support: a real `agentwire serve` process on 127.0.0.1 port 0 with its SQLite file in
//! a temp dir, a minimal HTTP/1.1 client, and a WebSocket client speaking the wire protocol.
//! Nothing here sleeps to wait: every wait is on a condition with a deadline.
#![allow(dead_code)]

pub mod postgres;
pub mod real;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentwire::core::event::Event;
use agentwire::core::wire::{ClientMsg, Cursor, ServerMsg};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

pub const TOKEN: &str = "test-token-0123456789";
/// The longest any single wait in a test may take before it fails (generous: real agent CLIs
/// start slowly on a loaded 2-core machine; only a failing test ever waits this long).
pub const DEADLINE: Duration = Duration::from_secs(90);

/// A running `agentwire serve`.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub db: PathBuf,
    pub epoch: String,
}

impl Server {
    /// Starts a server on port 0 (or `port`) with the store at `db`.
    /// Starts a server on port 0 (or `port`) with the store at `db`; the demo agent pauses
    /// 2 ms between chunks.
    pub fn start(db: &Path, port: u16, extra: &[&str]) -> Server {
        Server::start_with_delay(db, port, 2, extra)
    }

    pub fn start_with_delay(db: &Path, port: u16, delay_ms: u64, extra: &[&str]) -> Server {
        Server::spawn(db, port, delay_ms, extra, None, &mut |_| {})
    }

    /// Starts a server on port 0 after `prepare` has had its way with the command (extra
    /// environment, resource limits).
    pub fn start_prepared(
        db: &Path,
        extra: &[&str],
        prepare: &mut dyn FnMut(&mut Command),
    ) -> Server {
        Server::spawn(db, 0, 2, extra, None, prepare)
    }

    /// Starts a server whose environment is exactly `PATH` (this one's, unless `env` sets
    /// it) plus `env`: nothing of the caller's credentials or settings leaks into the agents.
    pub fn start_with_env(db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(db, 0, 2, extra, Some(env), &mut |_| {})
    }

    /// Starts a server on port 0 with the PostgreSQL store at `url` (`--store`).
    pub fn start_on_postgres(url: &str, extra: &[&str]) -> Server {
        Server::start_on_postgres_paced(url, 2, extra)
    }

    /// The same, with the demo agent pausing `delay_ms` between chunks.
    pub fn start_on_postgres_paced(url: &str, delay_ms: u64, extra: &[&str]) -> Server {
        let mut server = Server::spawn(
            Path::new(""),
            0,
            delay_ms,
            &[&["--store", url], extra].concat(),
            None,
            &mut |_| {},
        );
        server.db = PathBuf::new();
        server
    }

    fn spawn(
        db: &Path,
        port: u16,
        delay_ms: u64,
        extra: &[&str],
        env: Option<&[(&str, &str)]>,
        prepare: &mut dyn FnMut(&mut Command),
    ) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentwire"));
        prepare(&mut command);
        if let Some(env) = env {
            command
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .envs(env.iter().copied());
        }
        let mut child = command
            .args([
                "serve",
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--token",
                TOKEN,
            ])
            // No `--db` with `--store` (an empty `db`): they conflict.
            .args(
                Some(db)
                    .filter(|db| !db.as_os_str().is_empty())
                    .map(|db| [Path::new("--db"), db])
                    .into_iter()
                    .flatten(),
            )
            .args([
                "--demo-delay-ms",
                &delay_ms.to_string(),
                "--heartbeat-ms",
                "500",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("agentwire serve starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let serving = rx
            .recv_timeout(DEADLINE)
            .expect("the server prints its URL");
        let url = serving
            .strip_prefix("agentwire: serving http://")
            .expect(&serving);
        let addr: SocketAddr = url.split('/').next().unwrap().parse().unwrap();
        let store_line = rx
            .recv_timeout(DEADLINE)
            .expect("the server prints its store");
        // `agentwire: store LOCATION (epoch EPOCH), node "NAME"`
        let epoch = store_line
            .rsplit("(epoch ")
            .next()
            .and_then(|rest| rest.split(')').next())
            .expect(&store_line)
            .to_owned();
        Server {
            child,
            addr,
            db: db.to_owned(),
            epoch,
        }
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws?token={TOKEN}", self.addr)
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A JSON API call with the token.
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        http(
            self.addr,
            method,
            path,
            body,
            &[("Authorization", &format!("Bearer {TOKEN}"))],
        )
    }

    pub fn create_demo_session(&self) -> String {
        let (status, body) = self.api("POST", "/api/sessions", Some(json!({"provider": "demo"})));
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    pub fn start_turn(&self, session: &str, prompt: &str) -> String {
        let (status, body) = self.api(
            "POST",
            &format!("/api/sessions/{session}/turns"),
            Some(json!({"prompt": prompt})),
        );
        assert_eq!(status, 200, "{body}");
        body["turnId"].as_str().unwrap().to_owned()
    }

    /// All stored events of a session, through the HTTP API.
    pub fn events(&self, session: &str) -> Vec<Event> {
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, Event::sequence);
            let (status, body) = self.api(
                "GET",
                &format!("/api/sessions/{session}/events?after={after}&limit=1000"),
                None,
            );
            assert_eq!(status, 200, "{body}");
            let page: Vec<Event> = serde_json::from_value(body["events"].clone()).unwrap();
            if page.is_empty() {
                return all;
            }
            all.extend(page);
        }
    }

    /// Waits until the session's stored events satisfy `done`.
    pub fn wait_events(
        &self,
        session: &str,
        what: &str,
        done: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        self.wait_events_within(session, what, DEADLINE, done)
    }

    /// [`Server::wait_events`] with a deadline of its own.
    pub fn wait_events_within(
        &self,
        session: &str,
        what: &str,
        deadline: Duration,
        done: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        let start = Instant::now();
        loop {
            let (status, body) = self.api(
                "GET",
                &format!("/api/sessions/{session}/events?after=0&limit=10000&wait_ms=200"),
                None,
            );
            assert_eq!(status, 200, "{body}");
            let events: Vec<Event> = serde_json::from_value(body["events"].clone()).unwrap();
            if done(&events) {
                return events;
            }
            assert!(
                start.elapsed() < deadline,
                "timed out waiting for {what}; have {} events",
                events.len()
            );
            // The long-poll above returns at once when events exist; wait for the next commit.
            let latest = events.last().map_or(0, Event::sequence);
            let _ = self.api(
                "GET",
                &format!("/api/sessions/{session}/events?after={latest}&wait_ms=500"),
                None,
            );
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// True once a run terminal for `run` is among `events`.
pub fn ended(events: &[Event], run: &str) -> bool {
    events
        .iter()
        .any(|e| e.kind().is_run_terminal() && e.run_id() == Some(run))
}

/// Asserts sequences 1..=n, contiguous, and no id twice.
pub fn assert_contiguous(events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e.sequence(),
            i as u64 + 1,
            "sequence gap or duplicate at index {i}"
        );
    }
    let mut ids: Vec<&str> = events.iter().map(|e| e.id().as_str()).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "an event id appears twice");
}

/// A running `agentwire-testkit fake-model` (the scripted model API server).
pub struct FakeModel {
    pub child: Child,
    pub addr: SocketAddr,
}

impl FakeModel {
    pub fn start() -> FakeModel {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire-testkit"))
            .args(["fake-model", "--addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("agentwire-testkit fake-model starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the fake model prints its address");
        let addr = line
            .trim()
            .strip_prefix("fake-model: listening http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        FakeModel { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request the fake model received, in order.
    pub fn requests(&self) -> Vec<Value> {
        let (status, body) = http(self.addr, "GET", "/_requests", None, &[]);
        assert_eq!(status, 200, "{body}");
        body.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A one-shot HTTP/1.1 request; returns the status and the body parsed as JSON (or a string).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, value)
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a WebSocket with optional extra headers (e.g. `Origin`).
pub async fn ws_connect(
    url: &str,
    headers: &[(&str, &str)],
) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let mut request = url.into_client_request().unwrap();
    for (k, v) in headers {
        request
            .headers_mut()
            .insert(http_name(k), v.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(s, _)| s)
}

fn http_name(k: &str) -> tokio_tungstenite::tungstenite::http::HeaderName {
    k.parse().unwrap()
}

pub async fn send(socket: &mut Socket, msg: &ClientMsg) {
    socket
        .send(Message::Text(msg.encode().into()))
        .await
        .expect("send");
}

/// The next server message, or `None` when the socket closed; fails after the deadline.
pub async fn recv(socket: &mut Socket) -> Option<ServerMsg> {
    loop {
        let next = tokio::time::timeout(DEADLINE, socket.next())
            .await
            .expect("a frame before the deadline");
        match next {
            Some(Ok(Message::Text(t))) => {
                return Some(ServerMsg::decode(&t, usize::MAX).expect("a valid server frame"))
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => continue,
        }
    }
}

/// Connects, says hello, returns the socket and the welcome's epoch.
pub async fn hello(url: &str) -> (Socket, String) {
    let mut socket = ws_connect(url, &[]).await.expect("websocket connects");
    send(
        &mut socket,
        &ClientMsg::Hello {
            protocols: vec![1],
            max_frame: None,
            client: None,
            features: Vec::new(),
        },
    )
    .await;
    match recv(&mut socket).await {
        Some(ServerMsg::Welcome { epoch, .. }) => (socket, epoch),
        other => panic!("expected welcome, got {other:?}"),
    }
}

/// A subscriber that keeps a cursor and collects events, as a client would.
pub struct Collector {
    pub cursor: Cursor,
    pub events: Vec<Event>,
    pub resets: u32,
    pub caught_up: u32,
    pub resyncs: u32,
}

impl Collector {
    pub fn new() -> Collector {
        Collector {
            cursor: Cursor::default(),
            events: Vec::new(),
            resets: 0,
            caught_up: 0,
            resyncs: 0,
        }
    }

    /// Applies one server message; returns false if it carried an error.
    pub fn apply(&mut self, msg: ServerMsg) {
        match msg {
            ServerMsg::Events { epoch, events, .. } => {
                let acc = self.cursor.accept(&epoch, events);
                assert!(acc.gap.is_none(), "the server sent a gap: {:?}", acc.gap);
                assert_eq!(
                    acc.duplicates, 0,
                    "the server re-sent events past the cursor"
                );
                self.events.extend(acc.events);
            }
            ServerMsg::EventPart {
                epoch,
                sequence,
                index,
                last,
                text,
                ..
            } => {
                if let Some(e) = self
                    .cursor
                    .accept_part(sequence, index, last, text)
                    .unwrap()
                {
                    self.events
                        .extend(self.cursor.accept(&epoch, vec![e]).events);
                }
            }
            ServerMsg::Reset { epoch, .. } => {
                self.resets += 1;
                self.events.clear();
                self.cursor.reset(&epoch);
            }
            ServerMsg::CaughtUp { .. } => self.caught_up += 1,
            ServerMsg::Resync { .. } => self.resyncs += 1,
            ServerMsg::Error { error, .. } => {
                panic!("server error {}: {}", error.code, error.message)
            }
            _ => {}
        }
    }
}

/// Feeds `collector` from `socket` until `done` holds; fails after [`DEADLINE`] overall
/// (heartbeats alone do not keep it waiting forever).
pub async fn collect_until(
    socket: &mut Socket,
    collector: &mut Collector,
    done: impl Fn(&Collector) -> bool,
) {
    let start = Instant::now();
    while !done(collector) {
        assert!(
            start.elapsed() < DEADLINE,
            "condition not reached in time ({} events)",
            collector.events.len()
        );
        match recv(socket).await {
            Some(msg) => collector.apply(msg),
            None => panic!(
                "socket closed before the condition held ({} events)",
                collector.events.len()
            ),
        }
    }
}
