//! `agentwire demo-agent` driven as the companion drives `claude`: the real binary as a child
//! process, NDJSON on its stdin and stdout. Each scenario checks the protocol itself (line
//! types and order, the control round trips, exit codes), then feeds the captured stdout to
//! the core's Claude normalizer and checks the canonical events it projects to.
//!
//! Every read has a deadline (a reader thread and `recv_timeout`), so a bug fails the test
//! instead of hanging it.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use agentwire::core::event::{Event, EventType};
use agentwire::core::normalize::{normalize, Config, Format, Normalized};
use agentwire::core::time::Timestamp;
use expect_test::{expect, Expect};
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(20);

/// A running demo agent with its stdout captured line by line.
struct Demo {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line read so far, newline-terminated, for the normalizer.
    captured: Vec<u8>,
    stderr: Option<JoinHandle<String>>,
}

impl Demo {
    fn spawn(delay_ms: u64) -> Demo {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args(["demo-agent", "--delay-ms", &delay_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the agentwire binary starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Demo {
            stdin: child.stdin.take(),
            child,
            lines,
            captured: Vec::new(),
            stderr: Some(stderr),
        }
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: Value) {
        self.send_raw(&v.to_string());
    }

    fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}}));
    }

    fn control(&mut self, request_id: &str, request: Value) {
        self.send(json!({"type": "control_request", "request_id": request_id, "request": request}));
    }

    fn answer(&mut self, request_id: &str, behavior: &str) {
        let mut response = json!({"behavior": behavior});
        if behavior == "deny" {
            response["message"] = json!("not now");
        }
        self.send(json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response,
        }}));
    }

    /// The next stdout line; `None` when stdout ended. Panics at the deadline.
    fn next(&mut self) -> Option<Value> {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(line) => {
                self.captured.extend_from_slice(line.as_bytes());
                self.captured.push(b'\n');
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                assert!(v.is_object(), "stdout line is not an object: {line}");
                Some(v)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!(
                "no stdout line within {DEADLINE:?}; so far:\n{}",
                String::from_utf8_lossy(&self.captured)
            ),
        }
    }

    /// Lines up to and including the first that matches `stop`.
    fn read_until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let v = self.next().unwrap_or_else(|| {
                panic!(
                    "stdout ended early; so far:\n{}",
                    String::from_utf8_lossy(&self.captured)
                )
            });
            let done = stop(&v);
            out.push(v);
            if done {
                return out;
            }
        }
    }

    /// Sends a prompt and reads its turn, up to its `result`.
    fn turn(&mut self, text: &str) -> Vec<Value> {
        self.prompt(text);
        self.read_until(is_result)
    }

    /// Closes stdin, reads stdout to its end and waits for the exit.
    fn finish(mut self) -> Finished {
        drop(self.stdin.take());
        self.wait()
    }

    /// Reads stdout to its end and waits for the exit, stdin left as it is.
    fn wait(mut self) -> Finished {
        let mut rest = Vec::new();
        while let Some(v) = self.next() {
            rest.push(v);
        }
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the agent did not exit");
            thread::sleep(Duration::from_millis(5));
        };
        Finished {
            status,
            rest,
            stdout: std::mem::take(&mut self.captured),
            stderr: self.stderr.take().unwrap().join().unwrap(),
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

struct Finished {
    status: ExitStatus,
    /// The lines read after stdin closed.
    rest: Vec<Value>,
    /// All of stdout.
    stdout: Vec<u8>,
    stderr: String,
}

fn is_result(v: &Value) -> bool {
    v["type"] == "result"
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// One line as a short label: `stream content_block_delta text_delta`, `assistant tool_use`…
fn label(v: &Value) -> String {
    let ty = s(v, "/type");
    match ty {
        "system" => format!("system {}", s(v, "/subtype")),
        "stream_event" => {
            let ev = s(v, "/event/type");
            match ev {
                "content_block_start" => {
                    format!("stream {ev} {}", s(v, "/event/content_block/type"))
                }
                "content_block_delta" => format!("stream {ev} {}", s(v, "/event/delta/type")),
                "message_delta" => format!("stream {ev} {}", s(v, "/event/delta/stop_reason")),
                _ => format!("stream {ev}"),
            }
        }
        "assistant" => {
            let mut l = format!("assistant {}", s(v, "/message/content/0/type"));
            if let Some(e) = v.get("error").and_then(Value::as_str) {
                l += &format!(" error={e}");
            }
            l
        }
        "user" => {
            let mut l = format!("user {}", s(v, "/message/content/0/type"));
            if v.pointer("/message/content/0/is_error") == Some(&json!(true)) {
                l += " is_error";
            }
            l
        }
        "result" => format!(
            "result {} is_error={} terminal_reason={}",
            s(v, "/subtype"),
            v["is_error"],
            s(v, "/terminal_reason")
        ),
        "control_request" => format!("control_request {}", s(v, "/request/subtype")),
        "control_response" => format!("control_response {}", s(v, "/response/subtype")),
        other => other.to_owned(),
    }
}

/// The labels, consecutive repeats folded into `×n`.
fn trace(lines: &[Value]) -> String {
    let mut out = String::new();
    let labels: Vec<String> = lines.iter().map(label).collect();
    let mut i = 0;
    while i < labels.len() {
        let n = labels[i..].iter().take_while(|l| **l == labels[i]).count();
        out += &labels[i];
        if n > 1 {
            out += &format!(" ×{n}");
        }
        out.push('\n');
        i += n;
    }
    out
}

fn check_trace(lines: &[Value], expect: Expect) {
    expect.assert_eq(&trace(lines));
}

/// The stream-json invariants the real CLI keeps: one session id, unique uuids, messages
/// bracketed by `message_start`/`message_stop` (only the last may stay open, when
/// `interrupted`), blocks opened and closed in order, and each block's whole `assistant` line
/// (the same message id, the deltas put together) before its `content_block_stop`.
fn check_protocol(lines: &[Value], interrupted: bool) {
    let mut sessions = HashSet::new();
    let mut uuids = HashSet::new();
    let mut message: Option<String> = None;
    let mut next_index = 0;
    // (index, block type, deltas put together, assistant line seen)
    let mut block: Option<(u64, String, String, bool)> = None;
    for (n, v) in lines.iter().enumerate() {
        let at = format!("line {n}: {v}");
        if let Some(id) = v.get("session_id").and_then(Value::as_str) {
            sessions.insert(id.to_owned());
        }
        if let Some(uuid) = v.get("uuid").and_then(Value::as_str) {
            assert!(uuids.insert(uuid.to_owned()), "duplicate uuid at {at}");
        }
        match (s(v, "/type"), s(v, "/event/type")) {
            ("stream_event", "message_start") => {
                assert!(
                    message.is_none() && block.is_none(),
                    "nested message at {at}"
                );
                message = Some(s(v, "/event/message/id").to_owned());
                next_index = 0;
            }
            ("stream_event", "content_block_start") => {
                assert!(message.is_some() && block.is_none(), "{at}");
                let index = v["event"]["index"].as_u64().unwrap();
                assert_eq!(index, next_index, "{at}");
                next_index += 1;
                let ty = s(v, "/event/content_block/type").to_owned();
                block = Some((index, ty, String::new(), false));
            }
            ("stream_event", "content_block_delta") => {
                let (index, _, acc, seen) = block.as_mut().expect("delta outside a block");
                assert_eq!(v["event"]["index"].as_u64(), Some(*index), "{at}");
                assert!(!*seen, "delta after the assistant line at {at}");
                let d = &v["event"]["delta"];
                match s(d, "/type") {
                    "text_delta" => *acc += s(d, "/text"),
                    "thinking_delta" => *acc += s(d, "/thinking"),
                    "input_json_delta" => *acc += s(d, "/partial_json"),
                    "signature_delta" => {}
                    other => panic!("unknown delta {other} at {at}"),
                }
            }
            ("assistant", _) if s(v, "/message/model") == "<synthetic>" => {
                assert!(message.is_none(), "{at}");
            }
            ("assistant", _) => {
                assert_eq!(message.as_deref(), Some(s(v, "/message/id")), "{at}");
                let (_, ty, acc, seen) = block.as_mut().expect("assistant outside a block");
                assert!(!*seen, "two assistant lines for one block at {at}");
                *seen = true;
                let content = v["message"]["content"].as_array().unwrap();
                assert_eq!(content.len(), 1, "one block per assistant line at {at}");
                let b = &content[0];
                assert_eq!(s(b, "/type"), ty, "{at}");
                match ty.as_str() {
                    "text" => assert_eq!(s(b, "/text"), acc, "{at}"),
                    "thinking" => assert_eq!(s(b, "/thinking"), acc, "{at}"),
                    "tool_use" => {
                        let input: Value = serde_json::from_str(acc).unwrap();
                        assert_eq!(b["input"], input, "{at}");
                    }
                    _ => {}
                }
            }
            ("stream_event", "content_block_stop") => {
                let (index, _, _, seen) = block.take().expect("stop outside a block");
                assert_eq!(v["event"]["index"].as_u64(), Some(index), "{at}");
                assert!(seen, "content_block_stop before its assistant line at {at}");
            }
            ("stream_event", "message_delta") => {
                assert!(message.is_some() && block.is_none(), "{at}");
            }
            ("stream_event", "message_stop") => {
                assert!(message.take().is_some() && block.is_none(), "{at}");
            }
            ("result", _) => {
                if interrupted {
                    message = None;
                    block = None;
                }
                assert!(message.is_none(), "result inside a message at {at}");
            }
            _ => {}
        }
    }
    assert!(message.is_none(), "a message was left open");
    assert!(sessions.len() <= 1, "several session ids: {sessions:?}");
}

fn normalized(stdout: &[u8]) -> Normalized {
    normalize(
        Some(Format::Claude),
        Config::new("s1"),
        stdout,
        Timestamp::EPOCH,
    )
}

/// The events of each run, runs in order of first appearance.
fn runs(events: &[Event]) -> Vec<Vec<&Event>> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_run: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        if let Some(run) = e.run_id() {
            if !by_run.contains_key(run) {
                order.push(run);
            }
            by_run.entry(run).or_default().push(e);
        }
    }
    order.iter().map(|r| by_run.remove(r).unwrap()).collect()
}

/// The canonical projection: readable without diagnostics, one run per turn, each ending
/// exactly once with the expected terminal as its last event, and every streamed chunk part
/// of a whole message. Returns the events.
fn check_canonical(stdout: &[u8], terminals: &[EventType]) -> Vec<Event> {
    let out = normalized(stdout);
    assert!(
        out.diagnostics.is_empty(),
        "diagnostics: {:?}",
        out.diagnostics
    );
    let runs = runs(&out.events);
    let ends: Vec<EventType> = runs
        .iter()
        .map(|run| {
            let terminal: Vec<_> = run.iter().filter(|e| e.kind().is_run_terminal()).collect();
            assert_eq!(terminal.len(), 1, "one terminal per run: {run:?}");
            assert_eq!(
                run.last().unwrap().id(),
                terminal[0].id(),
                "the terminal ends its run"
            );
            terminal[0].kind()
        })
        .collect();
    assert_eq!(ends, terminals, "the run terminals");
    for run in &runs {
        let discarded: HashSet<&str> = run
            .iter()
            .filter(|e| e.kind() == EventType::MessageReceived)
            .filter(|e| e.data().get("discarded") == Some(&json!(true)))
            .filter_map(|e| e.data_str("message_id"))
            .collect();
        let of = |kind, key| -> String {
            run.iter()
                .filter(|e| e.kind() == kind)
                .filter(|e| {
                    !e.data_str("message_id")
                        .is_some_and(|m| discarded.contains(m))
                })
                .filter_map(|e| e.data_str(key))
                .collect()
        };
        assert_eq!(
            of(EventType::MessageStreamed, "delta"),
            of(EventType::MessageReceived, "content"),
            "the chunks put together are the whole messages (abandoned ones aside)"
        );
    }
    out.events
}

fn of_kind(events: &[Event], kind: EventType) -> Vec<&Event> {
    events.iter().filter(|e| e.kind() == kind).collect()
}

/// The text of the last `assistant` text block in `lines`.
fn final_text(lines: &[Value]) -> String {
    lines
        .iter()
        .rev()
        .find(|v| v["type"] == "assistant" && s(v, "/message/content/0/type") == "text")
        .map(|v| s(v, "/message/content/0/text").to_owned())
        .unwrap()
}

fn assert_message_received(events: &[Event], text: &str) {
    assert!(
        of_kind(events, EventType::MessageReceived)
            .iter()
            .any(|e| e.data_str("content") == Some(text)),
        "a message_received with the whole text {text:?}"
    );
}

#[test]
fn a_plain_prompt_streams_thinking_then_an_answer_that_quotes_it() {
    let mut demo = Demo::spawn(0);
    let lines = demo.turn("hello there");
    check_trace(
        &lines,
        expect![[r#"
            system init
            system status
            stream message_start
            stream content_block_start thinking
            stream content_block_delta thinking_delta ×3
            stream content_block_delta signature_delta
            assistant thinking
            stream content_block_stop
            stream content_block_start text
            stream content_block_delta text_delta ×10
            assistant text
            stream content_block_stop
            stream message_delta end_turn
            stream message_stop
            result success is_error=false terminal_reason=completed
        "#]],
    );
    check_protocol(&lines, false);
    let init = &lines[0];
    assert_eq!(init["model"], "demo-1");
    assert_eq!(init["tools"], json!(["Bash", "Read", "TodoWrite"]));
    assert_eq!(init["claude_code_version"], "agentwire-demo");
    assert_eq!(init["permissionMode"], "default");
    assert_eq!(lines[2]["event"]["message"]["id"], "msg_demo_1");
    let text = final_text(&lines);
    assert!(text.contains("\"hello there\""), "{text}");
    let result = lines.last().unwrap();
    assert_eq!(result["result"], text.as_str());
    assert_eq!(result["num_turns"], 1);
    assert_eq!(result["session_id"], init["session_id"]);
    for key in ["duration_ms", "total_cost_usd", "usage"] {
        assert!(result.get(key).is_some(), "result.{key}");
    }

    let done = demo.finish();
    assert!(done.status.success(), "EOF exits 0: {:?}", done.status);
    assert!(done.rest.is_empty());
    let events = check_canonical(&done.stdout, &[EventType::RunCompleted]);
    assert_message_received(&events, &text);
}

#[test]
fn a_tool_turn_runs_bash_then_answers_in_a_second_message() {
    let mut demo = Demo::spawn(0);
    let lines = demo.turn("use a tool to look around");
    check_trace(
        &lines,
        expect![[r#"
            system init
            system status
            stream message_start
            stream content_block_start thinking
            stream content_block_delta thinking_delta ×3
            stream content_block_delta signature_delta
            assistant thinking
            stream content_block_stop
            stream content_block_start tool_use
            stream content_block_delta input_json_delta ×3
            assistant tool_use
            stream content_block_stop
            stream message_delta tool_use
            stream message_stop
            user tool_result
            system status
            stream message_start
            stream content_block_start text
            stream content_block_delta text_delta ×3
            assistant text
            stream content_block_stop
            stream message_delta end_turn
            stream message_stop
            result success is_error=false terminal_reason=completed
        "#]],
    );
    check_protocol(&lines, false);
    let tool_use = lines
        .iter()
        .find(|v| label(v) == "assistant tool_use")
        .unwrap();
    assert_eq!(
        tool_use["message"]["content"][0],
        json!({"type": "tool_use", "id": "toolu_demo_1", "name": "Bash",
               "input": {"command": "ls", "description": "List the files in the working directory"}})
    );
    let result = lines
        .iter()
        .find(|v| label(v) == "user tool_result")
        .unwrap();
    assert_eq!(
        result["message"]["content"][0]["tool_use_id"],
        "toolu_demo_1"
    );
    assert_eq!(result["tool_use_result"]["interrupted"], false);
    assert_eq!(result["tool_use_result"]["stderr"], "");
    assert!(!s(result, "/tool_use_result/stdout").is_empty());
    let ids: Vec<&str> = lines
        .iter()
        .filter(|v| v["type"] == "assistant")
        .map(|v| s(v, "/message/id"))
        .collect();
    assert_eq!(ids, ["msg_demo_1", "msg_demo_1", "msg_demo_2"]);
    assert_eq!(lines.last().unwrap()["num_turns"], 2);

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(&done.stdout, &[EventType::RunCompleted]);
    let started = of_kind(&events, EventType::ToolCallStarted);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].data_str("tool_call_id"), Some("toolu_demo_1"));
    assert_eq!(started[0].data_str("tool_name"), Some("Bash"));
    let completed = of_kind(&events, EventType::ToolCallCompleted);
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].data_str("tool_call_id"), Some("toolu_demo_1"));
    assert_message_received(&events, &final_text(&lines));
}

#[test]
fn approval_round_trip_allow_then_deny_then_bypass() {
    let mut demo = Demo::spawn(0);

    // Allowed: the request, then the tool runs.
    demo.prompt("approve running ls");
    let asked = demo.read_until(|v| v["type"] == "control_request");
    let request = asked.last().unwrap();
    let request_id = s(request, "/request_id").to_owned();
    assert_eq!(request_id, "req_demo_1");
    assert_eq!(request["request"]["subtype"], "can_use_tool");
    assert_eq!(request["request"]["tool_name"], "Bash");
    assert_eq!(request["request"]["tool_use_id"], "toolu_demo_1");
    assert_eq!(request["request"]["input"]["command"], "ls");
    assert_eq!(
        label(&asked[asked.len() - 2]),
        "stream message_stop",
        "asked once the tool_use message is complete"
    );
    demo.answer(&request_id, "allow");
    let rest = demo.read_until(is_result);
    check_trace(
        &rest,
        expect![[r#"
            user tool_result
            system status
            stream message_start
            stream content_block_start text
            stream content_block_delta text_delta ×3
            assistant text
            stream content_block_stop
            stream message_delta end_turn
            stream message_stop
            result success is_error=false terminal_reason=completed
        "#]],
    );
    let allowed: Vec<Value> = asked.into_iter().chain(rest).collect();
    check_protocol(&allowed, false);

    // Denied: an error tool_result and an answer that says so.
    demo.prompt("approve it again");
    let asked = demo.read_until(|v| v["type"] == "control_request");
    let request = asked.last().unwrap();
    assert_eq!(request["request"]["tool_use_id"], "toolu_demo_2");
    demo.answer(s(request, "/request_id"), "deny");
    let rest = demo.read_until(is_result);
    let result_line = &rest[0];
    assert_eq!(label(result_line), "user tool_result is_error");
    assert!(s(result_line, "/message/content/0/content")
        .starts_with("The user doesn't want to proceed with this tool use"));
    let text = final_text(&rest);
    assert!(text.contains("denied"), "{text}");
    let result = rest.last().unwrap();
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["permission_denials"][0]["tool_use_id"],
        "toolu_demo_2"
    );

    // bypassPermissions: no prompt, and the next init says so.
    demo.control(
        "mode_1",
        json!({"subtype": "set_permission_mode", "mode": "bypassPermissions"}),
    );
    let response = demo.next().unwrap();
    assert_eq!(
        response,
        json!({"type": "control_response", "response": {"subtype": "success", "request_id": "mode_1"}})
    );
    let bypassed = demo.turn("approve once more");
    assert_eq!(bypassed[0]["permissionMode"], "bypassPermissions");
    assert!(bypassed.iter().all(|v| v["type"] != "control_request"));
    assert_eq!(
        label(&bypassed[bypassed.len() - 1]),
        "result success is_error=false terminal_reason=completed"
    );

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(
        &done.stdout,
        &[
            EventType::RunCompleted,
            EventType::RunCompleted,
            EventType::RunCompleted,
        ],
    );
    let asked = of_kind(&events, EventType::ToolApprovalRequested);
    assert_eq!(asked.len(), 2, "two approvals asked");
    assert_eq!(asked[0].data_str("request_id"), Some("req_demo_1"));
    assert_eq!(asked[0].data_str("tool_name"), Some("Bash"));
    assert_eq!(asked[0].data_str("tool_call_id"), Some("toolu_demo_1"));
    let completed = of_kind(&events, EventType::ToolCallCompleted);
    let ids: Vec<_> = completed
        .iter()
        .map(|e| e.data_str("tool_call_id"))
        .collect();
    assert_eq!(ids, [Some("toolu_demo_1"), Some("toolu_demo_3")]);
    let failed = of_kind(&events, EventType::ToolCallFailed);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].data_str("tool_call_id"), Some("toolu_demo_2"));
}

#[test]
fn a_todo_turn_writes_the_list() {
    let mut demo = Demo::spawn(0);
    let lines = demo.turn("make a todo list");
    check_protocol(&lines, false);
    let tool_use = lines
        .iter()
        .find(|v| label(v) == "assistant tool_use")
        .unwrap();
    let block = &tool_use["message"]["content"][0];
    assert_eq!(block["name"], "TodoWrite");
    let todos = block["input"]["todos"].as_array().unwrap();
    let statuses: Vec<&str> = todos.iter().map(|t| s(t, "/status")).collect();
    assert_eq!(statuses, ["completed", "in_progress", "pending"]);
    assert!(todos
        .iter()
        .all(|t| !s(t, "/content").is_empty() && !s(t, "/activeForm").is_empty()));
    let result = lines
        .iter()
        .find(|v| label(v) == "user tool_result")
        .unwrap();
    assert_eq!(result["message"]["content"][0]["tool_use_id"], block["id"]);
    assert_eq!(
        result["tool_use_result"]["newTodos"],
        block["input"]["todos"]
    );

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(&done.stdout, &[EventType::RunCompleted]);
    let todo = of_kind(&events, EventType::TodoUpdated);
    assert_eq!(todo.len(), 1);
    assert_eq!(todo[0].data()["items"].as_array().map(Vec::len), Some(3));
    assert_message_received(&events, &final_text(&lines));
}

#[test]
fn fail_gives_the_synthetic_api_error_turn() {
    let mut demo = Demo::spawn(0);
    let lines = demo.turn("please fail");
    check_trace(
        &lines,
        expect![[r#"
            system init
            system status
            system api_retry
            assistant text error=authentication_failed
            result success is_error=true terminal_reason=completed
        "#]],
    );
    check_protocol(&lines, false);
    let assistant = &lines[3];
    assert_eq!(assistant["message"]["model"], "<synthetic>");
    let text = s(assistant, "/message/content/0/text");
    assert!(text.starts_with("API Error: 401"), "{text}");
    let result = &lines[4];
    assert_eq!(result["result"], text);
    assert_eq!(result["api_error_status"], 401);

    let limited = demo.turn("fail with a rate limit");
    assert_eq!(limited[3]["error"], "rate_limit");
    assert_eq!(limited[4]["api_error_status"], 429);

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(&done.stdout, &[EventType::RunFailed, EventType::RunFailed]);
    let failed = of_kind(&events, EventType::RunFailed);
    assert!(
        failed[0]
            .data_str("error_message")
            .is_some_and(|m| m.contains("API Error")),
        "{:?}",
        failed[0]
    );
}

#[test]
fn an_interrupt_stops_the_stream_and_ends_the_turn_cancelled() {
    let mut demo = Demo::spawn(5);
    demo.prompt("be slow about it");
    let mut lines = demo.read_until(|v| label(v) == "stream content_block_delta text_delta");
    demo.control("int_1", json!({"subtype": "interrupt"}));
    lines.extend(demo.read_until(is_result));
    check_protocol(&lines, true);
    let at = lines
        .iter()
        .position(|v| v["type"] == "control_response")
        .expect("the interrupt is answered");
    assert_eq!(
        lines[at],
        json!({"type": "control_response", "response": {"subtype": "success", "request_id": "int_1"}})
    );
    check_trace(
        &lines[at..],
        expect![[r#"
            control_response success
            user text
            result error_during_execution is_error=true terminal_reason=aborted_streaming
        "#]],
    );
    assert_eq!(
        lines[at + 1]["message"]["content"][0]["text"],
        "[Request interrupted by user]"
    );
    assert!(
        lines.iter().all(|v| label(v) != "stream message_stop"),
        "the interrupted message never stops"
    );
    let deltas = lines
        .iter()
        .filter(|v| label(v) == "stream content_block_delta text_delta")
        .count();
    assert!(
        deltas < 100,
        "the slow answer was cut short ({deltas} chunks)"
    );

    // With no turn running: the response and nothing else; the next turn starts cleanly.
    demo.control("int_2", json!({"subtype": "interrupt"}));
    demo.prompt("hello again");
    let next = demo.read_until(is_result);
    assert_eq!(
        next[0],
        json!({"type": "control_response", "response": {"subtype": "success", "request_id": "int_2"}})
    );
    assert_eq!(label(&next[1]), "system init");
    check_protocol(&next, false);

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(
        &done.stdout,
        &[EventType::RunCancelled, EventType::RunCompleted],
    );
    let cancelled = of_kind(&events, EventType::RunCancelled);
    assert_eq!(cancelled[0].data_str("reason"), Some("interrupted"));
    let abandoned = of_kind(&events, EventType::MessageReceived);
    assert_eq!(abandoned[0].data_str("message_id"), Some("msg_demo_1"));
    assert_eq!(
        abandoned[0].data().get("discarded"),
        Some(&json!(true)),
        "the interrupted message is closed as discarded"
    );
}

#[test]
fn crash_exits_3_mid_turn_with_stderr() {
    let mut demo = Demo::spawn(0);
    demo.prompt("crash now");
    let done = demo.wait();
    assert_eq!(done.status.code(), Some(3), "{:?}", done.status);
    assert!(done.rest.iter().all(|v| v["type"] != "result"), "no result");
    assert!(
        done.rest
            .iter()
            .any(|v| label(v) == "stream content_block_delta text_delta"),
        "it crashed after some deltas"
    );
    assert!(
        done.stderr.contains("crashed on purpose"),
        "{}",
        done.stderr
    );
}

#[test]
fn background_work_wakes_the_agent_without_input() {
    let mut demo = Demo::spawn(1);
    let first = demo.turn("start a job in the background");
    assert!(final_text(&first).contains("background task"));
    // No input: the agent takes its own turn.
    let woke = demo.read_until(is_result);
    check_protocol(&woke, false);
    assert_eq!(label(&woke[0]), "system init");
    let text = final_text(&woke);
    assert!(text.contains("background task finished"), "{text}");
    assert_eq!(
        label(woke.last().unwrap()),
        "result success is_error=false terminal_reason=completed"
    );

    let done = demo.finish();
    assert!(done.status.success());
    let events = check_canonical(
        &done.stdout,
        &[EventType::RunCompleted, EventType::RunCompleted],
    );
    assert_message_received(&events, &text);
}

#[test]
fn control_requests_and_bad_lines() {
    let mut demo = Demo::spawn(0);
    demo.control("init_1", json!({"subtype": "initialize"}));
    let init = demo.next().unwrap();
    assert_eq!(init["type"], "control_response");
    assert_eq!(init["response"]["subtype"], "success");
    assert_eq!(init["response"]["request_id"], "init_1");
    assert!(init["response"]["response"]["commands"]
        .as_array()
        .is_some_and(|c| !c.is_empty()));
    assert_eq!(init["response"]["response"]["agents"], json!([]));

    demo.control(
        "mode_1",
        json!({"subtype": "set_permission_mode", "mode": "acceptEdits"}),
    );
    assert_eq!(demo.next().unwrap()["response"]["subtype"], "success");
    demo.control(
        "mode_2",
        json!({"subtype": "set_permission_mode", "mode": "chaos"}),
    );
    assert_eq!(demo.next().unwrap()["response"]["subtype"], "error");
    demo.control("what_1", json!({"subtype": "frobnicate"}));
    assert_eq!(demo.next().unwrap()["response"]["subtype"], "error");

    demo.send_raw("this is not json");
    demo.send_raw(r#"{"type":"user"}"#);
    demo.send(
        json!({"type": "user", "message": {"role": "user", "content": "a plain string prompt"}}),
    );
    let lines = demo.read_until(is_result);
    assert_eq!(lines[0]["permissionMode"], "acceptEdits");
    assert!(final_text(&lines).contains("a plain string prompt"));

    let done = demo.finish();
    assert!(done.status.success());
    assert_eq!(
        done.stderr.lines().count(),
        2,
        "one stderr line per bad stdin line: {}",
        done.stderr
    );
    check_canonical(&done.stdout, &[EventType::RunCompleted]);
}

#[test]
fn eof_mid_turn_finishes_the_turn_then_exits_0() {
    let mut demo = Demo::spawn(1);
    demo.prompt("slow please");
    let done = demo.finish();
    assert!(done.status.success(), "{:?}", done.status);
    check_protocol(&done.rest, false);
    let last = done.rest.last().expect("the turn was played");
    assert_eq!(
        label(last),
        "result success is_error=false terminal_reason=completed"
    );
    let deltas = done
        .rest
        .iter()
        .filter(|v| label(v) == "stream content_block_delta text_delta")
        .count();
    assert_eq!(deltas, 200, "the whole slow answer");
}
