//! `opencode serve`: an HTTP server per session instead of a stdio protocol.
//!
//! The server gets a random password (`OPENCODE_SERVER_PASSWORD`: HTTP Basic auth, user
//! `opencode`), so no other local program can drive the session, and `--port 0`: it binds a
//! port itself (OpenCode 1.18 tries its default 4096 first, then one the kernel picks) and
//! prints `opencode server listening on http://127.0.0.1:PORT` on its stdout, which only the
//! child can write. The adapter reads that line ([`Adapter::observe_log`]) and talks to that
//! port only, once the child holds it: no port is chosen ahead and named on the command line
//! (visible to every local user in `/proc/*/cmdline`), where another user could bind it first
//! and receive the password, the prompts, and answer with forged events. Nothing is sent
//! before the line arrives; a server that prints no such line within two minutes, or another
//! address, fails the session (`unreachable`).
//!
//! [`Adapter::connect`] starts a driver task that waits for that port, then for the server by
//! opening `GET /event` (retrying while it boots, within the same two minutes), forwards that
//! Server-Sent Events stream as the normalizer's input, then creates the OpenCode session
//! (`POST /session`, with a permission ruleset that asks before `bash`, `edit` and
//! `webfetch`), or reuses the one being resumed. Then, in order:
//!
//! * a prompt is `POST /session/:id/prompt_async {parts: [{type: "text", text}], agent?,
//!   model?}`, which returns at once (204; the blocking `POST /session/:id/message` would
//!   hold a request open for the whole turn); the turn's events arrive on `/event`;
//! * an interrupt is `POST /session/:id/abort`;
//! * an approval is `POST /session/:id/permissions/:permissionID {response: "once" |
//!   "reject"}` (OpenCode 1.18), the `request_id` being the `per_…` id of `permission.asked`.
//!
//! A request the server refuses fails the current turn (`request_failed`); a server that
//! never answers, or an event stream that ends, fails the session. Modes are OpenCode's
//! primary agents (`build`, `plan`), sent with each prompt; the model is
//! `providerID/modelID`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::http::{base64, next_chunk, Endpoint, HttpError};
use super::{Adapter, Capabilities, Feed, Mode, Thinking};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;
use crate::core::ErrorKind;

/// How long the server may take to say where it listens and answer its first request
/// (seconds when the machine is idle; it loads its provider plugins first).
const BOOT_DEADLINE: Duration = Duration::from_secs(120);
/// How long one attempt to reach it may take.
const ATTEMPT: Duration = Duration::from_secs(2);
/// What `opencode serve` prints on stdout once it listens (OpenCode 1.18, `Cli.serve`),
/// followed by `HOST:PORT`.
const LISTENING: &str = "opencode server listening on http://";

/// OpenCode's primary agents, the modes of a session; a prompt that names none goes to the
/// first, OpenCode's default.
const AGENTS: &[(&str, &str, &str)] = &[
    ("build", "Build", "The default agent, with every tool"),
    ("plan", "Plan", "Analyzes and plans without changing files"),
];

/// What the driver task is asked to do, in order.
#[derive(Debug)]
enum Op {
    Prompt {
        text: String,
        agent: Option<String>,
        model: Option<Value>,
    },
    Abort,
    Reply {
        permission: String,
        response: &'static str,
    },
}

/// Where the server listens, as it said: the port, or why its line is not one to trust.
type Listening = Result<u16, NotListening>;

/// Why the adapter will not talk to the server it started.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum NotListening {
    #[error("opencode serve listens somewhere unexpected: {0:?}")]
    Elsewhere(String),
    #[error("opencode serve did not say which port it listens on within {0} s")]
    Silent(u64),
}

/// An `opencode serve` process and the session the adapter drives in it.
pub struct OpencodeServe {
    program: PathBuf,
    password: String,
    /// Told the port once the server prints it ([`Adapter::observe_log`]).
    port_tx: Option<oneshot::Sender<Listening>>,
    /// Handed to the driver by [`Adapter::connect`].
    port_rx: Option<oneshot::Receiver<Listening>>,
    resume: Option<String>,
    agent: Option<String>,
    model: Option<Value>,
    ops: Option<mpsc::UnboundedSender<Op>>,
    driver: Option<JoinHandle<()>>,
}

impl OpencodeServe {
    /// `opencode serve` at `program`, on a loopback port it binds itself. The CLI inherits
    /// the companion's environment (`OPENCODE_CONFIG` and its own config files choose the
    /// model).
    pub fn new(program: PathBuf, password: String) -> OpencodeServe {
        let (port_tx, port_rx) = oneshot::channel();
        OpencodeServe {
            program,
            password,
            port_tx: Some(port_tx),
            port_rx: Some(port_rx),
            resume: None,
            agent: None,
            model: None,
            ops: None,
            driver: None,
        }
    }

    /// Goes on with the OpenCode session `id` (the `provider_session_id`): OpenCode keeps its
    /// sessions on disk, so a new server finds it.
    pub fn resuming(mut self, id: &str) -> OpencodeServe {
        self.resume = Some(id.to_owned());
        self
    }

    fn authorization(&self) -> String {
        let credentials = format!("opencode:{}", self.password);
        format!("Basic {}", base64(credentials.as_bytes()))
    }

    fn send(&self, op: Op) {
        if let Some(ops) = &self.ops {
            let _ = ops.send(op);
        }
    }
}

impl Drop for OpencodeServe {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abort();
        }
    }
}

impl Adapter for OpencodeServe {
    fn provider(&self) -> Provider {
        Provider::Opencode
    }

    fn format(&self) -> Format {
        Format::Opencode
    }

    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .env("OPENCODE_SERVER_PASSWORD", &self.password)
            .current_dir(cwd);
        cmd
    }

    fn connect(&mut self, _cwd: &Path) -> Option<mpsc::UnboundedReceiver<Feed>> {
        let listening = self.port_rx.take()?;
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let (feed, feed_rx) = mpsc::unbounded_channel();
        let authorization = self.authorization();
        let driver = Driver::start(listening, authorization, self.resume.clone(), feed, ops_rx);
        self.ops = Some(ops);
        self.driver = Some(tokio::spawn(driver));
        Some(feed_rx)
    }

    /// The first `opencode server listening on …` line tells the driver the port.
    fn observe_log(&mut self, line: &[u8]) {
        if let Some(listening) = listening_port(line) {
            if let Some(port) = self.port_tx.take() {
                let _ = port.send(listening);
            }
        }
    }

    fn prompt(&mut self, text: &str) -> Vec<u8> {
        self.send(Op::Prompt {
            text: text.to_owned(),
            agent: self.agent.clone(),
            model: self.model.clone(),
        });
        Vec::new()
    }

    fn interrupt(&mut self, _request_id: &str) -> Vec<u8> {
        self.send(Op::Abort);
        Vec::new()
    }

    fn answer(&mut self, request_id: &str, decision: Decision, _request: &Value) -> Vec<u8> {
        let response = match decision {
            Decision::Allow => "once",
            Decision::Deny => "reject",
        };
        self.send(Op::Reply {
            permission: request_id.to_owned(),
            response,
        });
        Vec::new()
    }

    fn reports_answers(&self) -> bool {
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            set_mode: true,
            set_model: true,
            thinking: false,
            commands: false,
            resume: true,
        }
    }

    fn modes(&self) -> Vec<Mode> {
        AGENTS
            .iter()
            .map(|(id, name, description)| Mode::new(id, name, description))
            .collect()
    }

    /// The agent the next prompt goes to: the one set, else OpenCode's default (`build`).
    fn current_mode(&self) -> Option<String> {
        Some(self.agent.clone().unwrap_or_else(|| AGENTS[0].0.to_owned()))
    }

    /// The agent goes with each following prompt.
    fn set_mode(&mut self, mode: &str) -> Vec<u8> {
        self.agent = Some(mode.to_owned());
        Vec::new()
    }

    /// `providerID/modelID`, sent with each following prompt.
    fn set_model(&mut self, model: Option<&str>, _thinking: Option<Thinking>) -> Vec<u8> {
        if let Some(model) = model {
            let (provider, id) = model.split_once('/').unwrap_or(("", model));
            self.model = Some(json!({"providerID": provider, "modelID": id}));
        }
        Vec::new()
    }
}

/// The task that talks HTTP to the server.
struct Driver {
    endpoint: Endpoint,
    resume: Option<String>,
    feed: mpsc::UnboundedSender<Feed>,
}

impl Driver {
    /// Waits for the server to say which port it listens on (nothing is sent before), then
    /// drives it there.
    async fn start(
        listening: oneshot::Receiver<Listening>,
        authorization: String,
        resume: Option<String>,
        feed: mpsc::UnboundedSender<Feed>,
        ops: mpsc::UnboundedReceiver<Op>,
    ) {
        let started = Instant::now();
        let said = match tokio::time::timeout(BOOT_DEADLINE, listening).await {
            Ok(Ok(said)) => said,
            // The adapter is gone, and the session with it.
            Ok(Err(_)) => return,
            Err(_) => Err(NotListening::Silent(BOOT_DEADLINE.as_secs())),
        };
        let port = match said {
            Ok(port) => port,
            Err(message) => {
                let _ = feed.send(Feed::Failed {
                    kind: ErrorKind::Unreachable,
                    message: message.to_string(),
                    fatal: true,
                });
                return;
            }
        };
        let driver = Driver {
            endpoint: Endpoint {
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                authorization: Some(authorization),
            },
            resume,
            feed,
        };
        driver.run(started, ops).await
    }

    async fn run(self, started: Instant, mut ops: mpsc::UnboundedReceiver<Op>) {
        let mut events = loop {
            // While it boots, the server may accept a connection and never answer it.
            let attempt = tokio::time::timeout(ATTEMPT, self.endpoint.stream("/event")).await;
            match attempt {
                Ok(Ok(body)) => break body,
                failed if started.elapsed() > BOOT_DEADLINE => {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "no answer".to_owned(),
                    };
                    return self.fail(
                        ErrorKind::Unreachable,
                        format!("opencode serve never answered: {why}"),
                        true,
                    );
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let feed = self.feed.clone();
        tokio::spawn(async move {
            while let Some(chunk) = next_chunk(&mut events).await {
                if feed.send(Feed::Bytes(chunk.to_vec())).is_err() {
                    return;
                }
            }
            let _ = feed.send(Feed::Failed {
                kind: ErrorKind::EventStreamClosed,
                message: "opencode serve closed its event stream".into(),
                fatal: true,
            });
        });
        let session = match self.session().await {
            Ok(id) => id,
            Err(e) => return self.fail(ErrorKind::RequestFailed, e.to_string(), true),
        };
        while let Some(op) = ops.recv().await {
            let (path, body) = match op {
                Op::Prompt { text, agent, model } => {
                    let mut body = json!({"parts": [{"type": "text", "text": text}]});
                    if let Some(agent) = agent {
                        body["agent"] = json!(agent);
                    }
                    if let Some(model) = model {
                        body["model"] = model;
                    }
                    (format!("/session/{session}/prompt_async"), Some(body))
                }
                Op::Abort => (format!("/session/{session}/abort"), None),
                Op::Reply {
                    permission,
                    response,
                } => (
                    format!("/session/{session}/permissions/{permission}"),
                    Some(json!({ "response": response })),
                ),
            };
            match self.endpoint.json("POST", &path, body.as_ref()).await {
                Ok((status, _)) if (200..300).contains(&status) => {}
                Ok((status, body)) => {
                    let body = String::from_utf8_lossy(&body);
                    let message = format!("POST {path}: HTTP {status}: {body}");
                    self.fail(ErrorKind::RequestFailed, message, false);
                }
                Err(e) => self.fail(ErrorKind::RequestFailed, e.to_string(), false),
            }
        }
    }

    /// The session to drive: the resumed one if the server knows it, else a new one.
    async fn session(&self) -> Result<String, HttpError> {
        if let Some(id) = &self.resume {
            let (status, _) = self
                .endpoint
                .json("GET", &format!("/session/{id}"), None)
                .await?;
            if status == 200 {
                return Ok(id.clone());
            }
        }
        let ask =
            |permission: &str| json!({"permission": permission, "pattern": "*", "action": "ask"});
        let body = json!({"permission": [ask("bash"), ask("edit"), ask("webfetch")]});
        let (status, answer) = self.endpoint.json("POST", "/session", Some(&body)).await?;
        let session: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        match session.get("id").and_then(Value::as_str) {
            Some(id) if status == 200 => Ok(id.to_owned()),
            _ => Err(HttpError::Status {
                what: "POST /session".into(),
                status,
                body: String::from_utf8_lossy(&answer).into_owned(),
            }),
        }
    }

    fn fail(&self, kind: ErrorKind, message: String, fatal: bool) {
        let _ = self.feed.send(Feed::Failed {
            kind,
            message,
            fatal,
        });
    }
}

/// What a line of the server's stdout says about where it listens: `None` for any line but
/// OpenCode's `opencode server listening on http://HOST:PORT`; for that one the port, when
/// `HOST` is the loopback address the server was told to use and `PORT` a real port.
fn listening_port(line: &[u8]) -> Option<Listening> {
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    let address = line.strip_prefix(LISTENING)?;
    let port = address
        .trim_end_matches('/')
        .strip_prefix("127.0.0.1:")
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|port| port.parse::<u16>().ok())
        .filter(|&port| port != 0);
    Some(port.ok_or_else(|| NotListening::Elsewhere(line.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_binds_its_own_loopback_port_and_gets_a_password() {
        let a = OpencodeServe::new("opencode".into(), "pw".into());
        let cmd = a.command(Path::new("/tmp"));
        let args: Vec<_> = cmd.as_std().get_args().map(|a| a.to_owned()).collect();
        assert_eq!(args, ["serve", "--hostname", "127.0.0.1", "--port", "0"]);
        let env: Vec<_> = cmd.as_std().get_envs().collect();
        assert_eq!(
            env,
            [(
                std::ffi::OsStr::new("OPENCODE_SERVER_PASSWORD"),
                Some(std::ffi::OsStr::new("pw"))
            )]
        );
        assert_eq!(a.authorization(), "Basic b3BlbmNvZGU6cHc=");
    }

    #[test]
    fn only_the_servers_listening_line_on_loopback_gives_the_port() {
        #[track_caller]
        fn check(line: &str, expect: Option<Result<u16, ()>>) {
            let got = listening_port(line.as_bytes()).map(|r| r.map_err(|_| ()));
            assert_eq!(got, expect, "{line:?}");
        }
        let unexpected = Some(Err(()));
        let on = |address: &str| format!("opencode server listening on http://{address}");
        check(&on("127.0.0.1:4096"), Some(Ok(4096)));
        check(&on("127.0.0.1:38535\r"), Some(Ok(38535)));
        check(&on("127.0.0.1:38535/"), Some(Ok(38535)));
        for address in [
            "0.0.0.0:4096",
            "localhost:4096",
            "127.0.0.1:0",
            "127.0.0.1:70000",
            "127.0.0.1:+80",
            "127.0.0.1:",
            "127.0.0.1:80x",
            "127.0.0.1.evil:80",
        ] {
            check(&on(address), unexpected);
        }
        check(
            "Warning: OPENCODE_SERVER_PASSWORD is not set; server is unsecured.",
            None,
        );
        check(&format!("data: {}", on("127.0.0.1:4096")), None);
        check("", None);
    }

    #[test]
    fn the_first_listening_line_tells_the_driver_and_later_ones_change_nothing() {
        let mut a = OpencodeServe::new("opencode".into(), "pw".into());
        let mut port = a.port_rx.take().unwrap();
        a.observe_log(b"Warning: something");
        assert!(port.try_recv().is_err(), "no port yet");
        a.observe_log(b"opencode server listening on http://127.0.0.1:41000");
        a.observe_log(b"opencode server listening on http://127.0.0.1:42000");
        assert_eq!(port.try_recv(), Ok(Ok(41000)));
    }

    /// The driver told `said` about the port, and its feed.
    fn drive(said: Listening) -> (mpsc::UnboundedReceiver<Feed>, JoinHandle<()>) {
        let (port_tx, port_rx) = oneshot::channel();
        let (feed, feed_rx) = mpsc::unbounded_channel();
        let (_ops, ops_rx) = mpsc::unbounded_channel();
        let auth = "Basic b3BlbmNvZGU6cHc=".to_owned();
        let driver = tokio::spawn(Driver::start(port_rx, auth, None, feed, ops_rx));
        port_tx.send(said).unwrap();
        (feed_rx, driver)
    }

    #[test]
    fn the_driver_talks_to_the_port_the_server_said_and_fails_on_a_bad_line() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::AsyncReadExt;
            let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = server.local_addr().unwrap().port();
            let (_feed, _driver) = drive(Ok(port));
            let (mut conn, _) = server.accept().await.unwrap();
            let mut head = vec![0; 4096];
            let n = conn.read(&mut head).await.unwrap();
            let head = String::from_utf8_lossy(&head[..n]);
            assert!(head.starts_with("GET /event "), "{head}");
            assert!(
                head.contains("authorization: Basic b3BlbmNvZGU6cHc="),
                "{head}"
            );

            let (mut feed, _driver) = drive(Err(NotListening::Elsewhere("0.0.0.0:4096".into())));
            match feed.recv().await {
                Some(Feed::Failed {
                    kind: ErrorKind::Unreachable,
                    message,
                    fatal: true,
                }) => assert_eq!(
                    message,
                    "opencode serve listens somewhere unexpected: \"0.0.0.0:4096\""
                ),
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn the_mode_in_use_is_build_until_another_is_set() {
        let mut a = OpencodeServe::new("opencode".into(), "pw".into());
        let modes: Vec<String> = a.modes().into_iter().map(|m| m.id).collect();
        assert_eq!(modes, ["build", "plan"]);
        assert_eq!(a.current_mode().as_deref(), Some("build"));
        a.set_mode("plan");
        assert_eq!(a.current_mode().as_deref(), Some("plan"));
        a.set_mode("build");
        assert_eq!(a.current_mode().as_deref(), Some("build"));
    }
}
