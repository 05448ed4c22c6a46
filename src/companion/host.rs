//! Provider hosting: the registry of sessions ([`Hub`]), and one task per session that owns
//! its child process and is the only writer of that session's events.
//!
//! The task is a shell around the session's rules, [`Session`] (sans-IO, in
//! `companion::session`): one `select!` over the child's stdout, its stderr, the reports of
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::adapter::{
    AcpStdio, Adapter, AgentCli, AmpStdio, Capabilities, ClaudeStdio, CodexAppServer, Feed,
    OpencodeServe, Thinking, AGENT_CLIS,
};
use super::session::{
    update_runtime, Action, Note, ReplyId, Request, Response, Session, SessionConfig, StoreNote,
    StoreOp, StoreQueueConfig, Written,
};
use super::store::{SessionRecord, SessionState, Store, StoreError};
use super::{now, random_hex, random_id};
use crate::core::event::{Event, EventInit, EventType, Provider};
use crate::core::lifecycle::{LifecycleConfig, TurnProjector};
use crate::core::provider_error::{ProviderError, StderrLimits};
use crate::core::time::Timestamp;
use crate::core::wire::Decision;

pub use super::session::CommandError;

impl CommandError {
    fn hosted_elsewhere(record: &SessionRecord) -> CommandError {
        CommandError::new(
            "hosted_elsewhere",
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
            foreground_idle_limit_ms: 60 * 60_000,
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
    StartTurn(String, oneshot::Sender<Result<String, CommandError>>),
    Interrupt(oneshot::Sender<Result<(), CommandError>>),
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
        })
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
            return Err(CommandError::new("unknown_provider", message));
        };
        let Some(program) = cli.find(&self.config.cli_dir) else {
            let message = cli.not_found(&self.config.cli_dir);
            return Err(CommandError::new("cli_not_found", message));
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
                let opencode = OpencodeServe::new(program, random_hex(16)).map_err(|e| {
                    CommandError::new("spawn_failed", format!("no free loopback port: {e}"))
                })?;
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

    /// Marks the sessions that a previous run left starting or running as failed: their
    /// processes died with it. Their open turns end with `run_failed`, then `session_failed`.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let mut recovered = 0;
        for s in self.store.list_sessions().await? {
            // Another companion's sessions are its own to recover (a shared store).
            let ours = s.node == self.config.node || s.node.is_empty();
            if !s.state.is_live() || !ours {
                continue;
            }
            let message = "the companion stopped while this session's process was running";
            self.fail_orphan(&s, "companion_restart", message).await?;
            recovered += 1;
        }
        Ok(recovered)
    }

    /// Renews this node's lease every third of `lease_ms` from now (`serve` renews it once
    /// itself before it serves), for as long as the server runs; each time, takes over the
    /// live sessions of nodes whose lease ran out (a companion that died and did not come
    /// back) and ends them as failed, so that no page shows them running forever. They can
    /// then be resumed on any companion.
    pub async fn keep_lease(self: Arc<Self>) {
        let lease = self.config.lease_ms.max(3);
        let mut tick = tokio::time::interval(Duration::from_millis(lease as u64 / 3));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: the renewal `serve` just made.
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = self.renew_lease().await {
                eprintln!(
                    "agentwire: renewing the lease of node {:?}: {e}",
                    self.node()
                );
            }
        }
    }

    /// One lease round: beat, then take over and fail what dead nodes left running.
    /// Returns how many sessions were taken over.
    pub async fn renew_lease(&self) -> Result<usize, StoreError> {
        let at = now();
        self.store.beat(&self.config.node, at).await?;
        let cutoff = Timestamp::from_unix_millis(at.unix_millis() - self.config.lease_ms);
        let taken = (self.store)
            .take_over_stale(&self.config.node, cutoff, at)
            .await?;
        self.fence().await?;
        for s in &taken {
            let message = "the companion hosting this session stopped renewing its lease";
            eprintln!(
                "agentwire: session {} failed: the node running it stopped renewing its lease",
                s.id
            );
            self.fail_orphan(s, "node_lost", message).await?;
        }
        Ok(taken.len())
    }

    /// Stops, without writing to them, the sessions this node runs that another companion took
    /// over (this node's lease ran out while it was cut off or stalled).
    async fn fence(&self) -> Result<(), StoreError> {
        let hosted: Vec<(String, mpsc::Sender<Command>)> = (self.sessions.lock())
            .expect("sessions lock")
            .iter()
            .map(|(id, tx)| (id.clone(), tx.clone()))
            .collect();
        for (id, tx) in hosted {
            let Some(record) = self.store.get_session(&id).await? else {
                continue;
            };
            if record.node == self.config.node {
                continue;
            }
            eprintln!(
                "agentwire: session {id} was taken over by node {:?}: stopping its agent here",
                record.node
            );
            self.forget(&id);
            let (reply, rx) = oneshot::channel();
            if tx.send(Command::Abandon(reply)).await.is_ok() {
                let _ = rx.await;
            }
        }
        Ok(())
    }

    /// Ends a session whose process is gone (its companion died): its open turns end with
    /// `run_failed`, then `session_failed`, both with a `provider_error` of `kind`.
    async fn fail_orphan(
        &self,
        s: &SessionRecord,
        kind: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        let provider = provider_of(&s.provider);
        let mut projector = TurnProjector::new(LifecycleConfig::new(&s.id, provider));
        projector.mark_connected();
        let mut after = 0;
        loop {
            let query = super::store::EventQuery {
                after: Some(after),
                limit: Some(1_000),
                ..Default::default()
            };
            let page = self.store.get_events(&s.id, &query).await?;
            let Some(last) = page.last() else { break };
            after = last.sequence();
            for e in &page {
                projector.handle_event(e, 0);
            }
        }
        let error = ProviderError::new(provider, kind, message);
        let at = now();
        projector.end_active(
            EventType::RunFailed,
            &Value::Object(error.to_data()),
            at.unix_millis(),
        );
        let ended: Vec<Event> = std::iter::from_fn(|| projector.poll_event()).collect();
        // The turns end first, then the state, then `session_failed`: whoever sees that last
        // event also reads the state `failed` (and a crash in between leaves no turn open).
        if !ended.is_empty() {
            self.store.append(&s.id, ended).await?;
        }
        self.store
            .set_session_state(&s.id, SessionState::Failed, at)
            .await?;
        let failed = host_event(
            &s.id,
            provider,
            None,
            EventType::SessionFailed,
            error.to_data(),
            at,
        );
        self.store.append(&s.id, vec![failed]).await?;
        Ok(())
    }

    /// Creates a session and starts its agent process.
    pub async fn create_session(
        self: &Arc<Self>,
        provider: &str,
        cwd: Option<PathBuf>,
    ) -> Result<SessionRecord, CommandError> {
        let adapter = self.adapter(provider, None)?;
        let cwd = match cwd {
            Some(dir) => dir,
            None => std::env::current_dir()
                .map_err(|e| CommandError::new("bad_cwd", format!("no working directory: {e}")))?,
        };
        if !cwd.is_dir() {
            return Err(CommandError::new(
                "bad_cwd",
                format!("{} is not a directory", cwd.display()),
            ));
        }
        let at = now();
        let id = format!("ses_{}", random_hex(12));
        let record = SessionRecord {
            id: id.clone(),
            provider: provider.to_owned(),
            cwd: cwd.display().to_string(),
            state: SessionState::Starting,
            provider_session_id: None,
            created_at: at,
            updated_at: at,
            node: self.config.node.clone(),
        };
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
                "already_running",
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
                "no_resume_handle",
                format!(
                    "session {id:?} never got a session id from its CLI, so it cannot be resumed"
                ),
            ));
        };
        let adapter = self.adapter(&record.provider, Some(&handle))?;
        let cwd = PathBuf::from(&record.cwd);
        if !cwd.is_dir() {
            return Err(CommandError::new(
                "bad_cwd",
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
                    "already_running",
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
                let kind = if e.kind() == std::io::ErrorKind::NotFound {
                    "cli_not_found"
                } else {
                    "spawn_failed"
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
                return Err(CommandError::new(kind, error.message));
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
    pub async fn start_turn(&self, id: &str, prompt: String) -> Result<String, CommandError> {
        if prompt.trim().is_empty() {
            return Err(CommandError::new("empty_prompt", "the prompt is empty"));
        }
        self.command(id, |r| Command::StartTurn(prompt, r)).await
    }

    pub async fn interrupt(&self, id: &str) -> Result<(), CommandError> {
        self.command(id, Command::Interrupt).await
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
                "bad_request",
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

/// One session's task: the shell around its [`Session`]. It owns the process's pipes, the
/// stdin writer, the one store write in flight and the recorder, and does what the session
/// decides: one `select!` over the sources feeds one `handle_*`, then [`SessionTask::drain`]
/// carries out every `poll_*` output.
struct SessionTask {
    hub: Arc<Hub>,
    session: Session,
    recorder: Option<Recorder>,
    /// Requests waiting for the session's answer.
    waiting: HashMap<ReplyId, Reply>,
    next_reply: ReplyId,
}

/// Where a request's answer goes.
enum Reply {
    Turn(oneshot::Sender<Result<String, CommandError>>),
    Unit(oneshot::Sender<Result<(), CommandError>>),
    Value(oneshot::Sender<Result<Value, CommandError>>),
    Close(oneshot::Sender<()>),
}

impl SessionTask {
    fn new(
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
        }
    }

    async fn run(
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
                }
                read = stdout.read(&mut out_buf), if stdout_open && (reading || stdout_is_log) => match read {
                    Ok(0) | Err(_) => {
                        stdout_open = false;
                        if !stdout_is_log {
                            self.output_eof();
                        }
                    }
                    Ok(n) if stdout_is_log => self.session.handle_stderr(&out_buf[..n]),
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
            Command::StartTurn(prompt, r) => (Request::StartTurn(prompt), Reply::Turn(r)),
            Command::Interrupt(r) => (Request::Interrupt, Reply::Unit(r)),
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

/// `--record-dir`: the agent's stdout lines and the lines the companion wrote to its stdin,
/// in the order the companion saw them, as one JSON Lines file per session. A debugging and
/// transcript-capture aid: it writes synchronously, and a write error stops the recording.
struct Recorder {
    file: std::fs::File,
    /// Stdout bytes after the last newline, held so that a stdin line never splits one.
    partial: Vec<u8>,
}

impl Recorder {
    fn open(path: &std::path::Path) -> Option<Recorder> {
        // Appending: a resumed session goes on in the same file.
        // Private: it holds every prompt and every output.
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path);
        match file {
            Ok(file) => Some(Recorder {
                file,
                partial: Vec::new(),
            }),
            Err(e) => {
                eprintln!("agentwire: not recording to {}: {e}", path.display());
                None
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        if let Err(e) = self.file.write_all(bytes) {
            eprintln!("agentwire: recording failed: {e}");
        }
    }

    fn stdout(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        if let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') {
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            self.write(&lines);
        }
    }

    fn stdout_eof(&mut self) {
        if !self.partial.is_empty() {
            let mut rest = std::mem::take(&mut self.partial);
            rest.push(b'\n');
            self.write(&rest);
        }
    }
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
