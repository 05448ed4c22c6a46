//! `agentwire serve`: the HTTP JSON API, the Server-Sent Events stream, the WebSocket
//! endpoint and the demo page's static files, with security on by default.
//!
//! Security: the server binds 127.0.0.1 unless told otherwise and refuses a non-loopback
//! address without an explicit token; every API, SSE and WebSocket request must carry the
//! token (`Authorization: Bearer T` or `?token=T`); a request that carries an `Origin` other
//! than the server's own is refused (no cross-site WebSocket hijacking, no cross-site
//! requests); bodies, frames and provider lines are size-limited with a clear error; static
//! files are served only from the www directory, with no path traversal.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State, WebSocketUpgrade};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::adapter::Thinking;
use super::host::{CommandError, Hub};
use super::store::{EventQuery, StoreError};
use super::ws::{self, ConnectionLimits, Follower, Page};
use crate::core::event::EventType;
use crate::core::time::Timestamp;
use crate::core::wire::{self, Decision};

/// How the server is reached and protected.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub token: String,
    /// Origins allowed besides the server's own (e.g. a dev server), exact match.
    pub allowed_origins: Vec<String>,
    /// The directory of the demo page.
    pub www: PathBuf,
    pub limits: ConnectionLimits,
    /// The largest HTTP request body accepted.
    pub body_limit: usize,
    /// The longest a long-poll may wait.
    pub max_wait_ms: u64,
}

impl ServerConfig {
    pub fn new(token: String, www: PathBuf) -> ServerConfig {
        ServerConfig {
            token,
            allowed_origins: Vec::new(),
            www,
            limits: ConnectionLimits {
                max_frame: wire::DEFAULT_MAX_FRAME,
                client_frame_limit: 1 << 20,
                heartbeat_ms: 15_000,
            },
            body_limit: 1 << 20,
            max_wait_ms: 60_000,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub hub: Arc<Hub>,
    pub config: Arc<ServerConfig>,
    /// Fired by `POST /api/connections/drop`: every open WebSocket closes.
    pub drops: tokio::sync::broadcast::Sender<()>,
}

impl AppState {
    pub fn new(hub: Arc<Hub>, config: Arc<ServerConfig>) -> AppState {
        AppState {
            hub,
            config,
            drops: tokio::sync::broadcast::channel(1).0,
        }
    }
}

/// An API error: a status and `{"error": {"code", "message"}}`.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        let status = match e.code {
            "unknown_session" | "unknown_request" => StatusCode::NOT_FOUND,
            "foreground_turn_active"
            | "not_connected"
            | "no_active_turn"
            | "turn_id_used"
            | "already_running"
            | "hosted_elsewhere"
            | "no_resume_handle" => StatusCode::CONFLICT,
            "store_error" => StatusCode::INTERNAL_SERVER_ERROR,
            "cli_not_found" | "spawn_failed" => StatusCode::FAILED_DEPENDENCY,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.code, e.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::from(CommandError::from(e))
    }
}

/// The router: API and WebSocket behind the token and origin checks; static files open.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/api/info", get(info))
        .route("/api/sessions", get(list_sessions).post(create_session))
        .route("/api/sessions/{id}", get(get_session).delete(close_session))
        .route("/api/sessions/{id}/turns", post(start_turn))
        .route("/api/sessions/{id}/interrupt", post(interrupt))
        .route("/api/sessions/{id}/mode", post(set_mode))
        .route("/api/sessions/{id}/model", post(set_model))
        .route("/api/sessions/{id}/resume", post(resume_session))
        .route(
            "/api/sessions/{id}/approvals/{request_id}",
            post(answer_approval),
        )
        .route("/api/sessions/{id}/events", get(get_events))
        .route("/api/sessions/{id}/stream", get(sse_stream))
        .route("/api/connections/drop", post(drop_connections))
        .route("/ws", get(websocket))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(state.config.body_limit));
    api.fallback(get(static_file)).with_state(state)
}

/// Serves until `shutdown` resolves, then closes every session (killing the agents).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let hub = state.hub.clone();
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    hub.shutdown().await;
    Ok(())
}

/// Token and origin checks for everything but static files.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        if !origin_allowed(origin, headers, &state.config.allowed_origins) {
            let msg = format!("origin {origin:?} is not allowed");
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", msg).into_response();
        }
    }
    let presented = bearer(headers).or_else(|| query_token(request.uri()));
    match presented {
        Some(t) if constant_time_eq(t.as_bytes(), state.config.token.as_bytes()) => {
            next.run(request).await
        }
        Some(_) => {
            ApiError::new(StatusCode::UNAUTHORIZED, "bad_token", "wrong token").into_response()
        }
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "token_required",
            "a token is required: Authorization: Bearer <token> or ?token=<token>",
        )
        .into_response(),
    }
}

/// Same origin: `Origin` equals `http://<Host>`; or listed in `allowed`.
fn origin_allowed(origin: &HeaderValue, headers: &HeaderMap, allowed: &[String]) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    if allowed.iter().any(|a| a == origin) {
        return true;
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    host.is_some_and(|h| origin == format!("http://{h}"))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token=").map(str::to_owned))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn info(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "epoch": state.hub.store().epoch(),
        "protocols": wire::PROTOCOL_VERSIONS,
        "providers": state.hub.providers(),
        "node": state.hub.node(),
    }))
}

async fn list_sessions(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let sessions = state.hub.store().list_sessions().await?;
    Ok(Json(json!({ "sessions": sessions })))
}

#[derive(Deserialize)]
struct CreateSession {
    provider: String,
    cwd: Option<PathBuf>,
}

async fn create_session(
    State(state): State<AppState>,
    Json(body): Json<CreateSession>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let session = state.hub.create_session(&body.provider, body.cwd).await?;
    Ok((StatusCode::CREATED, Json(json!(session))))
}

async fn get_session(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.hub.describe(&id).await?))
}

#[derive(Deserialize)]
struct SetMode {
    mode: String,
}

async fn set_mode(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Json(body): Json<SetMode>,
) -> Result<StatusCode, ApiError> {
    state.hub.set_mode(&id, body.mode).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct SetModel {
    model: Option<String>,
    thinking: Option<Thinking>,
}

async fn set_model(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Json(body): Json<SetModel>,
) -> Result<StatusCode, ApiError> {
    state.hub.set_model(&id, body.model, body.thinking).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resume_session(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Value>, ApiError> {
    let session = state.hub.resume_session(&id).await?;
    Ok(Json(json!(session)))
}

async fn close_session(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<StatusCode, ApiError> {
    state.hub.close_session(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct StartTurn {
    prompt: String,
}

async fn start_turn(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Json(body): Json<StartTurn>,
) -> Result<Json<Value>, ApiError> {
    let turn = state.hub.start_turn(&id, body.prompt).await?;
    Ok(Json(json!({ "turnId": turn })))
}

async fn interrupt(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
) -> Result<StatusCode, ApiError> {
    state.hub.interrupt(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct Answer {
    decision: Decision,
}

async fn answer_approval(
    State(state): State<AppState>,
    UrlPath((id, request_id)): UrlPath<(String, String)>,
    Json(body): Json<Answer>,
) -> Result<StatusCode, ApiError> {
    state
        .hub
        .answer_approval(&id, request_id, body.decision)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query string of the events endpoints.
#[derive(Deserialize, Default)]
struct EventsParams {
    after: Option<u64>,
    before: Option<u64>,
    since: Option<String>,
    run_id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    limit: Option<usize>,
    wait_ms: Option<u64>,
}

impl EventsParams {
    fn query(&self) -> Result<EventQuery, ApiError> {
        let since = match &self.since {
            Some(s) => Some(Timestamp::parse_rfc3339(s).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_since",
                    format!("since={s:?} is not RFC 3339"),
                )
            })?),
            None => None,
        };
        let kind = match &self.kind {
            Some(k) => Some(EventType::parse(k).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_type",
                    format!("unknown event type {k:?}"),
                )
            })?),
            None => None,
        };
        Ok(EventQuery {
            after: self.after,
            before: self.before,
            since,
            run_id: self.run_id.clone(),
            kind,
            limit: Some(self.limit.unwrap_or(1_000).min(10_000)),
        })
    }
}

async fn get_events(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Query(params): Query<EventsParams>,
) -> Result<Json<Value>, ApiError> {
    let store = state.hub.store();
    if store.get_session(&id).await?.is_none() {
        return Err(CommandError::new("unknown_session", format!("no session {id:?}")).into());
    }
    let query = params.query()?;
    let events = match params.wait_ms {
        Some(wait) if wait > 0 => {
            store
                .wait_events(&id, &query, wait.min(state.config.max_wait_ms))
                .await?
        }
        _ => store.get_events(&id, &query).await?,
    };
    let next_after = events
        .last()
        .map_or(query.after.unwrap_or(0), |e| e.sequence());
    let latest = store.latest_sequence(&id).await?;
    Ok(Json(json!({
        "events": events,
        "next_after": next_after,
        "latest_sequence": latest,
        "epoch": store.epoch(),
    })))
}

/// The same log as Server-Sent Events: `id:` is the sequence, so `Last-Event-ID` resumes.
async fn sse_stream(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Query(params): Query<EventsParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let store = state.hub.store().clone();
    if store.get_session(&id).await?.is_none() {
        return Err(CommandError::new("unknown_session", format!("no session {id:?}")).into());
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let after = resume.or(params.after).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let epoch = store.epoch().to_owned();
    tokio::spawn(async move {
        let mut follower = Follower::new(store, &id, after);
        loop {
            let items = match follower.next_page(512).await {
                Ok(Page::Events(events)) => events
                    .iter()
                    .map(|e| {
                        SseEvent::default()
                            .id(e.sequence().to_string())
                            .event("event")
                            .data(e.to_json())
                    })
                    .collect(),
                Ok(Page::CaughtUp(latest)) => {
                    let data = json!({"latest": latest, "epoch": epoch}).to_string();
                    vec![SseEvent::default().event("caught_up").data(data)]
                }
                Err(e) => {
                    let data = json!({"code": "store_error", "message": e.to_string()}).to_string();
                    let _ = tx.send(SseEvent::default().event("error").data(data)).await;
                    return;
                }
            };
            for item in items {
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|e| (Ok::<_, std::convert::Infallible>(e), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// A test and ops hook: closes every open WebSocket (clients reconnect and resume).
async fn drop_connections(State(state): State<AppState>) -> Json<Value> {
    let dropped = state.drops.send(()).unwrap_or(0);
    Json(json!({ "dropped": dropped }))
}

async fn websocket(State(state): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    // The hard cap closes the socket (1009); below it, oversized frames get an error frame.
    let hard_cap = state.config.limits.client_frame_limit.saturating_mul(4);
    upgrade
        .max_message_size(hard_cap)
        .max_frame_size(hard_cap)
        .on_upgrade(move |socket| ws::handle_socket(socket, state))
}

/// Static files from the www directory; `/` is `index.html`.
async fn static_file(State(state): State<AppState>, uri: Uri) -> Response {
    match resolve_static(&state.config.www, uri.path()) {
        Some(path) => match tokio::fs::read(&path).await {
            Ok(bytes) => ([(header::CONTENT_TYPE, content_type(&path))], bytes).into_response(),
            Err(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response()
            }
        },
        None => ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response(),
    }
}

/// Maps a URL path to a file under `root`, refusing anything that could leave it.
pub fn resolve_static(root: &Path, url_path: &str) -> Option<PathBuf> {
    let rel = url_path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    let safe = rel.split('/').all(|part| {
        !part.is_empty() && part != "." && part != ".." && !part.contains(['\\', '%', '\0', ':'])
    });
    if !safe {
        return None;
    }
    let path = root.join(rel);
    let canonical = path.canonicalize().ok()?;
    let root = root.canonicalize().ok()?;
    (canonical.starts_with(&root) && canonical.is_file()).then_some(canonical)
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_paths_cannot_leave_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "hi").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.js"), "x").unwrap();
        assert!(resolve_static(dir.path(), "/").is_some());
        assert!(resolve_static(dir.path(), "/sub/a.js").is_some());
        for bad in [
            "/../etc/passwd",
            "/sub/../../x",
            "/%2e%2e/x",
            "/sub//a.js",
            "/C:/x",
            "/sub\\a.js",
            "/missing",
        ] {
            assert_eq!(resolve_static(dir.path(), bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_compare_in_constant_time_and_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
