//! `agentwire tail`: follow a session over the WebSocket and print its canonical events, as
//! JSON Lines or as lines for people ([`mod@format`]), like `tail -f`, resuming by itself after any
//! disconnect. [`target`] reads the URL it is given (the one `serve` prints, the page's, a
//! WebSocket URL).
//!
//! The connection is driven by the core's sans-IO [`Client`], the same policy the browser
//! package runs: it says when to open and close the socket, what to send (hello, the
//! subscription from the cursor), when a silent connection is dead (three heartbeat periods),
//! and when to reconnect (a backoff that doubles from `--backoff-ms` to 5 s, with jitter from
//! a seeded generator this process seeds at random). This file only does the I/O: the socket,
//! one timer, stdout. The client's cursor admits each sequence once, in order, and every
//! admitted event is printed once ([`Client::take_events`]), so the output has no gap and no
//! duplicate however often the connection breaks.
//!
//! It retries what can heal (a refused or dropped connection, a server restarting, a proxy's
//! 5xx, `429` while wrong tokens are limited) and gives up at once on what cannot: the server
//! refuses the token or the origin (`401`, `403`: [`Refused`]), there is no such endpoint or
//! session, it speaks no common protocol, or the URL needs TLS (`wss://`), which this build
//! does not have.

pub mod format;
pub mod target;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message};

use super::random_hex;
use crate::core::client::{Action, Client, ClientBatch, ClientConfig, ConnectionState};
use crate::core::event::Event;
use crate::core::projector::Note;

/// How events are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// One canonical event per line, as JSON.
    Json,
    /// One line per event for people ([`format::TextFormat`]).
    Text,
}

/// The server refused the connection for good: a wrong token (`401`) or a forbidden host or
/// origin (`403`). `agentwire tail` exits with status 3.
#[derive(Debug, thiserror::Error)]
#[error("the server refused the connection ({status}): {message}")]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

/// What to follow and how.
#[derive(Clone, Debug)]
pub struct TailOptions {
    /// The WebSocket URL without the token, e.g. `ws://127.0.0.1:7777/ws` ([`target::parse`]).
    pub url: String,
    pub token: String,
    pub session: String,
    /// Print events after this sequence.
    pub after: u64,
    /// Keep following after catching up (else exit at the first `caught_up`).
    pub follow: bool,
    /// The first reconnect delay; it doubles up to 5 s, with jitter.
    pub backoff_min_ms: u64,
    pub format: OutputFormat,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A socket being opened for connection `conn`.
type Opening = std::pin::Pin<
    Box<dyn std::future::Future<Output = (u64, Result<Socket, tungstenite::Error>)> + Send>,
>;

/// Follows the session until caught up (without `follow`) or forever.
pub async fn run(options: TailOptions) -> Result<()> {
    let start = Instant::now();
    let now_ms = || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX);
    let config = ClientConfig {
        backoff_min_ms: i64::try_from(options.backoff_min_ms.max(1)).unwrap_or(i64::MAX),
        seed: u64::from_str_radix(&random_hex(8), 16).unwrap_or(1),
        client_name: concat!("agentwire-tail/", env!("CARGO_PKG_VERSION")).into(),
        // A terminal reaches the server directly: no browser proxy to fall back from.
        fallback: false,
        ..ClientConfig::default()
    };
    if options.url.starts_with("wss://") {
        bail!(
            "{}: wss:// (TLS) is not supported by this build: follow the server on its machine \
             (ws://127.0.0.1:PORT) or through an SSH tunnel",
            options.url
        );
    }
    // The token rides in a header, not in the URL (which proxies log).
    let request = handshake(&options.url, &options.token)?;
    let mut client = Client::new(config, now_ms());
    client.keep_events();
    client.subscribe_after(&options.session, options.after);
    let mut socket: Option<(u64, Socket)> = None;
    let mut opening: Option<Opening> = None;
    let mut opening_conn = 0;
    let stdout = std::io::stdout();
    let mut text = (options.format == OutputFormat::Text).then(format::TextFormat::new);
    // The last connection failure told, to tell each one once, not at every retry.
    let mut last_failure = String::new();
    loop {
        // Do what the client decided, then report what it admitted.
        while let Some(action) = client.poll_action() {
            match action {
                Action::Connect { conn } => {
                    socket = None;
                    opening_conn = conn;
                    let request = request.clone();
                    opening = Some(Box::pin(async move {
                        let opened = tokio_tungstenite::connect_async(request).await;
                        (conn, opened.map(|(socket, _)| socket))
                    }));
                }
                // Never asked for: `fallback` is off.
                Action::ConnectSse { conn, .. } => client.handle_close(conn, now_ms()),
                Action::Disconnect { conn } => {
                    if socket.as_ref().is_some_and(|(c, _)| *c == conn) {
                        socket = None;
                    }
                    if opening_conn == conn {
                        // Opening took too long.
                        opening = None;
                    }
                }
            }
        }
        while let Some(frame) = client.poll_transmit() {
            let Some((conn, ws)) = socket.as_mut() else {
                break;
            };
            if ws.send(Message::Text(frame.into())).await.is_err() {
                let conn = *conn;
                socket = None;
                client.handle_close(conn, now_ms());
            }
        }
        print(&stdout, &client.take_events(), text.as_mut())?;
        let batch = client.drain();
        report(&options, &client, batch)?;
        if !options.follow && client.state() == ConnectionState::CaughtUp {
            if let Some(text) = text.as_mut() {
                print_lines(&stdout, &text.finish())?;
            }
            return Ok(());
        }
        if client.state() == ConnectionState::Closed {
            bail!("the server speaks no protocol this client knows");
        }
        let timeout = client.poll_timeout();
        tokio::select! {
            (conn, opened) = async { opening.as_mut().expect("guarded").await }, if opening.is_some() => {
                opening = None;
                match opened {
                    Ok(ws) => {
                        socket = Some((conn, ws));
                        last_failure.clear();
                        client.handle_open(conn, now_ms());
                    }
                    Err(tungstenite::Error::Http(response)) => {
                        let status = response.status().as_u16();
                        let body = response.body().as_deref().unwrap_or_default();
                        let message = error_message(body);
                        match status {
                            401 | 403 => {
                                let hint = if status == 401 {
                                    "; check the token (#token= in the URL, --token-file or AGENTWIRE_TOKEN)"
                                } else {
                                    ""
                                };
                                return Err(Refused { status, message: format!("{message}{hint}") }.into());
                            }
                            429 | 500.. => {
                                let failure = format!("the server answered {status} ({message})");
                                if failure != last_failure {
                                    eprintln!("agentwire tail: {failure}; retrying");
                                    last_failure = failure;
                                }
                                client.handle_close(conn, now_ms());
                            }
                            404 => bail!("{}: no agentwire WebSocket there (404)", options.url),
                            _ => bail!("{}: the server answered {status} ({message})", options.url),
                        }
                    }
                    Err(e @ (tungstenite::Error::Url(_) | tungstenite::Error::HttpFormat(_))) => {
                        bail!("{}: {e}", options.url);
                    }
                    Err(e) => {
                        let failure = format!("connecting to {}: {e}", options.url);
                        if failure != last_failure {
                            eprintln!("agentwire tail: {failure}; retrying");
                            last_failure = failure;
                        }
                        client.handle_close(conn, now_ms());
                    }
                }
            }
            frame = async { socket.as_mut().expect("guarded").1.next().await }, if socket.is_some() => {
                let conn = socket.as_ref().map_or(0, |(c, _)| *c);
                match frame {
                    Some(Ok(Message::Text(text))) => client.handle_frame(conn, &text, now_ms()),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        socket = None;
                        client.handle_close(conn, now_ms());
                    }
                    Some(Ok(_)) => {}
                }
            }
            _ = sleep_until(timeout, start) => client.handle_timeout(now_ms()),
        }
    }
}

/// Sleeps until `at_ms` on the clock that started at `start` (forever without a deadline).
async fn sleep_until(at_ms: Option<i64>, start: Instant) {
    match at_ms {
        Some(at) => {
            let at = start + Duration::from_millis(u64::try_from(at.max(0)).unwrap_or(0));
            tokio::time::sleep_until(at.into()).await;
        }
        None => std::future::pending().await,
    }
}

/// Tells stderr what happened to the connection and the stream; fails on what ends the tail.
fn report(options: &TailOptions, client: &Client, batch: ClientBatch) -> Result<()> {
    if batch.state == Some(ConnectionState::Reconnecting) {
        let after = client
            .projector()
            .cursor(&options.session)
            .map_or(options.after, |c| c.after);
        eprintln!("agentwire tail: connection dropped; resuming after {after}");
    }
    let notes = batch
        .batch
        .sessions
        .iter()
        .flat_map(|s| &s.notes)
        .chain(&batch.batch.notes);
    for note in notes {
        match note {
            Note::Error { code, message } => {
                if matches!(code.as_str(), "unknown_session" | "unsupported_protocol") {
                    bail!("{code}: {message}");
                }
                eprintln!("agentwire tail: server error {code}: {message}");
            }
            Note::Reset { reason, .. } => eprintln!(
                "agentwire tail: the server reset this session's stream ({reason}); replaying from the start"
            ),
            Note::Gap { after, .. } => {
                eprintln!("agentwire tail: a gap in the stream; resubscribing after {after}");
            }
            Note::Store(store) if !store.is_available() => eprintln!(
                "agentwire tail: the server's store is unavailable ({}); {} event(s) wait there",
                store.error.as_deref().unwrap_or("no reason given"),
                store.unstored
            ),
            Note::Store(_) => eprintln!("agentwire tail: the server's store is available again"),
            _ => {}
        }
    }
    Ok(())
}

/// The WebSocket handshake request: the URL, the token as `Authorization: Bearer`.
fn handshake(url: &str, token: &str) -> Result<tungstenite::handshake::client::Request> {
    use tungstenite::client::IntoClientRequest;
    let mut request = url
        .into_client_request()
        .with_context(|| format!("{url}: not a WebSocket URL"))?;
    let bearer = format!("Bearer {token}")
        .parse()
        .context("the token is not a valid header value")?;
    request.headers_mut().insert("authorization", bearer);
    Ok(request)
}

/// The message of the API's JSON error body (`{"error":{"code","message"}}`), or the body.
fn error_message(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    match (
        value["error"]["code"].as_str(),
        value["error"]["message"].as_str(),
    ) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => String::from_utf8_lossy(body)
            .trim()
            .chars()
            .take(200)
            .collect(),
    }
}

fn print(
    stdout: &std::io::Stdout,
    events: &[Event],
    text: Option<&mut format::TextFormat>,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    match text {
        Some(text) => {
            let lines: Vec<String> = events.iter().flat_map(|e| text.handle(e)).collect();
            print_lines(stdout, &lines)
        }
        None => {
            let lines: Vec<String> = events.iter().map(Event::to_json).collect();
            print_lines(stdout, &lines)
        }
    }
}

fn print_lines(stdout: &std::io::Stdout, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut out = stdout.lock();
    for line in lines {
        writeln!(out, "{line}").context("writing stdout")?;
    }
    out.flush().context("writing stdout")
}

/// A fresh token for a server started without one.
pub fn new_token() -> String {
    random_hex(16)
}
