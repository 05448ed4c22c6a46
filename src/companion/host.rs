//! Provider hosting: one task per session owns its child process and is the only writer of
//! that session's events.
//!
//! The task's loop selects over the child's stdout (fed to the core normalizer), its stderr
//! (kept, bounded, for `provider_error`), commands from clients (start a turn, interrupt,
//! answer an approval, close), the lifecycle projection's next deadline, and the child's
//! exit. Every event it produces passes the user-echo filter and the [`TurnProjector`] (which
//! drops stale terminals and events after a terminal), then is appended to the store; the
//! store tells subscribers once it is durable. When the process ends, every turn still active
//! ends with `run_failed` carrying the exit code and the cut stderr, so no session is left
//! running after its process is gone. On server start, sessions the previous run left
//! running are marked failed the same way ([`Hub::recover`]); a user can then reopen one
//! whose CLI can resume its own session ([`Hub::resume_session`]): a new process continues
//! the same log.
//!
//! Besides events, the task keeps the session's live state for the API
//! ([`Hub::describe`]): runtime (model, version, cwd, the CLI's session id) from
//! `session_started` and `model_changed`, the modes and the current one, slash commands,
//! pending approvals, and what the adapter can do ([`Capabilities`]). A request for
//! something the adapter cannot do is refused with the code `unsupported`.
//!
//! The agent's output reaches the normalizer from its stdout, or from the event stream an
//! adapter opens itself ([`Adapter::connect`]: stdout is then kept with stderr as a log).
//! For an adapter whose decoder reads the client's requests too
//! ([`Adapter::feeds_requests`]), the normalizer gets whole lines, the agent's and ours, in
//! the order they were read and written: exactly what `--record-dir` records.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

use super::adapter::{
    AcpStdio, Adapter, AgentCli, AmpStdio, Capabilities, ClaudeStdio, CodexAppServer, Feed,
    OpencodeServe, Thinking, AGENT_CLIS,
};
use super::store::{SessionRecord, SessionState, Store, StoreError};
use super::{now, random_hex, random_id};
use crate::core::dedup::UserEchoFilter;
use crate::core::event::{Event, EventInit, EventType, Provider};
use crate::core::lifecycle::{Disposition, LifecycleConfig, Policy, TurnProjector};
use crate::core::normalize::{Config, Normalizer};
use crate::core::provider_error::{ErrorKind, ProviderError, StderrLimits};
use crate::core::time::Timestamp;
use crate::core::wire::Decision;

/// A refused command, with a stable code for the wire and the HTTP API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CommandError {
    pub code: &'static str,
    pub message: String,
}

impl CommandError {
    pub fn new(code: &'static str, message: impl Into<String>) -> CommandError {
        CommandError {
            code,
            message: message.into(),
        }
    }

    fn unknown_session(id: &str) -> CommandError {
        CommandError::new("unknown_session", format!("no session {id:?}"))
    }

    fn closed(id: &str) -> CommandError {
        CommandError::new("not_connected", format!("session {id:?} is not running"))
    }

    fn hosted_elsewhere(record: &SessionRecord) -> CommandError {
        CommandError::new(
            "hosted_elsewhere",
            format!(
                "session {:?} runs on companion {:?}: its commands go there",
                record.id, record.node
            ),
        )
    }

    fn unsupported(provider: &str, what: &str) -> CommandError {
        CommandError::new(
            "unsupported",
            format!("the {provider} adapter cannot {what}"),
        )
    }
}

impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> CommandError {
        match e {
            StoreError::UnknownSession(id) => CommandError::unknown_session(&id),
            other => CommandError::new("store_error", other.to_string()),
        }
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
}

impl Hub {
    pub fn new(store: Arc<dyn Store>, config: HubConfig) -> Arc<Hub> {
        Arc::new(Hub {
            store,
            config,
            sessions: Mutex::new(HashMap::new()),
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
            self.fail_orphan(&s, ErrorKind::CompanionRestart, message)
                .await?;
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
            self.fail_orphan(s, ErrorKind::NodeLost, message).await?;
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
        kind: ErrorKind,
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
        let mut events: Vec<Event> = std::iter::from_fn(|| projector.poll_event()).collect();
        events.push(host_event(
            &s.id,
            provider,
            None,
            EventType::SessionFailed,
            error.to_data(),
            at,
        ));
        self.store.append(&s.id, events).await?;
        self.store
            .set_session_state(&s.id, SessionState::Failed, at)
            .await?;
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
                    ErrorKind::CliNotFound
                } else {
                    ErrorKind::SpawnFailed
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
                return Err(CommandError::new(kind.as_str(), error.message));
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
        tokio::spawn(task.run(child, rx, feed));
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
    pub async fn describe(&self, id: &str) -> Result<Value, CommandError> {
        let Some(record) = self.store.get_session(id).await? else {
            return Err(CommandError::unknown_session(id));
        };
        let live = match self.sender(id) {
            Some(_) => self.command(id, Command::Describe).await.ok(),
            None => None,
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

    /// Closes every session (kills the children); used on server shutdown.
    pub async fn shutdown(&self) {
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
    }

    fn forget(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(id);
    }
}

/// The runtime fields of a `session_started` (or `model_changed`) event's data.
fn update_runtime(runtime: &mut Map<String, Value>, data: &Map<String, Value>) {
    for key in ["model", "version", "cwd", "provider_session_id", "agent"] {
        if let Some(v) = data.get(key).filter(|v| !v.is_null()) {
            runtime.insert(key.into(), v.clone());
        }
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

/// The state of one hosted session, owned by its task.
struct SessionTask {
    hub: Arc<Hub>,
    id: String,
    adapter: Box<dyn Adapter>,
    normalizer: Normalizer,
    projector: TurnProjector,
    echo: UserEchoFilter,
    /// Pending approval requests: id -> the request's data.
    approvals: HashMap<String, Value>,
    stderr: VecDeque<u8>,
    stderr_keep: usize,
    stderr_limits: StderrLimits,
    interrupts: u64,
    provider_session_seen: bool,
    recorder: Option<Recorder>,
    cwd: PathBuf,
    /// Stdout split into lines for [`Adapter::observe`].
    lines: LineSplitter,
    /// The normalizer reads whole lines, ours included ([`Adapter::feeds_requests`]).
    feed_lines: bool,
    /// Model, version, cwd, the CLI's session id: from `session_started`, `model_changed`.
    runtime: Map<String, Value>,
    current_mode: Option<String>,
    /// Slash commands from `session_started`, when the adapter does not track them.
    commands: Option<Value>,
    /// Why the session must end, when a request to the agent failed for good.
    fatal: Option<ProviderError>,
    /// Another companion took the session over: nothing more is written to it.
    abandoned: bool,
}

impl SessionTask {
    fn new(
        hub: Arc<Hub>,
        id: &str,
        adapter: Box<dyn Adapter>,
        config: &HubConfig,
        cwd: PathBuf,
    ) -> SessionTask {
        let mut normalizer_config = Config::new(id);
        normalizer_config.source = random_hex(8);
        let mut lifecycle = LifecycleConfig::new(id, adapter.provider());
        lifecycle.policy = Policy::Drop;
        lifecycle.cancel_grace_ms = config.cancel_grace_ms;
        lifecycle.autonomous_idle_limit_ms = config.autonomous_idle_limit_ms;
        lifecycle.foreground_idle_limit_ms = config.foreground_idle_limit_ms;
        lifecycle.stall_after_ms = config.stall_after_ms;
        let mut projector = TurnProjector::new(lifecycle);
        projector.mark_connected();
        let recorder = config
            .record_dir
            .as_ref()
            .and_then(|dir| Recorder::open(&dir.join(format!("{id}.jsonl"))));
        SessionTask {
            recorder,
            cwd,
            lines: LineSplitter::default(),
            feed_lines: adapter.feeds_requests(),
            runtime: Map::new(),
            current_mode: None,
            commands: None,
            fatal: None,
            abandoned: false,
            normalizer: Normalizer::new(Some(adapter.format()), normalizer_config),
            projector,
            echo: UserEchoFilter::default(),
            approvals: HashMap::new(),
            stderr: VecDeque::new(),
            stderr_keep: config.stderr_keep_bytes,
            stderr_limits: config.stderr_limits,
            interrupts: 0,
            provider_session_seen: false,
            hub,
            id: id.to_owned(),
            adapter,
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
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let mut out_buf = vec![0u8; 64 << 10];
        let mut err_buf = vec![0u8; 8 << 10];
        let mut stdout_open = true;
        let mut stderr_open = true;
        let mut closing: Option<oneshot::Sender<()>> = None;
        let hello = self.adapter.start(&self.cwd);
        self.send(&mut stdin, &hello).await;
        loop {
            let deadline = self.projector.poll_timeout();
            tokio::select! {
                read = stdout.read(&mut out_buf), if stdout_open => match read {
                    Ok(0) | Err(_) => {
                        stdout_open = false;
                        if !stdout_is_log {
                            self.output_eof(&mut stdin).await;
                        }
                    }
                    Ok(n) if stdout_is_log => self.keep_stderr(&out_buf[..n]),
                    Ok(n) => {
                        let bytes = out_buf[..n].to_vec();
                        self.output(&bytes, &mut stdin).await;
                    }
                },
                item = next_feed(&mut feed) => match item {
                    Some(Feed::Bytes(bytes)) => self.output(&bytes, &mut stdin).await,
                    Some(Feed::Failed { kind, message, fatal }) => {
                        self.request_failed(kind, message, fatal).await;
                        if fatal {
                            stdin = None;
                            let _ = child.start_kill();
                        }
                    }
                    None => feed = None,
                },
                read = stderr.read(&mut err_buf), if stderr_open => match read {
                    Ok(0) | Err(_) => stderr_open = false,
                    Ok(n) => self.keep_stderr(&err_buf[..n]),
                },
                cmd = commands.recv(), if closing.is_none() => match cmd {
                    Some(Command::Close(reply)) => {
                        closing = Some(reply);
                        stdin = None;
                        let _ = child.start_kill();
                    }
                    Some(Command::Abandon(reply)) => {
                        self.abandoned = true;
                        closing = Some(reply);
                        stdin = None;
                        let _ = child.start_kill();
                    }
                    Some(cmd) => self.handle_command(cmd, &mut stdin).await,
                    None => {
                        stdin = None;
                        let _ = child.start_kill();
                    }
                },
                _ = sleep_until_ms(deadline) => {
                    self.projector.handle_timeout(now().unix_millis());
                    self.flush().await;
                }
                status = child.wait(), if !stdout_open => {
                    // Read what stderr still holds (bounded), then end the session.
                    if stderr_open {
                        let mut rest = Vec::new();
                        let _ = tokio::time::timeout(Duration::from_millis(200), stderr.read_to_end(&mut rest)).await;
                        self.keep_stderr(&rest);
                    }
                    let code = status.ok().and_then(|s| s.code());
                    if stdout_is_log {
                        self.output_eof(&mut stdin).await;
                    }
                    self.finish(code, closing.is_some()).await;
                    if let Some(reply) = closing.take() {
                        let _ = reply.send(());
                    }
                    break;
                }
            }
        }
        self.hub.forget(&self.id);
        // Commands that raced with the end get a clear refusal.
        commands.close();
        while let Ok(cmd) = commands.try_recv() {
            match cmd {
                Command::StartTurn(_, r) => drop(r.send(Err(CommandError::closed(&self.id)))),
                Command::Interrupt(r)
                | Command::Answer(_, _, r)
                | Command::SetMode(_, r)
                | Command::SetModel(_, _, r) => drop(r.send(Err(CommandError::closed(&self.id)))),
                Command::Describe(r) => drop(r.send(Err(CommandError::closed(&self.id)))),
                Command::Close(r) | Command::Abandon(r) => drop(r.send(())),
            }
        }
    }

    /// The agent's output: recorded, normalized, and seen line by line by the adapter,
    /// whose answers go to its stdin.
    async fn output(&mut self, bytes: &[u8], stdin: &mut Option<ChildStdin>) {
        if let Some(r) = &mut self.recorder {
            r.stdout(bytes);
        }
        if !self.feed_lines {
            self.normalizer.handle_bytes(bytes, now());
            self.flush().await;
        }
        for mut line in self.lines.push(bytes) {
            let replies = self.adapter.observe(&line);
            if self.feed_lines && !self.adapter.quiet() {
                line.push(b'\n');
                self.normalizer.handle_bytes(&line, now());
                self.flush().await;
            }
            self.send(stdin, &replies).await;
        }
    }

    /// The end of the agent's output.
    async fn output_eof(&mut self, stdin: &mut Option<ChildStdin>) {
        if let Some(r) = &mut self.recorder {
            r.stdout_eof();
        }
        if self.feed_lines {
            let rest = std::mem::take(&mut self.lines).rest();
            if !rest.is_empty() {
                let replies = self.adapter.observe(&rest);
                self.normalizer.handle_bytes(&rest, now());
                self.send(stdin, &replies).await;
            }
        }
        self.normalizer.handle_eof(now());
        self.flush().await;
    }

    /// A request the adapter made to the agent failed: the turn fails with it; a fatal one
    /// also ends the session (the caller kills the process).
    async fn request_failed(&mut self, kind: ErrorKind, message: String, fatal: bool) {
        let at = now();
        let error = ProviderError::new(self.adapter.provider(), kind, message);
        let ended = self.projector.end_active(
            EventType::RunFailed,
            &Value::Object(error.to_data()),
            at.unix_millis(),
        );
        if ended == 0 && !fatal {
            let mut data = error.to_data();
            data.insert("severity".into(), json!("error"));
            let event = host_event(
                &self.id,
                self.adapter.provider(),
                None,
                EventType::ErrorOccurred,
                data,
                at,
            );
            self.append(vec![event]).await;
        }
        self.flush().await;
        if fatal {
            self.fatal = Some(error);
        }
    }

    /// The live state `GET /api/sessions/{id}` shows.
    fn describe(&self) -> Value {
        let mut pending: Vec<&Value> = self.approvals.values().collect();
        pending.sort_by(|a, b| {
            let key = |v: &Value| v.get("request_id").map(Value::to_string);
            key(a).cmp(&key(b))
        });
        let commands = match self.adapter.commands() {
            Some(list) => Value::Array(list),
            None => self.commands.clone().unwrap_or(Value::Null),
        };
        json!({
            "runtime": self.runtime,
            "modes": self.adapter.modes(),
            "current_mode": self.adapter.current_mode().or_else(|| self.current_mode.clone()),
            "commands": commands,
            "pending_approvals": pending,
            "capabilities": self.adapter.capabilities(),
        })
    }

    /// Logs a change the user made (mode, model) on the active turn, if any. An adapter whose
    /// decoder reads our requests ([`Adapter::feeds_requests`]) reports it from the agent's
    /// answer instead.
    async fn log_user_change(&mut self, kind: EventType, data: Map<String, Value>, at: Timestamp) {
        if self.feed_lines {
            return;
        }
        let run = self.projector.active_turns().first().map(|r| r.to_string());
        let event = host_event(
            &self.id,
            self.adapter.provider(),
            run.as_deref(),
            kind,
            data,
            at,
        );
        self.append(vec![event]).await;
    }

    async fn handle_command(&mut self, cmd: Command, stdin: &mut Option<ChildStdin>) {
        let at = now();
        match cmd {
            Command::StartTurn(prompt, reply) => {
                let turn_id = format!("turn_{}", random_hex(12));
                if let Err(e) = self.projector.start_foreground(&turn_id, at.unix_millis()) {
                    let _ = reply.send(Err(CommandError::new(e.code(), e.to_string())));
                    return;
                }
                let bytes = self.adapter.prompt(&prompt);
                self.record_stdin(&bytes);
                if let Err(e) = write_all(stdin, &bytes).await {
                    // The prompt never reached the agent: the turn ends at once.
                    let error = ProviderError::new(
                        self.adapter.provider(),
                        ErrorKind::StdinClosed,
                        e.clone(),
                    );
                    self.projector.end_active(
                        EventType::RunFailed,
                        &Value::Object(error.to_data()),
                        at.unix_millis(),
                    );
                    self.flush().await;
                    let _ = reply.send(Err(CommandError::new("not_connected", e)));
                    return;
                }
                self.normalizer.expect_run(&turn_id);
                self.echo.note_prompt(&turn_id, &prompt);
                let sent = host_event(
                    &self.id,
                    self.adapter.provider(),
                    Some(&turn_id),
                    EventType::MessageSent,
                    obj(json!({"content": prompt, "role": "user"})),
                    at,
                );
                self.append(vec![sent]).await;
                self.normalize_request(&bytes).await;
                let _ = reply.send(Ok(turn_id));
            }
            Command::Interrupt(reply) => {
                if !self.projector.interrupt(at.unix_millis()) {
                    let _ = reply.send(Err(CommandError::new(
                        "no_active_turn",
                        "no turn is running",
                    )));
                    return;
                }
                self.interrupts += 1;
                let request_id = format!("interrupt_{}", self.interrupts);
                let bytes = self.adapter.interrupt(&request_id);
                let result = self.write(stdin, &bytes).await;
                let _ = reply.send(result.map_err(|e| CommandError::new("not_connected", e)));
            }
            Command::Answer(request_id, decision, reply) => {
                let Some(request) = self.approvals.remove(&request_id) else {
                    let msg = format!("no pending approval {request_id:?}");
                    let _ = reply.send(Err(CommandError::new("unknown_request", msg)));
                    return;
                };
                let bytes = self.adapter.answer(&request_id, decision, &request);
                if let Err(e) = self.write(stdin, &bytes).await {
                    self.approvals.insert(request_id, request);
                    let _ = reply.send(Err(CommandError::new("not_connected", e)));
                    return;
                }
                if self.adapter.reports_answers() {
                    // The agent's output reports the answer.
                    let _ = reply.send(Ok(()));
                    return;
                }
                let kind = match decision {
                    Decision::Allow => EventType::ToolApprovalGranted,
                    Decision::Deny => EventType::ToolApprovalDenied,
                };
                let run = request
                    .get("run_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let data = obj(
                    json!({"request_id": request_id, "tool_call_id": request.get("tool_call_id")}),
                );
                let event = host_event(
                    &self.id,
                    self.adapter.provider(),
                    run.as_deref(),
                    kind,
                    data,
                    at,
                );
                self.append(vec![event]).await;
                let _ = reply.send(Ok(()));
            }
            Command::SetMode(mode, reply) => {
                let provider = self.adapter.provider().as_str();
                if !self.adapter.capabilities().set_mode {
                    let _ = reply.send(Err(CommandError::unsupported(provider, "change modes")));
                    return;
                }
                let modes = self.adapter.modes();
                if !modes.iter().any(|m| m.id == mode) {
                    let known: Vec<&str> = modes.iter().map(|m| m.id.as_str()).collect();
                    let msg = format!("unknown mode {mode:?}; this session has {known:?}");
                    let _ = reply.send(Err(CommandError::new("unknown_mode", msg)));
                    return;
                }
                let bytes = self.adapter.set_mode(&mode);
                if let Err(e) = self.write(stdin, &bytes).await {
                    let _ = reply.send(Err(CommandError::new("not_connected", e)));
                    return;
                }
                self.current_mode = Some(mode.clone());
                let data = obj(json!({"mode": mode, "source": "user"}));
                self.log_user_change(EventType::ModeChanged, data, at).await;
                let _ = reply.send(Ok(()));
            }
            Command::SetModel(model, thinking, reply) => {
                let caps = self.adapter.capabilities();
                let provider = self.adapter.provider().as_str();
                if model.is_some() && !caps.set_model {
                    let _ =
                        reply.send(Err(CommandError::unsupported(provider, "change the model")));
                    return;
                }
                if thinking.is_some() && !caps.thinking {
                    let _ = reply.send(Err(CommandError::unsupported(
                        provider,
                        "change the thinking level",
                    )));
                    return;
                }
                let bytes = self.adapter.set_model(model.as_deref(), thinking);
                if let Err(e) = self.write(stdin, &bytes).await {
                    let _ = reply.send(Err(CommandError::new("not_connected", e)));
                    return;
                }
                let mut data = Map::new();
                data.insert("source".into(), json!("user"));
                if let Some(m) = &model {
                    data.insert("model".into(), json!(m));
                    self.runtime.insert("model".into(), json!(m));
                }
                if let Some(t) = thinking {
                    data.insert("thinking".into(), json!(t));
                    self.runtime.insert("thinking".into(), json!(t));
                }
                self.log_user_change(EventType::ModelChanged, data, at)
                    .await;
                let _ = reply.send(Ok(()));
            }
            Command::Describe(reply) => drop(reply.send(Ok(self.describe()))),
            Command::Close(reply) | Command::Abandon(reply) => drop(reply.send(())),
        }
    }

    /// Writes bytes the user's command produced (recording them and, for a decoder that
    /// reads requests, normalizing them too).
    async fn write(&mut self, stdin: &mut Option<ChildStdin>, bytes: &[u8]) -> Result<(), String> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.record_stdin(bytes);
        write_all(stdin, bytes).await?;
        self.normalize_request(bytes).await;
        Ok(())
    }

    /// Our own request lines, for a decoder that reads them.
    async fn normalize_request(&mut self, bytes: &[u8]) {
        if self.feed_lines && !bytes.is_empty() {
            self.normalizer.handle_bytes(bytes, now());
            self.flush().await;
        }
    }

    /// Writes protocol bytes the adapter asked for; a failure is only logged (the process
    /// ending is what ends the session).
    async fn send(&mut self, stdin: &mut Option<ChildStdin>, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Err(e) = self.write(stdin, bytes).await {
            eprintln!("agentwire: session {}: {e}", self.id);
        }
    }

    fn record_stdin(&mut self, bytes: &[u8]) {
        if let Some(r) = &mut self.recorder {
            r.write(bytes);
        }
    }

    fn keep_stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend(bytes);
        let excess = self.stderr.len().saturating_sub(self.stderr_keep);
        self.stderr.drain(..excess);
    }

    /// Moves what the normalizer and the projector produced into the store.
    async fn flush(&mut self) {
        let now_ms = now().unix_millis();
        let mut batch = Vec::new();
        while let Some(event) = self.normalizer.poll_event() {
            if event.kind() == EventType::MessageSent && self.echo.is_echo(&event) {
                continue;
            }
            if self.projector.handle_event(&event, now_ms) != Disposition::Applied {
                continue;
            }
            self.observe(&event).await;
            batch.push(event.into_sequenced(0));
            batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
        }
        batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
        // Output the normalizer could not read is recorded in the log, not only on stderr.
        while let Some(d) = self.normalizer.poll_diagnostic() {
            let message = format!("unreadable provider output: {d}");
            let error = ProviderError::new(
                self.adapter.provider(),
                ErrorKind::UnreadableOutput,
                message,
            );
            let mut data = error.to_data();
            data.insert("severity".into(), json!("warning"));
            data.insert("line".into(), json!(d.line));
            data.insert("reason".into(), json!(d.kind.as_str()));
            let at = Timestamp::from_unix_millis(now_ms);
            batch.push(host_event(
                &self.id,
                self.adapter.provider(),
                None,
                EventType::ErrorOccurred,
                data,
                at,
            ));
        }
        while let Some(v) = self.projector.poll_violation() {
            eprintln!(
                "agentwire: session {}: dropped event {:?} ({:?})",
                self.id,
                v.event_id.as_str(),
                v.kind
            );
        }
        if !batch.is_empty() {
            self.append(batch).await;
        }
    }

    /// Side effects of provider events on the host: pending approvals, the resume handle.
    async fn observe(&mut self, event: &Event) {
        match event.kind() {
            EventType::ToolApprovalRequested => {
                if let Some(id) = event.data_str("request_id") {
                    let mut data = event.data().clone();
                    if let Some(run) = event.run_id() {
                        data.insert("run_id".into(), json!(run));
                    }
                    self.approvals.insert(id.to_owned(), Value::Object(data));
                }
            }
            EventType::SessionStarted => {
                let data = event.data();
                update_runtime(&mut self.runtime, data);
                let mode = ["permission_mode", "approval_policy", "mode"]
                    .iter()
                    .find_map(|k| data.get(*k).and_then(Value::as_str));
                if let Some(mode) = mode {
                    self.current_mode = Some(mode.to_owned());
                }
                if let Some(commands) = data.get("slash_commands") {
                    self.commands = Some(commands.clone());
                }
                if !self.provider_session_seen {
                    if let Some(handle) = event.data_str("provider_session_id") {
                        self.provider_session_seen = true;
                        let _ = self
                            .hub
                            .store
                            .set_provider_session_id(&self.id, handle)
                            .await;
                    }
                }
            }
            EventType::ModelChanged => {
                if let Some(model) = event.data().get("model") {
                    self.runtime.insert("model".into(), model.clone());
                }
            }
            EventType::ModeChanged => {
                if let Some(mode) = event.data_str("mode") {
                    self.current_mode = Some(mode.to_owned());
                }
            }
            kind if kind.is_run_terminal() => {
                if let Some(run) = event.run_id() {
                    self.approvals
                        .retain(|_, r| r.get("run_id").and_then(Value::as_str) != Some(run));
                }
            }
            _ => {}
        }
    }

    async fn append(&mut self, events: Vec<Event>) {
        if self.abandoned {
            return;
        }
        if let Err(e) = self.hub.store.append(&self.id, events).await {
            eprintln!(
                "agentwire: session {}: could not store events: {e}",
                self.id
            );
        }
    }

    /// The process is gone: end what is active, record why, mark the session.
    async fn finish(&mut self, exit_code: Option<i32>, closed_by_user: bool) {
        if self.abandoned {
            return;
        }
        let at = now();
        let stderr: Vec<u8> = self.stderr.iter().copied().collect();
        let stderr = String::from_utf8_lossy(&stderr);
        let provider = self.adapter.provider();
        let mut batch = Vec::new();
        let state;
        if closed_by_user {
            self.projector.close(at.unix_millis());
            batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
            batch.push(host_event(
                &self.id,
                provider,
                None,
                EventType::SessionCompleted,
                obj(json!({"reason": "closed"})),
                at,
            ));
            state = SessionState::Closed;
        } else {
            let message = match exit_code {
                Some(0) => "the agent process exited".to_owned(),
                Some(code) => format!("the agent process exited with code {code}"),
                None => "the agent process was killed by a signal".to_owned(),
            };
            let error = self
                .fatal
                .take()
                .unwrap_or_else(|| ProviderError::new(provider, ErrorKind::ProcessExit, message))
                .with_process(exit_code, &stderr, self.stderr_limits);
            let ended = self.projector.end_active(
                EventType::RunFailed,
                &Value::Object(error.to_data()),
                at.unix_millis(),
            );
            batch.extend(std::iter::from_fn(|| self.projector.poll_event()));
            if exit_code == Some(0) && ended == 0 {
                batch.push(host_event(
                    &self.id,
                    provider,
                    None,
                    EventType::SessionCompleted,
                    obj(json!({"reason": "exited"})),
                    at,
                ));
                state = SessionState::Closed;
            } else {
                batch.push(host_event(
                    &self.id,
                    provider,
                    None,
                    EventType::SessionFailed,
                    error.to_data(),
                    at,
                ));
                state = SessionState::Failed;
            }
        }
        self.append(batch).await;
        let _ = self
            .hub
            .store
            .set_session_state(&self.id, state, now())
            .await;
    }
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

/// Splits a byte stream into lines (without the newline). A line longer than the limit is
/// dropped whole, so that a runaway line cannot grow memory without bound.
#[derive(Default)]
struct LineSplitter {
    partial: Vec<u8>,
    /// Inside an over-long line: skip to its end.
    skipping: bool,
}

impl LineSplitter {
    const MAX_LINE: usize = 16 << 20;

    /// What follows the last newline (an unterminated last line), with a newline added.
    fn rest(self) -> Vec<u8> {
        let mut rest = self.partial;
        if !rest.is_empty() && !self.skipping {
            rest.push(b'\n');
            return rest;
        }
        Vec::new()
    }

    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !std::mem::take(&mut self.skipping) {
                self.partial.extend_from_slice(&rest[..end]);
                lines.push(std::mem::take(&mut self.partial));
            }
            rest = &rest[end + 1..];
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > Self::MAX_LINE {
                self.partial = Vec::new();
                self.skipping = true;
            }
        }
        lines
    }
}

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

async fn write_all(stdin: &mut Option<ChildStdin>, bytes: &[u8]) -> Result<(), String> {
    let Some(pipe) = stdin else {
        return Err("the agent's stdin is closed".to_owned());
    };
    pipe.write_all(bytes)
        .await
        .map_err(|e| format!("writing to the agent: {e}"))?;
    pipe.flush()
        .await
        .map_err(|e| format!("writing to the agent: {e}"))
}

/// The next item of an adapter's event stream; pending forever without one.
async fn next_feed(feed: &mut Option<mpsc::UnboundedReceiver<Feed>>) -> Option<Feed> {
    match feed {
        Some(rx) => rx.recv().await,
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

#[cfg(test)]
mod tests {
    use super::LineSplitter;

    #[test]
    fn lines_are_split_across_chunks_and_runaway_lines_dropped() {
        let mut l = LineSplitter::default();
        assert!(l.push(b"{\"a\":").is_empty());
        assert_eq!(
            l.push(b"1}\n{}\npart"),
            [b"{\"a\":1}".to_vec(), b"{}".to_vec()]
        );
        assert_eq!(l.push(b"ial\n"), [b"partial".to_vec()]);
        let huge = vec![b'x'; LineSplitter::MAX_LINE + 1];
        assert!(l.push(&huge).is_empty());
        assert_eq!(l.push(b"still the same line\nnext\n"), [b"next".to_vec()]);
    }
}
