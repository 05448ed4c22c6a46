//! Amp (`amp --execute --stream-json --stream-json-input`): Claude Code's stream-json
//! envelope with fewer fields, user messages in the same shape on stdin. A resumed session
//! runs `amp threads continue <thread id> …` with the same flags.
//!
//! Amp cannot run here (its model is behind Sourcegraph's service, reached with the user's
//! `AMP_API_KEY` or `amp login`), so this adapter is tested on the command lines and bytes it
//! builds, and its decoder on transcripts of the documented format (tests/data/amp/). What
//! its stdin protocol lacks, the adapter does not pretend: there is no interrupt message (an
//! interrupt ends the turn in the log after the cancel grace, the process finishes its
//! work) and no permission prompt (Amp applies its own settings; `--dangerously-allow-all`
//! is left to the user's configuration).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::process::Command;

use super::{line, Adapter, Capabilities};
use crate::core::event::Provider;
use crate::core::normalize::Format;
use crate::core::wire::Decision;

/// An Amp thread driven over stdin/stdout.
pub struct AmpStdio {
    program: PathBuf,
    /// The thread to continue, if resuming.
    thread: Option<String>,
}

impl AmpStdio {
    /// Amp at `program`, in the companion's environment.
    pub fn new(program: PathBuf) -> AmpStdio {
        AmpStdio {
            program,
            thread: None,
        }
    }

    /// Continues the thread `id` (the session's `provider_session_id`, `T-…`).
    pub fn resuming(mut self, id: &str) -> AmpStdio {
        self.thread = Some(id.to_owned());
        self
    }

    /// The arguments after the program.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(thread) = &self.thread {
            args.extend(["threads".into(), "continue".into(), thread.clone()]);
        }
        args.extend(
            ["--execute", "--stream-json", "--stream-json-input"]
                .iter()
                .map(|s| s.to_string()),
        );
        args
    }
}

impl Adapter for AmpStdio {
    fn provider(&self) -> Provider {
        Provider::Amp
    }

    fn format(&self) -> Format {
        Format::Amp
    }

    fn command(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(self.args()).current_dir(cwd);
        cmd
    }

    fn prompt(&mut self, text: &str) -> Vec<u8> {
        line(json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }))
    }

    fn interrupt(&mut self, _request_id: &str) -> Vec<u8> {
        Vec::new()
    }

    fn answer(&mut self, _request_id: &str, _decision: Decision, _request: &Value) -> Vec<u8> {
        Vec::new()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            resume: true,
            ..Capabilities::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_started_or_continued_with_stream_json_both_ways() {
        let a = AmpStdio::new("amp".into());
        assert_eq!(
            a.args(),
            ["--execute", "--stream-json", "--stream-json-input"]
        );
        let b = AmpStdio::new("amp".into()).resuming("T-1");
        assert_eq!(
            b.args(),
            [
                "threads",
                "continue",
                "T-1",
                "--execute",
                "--stream-json",
                "--stream-json-input"
            ]
        );
        let mut a = a;
        let prompt: Value = serde_json::from_slice(&a.prompt("hi")).unwrap();
        assert_eq!(prompt["type"], "user");
        assert_eq!(prompt["message"]["content"][0]["text"], "hi");
        assert!(a.interrupt("i").is_empty());
    }
}
