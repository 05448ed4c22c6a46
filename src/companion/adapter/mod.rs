//! Provider adapters: how to start an agent CLI and speak to it on stdin. One per protocol.
//!
//! An adapter knows nothing of sessions, stores or sockets: it builds the child's command
//! line and encodes prompts, interrupts and approval answers as the bytes the CLI expects.
//! Reading the CLI's output is the core normalizer's job ([`Adapter::format`]); an adapter
//! whose protocol needs bookkeeping (a handshake, ids the CLI hands out) also sees each
//! stdout line through [`Adapter::observe`] and may answer it. [`AGENT_CLIS`] lists the CLIs
//! the companion can look for, where, and how to install them.
//!
//! * [`ClaudeStdio`]: Claude Code's stream-json (the real CLI and the demo agent).
//! * [`CodexAppServer`]: `codex app-server`, JSON-RPC over stdio.
//! * [`AcpStdio`]: any Agent Client Protocol agent (`gemini --experimental-acp`).
//! * [`OpencodeServe`]: `opencode serve`, HTTP requests in, its `/event` SSE stream out
//!   ([`Adapter::connect`]).
//! * [`AmpStdio`]: `amp --execute --stream-json`, one process per turn.
//!
//! Beyond prompts, interrupts and approvals, an adapter says what else its CLI can do
//! ([`Capabilities`]): modes (`set_mode`), the model and thinking (`set_model`), slash
//! commands, and resuming the CLI's own session after a restart. The host refuses what an
//! adapter lacks with the code `unsupported` and never calls it.

mod acp;
mod amp;
mod claude;
mod codex;
mod http;
mod opencode;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::mpsc;

pub use acp::AcpStdio;
pub use amp::AmpStdio;
pub use claude::ClaudeStdio;
pub use codex::CodexAppServer;
pub use opencode::OpencodeServe;

use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;
pub use crate::core::wire::Thinking;

/// What an adapter can do besides prompts, interrupts and approvals (all `false` by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// [`Adapter::set_mode`] works; [`Adapter::modes`] lists the modes.
    pub set_mode: bool,
    /// [`Adapter::set_model`] can change the model.
    pub set_model: bool,
    /// [`Adapter::set_model`] can change the thinking level.
    pub thinking: bool,
    /// The CLI reports its slash commands.
    pub commands: bool,
    /// A session can be resumed after a restart from its `provider_session_id`.
    pub resume: bool,
}

/// A mode the agent can be put in (a permission mode, an approval policy, an ACP mode).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mode {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Mode {
    pub(crate) fn new(id: &str, name: &str, description: &str) -> Mode {
        Mode {
            id: id.to_owned(),
            name: name.to_owned(),
            description: (!description.is_empty()).then(|| description.to_owned()),
        }
    }
}

/// Output of an agent whose events do not come on its stdout ([`Adapter::connect`]).
#[derive(Debug)]
pub enum Feed {
    /// Bytes for the normalizer, as the CLI sent them.
    Bytes(Vec<u8>),
    /// A request to the agent failed: the current turn fails with this `provider_error`
    /// kind and message; `fatal` also ends the session (the agent cannot be reached).
    Failed {
        kind: crate::core::ErrorKind,
        message: String,
        fatal: bool,
    },
}

/// What the companion needs to host one kind of agent process. The host calls [`start`]
/// once after spawning, [`observe`] with every complete stdout line, and writes whatever
/// bytes each method returns to the child's stdin, in order.
///
/// An agent that is not driven over stdio ([`OpencodeServe`]) returns its event stream from
/// [`connect`] and does its own requests; its methods then return no bytes.
///
/// [`start`]: Adapter::start
/// [`observe`]: Adapter::observe
/// [`connect`]: Adapter::connect
pub trait Adapter: Send + Sync {
    fn provider(&self) -> Provider;
    /// The format of the child's stdout.
    fn format(&self) -> Format;
    /// The command that starts the agent in `cwd`.
    fn command(&self, cwd: &Path) -> Command;
    /// The stdin bytes to write once the process runs (a handshake); none by default.
    fn start(&mut self, _cwd: &Path) -> Vec<u8> {
        Vec::new()
    }
    /// Sees one stdout line (without its newline) and returns the stdin bytes it calls for
    /// (answers to the protocol, prompts that waited for it); none by default.
    fn observe(&mut self, _line: &[u8]) -> Vec<u8> {
        Vec::new()
    }
    /// The stdin bytes that submit a prompt (possibly none yet, if the protocol must first
    /// finish its handshake: [`Adapter::observe`] sends it then).
    fn prompt(&mut self, text: &str) -> Vec<u8>;
    /// The stdin bytes that interrupt the current turn; `request_id` is unique per session.
    fn interrupt(&mut self, request_id: &str) -> Vec<u8>;
    /// The stdin bytes that answer an approval request; `request` is the data of its
    /// `tool_approval_requested` event.
    fn answer(&mut self, request_id: &str, decision: Decision, request: &Value) -> Vec<u8>;

    /// What else this adapter can do.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    /// The modes [`Adapter::set_mode`] accepts (known now; an ACP agent lists them late).
    fn modes(&self) -> Vec<Mode> {
        Vec::new()
    }
    /// The mode in use, when the adapter decides it (it picks the agent each prompt goes
    /// to); otherwise the host learns it from the agent's events.
    fn current_mode(&self) -> Option<String> {
        None
    }
    /// The stdin bytes that switch to `mode`, one of [`Adapter::modes`]. Called only when
    /// [`Capabilities::set_mode`] holds.
    fn set_mode(&mut self, _mode: &str) -> Vec<u8> {
        Vec::new()
    }
    /// The stdin bytes that change the model and/or the thinking level. Called only for what
    /// [`Capabilities`] says is supported.
    fn set_model(&mut self, _model: Option<&str>, _thinking: Option<Thinking>) -> Vec<u8> {
        Vec::new()
    }
    /// The slash commands, when the adapter learns them from the protocol (an ACP
    /// `available_commands_update`); otherwise the host reads them from `session_started`.
    fn commands(&self) -> Option<Vec<Value>> {
        None
    }
    /// Whether the normalizer also reads the lines written to the agent. A JSON-RPC decoder
    /// needs the client's own requests to read their responses (a prompt's answer ends the
    /// turn); such a decoder then also reports the approval answers itself.
    fn feeds_requests(&self) -> bool {
        false
    }
    /// Whether the agent's own output reports the user's approval answers (an ACP decoder
    /// reading our answer, OpenCode's `permission.replied`); the host then adds none.
    fn reports_answers(&self) -> bool {
        self.feeds_requests()
    }
    /// True while the agent's output is protocol chatter that must not reach the log (the
    /// history an ACP `session/load` replays). Asked after each [`Adapter::observe`].
    fn quiet(&self) -> bool {
        false
    }
    /// For an agent whose events do not come on stdout: starts talking to it, once the
    /// process runs, and returns its event stream (stdout is then only a log).
    fn connect(&mut self, _cwd: &Path) -> Option<mpsc::UnboundedReceiver<Feed>> {
        None
    }
}

/// An agent CLI the companion can look for, and how to install it.
#[derive(Clone, Copy, Debug)]
pub struct AgentCli {
    /// The provider name in the API (`"claude"`).
    pub provider: &'static str,
    /// What users call it.
    pub title: &'static str,
    /// The executable's name.
    pub program: &'static str,
    /// Its npm package.
    pub package: &'static str,
    /// Whether this companion has an adapter for it yet.
    pub hosted: bool,
}

/// Every agent CLI the companion knows of.
pub const AGENT_CLIS: &[AgentCli] = &[
    AgentCli {
        provider: "claude",
        title: "Claude Code",
        program: "claude",
        package: "@anthropic-ai/claude-code",
        hosted: true,
    },
    AgentCli {
        provider: "codex",
        title: "Codex",
        program: "codex",
        package: "@openai/codex",
        hosted: true,
    },
    AgentCli {
        provider: "gemini",
        title: "Gemini CLI",
        program: "gemini",
        package: "@google/gemini-cli",
        hosted: true,
    },
    AgentCli {
        provider: "opencode",
        title: "OpenCode",
        program: "opencode",
        package: "opencode-ai",
        hosted: true,
    },
    AgentCli {
        provider: "amp",
        title: "Amp",
        program: "amp",
        package: "@sourcegraph/amp",
        hosted: true,
    },
];

impl AgentCli {
    pub fn by_provider(provider: &str) -> Option<&'static AgentCli> {
        AGENT_CLIS.iter().find(|c| c.provider == provider)
    }

    /// The executable: in `cli_dir` first (where `scripts/install-clis` puts the pinned
    /// versions), then on `PATH`.
    pub fn find(&self, cli_dir: &Path) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::iter::once(cli_dir.to_owned())
            .chain(std::env::split_paths(&path))
            .map(|dir| dir.join(self.program))
            .find(|candidate| is_executable(candidate))
    }

    /// The message of a `cli_not_found` error.
    pub fn not_found(&self, cli_dir: &Path) -> String {
        if self.provider == "amp" {
            // Not among the pinned test CLIs: its model runs behind Sourcegraph's service.
            return format!(
                "{} (`{}`) was not found in {} or on PATH; install it with `npm install -g {}` \
                 and sign in (`amp login`, or AMP_API_KEY)",
                self.title,
                self.program,
                cli_dir.display(),
                self.package
            );
        }
        format!(
            "{} (`{}`) was not found in {} or on PATH; install it with `scripts/install-clis` \
             (pinned versions into .agentwire/clis) or `npm install -g {}`",
            self.title,
            self.program,
            cli_dir.display(),
            self.package
        )
    }
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// A JSON-RPC 2.0 message (with its `"jsonrpc"` header) as an NDJSON line.
pub(crate) fn rpc_line(mut value: Value) -> Vec<u8> {
    if let Value::Object(m) = &mut value {
        m.insert("jsonrpc".into(), Value::from("2.0"));
    }
    line(value)
}

/// One JSON value as an NDJSON line.
pub(crate) fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("JSON values serialize");
    bytes.push(b'\n');
    bytes
}

/// The JSON lines an adapter wrote (the inverse of [`line`]), for its tests.
#[cfg(test)]
pub(crate) fn lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}
