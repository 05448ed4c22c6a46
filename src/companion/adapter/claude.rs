//! Claude Code's stream-json protocol on stdin/stdout, spoken by the real `claude` CLI and by
//! the built-in demo agent: user messages and `control_request`s in, NDJSON out, permission
//! prompts as `can_use_tool` control requests answered with `control_response`s.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::process::Command;

use super::{line, Adapter, Capabilities, Mode, Thinking};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// Claude Code's stream-json protocol on stdin/stdout, spoken by the real `claude` CLI and by
/// the built-in demo agent.
pub struct ClaudeStdio {
    provider: Provider,
    program: PathBuf,
    args: Vec<String>,
    /// Control requests we sent, for unique ids.
    controls: u64,
}

/// Claude Code's permission modes (`--permission-mode`), set live with `set_permission_mode`.
/// The permission modes the demo agent acts on (`agentwire demo-agent`).
const DEMO_MODES: &[&str] = &["default", "dontAsk", "bypassPermissions"];

const PERMISSION_MODES: &[(&str, &str, &str)] = &[
    ("default", "Default", "Asks before tools that change things"),
    ("acceptEdits", "Accept edits", "Edits files without asking"),
    ("plan", "Plan", "Plans without changing anything"),
    ("auto", "Auto", "Decides by itself which tools need asking"),
    (
        "dontAsk",
        "Don't ask",
        "Refuses what it would have asked about",
    ),
    (
        "bypassPermissions",
        "Bypass permissions",
        "Runs every tool without asking",
    ),
];

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
            controls: 0,
        }
    }

    /// The built-in demo agent: this very binary, run as `agentwire demo-agent`.
    pub fn demo(program: PathBuf, delay_ms: u64, resume: Option<&str>) -> ClaudeStdio {
        let mut args = vec![
            "demo-agent".into(),
            "--delay-ms".into(),
            delay_ms.to_string(),
        ];
        if let Some(id) = resume {
            args.extend(["--resume".to_owned(), id.to_owned()]);
        }
        ClaudeStdio {
            provider: Provider::Demo,
            program,
            args,
            controls: 0,
        }
    }

    fn control(&mut self, request: Value) -> Vec<u8> {
        self.controls += 1;
        line(json!({
            "type": "control_request",
            "request_id": format!("agentwire_control_{}", self.controls),
            "request": request,
        }))
    }
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

    fn prompt(&mut self, text: &str) -> Vec<u8> {
        line(json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }))
    }

    fn interrupt(&mut self, request_id: &str) -> Vec<u8> {
        line(json!({
            "type": "control_request",
            "request_id": request_id,
            "request": {"subtype": "interrupt"},
        }))
    }

    fn answer(&mut self, request_id: &str, decision: Decision, request: &Value) -> Vec<u8> {
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

    fn capabilities(&self) -> Capabilities {
        if self.provider == Provider::Demo {
            // The demo agent answers `set_permission_mode`, lists its slash commands and goes
            // on with its session id after a restart; it has one model.
            return Capabilities {
                set_mode: true,
                commands: true,
                resume: true,
                ..Capabilities::default()
            };
        }
        Capabilities {
            set_mode: true,
            set_model: true,
            thinking: true,
            commands: true,
            resume: true,
        }
    }

    fn modes(&self) -> Vec<Mode> {
        PERMISSION_MODES
            .iter()
            .filter(|(id, ..)| self.provider != Provider::Demo || DEMO_MODES.contains(id))
            .map(|(id, name, description)| Mode::new(id, name, description))
            .collect()
    }

    fn set_mode(&mut self, mode: &str) -> Vec<u8> {
        self.control(json!({"subtype": "set_permission_mode", "mode": mode}))
    }

    fn set_model(&mut self, model: Option<&str>, thinking: Option<Thinking>) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(model) = model {
            out.extend(self.control(json!({"subtype": "set_model", "model": model})));
        }
        if let Some(thinking) = thinking {
            let tokens = match thinking {
                Thinking::Off => 0,
                Thinking::Low => 4_000,
                Thinking::Medium => 16_000,
                Thinking::High => 32_000,
            };
            out.extend(self.control(
                json!({"subtype": "set_max_thinking_tokens", "max_thinking_tokens": tokens}),
            ));
        }
        out
    }
}
