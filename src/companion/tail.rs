//! `agentwire tail`: follow a session over the WebSocket and print its canonical events as
//! JSON Lines, like `tail -f`, resuming by itself after any disconnect.
//!
//! The [`Cursor`] of the core admits each sequence once, in order; after a drop the client
//! reconnects with backoff and jitter and resubscribes from the last sequence it printed, so
//! the output has no gap and no duplicate however often the connection breaks. A server that
//! stops sending (not even heartbeats) for three heartbeat periods counts as a drop.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::random_hex;
use crate::core::event::Event;
use crate::core::wire::{ClientMsg, Cursor, ServerMsg, DEFAULT_MAX_FRAME, PROTOCOL_VERSIONS};

/// What to follow and how.
#[derive(Clone, Debug)]
pub struct TailOptions {
    /// The WebSocket URL, e.g. `ws://127.0.0.1:7777/ws`.
    pub url: String,
    pub token: String,
    pub session: String,
    /// Print events after this sequence.
    pub after: u64,
    /// Keep following after catching up (else exit at the first `caught_up`).
    pub follow: bool,
    /// The first reconnect delay; it doubles up to 5 s, with jitter.
    pub backoff_min_ms: u64,
}

enum Outcome {
    /// Caught up with `follow` off: done.
    Done,
    /// The connection ended or broke: reconnect.
    Dropped(String),
}

/// Follows the session until caught up (without `follow`) or forever.
pub async fn run(options: TailOptions) -> Result<()> {
    let mut cursor = Cursor::resume(options.after, None);
    let mut backoff_ms = options.backoff_min_ms;
    loop {
        match connect_once(&options, &mut cursor).await {
            Ok(Outcome::Done) => return Ok(()),
            Ok(Outcome::Dropped(why)) => {
                eprintln!(
                    "agentwire tail: connection dropped ({why}); resuming after {}",
                    cursor.after
                );
                backoff_ms = options.backoff_min_ms;
            }
            Err(e) if is_fatal(&e) => return Err(e),
            Err(e) => eprintln!("agentwire tail: {e:#}; retrying"),
        }
        let jitter = u64::from(random_hex(1).as_bytes()[0] % 16) * backoff_ms / 16;
        tokio::time::sleep(Duration::from_millis(backoff_ms + jitter)).await;
        backoff_ms = (backoff_ms * 2).min(5_000);
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Fatal(String);

fn is_fatal(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Fatal>().is_some()
}

async fn connect_once(options: &TailOptions, cursor: &mut Cursor) -> Result<Outcome> {
    let sep = if options.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}token={}", options.url, options.token);
    let (socket, _) = match tokio_tungstenite::connect_async(url.as_str()).await {
        Ok(ok) => ok,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status();
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            return Err(Fatal(format!(
                "the server refused the connection: {status} {body}"
            ))
            .into());
        }
        Err(e) => return Err(e).context("connecting"),
    };
    let (mut sink, mut stream) = socket.split();
    let hello = ClientMsg::Hello {
        protocols: PROTOCOL_VERSIONS.to_vec(),
        max_frame: Some(DEFAULT_MAX_FRAME),
        client: Some(concat!("agentwire-tail/", env!("CARGO_PKG_VERSION")).into()),
    };
    sink.send(Message::Text(hello.encode().into()))
        .await
        .context("sending hello")?;
    let mut heartbeat_ms = 15_000u64;
    let mut subscribed = false;
    let stdout = std::io::stdout();
    loop {
        let deadline = Duration::from_millis(heartbeat_ms * 3);
        let frame = match tokio::time::timeout(deadline, stream.next()).await {
            Err(_) => return Ok(Outcome::Dropped("no heartbeat".into())),
            Ok(None) => return Ok(Outcome::Dropped("closed by the server".into())),
            Ok(Some(Err(e))) => return Ok(Outcome::Dropped(e.to_string())),
            Ok(Some(Ok(Message::Text(text)))) => text,
            Ok(Some(Ok(Message::Close(_)))) => {
                return Ok(Outcome::Dropped("closed by the server".into()))
            }
            Ok(Some(Ok(_))) => continue,
        };
        let msg = match ServerMsg::decode(&frame, usize::MAX) {
            Ok(m) => m,
            Err(e) => bail!("the server sent a bad frame: {e}"),
        };
        let mut printed: Vec<Event> = Vec::new();
        match msg {
            ServerMsg::Welcome {
                heartbeat_ms: hb, ..
            } => {
                heartbeat_ms = hb.max(100);
                if !subscribed {
                    subscribed = true;
                    let sub = cursor.subscribe(&options.session);
                    sink.send(Message::Text(sub.encode().into()))
                        .await
                        .context("subscribing")?;
                }
            }
            ServerMsg::Events { epoch, events, .. } => {
                let accepted = cursor.accept(&epoch, events);
                printed = accepted.events;
                if accepted.gap.is_some() {
                    print(&stdout, &printed)?;
                    return Ok(Outcome::Dropped("a gap in the stream".into()));
                }
            }
            ServerMsg::EventPart {
                epoch,
                sequence,
                index,
                last,
                text,
                ..
            } => {
                let event = cursor
                    .accept_part(sequence, index, last, text)
                    .context("a large event")?;
                if let Some(event) = event {
                    printed = cursor.accept(&epoch, vec![event]).events;
                }
            }
            ServerMsg::Reset { epoch, reason, .. } => {
                eprintln!("agentwire tail: the server reset this session's stream ({reason}); replaying from the start");
                cursor.reset(&epoch);
            }
            ServerMsg::CaughtUp { .. } if !options.follow => return Ok(Outcome::Done),
            ServerMsg::Error { error, .. } => {
                let fatal = matches!(
                    error.code.as_str(),
                    "unknown_session" | "unsupported_protocol"
                );
                if fatal {
                    return Err(Fatal(format!("{}: {}", error.code, error.message)).into());
                }
                eprintln!(
                    "agentwire tail: server error {}: {}",
                    error.code, error.message
                );
            }
            _ => {}
        }
        print(&stdout, &printed)?;
    }
}

fn print(stdout: &std::io::Stdout, events: &[Event]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let mut out = stdout.lock();
    for e in events {
        writeln!(out, "{}", e.to_json()).context("writing stdout")?;
    }
    out.flush().context("writing stdout")
}

/// A fresh token for a server started without one.
pub fn new_token() -> String {
    random_hex(16)
}
