//! The fake model server (`agentwire-testkit fake-model`) over plain HTTP, one test per API shape: what
//! the real CLIs will parse must be what each API really sends.

#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::process::{Command, Stdio};

use common::{http, FakeModel};
use serde_json::{json, Value};

/// The SSE frames of a body: `(event name, data)`.
fn frames(body: &Value) -> Vec<(Option<String>, Value)> {
    let text = body.as_str().expect("an SSE body");
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut event = None;
            let mut data = Value::Null;
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or(Value::String(d.to_owned()));
                }
            }
            (event, data)
        })
        .collect()
}

fn post(fake: &FakeModel, path: &str, body: Value) -> (u16, Value) {
    http(
        fake.addr,
        "POST",
        path,
        Some(body),
        &[("x-api-key", "sk-ant-secret")],
    )
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

/// The concatenated `field` of the deltas of type `kind` in Anthropic frames.
fn anthropic_deltas(frames: &[(Option<String>, Value)], kind: &str, field: &str) -> String {
    frames
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == kind)
        .map(|(_, d)| d["delta"][field].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn anthropic_messages_stream_a_plain_text_in_deltas() {
    let fake = FakeModel::start();
    let (status, body) = post(
        &fake,
        "/v1/messages?beta=true",
        json!({"model": "claude-opus-4-8", "stream": true, "messages": [user("hello")]}),
    );
    assert_eq!(status, 200);
    let f = frames(&body);
    let names: Vec<_> = f.iter().map(|(e, _)| e.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(f[0].1["message"]["model"], "claude-opus-4-8");
    assert_eq!(
        anthropic_deltas(&f, "text_delta", "text"),
        "Hello from the fake model."
    );
    assert_eq!(f[6].1["delta"]["stop_reason"], "end_turn");
}

#[test]
fn anthropic_tool_turn_uses_the_offered_tool_then_echoes_its_result_as_json() {
    let fake = FakeModel::start();
    let tools = json!([{"name": "Read"}, {"name": "Bash"}]);
    let (status, first) = post(
        &fake,
        "/v1/messages",
        json!({"model": "m", "stream": false, "tools": tools, "messages": [user("use a tool")]}),
    );
    assert_eq!(status, 200);
    assert_eq!(first["stop_reason"], "tool_use");
    let call = &first["content"][1];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(call["name"], "Bash");
    assert_eq!(call["input"]["command"], "echo hello-from-tool");
    let follow = json!({"model": "m", "stream": false, "tools": tools, "messages": [
        user("use a tool"),
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
            "content": "hello-from-tool", "is_error": false}]},
    ]});
    let (_, second) = post(&fake, "/v1/messages", follow);
    assert_eq!(
        second["content"][0]["text"],
        "The tool said: hello-from-tool"
    );
    assert_eq!(second["stop_reason"], "end_turn");
}

#[test]
fn anthropic_think_streams_thinking_text_and_two_parallel_tool_calls() {
    let fake = FakeModel::start();
    let (_, body) = post(
        &fake,
        "/v1/messages",
        json!({"model": "m", "stream": true, "tools": [{"name": "Bash"}],
               "messages": [user("think hard")]}),
    );
    let f = frames(&body);
    let starts: Vec<&Value> = f
        .iter()
        .filter(|(e, _)| e.as_deref() == Some("content_block_start"))
        .map(|(_, d)| &d["content_block"]["type"])
        .collect();
    assert_eq!(starts, ["thinking", "text", "tool_use", "tool_use"]);
    assert!(!anthropic_deltas(&f, "thinking_delta", "thinking").is_empty());
    assert!(!anthropic_deltas(&f, "signature_delta", "signature").is_empty());
    for (index, command) in [(2, "echo one"), (3, "echo two")] {
        let json: String = f
            .iter()
            .filter(|(_, d)| d["index"] == index && d["delta"]["type"] == "input_json_delta")
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
            .collect();
        let input: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(input["command"], command);
    }
}

#[test]
fn http_error_scenarios_answer_with_each_apis_error_body() {
    let fake = FakeModel::start();
    for (status, kind) in [
        (401, "authentication_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (529, "overloaded_error"),
    ] {
        let (got, body) = post(
            &fake,
            "/v1/messages",
            json!({"model": "m", "stream": true, "messages": [user(&format!("http{status}"))]}),
        );
        assert_eq!(got, status);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], kind);
    }
    let (got, body) = post(
        &fake,
        "/v1/responses",
        json!({"model": "gpt-5.5", "input": [user("http401")]}),
    );
    assert_eq!(
        (got, body["error"]["code"].as_str()),
        (401, Some("invalid_api_key"))
    );
    let (got, body) = post(
        &fake,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        json!({"contents": [{"role": "user", "parts": [{"text": "http429"}]}]}),
    );
    assert_eq!(
        (got, body["error"]["status"].as_str()),
        (429, Some("RESOURCE_EXHAUSTED"))
    );
}

#[test]
fn midstream_errors_break_off_the_stream() {
    let fake = FakeModel::start();
    let (_, body) = post(
        &fake,
        "/v1/messages",
        json!({"model": "m", "stream": true, "messages": [user("midstream")]}),
    );
    let f = frames(&body);
    let (last, data) = f.last().unwrap();
    assert_eq!(last.as_deref(), Some("error"));
    assert_eq!(data["error"]["type"], "overloaded_error");
    assert!(!f.iter().any(|(e, _)| e.as_deref() == Some("message_stop")));
    // The CLI's non-streaming retry gets the whole text.
    let (_, whole) = post(
        &fake,
        "/v1/messages",
        json!({"model": "m", "stream": false, "messages": [user("midstream")]}),
    );
    assert_eq!(
        whole["content"][0]["text"],
        "This answer breaks off midway."
    );
    let (_, body) = post(
        &fake,
        "/v1/responses",
        json!({"model": "gpt-5.5", "stream": true, "input": [user("midstream")]}),
    );
    let f = frames(&body);
    assert_eq!(f.last().unwrap().1["type"], "response.failed");
}

#[test]
fn responses_api_streams_a_function_call_and_usage() {
    let fake = FakeModel::start();
    let tools = json!([{"type": "function", "name": "exec_command"}]);
    let (status, body) = post(
        &fake,
        "/v1/responses",
        json!({"model": "gpt-5.5", "stream": true, "tools": tools, "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tool"}]}]}),
    );
    assert_eq!(status, 200);
    let f = frames(&body);
    assert_eq!(f[0].0.as_deref(), Some("response.created"));
    let text: String = f
        .iter()
        .filter(|(_, d)| d["type"] == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "Running a command.");
    let call = f
        .iter()
        .find(|(_, d)| {
            d["type"] == "response.output_item.done" && d["item"]["type"] == "function_call"
        })
        .map(|(_, d)| d["item"].clone())
        .unwrap();
    assert_eq!(call["name"], "exec_command");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["cmd"], "echo hello-from-tool");
    let (_, done) = f.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["usage"]["input_tokens"], 42);
    // The follow-up carries the output.
    let (_, body) = post(
        &fake,
        "/v1/responses",
        json!({"model": "gpt-5.5", "tools": tools, "input": [
            user("tool"), call, {"type": "function_call_output", "call_id": "call_x", "output": "hello-from-tool"}]}),
    );
    let text: String = frames(&body)
        .iter()
        .filter(|(_, d)| d["type"] == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "The tool said: hello-from-tool");
}

#[test]
fn chat_completions_stream_reasoning_text_and_tool_call_deltas() {
    let fake = FakeModel::start();
    let (status, body) = post(
        &fake,
        "/v1/chat/completions",
        json!({"model": "fake-model", "stream": true,
               "tools": [{"type": "function", "function": {"name": "bash"}}],
               "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "think"}]}),
    );
    assert_eq!(status, 200);
    let f = frames(&body);
    assert_eq!(f.last().unwrap().1, "[DONE]");
    let delta = |key: &str| -> String {
        f.iter()
            .filter_map(|(_, d)| d["choices"][0]["delta"][key].as_str())
            .collect()
    };
    assert!(!delta("reasoning_content").is_empty());
    assert_eq!(delta("content"), "I will run two commands at once.");
    let calls: Vec<&Value> = f
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .filter(|c| c.get("id").is_some())
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["function"]["name"], "bash");
    let finish = &f[f.len() - 2].1;
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert!(finish["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn gemini_streams_function_calls_and_answers_the_router() {
    let fake = FakeModel::start();
    let (status, body) = post(
        &fake,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
               "contents": [{"role": "user", "parts": [{"text": "tool"}]}]}),
    );
    assert_eq!(status, 200);
    let f = frames(&body);
    let last = &f.last().unwrap().1["candidates"][0];
    assert_eq!(last["finishReason"], "STOP");
    assert_eq!(
        last["content"]["parts"][0]["functionCall"]["name"],
        "run_shell_command"
    );
    assert_eq!(
        last["content"]["parts"][0]["functionCall"]["args"]["command"],
        "echo hello-from-tool"
    );
    let (_, routed) = post(
        &fake,
        "/v1beta/models/gemini-3.5-flash-lite:generateContent",
        json!({"contents": [{"role": "user", "parts": [{"text": "route me"}]}],
               "generationConfig": {"responseJsonSchema": {"properties": {"model_choice": {}}}}}),
    );
    let text = routed["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    let choice: Value = serde_json::from_str(text).unwrap();
    assert_eq!(choice["model_choice"], "flash");
    let (_, count) = post(
        &fake,
        "/v1beta/models/gemini-2.5-pro:countTokens",
        json!({"contents": []}),
    );
    assert_eq!(count["totalTokens"], 42);
}

#[test]
fn every_request_is_recorded_with_credentials_redacted_and_unknown_paths_are_404() {
    let fake = FakeModel::start();
    let (status, _) = post(
        &fake,
        "/v1/messages/count_tokens",
        json!({"model": "m", "messages": []}),
    );
    assert_eq!(status, 200);
    let (status, models) = http(fake.addr, "GET", "/v1/models", None, &[]);
    assert_eq!(status, 200);
    assert!(!models["data"].as_array().unwrap().is_empty());
    let (status, _) = http(fake.addr, "GET", "/api/oauth/profile", None, &[]);
    assert_eq!(status, 404);
    let requests = fake.requests();
    let seen: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r["method"].as_str().unwrap(), r["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
            ("GET", "/api/oauth/profile")
        ]
    );
    assert_eq!(requests[0]["headers"]["x-api-key"], "<redacted>");
    assert_eq!(requests[0]["body"]["model"], "m");
    let (status, _) = http(fake.addr, "DELETE", "/_requests", None, &[]);
    assert_eq!(status, 204);
    assert!(fake.requests().is_empty());
}

#[test]
fn the_test_tools_are_not_in_the_product_binary() {
    for tool in ["fake-model", "chaos-proxy"] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
            .args([tool, "--help"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "agentwire {tool} exists");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("unrecognized subcommand"), "{stderr}");
    }
}

#[test]
fn the_fake_model_refuses_a_non_loopback_address() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire-testkit"))
        .args(["fake-model", "--addr", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
}
