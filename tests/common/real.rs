//! Test support for the real agent CLIs (pinned by `scripts/install-clis`): a fake model, a
//! real `agentwire serve` hosting the CLI against it with an environment cleared down to
//! `PATH` plus what the CLI needs to run offline (../shared/reference/providers.md §8), a
//! working directory, and the session traffic recorded with `--record-dir`.

use std::path::{Path, PathBuf};

use agentwire::core::event::{Event, EventType};
use serde_json::json;

use super::{ended, FakeModel, Server};

pub fn cli_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".agentwire/clis/node_modules/.bin")
}

/// A fake model, a server hosting one real CLI against it, and the session's working dir.
pub struct Rig {
    pub fake: FakeModel,
    pub server: Server,
    pub cwd: tempfile::TempDir,
    pub provider: &'static str,
    record: tempfile::TempDir,
    /// The server's arguments and environment, to start it again.
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The longest a wait for the agent may take (90 s, two minutes for a CLI slow to boot):
    /// generous, since the machine may be shared.
    pub deadline: std::time::Duration,
    /// Held by a rig whose CLI is too heavy to run several at once (see [`Rig::opencode`]).
    _serial: Option<std::sync::MutexGuard<'static, ()>>,
    /// One of the few rigs that may run at once.
    _slot: Slot,
    _home: tempfile::TempDir,
    _db: tempfile::TempDir,
}

impl Rig {
    /// Claude Code, pointed at the fake with `ANTHROPIC_BASE_URL`.
    pub fn claude() -> Rig {
        Rig::start("claude", |url, _home| {
            vec![
                ("ANTHROPIC_BASE_URL".into(), url.to_owned()),
                ("ANTHROPIC_API_KEY".into(), "sk-ant-dummy".into()),
                (
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                    "1".into(),
                ),
                ("DISABLE_AUTOUPDATER".into(), "1".into()),
                ("DISABLE_TELEMETRY".into(), "1".into()),
                ("DISABLE_ERROR_REPORTING".into(), "1".into()),
                ("CLAUDE_CODE_MAX_RETRIES".into(), "1".into()),
            ]
        })
    }

    /// Codex, pointed at the fake by a model provider in `$CODEX_HOME/config.toml`.
    pub fn codex() -> Rig {
        Rig::start("codex", |url, home| {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            let config = format!(
                r#"model = "gpt-5.5"
model_provider = "fake"
check_for_update_on_startup = false
[model_providers.fake]
name = "Fake local"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"
request_max_retries = 1
stream_max_retries = 1
[analytics]
enabled = false
[features]
plugins = false
remote_plugin = false
in_app_updates = false
"#
            );
            std::fs::write(codex_home.join("config.toml"), config).unwrap();
            vec![
                ("CODEX_HOME".into(), codex_home.display().to_string()),
                ("FAKE_API_KEY".into(), "dummy".into()),
            ]
        })
    }

    /// The Gemini CLI (hosted through ACP), pointed at the fake by `GOOGLE_GEMINI_BASE_URL`,
    /// with its settings in the scratch `HOME` (API-key auth, no telemetry, no updates).
    pub fn gemini() -> Rig {
        Rig::start("gemini", |url, home| {
            let dir = home.join(".gemini");
            std::fs::create_dir_all(&dir).unwrap();
            let settings = json!({
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": false},
                "telemetry": {"enabled": false},
                "general": {"disableAutoUpdate": true},
            });
            std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
            vec![
                ("GEMINI_API_KEY".into(), "dummy".into()),
                ("GOOGLE_GEMINI_BASE_URL".into(), url.to_owned()),
                ("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into()),
                ("GEMINI_CLI_NO_RELAUNCH".into(), "true".into()),
            ]
        })
    }

    /// OpenCode (`opencode serve`), its model an OpenAI-compatible provider at the fake, in a
    /// config file named by `OPENCODE_CONFIG`; npm offline and pointed at a dead port (it
    /// tries to install a plugin and goes on without it). One at a time: each server spends seconds of CPU
    /// loading its provider plugins, and several at once on two cores outlast the deadlines.
    pub fn opencode() -> Rig {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut rig = Rig::start("opencode", |url, home| {
            let config = json!({
                "autoupdate": false, "share": "disabled",
                "model": "fake/fake-model", "small_model": "fake/fake-model",
                "provider": {"fake": {
                    "npm": "@ai-sdk/openai-compatible", "name": "Fake local",
                    "options": {"baseURL": format!("{url}/v1"), "apiKey": "dummy"},
                    "models": {"fake-model": {"name": "Fake Model", "tool_call": true,
                        "limit": {"context": 128000, "output": 4096}}}}},
            });
            let path = home.join("opencode.json");
            std::fs::write(&path, config.to_string()).unwrap();
            let mut env: Vec<(String, String)> = vec![
                ("OPENCODE_CONFIG".into(), path.display().to_string()),
                ("npm_config_registry".into(), "http://127.0.0.1:9/".into()),
                ("npm_config_offline".into(), "true".into()),
                ("npm_config_fetch_retries".into(), "0".into()),
            ];
            for flag in [
                "OPENCODE_DISABLE_MODELS_FETCH",
                "OPENCODE_DISABLE_AUTOUPDATE",
                "OPENCODE_DISABLE_SHARE",
                "OPENCODE_DISABLE_LSP_DOWNLOAD",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS",
                "OPENCODE_DISABLE_CLAUDE_CODE",
            ] {
                env.push((flag.into(), "true".into()));
            }
            env
        });
        rig._serial = Some(serial);
        // Loading its provider plugins takes seconds of CPU, a minute on a loaded machine.
        rig.deadline = std::time::Duration::from_secs(120);
        rig
    }

    fn start(
        provider: &'static str,
        env: impl FnOnce(&str, &Path) -> Vec<(String, String)>,
    ) -> Rig {
        assert!(
            cli_dir().join(provider).exists(),
            "the pinned {provider} CLI is missing from {}: run scripts/install-clis",
            cli_dir().display()
        );
        let slot = Slot::take();
        let fake = FakeModel::start();
        let home = tempfile::tempdir().unwrap();
        let db = tempfile::tempdir().unwrap();
        let record = tempfile::tempdir().unwrap();
        let mut vars = vec![
            ("HOME".to_owned(), home.path().display().to_string()),
            ("TERM".to_owned(), "dumb".to_owned()),
        ];
        vars.extend(env(&fake.url(), home.path()));
        let args = vec![
            "--cli-dir".to_owned(),
            cli_dir().display().to_string(),
            "--record-dir".to_owned(),
            record.path().display().to_string(),
        ];
        let server = serve(&db.path().join("a.db"), &args, &vars);
        Rig {
            fake,
            server,
            cwd: tempfile::tempdir().unwrap(),
            provider,
            record,
            args,
            env: vars,
            _serial: None,
            _slot: slot,
            deadline: std::time::Duration::from_secs(90),
            _home: home,
            _db: db,
        }
    }

    /// The agent's scratch `HOME`, where the CLI keeps its config and its sessions.
    pub fn home(&self) -> &std::path::Path {
        self._home.path()
    }

    /// Waits until some file under `dir` (recursively) whose name contains `name` holds
    /// `text`: a CLI's own session file, written on its own schedule.
    pub fn wait_for_file(&self, dir: &std::path::Path, name: &str, text: &str) {
        fn found(dir: &std::path::Path, name: &str, text: &str) -> bool {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return false;
            };
            entries.flatten().any(|entry| {
                let path = entry.path();
                if path.is_dir() {
                    return found(&path, name, text);
                }
                path.file_name()
                    .is_some_and(|f| f.to_string_lossy().contains(name))
                    && std::fs::read_to_string(&path).is_ok_and(|s| s.contains(text))
            })
        }
        let start = std::time::Instant::now();
        while !found(dir, name, text) {
            assert!(
                start.elapsed() < self.deadline,
                "no file named *{name}* holding {text:?} under {}",
                dir.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Kills the server outright (`kill -9`; its agents die with it) and starts it again on
    /// the same store, with the same environment.
    pub fn restart(&mut self) {
        self.restart_after(|_| {});
    }

    /// [`Rig::restart`], doing `between` while no server runs.
    pub fn restart_after(&mut self, between: impl FnOnce(&Rig)) {
        self.server.kill();
        between(self);
        self.server = serve(&self._db.path().join("a.db"), &self.args, &self.env);
    }

    pub fn create_session(&self) -> String {
        let (status, body) = self.server.api(
            "POST",
            "/api/sessions",
            Some(json!({"provider": self.provider, "cwd": self.cwd.path()})),
        );
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    /// Starts a turn and waits for its terminal; returns the turn id and the session's events.
    pub fn turn(&self, session: &str, prompt: &str) -> (String, Vec<Event>) {
        let turn = self.server.start_turn(session, prompt);
        let events = self.wait(session, "the turn to end", |e| ended(e, &turn));
        (turn, events)
    }

    /// Asserts that the CLI reached the fake model, and only with requests `allowed` accepts.
    pub fn assert_only_traffic(&self, allowed: impl Fn(&str, &str) -> bool) {
        let traffic = self.traffic();
        assert!(!traffic.is_empty(), "the CLI reached the fake model");
        for (method, path) in &traffic {
            assert!(allowed(method, path), "unexpected request {method} {path}");
        }
    }

    /// The basic scenario, the same for every CLI: two turns with distinct ids, each with
    /// exactly one user message and completed; the first streams the fake model's greeting
    /// in deltas. The CLI's own session id is kept as the resume handle. Returns the session,
    /// both turns, and the events up to the second's end.
    pub fn two_plain_turns(&self) -> (String, String, String, Vec<Event>) {
        let session = self.create_session();
        let (first, events) = self.turn(&session, "hello");
        assert_eq!(terminal(&events, &first).kind(), EventType::RunCompleted);
        let sent = of_run(&events, &first, EventType::MessageSent);
        assert_eq!(sent.len(), 1, "exactly one user message for the turn");
        assert_eq!(texts(&events, &first), ["Hello from the fake model."]);
        let streamed: String = of_run(&events, &first, EventType::MessageStreamed)
            .iter()
            .filter_map(|e| e.data_str("delta"))
            .collect();
        assert_eq!(streamed, "Hello from the fake model.");

        let (second, events) = self.turn(&session, "and again");
        assert_ne!(first, second);
        assert_eq!(terminal(&events, &second).kind(), EventType::RunCompleted);
        assert_eq!(of_run(&events, &second, EventType::MessageSent).len(), 1);
        super::assert_contiguous(&events);
        let (_, body) = self
            .server
            .api("GET", &format!("/api/sessions/{session}"), None);
        assert!(body["session"]["provider_session_id"].is_string(), "{body}");
        (session, first, second, events)
    }

    /// The resume scenario: the server is killed (`kill -9`) after turn `first`, starts
    /// again, and the session is resumed through the API; the next turn completes in the same
    /// log. Returns the events up to its end.
    pub fn resumed_turn(&mut self, session: &str, first: &str) -> Vec<Event> {
        self.restart();
        let (status, body) =
            self.server
                .api("POST", &format!("/api/sessions/{session}/resume"), None);
        assert_eq!(status, 200, "{body}");
        let (next, events) = self.turn(session, "which word did I ask you to remember?");
        assert_ne!(first, next);
        assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
        super::assert_contiguous(&events);
        events
    }

    /// The interrupt scenario, the same for every CLI: a slow turn, interrupted through the
    /// API once it streams, ends `run_cancelled`, and the next turn completes. Returns the
    /// session, the interrupted turn and the events up to its end.
    pub fn interrupted_slow_turn(&self) -> (String, String, Vec<Event>) {
        let session = self.create_session();
        let turn = self.server.start_turn(&session, "slow");
        self.wait(&session, "the answer to stream", |e| {
            e.iter().any(|e| e.kind() == EventType::MessageStreamed)
        });
        let path = format!("/api/sessions/{session}/interrupt");
        let (status, body) = self.server.api("POST", &path, None);
        assert_eq!(status, 204, "{body}");
        let events = self.wait(&session, "the turn to end", |e| ended(e, &turn));
        let end = terminal(&events, &turn);
        assert_eq!(end.kind(), EventType::RunCancelled, "{}", end.to_json());
        // One word for it whatever the CLI (docs/events.md, `run_cancelled.reason`).
        assert_eq!(
            end.data_str("reason"),
            Some("interrupted"),
            "{}",
            end.to_json()
        );
        let (next, after) = self.turn(&session, "hello after the interrupt");
        assert_eq!(terminal(&after, &next).kind(), EventType::RunCompleted);
        (session, turn, events)
    }

    /// The fast-failure scenario: the model API answers 401, the turn fails with a
    /// `provider_error` of one of `kinds`, and the session goes on. Returns the session.
    pub fn failed_turn_then_another(&self, kinds: &[&str]) -> String {
        let session = self.create_session();
        let (turn, events) = self.turn(&session, "http401");
        let end = terminal(&events, &turn);
        assert_eq!(end.kind(), EventType::RunFailed, "{}", end.to_json());
        let kind = end.data()["provider_error"]["kind"].as_str().unwrap_or("");
        assert!(kinds.contains(&kind), "{}", end.to_json());
        let (next, events) = self.turn(&session, "hello");
        assert_eq!(terminal(&events, &next).kind(), EventType::RunCompleted);
        session
    }

    /// Waits for an approval request in `turn`, answers it, and returns the turn's end.
    pub fn approve(&self, session: &str, turn: &str, decision: &str) -> Vec<Event> {
        let events = self.wait(session, "an approval request", |e| {
            e.iter()
                .any(|e| e.kind() == EventType::ToolApprovalRequested && e.run_id() == Some(turn))
                || ended(e, turn)
        });
        let request = of_run(&events, turn, EventType::ToolApprovalRequested);
        assert_eq!(request.len(), 1, "one approval request");
        let request_id = request[0].data_str("request_id").unwrap();
        let (status, body) = self.server.api(
            "POST",
            &format!("/api/sessions/{session}/approvals/{request_id}"),
            Some(json!({ "decision": decision })),
        );
        assert_eq!(status, 204, "{body}");
        self.wait(session, "the turn to end", |e| ended(e, turn))
    }

    /// Waits until the session's events satisfy `done`, within the rig's deadline.
    pub fn wait(&self, session: &str, what: &str, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        self.server
            .wait_events_within(session, what, self.deadline, done)
    }

    /// The (method, path) of every request the fake model received.
    pub fn traffic(&self) -> Vec<(String, String)> {
        self.fake
            .requests()
            .iter()
            .map(|r| {
                (
                    r["method"].as_str().unwrap().to_owned(),
                    r["path"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The session's traffic so far as `--record-dir` writes it (the agent's stdout lines and
    /// ours), parsed; a line being written is left out.
    pub fn recording(&self, session: &str) -> Vec<serde_json::Value> {
        let path = self.record.path().join(format!("{session}.jsonl"));
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until the session's recorded traffic satisfies `done`, within the rig's deadline.
    pub fn wait_recording(
        &self,
        session: &str,
        what: &str,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let start = std::time::Instant::now();
        loop {
            let lines = self.recording(session);
            if done(&lines) {
                return lines;
            }
            assert!(
                start.elapsed() < self.deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Waits until the fake model has received a request `done` accepts.
    pub fn wait_request(&self, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
        let start = std::time::Instant::now();
        while !self.fake.requests().iter().any(&done) {
            assert!(
                start.elapsed() < self.deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Starts (`true`) or ends an outage of the fake model's `outage` scenario.
    pub fn outage(&self, on: bool) {
        let method = if on { "POST" } else { "DELETE" };
        let (status, body) = super::http(self.fake.addr, method, "/_outage", None, &[]);
        assert_eq!(status, 204, "{body}");
    }

    /// Gemini CLI 0.61.0 keeps a session in `~/.gemini/tmp/<project>/chats/session-<UTC
    /// minute>-<id prefix>.jsonl`, and loading a session (`session/load`) first starts a new
    /// recording of it, at the name the current minute gives: within the minute the file was
    /// created, that is the session's own file, whose history is then reset before it is read
    /// ("No previous sessions found for this project."). A resume a minute later finds it
    /// intact. This dates the session files a minute (or more) back, as that later resume
    /// would find them.
    pub fn age_gemini_sessions(&self) {
        let tmp = self.home().join(".gemini/tmp");
        for project in std::fs::read_dir(&tmp).unwrap().flatten() {
            let chats = project.path().join("chats");
            let Ok(files) = std::fs::read_dir(&chats) else {
                continue;
            };
            for file in files.flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                // session-2026-12-01T11-15-6dd15773.jsonl
                let Some(rest) = name.strip_prefix("session-") else {
                    continue;
                };
                if rest.len() < 17 {
                    continue;
                }
                let aged = format!("session-2000-01-01T00-00{}", &rest[16..]);
                std::fs::rename(file.path(), chats.join(aged)).unwrap();
            }
        }
    }

    /// With `RECORD_TRANSCRIPTS=1`, keeps the session's raw traffic as
    /// tests/data/<format>/agentwire-fake__<name>.jsonl.
    pub fn keep_transcript(&self, session: &str, format: &str, name: &str) {
        if std::env::var_os("RECORD_TRANSCRIPTS").is_none() {
            return;
        }
        let from = self.record.path().join(format!("{session}.jsonl"));
        let to = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/data/{format}/agentwire-fake__{name}.jsonl"));
        std::fs::copy(&from, &to).unwrap();
    }
}

/// A place among the [`Slot::MAX`] rigs of a test binary that may run at once: the real CLIs
/// are heavy to start, and a dozen at once on two cores outlast any sane deadline.
struct Slot;

static SLOTS: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

impl Slot {
    const MAX: usize = 3;

    fn take() -> Slot {
        let (count, freed) = &SLOTS;
        let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= Slot::MAX {
            n = freed.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (count, freed) = &SLOTS;
        *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

fn serve(db: &Path, args: &[String], env: &[(String, String)]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start_with_env(db, &args, &env)
}

pub fn of_run<'a>(events: &'a [Event], run: &str, kind: EventType) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.run_id() == Some(run) && e.kind() == kind)
        .collect()
}

/// The one terminal of `run`.
pub fn terminal<'a>(events: &'a [Event], run: &str) -> &'a Event {
    let terminals: Vec<_> = events
        .iter()
        .filter(|e| e.run_id() == Some(run) && e.kind().is_run_terminal())
        .collect();
    assert_eq!(terminals.len(), 1, "exactly one terminal for {run}");
    terminals[0]
}

/// The `content` of the turn's whole (not discarded) received messages.
pub fn texts<'a>(events: &'a [Event], run: &str) -> Vec<&'a str> {
    of_run(events, run, EventType::MessageReceived)
        .iter()
        .filter(|e| e.data().get("discarded").is_none())
        .filter_map(|e| e.data_str("content"))
        .collect()
}
