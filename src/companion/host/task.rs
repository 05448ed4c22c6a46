//! One session's task: the async shell that carries out what its [`Session`] decides.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

use super::recorder::Recorder;
use super::{Command, CommandError, Hub, HubConfig, STORE_WRITE_TIMEOUT};
use crate::companion::adapter::{Adapter, Feed};
use crate::companion::session::{
    Action, Note, ReplyId, Request, Response, Session, SessionConfig, StoreNote, StoreOp, Written,
};
use crate::companion::store::{Store, StoreError};
use crate::companion::{now, random_hex};

/// One session's task: the shell around its [`Session`]. It owns the process's pipes, the
/// stdin writer, the one store write in flight and the recorder, and does what the session
/// decides: one `select!` over the sources feeds one `handle_*`, then [`SessionTask::drain`]
/// carries out every `poll_*` output.
pub(super) struct SessionTask {
    hub: Arc<Hub>,
    session: Session,
    recorder: Option<Recorder>,
    /// Requests waiting for the session's answer.
    waiting: HashMap<ReplyId, Reply>,
    next_reply: ReplyId,
    /// The store status last published to the hub was `unavailable`.
    told_unavailable: bool,
}

/// Where a request's answer goes.
enum Reply {
    Turn(oneshot::Sender<Result<String, CommandError>>),
    Unit(oneshot::Sender<Result<(), CommandError>>),
    Value(oneshot::Sender<Result<Value, CommandError>>),
    Close(oneshot::Sender<()>),
}

impl SessionTask {
    pub(super) fn new(
        hub: Arc<Hub>,
        id: &str,
        adapter: Box<dyn Adapter>,
        config: &HubConfig,
        cwd: PathBuf,
    ) -> SessionTask {
        let mut session_config = SessionConfig::new(id, &random_hex(16));
        session_config.cwd = cwd;
        session_config.cancel_grace_ms = config.cancel_grace_ms;
        session_config.autonomous_idle_limit_ms = config.autonomous_idle_limit_ms;
        session_config.foreground_idle_limit_ms = config.foreground_idle_limit_ms;
        session_config.stall_after_ms = config.stall_after_ms;
        session_config.stderr_limits = config.stderr_limits;
        session_config.stderr_keep_bytes = config.stderr_keep_bytes;
        session_config.store_queue = config.store_queue;
        session_config.store_drain_ms = config.store_drain_ms as i64;
        let recorder = config
            .record_dir
            .as_ref()
            .and_then(|dir| Recorder::open(&dir.join(format!("{id}.jsonl"))));
        SessionTask {
            hub,
            session: Session::new(session_config, adapter),
            recorder,
            waiting: HashMap::new(),
            next_reply: 0,
            told_unavailable: false,
        }
    }

    pub(super) async fn run(
        mut self,
        mut child: Child,
        mut commands: mpsc::Receiver<Command>,
        mut feed: Option<mpsc::UnboundedReceiver<Feed>>,
    ) {
        // With an event stream of its own, the agent's stdout is only a log.
        let stdout_is_log = feed.is_some();
        let mut stdin = child.stdin.take().map(StdinWriter::spawn);
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let mut out_buf = vec![0u8; 64 << 10];
        let mut err_buf = vec![0u8; 8 << 10];
        let mut stdout_open = true;
        let mut stderr_open = true;
        let mut exited = false;
        let mut commands_open = true;
        let mut shutdown = self.hub.shutdown.subscribe();
        let mut shutdown_seen = false;
        // The one store write in flight.
        let mut writing: Option<Writing> = None;
        self.session.handle_start(now_ms());
        self.drain(&mut stdin, &mut writing, &mut child);
        while !self.session.is_done() {
            if !shutdown_seen && *shutdown.borrow_and_update() {
                shutdown_seen = true;
                self.session.handle_shutdown(now_ms());
            }
            // While too many events wait for the store, the agent's output stays in its
            // pipe: the agent blocks writing, and nothing is dropped.
            let reading = self.session.wants_output();
            let deadline = self.session.poll_timeout();
            tokio::select! {
                written = next_written(&mut writing) => {
                    writing = None;
                    self.session.handle_written(written, now_ms());
                    self.publish_store_status();
                }
                read = stdout.read(&mut out_buf), if stdout_open && (reading || stdout_is_log) => match read {
                    Ok(0) | Err(_) => {
                        stdout_open = false;
                        if !stdout_is_log {
                            self.output_eof();
                        }
                    }
                    Ok(n) if stdout_is_log => self.session.handle_stdout_log(&out_buf[..n]),
                    Ok(n) => self.output(&out_buf[..n]),
                },
                item = next_feed(&mut feed), if reading => match item {
                    Some(Feed::Bytes(bytes)) => self.output(&bytes),
                    Some(Feed::Failed { kind, message, fatal }) => {
                        self.session.handle_request_failed(kind, message, fatal, now_ms());
                    }
                    None => feed = None,
                },
                read = stderr.read(&mut err_buf), if stderr_open => match read {
                    Ok(0) | Err(_) => stderr_open = false,
                    Ok(n) => self.session.handle_stderr(&err_buf[..n]),
                },
                event = next_stdin_event(&mut stdin) => match event {
                    StdinEvent::Wrote(n) => self.session.handle_stdin_written(n),
                    StdinEvent::Failed(e) => {
                        stdin = None;
                        self.session.handle_stdin_failed(e);
                    }
                },
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(cmd) => self.request(cmd),
                    None => {
                        // The hub let go of this session: stop its agent.
                        commands_open = false;
                        stdin = None;
                        let _ = child.start_kill();
                    }
                },
                _ = sleep_until_ms(deadline) => self.session.handle_timeout(now_ms()),
                changed = shutdown.changed(), if !shutdown_seen => {
                    if changed.is_err() {
                        shutdown_seen = true;
                    }
                }
                status = child.wait(), if !stdout_open && !exited => {
                    exited = true;
                    // Read what stderr still holds (bounded), then end the session.
                    if stderr_open {
                        let mut rest = Vec::new();
                        let _ = tokio::time::timeout(Duration::from_millis(200), stderr.read_to_end(&mut rest)).await;
                        self.session.handle_stderr(&rest);
                    }
                    let code = status.ok().and_then(|s| s.code());
                    if stdout_is_log {
                        self.output_eof();
                    }
                    self.session.handle_exit(code, now_ms());
                }
            }
            self.drain(&mut stdin, &mut writing, &mut child);
        }
        self.hub.forget(self.session.id());
        // Commands that raced with the end get a clear refusal.
        commands.close();
        while let Ok(cmd) = commands.try_recv() {
            self.request(cmd);
        }
        self.drain(&mut stdin, &mut writing, &mut child);
    }

    /// Tells the session's subscribers (`session_status`, through the hub) about the store:
    /// after each failed write (how many events wait, how many attempts failed), and once
    /// when it is available again.
    fn publish_store_status(&mut self) {
        let status = self.session.store_status();
        if status.is_available() && !self.told_unavailable {
            return;
        }
        self.told_unavailable = !status.is_available();
        self.hub.set_store_status(self.session.id(), status);
    }

    /// The agent's output: recorded, then to the session.
    fn output(&mut self, bytes: &[u8]) {
        if let Some(r) = &mut self.recorder {
            r.stdout(bytes);
        }
        self.session.handle_output(bytes, now_ms());
    }

    fn output_eof(&mut self) {
        if let Some(r) = &mut self.recorder {
            r.stdout_eof();
        }
        self.session.handle_output_eof(now_ms());
    }

    /// Hands a client's command to the session, keeping where its answer goes.
    fn request(&mut self, cmd: Command) {
        let (request, reply) = match cmd {
            Command::StartTurn(prompt, turn_id, r) => {
                (Request::StartTurn { prompt, turn_id }, Reply::Turn(r))
            }
            Command::Interrupt(turn_id, r) => (Request::Interrupt(turn_id), Reply::Unit(r)),
            Command::Answer(id, decision, r) => (Request::Answer(id, decision), Reply::Unit(r)),
            Command::SetMode(mode, r) => (Request::SetMode(mode), Reply::Unit(r)),
            Command::SetModel(model, thinking, r) => {
                (Request::SetModel(model, thinking), Reply::Unit(r))
            }
            Command::Describe(r) => (Request::Describe, Reply::Value(r)),
            Command::Close(r) => (Request::Close, Reply::Close(r)),
            Command::Abandon(r) => (Request::Abandon, Reply::Close(r)),
        };
        let id = self.next_reply;
        self.next_reply += 1;
        self.waiting.insert(id, reply);
        self.session.handle_request(id, request, now_ms());
    }

    /// Carries out everything the session decided: kill, stdin, the next store write,
    /// replies, log lines.
    fn drain(
        &mut self,
        stdin: &mut Option<StdinWriter>,
        writing: &mut Option<Writing>,
        child: &mut Child,
    ) {
        while let Some(action) = self.session.poll_action() {
            match action {
                Action::Kill => {
                    *stdin = None;
                    let _ = child.start_kill();
                }
            }
        }
        while let Some(bytes) = self.session.poll_stdin() {
            if let Some(r) = &mut self.recorder {
                r.write(&bytes);
            }
            if let Some(w) = stdin {
                w.send(bytes);
            }
        }
        if writing.is_none() {
            if let Some(op) = self.session.poll_write(now_ms()) {
                *writing = Some(store_write(self.hub.store.clone(), self.session.id(), op));
            }
        }
        while let Some((id, result)) = self.session.poll_reply() {
            let Some(reply) = self.waiting.remove(&id) else {
                continue;
            };
            match reply {
                Reply::Turn(r) => {
                    let turn = result.map(|response| match response {
                        Response::Turn(id) => id,
                        _ => String::new(),
                    });
                    let _ = r.send(turn);
                }
                Reply::Unit(r) => drop(r.send(result.map(drop))),
                Reply::Value(r) => {
                    let value = result.map(|response| match response {
                        Response::Described(v) => v,
                        _ => Value::Null,
                    });
                    let _ = r.send(value);
                }
                Reply::Close(r) => drop(r.send(())),
            }
        }
        while let Some(note) = self.session.poll_note() {
            self.log(note);
        }
    }

    fn log(&self, note: Note) {
        let id = self.session.id();
        match note {
            Note::Store(StoreNote::Unavailable { error }) => eprintln!(
                "agentwire: session {id}: the store is unavailable ({error}); \
                 its events wait, in order, and are retried"
            ),
            Note::Store(StoreNote::Recovered { since_ms, attempts }) => eprintln!(
                "agentwire: session {id}: the store is available again after {} ms \
                 and {attempts} failed attempt(s)",
                now_ms() - since_ms
            ),
            Note::Store(StoreNote::Refused { events, error }) => {
                self.hub.lost.fetch_add(events as u64, Ordering::Relaxed);
                eprintln!("agentwire: session {id}: the store refused {events} event(s): {error}");
            }
            Note::Dropped { event_id, kind } => {
                eprintln!("agentwire: session {id}: dropped event {event_id:?} ({kind})");
            }
            Note::Stdin(error) => eprintln!("agentwire: session {id}: {error}"),
            Note::Lost { events, why } => {
                self.hub.lost.fetch_add(events as u64, Ordering::Relaxed);
                eprintln!("agentwire: session {id}: {events} event(s) {why}");
            }
        }
    }
}

/// Starts one store write; it resolves to its outcome, classified for the session.
fn store_write(store: Arc<dyn Store>, id: &str, op: StoreOp) -> Writing {
    let id = id.to_owned();
    Box::pin(async move {
        let write = async {
            match op {
                StoreOp::Append(events) => store.append(&id, events).await.map(drop),
                StoreOp::State(state, at) => store.set_session_state(&id, state, at).await,
                StoreOp::ProviderSessionId(handle) => {
                    store.set_provider_session_id(&id, &handle).await
                }
            }
        };
        match tokio::time::timeout(STORE_WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => Written::Stored,
            Ok(Err(e @ (StoreError::Database(_) | StoreError::Closed))) => {
                Written::Unavailable(e.to_string())
            }
            Ok(Err(e)) => Written::Refused(e.to_string()),
            // The outcome is unknown: sending it again is safe (appends are idempotent).
            Err(_) => Written::Unavailable(format!(
                "no answer from the store in {} s",
                STORE_WRITE_TIMEOUT.as_secs()
            )),
        }
    })
}

/// The agent's stdin, written by a task of its own: a child that does not read its input
/// blocks that task, never the session's loop. Dropping it lets the task write what it holds
/// and close the pipe (a killed child makes that write fail at once). What it holds is bounded
/// by the session (`max_stdin_bytes`, released by [`StdinEvent::Wrote`]).
struct StdinWriter {
    bytes: mpsc::UnboundedSender<Vec<u8>>,
    events: mpsc::UnboundedReceiver<StdinEvent>,
}

enum StdinEvent {
    Wrote(usize),
    Failed(String),
}

impl StdinWriter {
    fn spawn(mut pipe: ChildStdin) -> StdinWriter {
        let (bytes, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (events_tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                let written = async {
                    pipe.write_all(&chunk).await?;
                    pipe.flush().await
                };
                match written.await {
                    Ok(()) => drop(events_tx.send(StdinEvent::Wrote(chunk.len()))),
                    Err(e) => {
                        let _ = events_tx
                            .send(StdinEvent::Failed(format!("writing to the agent: {e}")));
                        break;
                    }
                }
            }
        });
        StdinWriter { bytes, events }
    }

    fn send(&self, bytes: Vec<u8>) {
        let _ = self.bytes.send(bytes);
    }
}

/// What the stdin writer reports; pending forever without one.
async fn next_stdin_event(stdin: &mut Option<StdinWriter>) -> StdinEvent {
    match stdin {
        Some(w) => match w.events.recv().await {
            Some(event) => event,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

fn now_ms() -> i64 {
    now().unix_millis()
}

/// The next item of an adapter's event stream; pending forever without one.
async fn next_feed(feed: &mut Option<mpsc::UnboundedReceiver<Feed>>) -> Option<Feed> {
    match feed {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A store write under way; it resolves to its outcome.
type Writing = std::pin::Pin<Box<dyn std::future::Future<Output = Written> + Send>>;

/// The outcome of the write in flight; pending forever without one.
async fn next_written(writing: &mut Option<Writing>) -> Written {
    match writing {
        Some(w) => w.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_ms(deadline_ms: Option<i64>) {
    match deadline_ms {
        Some(at) => {
            let wait = (at - now().unix_millis()).max(0) as u64;
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        None => std::future::pending().await,
    }
}
