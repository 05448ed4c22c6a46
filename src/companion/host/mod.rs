//! Provider hosting: the registry of sessions ([`Hub`], here), and one task per session that
//! owns its child process and is the only writer of that session's events (`task.rs`); the
//! node's lease and the recovery of what dead companions left running (`lease.rs`); the
//! `--record-dir` transcripts (`recorder.rs`).
//!
//! The task (`task.rs`) is a shell around the session's rules,
//! [`Session`](super::session::Session) (sans-IO): one `select!` over the child's stdout, its stderr, the reports of
//! the task that writes its stdin, commands from clients, the store write in flight, the next
//! deadline, shutdown and the child's exit feeds one `handle_*`; then the task carries out
//! what the session decided (stdin bytes, the next store write, replies, killing the child,
//! log lines). Every event passes the user-echo filter and the `TurnProjector`, then waits
//! in the session's store queue (one write in flight, in order, a failed write retried with
//! backoff, the agent's output left unread while too much waits); the store tells
//! subscribers once it is durable. When the process ends, every turn still active ends with
//! `run_failed` carrying the exit code and the cut stderr, so no session is left running
//! after its process is gone; the task stays until its writes are stored, answering
//! `describe` (the store's state) meanwhile, and shutdown waits for it at most
//! [`HubConfig::store_drain_ms`], then reports what could not be stored. On server start,
//! sessions the previous run left running are marked failed the same way ([`Hub::recover`]);
//! a user can then reopen one whose CLI can resume its own session
//! ([`Hub::resume_session`]): a new process continues the same log.
//!
//! Besides events, the session keeps its live state for the API ([`Hub::describe`]):
//! runtime (model, version, cwd, the CLI's session id) from `session_started` and
//! `model_changed`, the modes and the current one, slash commands, pending approvals, what
//! the adapter can do ([`Capabilities`]), and the store's state. A request for something the
//! adapter cannot do is refused with the code `unsupported`.
//!
//! The agent's output reaches the normalizer from its stdout, or from the event stream an
//! adapter opens itself ([`Adapter::connect`]: stdout is then kept with stderr as a log).
//! For an adapter whose decoder reads the client's requests too
//! ([`Adapter::feeds_requests`]), the normalizer gets whole lines, the agent's and ours, in
//! the order they were read and written: exactly what `--record-dir` records.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

mod lease;
mod recorder;
mod task;

use super::adapter::{
    AcpStdio, Adapter, AgentCli, AmpStdio, Capabilities, ClaudeStdio, CodexAppServer,
    OpencodeServe, Thinking, AGENT_CLIS,
};
use super::fanout::Fanout;
use super::session::{update_runtime, StoreQueueConfig};
use super::store::{EventQuery, SessionRecord, SessionState, Store};
use super::{now, random_hex, random_id};
use crate::core::error::ErrorCode;
use crate::core::event::{Event, EventInit, EventType, Provider};
use crate::core::provider_error::{ErrorKind, ProviderError, StderrLimits};
use crate::core::time::Timestamp;
use crate::core::wire::{Decision, StoreStatus};
use task::SessionTask;

pub use super::session::CommandError;

impl CommandError {
    fn hosted_elsewhere(record: &SessionRecord) -> CommandError {
        CommandError::new(
            ErrorCode::HostedElsewhere,
            format!(
                "session {:?} runs on companion {:?}: its commands go there",
                record.id, record.node
            ),
        )
    }
}

/// How the hub starts and watches agents.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// This binary, used to run the demo agent.
    pub program: PathBuf,
    /// Pause between the demo agent's streamed chunks.
    pub demo_delay_ms: u64,
    pub stderr_limits: StderrLimits,
    /// Bound on the stderr kept per process before cutting (the oldest bytes go first).
    pub stderr_keep_bytes: usize,
    pub cancel_grace_ms: i64,
    pub autonomous_idle_limit_ms: i64,
    pub foreground_idle_limit_ms: i64,
    /// How long a turn may stay silent before a synthetic `run_stalled` shows it stalled.
    pub stall_after_ms: i64,
    /// Where agent CLIs are looked for before `PATH` (`scripts/install-clis` installs there).
    pub cli_dir: PathBuf,
    /// When set, each session's agent traffic is written to `<dir>/<session id>.jsonl`.
    pub record_dir: Option<PathBuf>,
    /// This companion's name among those sharing a store (`serve --node`): it hosts the
    /// sessions it creates or resumes, and recovers only those after a restart.
    pub node: String,
    /// How long this node's lease lasts without renewal ([`Hub::keep_lease`] renews it every
    /// third of that): another companion takes over the live sessions of a node silent for
    /// longer, and ends them as failed.
    pub lease_ms: i64,
    /// Bounds of each session's store queue: how many unstored events make it stop reading
    /// its agent's output, and the retry backoff.
    pub store_queue: StoreQueueConfig,
    /// On shutdown, how long sessions whose events are not all stored (the store is failing)
    /// keep trying before the rest is reported lost.
    pub store_drain_ms: u64,
}

impl HubConfig {
    pub fn new(program: PathBuf) -> HubConfig {
        HubConfig {
            program,
            demo_delay_ms: 15,
            stderr_limits: StderrLimits::default(),
            stderr_keep_bytes: 256 << 10,
            cancel_grace_ms: 2_000,
            autonomous_idle_limit_ms: 10 * 60_000,
            foreground_idle_limit_ms: crate::core::lifecycle::DEFAULT_FOREGROUND_IDLE_LIMIT_MS,
            stall_after_ms: crate::core::lifecycle::DEFAULT_STALL_AFTER_MS,
            cli_dir: PathBuf::from(DEFAULT_CLI_DIR),
            record_dir: None,
            node: "local".to_owned(),
            lease_ms: 30_000,
            store_queue: StoreQueueConfig::default(),
            store_drain_ms: 10_000,
        }
    }
}

/// Where `scripts/install-clis` installs the pinned agent CLIs, relative to the repository.
pub const DEFAULT_CLI_DIR: &str = ".agentwire/clis/node_modules/.bin";

/// The providers a companion looking for CLIs in `cli_dir` can host: the demo agent, and each
/// CLI that has an adapter and is installed.
pub fn providers(cli_dir: &std::path::Path) -> Vec<&'static str> {
    let found = AGENT_CLIS
        .iter()
        .filter(|cli| cli.hosted && cli.find(cli_dir).is_some())
        .map(|cli| cli.provider);
    std::iter::once("demo").chain(found).collect()
}

enum Command {
    StartTurn(
        String,
        Option<String>,
        oneshot::Sender<Result<String, CommandError>>,
    ),
    Interrupt(Option<String>, oneshot::Sender<Result<(), CommandError>>),
    Answer(String, Decision, oneshot::Sender<Result<(), CommandError>>),
    SetMode(String, oneshot::Sender<Result<(), CommandError>>),
    SetModel(
        Option<String>,
        Option<Thinking>,
        oneshot::Sender<Result<(), CommandError>>,
    ),
    Describe(oneshot::Sender<Result<Value, CommandError>>),
    Close(oneshot::Sender<()>),
    /// Another companion took the session over (this node's lease ran out): kill the agent
    /// and write nothing more to the session.
    Abandon(oneshot::Sender<()>),
}

/// All hosted sessions. Cheap to share.
pub struct Hub {
    store: Arc<dyn Store>,
    config: HubConfig,
    sessions: Mutex<HashMap<String, mpsc::Sender<Command>>>,
    /// Set once by [`Hub::shutdown`]: sessions still storing give up after `store_drain_ms`.
    shutdown: watch::Sender<bool>,
    /// One permit held by each session task; [`Hub::shutdown`] waits for all of them.
    tasks: Arc<Semaphore>,
    /// Events no session could store (given up at shutdown, refused, or taken over).
    lost: AtomicU64,
    /// Each session's store status, for `session_status` ([`Hub::watch_store`]): set by its
    /// task when it changes, kept while the session runs here or someone watches it.
    store_status: Mutex<HashMap<String, watch::Sender<StoreStatus>>>,
    /// The subscribers' shared tails ([`Hub::fanout`]), started on first use.
    fanout: std::sync::OnceLock<Arc<Fanout>>,
    /// The sessions' projections for snapshots and history ([`Hub::projections`]).
    projections: std::sync::OnceLock<Arc<super::snapshot::Projections>>,
}

/// Permits of [`Hub::tasks`]: more than sessions ever run at once.
const TASK_PERMITS: u32 = 1 << 20;
/// A store write with no answer for this long counts as failed and is tried again.
const STORE_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

impl Hub {
    pub fn new(store: Arc<dyn Store>, config: HubConfig) -> Arc<Hub> {
        Arc::new(Hub {
            store,
            config,
            sessions: Mutex::new(HashMap::new()),
            shutdown: watch::channel(false).0,
            tasks: Arc::new(Semaphore::new(TASK_PERMITS as usize)),
            lost: AtomicU64::new(0),
            store_status: Mutex::new(HashMap::new()),
            fanout: std::sync::OnceLock::new(),
            projections: std::sync::OnceLock::new(),
        })
    }

    /// The projections snapshots and history pages are taken from (bounded: see
    /// [`super::snapshot`]).
    pub fn projections(&self) -> Arc<super::snapshot::Projections> {
        let make = || super::snapshot::Projections::new(self.store.clone());
        self.projections.get_or_init(make).clone()
    }

    /// What every subscriber of a session shares (its encoded tail); needs a tokio runtime.
    pub fn fanout(&self) -> Arc<Fanout> {
        (self.fanout.get_or_init(|| Fanout::new(self.store.clone()))).clone()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The providers this hub can host now (see [`providers`]).
    pub fn providers(&self) -> Vec<&'static str> {
        providers(&self.config.cli_dir)
    }

    /// The adapter for `provider`, resuming the CLI's own session `resume` if given.
    fn adapter(
        &self,
        provider: &str,
        resume: Option<&str>,
    ) -> Result<Box<dyn Adapter>, CommandError> {
        if provider == "demo" {
            return Ok(Box::new(ClaudeStdio::demo(
                self.config.program.clone(),
                self.config.demo_delay_ms,
                resume,
            )));
        }
        let Some(cli) = AgentCli::by_provider(provider).filter(|c| c.hosted) else {
            let message = format!(
                "unknown provider {provider:?}; this server offers {:?}",
                self.providers()
            );
            return Err(CommandError::new(ErrorCode::UnknownProvider, message));
        };
        let Some(program) = cli.find(&self.config.cli_dir) else {
            let message = cli.not_found(&self.config.cli_dir);
            return Err(CommandError::new(ErrorCode::CliNotFound, message));
        };
        Ok(match provider {
            "claude" => Box::new(ClaudeStdio::claude(program, resume)),
            // Ask before anything but known read-only commands, as Claude Code does.
            "codex" => {
                let codex = CodexAppServer::new(program, "untrusted", "workspace-write");
                Box::new(match resume {
                    Some(id) => codex.resuming(id),
                    None => codex,
                })
            }
            "gemini" => {
                let gemini = AcpStdio::gemini(program, None);
                Box::new(match resume {
                    Some(id) => gemini.resuming(id),
                    None => gemini,
                })
            }
            "opencode" => {
                let opencode = OpencodeServe::new(program, random_hex(16));
                Box::new(match resume {
                    Some(id) => opencode.resuming(id),
                    None => opencode,
                })
            }
            "amp" => {
                let amp = AmpStdio::new(program);
                Box::new(match resume {
                    Some(id) => amp.resuming(id),
                    None => amp,
                })
            }
            other => unreachable!("{other} is marked hosted but has no adapter"),
        })
    }

    /// This companion's name on the store (`serve --node`).
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// Creates a session and starts its agent process.
    pub async fn create_session(
        self: &Arc<Self>,
        provider: &str,
        cwd: Option<PathBuf>,
    ) -> Result<SessionRecord, CommandError> {
        let id = format!("ses_{}", random_hex(12));
        self.create_session_as(&id, provider, cwd).await
    }

    /// [`Hub::create_session`] with the id chosen by the caller (a valid session id, e.g.
    /// derived from an AG-UI thread): refused by the store if a session has it already.
    pub async fn create_session_as(
        self: &Arc<Self>,
        id: &str,
        provider: &str,
        cwd: Option<PathBuf>,
    ) -> Result<SessionRecord, CommandError> {
        let adapter = self.adapter(provider, None)?;
        let cwd = match cwd {
            Some(dir) => dir,
            None => std::env::current_dir().map_err(|e| {
                CommandError::new(ErrorCode::BadCwd, format!("no working directory: {e}"))
            })?,
        };
        if !cwd.is_dir() {
            return Err(CommandError::new(
                ErrorCode::BadCwd,
                format!("{} is not a directory", cwd.display()),
            ));
        }
        let at = now();
        let id = id.to_owned();
        let record = SessionRecord::new(
            id.clone(),
            provider.to_owned(),
            cwd.display().to_string(),
            SessionState::Starting,
            self.config.node.clone(),
            at,
        );
        let record = self.store.create_session(record).await?;
        let data = json!({"provider": provider, "cwd": record.cwd});
        let created = host_event(
            &id,
            adapter.provider(),
            None,
            EventType::SessionCreated,
            obj(data),
            at,
        );
        self.store.append(&id, vec![created]).await?;
        self.spawn(&id, adapter, cwd).await?;
        Ok(self.store.get_session(&id).await?.unwrap_or(record))
    }

    /// Reopens a session whose process is gone (the server restarted, the CLI crashed):
    /// starts the CLI again on its own session (`provider_session_id`), and the same log goes
    /// on, after a `session_resumed`.
    pub async fn resume_session(self: &Arc<Self>, id: &str) -> Result<SessionRecord, CommandError> {
        if self.sender(id).is_some() {
            return Err(CommandError::new(
                ErrorCode::AlreadyRunning,
                format!("session {id:?} is running"),
            ));
        }
        let Some(record) = self.store.get_session(id).await? else {
            return Err(CommandError::unknown_session(id));
        };
        if record.state.is_live() && record.node != self.config.node {
            return Err(CommandError::hosted_elsewhere(&record));
        }
        if !self.capabilities_of(&record.provider).resume {
            return Err(CommandError::unsupported(
                &record.provider,
                "resume a session",
            ));
        }
        let Some(handle) = record.provider_session_id.clone() else {
            return Err(CommandError::new(
                ErrorCode::NoResumeHandle,
                format!(
                    "session {id:?} never got a session id from its CLI, so it cannot be resumed"
                ),
            ));
        };
        let adapter = self.adapter(&record.provider, Some(&handle))?;
        let cwd = PathBuf::from(&record.cwd);
        if !cwd.is_dir() {
            return Err(CommandError::new(
                ErrorCode::BadCwd,
                format!("{} is not a directory", cwd.display()),
            ));
        }
        // Atomically ours: a session is never started twice, by two companions or by two
        // requests to this one.
        if !(self.store)
            .claim_session(id, &self.config.node, now())
            .await?
        {
            let record = self.store.get_session(id).await?.unwrap_or(record);
            if record.node == self.config.node {
                return Err(CommandError::new(
                    ErrorCode::AlreadyRunning,
                    format!("session {id:?} is being resumed"),
                ));
            }
            return Err(CommandError::hosted_elsewhere(&record));
        }
        let data = json!({"provider_session_id": handle, "previous_state": record.state.as_str()});
        let resumed = host_event(
            id,
            adapter.provider(),
            None,
            EventType::SessionResumed,
            obj(data),
            now(),
        );
        self.store.append(id, vec![resumed]).await?;
        self.spawn(id, adapter, cwd).await?;
        Ok(self.store.get_session(id).await?.unwrap_or(record))
    }

    /// What the adapter of `provider` can do, without starting anything.
    fn capabilities_of(&self, provider: &str) -> Capabilities {
        (self.adapter(provider, None))
            .map(|a| a.capabilities())
            .unwrap_or_default()
    }

    /// Starts the agent process of session `id` and its task.
    async fn spawn(
        self: &Arc<Self>,
        id: &str,
        mut adapter: Box<dyn Adapter>,
        cwd: PathBuf,
    ) -> Result<(), CommandError> {
        let provider = adapter.provider().as_str();
        let id = id.to_owned();
        let mut cmd = adapter.command(&cwd);
        scrub_environment(&mut cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let (kind, code) = if e.kind() == std::io::ErrorKind::NotFound {
                    (ErrorKind::CliNotFound, ErrorCode::CliNotFound)
                } else {
                    (ErrorKind::SpawnFailed, ErrorCode::SpawnFailed)
                };
                let error = ProviderError::new(
                    adapter.provider(),
                    kind,
                    format!("could not start the {provider} agent: {e}"),
                );
                let failed = host_event(
                    &id,
                    adapter.provider(),
                    None,
                    EventType::SessionFailed,
                    error.to_data(),
                    now(),
                );
                self.store.append(&id, vec![failed]).await?;
                self.store
                    .set_session_state(&id, SessionState::Failed, now())
                    .await?;
                return Err(CommandError::new(code, error.message));
            }
        };
        self.store
            .set_session_state(&id, SessionState::Running, now())
            .await?;
        let (tx, rx) = mpsc::channel(64);
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(id.clone(), tx);
        let feed = adapter.connect(&cwd);
        let task = SessionTask::new(self.clone(), &id, adapter, &self.config, cwd);
        let permit = self.tasks.clone().try_acquire_owned().ok();
        tokio::spawn(async move {
            task.run(child, rx, feed).await;
            drop(permit);
        });
        Ok(())
    }

    fn sender(&self, id: &str) -> Option<mpsc::Sender<Command>> {
        self.sessions
            .lock()
            .expect("sessions lock")
            .get(id)
            .cloned()
    }

    async fn command<T>(
        &self,
        id: &str,
        make: impl FnOnce(oneshot::Sender<Result<T, CommandError>>) -> Command,
    ) -> Result<T, CommandError> {
        let Some(tx) = self.sender(id) else {
            return match self.store.get_session(id).await? {
                Some(r) if r.node != self.config.node && r.state.is_live() => {
                    Err(CommandError::hosted_elsewhere(&r))
                }
                Some(_) => Err(CommandError::closed(id)),
                None => Err(CommandError::unknown_session(id)),
            };
        };
        let (reply, rx) = oneshot::channel();
        tx.send(make(reply))
            .await
            .map_err(|_| CommandError::closed(id))?;
        rx.await.map_err(|_| CommandError::closed(id))?
    }

    /// Starts a foreground turn; resolves with its id once the agent accepted the prompt.
    ///
    /// `turn_id`, chosen by the client, makes this idempotent: a turn of that id in the
    /// session (started by this process, or in the log) is answered, not started again, so a
    /// client may resend a command whose reply it never got. A session whose agent is not
    /// running (after a restart, a crash or a close) is resumed for the prompt when its
    /// provider can resume it.
    pub async fn start_turn(
        self: &Arc<Self>,
        id: &str,
        prompt: String,
        turn_id: Option<String>,
    ) -> Result<String, CommandError> {
        if prompt.trim().is_empty() {
            return Err(CommandError::new(
                ErrorCode::EmptyPrompt,
                "the prompt is empty",
            ));
        }
        if let Some(turn) = &turn_id {
            if !crate::core::wire::is_turn_id(turn) {
                return Err(CommandError::new(
                    ErrorCode::BadTurnId,
                    "a turn id is 1-128 ASCII letters, digits, '_', '-', '.' or ':'",
                ));
            }
        }
        if self.sender(id).is_none() {
            if let Some(turn) = &turn_id {
                let query = EventQuery {
                    run_id: Some(turn.clone()),
                    limit: Some(1),
                    ..EventQuery::default()
                };
                if !self.store.get_events(id, &query).await?.is_empty() {
                    return Ok(turn.clone());
                }
            }
            self.wake(id).await?;
        }
        self.command(id, |r| Command::StartTurn(prompt, turn_id, r))
            .await
    }

    /// Resumes a session whose agent is not running, for a prompt, when it can be resumed;
    /// otherwise the command that follows says why it takes no turn (closed, hosted
    /// elsewhere, unknown).
    async fn wake(self: &Arc<Self>, id: &str) -> Result<(), CommandError> {
        match self.resume_session(id).await {
            Ok(_) => Ok(()),
            Err(e) => match e.code {
                // Someone resumed it meanwhile; or it cannot be resumed, which the
                // command's own answer reports.
                ErrorCode::AlreadyRunning
                | ErrorCode::Unsupported
                | ErrorCode::NoResumeHandle
                | ErrorCode::UnknownSession
                | ErrorCode::HostedElsewhere => Ok(()),
                _ => Err(e),
            },
        }
    }

    /// Interrupts the turn in progress; with `turn_id`, only that turn (done if it has ended).
    pub async fn interrupt(&self, id: &str, turn_id: Option<String>) -> Result<(), CommandError> {
        self.command(id, |r| Command::Interrupt(turn_id, r)).await
    }

    /// Switches the agent to `mode` (one of the session's `modes`).
    pub async fn set_mode(&self, id: &str, mode: String) -> Result<(), CommandError> {
        self.command(id, |r| Command::SetMode(mode, r)).await
    }

    /// Changes the model and/or the thinking level.
    pub async fn set_model(
        &self,
        id: &str,
        model: Option<String>,
        thinking: Option<Thinking>,
    ) -> Result<(), CommandError> {
        if model.is_none() && thinking.is_none() {
            return Err(CommandError::new(
                ErrorCode::BadRequest,
                "give a model, a thinking level, or both",
            ));
        }
        self.command(id, |r| Command::SetModel(model, thinking, r))
            .await
    }

    /// The session's record, its latest sequence and the log's epoch, and, while its process
    /// runs, its live state: runtime, modes, current mode, commands, pending approvals,
    /// capabilities.
    ///
    /// `store` says whether the session's events reach the store (see [`StoreQueue::status`](super::session::StoreQueue::status)).
    /// While the store cannot be read, a session running here is still described from its
    /// live state, without `session`, `latest_sequence` and `epoch`.
    pub async fn describe(&self, id: &str) -> Result<Value, CommandError> {
        let live = match self.sender(id) {
            Some(_) => self.command(id, Command::Describe).await.ok(),
            None => None,
        };
        let record = match self.store.get_session(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Err(CommandError::unknown_session(id)),
            Err(e) => {
                let Some(Value::Object(mut out)) = live else {
                    return Err(e.into());
                };
                let status = out.entry("store").or_insert_with(|| json!({}));
                status["state"] = json!("unavailable");
                status["error"] = json!(e.to_string());
                return Ok(Value::Object(out));
            }
        };
        let mut out = match live {
            Some(Value::Object(m)) => m,
            _ => {
                let mut m = Map::new();
                m.insert(
                    "capabilities".into(),
                    json!(self.capabilities_of(&record.provider)),
                );
                m.insert("runtime".into(), self.stored_runtime(id).await?);
                m.insert("pending_approvals".into(), json!([]));
                m.insert("store".into(), json!({"state": "available", "unstored": 0}));
                m
            }
        };
        out.insert("session".into(), json!(record));
        let latest = self.store.latest_sequence(id).await?;
        out.insert("latest_sequence".into(), json!(latest));
        out.insert("epoch".into(), json!(self.store.epoch()));
        Ok(Value::Object(out))
    }

    /// The runtime a stopped session last reported (its latest `session_started`).
    async fn stored_runtime(&self, id: &str) -> Result<Value, CommandError> {
        let query = super::store::EventQuery {
            kind: Some(EventType::SessionStarted),
            limit: Some(10_000),
            ..Default::default()
        };
        let started = self.store.get_events(id, &query).await?;
        let mut runtime = Map::new();
        if let Some(e) = started.last() {
            update_runtime(&mut runtime, e.data());
        }
        Ok(Value::Object(runtime))
    }

    pub async fn answer_approval(
        &self,
        id: &str,
        request_id: String,
        decision: Decision,
    ) -> Result<(), CommandError> {
        self.command(id, |r| Command::Answer(request_id, decision, r))
            .await
    }

    /// Stops the session's process and marks it closed. Closing a closed session is fine.
    pub async fn close_session(&self, id: &str) -> Result<(), CommandError> {
        let Some(tx) = self.sender(id) else {
            return match self.store.get_session(id).await? {
                Some(_) => Ok(()),
                None => Err(CommandError::unknown_session(id)),
            };
        };
        let (reply, rx) = oneshot::channel();
        if tx.send(Command::Close(reply)).await.is_ok() {
            let _ = rx.await;
        }
        Ok(())
    }

    /// Closes every session (kills the children) and waits for their events to be stored:
    /// at most [`HubConfig::store_drain_ms`] for the sessions whose store is failing. Returns
    /// how many events could not be stored (also [`Hub::lost_events`]); used on server
    /// shutdown.
    pub async fn shutdown(&self) -> u64 {
        self.shutdown.send_replace(true);
        let ids: Vec<String> = self
            .sessions
            .lock()
            .expect("sessions lock")
            .keys()
            .cloned()
            .collect();
        for id in ids {
            let _ = self.close_session(&id).await;
        }
        let wait = Duration::from_millis(self.config.store_drain_ms) + Duration::from_secs(5);
        let all = self.tasks.acquire_many(TASK_PERMITS);
        if tokio::time::timeout(wait, all).await.is_err() {
            eprintln!("agentwire: some sessions did not end in time");
        }
        self.lost_events()
    }

    /// Events that could not be stored so far (see [`Hub::shutdown`]).
    pub fn lost_events(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    fn forget(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
        // No queue here any more: described as available, as a stopped session is.
        self.set_store_status(id, StoreStatus::available(0));
        self.prune_store_status();
    }

    /// The store status of session `id`, as its task last said (available for a session
    /// that does not run here); `changed` wakes on every update.
    pub fn watch_store(&self, id: &str) -> watch::Receiver<StoreStatus> {
        self.prune_store_status();
        let mut all = self.store_status.lock().expect("store status lock");
        let tx = all
            .entry(id.to_owned())
            .or_insert_with(|| watch::channel(StoreStatus::available(0)).0);
        tx.subscribe()
    }

    pub(super) fn set_store_status(&self, id: &str, status: StoreStatus) {
        let mut all = self.store_status.lock().expect("store status lock");
        match all.get(id) {
            Some(tx) => drop(tx.send_replace(status)),
            None => drop(all.insert(id.to_owned(), watch::channel(status).0)),
        }
    }

    /// Drops the statuses of sessions that neither run here nor are watched.
    fn prune_store_status(&self) {
        // Lock order: `sessions`, then `store_status`.
        let running = self.sessions.lock().expect("sessions lock");
        let mut all = self.store_status.lock().expect("store status lock");
        all.retain(|id, tx| tx.receiver_count() > 0 || running.contains_key(id));
    }
}

fn provider_of(name: &str) -> Provider {
    match name {
        "demo" => Provider::Demo,
        "claude" => Provider::Claude,
        "codex" => Provider::Codex,
        "gemini" => Provider::Gemini,
        "opencode" => Provider::Opencode,
        "amp" => Provider::Amp,
        _ => Provider::Generic,
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// An event the companion itself emits (not read from the provider), with a random id.
pub(crate) fn host_event(
    session: &str,
    provider: Provider,
    run_id: Option<&str>,
    kind: EventType,
    data: Map<String, Value>,
    at: Timestamp,
) -> Event {
    let init = EventInit {
        id: Some(random_id()),
        run_id: run_id.map(str::to_owned),
        data,
        ..EventInit::new(kind, session, provider, at)
    };
    Event::new(init).expect("host events have a session id")
}

/// Makes this process unreadable to the agents it hosts. They run as the same user, so they
/// could otherwise read the token from `/proc/<companion>/environ` or its memory; a process
/// that is not dumpable has those files owned by root (Linux; `ssh-agent` does the same).
/// Also disables core dumps, which would hold the token too.
pub fn hide_from_agents() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_DUMPABLE) takes plain integers and touches no memory of ours.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Removes agentwire's own variables (`AGENTWIRE_TOKEN`, `AGENTWIRE_STORE` with its password,
/// …) from a child's environment: a hosted agent, or a script it was talked into running,
/// must not be able to call the API and approve its own tool calls.
pub(crate) fn scrub_environment(cmd: &mut tokio::process::Command) {
    for (name, _) in std::env::vars_os() {
        if is_agentwire_variable(&name) {
            cmd.env_remove(&name);
        }
    }
}

fn is_agentwire_variable(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.to_ascii_uppercase().starts_with("AGENTWIRE_"))
}

/// Makes the agent die with the companion even when the companion is killed outright (an
/// agent that does not read its stdin, like `opencode serve`, would otherwise outlive it).
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
    // which is async-signal-safe; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut tokio::process::Command) {}
