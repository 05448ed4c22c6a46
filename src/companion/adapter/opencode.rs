//! `opencode serve`: an HTTP server per session instead of a stdio protocol.
//!
//! The adapter picks a free loopback port and a random password (`OPENCODE_SERVER_PASSWORD`:
//! HTTP Basic auth, user `opencode`), so no other local program can drive the session.
//! [`Adapter::connect`] starts a driver task that waits for the server by opening `GET
//! /event` (retrying for up to two minutes while it boots), forwards that Server-Sent Events
//! stream as the normalizer's input, then creates the OpenCode session (`POST /session`, with
//! a permission ruleset that asks before `bash`, `edit` and `webfetch`), or reuses the one
//! being resumed. Then, in order:
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
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::http::{base64, next_chunk, Endpoint};
use super::{Adapter, Capabilities, Feed, Mode, Thinking};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;
use crate::core::ErrorKind;

/// How long the server may take to answer its first request (seconds when the machine is
/// idle; it loads its provider plugins first).
const BOOT_DEADLINE: Duration = Duration::from_secs(120);
/// How long one attempt to reach it may take.
const ATTEMPT: Duration = Duration::from_secs(2);

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

/// An `opencode serve` process and the session the adapter drives in it.
pub struct OpencodeServe {
    program: PathBuf,
    port: u16,
    password: String,
    resume: Option<String>,
    agent: Option<String>,
    model: Option<Value>,
    ops: Option<mpsc::UnboundedSender<Op>>,
    driver: Option<JoinHandle<()>>,
}

impl OpencodeServe {
    /// `opencode serve` at `program` on a free loopback port. The CLI inherits the
    /// companion's environment (`OPENCODE_CONFIG` and its own config files choose the model).
    pub fn new(program: PathBuf, password: String) -> std::io::Result<OpencodeServe> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(OpencodeServe {
            program,
            port,
            password,
            resume: None,
            agent: None,
            model: None,
            ops: None,
            driver: None,
        })
    }

    /// Goes on with the OpenCode session `id` (the `provider_session_id`): OpenCode keeps its
    /// sessions on disk, so a new server finds it.
    pub fn resuming(mut self, id: &str) -> OpencodeServe {
        self.resume = Some(id.to_owned());
        self
    }

    fn endpoint(&self) -> Endpoint {
        let credentials = format!("opencode:{}", self.password);
        Endpoint {
            addr: SocketAddr::from(([127, 0, 0, 1], self.port)),
            authorization: Some(format!("Basic {}", base64(credentials.as_bytes()))),
        }
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
        cmd.args(["serve", "--hostname", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .env("OPENCODE_SERVER_PASSWORD", &self.password)
            .current_dir(cwd);
        cmd
    }

    fn connect(&mut self, _cwd: &Path) -> Option<mpsc::UnboundedReceiver<Feed>> {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let (feed, feed_rx) = mpsc::unbounded_channel();
        let driver = Driver {
            endpoint: self.endpoint(),
            resume: self.resume.clone(),
            feed,
        };
        self.ops = Some(ops);
        self.driver = Some(tokio::spawn(driver.run(ops_rx)));
        Some(feed_rx)
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
    async fn run(self, mut ops: mpsc::UnboundedReceiver<Op>) {
        let started = Instant::now();
        let mut events = loop {
            // While it boots, the server may accept a connection and never answer it.
            let attempt = tokio::time::timeout(ATTEMPT, self.endpoint.stream("/event")).await;
            match attempt.unwrap_or_else(|_| Err("no answer".to_owned())) {
                Ok(body) => break body,
                Err(e) if started.elapsed() > BOOT_DEADLINE => {
                    return self.fail(
                        ErrorKind::Unreachable,
                        format!("opencode serve never answered: {e}"),
                        true,
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
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
            Err(e) => return self.fail(ErrorKind::RequestFailed, e, true),
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
                Err(e) => self.fail(ErrorKind::RequestFailed, e, false),
            }
        }
    }

    /// The session to drive: the resumed one if the server knows it, else a new one.
    async fn session(&self) -> Result<String, String> {
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
            _ => Err(format!(
                "POST /session: HTTP {status}: {}",
                String::from_utf8_lossy(&answer)
            )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_gets_a_loopback_port_and_a_password() {
        let a = OpencodeServe::new("opencode".into(), "pw".into()).unwrap();
        let cmd = a.command(Path::new("/tmp"));
        let args: Vec<_> = cmd.as_std().get_args().map(|a| a.to_owned()).collect();
        assert_eq!(args[..4], ["serve", "--hostname", "127.0.0.1", "--port"]);
        assert_ne!(a.port, 0);
        let env: Vec<_> = cmd.as_std().get_envs().collect();
        assert_eq!(
            env,
            [(
                std::ffi::OsStr::new("OPENCODE_SERVER_PASSWORD"),
                Some(std::ffi::OsStr::new("pw"))
            )]
        );
        assert_eq!(
            a.endpoint().authorization.as_deref(),
            Some("Basic b3BlbmNvZGU6cHc=")
        );
    }

    #[test]
    fn the_mode_in_use_is_build_until_another_is_set() {
        let mut a = OpencodeServe::new("opencode".into(), "pw".into()).unwrap();
        let modes: Vec<String> = a.modes().into_iter().map(|m| m.id).collect();
        assert_eq!(modes, ["build", "plan"]);
        assert_eq!(a.current_mode().as_deref(), Some("build"));
        a.set_mode("plan");
        assert_eq!(a.current_mode().as_deref(), Some("plan"));
        a.set_mode("build");
        assert_eq!(a.current_mode().as_deref(), Some("build"));
    }
}
