//! Projector tests: scripted frames through one `check` helper, and the replay invariance
//! property over a real transcript. They run natively and in Chromium (wasm-bindgen-test).

use std::collections::HashMap;

use expect_test::{expect, Expect};
use proptest::prelude::*;
use serde_json::Value;
use wasm_bindgen_test::wasm_bindgen_test;

use super::*;
use crate::core::event::{EventInit, EventType};
use crate::core::normalize::normalize;
use crate::core::wire::{encode_events, StoreState};

const DEBUSSY: &[u8] =
    include_bytes!("../../../tests/data/claude/Claude-Debussy__task_tool_output.jsonl");
const TAKOPI: &[u8] =
    include_bytes!("../../../tests/data/claude/takopi__claude_stream_json_session.jsonl");

/// A transcript as the log a server would hold for session `s1`.
fn log(bytes: &[u8]) -> Vec<Event> {
    normalize(
        Some(Format::Claude),
        Config::new("s1"),
        bytes,
        Timestamp::EPOCH,
    )
    .events
}

/// The frames a server sends for `events` after `after`, in frames of at most `max_frame`.
fn frames(events: &[Event], after: u64, max_frame: usize) -> Vec<String> {
    let rest = &events[(after as usize).min(events.len())..];
    encode_events("s1", "e1", rest, max_frame)
        .into_iter()
        .map(|f| f.text)
        .collect()
}

/// What a page does with a batch: mirror the items of each session.
fn apply(model: &mut HashMap<String, Vec<Item>>, batch: &Batch) {
    for s in &batch.sessions {
        let items = model.entry(s.session.clone()).or_default();
        if s.reset {
            items.clear();
        }
        for change in &s.changes {
            match change {
                Change::Insert { index, item } => {
                    assert_eq!(*index, items.len(), "inserts append");
                    items.push(item.clone());
                }
                Change::AppendText { index, text } => items[*index]
                    .growing_text_mut()
                    .expect("appends go to growing texts")
                    .push_str(text),
                Change::Update { index, item } => items[*index] = item.clone(),
                Change::Usage { .. } | Change::Approvals { .. } => {}
            }
        }
    }
}

/// The timeline and lifecycle of one uninterrupted pass over `events`.
fn reference(events: &[Event]) -> (Vec<Item>, Lifecycle) {
    let mut timeline = Timeline::new();
    let mut lifecycle = TurnProjector::new(LifecycleConfig::new("s1", Provider::Generic));
    for e in events {
        lifecycle.handle_event(e, 0);
        timeline.handle_event(e);
    }
    (timeline.items().to_vec(), lifecycle.lifecycle())
}

fn kind(item: &Item) -> String {
    serde_json::to_value(item).unwrap()["kind"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn render(batch: &Batch) -> String {
    let mut out = String::new();
    for s in &batch.sessions {
        out.push_str(&format!("{} after={}", s.session, s.after));
        if s.reset {
            out.push_str(" reset");
        }
        if let Some(l) = &s.lifecycle {
            out.push_str(&format!(" lifecycle={}", l.state));
            if let Some(t) = &l.active_turn {
                out.push_str(&format!(" turn={t}"));
            }
            if let Some(st) = &l.stalled {
                out.push_str(&format!(" stalled={}ms", st.silent_ms));
            }
        }
        out.push('\n');
        for c in &s.changes {
            let line = match c {
                Change::Insert { index, item } => format!("+{index} {}", kind(item)),
                Change::AppendText { index, text } => format!("~{index} append {text:?}"),
                Change::Update { index, item } => format!("={index} {}", kind(item)),
                Change::Usage { totals } => {
                    format!("usage {}/{}", totals.input_tokens, totals.output_tokens)
                }
                Change::Approvals { pending } => format!("approvals {pending:?}"),
            };
            out.push_str(&format!("  {line}\n"));
        }
        for n in &s.notes {
            out.push_str(&format!("  ! {}\n", serde_json::to_string(n).unwrap()));
        }
    }
    for n in &batch.notes {
        out.push_str(&format!("! {}\n", serde_json::to_string(n).unwrap()));
    }
    out
}

/// Feeds each frame (a `---` line drains) and renders the signals and drained batches.
/// A twin projector drained as JSON (`drain_json`) gives each batch's text byte for byte.
fn check(script: &[&str], expect: Expect) {
    let mut p = Projector::new();
    let mut twin = Projector::new();
    let mut out = String::new();
    let drain = |p: &mut Projector, twin: &mut Projector| {
        let batch = p.drain();
        assert_eq!(twin.drain_json(), batch.to_json());
        render(&batch)
    };
    for frame in script {
        if *frame == "---" {
            out.push_str(&drain(&mut p, &mut twin));
            out.push_str("---\n");
            continue;
        }
        let _ = twin.handle_frame(frame, 0);
        match p.handle_frame(frame, 0) {
            Ok(Signal::None) => {}
            Ok(signal) => out.push_str(&format!("> {signal:?}\n")),
            Err(e) => out.push_str(&format!("> Err({})\n", e.code())),
        }
    }
    out.push_str(&drain(&mut p, &mut twin));
    expect.assert_eq(&out);
}

fn events_frame(events: &[Event]) -> String {
    ServerMsg::Events {
        session: "s1".into(),
        epoch: "e1".into(),
        events: events.to_vec(),
    }
    .encode()
}

#[wasm_bindgen_test(unsupported = test)]
fn replays_gaps_resets_and_errors_become_notes_and_signals() {
    let log = log(TAKOPI);
    let welcome = r#"{"t":"welcome","protocol":1,"epoch":"e1","max_frame":65536,"heartbeat_ms":500,"server":"x"}"#;
    let reset = r#"{"t":"reset","session":"s1","epoch":"e2","reason":"stale_epoch"}"#;
    let replay_e2 = events_frame(&log[..2]).replace("\"e1\"", "\"e2\"");
    check(
        &[
            welcome,
            &events_frame(&log[..4]),
            "---",
            // A replay overlapping what was delivered, then a gap (6 is missing).
            &events_frame(&log[2..5]),
            &events_frame(&log[6..8]),
            r#"{"t":"caught_up","session":"s1","latest":15}"#,
            r#"{"t":"resync","session":"s1","after":5}"#,
            "---",
            reset,
            &replay_e2,
            r#"{"t":"error","code":"unknown_session","message":"no session \"s9\"","session":"s9"}"#,
            r#"{"t":"reply","id":"c1","ok":false,"error":{"code":"no_active_turn","message":"no turn is running"}}"#,
            "{not json",
            r#"{"t":"heartbeat","now_ms":5}"#,
        ],
        expect![[r#"
            > Welcome { epoch: "e1", max_frame: 65536, heartbeat_ms: 500 }
            s1 after=4 lifecycle=running turn=run_0d77ed25299fb13fdb500f303a20a629
              +0 user_message
              +1 assistant_message
            ---
            > Resubscribe { session: "s1" }
            > CaughtUp { session: "s1" }
            > Resync { session: "s1" }
            s1 after=5
              +2 tool_call
              ! {"note":"gap","after":5,"next_received":7}
              ! {"note":"caught_up","latest":15}
              ! {"note":"resync","after":5}
            ---
            > Error { session: Some("s9"), error: WireError { code: "unknown_session", message: "no session \"s9\"" } }
            > Reply { id: "c1", result: Err(WireError { code: "no_active_turn", message: "no turn is running" }) }
            > Err(malformed_frame)
            s1 after=2 reset lifecycle=running turn=run_0d77ed25299fb13fdb500f303a20a629
              ! {"note":"reset","epoch":"e2","reason":"stale_epoch"}
            s9 after=0 lifecycle=initializing
              ! {"note":"error","code":"unknown_session","message":"no session \"s9\""}
            ! {"note":"error","code":"malformed_frame","message":"malformed frame: key must be a string at line 1 column 2"}
        "#]],
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn the_store_status_becomes_a_note_when_it_changes() {
    let up = r#"{"t":"session_status","session":"s1","store":{"state":"available","unstored":0}}"#;
    let down = |n: u32, unstored: u32| {
        format!(
            r#"{{"t":"session_status","session":"s1","store":{{"state":"unavailable","error":"disk full","since":"2026-12-01T12:00:00.000Z","attempts":{n},"unstored":{unstored}}}}}"#
        )
    };
    check(
        &[
            // A subscription starts with the status: "available" is no news.
            up,
            "---",
            &down(1, 3),
            "---",
            // Said again while unavailable: more events wait.
            &down(4, 40),
            &down(4, 40),
            r#"{"t":"reset","session":"s1","epoch":"e2","reason":"stale_epoch"}"#,
            "---",
            up,
            up,
        ],
        expect![[r#"
            ---
            s1 after=0 lifecycle=initializing
              ! {"note":"store","state":"unavailable","error":"disk full","since":"2026-12-01T12:00:00.000Z","attempts":1,"unstored":3}
            ---
            s1 after=0 reset lifecycle=initializing
              ! {"note":"store","state":"unavailable","error":"disk full","since":"2026-12-01T12:00:00.000Z","attempts":4,"unstored":40}
              ! {"note":"reset","epoch":"e2","reason":"stale_epoch"}
            ---
            s1 after=0
              ! {"note":"store","state":"available","unstored":0}
        "#]],
    );
    let mut p = Projector::new();
    assert_eq!(p.store("s1"), None);
    p.track("s1");
    assert!(p.store("s1").unwrap().is_available());
    p.handle_frame(&down(2, 7), 0).unwrap();
    let held = p.store("s1").unwrap();
    assert_eq!((held.state, held.unstored), (StoreState::Unavailable, 7));
    p.handle_frame(up, 0).unwrap();
    assert!(p.store("s1").unwrap().is_available());
}

#[wasm_bindgen_test(unsupported = test)]
fn a_stall_in_the_log_shows_in_the_lifecycle_until_the_turn_speaks() {
    let event = |seq: u64, kind: EventType, data: Value| {
        let init = EventInit {
            run_id: Some("t1".into()),
            sequence: seq,
            data: data.as_object().cloned().unwrap_or_default(),
            ..EventInit::new(kind, "s1", Provider::Generic, Timestamp::EPOCH)
        };
        Event::new(init).unwrap()
    };
    let log = [
        event(1, EventType::RunStarted, Value::Null),
        event(
            2,
            EventType::RunStalled,
            serde_json::json!({"silent_ms": 90_000, "synthetic": true}),
        ),
        event(
            3,
            EventType::MessageStreamed,
            serde_json::json!({"delta": "hi"}),
        ),
    ];
    check(
        &[
            &events_frame(&log[..1]),
            "---",
            &events_frame(&log[1..2]),
            "---",
            &events_frame(&log[2..]),
        ],
        expect![[r#"
            s1 after=1 lifecycle=running turn=t1
            ---
            s1 after=2 lifecycle=running turn=t1 stalled=90000ms
            ---
            s1 after=3 lifecycle=running turn=t1
              +0 assistant_message
        "#]],
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn a_whole_log_projects_like_one_pass_and_batches_rebuild_it() {
    let log = log(DEBUSSY);
    let mut p = Projector::new();
    // The same frames as binary messages (`binary_frames`), and packed (`packed_events`):
    // the same signals and batches.
    let mut bytes = Projector::new();
    let mut packed = Projector::new();
    // And drained as JSON text (`drain_json`): the batches' text.
    let mut as_json = Projector::new();
    let mut packs = 0;
    let mut model = HashMap::new();
    for frame in frames(&log, 0, 4096) {
        assert_eq!(p.handle_frame(&frame, 0), Ok(Signal::None));
        assert_eq!(
            bytes.handle_frame_bytes(frame.as_bytes(), 0),
            Ok(Signal::None)
        );
        // What the server does: an events frame packed, any other (a `message_part`) as is.
        let frame = match crate::core::event_ref::packed::pack(&frame) {
            Some(packed) => {
                packs += 1;
                packed
            }
            None => frame.into_bytes(),
        };
        assert_eq!(packed.handle_frame_bytes(&frame, 0), Ok(Signal::None));
        assert_eq!(as_json.handle_frame_bytes(&frame, 0), Ok(Signal::None));
        let batch = p.drain();
        assert_eq!(bytes.drain(), batch);
        assert_eq!(packed.drain(), batch);
        assert_eq!(as_json.drain_json(), batch.to_json());
        apply(&mut model, &batch);
    }
    assert!(packs > 10, "{packs} frames packed");
    let bad = packed.handle_frame_bytes(&[0xa7, 1, 2, b's'], 0);
    assert_eq!(bad.unwrap_err().code(), ErrorCode::MalformedFrame);
    assert!(
        matches!(&packed.drain().notes[..], [Note::Error { code, message }]
            if code == "malformed_frame" && message.contains("truncated at byte 3")),
        "a packed frame cut short is noted like any malformed frame"
    );
    let bad = bytes.handle_frame_bytes(b"{\"t\":\"events\"\xff", 0);
    assert_eq!(bad.unwrap_err().code(), ErrorCode::MalformedFrame);
    assert!(
        matches!(&bytes.drain().notes[..], [Note::Error { code, .. }] if code == "malformed_frame"),
        "a frame that is not UTF-8 is noted like any malformed frame"
    );
    let (items, lifecycle) = reference(&log);
    assert_eq!(p.items("s1"), items.as_slice());
    assert_eq!(model["s1"], items);
    assert_eq!(p.lifecycle("s1").unwrap().state, lifecycle);
    assert_eq!(p.cursor("s1").unwrap().after, log.len() as u64);
    assert!(p.drain().is_empty(), "nothing left after a drain");
    // Ids are remembered by the dedup's bounded window, not again by the timeline.
    assert_eq!(p.timeline("s1").unwrap().remembered_ids(), 0);
    assert_eq!(packed.timeline("s1").unwrap().remembered_ids(), 0);
}

#[wasm_bindgen_test(unsupported = test)]
fn a_transcript_projector_shows_what_agentwire_project_prints() {
    let out = normalize(
        Some(Format::Claude),
        Config::new("local"),
        DEBUSSY,
        Timestamp::EPOCH,
    );
    let mut p = Projector::transcript(Some(Format::Claude), "local");
    // Cut into uneven pieces on char boundaries: the normalizer frames lines itself.
    let text = std::str::from_utf8(DEBUSSY).unwrap();
    let mut model = HashMap::new();
    let mut rest = text;
    let mut n = 1;
    while !rest.is_empty() {
        let mut cut = (n * 37).min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (piece, tail) = rest.split_at(cut);
        p.handle_provider_text(piece, 0).unwrap();
        apply(&mut model, &p.drain());
        rest = tail;
        n += 1;
    }
    p.handle_eof(0).unwrap();
    apply(&mut model, &p.drain());
    let project = crate::core::render::project_output(&out, "local", 0);
    let timeline = p.timeline("local").unwrap();
    assert!(project.ends_with(&timeline.render()), "{project}");
    assert_eq!(model["local"], timeline.items());
    assert_eq!(
        Projector::new()
            .handle_provider_text("x", 0)
            .unwrap_err()
            .code,
        "not_a_transcript"
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn a_large_event_in_parts_is_reassembled() {
    let mut log = log(TAKOPI);
    let big = log[3].to_json().replace("Sure", &"é".repeat(3000));
    log[3] = serde_json::from_str(&big).unwrap();
    let frames = frames(&log, 0, crate::core::wire::MIN_MAX_FRAME);
    assert!(frames.iter().any(|f| f.starts_with(r#"{"t":"event_part""#)));
    let mut p = Projector::new();
    for f in &frames {
        p.handle_frame(f, 0).unwrap();
    }
    assert_eq!(p.items("s1"), reference(&log).0.as_slice());
}

/// One connection of a flaky client: where it resumes from, how many frames it gets before
/// the drop, whether the network duplicates them, and where the page drains.
type Connection = (u64, usize, bool, Vec<bool>);

fn connection() -> impl Strategy<Value = Connection> {
    (
        0u64..6,
        0usize..8,
        any::<bool>(),
        proptest::collection::vec(any::<bool>(), 8),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of reconnects, each resuming from the cursor or earlier (a stale cursor
    /// persisted by the page), cut into frames of any size, duplicated or not, drained
    /// anywhere, ends with the timeline of one uninterrupted pass; and the batches rebuild it.
    #[wasm_bindgen_test(unsupported = test)]
    fn reconnect_replays_end_with_the_uninterrupted_timeline(
        connections in proptest::collection::vec(connection(), 1..12),
        max_frame in prop_oneof![Just(4096usize), Just(16384), Just(1 << 20)],
    ) {
        let log = log(DEBUSSY);
        let mut p = Projector::new();
        // Fed the same, drained as JSON: each batch's text.
        let mut twin = Projector::new();
        let mut model = HashMap::new();
        let mut all = connections;
        // The last connection stays up until caught up.
        all.push((0, usize::MAX, false, vec![false; 8]));
        for (back, delivered, duplicate, drains) in all {
            let after = p.cursor("s1").map_or(0, |c| c.after).saturating_sub(back);
            let frames = frames(&log, after, max_frame);
            for (i, frame) in frames.iter().take(delivered).enumerate() {
                for _ in 0..=usize::from(duplicate) {
                    let signal = p.handle_frame(frame, 0).unwrap();
                    prop_assert_eq!(signal, Signal::None);
                    twin.handle_frame(frame, 0).unwrap();
                }
                if drains[i % drains.len()] {
                    let batch = p.drain();
                    prop_assert_eq!(twin.drain_json(), batch.to_json());
                    apply(&mut model, &batch);
                }
            }
        }
        let batch = p.drain();
        prop_assert_eq!(twin.drain_json(), batch.to_json());
        apply(&mut model, &batch);
        let (items, lifecycle) = reference(&log);
        prop_assert_eq!(p.items("s1"), items.as_slice());
        prop_assert_eq!(&model["s1"], &items);
        prop_assert_eq!(p.lifecycle("s1").unwrap().state, lifecycle);
    }

    /// A reset in the middle (the server's log was rebuilt) starts the page over and still
    /// ends with the timeline of the whole log.
    #[wasm_bindgen_test(unsupported = test)]
    fn a_reset_mid_stream_starts_over_and_converges(cut in 0usize..40) {
        let log = log(DEBUSSY);
        let mut p = Projector::new();
        let mut model = HashMap::new();
        for f in frames(&log[..cut.min(log.len())], 0, 4096) {
            p.handle_frame(&f, 0).unwrap();
        }
        apply(&mut model, &p.drain());
        let reset = r#"{"t":"reset","session":"s1","epoch":"e1","reason":"cursor_ahead"}"#;
        p.handle_frame(reset, 0).unwrap();
        for f in frames(&log, 0, 4096) {
            p.handle_frame(&f, 0).unwrap();
        }
        apply(&mut model, &p.drain());
        prop_assert_eq!(&model["s1"], &reference(&log).0);
        prop_assert_eq!(
            serde_json::to_value(p.lifecycle("s1")).unwrap()["state"].clone(),
            Value::from(reference(&log).1.as_str())
        );
    }
}

/// Frames of two sessions, interleaved one by one, project each session as it projects alone
/// (the last session looked up is found again without its map; the other one through it).
#[wasm_bindgen_test(unsupported = test)]
fn interleaved_sessions_project_as_each_alone() {
    let one = log(DEBUSSY);
    let two = normalize(
        Some(Format::Claude),
        Config::new("s2"),
        DEBUSSY,
        Timestamp::EPOCH,
    )
    .events;
    let framed = |session: &str, events: &[Event]| -> Vec<String> {
        let events: Vec<Event> = events.iter().take(events.len() / 2).cloned().collect();
        encode_events(session, "e1", &events, 4096)
            .into_iter()
            .map(|f| f.text)
            .collect()
    };
    let (a, b) = (framed("s1", &one), framed("s2", &two));
    assert!(
        a.len() > 3 && b.len() > 3,
        "{} and {} frames",
        a.len(),
        b.len()
    );
    let mut p = Projector::new();
    for i in 0..a.len().max(b.len()) {
        for frame in [a.get(i), b.get(i)].into_iter().flatten() {
            assert_eq!(p.handle_frame(frame, 0), Ok(Signal::None));
        }
    }
    for (session, events) in [("s1", &one), ("s2", &two)] {
        let half = &events[..events.len() / 2];
        let mut alone = Timeline::new();
        half.iter().for_each(|e| alone.handle_event(e));
        assert_eq!(p.items(session), alone.items(), "{session}");
        assert_eq!(p.cursor(session).unwrap().after, half.len() as u64);
    }
    assert_eq!(p.sessions().collect::<Vec<_>>(), ["s1", "s2"]);
}
