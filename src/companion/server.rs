//! `agentwire serve`: the HTTP JSON API, the Server-Sent Events stream, the WebSocket
//! endpoint and the demo page's static files, with security on by default.
//!
//! Security: the server binds 127.0.0.1 unless told otherwise and refuses a non-loopback
//! address without an explicit token. Every request, static files included, passes the
//! [`Access`] rules (its `Host` must name this server, its `Origin`, if any, must be allowed);
//! every API, SSE and WebSocket request must also carry the token, with failed attempts
//! limited. Responses carry `X-Content-Type-Options: nosniff` and `Referrer-Policy:
//! no-referrer`; pages a `Content-Security-Policy` with `frame-ancestors 'none'` (their
//! inline scripts, such as an import map, allowed by hash); the API `Cache-Control:
//! no-store`. Only origins given with `--allow-origin` get CORS headers. Bodies, frames and
//! provider lines are size-limited with a clear JSON error (axum's own rejections
//! included); static files are served only from the www directory (or the page embedded in
//! the binary), with no path traversal and no dotfiles. Connections are capped and timed out by [`super::listen`].

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
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

use super::access::{self, Access, Refusal};
use super::adapter::Thinking;
use super::fanout::{Follower, Page};
use super::host::{CommandError, Hub};
use super::listen::{self, ListenLimits};
use super::store::{EventQuery, StoreError};
use super::ws::{self, ConnectionLimits, StreamCounts, StreamGuard};
use crate::core::error::ErrorCode;
use crate::core::event::EventType;
use crate::core::time::Timestamp;
use crate::core::wire::{self, Decision};

/// How the server is reached and protected.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub token: String,
    /// Origins allowed besides the server's own (e.g. a dev server), exact match; they get
    /// CORS headers on the API.
    pub allowed_origins: Vec<String>,
    /// `Host` values allowed besides the loopback names and the bound address (e.g. a reverse
    /// proxy's name), exact match.
    pub allowed_hosts: Vec<String>,
    /// Connection cap and timeouts.
    pub listen: ListenLimits,
    /// The directory of the demo page; `None`: the page embedded in the binary.
    pub www: Option<PathBuf>,
    pub limits: ConnectionLimits,
    /// The largest HTTP request body accepted.
    pub body_limit: usize,
    /// The longest a long-poll may wait.
    pub max_wait_ms: u64,
    /// How long one `GET /api/wire` event stream lasts before it ends and the client opens
    /// the next (see [`super::wire_http`]).
    pub sse_recycle: Duration,
}

impl ServerConfig {
    /// Serving the page in `www` (set [`ServerConfig::www`] to `None` for the embedded one).
    pub fn new(token: String, www: PathBuf) -> ServerConfig {
        ServerConfig {
            token,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            listen: ListenLimits::default(),
            www: Some(www),
            limits: ConnectionLimits {
                max_frame: wire::DEFAULT_MAX_FRAME,
                client_frame_limit: 1 << 20,
                heartbeat_ms: 15_000,
            },
            body_limit: 1 << 20,
            max_wait_ms: 60_000,
            sse_recycle: Duration::from_secs(30),
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
    /// The host, origin and token rules.
    pub access: Arc<Access>,
    /// Open streams, by kind (`GET /api/info` reports them).
    pub streams: Arc<StreamCounts>,
    /// What the AG-UI endpoint remembers between runs.
    pub agui: Arc<super::agui::Threads>,
}

impl AppState {
    /// The hosts allowed are the configured ones until [`serve`] adds the bound address's.
    pub fn new(hub: Arc<Hub>, config: Arc<ServerConfig>) -> AppState {
        AppState {
            access: access_for(&config, Vec::new()),
            hub,
            config,
            drops: tokio::sync::broadcast::channel(1).0,
            streams: Arc::default(),
            agui: Arc::default(),
        }
    }

    /// The same state answering to the names of `addr` too ([`access::loopback_hosts`]).
    pub fn bound_to(mut self, addr: std::net::SocketAddr) -> AppState {
        self.access = access_for(&self.config, access::loopback_hosts(addr));
        self
    }
}

/// The configured access rules, with `hosts` allowed besides the configured ones.
fn access_for(config: &ServerConfig, mut hosts: Vec<String>) -> Arc<Access> {
    hosts.extend(config.allowed_hosts.iter().cloned());
    Arc::new(Access::new(
        config.token.clone(),
        hosts,
        config.allowed_origins.clone(),
    ))
}

/// An API error: a status and `{"error": {"code", "message"}}`.
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code.as_str(), "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> ApiError {
        use ErrorCode as C;
        let status = match e.code {
            C::UnknownSession | C::UnknownRequest => StatusCode::NOT_FOUND,
            C::ForegroundTurnActive
            | C::NotConnected
            | C::NoActiveTurn
            | C::TurnIdUsed
            | C::AlreadyRunning
            | C::HostedElsewhere
            | C::NoResumeHandle => StatusCode::CONFLICT,
            // The agent is not reading its input: try again later.
            C::AgentBusy => StatusCode::SERVICE_UNAVAILABLE,
            C::StoreError => StatusCode::INTERNAL_SERVER_ERROR,
            C::CliNotFound | C::SpawnFailed => StatusCode::FAILED_DEPENDENCY,
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

/// The router: every route behind the host and origin rules and the security headers; the
/// API and the WebSocket behind the token too; static files without it (they hold no data).
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
        .route(
            "/api/wire",
            get(super::wire_http::stream).post(super::wire_http::command),
        )
        .route(
            "/ag-ui/{provider}",
            super::agui::route(state.config.body_limit),
        )
        .layer(middleware::from_fn(json_rejections))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(state.config.body_limit));
    api.fallback(get(static_file))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            host_and_origin,
        ))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then closes every session (killing the agents). The
/// server answers to the loopback names of the listener's port and the configured hosts.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = state.bound_to(listener.local_addr()?);
    let hub = state.hub.clone();
    let limits = state.config.listen;
    listen::serve(
        listener,
        router(state),
        limits,
        shutdown,
        Duration::from_secs(5),
    )
    .await;
    hub.shutdown().await;
    Ok(())
}

fn refused(refusal: Refusal) -> Response {
    let (status, code, message) = match refusal {
        Refusal::Host(host) => (
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenHost,
            format!("host {host} is not this server's (see --allow-host)"),
        ),
        Refusal::Origin(origin) => (
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenOrigin,
            format!("origin {origin} is not allowed (see --allow-origin)"),
        ),
        Refusal::TokenRequired => (
            StatusCode::UNAUTHORIZED,
            ErrorCode::TokenRequired,
            "a token is required: Authorization: Bearer <token> or ?token=<token>".into(),
        ),
        Refusal::BadToken => (
            StatusCode::UNAUTHORIZED,
            ErrorCode::BadToken,
            "wrong token".into(),
        ),
        Refusal::TooManyAttempts { retry_after } => {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyAttempts,
                format!("too many wrong tokens lately: try again in {seconds} s"),
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            return response;
        }
    };
    ApiError::new(status, code, message).into_response()
}

/// The host and origin rules, for every route; then the security headers on every response.
async fn host_and_origin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut response = match state
        .access
        .check_host_and_origin(request.headers(), request.uri())
    {
        Ok(()) => next.run(request).await,
        Err(refusal) => refused(refusal),
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        );
    }
    response
}

/// The API's rules past host and origin: CORS for the allowed origins (preflights answered
/// without a token), the token, and `Cache-Control: no-store`.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let cors = state.access.cors_origin(request.headers()).cloned();
    let mut response = if access::is_preflight(request.method(), request.headers()) {
        match &cors {
            Some(_) => StatusCode::NO_CONTENT.into_response(),
            None => ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::ForbiddenOrigin,
                "CORS is only for origins given with --allow-origin",
            )
            .into_response(),
        }
    } else {
        let checked = state
            .access
            .check_fetch_site(request.headers())
            .and_then(|()| state.access.check_token(request.headers(), request.uri()));
        match checked {
            Ok(()) => next.run(request).await,
            Err(refusal) => refused(refusal),
        }
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(origin) = cors {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        for (name, value) in [
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "authorization, content-type, last-event-id",
            ),
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, DELETE"),
            (header::ACCESS_CONTROL_MAX_AGE, "600"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

/// axum's own rejections (a body too large, not JSON, JSON of the wrong shape, a bad query
/// or path) come as plain text: they become the API's JSON error with a stable code.
async fn json_rejections(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !plain || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::BodyTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::BadBody,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        s if s.is_server_error() => ErrorCode::InternalError,
        _ => ErrorCode::BadRequest,
    };
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&body).trim().to_owned();
    ApiError::new(status, code, message).into_response()
}

async fn info(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "epoch": state.hub.store().epoch(),
        "protocols": wire::PROTOCOL_VERSIONS,
        "providers": state.hub.providers(),
        "node": state.hub.node(),
        "streams": {
            "sse": state.streams.sse.load(Ordering::Relaxed),
            "websocket": state.streams.websocket.load(Ordering::Relaxed),
        },
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
    SessionId(id): SessionId,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.hub.describe(&id).await?))
}

#[derive(Deserialize)]
struct SetMode {
    mode: String,
}

async fn set_mode(
    State(state): State<AppState>,
    SessionId(id): SessionId,
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
    SessionId(id): SessionId,
    Json(body): Json<SetModel>,
) -> Result<StatusCode, ApiError> {
    state.hub.set_model(&id, body.model, body.thinking).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resume_session(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<Json<Value>, ApiError> {
    let session = state.hub.resume_session(&id).await?;
    Ok(Json(json!(session)))
}

async fn close_session(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<StatusCode, ApiError> {
    state.hub.close_session(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartTurn {
    prompt: String,
    /// Chosen by the client: the request is idempotent (see `Hub::start_turn`).
    #[serde(default)]
    turn_id: Option<String>,
}

async fn start_turn(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    Json(body): Json<StartTurn>,
) -> Result<Json<Value>, ApiError> {
    let turn = state.hub.start_turn(&id, body.prompt, body.turn_id).await?;
    Ok(Json(json!({ "turnId": turn })))
}

async fn interrupt(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<StatusCode, ApiError> {
    state.hub.interrupt(&id, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct Answer {
    decision: Decision,
}

async fn answer_approval(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    UrlPath((_, request_id)): UrlPath<(String, String)>,
    Json(body): Json<Answer>,
) -> Result<StatusCode, ApiError> {
    state
        .hub
        .answer_approval(&id, request_id, body.decision)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The `{id}` of a session route, checked: `ses_` and lowercase hex, bounded
/// ([`wire::is_session_id`]); anything else is `400 bad_session_id`, echoing none of it.
struct SessionId(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<SessionId, ApiError> {
        let params = UrlPath::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::BadRequest,
                    e.body_text(),
                )
            })?;
        let id = params
            .0
            .into_iter()
            .find(|(k, _)| k == "id")
            .map(|(_, v)| v);
        match id {
            Some(id) if wire::is_session_id(&id) => Ok(SessionId(id)),
            _ => Err(CommandError::new(ErrorCode::BadSessionId, wire::SESSION_ID_RULE).into()),
        }
    }
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
                    ErrorCode::BadSince,
                    format!("since={s:?} is not RFC 3339"),
                )
            })?),
            None => None,
        };
        let kind = match &self.kind {
            Some(k) => Some(EventType::parse(k).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::BadType,
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
    SessionId(id): SessionId,
    Query(params): Query<EventsParams>,
) -> Result<Json<Value>, ApiError> {
    let store = state.hub.store();
    if store.get_session(&id).await?.is_none() {
        return Err(
            CommandError::new(ErrorCode::UnknownSession, format!("no session {id:?}")).into(),
        );
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
    SessionId(id): SessionId,
    Query(params): Query<EventsParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let store = state.hub.store().clone();
    if store.get_session(&id).await?.is_none() {
        return Err(
            CommandError::new(ErrorCode::UnknownSession, format!("no session {id:?}")).into(),
        );
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let after = resume.or(params.after).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let epoch = store.epoch().to_owned();
    let fanout = state.hub.fanout();
    let open = StreamGuard::sse(&state.streams);
    tokio::spawn(async move {
        let _open = open;
        let mut follower = Follower::new(&fanout, &id, after);
        // `caught_up` once, when the replay reaches the end; live events follow it.
        let mut caught_up_sent = false;
        loop {
            // The client may leave while the session is idle: end with it, not at the next
            // event.
            let page = tokio::select! {
                page = follower.next_events(512) => page,
                _ = tx.closed() => return,
            };
            let items = match page {
                Ok(Page::Events(events)) => events
                    .iter()
                    .map(|e| {
                        SseEvent::default()
                            .id(e.sequence.to_string())
                            .event("event")
                            .data(&*e.json)
                    })
                    .collect(),
                Ok(Page::CaughtUp(_)) if caught_up_sent => continue,
                Ok(Page::CaughtUp(latest)) => {
                    caught_up_sent = true;
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

/// The WebSocket read buffer per connection (larger client frames grow it as needed).
const WS_READ_BUFFER: usize = 4 << 10;

async fn websocket(State(state): State<AppState>, upgrade: WebSocketUpgrade) -> Response {
    // The hard cap closes the socket (1009); below it, oversized frames get an error frame.
    let hard_cap = state.config.limits.client_frame_limit.saturating_mul(4);
    upgrade
        .max_message_size(hard_cap)
        .max_frame_size(hard_cap)
        // Clients send a few small frames; tungstenite's default 128 KiB read buffer, zeroed
        // before each read, cost each connection 128 KiB of memory and a memset per wake-up.
        .read_buffer_size(WS_READ_BUFFER)
        .on_upgrade(move |socket| {
            let open = StreamGuard::websocket(&state.streams);
            let drops = state.drops.subscribe();
            ws::handle_socket(socket, state.hub, state.config.limits, drops, open)
        })
}

/// Static files: from the `--www` directory, else the page embedded in the binary
/// ([`super::embedded`]); `/` is `index.html`. A page gets its `Content-Security-Policy`
/// ([`page_policy`]); every file an `ETag` (content hash when embedded, modification time and
/// length on disk), and `If-None-Match` a `304`.
async fn static_file(State(state): State<AppState>, uri: Uri, request: HeaderMap) -> Response {
    let not_found = || {
        ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such file").into_response()
    };
    let Some(rel) = static_path(uri.path()) else {
        return not_found();
    };
    let (bytes, etag): (std::borrow::Cow<'static, [u8]>, String) = match &state.config.www {
        Some(root) => {
            let Some(path) = resolve_static(root, uri.path()) else {
                return not_found();
            };
            let (Ok(bytes), Ok(meta)) = (tokio::fs::read(&path).await, path.metadata()) else {
                return not_found();
            };
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (bytes.into(), format!("\"{modified:x}-{:x}\"", meta.len()))
        }
        None => {
            let Some(file) = super::embedded::file(rel) else {
                return not_found();
            };
            (file.bytes.into(), file.etag.to_owned())
        }
    };
    let kind = content_type(Path::new(rel));
    let policy = kind
        .starts_with("text/html")
        .then(|| HeaderValue::from_str(&page_policy(&String::from_utf8_lossy(&bytes))).ok())
        .flatten();
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, kind)], bytes).into_response()
    };
    let headers = response.headers_mut();
    // On a 304 too: the browser updates the cached page's headers with these.
    if let Some(policy) = policy {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    response
}

/// The policy of a page: its own scripts, styles, images and WebSocket only; WebAssembly
/// allowed; never framed. Its inline scripts (an import map, say) are allowed by their
/// SHA-256, so nothing injected into the page can run.
pub fn page_policy(html: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let mut hashes = String::new();
    for script in inline_scripts(html) {
        let digest = sha2::Sha256::digest(script.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        hashes.push_str(&format!(" 'sha256-{b64}'"));
    }
    format!(
        "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'{hashes}; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// The bodies of the `<script>` elements without a `src`.
fn inline_scripts(html: &str) -> Vec<&str> {
    let mut scripts = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<script") {
        let after = &rest[start..];
        let Some(open_end) = after.find('>') else {
            break;
        };
        let tag = &after[..open_end];
        let body = &after[open_end + 1..];
        let Some(close) = body.find("</script") else {
            break;
        };
        if !tag.contains("src=") {
            scripts.push(&body[..close]);
        }
        rest = &body[close..];
    }
    scripts
}

/// The file a URL path names, relative to the root (`/` is `index.html`), or `None` for
/// anything that could leave the root, and for dotfiles (`.env`, `.git/…`).
pub fn static_path(url_path: &str) -> Option<&str> {
    let rel = url_path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    let safe = rel.split('/').all(|part| {
        !part.is_empty() && !part.starts_with('.') && !part.contains(['\\', '%', '\0', ':'])
    });
    safe.then_some(rel)
}

/// Maps a URL path to a file under `root` ([`static_path`]'s rules, and no symbolic link out
/// of it).
pub fn resolve_static(root: &Path, url_path: &str) -> Option<PathBuf> {
    let path = root.join(static_path(url_path)?);
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
        // Dotfiles exist, and are still not served.
        std::fs::write(dir.path().join(".env"), "SECRET=1").unwrap();
        std::fs::write(dir.path().join("sub/.secret"), "x").unwrap();
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
            "/.env",
            "/sub/.secret",
            "/.git/config",
        ] {
            assert_eq!(resolve_static(dir.path(), bad), None, "{bad}");
        }
    }

    #[test]
    fn pages_allow_their_own_inline_scripts_only() {
        let html = r#"<head><script type="importmap">{"imports":{}}</script>
<script type="module" src="app.js"></script><script>go()</script></head>"#;
        assert_eq!(inline_scripts(html), [r#"{"imports":{}}"#, "go()"]);
        let policy = page_policy(html);
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(policy.contains("'wasm-unsafe-eval'"), "{policy}");
        assert_eq!(policy.matches("'sha256-").count(), 2, "{policy}");
        assert!(!page_policy("<p>no scripts</p>").contains("sha256"));
    }
}
