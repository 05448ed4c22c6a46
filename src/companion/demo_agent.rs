//! `agentwire demo-agent`: a fake coding agent that speaks Claude Code's stream-json protocol
//! exactly as `claude -p --input-format stream-json --output-format stream-json --verbose
//! --include-partial-messages --permission-prompt-tool stdio` does, so the companion hosts it
//! like the real CLI and the whole pipeline runs with no model and no credentials.
//!
//! It reads NDJSON on stdin (user messages, `control_request`s, `control_response`s to its own
//! permission prompts) and writes NDJSON on stdout, one flushed line at a time. The prompt
//! picks a scenario by keyword: `crash`, `fail`, `approve`/`approval`, `todo`, `tool`,
//! `background`, `slow`, `garbage`, `hang`, `deaf`, `plugged`, `noisy`, else a plain answer (see
//! `Scenario::of`).
//!
//! Shape: one thread reads stdin and parses each line into an `Input` on a bounded channel;
//! the main thread plays the turns and is the only writer of stdout. Every pause between two
//! streamed chunks is a wait on that channel, so an interrupt, an `initialize` or a new prompt
//! is handled while a turn streams. A bad stdin line is reported on stderr and skipped; the
//! agent never panics on input.
//!
//! Output is deterministic apart from the session id and the line uuids, which carry the
//! process id: message, tool and request ids come from counters (`msg_demo_<n>`,
//! `toolu_demo_<n>`, `req_demo_<n>`), and durations count the scheduled pauses.
//!
//! Known differences from the real CLI, all optional fields: keys after `type` come sorted;
//! `user` lines carry no wall-clock `timestamp`; no `system/thinking_tokens`,
//! `rate_limit_event` or `control_cancel_request` lines.

use std::collections::VecDeque;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MODEL: &str = "demo-1";
const VERSION: &str = "agentwire-demo";
const TOOLS: &[&str] = &["Bash", "Read", "TodoWrite"];
const SLASH_COMMANDS: &[(&str, &str)] = &[
    (
        "compact",
        "Clear conversation history but keep a summary in context",
    ),
    ("clear", "Clear conversation history and free up context"),
    (
        "cost",
        "Show the total cost and duration of the current session",
    ),
];
const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "bypassPermissions",
    "plan",
    "dontAsk",
];
const SIGNATURE: &str = "ZGVtby1zaWduYXR1cmU=";
const DENIED: &str = "The user doesn't want to proceed with this tool use. The tool use was \
rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you \
are doing and wait for the user to tell you how to proceed.";
const INTERRUPTED: &str = "[Request interrupted by user]";
const INTERRUPTED_TOOL: &str = "[Request interrupted by user for tool use]";
const LS_OUTPUT: &str = "Cargo.toml\nREADME.md\nsrc\ntests";

/// Runs the demo agent on this process's stdin and stdout until stdin ends; `delay_ms` is the
/// pause between two streamed chunks. Exit 0 at the end of stdin, 3 for the `crash` scenario,
/// 1 when stdout is closed.
pub fn run(delay_ms: u64, resume: Option<String>) -> ExitCode {
    let (tx, inbox) = mpsc::sync_channel(64);
    thread::spawn(move || read_stdin(io::stdin().lock(), tx));
    let mut agent = DemoAgent::new(io::stdout(), inbox, Duration::from_millis(delay_ms));
    if let Some(id) = resume {
        agent.session_id = id;
    }
    ExitCode::from(agent.serve())
}

/// One parsed stdin line.
#[derive(Debug)]
enum Input {
    /// A user message: its text blocks joined.
    User(String),
    Interrupt {
        id: String,
    },
    Initialize {
        id: String,
    },
    SetPermissionMode {
        id: String,
        mode: String,
    },
    /// A control request we do not implement: answered with an error response.
    Unsupported {
        id: String,
        subtype: String,
    },
    /// The host's answer to one of our `control_request`s: its `response` object.
    Answer {
        request_id: String,
        response: Value,
    },
    /// stdin is closed: nothing more will come.
    Eof,
}

/// Set while the `plugged` scenario plays: stdin is not read meanwhile.
static PLUGGED: AtomicBool = AtomicBool::new(false);

/// Reads stdin line by line until it ends, reporting unreadable lines on stderr.
fn read_stdin(mut stdin: impl BufRead, tx: SyncSender<Input>) {
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        while PLUGGED.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
        }
        buf.clear();
        match stdin.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("agentwire demo-agent: reading stdin: {e}");
                break;
            }
        }
        line_no += 1;
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_input(&buf) {
            Ok(Some(input)) => {
                if tx.send(input).is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(reason) => {
                eprintln!("agentwire demo-agent: ignoring stdin line {line_no}: {reason}")
            }
        }
    }
    let _ = tx.send(Input::Eof);
}

/// Parses one stdin line; `Ok(None)` for lines that need nothing (`keep_alive`).
fn parse_input(line: &[u8]) -> Result<Option<Input>, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let str_at = |ptr: &str| v.pointer(ptr).and_then(Value::as_str);
    match str_at("/type") {
        Some("user") => {
            let content = v
                .pointer("/message/content")
                .ok_or("a user message without message.content")?;
            match content {
                Value::String(s) => Ok(Some(Input::User(s.clone()))),
                Value::Array(blocks) => {
                    let texts: Vec<&str> = blocks
                        .iter()
                        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect();
                    Ok(Some(Input::User(texts.join("\n"))))
                }
                _ => Err("message.content is neither a string nor an array".into()),
            }
        }
        Some("control_request") => {
            let id = str_at("/request_id")
                .ok_or("a control_request without request_id")?
                .to_owned();
            Ok(Some(match str_at("/request/subtype") {
                Some("interrupt") => Input::Interrupt { id },
                Some("initialize") => Input::Initialize { id },
                Some("set_permission_mode") => Input::SetPermissionMode {
                    id,
                    mode: str_at("/request/mode").unwrap_or("").to_owned(),
                },
                other => Input::Unsupported {
                    id,
                    subtype: other.unwrap_or("").to_owned(),
                },
            }))
        }
        Some("control_response") => {
            let response = v
                .get("response")
                .filter(|r| r.is_object())
                .ok_or("a control_response without a response object")?;
            let request_id = response
                .get("request_id")
                .and_then(Value::as_str)
                .ok_or("a control_response without response.request_id")?
                .to_owned();
            Ok(Some(Input::Answer {
                request_id,
                response: response.clone(),
            }))
        }
        Some("keep_alive") => Ok(None),
        Some(other) => Err(format!("unknown message type {other:?}")),
        None => Err("a line without a string `type`".into()),
    }
}

/// What a prompt asks the demo to play, by keyword, first match wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    /// Exit with code 3 after a few text deltas.
    Crash,
    /// The synthetic API-error turn: 401, or 429 when the prompt also says "rate".
    Fail {
        rate_limit: bool,
    },
    /// A Bash `ls`, behind a `can_use_tool` prompt when `ask`.
    Bash {
        ask: bool,
    },
    Todo,
    /// Says a background task started; an autonomous turn follows.
    Background,
    /// A long answer, to have time to interrupt it.
    Slow,
    /// Unreadable output (not JSON, binary bytes, a 50 MiB line) before a plain answer.
    Garbage,
    /// Starts answering, then writes nothing more and ignores everything: a hung agent.
    Hang,
    /// A slow answer that ignores interrupts.
    Deaf,
    /// A long answer (1,000 chunks) while stdin is not read at all: what the host writes to
    /// it stays in the pipe, and once the pipe is full the host's writes block.
    Plugged,
    /// Writes 20 MiB to stderr, then answers.
    Noisy,
    Answer,
}

impl Scenario {
    fn of(prompt: &str) -> Scenario {
        let p = prompt.to_lowercase();
        if p.contains("crash") {
            Scenario::Crash
        } else if p.contains("fail") {
            Scenario::Fail {
                rate_limit: p.contains("rate"),
            }
        } else if p.contains("approve") || p.contains("approval") {
            Scenario::Bash { ask: true }
        } else if p.contains("todo") {
            Scenario::Todo
        } else if p.contains("tool") {
            Scenario::Bash { ask: false }
        } else if p.contains("background") {
            Scenario::Background
        } else if p.contains("slow") {
            Scenario::Slow
        } else if p.contains("garbage") {
            Scenario::Garbage
        } else if p.contains("hang") {
            Scenario::Hang
        } else if p.contains("deaf") {
            Scenario::Deaf
        } else if p.contains("plugged") {
            Scenario::Plugged
        } else if p.contains("noisy") {
            Scenario::Noisy
        } else {
            Scenario::Answer
        }
    }
}

/// Why a turn stopped early.
enum Halt {
    /// An interrupt arrived (already answered).
    Interrupted,
    /// The process must exit with this code.
    Exit(u8),
}

type Step<T = ()> = Result<T, Halt>;

/// One content block of an assistant message.
enum Block {
    Thinking(String),
    Text(String),
    ToolUse {
        id: String,
        name: &'static str,
        input: Value,
    },
}

/// How a turn ended when it was not halted.
enum Finish {
    Completed { text: String },
    ApiError { text: String, status: u16 },
}

/// The counters of the turn being played.
#[derive(Default)]
struct TurnStats {
    /// API messages in this turn (`num_turns`).
    messages: u64,
    /// Scheduled pauses: `duration_ms` is these times the delay.
    pauses: u64,
    input_tokens: u64,
    output_tokens: u64,
    permission_denials: Vec<Value>,
    /// A tool_use sent whose tool_result is not yet.
    pending_tool: Option<String>,
}

/// The agent: plays turns on `out`, reading inputs from `inbox` between chunks.
struct DemoAgent<W> {
    out: W,
    inbox: Receiver<Input>,
    delay: Duration,
    session_id: String,
    /// The process id in hex, which makes line uuids unique across processes.
    pid: String,
    cwd: String,
    permission_mode: String,
    lines: u64,
    message_ids: u64,
    tool_ids: u64,
    request_ids: u64,
    /// Prompts that arrived while a turn was playing, played next.
    queued: VecDeque<String>,
    eof: bool,
    /// Ignore interrupts (the `deaf` scenario: a provider that does not honour them).
    deaf: bool,
    /// When the background task "finishes" and the agent takes an autonomous turn.
    wake_at: Option<Instant>,
    turn: TurnStats,
}

impl<W: Write> DemoAgent<W> {
    fn new(out: W, inbox: Receiver<Input>, delay: Duration) -> DemoAgent<W> {
        let pid = format!("{:08x}", std::process::id());
        DemoAgent {
            out,
            inbox,
            delay,
            session_id: format!("{pid}-0000-4000-8000-000000000000"),
            pid,
            cwd: std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            permission_mode: "default".to_owned(),
            lines: 0,
            message_ids: 0,
            tool_ids: 0,
            request_ids: 0,
            queued: VecDeque::new(),
            eof: false,
            deaf: false,
            wake_at: None,
            turn: TurnStats::default(),
        }
    }

    /// Serves until stdin ends (0) or a scenario or a closed stdout ends the process.
    fn serve(mut self) -> u8 {
        loop {
            let outcome = if let Some(prompt) = self.queued.pop_front() {
                self.play(Some(&prompt))
            } else if self.eof {
                return 0;
            } else if self.wake_at.is_some_and(|at| at <= Instant::now()) {
                self.wake_at = None;
                self.play(None)
            } else {
                // Idle: an interrupt gets its success response and nothing else.
                match self.next_input(self.wake_at) {
                    None => continue,
                    Some(input) => self.handle(input),
                }
            };
            if let Err(Halt::Exit(code)) = outcome {
                return code;
            }
        }
    }

    /// Plays one turn: a user turn for `Some(prompt)`, the autonomous wake-up for `None`.
    fn play(&mut self, prompt: Option<&str>) -> Step {
        self.turn = TurnStats::default();
        self.init()?;
        let scripted = match prompt {
            Some(p) => self.script(p),
            None => self.wake_up(),
        };
        match scripted {
            Ok(finish) => self.result(finish),
            Err(Halt::Interrupted) => self.interrupted(),
            Err(exit) => Err(exit),
        }
    }

    fn script(&mut self, prompt: &str) -> Step<Finish> {
        self.turn.input_tokens += 12 + prompt.len() as u64 / 4;
        let quoted = excerpt(prompt, 80);
        match Scenario::of(prompt) {
            Scenario::Crash => self.crash(),
            Scenario::Fail { rate_limit } => self.api_error(rate_limit),
            Scenario::Answer => {
                let think =
                    format!("The user wrote \"{quoted}\". A short answer that quotes it will do.");
                let text = format!(
                    "You said: \"{quoted}\". I am agentwire's demo agent: no model and no \
                     credentials, only Claude Code's stream-json protocol played back, so the whole \
                     pipeline can be watched end to end."
                );
                self.message(
                    vec![Block::Thinking(think), Block::Text(text.clone())],
                    "end_turn",
                )?;
                Ok(Finish::Completed { text })
            }
            Scenario::Hang => {
                self.begin_message()?;
                self.stream_event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))?;
                self.stream_event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Working on it"}}))?;
                let _ = self.out.flush();
                loop {
                    thread::sleep(Duration::from_secs(3600));
                }
            }
            Scenario::Deaf => {
                self.deaf = true;
                let text: String = (1..=100)
                    .map(|i| format!("Deaf chunk {i:>3}/100. "))
                    .collect();
                let text = text.trim_end().to_owned();
                let played = self.message(vec![Block::Text(text.clone())], "end_turn");
                self.deaf = false;
                played?;
                Ok(Finish::Completed { text })
            }
            Scenario::Plugged => {
                PLUGGED.store(true, Ordering::SeqCst);
                self.deaf = true;
                let text: String = (1..=1000)
                    .map(|i| format!("Plugged chunk {i:>4}/1000. "))
                    .collect();
                let text = text.trim_end().to_owned();
                let played = self.message(vec![Block::Text(text.clone())], "end_turn");
                self.deaf = false;
                PLUGGED.store(false, Ordering::SeqCst);
                played?;
                Ok(Finish::Completed { text })
            }
            Scenario::Noisy => {
                let line = format!("{}\n", "noise on stderr ".repeat(8));
                let stderr = std::io::stderr();
                let mut err = stderr.lock();
                for _ in 0..(20 << 20) / line.len() {
                    let _ = err.write_all(line.as_bytes());
                }
                drop(err);
                let text = "A lot was written to stderr; here is the answer.".to_owned();
                self.message(vec![Block::Text(text.clone())], "end_turn")?;
                Ok(Finish::Completed { text })
            }
            Scenario::Garbage => {
                self.raw(b"this is not JSON\n")?;
                self.raw(b"\xff\xfe\x00binary\n")?;
                let mut long = b"{\"type\":\"assistant\",\"padding\":\"".to_vec();
                long.resize(50 << 20, b'x');
                long.extend_from_slice(b"\"}\n");
                self.raw(&long)?;
                let text = "After some noise, a readable answer.".to_owned();
                self.message(vec![Block::Text(text.clone())], "end_turn")?;
                Ok(Finish::Completed { text })
            }
            Scenario::Slow => {
                let think = "A long answer was asked for; I will take my time.".to_owned();
                let text: String = (1..=200)
                    .map(|i| format!("Slow chunk {i:>3}/200. "))
                    .collect::<String>()
                    .trim_end()
                    .to_owned();
                self.message(
                    vec![Block::Thinking(think), Block::Text(text.clone())],
                    "end_turn",
                )?;
                Ok(Finish::Completed { text })
            }
            Scenario::Background => {
                let think = "This can run in the background while the user carries on.".to_owned();
                let text = "I started a background task (`sleep 10 && echo done`); I will report \
                            back when it finishes."
                    .to_owned();
                self.message(
                    vec![Block::Thinking(think), Block::Text(text.clone())],
                    "end_turn",
                )?;
                self.wake_at = Some(Instant::now() + self.delay * 10);
                Ok(Finish::Completed { text })
            }
            Scenario::Bash { ask } => self.bash(ask),
            Scenario::Todo => self.todo(),
        }
    }

    fn bash(&mut self, ask: bool) -> Step<Finish> {
        let id = self.next_tool_id();
        let mut input =
            json!({"command": "ls", "description": "List the files in the working directory"});
        let think = "Listing the working directory will show what is here.".to_owned();
        self.message(
            vec![
                Block::Thinking(think),
                Block::ToolUse {
                    id: id.clone(),
                    name: "Bash",
                    input: input.clone(),
                },
            ],
            "tool_use",
        )?;
        self.turn.pending_tool = Some(id.clone());
        if ask && self.permission_mode == "dontAsk" {
            // As the real CLI does in this mode: refused without asking, then the refusal as
            // the tool's result.
            let refusal = "Permission to use Bash has been denied.";
            self.emit(&json!({
                "type": "system", "subtype": "permission_denied", "tool_name": "Bash",
                "tool_use_id": id, "decision_reason_type": "mode", "message": refusal,
                "session_id": self.session_id,
            }))?;
            self.turn
                .permission_denials
                .push(json!({"tool_name": "Bash", "tool_use_id": id, "tool_input": input}));
            self.tool_result(
                &id,
                json!(refusal),
                true,
                json!(format!("Error: {refusal}")),
            )?;
            let text = "The permission mode (dontAsk) refused the Bash command `ls`, so I did \
                        not run it."
                .to_owned();
            self.message(vec![Block::Text(text.clone())], "end_turn")?;
            return Ok(Finish::Completed { text });
        }
        let allowed = if ask && self.permission_mode != "bypassPermissions" {
            match self.ask_permission("Bash", &input, &id)? {
                Some(updated) => {
                    input = updated;
                    true
                }
                None => false,
            }
        } else {
            true
        };
        let text = if allowed {
            self.pause()?;
            self.tool_result(
                &id,
                json!(LS_OUTPUT),
                false,
                json!({"stdout": LS_OUTPUT, "stderr": "", "interrupted": false, "isImage": false, "noOutputExpected": false}),
            )?;
            format!(
                "The directory holds {}.",
                LS_OUTPUT.split('\n').collect::<Vec<_>>().join(", ")
            )
        } else {
            self.turn
                .permission_denials
                .push(json!({"tool_name": "Bash", "tool_use_id": id, "tool_input": input}));
            self.tool_result(&id, json!(DENIED), true, json!(format!("Error: {DENIED}")))?;
            "You denied the Bash command `ls`, so I did not run it.".to_owned()
        };
        self.message(vec![Block::Text(text.clone())], "end_turn")?;
        Ok(Finish::Completed { text })
    }

    fn todo(&mut self) -> Step<Finish> {
        let id = self.next_tool_id();
        let todos = json!([
            {"content": "Read the request", "status": "completed", "activeForm": "Reading the request"},
            {"content": "Write the answer", "status": "in_progress", "activeForm": "Writing the answer"},
            {"content": "Review the answer", "status": "pending", "activeForm": "Reviewing the answer"},
        ]);
        let think = "Three steps; a todo list keeps them visible.".to_owned();
        self.message(
            vec![
                Block::Thinking(think),
                Block::ToolUse {
                    id: id.clone(),
                    name: "TodoWrite",
                    input: json!({"todos": todos}),
                },
            ],
            "tool_use",
        )?;
        self.turn.pending_tool = Some(id.clone());
        self.pause()?;
        self.tool_result(
            &id,
            json!("Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress. Please proceed with the current tasks if applicable"),
            false,
            json!({"oldTodos": [], "newTodos": todos}),
        )?;
        let text = "I wrote a todo list of three steps: one done, one in progress, one pending."
            .to_owned();
        self.message(vec![Block::Text(text.clone())], "end_turn")?;
        Ok(Finish::Completed { text })
    }

    fn crash(&mut self) -> Step<Finish> {
        self.begin_message()?;
        let text = "Something is about to go very wrong in here, on purpose.";
        self.stream_event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))?;
        for chunk in chunks(text, 20).into_iter().take(2) {
            self.stream_event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": chunk}}))?;
            self.pause()?;
        }
        let _ = self.out.flush();
        eprintln!("Error: the demo agent crashed on purpose (the prompt asked for a crash)");
        eprintln!("    at DemoAgent.crash (agentwire-demo:1:1)");
        eprintln!(
            "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)"
        );
        Err(Halt::Exit(3))
    }

    fn api_error(&mut self, rate_limit: bool) -> Step<Finish> {
        let (status, error, text) = if rate_limit {
            (
                429,
                "rate_limit",
                "API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"This request would exceed the rate limit for your organization of 50 requests per minute.\"}}",
            )
        } else {
            (
                401,
                "authentication_failed",
                "API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}} · Please run /login",
            )
        };
        self.status_requesting()?;
        let line = json!({
            "type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 1,
            "retry_delay_ms": self.delay.as_millis() as u64, "error_status": status, "error": error,
            "session_id": self.session_id, "uuid": self.uuid(),
        });
        self.emit(&line)?;
        self.pause()?;
        self.turn.input_tokens = 0;
        let line = json!({
            "type": "assistant",
            "message": {
                "id": self.uuid(), "container": null, "model": "<synthetic>", "role": "assistant",
                "stop_reason": "stop_sequence", "stop_sequence": "", "type": "message",
                "usage": usage(0, 0), "content": [{"type": "text", "text": text}],
                "context_management": null,
            },
            "parent_tool_use_id": null, "session_id": self.session_id, "uuid": self.uuid(),
            "error": error,
        });
        self.emit(&line)?;
        self.turn.messages = 1;
        Ok(Finish::ApiError {
            text: text.to_owned(),
            status,
        })
    }

    fn wake_up(&mut self) -> Step<Finish> {
        self.turn.input_tokens += 40;
        let think = "The background task has finished; the user should hear about it.".to_owned();
        let text =
            "The background task finished: `sleep 10 && echo done` printed \"done\".".to_owned();
        self.message(
            vec![Block::Thinking(think), Block::Text(text.clone())],
            "end_turn",
        )?;
        Ok(Finish::Completed { text })
    }

    // ---- protocol lines ----

    fn init(&mut self) -> Step {
        let line = json!({
            "type": "system", "subtype": "init", "cwd": self.cwd, "session_id": self.session_id,
            "tools": TOOLS, "mcp_servers": [], "model": MODEL,
            "permissionMode": self.permission_mode,
            "slash_commands": SLASH_COMMANDS.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            "apiKeySource": "none", "claude_code_version": VERSION, "output_style": "default",
            "agents": [], "skills": [], "plugins": [], "uuid": self.uuid(),
        });
        self.emit(&line)
    }

    fn status_requesting(&mut self) -> Step {
        let line = json!({
            "type": "system", "subtype": "status", "status": "requesting",
            "session_id": self.session_id, "uuid": self.uuid(),
        });
        self.emit(&line)
    }

    /// Status line, `message_start` and the time to first token; returns the message id.
    fn begin_message(&mut self) -> Step<String> {
        self.turn.messages += 1;
        self.message_ids += 1;
        let id = format!("msg_demo_{}", self.message_ids);
        self.status_requesting()?;
        let message = json!({
            "model": MODEL, "id": id, "type": "message", "role": "assistant", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": usage(self.turn.input_tokens, 1),
        });
        let ttft = self.delay.as_millis() as u64;
        let line = json!({
            "type": "stream_event", "event": {"type": "message_start", "message": message},
            "session_id": self.session_id, "parent_tool_use_id": null, "uuid": self.uuid(),
            "ttft_ms": ttft,
        });
        self.emit(&line)?;
        self.pause()?;
        Ok(id)
    }

    /// One API message, streamed block by block, each block's `assistant` line before its
    /// `content_block_stop`.
    fn message(&mut self, blocks: Vec<Block>, stop_reason: &str) -> Step {
        let id = self.begin_message()?;
        let mut output_tokens = 0;
        for (index, block) in blocks.iter().enumerate() {
            output_tokens += self.block(&id, index, block)?;
        }
        self.turn.output_tokens += output_tokens;
        self.stream_event(json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": usage(self.turn.input_tokens, output_tokens),
        }))?;
        self.stream_event(json!({"type": "message_stop"}))
    }

    /// Streams one content block; returns its output tokens.
    fn block(&mut self, message_id: &str, index: usize, block: &Block) -> Step<u64> {
        let (start, deltas, whole, size) = match block {
            Block::Thinking(t) => {
                let mut deltas: Vec<Value> = chunks(t, 24)
                    .into_iter()
                    .map(|c| json!({"type": "thinking_delta", "thinking": c}))
                    .collect();
                deltas.push(json!({"type": "signature_delta", "signature": SIGNATURE}));
                (
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    deltas,
                    json!({"type": "thinking", "thinking": t, "signature": SIGNATURE}),
                    t.len(),
                )
            }
            Block::Text(t) => (
                json!({"type": "text", "text": ""}),
                chunks(t, 20)
                    .into_iter()
                    .map(|c| json!({"type": "text_delta", "text": c}))
                    .collect(),
                json!({"type": "text", "text": t}),
                t.len(),
            ),
            Block::ToolUse { id, name, input } => {
                let json = input.to_string();
                (
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    chunks(&json, 24)
                        .into_iter()
                        .map(|c| json!({"type": "input_json_delta", "partial_json": c}))
                        .collect(),
                    json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                    json.len(),
                )
            }
        };
        self.stream_event(
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        )?;
        for delta in deltas {
            self.stream_event(
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )?;
            self.pause()?;
        }
        let line = json!({
            "type": "assistant",
            "message": {
                "model": MODEL, "id": message_id, "type": "message", "role": "assistant",
                "content": [whole], "stop_reason": null, "stop_sequence": null,
                "usage": usage(self.turn.input_tokens, 1), "context_management": null,
            },
            "parent_tool_use_id": null, "session_id": self.session_id, "uuid": self.uuid(),
        });
        self.emit(&line)?;
        self.stream_event(json!({"type": "content_block_stop", "index": index}))?;
        Ok(size as u64 / 4 + 1)
    }

    fn stream_event(&mut self, event: Value) -> Step {
        let line = json!({
            "type": "stream_event", "event": event, "session_id": self.session_id,
            "parent_tool_use_id": null, "uuid": self.uuid(),
        });
        self.emit(&line)
    }

    fn tool_result(&mut self, id: &str, content: Value, is_error: bool, sidecar: Value) -> Step {
        let line = json!({
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": id, "type": "tool_result", "content": content, "is_error": is_error},
            ]},
            "parent_tool_use_id": null, "session_id": self.session_id, "uuid": self.uuid(),
            "tool_use_result": sidecar,
        });
        self.emit(&line)?;
        self.turn.pending_tool = None;
        self.turn.input_tokens += 20;
        Ok(())
    }

    /// Sends a `can_use_tool` request and waits for its answer: `Some(input to run)` when
    /// allowed, `None` when denied (or when stdin ends first).
    fn ask_permission(
        &mut self,
        tool: &str,
        input: &Value,
        tool_use_id: &str,
    ) -> Step<Option<Value>> {
        self.request_ids += 1;
        let request_id = format!("req_demo_{}", self.request_ids);
        let line = json!({
            "type": "control_request", "request_id": request_id,
            "request": {
                "subtype": "can_use_tool", "tool_name": tool, "input": input,
                "permission_suggestions": [], "tool_use_id": tool_use_id,
            },
        });
        self.emit(&line)?;
        loop {
            match self.next_input(None) {
                Some(Input::Answer {
                    request_id: r,
                    response,
                }) if r == request_id => {
                    let allowed = response.get("subtype").and_then(Value::as_str)
                        == Some("success")
                        && response
                            .pointer("/response/behavior")
                            .and_then(Value::as_str)
                            == Some("allow");
                    if !allowed {
                        return Ok(None);
                    }
                    let updated = response
                        .pointer("/response/updatedInput")
                        .filter(|u| u.is_object())
                        .unwrap_or(input);
                    return Ok(Some(updated.clone()));
                }
                Some(Input::Interrupt { id }) => {
                    self.respond(&id, None)?;
                    return Err(Halt::Interrupted);
                }
                Some(input) => self.handle(input)?,
                None => {
                    eprintln!("agentwire demo-agent: stdin closed before the answer to {request_id}; treating it as a denial");
                    return Ok(None);
                }
            }
        }
    }

    fn result(&mut self, finish: Finish) -> Step {
        let ms = self.turn.pauses * self.delay.as_millis() as u64;
        let (input, output) = (self.turn.input_tokens, self.turn.output_tokens);
        let cost = (input * 3 + output * 15) as f64 / 1e6;
        let (is_error, text, status, stop_reason) = match finish {
            Finish::Completed { text } => (false, text, Value::Null, "end_turn"),
            Finish::ApiError { text, status } => (true, text, json!(status), "stop_sequence"),
        };
        let line = json!({
            "type": "result", "subtype": "success", "is_error": is_error,
            "api_error_status": status, "duration_ms": ms, "duration_api_ms": ms,
            "num_turns": self.turn.messages, "result": text, "stop_reason": stop_reason,
            "session_id": self.session_id, "total_cost_usd": cost,
            "usage": result_usage(input, output), "modelUsage": model_usage(input, output, cost),
            "permission_denials": self.turn.permission_denials, "terminal_reason": "completed",
            "uuid": self.uuid(),
        });
        self.emit(&line)
    }

    /// After an interrupt: the interruption marker, then the `error_during_execution` result.
    fn interrupted(&mut self) -> Step {
        let content = match self.turn.pending_tool.take() {
            Some(id) => {
                json!([{"type": "tool_result", "tool_use_id": id, "content": INTERRUPTED_TOOL, "is_error": true}])
            }
            None => json!([{"type": "text", "text": INTERRUPTED}]),
        };
        let line = json!({
            "type": "user", "message": {"role": "user", "content": content},
            "parent_tool_use_id": null, "session_id": self.session_id, "uuid": self.uuid(),
        });
        self.emit(&line)?;
        let ms = self.turn.pauses * self.delay.as_millis() as u64;
        let (input, output) = (self.turn.input_tokens, self.turn.output_tokens);
        let cost = (input * 3 + output * 15) as f64 / 1e6;
        let line = json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "api_error_status": null, "duration_ms": ms, "duration_api_ms": ms,
            "num_turns": self.turn.messages, "stop_reason": null,
            "session_id": self.session_id, "total_cost_usd": cost,
            "usage": result_usage(input, output), "modelUsage": model_usage(input, output, cost),
            "permission_denials": self.turn.permission_denials, "errors": [],
            "terminal_reason": "aborted_streaming", "uuid": self.uuid(),
        });
        self.emit(&line)
    }

    // ---- inputs ----

    /// Waits one delay, handling what arrives meanwhile; an interrupt halts the turn.
    fn pause(&mut self) -> Step {
        self.turn.pauses += 1;
        let deadline = Instant::now() + self.delay;
        loop {
            match self.next_input(Some(deadline)) {
                None => return Ok(()),
                Some(Input::Interrupt { .. }) if self.deaf => {}
                Some(Input::Interrupt { id }) => {
                    self.respond(&id, None)?;
                    return Err(Halt::Interrupted);
                }
                Some(input) => self.handle(input)?,
            }
        }
    }

    /// The next input before `deadline` (forever when `None`); `None` at the deadline, or at
    /// once when stdin has ended and no deadline is given.
    fn next_input(&mut self, deadline: Option<Instant>) -> Option<Input> {
        if self.eof {
            if let Some(at) = deadline {
                thread::sleep(at.saturating_duration_since(Instant::now()));
            }
            return None;
        }
        let got = match deadline {
            None => self.inbox.recv().ok(),
            Some(at) => match self
                .inbox
                .recv_timeout(at.saturating_duration_since(Instant::now()))
            {
                Ok(input) => Some(input),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => None,
            },
        };
        match got {
            Some(Input::Eof) | None => {
                self.eof = true;
                self.next_input(deadline)
            }
            some => some,
        }
    }

    /// Handles an input that does not stop a turn: prompts are queued, control requests
    /// answered. An interrupt is only answered; inside a turn the caller handles it first.
    fn handle(&mut self, input: Input) -> Step {
        match input {
            Input::User(prompt) => {
                self.queued.push_back(prompt);
                Ok(())
            }
            Input::Initialize { id } => {
                let commands: Vec<Value> = SLASH_COMMANDS
                    .iter()
                    .map(|(name, description)| json!({"name": name, "description": description, "argumentHint": ""}))
                    .collect();
                let body = json!({
                    "commands": commands, "agents": [], "output_style": "default",
                    "available_output_styles": ["default"],
                    "models": [{"value": MODEL, "displayName": "Demo", "description": "agentwire's built-in demo agent"}],
                });
                self.respond(&id, Some(body))
            }
            Input::SetPermissionMode { id, mode } => {
                if PERMISSION_MODES.contains(&mode.as_str()) {
                    self.permission_mode = mode;
                    self.respond(&id, None)
                } else {
                    self.respond_error(&id, &format!("Invalid permission mode: {mode:?}"))
                }
            }
            Input::Unsupported { id, subtype } => self.respond_error(
                &id,
                &format!("Unsupported control request subtype: {subtype:?}"),
            ),
            Input::Answer { request_id, .. } => {
                eprintln!("agentwire demo-agent: ignoring a control_response to {request_id:?}, which is not pending");
                Ok(())
            }
            Input::Interrupt { id } => self.respond(&id, None),
            Input::Eof => {
                self.eof = true;
                Ok(())
            }
        }
    }

    fn respond(&mut self, request_id: &str, body: Option<Value>) -> Step {
        let mut response = json!({"subtype": "success", "request_id": request_id});
        if let Some(body) = body {
            response["response"] = body;
        }
        self.emit(&json!({"type": "control_response", "response": response}))
    }

    fn respond_error(&mut self, request_id: &str, error: &str) -> Step {
        self.emit(&json!({
            "type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": error},
        }))
    }

    // ---- output ----

    fn emit(&mut self, line: &Value) -> Step {
        let mut text = line_text(line);
        text.push('\n');
        let written = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush());
        written.map_err(|e| {
            eprintln!("agentwire demo-agent: writing stdout: {e}");
            Halt::Exit(1)
        })
    }

    /// Writes bytes as they are, for output no JSON encoder would produce.
    fn raw(&mut self, bytes: &[u8]) -> Step {
        let written = self.out.write_all(bytes).and_then(|()| self.out.flush());
        written.map_err(|e| {
            eprintln!("agentwire demo-agent: writing stdout: {e}");
            Halt::Exit(1)
        })
    }

    fn uuid(&mut self) -> String {
        self.lines += 1;
        format!("{}-0000-4000-8000-{:012x}", self.pid, self.lines)
    }

    fn next_tool_id(&mut self) -> String {
        self.tool_ids += 1;
        format!("toolu_demo_{}", self.tool_ids)
    }
}

/// One output line: `type` first as the CLI writes it, then the other keys (sorted).
fn line_text(line: &Value) -> String {
    let Value::Object(map) = line else {
        return line.to_string();
    };
    let first = map.get("type").map(|t| format!("\"type\":{t}"));
    let rest = map
        .iter()
        .filter(|(k, _)| *k != "type")
        .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())));
    let all: Vec<String> = first.into_iter().chain(rest).collect();
    format!("{{{}}}", all.join(","))
}

/// The usage object of `message_start`, `message_delta` and `assistant` lines.
fn usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output, "service_tier": "standard",
    })
}

fn result_usage(input: u64, output: u64) -> Value {
    let mut u = usage(input, output);
    u["server_tool_use"] = json!({"web_search_requests": 0, "web_fetch_requests": 0});
    u
}

fn model_usage(input: u64, output: u64, cost: f64) -> Value {
    json!({MODEL: {
        "inputTokens": input, "outputTokens": output, "cacheReadInputTokens": 0,
        "cacheCreationInputTokens": 0, "webSearchRequests": 0, "costUSD": cost,
        "contextWindow": 200_000, "maxOutputTokens": 32_000,
    }})
}

/// `s` cut into pieces of `n` characters (the last may be shorter).
fn chunks(s: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (count, (i, _)) in s.char_indices().enumerate() {
        if count > 0 && count % n == 0 {
            out.push(&s[start..i]);
            start = i;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// At most `n` characters of `s`, on one line, with `…` when cut.
fn excerpt(s: &str, n: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cut_on_char_boundaries() {
        assert_eq!(chunks("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(chunks("ééééé", 2), ["éé", "éé", "é"]);
        assert!(chunks("", 3).is_empty());
    }

    #[test]
    fn prompts_pick_scenarios() {
        assert_eq!(
            Scenario::of("please APPROVE the tool"),
            Scenario::Bash { ask: true }
        );
        assert_eq!(Scenario::of("use a tool"), Scenario::Bash { ask: false });
        assert_eq!(
            Scenario::of("fail with a rate limit"),
            Scenario::Fail { rate_limit: true }
        );
        assert_eq!(Scenario::of("hello"), Scenario::Answer);
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for bad in [
            "",
            "{",
            "[]",
            "{\"type\":1}",
            "{\"type\":\"user\"}",
            "{\"type\":\"control_request\"}",
            "{\"type\":\"nope\"}",
        ] {
            assert!(parse_input(bad.as_bytes()).is_err(), "{bad}");
        }
        let ok = parse_input(br#"{"type":"user","message":{"role":"user","content":"hi"}}"#);
        assert!(matches!(ok, Ok(Some(Input::User(p))) if p == "hi"));
    }
}
