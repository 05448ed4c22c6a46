//! The WebSocket protocol over plain HTTP, for where WebSockets do not get through (a proxy
//! that refuses upgrades, or cuts upgraded connections): the same frames, the same cursors,
//! the same guarantees, with the two directions split.
//!
//! * `GET /api/wire?frames=[…]` is an event stream (`text/event-stream`) of the server's
//!   frames, one per `data:` line, exactly as the WebSocket would send them (welcome, events,
//!   caught_up, heartbeats, errors, session_status). `frames` is a JSON array of the client
//!   frames that open a WebSocket connection: `hello`, then its `subscribe`s; they go through
//!   [`ws::run_connection`] as if received, so everything the WebSocket checks holds here.
//!   The stream ends by itself after `recycle` (before the idle and lifetime limits of common
//!   proxies, and so that a proxy that buffers hands over what it held); the client opens the
//!   next from its cursors.
//! * `POST /api/wire` takes one command frame (`start_turn`, `interrupt`, …) as its body and
//!   answers with the command's `reply` frame (or the `error` frame a WebSocket would send;
//!   a long `history` page as its `message_part`s, a line each).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::fanout::Outgoing;
use super::server::AppState;
use super::ws::{self, Incoming, StreamGuard};
use crate::core::error::ErrorCode;
use crate::core::wire::{ClientMsg, ServerMsg, WireError, PROTOCOL_VERSIONS};

#[derive(Deserialize)]
pub struct Opening {
    frames: String,
}

fn refusal(code: ErrorCode, message: impl Into<String>) -> Response {
    let body = ServerMsg::Error {
        error: WireError::new(code, message),
        session: None,
    }
    .encode();
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// `GET /api/wire?frames=…`: the server's half of a connection, as an event stream.
pub async fn stream(State(state): State<AppState>, Query(opening): Query<Opening>) -> Response {
    let frames: Vec<serde_json::Value> = match serde_json::from_str(&opening.frames) {
        Ok(frames) => frames,
        Err(e) => {
            let message = format!("frames must be a JSON array of client frames: {e}");
            return refusal(ErrorCode::MalformedFrame, message);
        }
    };
    let limits = state.config.limits;
    let recycle = state.config.sse_recycle;
    let (out, mut rx) = mpsc::channel::<Outgoing>(ws::OUTGOING_FRAMES);
    let (tx, events) = mpsc::channel::<SseEvent>(ws::OUTGOING_FRAMES);
    let open = StreamGuard::sse(&state.streams);
    let mut drops = state.drops.subscribe();
    let hub = state.hub.clone();
    let closed = out.clone();
    let incoming = futures_util::stream::iter(
        frames
            .into_iter()
            .map(|f| Incoming::Text(f.to_string()))
            .collect::<Vec<_>>(),
    )
    // Then nothing more from the client: the connection lives until its stream goes.
    .chain(futures_util::stream::pending())
    .take_until(async move { closed.closed().await });
    tokio::spawn(ws::run_connection(Box::pin(incoming), out, hub, limits));
    tokio::spawn(async move {
        let _open = open;
        let mut heartbeat = tokio::time::interval(Duration::from_millis(limits.heartbeat_ms));
        heartbeat.tick().await;
        let end = tokio::time::sleep(recycle);
        tokio::pin!(end);
        loop {
            let frame = tokio::select! {
                frame = rx.recv() => match frame {
                    Some(f) => f,
                    None => break,
                },
                _ = heartbeat.tick() => ServerMsg::Heartbeat { now_ms: super::now().unix_millis() }.encode().into(),
                _ = &mut end => break,
                _ = tx.closed() => break,
                // `POST /api/connections/drop` ends these streams as it closes WebSockets.
                _ = drops.recv() => break,
            };
            if tx
                .send(SseEvent::default().data(frame.text.as_str()))
                .await
                .is_err()
            {
                break;
            }
        }
        // Dropping `rx` ends the connection's tasks (their sends fail, the incoming stream
        // ends).
    });
    let events = futures_util::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    (
        // Proxies that buffer responses (nginx) are asked not to.
        [
            ("x-accel-buffering", "no"),
            (header::CACHE_CONTROL.as_str(), "no-cache, no-transform"),
        ],
        Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))),
    )
        .into_response()
}

/// `POST /api/wire`: one command, answered by its reply frame.
pub async fn command(State(state): State<AppState>, body: Bytes) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return refusal(ErrorCode::MalformedFrame, "the body is not UTF-8");
    };
    let msg = match ClientMsg::decode(text, state.config.limits.client_frame_limit) {
        Ok(msg) => msg,
        Err(e) => return refusal(e.code(), e.to_string()),
    };
    if msg.command_id().is_none() || matches!(msg, ClientMsg::Ping { .. }) {
        let message = "POST /api/wire takes a command (start_turn, interrupt, …); subscriptions \
                       are the stream's (GET /api/wire?frames=…)";
        return refusal(ErrorCode::BadRequest, message);
    }
    let hello = ClientMsg::Hello {
        protocols: PROTOCOL_VERSIONS.to_vec(),
        max_frame: None,
        client: None,
        features: Vec::new(),
    };
    let (out, mut rx) = mpsc::channel::<Outgoing>(ws::OUTGOING_FRAMES);
    let incoming = futures_util::stream::iter([
        Incoming::Text(hello.encode()),
        Incoming::Text(text.to_owned()),
    ]);
    let run = tokio::spawn(ws::run_connection(
        Box::pin(incoming),
        out,
        state.hub.clone(),
        state.config.limits,
    ));
    // The welcome first, then the command's answer: one frame, or (a long history page) its
    // `message_part`s, a line each.
    let mut answer = String::new();
    while let Some(frame) = rx.recv().await {
        if !frame.text.as_str().starts_with(r#"{"t":"welcome""#) {
            answer.push_str(frame.text.as_str());
            answer.push('\n');
        }
    }
    let _ = run.await;
    if answer.is_empty() {
        return refusal(ErrorCode::InternalError, "the command was not answered");
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        answer,
    )
        .into_response()
}
