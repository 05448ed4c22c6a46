//! The companion end to end: a real `agentwire serve` process on 127.0.0.1 port 0, a real
//! SQLite file in a temp dir, the built-in demo agent as its child, real WebSocket and HTTP
//! clients.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::process::{Command, Stdio};

use agentwire::core::event::{Event, EventType};
use agentwire::core::wire::{ClientMsg, ServerMsg};
use common::*;
use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn kinds(events: &[Event]) -> Vec<EventType> {
    events.iter().map(Event::kind).collect()
}

#[tokio::test]
async fn a_demo_turn_streams_live_over_the_websocket_with_contiguous_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let (mut socket, epoch) = hello(&server.ws_url()).await;
    assert_eq!(epoch, server.epoch);
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: 0,
            epoch: None,
            snapshot: None,
        },
    )
    .await;
    let mut c = Collector::new();
    collect_until(&mut socket, &mut c, |c| c.caught_up >= 1).await;
    let turn = server.start_turn(&session, "please use a tool");
    collect_until(&mut socket, &mut c, |c| ended(&c.events, &turn)).await;
    assert_contiguous(&c.events);
    let k = kinds(&c.events);
    for want in [
        EventType::SessionCreated,
        EventType::MessageSent,
        EventType::RunStarted,
        EventType::ToolCallCompleted,
        EventType::MessageReceived,
        EventType::RunCompleted,
    ] {
        assert!(k.contains(&want), "{want} missing from {k:?}");
    }
    let sent: Vec<_> = c
        .events
        .iter()
        .filter(|e| e.kind() == EventType::MessageSent)
        .collect();
    assert_eq!(sent.len(), 1, "exactly one user message for the turn");
    assert_eq!(sent[0].run_id(), Some(turn.as_str()));
    // The live stream is exactly the stored log.
    assert_eq!(c.events, server.events(&session));
}

#[tokio::test]
async fn resuming_from_every_cursor_and_after_drops_mid_turn_yields_the_same_log() {
    let dir = tempfile::tempdir().unwrap();
    // Slow enough that the turn outlives many connections.
    let server = Server::start_with_delay(&dir.path().join("a.db"), 0, 10, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "a slow answer");
    // A client that drops its connection every few events while the turn streams.
    let mut c = Collector::new();
    let mut drops = 0;
    while !ended(&c.events, &turn) {
        let (mut socket, _) = hello(&server.ws_url()).await;
        send(&mut socket, &c.cursor.subscribe(&session)).await;
        let stop_at = c.events.len() + 1 + drops % 4;
        collect_until(&mut socket, &mut c, |c| {
            c.events.len() >= stop_at || ended(&c.events, &turn)
        })
        .await;
        drop(socket);
        drops += 1;
    }
    let log = server.events(&session);
    assert!(
        drops > 5,
        "the turn should span several connections ({drops})"
    );
    assert_eq!(c.events, log[..c.events.len()]);
    assert_contiguous(&c.events);
    // Every cursor of the finished log resumes to exactly the rest of it.
    for after in 0..=log.len() as u64 {
        let (mut socket, epoch) = hello(&server.ws_url()).await;
        send(
            &mut socket,
            &ClientMsg::Subscribe {
                session: session.clone(),
                after,
                epoch: Some(epoch),
                snapshot: None,
            },
        )
        .await;
        let mut c = Collector::new();
        c.cursor.after = after;
        collect_until(&mut socket, &mut c, |c| c.caught_up >= 1).await;
        assert_eq!(c.events, log[after as usize..], "resume after {after}");
    }
}

#[tokio::test]
async fn a_restarted_server_resumes_on_the_same_file_and_marks_orphans_failed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut server = Server::start(&db, 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "hello");
    let before = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    let epoch = server.epoch.clone();
    let busy = server.create_demo_session();
    let slow = server.start_turn(&busy, "slow please");
    server.wait_events(&busy, "the slow turn to stream", |e| {
        e.iter().any(|e| e.kind() == EventType::MessageStreamed)
    });
    server.kill();

    let server = Server::start(&db, 0, &[]);
    assert_eq!(server.epoch, epoch, "a restart keeps the epoch");
    // Resuming from the cursor gets nothing twice and no reset.
    let (mut socket, _) = hello(&server.ws_url()).await;
    let last = before.last().unwrap().sequence();
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: last,
            epoch: Some(epoch.clone()),
            snapshot: None,
        },
    )
    .await;
    let mut c = Collector::new();
    c.cursor.after = last;
    c.cursor.epoch = Some(epoch.clone());
    collect_until(&mut socket, &mut c, |c| c.caught_up >= 1).await;
    assert_eq!(c.resets, 0);
    // The idle session had ended its turn; the busy one died with the server: failed.
    let after = server.events(&session);
    assert_eq!(after[..before.len()], before[..]);
    assert_contiguous(&after);
    let busy_log = server.events(&busy);
    assert_contiguous(&busy_log);
    let tail: Vec<_> = busy_log.iter().rev().take(2).map(Event::kind).collect();
    assert_eq!(tail, [EventType::SessionFailed, EventType::RunFailed]);
    assert!(ended(&busy_log, &slow));
    let (_, body) = server.api("GET", &format!("/api/sessions/{busy}"), None);
    assert_eq!(body["session"]["state"], "failed");
    // A stale epoch gets a reset and the whole log again.
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: 3,
            epoch: Some("not-this-one".into()),
            snapshot: None,
        },
    )
    .await;
    let mut c = Collector::new();
    c.cursor.after = 3;
    c.cursor.epoch = Some("not-this-one".into());
    collect_until(&mut socket, &mut c, |c| c.caught_up >= 1).await;
    assert_eq!(c.resets, 1);
    assert_eq!(c.events, after);
}

#[tokio::test]
async fn commands_answer_with_correlated_replies_and_clear_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let (mut socket, _) = hello(&server.ws_url()).await;
    let start = |id: &str, prompt: &str| ClientMsg::StartTurn {
        id: id.into(),
        session: session.clone(),
        prompt: prompt.into(),
        turn_id: None,
    };
    send(&mut socket, &start("c1", "slow, very slow")).await;
    send(&mut socket, &start("c2", "another one")).await;
    let mut replies = Vec::new();
    while replies.len() < 2 {
        if let Some(ServerMsg::Reply {
            id,
            ok,
            result,
            error,
        }) = recv(&mut socket).await
        {
            replies.push((id, ok, result, error));
        }
    }
    assert_eq!((replies[0].0.as_str(), replies[0].1), ("c1", true));
    let turn = replies[0].2.as_ref().unwrap()["turnId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!((replies[1].0.as_str(), replies[1].1), ("c2", false));
    assert_eq!(
        replies[1].3.as_ref().unwrap().code,
        "foreground_turn_active"
    );
    // Over HTTP the same refusal is a 409 with the same code.
    let (status, body) = server.api(
        "POST",
        &format!("/api/sessions/{session}/turns"),
        Some(json!({"prompt": "x"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("foreground_turn_active"))
    );
    // Interrupt ends the turn as cancelled.
    send(
        &mut socket,
        &ClientMsg::Interrupt {
            id: "c3".into(),
            session: session.clone(),
            turn_id: None,
        },
    )
    .await;
    let events = server.wait_events(&session, "the interrupted turn to end", |e| ended(e, &turn));
    let terminal = events.iter().find(|e| e.kind().is_run_terminal()).unwrap();
    assert_eq!(terminal.kind(), EventType::RunCancelled);
    // Unknown sessions and requests are refused precisely.
    send(
        &mut socket,
        &ClientMsg::Interrupt {
            id: "c4".into(),
            session: "ses_0ff".into(),
            turn_id: None,
        },
    )
    .await;
    send(
        &mut socket,
        &ClientMsg::AnswerApproval {
            id: "c5".into(),
            session: session.clone(),
            request_id: "nope".into(),
            decision: agentwire::core::wire::Decision::Allow,
        },
    )
    .await;
    let mut codes = Vec::new();
    while codes.len() < 2 {
        if let Some(ServerMsg::Reply {
            id, error: Some(e), ..
        }) = recv(&mut socket).await
        {
            codes.push((id, e.code));
        }
    }
    assert!(
        codes.contains(&("c4".into(), "unknown_session".into())),
        "{codes:?}"
    );
    assert!(
        codes.contains(&("c5".into(), "unknown_request".into())),
        "{codes:?}"
    );
}

#[tokio::test]
async fn approvals_are_answered_from_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "run a tool, but ask for approval first");
    let events = server.wait_events(&session, "an approval request", |e| {
        e.iter()
            .any(|e| e.kind() == EventType::ToolApprovalRequested)
    });
    let request = events
        .iter()
        .find(|e| e.kind() == EventType::ToolApprovalRequested)
        .unwrap();
    let request_id = request.data_str("request_id").unwrap().to_owned();
    let (status, body) = server.api(
        "POST",
        &format!("/api/sessions/{session}/approvals/{request_id}"),
        Some(json!({"decision": "allow"})),
    );
    assert_eq!(status, 204, "{body}");
    let events = server.wait_events(&session, "the approved turn to end", |e| ended(e, &turn));
    let k = kinds(&events);
    assert!(k.contains(&EventType::ToolApprovalGranted));
    assert!(k.contains(&EventType::ToolCallCompleted));
    assert_eq!(
        events
            .iter()
            .find(|e| e.kind().is_run_terminal())
            .unwrap()
            .kind(),
        EventType::RunCompleted
    );
    // Answering twice is refused: the request is no longer pending.
    let (status, body) = server.api(
        "POST",
        &format!("/api/sessions/{session}/approvals/{request_id}"),
        Some(json!({"decision": "deny"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_request"))
    );
}

#[tokio::test]
async fn a_crashed_agent_fails_its_turn_with_the_exit_code_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "crash now");
    let events = server.wait_events(&session, "the session to fail", |e| {
        e.iter().any(|e| e.kind() == EventType::SessionFailed)
    });
    let failed = events
        .iter()
        .find(|e| e.kind() == EventType::RunFailed && e.run_id() == Some(turn.as_str()))
        .expect("run_failed");
    let pe = &failed.data()["provider_error"];
    assert_eq!(pe["kind"], "process_exit");
    assert_eq!(pe["exit_code"], 3);
    assert!(
        pe["stderr"].as_str().is_some_and(|s| !s.is_empty()),
        "stderr kept: {pe}"
    );
    // The next prompt resumes the session (the demo agent can) and runs.
    let again = server.start_turn(&session, "again");
    let events = server.wait_events(&session, "the next turn to end", |e| ended(e, &again));
    let resumed = events
        .iter()
        .position(|e| e.kind() == EventType::SessionResumed)
        .expect("session_resumed");
    assert!(
        resumed
            > events
                .iter()
                .position(|e| e.kind() == EventType::SessionFailed)
                .unwrap()
    );
    assert!(events
        .iter()
        .any(|e| e.kind() == EventType::RunCompleted && e.run_id() == Some(again.as_str())));
}

#[tokio::test]
async fn long_poll_returns_on_the_next_append_and_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let latest = server.events(&session).last().unwrap().sequence();
    let addr = server.addr;
    let path = format!("/api/sessions/{session}/events?after={latest}&wait_ms=20000");
    let waiter = std::thread::spawn(move || {
        http(
            addr,
            "GET",
            &path,
            None,
            &[("Authorization", &format!("Bearer {TOKEN}"))],
        )
    });
    server.start_turn(&session, "hello");
    let (status, body) = waiter.join().unwrap();
    assert_eq!(status, 200);
    let events = body["events"].as_array().unwrap();
    assert!(
        !events.is_empty(),
        "the long-poll returned with the new events"
    );
    assert_eq!(events[0]["sequence"], latest + 1);
    // A quiet session: the long-poll times out with nothing and the same cursor.
    let quiet = server.create_demo_session();
    let last = server.events(&quiet).last().unwrap().sequence();
    let (status, body) = server.api(
        "GET",
        &format!("/api/sessions/{quiet}/events?after={last}&wait_ms=300"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(body["events"].as_array().unwrap().len(), 0);
    assert_eq!(body["next_after"], last);
}

#[tokio::test]
async fn sse_streams_the_same_log_and_resumes_from_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "hello");
    let log = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    use std::io::{Read, Write};
    let request = format!(
        "GET /api/sessions/{session}/stream?token={TOKEN} HTTP/1.1\r\nHost: {}\r\nLast-Event-ID: 2\r\n\r\n",
        server.addr
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 65536];
    while !text.contains("event: caught_up") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended early");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let ids: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|s| s.parse().unwrap())
        .collect();
    let want: Vec<u64> = (3..=log.len() as u64).collect();
    assert_eq!(ids, want);
}

#[tokio::test]
async fn tokens_and_origins_are_enforced_and_bad_frames_get_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let addr = server.addr;
    let (status, body) = http(addr, "GET", "/api/sessions", None, &[]);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("token_required"))
    );
    let (status, body) = http(
        addr,
        "GET",
        "/api/sessions",
        None,
        &[("Authorization", "Bearer wrong-token-xx")],
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("bad_token"))
    );
    let (status, body) = http(
        addr,
        "GET",
        "/api/sessions",
        None,
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Origin", "http://evil.example"),
        ],
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden_origin"))
    );
    let own = format!("http://{addr}");
    let (status, _) = http(
        addr,
        "GET",
        "/api/sessions",
        None,
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Origin", &own),
        ],
    );
    assert_eq!(status, 200);
    // WebSocket: no token, wrong token, foreign origin are all refused at the handshake.
    let bare = format!("ws://{addr}/ws");
    assert!(ws_connect(&bare, &[]).await.is_err());
    assert!(ws_connect(&format!("{bare}?token=nope-nope-nope"), &[])
        .await
        .is_err());
    assert!(
        ws_connect(&server.ws_url(), &[("Origin", "http://evil.example")])
            .await
            .is_err()
    );
    assert!(ws_connect(&server.ws_url(), &[("Origin", &own)])
        .await
        .is_ok());
    // Bad frames get precise errors and the connection keeps working.
    let (mut socket, _) = hello(&server.ws_url()).await;
    let big = format!(r#"{{"t":"ping","id":"{}"}}"#, "x".repeat(2 << 20));
    for (frame, code) in [
        ("{oops", "malformed_frame"),
        (r#"{"t":"teleport"}"#, "unknown_type"),
        (big.as_str(), "frame_too_large"),
    ] {
        socket
            .send(Message::Text(frame.to_owned().into()))
            .await
            .unwrap();
        match recv(&mut socket).await {
            Some(ServerMsg::Error { error, .. }) => assert_eq!(error.code, code),
            other => panic!("expected an error for {code}, got {other:?}"),
        }
    }
    send(
        &mut socket,
        &ClientMsg::Ping {
            id: Some("p".into()),
        },
    )
    .await;
    assert!(matches!(
        recv(&mut socket).await,
        Some(ServerMsg::Pong { .. })
    ));
    // Static files never leave www/.
    let (status, _) = http(addr, "GET", "/../Cargo.toml", None, &[]);
    assert_eq!(status, 404);
}

#[test]
fn a_non_loopback_address_needs_an_explicit_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args(["serve", "--addr", "0.0.0.0:0", "--db", "/nonexistent/x.db"])
        .env_remove("AGENTWIRE_TOKEN")
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without an explicit --token"));
}

#[tokio::test]
async fn kill_9_during_appends_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    // `CRASH_ROUNDS` sets how many times (docs/reliability.md); each round kills the server
    // mid-append and checks the whole file again.
    let rounds: usize = std::env::var("CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    for round in 0..rounds {
        let mut server = Server::start(&db, 0, &[]);
        let sessions: Vec<String> = (0..3).map(|_| server.create_demo_session()).collect();
        let mut sockets = Vec::new();
        for s in &sessions {
            server.start_turn(s, "slow please");
            let (mut socket, _) = hello(&server.ws_url()).await;
            send(
                &mut socket,
                &ClientMsg::Subscribe {
                    session: s.clone(),
                    after: 0,
                    epoch: None,
                    snapshot: None,
                },
            )
            .await;
            sockets.push(socket);
        }
        // Receive a varying number of events, then kill the server mid-append.
        let mut received: Vec<Collector> = Vec::new();
        for (i, socket) in sockets.iter_mut().enumerate() {
            let mut c = Collector::new();
            collect_until(socket, &mut c, |c| c.events.len() >= 6 + i * 3 + round % 7).await;
            received.push(c);
        }
        server.kill();
        let server = Server::start(&db, 0, &[]);
        for (s, c) in sessions.iter().zip(&received) {
            let log = server.events(s);
            assert_contiguous(&log);
            assert_eq!(
                log[..c.events.len()],
                c.events[..],
                "every received event survived, in place"
            );
            assert_eq!(log.last().unwrap().kind(), EventType::SessionFailed);
        }
        drop(server);
    }
}

#[tokio::test]
async fn tail_prints_the_log_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "use a tool");
    let log = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "tail",
            &session,
            "--no-follow",
            "--url",
            &format!("ws://{}/ws", server.addr),
            "--token",
            TOKEN,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<Event> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, log);
    let out = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "tail",
            "ses_0ff",
            "--no-follow",
            "--url",
            &format!("ws://{}/ws", server.addr),
            "--token",
            TOKEN,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown_session"));
}

#[tokio::test]
async fn tail_follows_live_across_a_killed_server_and_a_restart() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut server = Server::start_with_delay(&db, 0, 10, &[]);
    let port = server.addr.port();
    let session = server.create_demo_session();
    server.start_turn(&session, "slow please");
    let mut tail = Command::new(env!("CARGO_BIN_EXE_agentwire"))
        .args([
            "tail",
            &session,
            "--url",
            &format!("ws://127.0.0.1:{port}/ws"),
            "--token",
            TOKEN,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Event>();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx
                .send(serde_json::from_str(&line).expect("tail prints events"))
                .is_err()
            {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    while printed.len() < 10 {
        printed.push(rx.recv_timeout(DEADLINE).expect("tail prints live events"));
    }
    server.kill();
    let server = Server::start(&db, port, &[]);
    while !printed.iter().any(|e| e.kind() == EventType::SessionFailed) {
        printed.push(
            rx.recv_timeout(DEADLINE)
                .expect("tail resumes after the restart"),
        );
    }
    let _ = tail.kill();
    let _ = tail.wait();
    assert_eq!(
        printed,
        server.events(&session),
        "tail printed the whole log, once each"
    );
}

#[tokio::test]
async fn an_autonomous_wake_up_is_its_own_turn_and_the_session_returns_to_idle() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "start a background task");
    let events = server.wait_events(&session, "two turns to end", |e| {
        e.iter()
            .filter(|e| e.kind() == EventType::RunCompleted)
            .count()
            == 2
    });
    let runs: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == EventType::RunStarted)
        .filter_map(Event::run_id)
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0], turn);
    assert_ne!(runs[1], turn, "the wake-up has its own turn id");
    let sent = events
        .iter()
        .filter(|e| e.kind() == EventType::MessageSent)
        .count();
    assert_eq!(sent, 1, "nobody prompted the autonomous turn");
    // The foreground turn is over, so a new prompt is accepted.
    server.start_turn(&session, "hello again");
}

#[tokio::test]
async fn unreadable_provider_output_is_recorded_and_the_turn_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "print some garbage");
    let events = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    let reasons: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == EventType::ErrorOccurred)
        .map(|e| e.data_str("reason").unwrap())
        .collect();
    assert_eq!(reasons, ["invalid_json", "invalid_utf8", "line_too_long"]);
    let terminal = events.iter().find(|e| e.kind().is_run_terminal()).unwrap();
    assert_eq!(terminal.kind(), EventType::RunCompleted);
    assert!(events
        .iter()
        .any(|e| e.data_str("content") == Some("After some noise, a readable answer.")));
}

#[tokio::test]
async fn a_client_flooding_commands_without_reading_does_not_starve_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    // The flooder sends thousands of commands and never reads a reply.
    let (mut flooder, _) = hello(&server.ws_url()).await;
    let flood = tokio::spawn(async move {
        for i in 0..5_000 {
            let msg = if i % 2 == 0 {
                ClientMsg::Ping {
                    id: Some(i.to_string()),
                }
            } else {
                ClientMsg::Interrupt {
                    id: i.to_string(),
                    session: "ses_0ff".into(),
                    turn_id: None,
                }
            };
            if flooder
                .send(Message::Text(msg.encode().into()))
                .await
                .is_err()
            {
                break;
            }
        }
        flooder
    });
    // Meanwhile another client follows a whole turn.
    let (mut socket, _) = hello(&server.ws_url()).await;
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: 0,
            epoch: None,
            snapshot: None,
        },
    )
    .await;
    let turn = server.start_turn(&session, "use a tool");
    let mut c = Collector::new();
    collect_until(&mut socket, &mut c, |c| ended(&c.events, &turn)).await;
    assert_eq!(c.events, server.events(&session)[..c.events.len()]);
    let _flooder = flood.await.unwrap();
    // And the server still answers.
    let (status, _) = server.api("GET", "/api/info", None);
    assert_eq!(status, 200);
}

#[tokio::test]
async fn sigterm_closes_sessions_and_their_agents() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut server = Server::start(&db, 0, &[]);
    let session = server.create_demo_session();
    server.start_turn(&session, "slow please");
    server.wait_events(&session, "the turn to stream", |e| {
        e.iter().any(|e| e.kind() == EventType::MessageStreamed)
    });
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "a graceful exit: {exit:?}");
    // Closed on the way out: the next start finds nothing to recover.
    let server = Server::start(&db, 0, &[]);
    let log = server.events(&session);
    assert_eq!(log.last().unwrap().kind(), EventType::SessionCompleted);
    assert!(
        log.iter().any(|e| e.kind() == EventType::RunCancelled),
        "the open turn was cancelled"
    );
    let (_, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["session"]["state"], "closed");
}

/// Each companion on a shared store hosts its own sessions: a restart of B leaves A's running
/// session alone, B refuses A's commands and will not run A's agent a second time, and once
/// A is gone for good, B may take the session over.
#[tokio::test]
async fn a_companion_restarting_on_a_shared_store_leaves_the_others_sessions_running() {
    let url = postgres::fresh_database().await;
    let mut a = Server::start_on_postgres(&url, &["--node", "a"]);
    let mut b = Server::start_on_postgres(&url, &["--node", "b"]);
    let session = a.create_demo_session();
    let mine = b.create_demo_session();
    let (_, body) = a.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(
        (
            body["session"]["node"].as_str(),
            body["session"]["state"].as_str()
        ),
        (Some("a"), Some("running"))
    );
    b.kill();
    let b = Server::start_on_postgres(&url, &["--node", "b"]);
    let (_, body) = b.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(
        body["session"]["state"], "running",
        "B's restart left A's session alone"
    );
    let (_, body) = b.api("GET", &format!("/api/sessions/{mine}"), None);
    assert_eq!(body["session"]["state"], "failed", "B recovered its own");
    // A still runs its turns; B sends A's commands nowhere.
    let turn = a.start_turn(&session, "hello");
    a.wait_events(&session, "A's turn", |e| ended(e, &turn));
    for (path, body) in [
        ("turns", Some(json!({"prompt": "hi"}))),
        ("interrupt", None),
        ("resume", None),
    ] {
        let (status, reply) = b.api("POST", &format!("/api/sessions/{session}/{path}"), body);
        assert_eq!(
            (status, reply["error"]["code"].as_str()),
            (409, Some("hosted_elsewhere")),
            "{path}: {reply}"
        );
    }
    // A dies; within its lease (30 s by default) its session stays A's.
    a.kill();
    let (status, reply) = b.api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (409, Some("hosted_elsewhere")),
        "within its lease, a dead node's session is still its own: {reply}"
    );
    let a = Server::start_on_postgres(&url, &["--node", "a"]);
    let (_, body) = a.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(
        body["session"]["state"], "failed",
        "A recovered its own on restart"
    );
    assert_eq!(
        b.events(&session).last().unwrap().kind(),
        EventType::SessionFailed
    );
    // Now B takes it over: the same log goes on, hosted by B, and A refuses its commands.
    let (status, reply) = b.api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (reply["node"].as_str(), reply["state"].as_str()),
        (Some("b"), Some("running"))
    );
    let turn = b.start_turn(&session, "hello again");
    b.wait_events(&session, "B's turn", |e| ended(e, &turn));
    let (status, reply) = a.api("POST", &format!("/api/sessions/{session}/interrupt"), None);
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (409, Some("hosted_elsewhere"))
    );
    let log = a.events(&session);
    assert_contiguous(&log);
    let resumed: Vec<_> = log
        .iter()
        .filter(|e| e.kind() == EventType::SessionResumed)
        .map(|e| e.data_str("previous_state"))
        .collect();
    assert_eq!(resumed, [Some("failed")]);
}

/// A companion that dies and does not come back: once its lease runs out, another companion
/// ends its running sessions as failed, so nothing shows them running forever; then any
/// companion may resume them.
#[tokio::test]
async fn a_dead_companions_sessions_fail_once_its_lease_runs_out() {
    let url = postgres::fresh_database().await;
    let mut a = Server::start_on_postgres_paced(&url, 50, &["--node", "a", "--lease-ms", "900"]);
    let b = Server::start_on_postgres(&url, &["--node", "b", "--lease-ms", "900"]);
    let session = a.create_demo_session();
    let turn = a.start_turn(&session, "slow please");
    a.wait_events(&session, "the turn to stream", |e| {
        e.iter().any(|e| e.kind() == EventType::MessageStreamed)
    });
    a.kill();
    let log = b.wait_events(&session, "B to end A's session", |e| {
        e.last()
            .is_some_and(|e| e.kind() == EventType::SessionFailed)
    });
    assert_contiguous(&log);
    let ends: Vec<_> = log
        .iter()
        .filter(|e| e.kind().is_run_terminal() && e.run_id() == Some(turn.as_str()))
        .collect();
    assert_eq!(ends.len(), 1, "one terminal for the turn");
    assert_eq!(ends[0].kind(), EventType::RunFailed);
    assert_eq!(ends[0].data()["provider_error"]["kind"], "node_lost");
    let (_, body) = b.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(
        (
            body["session"]["node"].as_str(),
            body["session"]["state"].as_str()
        ),
        (Some("b"), Some("failed"))
    );
    // B resumes it: the same log goes on, on B.
    let (status, reply) = b.api("POST", &format!("/api/sessions/{session}/resume"), None);
    assert_eq!(status, 200, "{reply}");
    let next = b.start_turn(&session, "hello");
    let log = b.wait_events(&session, "a turn on B", |e| ended(e, &next));
    assert_contiguous(&log);
    assert_eq!(log.last().unwrap().kind(), EventType::RunCompleted);
}

/// A companion whose session was taken over while it was cut off (its lease ran out) stops
/// that session's agent at its next lease round and writes nothing more to it.
#[tokio::test]
async fn a_companion_stops_a_session_taken_over_from_it() {
    let url = postgres::fresh_database().await;
    let a = Server::start_on_postgres_paced(&url, 50, &["--node", "a", "--lease-ms", "900"]);
    let session = a.create_demo_session();
    a.start_turn(&session, "slow please");
    a.wait_events(&session, "the turn to stream", |e| {
        e.iter().any(|e| e.kind() == EventType::MessageStreamed)
    });
    // What another node's take-over leaves in the store (tests/store.rs tests the take-over).
    let db = postgres::connect(&url).await;
    let taken = db
        .execute(
            "UPDATE agentwire.sessions SET node = 'b', state = 'failed' WHERE id = $1",
            &[&session],
        )
        .await
        .unwrap();
    assert_eq!(taken, 1);
    // While A runs the agent, the session's description has its live fields (`modes`).
    let path = format!("/api/sessions/{session}");
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (status, body) = a.api("GET", &path, None);
        assert_eq!(status, 200, "{body}");
        if body.get("modes").is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A kept the session: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The slow turn would stream a chunk every 50 ms: a second later, nothing more was written.
    let before = a.events(&session);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let after = a.events(&session);
    assert_eq!(after.len(), before.len(), "A wrote to a session it lost");
    assert_eq!(after.last().unwrap().kind(), EventType::MessageStreamed);
}

/// Two companions on one PostgreSQL database (`--store`): a session hosted by A is followed
/// live from B, and both serve the same log.
#[tokio::test]
async fn two_companions_on_one_postgres_database_serve_each_others_sessions() {
    let url = postgres::fresh_database().await;
    let a = Server::start_on_postgres(&url, &["--node", "a"]);
    let b = Server::start_on_postgres(&url, &["--node", "b"]);
    assert_eq!(a.epoch, b.epoch, "one log");
    let session = a.create_demo_session();
    let (mut socket, epoch) = hello(&b.ws_url()).await;
    assert_eq!(epoch, a.epoch);
    send(
        &mut socket,
        &ClientMsg::Subscribe {
            session: session.clone(),
            after: 0,
            epoch: None,
            snapshot: None,
        },
    )
    .await;
    let mut c = Collector::new();
    collect_until(&mut socket, &mut c, |c| c.caught_up >= 1).await;
    // B hosts a session of its own meanwhile: both companions append to the database at once.
    let other = b.create_demo_session();
    let other_turn = b.start_turn(&other, "hello");
    let turn = a.start_turn(&session, "please use a tool");
    collect_until(&mut socket, &mut c, |c| ended(&c.events, &turn)).await;
    assert_contiguous(&c.events);
    assert_eq!(c.events, a.events(&session), "B streamed A's log");
    assert_eq!(c.events, b.events(&session));
    let theirs = a.wait_events(&other, "B's turn, read through A", |e| {
        ended(e, &other_turn)
    });
    assert_contiguous(&theirs);
}

#[tokio::test]
async fn a_mode_set_over_the_websocket_changes_what_the_agent_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let (mut socket, _) = hello(&server.ws_url()).await;
    send(
        &mut socket,
        &ClientMsg::SetMode {
            id: "m1".into(),
            session: session.clone(),
            mode: "dontAsk".into(),
        },
    )
    .await;
    let reply = loop {
        if let Some(ServerMsg::Reply { id, ok, .. }) = recv(&mut socket).await {
            break (id, ok);
        }
    };
    assert_eq!(reply, ("m1".to_owned(), true));
    let (_, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["current_mode"], "dontAsk");
    // A tool that would have asked is refused without a question.
    let turn = server.start_turn(&session, "please approve a tool");
    let log = server.wait_events(&session, "the turn to end", |e| ended(e, &turn));
    let changed: Vec<_> = log
        .iter()
        .filter(|e| e.kind() == EventType::ModeChanged)
        .map(|e| (e.data_str("mode"), e.data_str("source")))
        .collect();
    assert_eq!(changed, [(Some("dontAsk"), Some("user"))]);
    assert!(!log
        .iter()
        .any(|e| e.kind() == EventType::ToolApprovalRequested));
    let kinds: Vec<_> = log
        .iter()
        .filter(|e| e.run_id() == Some(turn.as_str()))
        .map(|e| e.kind())
        .collect();
    assert!(kinds.contains(&EventType::ToolCallFailed), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&EventType::RunCompleted));
}

#[tokio::test]
async fn what_a_provider_cannot_do_is_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let (status, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["capabilities"],
        json!({"set_mode": true, "set_model": false, "thinking": false,
               "commands": true, "resume": true})
    );
    let modes: Vec<&str> = (body["modes"].as_array().unwrap().iter())
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["default", "dontAsk", "bypassPermissions"]);
    assert_eq!(body["pending_approvals"], json!([]));
    assert_eq!(body["session"]["state"], "running");
    let (status, body) = server.api(
        "POST",
        &format!("/api/sessions/{session}/mode"),
        Some(json!({"mode": "plan"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unknown_mode"))
    );
    for (path, request) in [
        ("model", json!({"model": "m"})),
        ("model", json!({"thinking": "high"})),
    ] {
        let (status, body) = server.api(
            "POST",
            &format!("/api/sessions/{session}/{path}"),
            Some(request),
        );
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "unsupported", "{body}");
    }
    let (status, body) = server.api(
        "POST",
        &format!("/api/sessions/{session}/model"),
        Some(json!({})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    // The same over the WebSocket.
    let (mut socket, _) = hello(&server.ws_url()).await;
    send(
        &mut socket,
        &ClientMsg::SetModel {
            id: "m1".into(),
            session: session.clone(),
            model: Some("m".into()),
            thinking: None,
        },
    )
    .await;
    let reply = loop {
        if let Some(ServerMsg::Reply { id, error, .. }) = recv(&mut socket).await {
            break (id, error.unwrap().code);
        }
    };
    assert_eq!(reply, ("m1".to_owned(), "unsupported".to_owned()));
    // A running session cannot be resumed.
    let resume = format!("/api/sessions/{session}/resume");
    let (status, body) = server.api("POST", &resume, None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("already_running"))
    );
    // A closed session reopens, on the agent's own session id (which it gives on its first
    // turn).
    let first = server.start_turn(&session, "hello");
    server.wait_events(&session, "a first turn", |e| ended(e, &first));
    let (status, _) = server.api("DELETE", &format!("/api/sessions/{session}"), None);
    assert_eq!(status, 204);
    let (status, body) = server.api("POST", &resume, None);
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("running")),
        "{body}"
    );
    let turn = server.start_turn(&session, "hello");
    let log = server.wait_events(&session, "a turn after the resume", |e| ended(e, &turn));
    let handles: Vec<_> = log
        .iter()
        .filter(|e| e.kind() == EventType::SessionStarted)
        .map(|e| e.data_str("provider_session_id"))
        .collect();
    assert_eq!(handles.len(), 2, "{handles:?}");
    assert_eq!(
        handles[0], handles[1],
        "the agent went on with its own session"
    );
    let (status, body) = server.api("POST", "/api/sessions/ses_0ff/resume", None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_session"))
    );
}

/// A turn id chosen by the client makes starting a turn idempotent, across a killed and
/// restarted companion too; a prompt for a session whose agent died with the companion
/// resumes it and runs once.
#[tokio::test]
async fn a_turn_with_a_client_chosen_id_starts_once_and_wakes_a_dead_session() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let mut server = Server::start(&db, 0, &[]);
    let session = server.create_demo_session();
    let path = format!("/api/sessions/{session}/turns");
    let start = |server: &Server, turn: &str, prompt: &str| {
        server.api(
            "POST",
            &path,
            Some(json!({"prompt": prompt, "turnId": turn})),
        )
    };
    let (status, body) = start(&server, "turn-a", "hello");
    assert_eq!(
        (status, body["turnId"].as_str()),
        (200, Some("turn-a")),
        "{body}"
    );
    let (status, body) = start(&server, "turn-a", "hello");
    assert_eq!(
        (status, body["turnId"].as_str()),
        (200, Some("turn-a")),
        "{body}"
    );
    let (status, body) = start(&server, "not a turn id", "hello");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_turn_id"))
    );
    server.wait_events(&session, "turn-a to end", |e| ended(e, "turn-a"));
    server.kill();

    let server = Server::start(&db, 0, &[]);
    let (_, body) = server.api("GET", &format!("/api/sessions/{session}"), None);
    assert_eq!(body["session"]["state"], "failed", "{body}");
    // The same command again finds its turn in the log; a new one wakes the session.
    let (status, body) = start(&server, "turn-a", "hello");
    assert_eq!(
        (status, body["turnId"].as_str()),
        (200, Some("turn-a")),
        "{body}"
    );
    let (status, body) = start(&server, "turn-b", "hello again");
    assert_eq!(
        (status, body["turnId"].as_str()),
        (200, Some("turn-b")),
        "{body}"
    );
    let (status, _) = start(&server, "turn-b", "hello again");
    assert_eq!(status, 200);
    let log = server.wait_events(&session, "turn-b to end", |e| ended(e, "turn-b"));
    assert_contiguous(&log);
    let prompts: Vec<_> = log
        .iter()
        .filter(|e| e.kind() == EventType::MessageSent)
        .map(|e| e.run_id().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(prompts, ["turn-a", "turn-b"], "each turn started once");
    assert!(log.iter().any(|e| e.kind() == EventType::SessionResumed));
    let completed = |run: &str| {
        log.iter()
            .filter(|e| e.kind() == EventType::RunCompleted && e.run_id() == Some(run))
            .count()
    };
    assert_eq!((completed("turn-a"), completed("turn-b")), (1, 1));
}

/// The WebSocket protocol over plain HTTP: an event stream opened with hello and a
/// subscription carries the same frames (welcome, the log from the cursor, caught_up, what
/// follows live) and ends by itself after the recycle time; commands are POSTed and answered
/// by their reply frame.
#[test]
fn the_wire_over_http_streams_the_same_frames_and_takes_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &["--sse-recycle-ms", "3000"]);
    let session = server.create_demo_session();
    let frames = json!([
        {"t": "hello", "protocols": [1]},
        {"t": "subscribe", "session": session, "after": 0},
    ])
    .to_string();
    let query: String = frames
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let addr = server.addr;
    let path = format!("/api/wire?frames={query}&token={TOKEN}");
    let reader = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        raw
    });
    // Wait for the stream's subscription, then start a turn by POST.
    server.wait_events(&session, "the session to start", |e| !e.is_empty());
    let start = ClientMsg::StartTurn {
        id: "c1".into(),
        session: session.clone(),
        prompt: "hello".into(),
        turn_id: Some("turn-wire".into()),
    };
    let (status, body) = server.api(
        "POST",
        "/api/wire",
        Some(serde_json::from_str(&start.encode()).unwrap()),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"t": "reply", "id": "c1", "ok": true, "result": {"turnId": "turn-wire"}})
    );
    let (status, body) = server.api(
        "POST",
        "/api/wire",
        Some(json!({"t": "subscribe", "session": session, "after": 0})),
    );
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_request")),
        "{body}"
    );
    let log = server.wait_events(&session, "the turn to end", |e| ended(e, "turn-wire"));
    let raw = reader.join().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    let raw = dechunk(body);
    let frames: Vec<ServerMsg> = raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|f| ServerMsg::decode(f, 1 << 20).unwrap())
        .collect();
    assert!(
        matches!(frames[0], ServerMsg::Welcome { .. }),
        "{:?}",
        frames[0]
    );
    assert!(frames
        .iter()
        .any(|f| matches!(f, ServerMsg::CaughtUp { .. })));
    let mut c = Collector::new();
    frames.into_iter().for_each(|f| c.apply(f));
    assert_eq!(
        c.events, log,
        "the stream carried the log, each event once, in order"
    );
}

/// A client that asks for `binary_frames` in its hello gets every frame from the welcome on as
/// a binary message holding, byte for byte, what a client that did not ask gets as text; one
/// that asks for `packed_events` gets each events frame packed, and the same events.
#[tokio::test]
async fn binary_frames_carry_the_bytes_of_the_text_frames() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("a.db"), 0, &[]);
    let session = server.create_demo_session();
    let turn = server.start_turn(&session, "please use a tool");
    let stored = server.wait_events(&session, "the turn's end", |e| ended(e, &turn));
    let mut seen = Vec::new();
    use agentwire::core::event_ref::packed;
    use agentwire::core::wire::{FEATURE_BINARY_FRAMES, FEATURE_PACKED_EVENTS};
    for features in [
        vec![],
        vec![FEATURE_BINARY_FRAMES.to_owned()],
        vec![
            FEATURE_BINARY_FRAMES.to_owned(),
            FEATURE_PACKED_EVENTS.to_owned(),
        ],
        vec![FEATURE_PACKED_EVENTS.to_owned()],
    ] {
        let mut socket = ws_connect(&server.ws_url(), &[]).await.expect("connects");
        let hello = ClientMsg::Hello {
            protocols: vec![1],
            max_frame: Some(4096),
            client: None,
            features,
        };
        send(&mut socket, &hello).await;
        let subscribe = ClientMsg::Subscribe {
            session: session.clone(),
            after: 0,
            epoch: None,
            snapshot: None,
        };
        send(&mut socket, &subscribe).await;
        // (binary, bytes) of each frame up to `caught_up`, heartbeats aside.
        let mut frames: Vec<(bool, Vec<u8>)> = Vec::new();
        loop {
            let next = tokio::time::timeout(DEADLINE, socket.next()).await;
            let (binary, bytes) = match next.expect("a frame before the deadline") {
                Some(Ok(Message::Text(t))) => (false, t.as_bytes().to_vec()),
                Some(Ok(Message::Binary(b))) => (true, b.to_vec()),
                Some(Ok(_)) => continue,
                other => panic!("the socket ended: {other:?}"),
            };
            match ServerMsg::decode_bytes(&bytes, usize::MAX).expect("a server frame") {
                ServerMsg::Heartbeat { .. } => continue,
                ServerMsg::CaughtUp { .. } => {
                    frames.push((binary, bytes));
                    break;
                }
                _ => frames.push((binary, bytes)),
            }
        }
        seen.push(frames);
    }
    let (text, binary) = (&seen[0], &seen[1]);
    assert!(text.iter().all(|(b, _)| !b), "text unless asked");
    assert!(binary.iter().all(|(b, _)| *b), "binary from the welcome on");
    let bytes =
        |frames: &[(bool, Vec<u8>)]| frames.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>();
    assert_eq!(bytes(text), bytes(binary));
    // Asked for `packed_events`: each events frame is the packing of the text one, binary;
    // every other frame is as without it (binary with `binary_frames`, text without).
    for (packed_frames, all_binary) in [(&seen[2], true), (&seen[3], false)] {
        assert_eq!(packed_frames.len(), text.len());
        let mut packs = 0;
        for ((binary, frame), (_, json)) in packed_frames.iter().zip(text) {
            let json = std::str::from_utf8(json).unwrap();
            match packed::pack(json) {
                Some(expected) => {
                    assert!(*binary && packed::is_packed(frame));
                    assert_eq!(*frame, expected, "{json}");
                    packs += 1;
                }
                None => assert_eq!((*binary, frame.as_slice()), (all_binary, json.as_bytes())),
            }
        }
        assert!(packs > 0, "events frames were packed");
    }
    for frames in &seen[1..] {
        let mut c = Collector::new();
        for (_, frame) in frames {
            c.apply(ServerMsg::decode_bytes(frame, usize::MAX).unwrap());
        }
        assert_eq!(c.events, stored);
    }
}
