//! The session's rules as a table of scripts, each run through [`check`] with the real Claude
//! stream-json adapter (the demo agent's) and no process, no store, no clock.
//!
//! One step per line, at the time of the last `at T` (0 at first; `at` alone polls nothing):
//! * `out LINE`: the agent printed LINE (shorthands: `init`, `text WORDS`, `result`,
//!   `approval ID`); `eof`; `exit CODE` (`exit signal`);
//! * `req N REQUEST`: request N (`start PROMPT`, `start#TURN PROMPT` with a client's turn
//!   id, `interrupt`, `interrupt TURN`, `answer ID allow|deny`,
//!   `mode M`, `model M`, `describe`, `close`, `abandon`);
//! * `timeout`; `shutdown`; `stdin failed WHY`; `stdin wrote N`; `request failed [fatal] WHY`
//!   (a request the adapter made itself);
//! * `store up` (the default: every write is stored at once), `store down WHY`.
//!
//! The trace shows, per step, what came out: stdin bytes (cut), store writes (events
//! rendered one per line), replies, actions, notes; then `timeout`, `not reading` and `done`
//! when they hold.

use std::path::PathBuf;

use expect_test::{expect, Expect};

use super::*;
use crate::companion::adapter::ClaudeStdio;
use crate::core::render::render_events;
use crate::core::wire::Decision;

fn line(words: &[&str]) -> String {
    let sid = "cli-1";
    match words {
        ["init"] => format!(
            r#"{{"type":"system","subtype":"init","session_id":"{sid}","model":"demo-1","cwd":"/w","tools":["Bash"],"permissionMode":"default","slash_commands":["compact"]}}"#
        ),
        ["text", rest @ ..] => format!(
            r#"{{"type":"assistant","message":{{"id":"msg_1","role":"assistant","model":"demo-1","content":[{{"type":"text","text":"{}"}}]}},"session_id":"{sid}"}}"#,
            rest.join(" ")
        ),
        ["result"] => format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"result":"done","stop_reason":"end_turn","session_id":"{sid}"}}"#
        ),
        ["approval", id] => format!(
            r#"{{"type":"control_request","request_id":"{id}","request":{{"subtype":"can_use_tool","tool_name":"Bash","input":{{"command":"ls"}},"tool_use_id":"toolu_1"}}}}"#
        ),
        other => other.join(" "),
    }
}

fn request(words: &[&str]) -> Request {
    match words {
        [start, prompt @ ..] if start.starts_with("start") => Request::StartTurn {
            prompt: prompt.join(" "),
            turn_id: start.strip_prefix("start#").map(str::to_owned),
        },
        ["interrupt"] => Request::Interrupt(None),
        ["interrupt", turn] => Request::Interrupt(Some(turn.to_string())),
        ["answer", id, "allow"] => Request::Answer(id.to_string(), Decision::Allow),
        ["answer", id, "deny"] => Request::Answer(id.to_string(), Decision::Deny),
        ["mode", m] => Request::SetMode(m.to_string()),
        ["model", m] => Request::SetModel(Some(m.to_string()), None),
        ["describe"] => Request::Describe,
        ["close"] => Request::Close,
        ["abandon"] => Request::Abandon,
        other => panic!("bad request {other:?}"),
    }
}

fn config() -> SessionConfig {
    let mut config = SessionConfig::new("ses_1", "seed");
    config.cancel_grace_ms = 500;
    config.store_queue.max_unstored = 8;
    config.store_drain_ms = 1_000;
    config.max_stdin_bytes = 300;
    config
}

fn check(script: &str, expect: Expect) {
    check_with(config(), script, expect)
}

fn check_with(config: SessionConfig, script: &str, expect: Expect) {
    let adapter = Box::new(ClaudeStdio::demo(PathBuf::from("agentwire"), 1, None));
    let mut s = Session::new(config, adapter);
    let mut now = 0;
    let mut store: Option<String> = None;
    let mut seq = 0;
    let mut trace = String::new();
    s.handle_start(now);
    for step in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = step.split_whitespace().collect();
        match &words[..] {
            ["at", t] => {
                now = t.parse().unwrap();
                trace.push_str(&format!("{step}\n"));
                continue;
            }
            ["out", rest @ ..] => s.handle_output(format!("{}\n", line(rest)).as_bytes(), now),
            ["eof"] => s.handle_output_eof(now),
            ["exit", "signal"] => s.handle_exit(None, now),
            ["exit", code] => s.handle_exit(Some(code.parse().unwrap()), now),
            ["req", n, rest @ ..] => s.handle_request(n.parse().unwrap(), request(rest), now),
            ["timeout"] => s.handle_timeout(now),
            ["request", "failed", "fatal", why @ ..] => s.handle_request_failed(
                crate::core::provider_error::ErrorKind::RequestFailed,
                why.join(" "),
                true,
                now,
            ),
            ["request", "failed", why @ ..] => s.handle_request_failed(
                crate::core::provider_error::ErrorKind::RequestFailed,
                why.join(" "),
                false,
                now,
            ),
            ["shutdown"] => s.handle_shutdown(now),
            ["stdin", "failed", why @ ..] => s.handle_stdin_failed(why.join(" ")),
            ["stdin", "wrote", n] => s.handle_stdin_written(n.parse().unwrap()),
            ["store", "up"] => store = None,
            ["store", "down", why @ ..] => store = Some(why.join(" ")),
            _ => panic!("bad step {step:?}"),
        }
        trace.push_str(&format!("{step}\n"));
        let mut out = Vec::new();
        while let Some(bytes) = s.poll_stdin() {
            let text = String::from_utf8_lossy(&bytes);
            let cut: String = text.trim_end().chars().take(90).collect();
            out.push(format!("stdin {cut}"));
        }
        // The store answers every write at once, up or down.
        while let Some(op) = s.poll_write(now) {
            let answer = match &store {
                None => Written::Stored,
                Some(why) => Written::Unavailable(why.clone()),
            };
            let shown = match &op {
                StoreOp::Append(events) => {
                    let mut numbered = Vec::new();
                    for e in events {
                        // A failed write shows sequence 0: nothing was numbered.
                        let n = match answer {
                            Written::Stored => {
                                seq += 1;
                                seq
                            }
                            _ => 0,
                        };
                        numbered.push(e.clone().into_sequenced(n));
                    }
                    let rendered = render_events(&numbered);
                    let lines: Vec<String> = rendered.lines().map(|l| format!("    {l}")).collect();
                    format!("append\n{}", lines.join("\n"))
                }
                StoreOp::State(state, _) => format!("state {}", state.as_str()),
                StoreOp::ProviderSessionId(h) => format!("handle {h}"),
            };
            let verdict = if answer == Written::Stored {
                ""
            } else {
                " (failed)"
            };
            out.push(format!("write{verdict} {shown}"));
            s.handle_written(answer, now);
            if store.is_some() {
                break;
            }
        }
        while let Some((id, reply)) = s.poll_reply() {
            let shown = match reply {
                Ok(Response::Turn(t)) => format!("ok {t}"),
                Ok(Response::Done) => "ok".to_owned(),
                Ok(Response::Described(v)) => format!(
                    "ok modes={} current_mode={} pending={} store={}",
                    v["modes"].as_array().map_or(0, Vec::len),
                    v["current_mode"],
                    v["pending_approvals"],
                    v["store"]
                ),
                Err(e) => format!("error {}: {}", e.code, e.message),
            };
            out.push(format!("reply {id} {shown}"));
        }
        while let Some(action) = s.poll_action() {
            out.push(format!("action {action:?}"));
        }
        while let Some(note) = s.poll_note() {
            out.push(format!("note {note:?}"));
        }
        let mut state = Vec::new();
        if let Some(t) = s.poll_timeout() {
            state.push(format!("timeout {t}"));
        }
        if !s.wants_output() {
            state.push("not reading".to_owned());
        }
        if s.unstored() > 0 {
            state.push(format!("unstored {}", s.unstored()));
        }
        if s.is_done() {
            state.push("done".to_owned());
        }
        if !state.is_empty() {
            out.push(format!("[{}]", state.join(", ")));
        }
        for o in out {
            trace.push_str(&format!("  {o}\n"));
        }
    }
    expect.assert_eq(&trace);
}

#[test]
fn a_turn_is_prompted_streamed_stored_in_order_and_ended_once() {
    check(
        "req 1 start hello there
         out init
         out text hi
         out result
         req 2 describe",
        expect![[r#"
            req 1 start hello there
              stdin {"message":{"content":[{"text":"hello there","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="hello there"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            out text hi
              [timeout 90000]
            out result
              write append
                4 t1 message_received role="assistant" content="hi"
                5 t1 run_completed
            req 2 describe
              reply 2 ok modes=3 current_mode="default" pending=[] store={"state":"available","unstored":0}
        "#]],
    );
}

/// What a client resends after a lost reply does nothing twice: a turn of its id is answered
/// again, an interrupt of a turn that ended is done, the same answer to an approval is done
/// (another answer is refused).
#[test]
fn commands_sent_again_are_carried_out_once() {
    check(
        "req 1 start#t-a run ls
         out init
         req 2 start#t-a run ls
         out approval req_1
         req 3 answer req_1 allow
         req 4 answer req_1 allow
         req 5 answer req_1 deny
         req 6 interrupt t-b
         stdin wrote 400
         req 7 interrupt t-a
         out result
         req 8 interrupt t-a
         req 9 start#t-a run ls
         req 10 start#t-b next",
        expect![[r#"
            req 1 start#t-a run ls
              stdin {"message":{"content":[{"text":"run ls","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="run ls"
              reply 1 ok t-a
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            req 2 start#t-a run ls
              reply 2 ok t-a
              [timeout 90000]
            out approval req_1
              write append
                4 t1 tool_approval_requested tool_name="Bash" tool_call_id="toolu_1" tool_input={"command":"ls"} request_id="req_1"
              [timeout 600000]
            req 3 answer req_1 allow
              stdin {"response":{"request_id":"req_1","response":{"behavior":"allow","updatedInput":{"command"
              write append
                5 t1 tool_approval_granted tool_call_id="toolu_1" request_id="req_1"
              reply 3 ok
              [timeout 600000]
            req 4 answer req_1 allow
              reply 4 ok
              [timeout 600000]
            req 5 answer req_1 deny
              reply 5 error unknown_request: approval "req_1" was already answered allow
              [timeout 600000]
            req 6 interrupt t-b
              reply 6 error no_active_turn: turn "t-b" is not running
              [timeout 600000]
            stdin wrote 400
              [timeout 600000]
            req 7 interrupt t-a
              stdin {"request":{"subtype":"interrupt"},"request_id":"interrupt_1","type":"control_request"}
              reply 7 ok
              [timeout 500]
            out result
              write append
                6 t1 run_completed
            req 8 interrupt t-a
              reply 8 ok
            req 9 start#t-a run ls
              reply 9 ok t-a
            req 10 start#t-b next
              stdin {"message":{"content":[{"text":"next","type":"text"}],"role":"user"},"type":"user"}
              write append
                7 t1 message_sent role="user" content="next"
              reply 10 ok t-b
              [timeout 90000]
        "#]],
    );
}

#[test]
fn what_the_adapter_cannot_do_is_refused_before_anything_is_written() {
    check(
        "req 1 interrupt
         req 2 mode nosuchmode
         req 3 model bigger
         req 4 answer req_9 allow
         req 5 start one
         out init
         req 6 start two
         req 7 mode plan",
        expect![[r#"
            req 1 interrupt
              reply 1 error no_active_turn: no turn is running
            req 2 mode nosuchmode
              reply 2 error unknown_mode: unknown mode "nosuchmode"; this session has ["default", "dontAsk", "bypassPermissions"]
            req 3 model bigger
              reply 3 error unsupported: the demo adapter cannot change the model
            req 4 answer req_9 allow
              reply 4 error unknown_request: no pending approval "req_9"
            req 5 start one
              stdin {"message":{"content":[{"text":"one","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="one"
              reply 5 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            req 6 start two
              reply 6 error foreground_turn_active: a foreground turn is already active (turn_c970f4356d1d0399952df94c)
              [timeout 90000]
            req 7 mode plan
              reply 7 error unknown_mode: unknown mode "plan"; this session has ["default", "dontAsk", "bypassPermissions"]
              [timeout 90000]
        "#]],
    );
}

#[test]
fn an_approval_waits_in_the_live_state_until_answered_and_the_answer_is_logged() {
    check(
        "req 1 start run ls
         out init
         out approval req_1
         req 2 describe
         req 3 answer req_1 allow
         req 4 answer req_1 allow
         req 5 describe",
        expect![[r#"
            req 1 start run ls
              stdin {"message":{"content":[{"text":"run ls","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="run ls"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            out approval req_1
              write append
                4 t1 tool_approval_requested tool_name="Bash" tool_call_id="toolu_1" tool_input={"command":"ls"} request_id="req_1"
              [timeout 600000]
            req 2 describe
              reply 2 ok modes=3 current_mode="default" pending=[{"request_id":"req_1","run_id":"turn_c970f4356d1d0399952df94c","tool_call_id":"toolu_1","tool_input":{"command":"ls"},"tool_name":"Bash"}] store={"state":"available","unstored":0}
              [timeout 600000]
            req 3 answer req_1 allow
              stdin {"response":{"request_id":"req_1","response":{"behavior":"allow","updatedInput":{"command"
              write append
                5 t1 tool_approval_granted tool_call_id="toolu_1" request_id="req_1"
              reply 3 ok
              [timeout 600000]
            req 4 answer req_1 allow
              reply 4 ok
              [timeout 600000]
            req 5 describe
              reply 5 ok modes=3 current_mode="default" pending=[] store={"state":"available","unstored":0}
              [timeout 600000]
        "#]],
    );
}

#[test]
fn an_interrupt_the_agent_ignores_ends_the_turn_after_the_grace() {
    check(
        "req 1 start go
         out init
         at 100
         req 2 interrupt
         at 599
         timeout
         at 600
         timeout
         out result",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            at 100
            req 2 interrupt
              stdin {"request":{"subtype":"interrupt"},"request_id":"interrupt_1","type":"control_request"}
              reply 2 ok
              [timeout 600]
            at 599
            timeout
              [timeout 600]
            at 600
            timeout
              write append
                4 t1 run_cancelled reason="interrupt_timeout"
            out result
              note Dropped { event_id: "evt_b72179ccf859ff1904d8d049b1b26493", kind: "StaleTerminal" }
        "#]],
    );
}

#[test]
fn the_process_exiting_mid_turn_fails_the_turn_and_the_session() {
    check(
        "req 1 start go
         out init
         out text partial
         eof
         exit 3
         req 2 start again",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            out text partial
              [timeout 90000]
            eof
              write append
                4 t1 message_received role="assistant" content="partial"
              [timeout 90000]
            exit 3
              write append
                5 t1 run_failed error_message="the agent process exited with code 3" provider_error.kind="process_exit" provider_error.exit_code=3
              write state failed
              write append
                6 -- session_failed error_message="the agent process exited with code 3" provider_error.kind="process_exit" provider_error.exit_code=3
              [done]
            req 2 start again
              reply 2 error not_connected: session "ses_1" is not running
              [done]
        "#]],
    );
}

#[test]
fn a_clean_exit_after_the_turns_ended_completes_the_session() {
    check(
        "req 1 start hi
         out init
         out text hello
         out result
         eof
         exit 0",
        expect![[r#"
            req 1 start hi
              stdin {"message":{"content":[{"text":"hi","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="hi"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            out text hello
              [timeout 90000]
            out result
              write append
                4 t1 message_received role="assistant" content="hello"
                5 t1 run_completed
            eof
            exit 0
              write state closed
              write append
                6 -- session_completed reason="exited"
              [done]
        "#]],
    );
}

#[test]
fn close_kills_the_agent_ends_the_turn_and_answers_once_the_end_is_stored() {
    check(
        "req 1 start go
         out init
         req 2 close
         req 3 start more
         eof
         exit signal",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            req 2 close
              action Kill
              [timeout 90000]
            req 3 start more
              reply 3 error not_connected: session "ses_1" is not running
              [timeout 90000]
            eof
              [timeout 90000]
            exit signal
              write append
                4 t1 run_cancelled reason="session_closed"
              write state closed
              write append
                5 -- session_completed reason="closed"
              reply 2 ok
              [done]
        "#]],
    );
}

#[test]
fn a_store_outage_stops_reading_when_full_and_close_is_answered_while_it_lasts() {
    let mut config = config();
    config.store_queue.max_unstored = 2;
    check_with(
        config,
        "req 1 start go
         out init
         store down disk full
         out text one
         out text two
         out text three
         out result
         req 2 describe
         req 3 close
         eof
         exit signal
         at 50
         timeout
         store up
         at 100
         timeout
         at 150
         timeout",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            store down disk full
              [timeout 90000]
            out text one
              [timeout 90000]
            out text two
              [timeout 90000]
            out text three
              [timeout 90000]
            out result
              write (failed) append
                0 t1 message_received role="assistant" content="one\n\ntwo\n\nthree"
                0 t1 run_completed
              note Store(Unavailable { error: "disk full" })
              [timeout 50, not reading, unstored 2]
            req 2 describe
              reply 2 ok modes=3 current_mode="default" pending=[] store={"attempts":1,"error":"disk full","since":"1970-01-01T00:00:00.000Z","state":"unavailable","unstored":2}
              [timeout 50, not reading, unstored 2]
            req 3 close
              action Kill
              [timeout 50, unstored 2]
            eof
              [timeout 50, unstored 2]
            exit signal
              reply 3 ok
              [timeout 50, unstored 3]
            at 50
            timeout
              write (failed) append
                0 t1 message_received role="assistant" content="one\n\ntwo\n\nthree"
                0 t1 run_completed
              [timeout 150, unstored 3]
            store up
              [timeout 150, unstored 3]
            at 100
            timeout
              [timeout 150, unstored 3]
            at 150
            timeout
              write append
                4 t1 message_received role="assistant" content="one\n\ntwo\n\nthree"
                5 t1 run_completed
              write state closed
              write append
                6 -- session_completed reason="closed"
              note Store(Recovered { since_ms: 0, attempts: 2 })
              [done]
        "#]],
    );
}

#[test]
fn shutdown_gives_up_on_what_the_store_never_takes_and_says_how_much() {
    check(
        "req 1 start go
         out init
         store down gone
         out text one
         req 2 close
         eof
         exit signal
         shutdown
         at 999
         timeout
         at 1000
         timeout",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            store down gone
              [timeout 90000]
            out text one
              [timeout 90000]
            req 2 close
              action Kill
              [timeout 90000]
            eof
              write (failed) append
                0 t1 message_received role="assistant" content="one"
              note Store(Unavailable { error: "gone" })
              [timeout 50, unstored 1]
            exit signal
              reply 2 ok
              [timeout 50, unstored 3]
            shutdown
              [timeout 50, unstored 3]
            at 999
            timeout
              write (failed) append
                0 t1 message_received role="assistant" content="one"
                0 t1 run_cancelled reason="session_closed"
              [timeout 1000, unstored 3]
            at 1000
            timeout
              note Lost { events: 3, why: "could not be stored before shutdown" }
              [done]
        "#]],
    );
}

#[test]
fn an_abandoned_session_writes_nothing_more() {
    check(
        "req 1 start go
         out init
         store down gone
         out text one
         req 2 abandon
         eof
         exit signal",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            store down gone
              [timeout 90000]
            out text one
              [timeout 90000]
            req 2 abandon
              action Kill
              [timeout 90000]
            eof
              [timeout 90000]
            exit signal
              reply 2 ok
              [timeout 90000, done]
        "#]],
    );
}

#[test]
fn an_agent_that_does_not_read_its_stdin_gets_no_more_than_the_bound_and_then_is_caught_up() {
    check(
        "req 1 start a prompt is never refused for its size, it is the user's turn to speak
         out init
         req 2 interrupt
         req 3 mode dontAsk
         stdin wrote 250
         req 4 mode dontAsk
         stdin failed writing to the agent: Broken pipe
         req 5 mode default",
        expect![[r#"
            req 1 start a prompt is never refused for its size, it is the user's turn to speak
              stdin {"message":{"content":[{"text":"a prompt is never refused for its size, it is the user's t
              write append
                1 t1 message_sent role="user" content="a prompt is never refused for its size, it is the user's tur"…
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            req 2 interrupt
              stdin {"request":{"subtype":"interrupt"},"request_id":"interrupt_1","type":"control_request"}
              reply 2 ok
              [timeout 500]
            req 3 mode dontAsk
              reply 3 error agent_busy: the agent is not reading its input (238 bytes wait for it)
              [timeout 500]
            stdin wrote 250
              [timeout 500]
            req 4 mode dontAsk
              stdin {"request":{"mode":"dontAsk","subtype":"set_permission_mode"},"request_id":"agentwire_cont
              write append
                4 t1 mode_changed
              reply 4 ok
              [timeout 500]
            stdin failed writing to the agent: Broken pipe
              note Stdin("writing to the agent: Broken pipe")
              [timeout 500]
            req 5 mode default
              reply 5 error not_connected: the agent's stdin is closed
              [timeout 500]
        "#]],
    );
}

#[test]
fn unreadable_output_is_logged_as_a_warning_next_to_what_could_be_read() {
    check(
        "req 1 start go
         out init
         out this is not JSON
         out text still here
         out result",
        expect![[r#"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                1 t1 message_sent role="user" content="go"
              reply 1 ok turn_c970f4356d1d0399952df94c
              [timeout 90000]
            out init
              write handle cli-1
              write append
                2 -- session_started model="demo-1"
                3 t1 run_started
              [timeout 90000]
            out this is not JSON
              write append
                4 -- error_occurred error_message="unreadable provider output: line 2: invalid_json: expected i"… reason="invalid_json" provider_error.kind="unreadable_output"
              [timeout 90000]
            out text still here
              [timeout 90000]
            out result
              write append
                5 t1 message_received role="assistant" content="still here"
                6 t1 run_completed
        "#]],
    );
}

#[test]
fn a_failed_adapter_request_fails_the_turn_and_a_fatal_one_ends_the_session() {
    check(
        "request failed no turn to fail
         req 1 start go
         out init
         request failed fatal the event stream is gone
         eof
         exit signal",
        expect![[r#"
            request failed no turn to fail
              write append
                1 -- error_occurred error_message="no turn to fail" provider_error.kind="request_failed"
            req 1 start go
              stdin {"message":{"content":[{"text":"go","type":"text"}],"role":"user"},"type":"user"}
              write append
                2 t1 message_sent role="user" content="go"
              reply 1 ok turn_ed4db0bb81652d431b2032d2
              [timeout 90000]
            out init
              write handle cli-1
              write append
                3 -- session_started model="demo-1"
                4 t1 run_started
              [timeout 90000]
            request failed fatal the event stream is gone
              write append
                5 t1 run_failed error_message="the event stream is gone" provider_error.kind="request_failed"
              action Kill
            eof
            exit signal
              write state failed
              write append
                6 -- session_failed error_message="the event stream is gone" provider_error.kind="request_failed"
              [done]
        "#]],
    );
}

/// An adapter with its own event stream, recording the stdout lines it is shown.
struct LogReader(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl crate::companion::adapter::Adapter for LogReader {
    fn provider(&self) -> crate::core::event::Provider {
        crate::core::event::Provider::Opencode
    }
    fn format(&self) -> crate::core::normalize::Format {
        crate::core::normalize::Format::Opencode
    }
    fn command(&self, _cwd: &std::path::Path) -> tokio::process::Command {
        tokio::process::Command::new("true")
    }
    fn prompt(&mut self, _text: &str) -> Vec<u8> {
        Vec::new()
    }
    fn interrupt(&mut self, _request_id: &str) -> Vec<u8> {
        Vec::new()
    }
    fn answer(&mut self, _id: &str, _decision: Decision, _request: &serde_json::Value) -> Vec<u8> {
        Vec::new()
    }
    fn observe_log(&mut self, line: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(line).into_owned());
    }
}

#[test]
fn a_stdout_that_is_only_a_log_reaches_the_adapter_in_whole_lines() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut s = Session::new(config(), Box::new(LogReader(seen.clone())));
    s.handle_start(0);
    s.handle_stdout_log(b"Warning: x\nopencode server listen");
    s.handle_stdout_log(b"ing on http://127.0.0.1:4100\nrest");
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "Warning: x",
            "opencode server listening on http://127.0.0.1:4100"
        ]
    );
    assert!(s.poll_stdin().is_none());
}
