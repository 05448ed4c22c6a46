//! Provider adapters: how to start an agent CLI and speak to it on stdin. One per protocol.
//!
//! An adapter knows nothing of sessions, stores or sockets: it builds the child's command
//! line and encodes prompts, interrupts and approval answers as the bytes the CLI expects.
//! Reading the CLI's output is the core normalizer's job ([`Adapter::format`]).
//! [`AGENT_CLIS`] lists the CLIs it can look for, where, and how to install them.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::process::Command;

use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// What the companion needs to host one kind of agent process.
pub trait Adapter: Send + Sync {
    fn provider(&self) -> Provider;
    /// The format of the child's stdout.
    fn format(&self) -> Format;
    /// The command that starts the agent in `cwd`.
    fn command(&self, cwd: &Path) -> Command;
    /// The stdin bytes that submit a prompt.
    fn prompt(&self, text: &str) -> Vec<u8>;
    /// The stdin bytes that interrupt the current turn; `request_id` is unique per session.
    fn interrupt(&self, request_id: &str) -> Vec<u8>;
    /// The stdin bytes that answer an approval request; `request` is the data of its
    /// `tool_approval_requested` event.
    fn answer(&self, request_id: &str, decision: Decision, request: &Value) -> Vec<u8>;
}

/// Claude Code's stream-json protocol on stdin/stdout, spoken by the real `claude` CLI and by
/// the built-in demo agent.
pub struct ClaudeStdio {
    provider: Provider,
    program: PathBuf,
    args: Vec<String>,
}

impl ClaudeStdio {
    /// The real Claude Code CLI at `program`, in stream-json mode both ways with partial
    /// messages, asking permission on stdio; resuming the CLI's own session `resume` if given.
    /// The CLI inherits the companion's environment (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`,
    /// `HOME`, …). Its stdin must stay open until the turn's `result`: at EOF before the first
    /// turn it exits without output.
    pub fn claude(program: PathBuf, resume: Option<&str>) -> ClaudeStdio {
        let mut args: Vec<String> = [
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-prompt-tool",
            "stdio",
        ]
        .map(String::from)
        .into();
        if let Some(id) = resume {
            args.extend(["--resume".to_owned(), id.to_owned()]);
        }
        ClaudeStdio {
            provider: Provider::Claude,
            program,
            args,
        }
    }

    /// The built-in demo agent: this very binary, run as `agentwire demo-agent`.
    pub fn demo(program: PathBuf, delay_ms: u64) -> ClaudeStdio {
        ClaudeStdio {
            provider: Provider::Demo,
            program,
            args: vec![
                "demo-agent".into(),
                "--delay-ms".into(),
                delay_ms.to_string(),
            ],
        }
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
        hosted: false,
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

fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("JSON values serialize");
    bytes.push(b'\n');
    bytes
}

impl Adapter for ClaudeStdio {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn format(&self) -> Format {
        Format::Claude
    }

    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).current_dir(cwd);
        cmd
    }

    fn prompt(&self, text: &str) -> Vec<u8> {
        line(json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }))
    }

    fn interrupt(&self, request_id: &str) -> Vec<u8> {
        line(json!({
            "type": "control_request",
            "request_id": request_id,
            "request": {"subtype": "interrupt"},
        }))
    }

    fn answer(&self, request_id: &str, decision: Decision, request: &Value) -> Vec<u8> {
        let response = match decision {
            Decision::Allow => json!({
                "behavior": "allow",
                "updatedInput": request.get("tool_input").cloned().unwrap_or(json!({})),
            }),
            Decision::Deny => {
                json!({"behavior": "deny", "message": "The user denied this tool use."})
            }
        };
        line(json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }))
    }
}
