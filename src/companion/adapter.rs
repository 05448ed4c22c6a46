//! Provider adapters: how to start an agent CLI and speak to it on stdin. One per protocol.
//!
//! An adapter knows nothing of sessions, stores or sockets: it builds the child's command
//! line and encodes prompts, interrupts and approval answers as the bytes the CLI expects.
//! Reading the CLI's output is the core normalizer's job ([`Adapter::format`]).

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
