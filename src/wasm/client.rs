//! `Client`: the transport. It owns one WebSocket at a time, one timer and one pending
//! animation frame, and does what [`crate::core::client::Client`] decides: which socket to
//! open or close, what to send, when to reconnect, which promise a reply settles. The page
//! gets one batch per animation frame through `onChange`, however many frames arrived.
//!
//! Browser callbacks hold a `Weak` handle, so dropping the `Client` (`free()`) ends it; every
//! callback borrows the state, calls the core, releases the borrow, and only then calls into
//! page code (promise settlements, `onChange`), so page code may call back in.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::{MessageEvent, WebSocket};

use super::{error, from_json, now_ms, wire_error};
use crate::core::client::{Action, Client as Core, ClientConfig};
use crate::core::error::ErrorCode;
use crate::core::hash::FastMap;
use crate::core::json::to_json;
use crate::core::quoted::Quoted;
use crate::core::wire::{Decision, Thinking, WireError};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(callback: &Function, ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(id: &JsValue);
    #[wasm_bindgen(js_name = requestAnimationFrame, catch)]
    fn request_animation_frame(callback: &Function) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(js_name = cancelAnimationFrame, catch)]
    fn cancel_animation_frame(id: &JsValue) -> Result<(), JsValue>;
}

/// The page's next delivery: an animation frame, or a timeout where there are no frames.
enum FrameRequest {
    Animation(JsValue),
    Timeout(JsValue),
}

/// Follows sessions on an agentwire server over a WebSocket, resuming by itself.
#[wasm_bindgen]
pub struct Client {
    inner: Rc<RefCell<Inner>>,
}

/// How a command's reply settles its promise.
#[derive(Clone, Copy)]
enum Resolve {
    /// With the reply's result (`{turnId}`).
    Result,
    /// With `undefined`.
    Nothing,
}

struct Socket {
    conn: u64,
    /// A `WebSocket`, or on the fallback an `EventSource` (reached through `Reflect`: no
    /// bindings for a path most pages never take).
    handle: Handle,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut()>,
}

enum Handle {
    Ws(WebSocket),
    EventSource(JsValue),
}

impl Socket {
    /// Detaches the handlers (so no callback outlives its closure) and closes.
    fn close(self) {
        match self.handle {
            Handle::Ws(ws) => {
                ws.set_onopen(None);
                ws.set_onmessage(None);
                ws.set_onclose(None);
                let _ = ws.close();
            }
            Handle::EventSource(es) => {
                for key in ["onopen", "onmessage", "onerror"] {
                    let _ = Reflect::set(&es, &key.into(), &JsValue::NULL);
                }
                call_method(&es, "close", &[]);
            }
        }
    }
}

/// `target[name](...args)`, its result (undefined when it is not a function or throws).
fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> JsValue {
    let Ok(f) = Reflect::get(target, &name.into()).and_then(|f| f.dyn_into::<Function>()) else {
        return JsValue::UNDEFINED;
    };
    let args: js_sys::Array = args.iter().collect();
    f.apply(target, &args).unwrap_or(JsValue::UNDEFINED)
}

struct Inner {
    core: Core,
    url: String,
    /// `http(s)://host:port` of the server, and the token: the fallback's requests.
    base: String,
    token: String,
    socket: Option<Socket>,
    on_change: Function,
    pending: FastMap<String, (Function, Function, Resolve)>,
    timer: Option<JsValue>,
    on_timer: Option<Closure<dyn FnMut()>>,
    frame: Option<FrameRequest>,
    on_frame: Option<Closure<dyn FnMut()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(socket) = self.socket.take() {
            socket.close();
        }
        if let Some(timer) = self.timer.take() {
            clear_timeout(&timer);
        }
        match self.frame.take() {
            Some(FrameRequest::Animation(id)) => {
                let _ = cancel_animation_frame(&id);
            }
            Some(FrameRequest::Timeout(id)) => clear_timeout(&id),
            None => {}
        }
    }
}

/// `ClientOptions`, read and checked.
struct Options {
    /// The WebSocket URL with the token in its query (browsers cannot set headers).
    url: String,
    /// The server's `http(s)://host:port`, for the fallback transport, and the token.
    base: String,
    token: String,
    on_change: Function,
    sessions: Vec<String>,
    config: ClientConfig,
}

impl Options {
    fn read(options: &JsValue) -> Result<Options, JsValue> {
        let get = |key: &str| Reflect::get(options, &key.into()).unwrap_or(JsValue::UNDEFINED);
        let bad = |message: &str| error(ErrorCode::BadOptions, message);
        let url = get("url").as_string().unwrap_or_default();
        let (scheme, rest) = match (url.strip_prefix("wss://"), url.strip_prefix("ws://")) {
            (Some(rest), _) => ("https", rest),
            (None, Some(rest)) => ("http", rest),
            (None, None) => return Err(bad("options.url must be a ws:// or wss:// URL")),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let base = format!("{scheme}://{authority}");
        let token = get("token")
            .as_string()
            .ok_or_else(|| bad("options.token must be a string"))?;
        let on_change = get("onChange").dyn_into::<Function>();
        let on_change = on_change.map_err(|_| bad("options.onChange must be a function"))?;
        let sessions = match get("sessions") {
            v if v.is_undefined() => Vec::new(),
            v => v
                .dyn_into::<js_sys::Array>()
                .ok()
                .and_then(|a| a.iter().map(|s| s.as_string()).collect::<Option<Vec<_>>>())
                .ok_or_else(|| bad("options.sessions must be an array of strings"))?,
        };
        let mut config = ClientConfig {
            // Also the source of turn ids: 64 random bits from two draws.
            seed: ((js_sys::Math::random() * 2f64.powi(32)) as u64) << 32
                | (js_sys::Math::random() * 2f64.powi(32)) as u64,
            // The frames' bytes straight into wasm memory, not through a JS string, and the
            // events packed, read without scanning JSON.
            binary_frames: true,
            packed_events: true,
            ..ClientConfig::default()
        };
        for (key, field) in [
            ("backoffMinMs", &mut config.backoff_min_ms),
            ("backoffMaxMs", &mut config.backoff_max_ms),
            ("connectTimeoutMs", &mut config.connect_timeout_ms),
        ] {
            if let Some(ms) = get(key).as_f64() {
                *field = ms as i64;
            }
        }
        if let Some(fallback) = get("fallback").as_bool() {
            config.fallback = fallback;
        }
        // `snapshot: {items: N}`: a fresh subscription starts from the session's last items.
        let snapshot = get("snapshot");
        if snapshot.is_object() {
            let items = js_sys::Reflect::get(&snapshot, &JsValue::from_str("items"))
                .ok()
                .and_then(|v| v.as_f64());
            config.snapshot = Some(items.map_or(200, |n| n.max(1.0) as usize));
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        let raw_token = token.clone();
        let token = String::from(js_sys::encode_uri_component(&token));
        Ok(Options {
            url: format!("{url}{sep}token={token}"),
            base,
            token: raw_token,
            on_change,
            sessions,
            config,
        })
    }
}

/// `setModel`'s second argument: `{model?, thinking?}`, at least one.
struct ModelChange {
    model: Option<String>,
    thinking: Option<Thinking>,
}

fn model_change(change: &JsValue) -> Result<ModelChange, JsValue> {
    let bad = |message: &str| error(ErrorCode::BadOptions, message);
    let get = |key: &str| Reflect::get(change, &key.into()).unwrap_or(JsValue::UNDEFINED);
    let model = match get("model") {
        v if v.is_undefined() || v.is_null() => None,
        v => Some(v.as_string().ok_or_else(|| bad("model must be a string"))?),
    };
    let thinking = match get("thinking") {
        v if v.is_undefined() || v.is_null() => None,
        v => Some(match v.as_string().as_deref() {
            Some("off") => Thinking::Off,
            Some("low") => Thinking::Low,
            Some("medium") => Thinking::Medium,
            Some("high") => Thinking::High,
            _ => {
                return Err(bad(
                    "thinking must be \"off\", \"low\", \"medium\" or \"high\"",
                ))
            }
        }),
    };
    if model.is_none() && thinking.is_none() {
        return Err(bad("setModel needs a model, a thinking level, or both"));
    }
    Ok(ModelChange { model, thinking })
}

impl Inner {
    /// The state and its two long-lived callbacks (timer, animation frame), which hold it weakly.
    fn new(core: Core, options: Options) -> Rc<RefCell<Inner>> {
        let inner = Rc::new(RefCell::new(Inner {
            core,
            url: options.url,
            base: options.base,
            token: options.token,
            socket: None,
            on_change: options.on_change,
            pending: FastMap::default(),
            timer: None,
            on_timer: None,
            frame: None,
            on_frame: None,
        }));
        let weak = Rc::downgrade(&inner);
        let on_timer = callback(&weak, |core| core.handle_timeout(now_ms()));
        let on_frame = move || {
            if let Some(inner) = weak.upgrade() {
                deliver(&inner);
            }
        };
        let mut s = inner.borrow_mut();
        s.on_timer = Some(Closure::<dyn FnMut()>::new(on_timer));
        s.on_frame = Some(Closure::<dyn FnMut()>::new(on_frame));
        drop(s);
        inner
    }
}

#[wasm_bindgen]
impl Client {
    /// Connects at once and follows `options.sessions`; see `ClientOptions`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "ClientOptions")] options: JsValue,
    ) -> Result<Client, JsValue> {
        let options = Options::read(&options)?;
        let mut core = Core::new(options.config.clone(), now_ms());
        options.sessions.iter().for_each(|s| core.subscribe(s));
        let inner = Inner::new(core, options);
        pump(&inner);
        Ok(Client { inner })
    }

    /// `connecting`, `live`, `caught_up`, `reconnecting` or `closed`.
    #[wasm_bindgen(getter, unchecked_return_type = "ConnectionState")]
    pub fn state(&self) -> String {
        self.inner.borrow().core.state().as_str().to_owned()
    }

    /// `websocket`, or `sse` on the fallback (Server-Sent Events and HTTP commands).
    #[wasm_bindgen(getter, unchecked_return_type = "Transport")]
    pub fn transport(&self) -> String {
        self.inner.borrow().core.transport().as_str().to_owned()
    }

    /// How many connections dropped and were resumed so far.
    #[wasm_bindgen(getter)]
    pub fn drops(&self) -> f64 {
        self.inner.borrow().core.drops() as f64
    }

    /// Checks the connection now: call it when the page becomes visible again or the network
    /// comes back (timers of a background tab run late). A reconnect waiting for its backoff
    /// happens at once; an open connection that does not answer a ping within 3 s is dropped
    /// and resumed.
    pub fn wake(&self) {
        self.inner.borrow_mut().core.handle_wake(now_ms());
        pump(&self.inner);
    }

    /// Follows one more session, from its cursor.
    pub fn subscribe(&self, session: &str) {
        self.inner.borrow_mut().core.subscribe(session);
        pump(&self.inner);
    }

    pub fn unsubscribe(&self, session: &str) {
        self.inner.borrow_mut().core.unsubscribe(session);
        pump(&self.inner);
    }

    /// Starts a turn; resolves to `{turnId}` once the agent accepted the prompt. Given while
    /// disconnected, it waits for the connection; it starts one turn however often the
    /// connection drops on the way (`options.turnId`, or one drawn here, names it).
    #[wasm_bindgen(js_name = startTurn, unchecked_return_type = "Promise<{ turnId: string }>")]
    pub fn start_turn(
        &self,
        session: &str,
        prompt: &str,
        #[wasm_bindgen(unchecked_optional_param_type = "{ turnId?: string }")] options: Option<
            JsValue,
        >,
    ) -> Promise {
        let options = options.unwrap_or(JsValue::UNDEFINED);
        let turn_id = match Reflect::get(&options, &"turnId".into()) {
            _ if options.is_undefined() || options.is_null() => None,
            Ok(v) if v.is_undefined() => None,
            Ok(v) => match v.as_string() {
                Some(id) => Some(id),
                None => {
                    let message = "options.turnId must be a string";
                    return Promise::reject(&error(ErrorCode::BadOptions, message));
                }
            },
            Err(e) => return Promise::reject(&e),
        };
        let sent = (self.inner.borrow_mut().core).start_turn(session, prompt, turn_id.as_deref());
        self.command(sent, Resolve::Result)
    }

    /// Commands given and not answered yet, including those waiting for the connection.
    #[wasm_bindgen(getter)]
    pub fn pending(&self) -> f64 {
        self.inner.borrow().core.pending() as f64
    }

    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn interrupt(&self, session: &str) -> Promise {
        let sent = self.inner.borrow_mut().core.interrupt(session);
        self.command(sent, Resolve::Nothing)
    }

    #[wasm_bindgen(js_name = answerApproval, unchecked_return_type = "Promise<void>")]
    pub fn answer_approval(
        &self,
        session: &str,
        #[wasm_bindgen(js_name = requestId)] request_id: &str,
        #[wasm_bindgen(unchecked_param_type = "Decision")] decision: &str,
    ) -> Promise {
        let decision = match decision {
            "allow" => Decision::Allow,
            "deny" => Decision::Deny,
            other => {
                let message = format!(
                    "decision {} is neither \"allow\" nor \"deny\"",
                    Quoted(other)
                );
                return Promise::reject(&error(ErrorCode::BadDecision, &message));
            }
        };
        let sent = (self.inner.borrow_mut().core).answer_approval(session, request_id, decision);
        self.command(sent, Resolve::Nothing)
    }

    /// Switches the session's agent to one of its `modes` (`GET /api/sessions/{id}`).
    #[wasm_bindgen(js_name = setMode, unchecked_return_type = "Promise<void>")]
    pub fn set_mode(&self, session: &str, mode: &str) -> Promise {
        let sent = self.inner.borrow_mut().core.set_mode(session, mode);
        self.command(sent, Resolve::Nothing)
    }

    /// Changes the model, the thinking level, or both.
    #[wasm_bindgen(js_name = setModel, unchecked_return_type = "Promise<void>")]
    pub fn set_model(
        &self,
        session: &str,
        #[wasm_bindgen(unchecked_param_type = "ModelChange")] change: JsValue,
    ) -> Promise {
        let change = match model_change(&change) {
            Ok(change) => change,
            Err(e) => return Promise::reject(&e),
        };
        let sent = (self.inner.borrow_mut().core).set_model(
            session,
            change.model.as_deref(),
            change.thinking,
        );
        self.command(sent, Resolve::Nothing)
    }

    /// The session's record and live state: runtime, modes and the current one, slash
    /// commands, pending approvals, capabilities (what `GET /api/sessions/{id}` answers).
    #[wasm_bindgen(
        js_name = describeSession,
        unchecked_return_type = "Promise<SessionDescription>"
    )]
    pub fn describe_session(&self, session: &str) -> Promise {
        let sent = self.inner.borrow_mut().core.describe_session(session);
        self.command(sent, Resolve::Result)
    }

    /// Pages in up to `limit` items older than those held (a session opened from a
    /// snapshot); they arrive in a batch's `older`. Resolves to `{start, items}`: the first
    /// index now held (0: the beginning) and how many were added.
    #[wasm_bindgen(unchecked_return_type = "Promise<{ start: number; items: number }>")]
    pub fn history(&self, session: &str, limit: u32) -> Promise {
        let sent = self
            .inner
            .borrow_mut()
            .core
            .history(session, limit as usize);
        self.command(sent, Resolve::Result)
    }

    /// The index of the first item held for the session (above 0: older items can be paged
    /// in with `history`).
    pub fn start(&self, session: &str) -> f64 {
        self.inner.borrow().core.projector().start(session) as f64
    }

    /// Reopens a session whose agent process is gone; resolves to the session record.
    #[wasm_bindgen(js_name = resumeSession, unchecked_return_type = "Promise<SessionRecord>")]
    pub fn resume_session(&self, session: &str) -> Promise {
        let sent = self.inner.borrow_mut().core.resume_session(session);
        self.command(sent, Resolve::Result)
    }

    /// The session's items now (what the batches so far add up to).
    #[wasm_bindgen(unchecked_return_type = "Item[]")]
    pub fn snapshot(&self, session: &str) -> JsValue {
        let inner = self.inner.borrow();
        let items = inner.core.projector().items(session);
        from_json(&to_json(items))
    }

    /// The last sequence applied for the session (0 for none).
    pub fn after(&self, session: &str) -> f64 {
        let inner = self.inner.borrow();
        inner
            .core
            .projector()
            .cursor(session)
            .map_or(0.0, |c| c.after as f64)
    }

    #[wasm_bindgen(unchecked_return_type = "Lifecycle | undefined")]
    pub fn lifecycle(&self, session: &str) -> JsValue {
        let inner = self.inner.borrow();
        let lifecycle = inner.core.projector().lifecycle(session);
        lifecycle.map_or(JsValue::UNDEFINED, |l| JsValue::from_str(l.state.as_str()))
    }

    #[wasm_bindgen(js_name = activeTurn)]
    pub fn active_turn(&self, session: &str) -> Option<String> {
        let inner = self.inner.borrow();
        inner
            .core
            .projector()
            .lifecycle(session)
            .and_then(|l| l.active_turn)
    }

    /// Whether the session's events reach the server's store, as its last `session_status`
    /// said (`undefined` for a session not followed).
    #[wasm_bindgen(unchecked_return_type = "StoreStatus | undefined")]
    pub fn store(&self, session: &str) -> JsValue {
        let inner = self.inner.borrow();
        let store = inner.core.projector().store(session);
        store.map_or(JsValue::UNDEFINED, |s| from_json(&to_json(s)))
    }

    /// Closes for good; pending commands reject with code `closed`.
    pub fn close(&self) {
        self.inner.borrow_mut().core.close();
        pump(&self.inner);
    }

    fn command(&self, sent: Result<String, WireError>, resolve: Resolve) -> Promise {
        let id = match sent {
            Ok(id) => id,
            Err(e) => return Promise::reject(&wire_error(e)),
        };
        let mut settle = None;
        let promise = Promise::new(&mut |ok, fail| settle = Some((ok, fail)));
        let (ok, fail) = settle.expect("the executor runs at once");
        self.inner
            .borrow_mut()
            .pending
            .insert(id, (ok, fail, resolve));
        pump(&self.inner);
        promise
    }
}

/// A browser callback: feed the core, then act on what it decided.
fn callback(weak: &Weak<RefCell<Inner>>, f: impl Fn(&mut Core) + 'static) -> impl FnMut() {
    let weak = weak.clone();
    move || {
        if let Some(inner) = weak.upgrade() {
            f(&mut inner.borrow_mut().core);
            pump(&inner);
        }
    }
}

/// Carries out the core's decisions: sockets, frames, the timer, replies, the next frame.
fn pump(inner: &Rc<RefCell<Inner>>) {
    let mut settled = Vec::new();
    {
        let mut s = inner.borrow_mut();
        let s = &mut *s;
        while let Some(action) = s.core.poll_action() {
            match action {
                Action::Connect { conn } => {
                    if let Some(old) = s.socket.take() {
                        old.close();
                    }
                    match open(&s.url, conn, Rc::downgrade(inner)) {
                        Ok(socket) => s.socket = Some(socket),
                        Err(_) => s.core.handle_close(conn, now_ms()),
                    }
                }
                Action::ConnectSse { conn, frames } => {
                    if let Some(old) = s.socket.take() {
                        old.close();
                    }
                    let url = format!(
                        "{}/api/wire?token={}&frames={}",
                        s.base,
                        js_sys::encode_uri_component(&s.token),
                        js_sys::encode_uri_component(&frames)
                    );
                    match open_event_source(&url, conn, Rc::downgrade(inner)) {
                        Ok(socket) => s.socket = Some(socket),
                        Err(_) => s.core.handle_close(conn, now_ms()),
                    }
                }
                Action::Disconnect { conn } => {
                    if s.socket.as_ref().is_some_and(|sock| sock.conn == conn) {
                        s.socket.take().expect("checked above").close();
                    }
                }
            }
        }
        while let Some(frame) = s.core.poll_transmit() {
            if let Some(Socket {
                handle: Handle::Ws(ws),
                ..
            }) = &s.socket
            {
                let _ = ws.send_with_str(&frame);
            }
        }
        while let Some(body) = s.core.poll_post() {
            post(&s.base, &s.token, body, Rc::downgrade(inner));
        }
        while let Some((id, result)) = s.core.poll_reply() {
            if let Some(entry) = s.pending.remove(&id) {
                settled.push((entry, result));
            }
        }
        if let Some(timer) = s.timer.take() {
            clear_timeout(&timer);
        }
        if let (Some(at), Some(on_timer)) = (s.core.poll_timeout(), &s.on_timer) {
            let delay = (at - now_ms()).max(0) as f64;
            s.timer = Some(set_timeout(on_timer.as_ref().unchecked_ref(), delay));
        }
        if let (None, Some(on_frame)) = (&s.frame, &s.on_frame) {
            let f: &Function = on_frame.as_ref().unchecked_ref();
            s.frame = Some(match request_animation_frame(f) {
                Ok(id) => FrameRequest::Animation(id),
                Err(_) => FrameRequest::Timeout(set_timeout(f, 16.0)),
            });
        }
    }
    for ((ok, fail, resolve), result) in settled {
        let _ = match (result, resolve) {
            (Ok(value), Resolve::Result) => ok.call1(&JsValue::NULL, &from_json(&to_json(&value))),
            (Ok(_), Resolve::Nothing) => ok.call0(&JsValue::NULL),
            (Err(e), _) => fail.call1(&JsValue::NULL, &wire_error(e)),
        };
    }
}

/// The animation frame: one batch for the page, if anything changed.
fn deliver(inner: &Rc<RefCell<Inner>>) {
    let (batch, on_change) = {
        let mut s = inner.borrow_mut();
        s.frame = None;
        let Some(batch) = s.core.drain_json() else {
            return;
        };
        (batch, s.on_change.clone())
    };
    if let Err(e) = on_change.call1(&JsValue::NULL, &from_json(&batch)) {
        // The page's handler threw: report it like an uncaught error, keep running.
        web_sys::console::error_1(&e);
    }
}

/// A connection's stream (a WebSocket, or the fallback's event stream) with its three
/// handlers attached: opened, a frame, closed (or failed).
fn attach(conn: u64, handle: Handle, weak: &Weak<RefCell<Inner>>) -> Result<Socket, JsValue> {
    let on_open =
        Closure::<dyn FnMut()>::new(callback(weak, move |core| core.handle_open(conn, now_ms())));
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new({
        let weak = weak.clone();
        move |e: MessageEvent| {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let data = e.data();
            // A binary message (`binary_frames`) is copied into wasm memory in one go; a
            // text one (the fallback's stream, an older server) is encoded from its string.
            if let Some(bytes) = data.dyn_ref::<js_sys::ArrayBuffer>() {
                let bytes = js_sys::Uint8Array::new(bytes).to_vec();
                inner
                    .borrow_mut()
                    .core
                    .handle_frame_bytes(conn, &bytes, now_ms());
            } else if let Some(text) = data.as_string() {
                inner.borrow_mut().core.handle_frame(conn, &text, now_ms());
            } else {
                return;
            }
            pump(&inner);
        }
    });
    let on_close = Closure::<dyn FnMut()>::new({
        let weak = weak.clone();
        move || {
            if let Some(inner) = weak.upgrade() {
                {
                    let mut s = inner.borrow_mut();
                    s.core.handle_close(conn, now_ms());
                    if s.socket.as_ref().is_some_and(|sock| sock.conn == conn) {
                        s.socket.take().expect("checked above").close();
                    }
                }
                pump(&inner);
            }
        }
    });
    match &handle {
        Handle::Ws(ws) => {
            ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
            ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
            ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        }
        Handle::EventSource(es) => {
            Reflect::set(es, &"onopen".into(), on_open.as_ref())?;
            Reflect::set(es, &"onmessage".into(), on_message.as_ref())?;
            Reflect::set(es, &"onerror".into(), on_close.as_ref())?;
        }
    }
    Ok(Socket {
        conn,
        handle,
        _on_open: on_open,
        _on_message: on_message,
        _on_close: on_close,
    })
}

fn open(url: &str, conn: u64, weak: Weak<RefCell<Inner>>) -> Result<Socket, JsValue> {
    let ws = WebSocket::new(url)?;
    // Binary messages (asked for in `hello`) as an `ArrayBuffer`, not a `Blob`.
    Reflect::set(&ws, &"binaryType".into(), &"arraybuffer".into())?;
    attach(conn, Handle::Ws(ws), &weak)
}

/// The fallback's stream: an `EventSource` whose messages are server frames. It is closed at
/// its first error (EventSource would reconnect by itself, from nowhere): the core decides
/// when and from which cursors the next one opens.
fn open_event_source(url: &str, conn: u64, weak: Weak<RefCell<Inner>>) -> Result<Socket, JsValue> {
    let ctor = Reflect::get(&js_sys::global(), &"EventSource".into())?.dyn_into::<Function>()?;
    let es = Reflect::construct(&ctor, &js_sys::Array::of1(&url.into()))?;
    attach(conn, Handle::EventSource(es), &weak)
}

/// POSTs one command of the fallback; its answer (or the failure, which drops the stream:
/// what is kept is sent again on the next) goes to the core.
fn post(base: &str, token: &str, body: String, weak: Weak<RefCell<Inner>>) {
    let init = js_sys::Object::new();
    let headers = js_sys::Object::new();
    let _ = Reflect::set(
        &headers,
        &"Authorization".into(),
        &format!("Bearer {token}").into(),
    );
    let _ = Reflect::set(&headers, &"Content-Type".into(), &"application/json".into());
    let _ = Reflect::set(&init, &"method".into(), &"POST".into());
    let _ = Reflect::set(&init, &"headers".into(), &headers);
    let _ = Reflect::set(&init, &"body".into(), &body.as_str().into());
    let url: JsValue = format!("{base}/api/wire").into();
    let fetched = call_method(&js_sys::global(), "fetch", &[url, init.into()]);
    let failed = {
        let weak = weak.clone();
        Closure::once_into_js(move |_: JsValue| {
            if let Some(inner) = weak.upgrade() {
                let conn = inner.borrow().socket.as_ref().map(|s| s.conn);
                if let Some(conn) = conn {
                    inner.borrow_mut().core.handle_close(conn, now_ms());
                }
                pump(&inner);
            }
        })
    };
    let answered = Closure::once_into_js(move |text: JsValue| {
        if let (Some(inner), Some(text)) = (weak.upgrade(), text.as_string()) {
            inner
                .borrow_mut()
                .core
                .handle_post_reply(&body, &text, now_ms());
            pump(&inner);
        }
    });
    let read = Closure::once_into_js(|response: JsValue| call_method(&response, "text", &[]));
    let text = call_method(&fetched, "then", &[read]);
    call_method(&text, "then", &[answered, failed]);
}
