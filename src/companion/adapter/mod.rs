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

mod claude;
mod codex;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::process::Command;

pub use claude::ClaudeStdio;
pub use codex::CodexAppServer;

use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// What the companion needs to host one kind of agent process. The host calls [`start`]
/// once after spawning, [`observe`] with every complete stdout line, and writes whatever
/// bytes each method returns to the child's stdin, in order.
///
/// [`start`]: Adapter::start
/// [`observe`]: Adapter::observe
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
        hosted: false,
    },
    AgentCli {
        provider: "opencode",
        title: "OpenCode",
        program: "opencode",
        package: "opencode-ai",
        hosted: false,
    },
    AgentCli {
        provider: "amp",
        title: "Amp",
        program: "amp",
        package: "@sourcegraph/amp",
        hosted: false,
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

/// One JSON value as an NDJSON line.
pub(crate) fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("JSON values serialize");
    bytes.push(b'\n');
    bytes
}
