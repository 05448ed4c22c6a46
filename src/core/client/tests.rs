//! Client tests against a scripted server that owns the clock: reconnects, backoff, dead
//! connections, commands. They run natively and in Chromium (wasm-bindgen-test).

use proptest::prelude::*;
use serde_json::json;
use wasm_bindgen_test::wasm_bindgen_test;

use super::*;
use crate::core::event::Event;
use crate::core::normalize::{normalize, Config, Format};
use crate::core::time::Timestamp;
use crate::core::wire::{encode_events, ServerMsg, MIN_MAX_FRAME};

const DEBUSSY: &[u8] =
    include_bytes!("../../../tests/data/claude/Claude-Debussy__task_tool_output.jsonl");

fn log() -> Vec<Event> {
    normalize(
        Some(Format::Claude),
        Config::new("s1"),
        DEBUSSY,
        Timestamp::EPOCH,
    )
    .events
}

fn welcome(heartbeat_ms: u64) -> String {
    ServerMsg::Welcome {
        protocol: 1,
        epoch: "e1".into(),
        max_frame: 4096,
        heartbeat_ms,
        server: "test".into(),
    }
    .encode()
}

fn caught_up(latest: u64) -> String {
    ServerMsg::CaughtUp {
        session: "s1".into(),
        latest,
    }
    .encode()
}

/// A client that stays on the WebSocket (the tests of its reconnects).
fn ws_only() -> ClientConfig {
    ClientConfig {
        fallback: false,
        ..ClientConfig::default()
    }
}

/// Drains the socket actions and the frames sent.
fn outbox(c: &mut Client) -> (Vec<Action>, Vec<String>) {
    let actions = std::iter::from_fn(|| c.poll_action()).collect();
    let sent = std::iter::from_fn(|| c.poll_transmit()).collect();
    (actions, sent)
}

/// Connects `conn`, answers hello with welcome, and returns the `after` it subscribed from.
fn handshake(c: &mut Client, conn: u64, now: i64) -> u64 {
    c.handle_open(conn, now);
    let (_, sent) = outbox(c);
    assert!(
        sent[0].starts_with(r#"{"t":"hello","protocols":[1]"#)
            && sent[0].ends_with(r#","features":["session_status"]}"#),
        "{sent:?}"
    );
    c.handle_frame(conn, &welcome(500), now);
    let (_, sent) = outbox(c);
    let sub: serde_json::Value = serde_json::from_str(&sent[0]).unwrap();
    assert_eq!(sub["t"], "subscribe");
    sub["after"].as_u64().unwrap()
}

#[wasm_bindgen_test(unsupported = test)]
fn drops_mid_stream_resume_from_the_cursor_with_no_gap_and_no_duplicate() {
    let log = log();
    let mut c = Client::new(ws_only(), 0);
    c.subscribe("s1");
    let mut states = vec![c.drain().state.unwrap()];
    let mut now = 0;
    let mut conn = 1;
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 1 }]);
    loop {
        let after = handshake(&mut c, conn, now);
        states.extend(c.drain().state);
        // Each connection delivers three events, then the server drops it.
        let rest = &log[after as usize..];
        for f in encode_events("s1", "e1", &rest[..rest.len().min(3)], 4096) {
            c.handle_frame(conn, &f.text, now);
        }
        if rest.len() <= 3 {
            c.handle_frame(conn, &caught_up(log.len() as u64), now);
            states.extend(c.drain().state);
            break;
        }
        c.handle_close(conn, now);
        states.extend(c.drain().state);
        now = c.poll_timeout().expect("a reconnect is scheduled");
        c.handle_timeout(now);
        conn += 1;
        assert_eq!(outbox(&mut c).0, [Action::Connect { conn }]);
    }
    let mut want = crate::core::timeline::Timeline::new();
    log.iter().for_each(|e| want.handle_event(e));
    assert_eq!(c.projector().items("s1"), want.items());
    assert!(c.drops() > 5, "{}", c.drops());
    states.dedup();
    let mut want_states = vec![ConnectionState::Connecting, ConnectionState::Live];
    for _ in 0..c.drops() {
        want_states.extend([ConnectionState::Reconnecting, ConnectionState::Live]);
    }
    want_states.push(ConnectionState::CaughtUp);
    assert_eq!(states, want_states);
}

#[wasm_bindgen_test(unsupported = test)]
fn a_client_that_asks_for_binary_frames_reads_them_like_text() {
    let log = log();
    let config = ClientConfig {
        binary_frames: true,
        ..ws_only()
    };
    let mut c = Client::new(config, 0);
    c.subscribe("s1");
    outbox(&mut c);
    c.handle_open(1, 0);
    let (_, sent) = outbox(&mut c);
    assert!(
        sent[0].ends_with(r#","features":["session_status","binary_frames"]}"#),
        "{sent:?}"
    );
    c.handle_frame_bytes(1, welcome(500).as_bytes(), 0);
    let (_, sent) = outbox(&mut c);
    assert!(sent[0].starts_with(r#"{"t":"subscribe""#), "{sent:?}");
    for f in encode_events("s1", "e1", &log, 4096) {
        c.handle_frame_bytes(1, f.text.as_bytes(), 0);
        // A frame of a connection that is gone is ignored, as text is.
        c.handle_frame_bytes(0, f.text.as_bytes(), 0);
    }
    c.handle_frame_bytes(1, caught_up(log.len() as u64).as_bytes(), 0);
    let mut want = crate::core::timeline::Timeline::new();
    log.iter().for_each(|e| want.handle_event(e));
    assert_eq!(c.projector().items("s1"), want.items());
    assert_eq!(c.drain().state, Some(ConnectionState::CaughtUp));
}

#[wasm_bindgen_test(unsupported = test)]
fn a_client_that_prints_the_log_gets_each_event_once_from_where_it_started() {
    let log = log();
    let mut c = Client::new(ClientConfig::default(), 0);
    c.keep_events();
    c.subscribe_after("s1", 5);
    outbox(&mut c);
    assert_eq!(handshake(&mut c, 1, 0), 5);
    // A server that sends more than asked: the cursor admits what follows 5, once.
    for f in encode_events("s1", "e1", &log[..10], 4096) {
        c.handle_frame(1, &f.text, 0);
    }
    assert_eq!(c.take_events(), log[5..10]);
    c.handle_close(1, 0);
    let now = c.poll_timeout().expect("a reconnect");
    c.handle_timeout(now);
    outbox(&mut c);
    assert_eq!(handshake(&mut c, 2, now), 10, "resumed from the cursor");
    for f in encode_events("s1", "e1", &log[8..12], 4096) {
        c.handle_frame(2, &f.text, now);
    }
    assert_eq!(c.take_events(), log[10..12], "no duplicate");
    assert!(c.take_events().is_empty());
}

#[wasm_bindgen_test(unsupported = test)]
fn silence_for_three_heartbeats_is_a_drop() {
    let mut c = Client::new(ws_only(), 0);
    c.subscribe("s1");
    outbox(&mut c);
    handshake(&mut c, 1, 1_000);
    c.handle_frame(1, &caught_up(0), 1_200);
    assert_eq!(c.state(), ConnectionState::CaughtUp);
    // Heartbeats every 500 ms keep it alive.
    c.handle_frame(1, r#"{"t":"heartbeat","now_ms":1}"#, 1_700);
    assert_eq!(c.poll_timeout(), Some(1_700 + 1_500));
    c.handle_timeout(3_199);
    assert_eq!(outbox(&mut c).0, []);
    c.handle_timeout(3_200);
    assert_eq!(outbox(&mut c).0, [Action::Disconnect { conn: 1 }]);
    assert_eq!(c.state(), ConnectionState::Reconnecting);
    // The close event of the socket that was given up on changes nothing.
    c.handle_close(1, 3_201);
    let at = c.poll_timeout().unwrap();
    assert!((3_250..3_300).contains(&at), "{at}");
    c.handle_timeout(at);
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 2 }]);
    // A socket that never opens is given up on after the connect timeout.
    assert_eq!(c.poll_timeout(), Some(at + 10_000));
}

#[wasm_bindgen_test(unsupported = test)]
fn backoff_doubles_with_jitter_up_to_the_cap_and_resets_after_welcome() {
    let mut c = Client::new(ws_only(), 0);
    c.subscribe("s1");
    let mut now = 0;
    let mut delays = Vec::new();
    for conn in 1..=9 {
        assert_eq!(outbox(&mut c).0, [Action::Connect { conn }]);
        c.handle_close(conn, now);
        let at = c.poll_timeout().unwrap();
        delays.push(at - now);
        now = at;
        c.handle_timeout(now);
    }
    let bases = [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000];
    for (d, b) in delays.iter().zip(bases) {
        assert!(b / 2 <= *d && *d < b, "delay {d} for base {b}: {delays:?}");
    }
    handshake(&mut c, 10, now);
    c.handle_close(10, now);
    assert!(
        c.poll_timeout().unwrap() - now < 100,
        "reset after a welcome"
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn commands_are_correlated_refused_when_offline_and_failed_when_the_connection_drops() {
    let mut c = Client::new(ClientConfig::default(), 0);
    outbox(&mut c);
    assert_eq!(c.interrupt("s1").unwrap_err().code, "not_connected");
    c.handle_open(1, 0);
    c.handle_frame(1, &welcome(500), 0);
    assert_eq!(
        c.state(),
        ConnectionState::CaughtUp,
        "no session to catch up"
    );
    outbox(&mut c);
    let id = c.start_turn("s1", "hi", Some("turn_1")).unwrap();
    let (_, sent) = outbox(&mut c);
    assert_eq!(
        sent,
        [r#"{"t":"start_turn","id":"c1","session":"s1","prompt":"hi","turn_id":"turn_1"}"#]
    );
    c.handle_frame(
        1,
        r#"{"t":"reply","id":"c1","ok":true,"result":{"turnId":"turn_1"}}"#,
        0,
    );
    assert_eq!(c.poll_reply(), Some((id, Ok(json!({"turnId": "turn_1"})))));
    let deny = c.answer_approval("s1", "req_1", Decision::Deny).unwrap();
    c.handle_frame(
        1,
        r#"{"t":"reply","id":"c2","ok":false,"error":{"code":"unknown_request","message":"no such request"}}"#,
        0,
    );
    let (_, result) = c.poll_reply().unwrap();
    assert_eq!(result.unwrap_err().code, "unknown_request");
    // A reply for nobody is ignored; a command in flight fails when the connection drops
    // unless it can be sent again (an interrupt of no known turn cannot).
    c.handle_frame(1, r#"{"t":"reply","id":"c9","ok":true}"#, 0);
    let lost = c.interrupt("s1").unwrap();
    c.handle_close(1, 0);
    let (id, result) = c.poll_reply().unwrap();
    assert_eq!(
        (id, result.unwrap_err().code),
        (lost, "connection_lost".into())
    );
    assert_eq!(c.poll_reply(), None);
    assert_ne!(deny, "");
    c.close();
    assert_eq!(c.state(), ConnectionState::Closed);
    assert_eq!(c.interrupt("s1").unwrap_err().code, "closed");
    c.handle_timeout(1_000_000);
    assert_eq!(outbox(&mut c).0, [], "a closed client never reconnects");
}

/// A prompt typed while disconnected, an answer lost in flight: each is sent once the next
/// connection is welcomed and subscribed, in the order given, and answered once; the turn id
/// drawn for a turn stays the same on every send.
#[wasm_bindgen_test(unsupported = test)]
fn kept_commands_wait_for_the_connection_and_are_sent_again_after_a_drop() {
    let mut c = Client::new(ClientConfig::default(), 0);
    c.subscribe("s1");
    outbox(&mut c);
    let typed = c.start_turn("s1", "typed offline", None).unwrap();
    assert_eq!(
        c.start_turn("s1", "x", Some("bad id")).unwrap_err().code,
        "bad_turn_id"
    );
    assert_eq!(c.pending(), 1);
    assert_eq!(
        outbox(&mut c).1,
        Vec::<String>::new(),
        "nothing sent while offline"
    );
    c.handle_open(1, 0);
    outbox(&mut c);
    c.handle_frame(1, &welcome(500), 0);
    let (_, sent) = outbox(&mut c);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[0].starts_with(r#"{"t":"subscribe","session":"s1""#),
        "{sent:?}"
    );
    let first: serde_json::Value = serde_json::from_str(&sent[1]).unwrap();
    let turn = first["turn_id"].as_str().unwrap().to_owned();
    assert!(turn.starts_with("turn_") && turn.len() == 29, "{turn}");
    assert_eq!(first["prompt"], "typed offline");
    // The connection drops before the reply; the answer to an approval is given meanwhile.
    c.handle_close(1, 10);
    assert_eq!(c.poll_reply(), None, "nothing kept has failed");
    let answer = c.answer_approval("s1", "req_1", Decision::Allow).unwrap();
    c.handle_timeout(10_000);
    c.handle_open(2, 10_000);
    outbox(&mut c);
    c.handle_frame(2, &welcome(500), 10_000);
    let (_, again) = outbox(&mut c);
    assert_eq!(again[1], sent[1], "the same command, the same turn id");
    let sent = again;
    assert_eq!(
        sent[2],
        format!(
            r#"{{"t":"answer_approval","id":"{answer}","session":"s1","request_id":"req_1","decision":"allow"}}"#
        )
    );
    let ok = format!(r#"{{"t":"reply","id":"{typed}","ok":true,"result":{{"turnId":"{turn}"}}}}"#);
    c.handle_frame(2, &ok, 10_000);
    c.handle_frame(2, &ok, 10_000);
    assert_eq!(c.poll_reply(), Some((typed, Ok(json!({"turnId": turn})))));
    assert_eq!(c.poll_reply(), None, "answered once");
    assert_eq!(c.pending(), 1);
    // A full queue refuses the next kept command; closing fails what still waits.
    c.handle_close(2, 10_001);
    let mut last = Ok(String::new());
    for i in 0..MAX_QUEUED {
        last = c.start_turn("s1", &format!("p{i}"), None);
    }
    assert_eq!(last.unwrap_err().code, "queue_full");
    c.close();
    let failed: Vec<_> = std::iter::from_fn(|| c.poll_reply()).collect();
    assert_eq!(failed.len(), MAX_QUEUED);
    assert_eq!(
        failed[0],
        (
            answer,
            Err(WireError::new(ErrorCode::Closed, "the client was closed"))
        )
    );
}

/// A tab that becomes visible again does not wait for stale timers: a backoff in progress
/// ends now, and an open connection must answer a ping within the probe or is dropped.
#[wasm_bindgen_test(unsupported = test)]
fn waking_reconnects_at_once_and_probes_an_open_connection() {
    let mut c = Client::new(ClientConfig::default(), 0);
    outbox(&mut c);
    c.handle_open(1, 0);
    c.handle_frame(1, &welcome(60_000), 0);
    outbox(&mut c);
    // Open and answering: the probe passes.
    c.handle_wake(1_000);
    assert_eq!(outbox(&mut c).1, [r#"{"t":"ping","id":"wake"}"#]);
    assert_eq!(c.poll_timeout(), Some(4_000));
    c.handle_frame(1, r#"{"t":"pong","id":"wake"}"#, 1_200);
    assert_eq!(
        c.poll_timeout(),
        Some(181_200),
        "back to the heartbeat rule"
    );
    // Open but silent (the socket died while the tab slept): dropped at the probe's end.
    c.handle_wake(2_000);
    outbox(&mut c);
    c.handle_timeout(4_999);
    assert_eq!(c.state(), ConnectionState::CaughtUp);
    c.handle_timeout(5_000);
    assert_eq!(c.state(), ConnectionState::Reconnecting);
    assert_eq!(outbox(&mut c).0, [Action::Disconnect { conn: 1 }]);
    // Waiting for the backoff: waking connects now.
    assert!(c.poll_timeout().unwrap() > 5_000);
    c.handle_wake(5_001);
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 2 }]);
    c.close();
    assert_eq!(outbox(&mut c).0, [Action::Disconnect { conn: 2 }]);
    c.handle_wake(6_000);
    assert_eq!(
        outbox(&mut c),
        (vec![], vec![]),
        "a closed client stays closed"
    );
}

/// Where WebSockets do not get through, the client falls back to an event stream opened with
/// its subscriptions and POSTs its commands, on the same cursors; it tries the WebSocket again
/// later, and one more failure sends it back.
#[wasm_bindgen_test(unsupported = test)]
fn a_websocket_that_keeps_failing_falls_back_to_server_sent_events_and_is_tried_again() {
    let mut c = Client::new(ClientConfig::default(), 0);
    c.subscribe("s1");
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 1 }]);
    let batch = c.drain();
    assert_eq!(batch.transport, Some(Transport::WebSocket));
    assert!(
        batch.to_json().contains(r#""transport":"websocket""#),
        "{}",
        batch.to_json()
    );
    // Refused twice before any welcome (a proxy that refuses upgrades).
    c.handle_close(1, 0);
    c.handle_timeout(10_000);
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 2 }]);
    c.handle_close(2, 10_000);
    assert_eq!(c.transport(), Transport::Sse);
    c.handle_timeout(20_000);
    let hello = r#"{"t":"hello","protocols":[1],"max_frame":1048576,"client":"agentwire-wasm/0.1.0","features":["session_status"]}"#;
    let subscribe = r#"{"t":"subscribe","session":"s1","after":0,"epoch":null}"#;
    assert_eq!(
        outbox(&mut c).0,
        [Action::ConnectSse {
            conn: 3,
            frames: format!("[{hello},{subscribe}]")
        }]
    );
    assert_eq!(c.drain().transport, Some(Transport::Sse));
    c.handle_open(3, 20_000);
    c.handle_frame(3, &welcome(500), 20_000);
    assert_eq!(
        outbox(&mut c).1,
        Vec::<String>::new(),
        "nothing is sent on a stream"
    );
    assert_eq!(c.state(), ConnectionState::Live, "s1 is catching up");
    c.handle_frame(3, &caught_up(0), 20_000);
    assert_eq!(c.state(), ConnectionState::CaughtUp);
    // Commands are POSTed; their answers come back as response bodies.
    let id = c.start_turn("s1", "hi", Some("turn_1")).unwrap();
    let post = c.poll_post().unwrap();
    assert!(post.starts_with(r#"{"t":"start_turn","id":"c1""#), "{post}");
    assert_eq!(c.poll_post(), None);
    c.handle_post_reply(
        &post,
        r#"{"t":"reply","id":"c1","ok":true,"result":{"turnId":"turn_1"}}"#,
        20_001,
    );
    assert_eq!(c.poll_reply(), Some((id, Ok(json!({"turnId": "turn_1"})))));
    // Refused unread: the command fails with the server's error, it is not sent again.
    let id = c.interrupt("s1").unwrap();
    let post = c.poll_post().unwrap();
    c.handle_post_reply(
        &post,
        r#"{"t":"error","code":"bad_request","message":"no"}"#,
        20_001,
    );
    let (reply_id, result) = c.poll_reply().unwrap();
    assert_eq!(reply_id, id);
    assert_eq!(result.unwrap_err().code, "bad_request");
    assert_eq!(c.pending(), 0);
    // Another subscription: a new stream from the cursors, at once.
    c.subscribe("s2");
    let (actions, _) = outbox(&mut c);
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(actions[0], Action::Disconnect { conn: 3 });
    assert!(
        matches!(&actions[1], Action::ConnectSse { conn: 4, frames } if frames.contains(r#""session":"s2""#))
    );
    // A subscription given while a stream is still opening is not lost: another opens.
    c.handle_close(4, 20_002);
    c.handle_timeout(30_000);
    let (actions, _) = outbox(&mut c);
    assert!(
        matches!(&actions[..], [Action::ConnectSse { conn: 5, .. }]),
        "{actions:?}"
    );
    c.subscribe("s3");
    let (actions, _) = outbox(&mut c);
    assert_eq!(actions[0], Action::Disconnect { conn: 5 });
    assert!(
        matches!(&actions[1], Action::ConnectSse { conn: 6, frames } if frames.contains(r#""session":"s3""#))
    );
    // Five minutes on: the next connection tries the WebSocket; refused, straight back.
    c.handle_close(6, 20_000 + 5 * 60_000);
    c.handle_timeout(30_000 + 5 * 60_000);
    assert_eq!(outbox(&mut c).0, [Action::Connect { conn: 7 }]);
    c.handle_close(7, 30_000 + 5 * 60_000);
    assert_eq!(c.transport(), Transport::Sse);
    // Without the fallback (agentwire tail) the WebSocket is all there is.
    let mut t = Client::new(
        ClientConfig {
            fallback: false,
            ..ClientConfig::default()
        },
        0,
    );
    for conn in 1..=5 {
        assert_eq!(outbox(&mut t).0, [Action::Connect { conn }]);
        t.handle_close(conn, 0);
        t.handle_timeout(i64::from(conn as u32) * 10_000);
    }
    assert_eq!(t.transport(), Transport::WebSocket);
}

/// A POST answered by something that is not the server's (a proxy's error page) leaves the
/// command's fate unknown: the stream is dropped like a failed request and the command goes out
/// again on the next one, never left waiting.
#[wasm_bindgen_test(unsupported = test)]
fn a_fallback_post_answered_by_a_foreign_page_is_sent_again_on_the_next_stream() {
    let mut c = Client::new(ClientConfig::default(), 0);
    c.subscribe("s1");
    for (conn, at) in [(1, 0), (2, 10_000)] {
        c.handle_timeout(at);
        assert_eq!(outbox(&mut c).0, [Action::Connect { conn }]);
        c.handle_close(conn, at);
    }
    c.handle_timeout(20_000);
    assert!(matches!(
        &outbox(&mut c).0[..],
        [Action::ConnectSse { conn: 3, .. }]
    ));
    c.handle_open(3, 20_000);
    c.handle_frame(3, &welcome(500), 20_000);
    c.start_turn("s1", "hi", Some("turn_1")).unwrap();
    let post = c.poll_post().unwrap();
    c.handle_post_reply(&post, "<html>502 Bad Gateway</html>", 20_001);
    assert_eq!(outbox(&mut c).0, [Action::Disconnect { conn: 3 }]);
    assert_eq!(c.poll_reply(), None, "not failed: it is kept");
    assert_eq!(c.pending(), 1);
    c.handle_timeout(40_000);
    assert!(matches!(
        &outbox(&mut c).0[..],
        [Action::ConnectSse { conn: 4, .. }]
    ));
    c.handle_open(4, 40_000);
    c.handle_frame(4, &welcome(500), 40_000);
    assert_eq!(c.poll_post(), Some(post), "the same command, once more");
    assert_eq!(c.poll_post(), None);
    // A history page answered in parts, a line each, settles its command on this stream.
    let id = c.history("s1", 10).unwrap();
    let post = c.poll_post().unwrap();
    let mut timeline = crate::core::timeline::Timeline::new();
    log().iter().for_each(|e| timeline.handle_event(e));
    let page = ServerMsg::History {
        id: id.clone(),
        session: "s1".into(),
        start: 0,
        items: timeline.items().to_vec(),
    };
    let body: String = crate::core::wire::encode_message("s1", &page, MIN_MAX_FRAME)
        .into_iter()
        .map(|frame| frame + "\n")
        .collect();
    assert!(body.lines().count() > 1, "{body}");
    c.handle_post_reply(&post, &body, 40_001);
    assert_eq!(outbox(&mut c).0, [], "the stream stays");
    let (reply_id, result) = c.poll_reply().unwrap();
    assert_eq!(reply_id, id);
    assert_eq!(result.unwrap(), json!({"start": 0, "items": 0}));
}

#[wasm_bindgen_test(unsupported = test)]
fn the_session_contract_commands_are_sent_as_the_protocol_spells_them() {
    let mut c = Client::new(ClientConfig::default(), 0);
    assert_eq!(c.set_mode("s1", "plan").unwrap_err().code, "not_connected");
    c.handle_open(1, 0);
    c.handle_frame(1, &welcome(500), 0);
    outbox(&mut c);
    c.set_mode("s1", "plan").unwrap();
    c.set_model("s1", Some("claude-sonnet-4-5"), None).unwrap();
    c.set_model("s1", None, Some(Thinking::High)).unwrap();
    let resume = c.resume_session("s1").unwrap();
    c.describe_session("s1").unwrap();
    let (_, sent) = outbox(&mut c);
    assert_eq!(
        sent,
        [
            r#"{"t":"set_mode","id":"c1","session":"s1","mode":"plan"}"#,
            r#"{"t":"set_model","id":"c2","session":"s1","model":"claude-sonnet-4-5"}"#,
            r#"{"t":"set_model","id":"c3","session":"s1","thinking":"high"}"#,
            r#"{"t":"resume_session","id":"c4","session":"s1"}"#,
            r#"{"t":"describe_session","id":"c5","session":"s1"}"#,
        ]
    );
    c.handle_frame(
        1,
        r#"{"t":"reply","id":"c4","ok":false,"error":{"code":"unsupported","message":"demo cannot resume"}}"#,
        0,
    );
    assert_eq!(
        c.poll_reply().map(|(id, r)| (id, r.unwrap_err().code)),
        Some((resume, "unsupported".into()))
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn frames_of_an_old_socket_are_ignored_and_bad_frames_are_noted() {
    let log = log();
    let mut c = Client::new(ClientConfig::default(), 0);
    c.subscribe("s1");
    outbox(&mut c);
    handshake(&mut c, 1, 0);
    c.handle_close(1, 0);
    c.handle_timeout(c.poll_timeout().unwrap());
    outbox(&mut c);
    for f in encode_events("s1", "e1", &log[..3], 4096) {
        c.handle_frame(1, &f.text, 0);
    }
    c.handle_frame(2, "not json", 0);
    // A session the server does not know is not awaited forever.
    c.handle_open(2, 0);
    c.handle_frame(2, &welcome(500), 0);
    assert_eq!(c.state(), ConnectionState::Live);
    c.handle_frame(
        2,
        r#"{"t":"error","code":"unknown_session","message":"no","session":"s1"}"#,
        0,
    );
    assert_eq!(c.state(), ConnectionState::CaughtUp);
    let batch = c.drain();
    let sessions: Vec<_> = batch
        .batch
        .sessions
        .iter()
        .map(|s| (s.after, s.notes.len()))
        .collect();
    assert_eq!(sessions, [(0, 1)], "only the error note: {batch:?}");
    assert_eq!(batch.batch.notes.len(), 1, "{batch:?}");
    c.handle_frame(
        2,
        r#"{"t":"error","code":"unsupported_protocol","message":"no"}"#,
        0,
    );
    assert_eq!(c.state(), ConnectionState::Closed);
    assert_eq!(outbox(&mut c).0, [Action::Disconnect { conn: 2 }]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However the connections of a client break (closed by the server, gone silent, cut
    /// after any number of frames), once one stays up the page has the whole log, once.
    #[wasm_bindgen_test(unsupported = test)]
    fn any_pattern_of_drops_ends_with_the_whole_log(
        cuts in proptest::collection::vec((0usize..6, any::<bool>()), 0..10),
    ) {
        let log = log();
        // Over the WebSocket throughout (the fallback has its own test).
        let config = ClientConfig { seed: cuts.len() as u64, fallback: false, ..ClientConfig::default() };
        let mut c = Client::new(config, 0);
        c.subscribe("s1");
        let mut now = 0;
        let mut conn = 0;
        let mut plan = cuts.clone();
        plan.push((usize::MAX, false));
        for (delivered, silent) in plan {
            let (actions, _) = outbox(&mut c);
            let connect = actions.iter().rev().find_map(|a| match a {
                Action::Connect { conn } => Some(*conn),
                Action::ConnectSse { .. } | Action::Disconnect { .. } => None,
            });
            conn = connect.unwrap_or(conn);
            let after = handshake(&mut c, conn, now);
            let frames = encode_events("s1", "e1", &log[after as usize..], 4096);
            for f in frames.iter().take(delivered) {
                c.handle_frame(conn, &f.text, now);
            }
            if delivered == usize::MAX {
                break;
            }
            if silent {
                now = c.poll_timeout().unwrap();
                c.handle_timeout(now);
            } else {
                c.handle_close(conn, now);
            }
            now = c.poll_timeout().unwrap();
            c.handle_timeout(now);
        }
        let mut want = crate::core::timeline::Timeline::new();
        log.iter().for_each(|e| want.handle_event(e));
        prop_assert_eq!(c.projector().items("s1"), want.items());
        prop_assert_eq!(c.projector().cursor("s1").unwrap().after, log.len() as u64);
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn a_snapshot_is_asked_for_once_and_reconnects_resume_from_its_cursor() {
    let log = log();
    let mut server = crate::core::snapshot::Projection::new("s1");
    let half = log.len() / 2;
    log[..half].iter().for_each(|e| {
        server.handle_event(e, 0);
    });
    let config = ClientConfig {
        snapshot: Some(3),
        ..ws_only()
    };
    let mut c = Client::new(config, 0);
    c.subscribe("s1");
    outbox(&mut c);
    // No cursor: the subscribe asks for a snapshot.
    c.handle_open(1, 0);
    outbox(&mut c);
    c.handle_frame(1, &welcome(500), 0);
    let (_, sent) = outbox(&mut c);
    assert_eq!(
        sent,
        [r#"{"t":"subscribe","session":"s1","after":0,"epoch":null,"snapshot":{"items":3}}"#]
    );
    let snapshot = ServerMsg::Snapshot(Box::new(server.snapshot("e1", 3)));
    c.handle_frame(1, &snapshot.encode(), 0);
    for f in encode_events("s1", "e1", &log[half..half + 2], 4096) {
        c.handle_frame(1, &f.text, 0);
    }
    // (The transcript is one long turn: the window reaches back to its first item.)
    let start = c.projector().start("s1");
    assert_eq!(c.projector().cursor("s1").unwrap().after, half as u64 + 2);
    // A drop: the next connection resumes from the cursor, with no snapshot.
    c.handle_close(1, 0);
    let now = c.poll_timeout().expect("a reconnect is scheduled");
    c.handle_timeout(now);
    outbox(&mut c);
    c.handle_open(2, now);
    outbox(&mut c);
    c.handle_frame(2, &welcome(500), now);
    let (_, sent) = outbox(&mut c);
    let resume = format!(
        r#"{{"t":"subscribe","session":"s1","after":{},"epoch":"e1"}}"#,
        half + 2
    );
    assert_eq!(sent, [resume]);
    for f in encode_events("s1", "e1", &log[half + 2..], 4096) {
        c.handle_frame(2, &f.text, now);
    }
    let mut want = crate::core::timeline::Timeline::new();
    log.iter().for_each(|e| want.handle_event(e));
    assert_eq!(c.projector().items("s1"), &want.items()[start..]);
    // A reset (the server's log was rebuilt) loses the cursor: then a snapshot is asked again.
    let reset = ServerMsg::Reset {
        session: "s1".into(),
        epoch: "e2".into(),
        reason: "stale_epoch".into(),
    };
    c.handle_frame(2, &reset.encode(), now);
    c.handle_close(2, now);
    let later = c.poll_timeout().expect("a reconnect is scheduled");
    c.handle_timeout(later);
    outbox(&mut c);
    c.handle_open(3, later);
    outbox(&mut c);
    c.handle_frame(3, &welcome(500), later);
    let (_, sent) = outbox(&mut c);
    assert_eq!(
        sent,
        [r#"{"t":"subscribe","session":"s1","after":0,"epoch":"e2","snapshot":{"items":3}}"#]
    );
}

/// `drain_json` is `drain().to_json()` byte for byte (the connection state and transport,
/// the changes written from the timeline, notes), and `None` where that batch is empty: a
/// client and its twin, fed the same, drained after every step, one each way.
#[wasm_bindgen_test(unsupported = test)]
fn a_drain_as_json_is_the_drained_batch_written() {
    let log = log();
    let (mut c, mut twin) = (Client::new(ws_only(), 0), Client::new(ws_only(), 0));
    let mut drains = 0;
    let mut step = |f: &dyn Fn(&mut Client)| {
        f(&mut c);
        f(&mut twin);
        let batch = c.drain();
        let json = twin.drain_json();
        assert_eq!(json, (!batch.is_empty()).then(|| batch.to_json()));
        drains += usize::from(json.is_some());
    };
    step(&|c| c.subscribe("s1"));
    step(&|c| {
        outbox(c);
        handshake(c, 1, 0);
    });
    for f in encode_events("s1", "e1", &log, 4096) {
        step(&|c| c.handle_frame(1, &f.text, 0));
    }
    step(&|c| c.handle_frame(1, &caught_up(log.len() as u64), 0));
    step(&|c| c.handle_frame(1, "not json", 0));
    step(&|c| c.handle_close(1, 0));
    assert!(drains > 10, "{drains} batches that were not empty");
}
