//! Snapshot tests: at every cursor of real transcripts and of seeded sessions (sampled ones
//! in a long one), a snapshot restored in a [`Projector`], then the events after it, then
//! history paged back to the start, ends exactly where one pass over the whole log ends.
//! They run natively and in Chromium (wasm-bindgen-test).

use serde_json::{json, Value};
use wasm_bindgen_test::wasm_bindgen_test;

use super::*;
use crate::core::event::{EventId, EventInit, EventType};
use crate::core::normalize::{normalize, Config, Format};
use crate::core::projector::{Batch, Projector};
use crate::core::time::Timestamp;
use crate::core::timeline::{Change, MAX_REACH_BACK};
use crate::core::wire::{encode_events, encode_message, ServerMsg, MIN_MAX_FRAME};

const DEBUSSY: &[u8] =
    include_bytes!("../../../tests/data/claude/Claude-Debussy__task_tool_output.jsonl");
const TAKOPI: &[u8] =
    include_bytes!("../../../tests/data/claude/takopi__claude_stream_json_session.jsonl");

fn transcript(bytes: &[u8]) -> Vec<Event> {
    normalize(
        Some(Format::Claude),
        Config::new("s1"),
        bytes,
        Timestamp::EPOCH,
    )
    .events
}

/// A seeded session of `turns` turns exercising what a snapshot must carry across its
/// cursor: text streamed with and without message ids, tool calls left running, updated,
/// ended late or never, approvals answered later or never, todo lists replaced, usage,
/// errors outside any turn, a background turn overlapping the foreground one.
fn seeded(seed: u64, turns: u64) -> Vec<Event> {
    let mut rng = seed | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let mut log: Vec<Event> = Vec::new();
    let mut push = |kind: EventType, run: Option<&str>, data: Value| {
        let n = log.len() as u64 + 1;
        let mut init = EventInit::new(
            kind,
            "s1",
            Provider::Claude,
            Timestamp::from_unix_millis(n as i64),
        );
        init.sequence = n;
        init.id = Some(EventId::derive(&[
            "seeded",
            &seed.to_string(),
            &n.to_string(),
        ]));
        init.run_id = run.map(str::to_owned);
        if let Value::Object(map) = data {
            init.data = map;
        }
        log.push(Event::new(init).expect("valid"));
    };
    let mut background: Option<String> = None;
    for t in 0..turns {
        let run = format!("turn_{t}");
        let r = Some(run.as_str());
        push(
            EventType::MessageSent,
            r,
            json!({"role": "user", "content": format!("question {t}")}),
        );
        push(EventType::RunStarted, r, json!({}));
        if next(4) == 0 {
            push(
                EventType::TodoUpdated,
                r,
                json!({"items": [{"text": "plan", "status": "in_progress"}]}),
            );
        }
        let with_id = next(3) != 0;
        for k in 0..1 + next(4) {
            let data = if with_id {
                json!({"delta": format!("think {k} "), "message_id": format!("rsn_{t}")})
            } else {
                json!({"delta": format!("think {k} ")})
            };
            push(EventType::ReasoningStreamed, r, data);
        }
        let mut left_running = Vec::new();
        for c in 0..next(4) {
            let call = format!("tool_{t}_{c}");
            push(
                EventType::ToolCallStarted,
                r,
                json!({"tool_call_id": call, "tool_name": "Bash", "tool_input": {"command": format!("ls {c}")}}),
            );
            for u in 0..next(3) {
                push(
                    EventType::ToolCallUpdated,
                    r,
                    json!({"tool_call_id": call, "output_delta": format!("line {u}\n")}),
                );
            }
            match next(5) {
                0 => left_running.push(call),
                1 => push(
                    EventType::ToolCallFailed,
                    r,
                    json!({"tool_call_id": call, "error": "exit 1"}),
                ),
                _ => push(
                    EventType::ToolCallCompleted,
                    r,
                    json!({"tool_call_id": call, "tool_output": format!("out {t} {c}")}),
                ),
            }
        }
        let approval = (next(3) == 0).then(|| format!("req_{t}"));
        if let Some(req) = &approval {
            push(
                EventType::ToolApprovalRequested,
                r,
                json!({"request_id": req, "tool_name": "Edit", "tool_input": {"file": "a.rs"}}),
            );
        }
        if next(5) == 0 {
            push(
                EventType::ErrorOccurred,
                None,
                json!({"message": format!("warning {t}")}),
            );
        }
        if background.is_none() && next(6) == 0 {
            let b = format!("bg_{t}");
            push(EventType::RunStarted, Some(&b), json!({}));
            push(
                EventType::MessageStreamed,
                Some(&b),
                json!({"delta": "background "}),
            );
            background = Some(b);
        } else if let Some(b) = background.take() {
            push(
                EventType::MessageStreamed,
                Some(&b),
                json!({"delta": "done"}),
            );
            push(
                EventType::TokenUsageUpdated,
                Some(&b),
                json!({"input_tokens": 7, "cost_usd": 0.001}),
            );
            push(EventType::RunCompleted, Some(&b), json!({}));
        }
        for call in left_running.drain(..).filter(|_| next(2) == 0) {
            push(
                EventType::ToolCallCompleted,
                r,
                json!({"tool_call_id": call, "tool_output": "late"}),
            );
        }
        if let Some(req) = &approval {
            match next(3) {
                0 => {}
                1 => push(EventType::ToolApprovalDenied, r, json!({"request_id": req})),
                _ => push(
                    EventType::ToolApprovalGranted,
                    r,
                    json!({"request_id": req}),
                ),
            }
        }
        if next(4) == 0 {
            push(
                EventType::TodoUpdated,
                r,
                json!({"items": [{"text": "plan", "status": "completed"}]}),
            );
        }
        let message = format!("msg_{t}");
        let mut text = String::new();
        for k in 0..1 + next(5) {
            let delta = format!("word{k} ");
            text.push_str(&delta);
            push(
                EventType::MessageStreamed,
                r,
                json!({"delta": delta, "message_id": message}),
            );
        }
        if next(4) != 0 {
            push(
                EventType::MessageReceived,
                r,
                json!({"role": "assistant", "content": text, "message_id": message}),
            );
        }
        push(
            EventType::TokenUsageUpdated,
            r,
            json!({"input_tokens": 100 + t, "output_tokens": 50 + t, "cost_usd": 0.01}),
        );
        match next(8) {
            0 => push(EventType::RunFailed, r, json!({"error_message": "boom"})),
            1 => push(EventType::RunCancelled, r, json!({})),
            2 if t + 1 == turns => {} // the last turn may still be running
            _ => push(EventType::RunCompleted, r, json!({})),
        }
    }
    log
}

/// Fewer seeds in the browser, where the same tests run several times slower (the suite's
/// time), and every cursor still.
const SEEDS: u64 = if cfg!(target_arch = "wasm32") { 2 } else { 5 };

/// What a page keeps of one session: the index of its first item, and the items.
#[derive(Default)]
struct Page {
    start: usize,
    items: Vec<Item>,
}

/// What a page does with a batch (as www/timeline.js does).
fn apply(page: &mut Page, batch: &Batch) {
    for s in &batch.sessions {
        if s.reset {
            page.items.clear();
            page.start = s.start.unwrap_or(0);
        }
        if !s.older.is_empty() {
            let start = s.start.expect("older items come with their start");
            assert_eq!(
                start + s.older.len(),
                page.start,
                "older items end where the page began"
            );
            page.items.splice(0..0, s.older.iter().cloned());
            page.start = start;
        }
        for change in &s.changes {
            match change {
                Change::Insert { index, item } => {
                    assert_eq!(*index, page.start + page.items.len(), "inserts append");
                    page.items.push(item.clone());
                }
                Change::AppendText { index, text } => page.items[index - page.start]
                    .growing_text_mut()
                    .expect("appends go to growing texts")
                    .push_str(text),
                Change::Update { index, item } => page.items[index - page.start] = item.clone(),
                Change::Usage { .. } | Change::Approvals { .. } => {}
            }
        }
    }
}

/// What the projection of a whole log ends with, compared between the two paths.
#[derive(Debug, PartialEq)]
struct Outcome {
    items: Vec<Item>,
    lifecycle: LifecycleState,
    usage: Usage,
    approvals: Vec<String>,
}

impl Outcome {
    /// What `p` ends with, its items being `items` (those it holds, or more).
    fn of(p: &Projection, items: Vec<Item>) -> Outcome {
        Outcome {
            items,
            lifecycle: p.lifecycle_state(),
            usage: p.timeline().usage(),
            approvals: p
                .timeline()
                .pending_approvals()
                .map(str::to_owned)
                .collect(),
        }
    }
}

fn full(log: &[Event]) -> Outcome {
    let mut p = Projection::new("s1");
    for e in log {
        p.handle_event(e, 0);
    }
    Outcome::of(&p, p.timeline().items().to_vec())
}

/// The snapshot `server` (the log up to `c` applied) takes of `items` items, sent in frames of
/// `max_frame`, then the events after `c`, then history pages of `page_items` items from
/// `whole` (the whole log applied) back to the start, through a [`Projector`] and a page
/// mirroring its batches: both outcomes.
fn through_snapshot(
    log: &[Event],
    (server, whole): (&Projection, &Projection),
    items: usize,
    page_items: usize,
    max_frame: usize,
) -> (Outcome, Vec<Item>) {
    let c = server.after() as usize;
    let snapshot = server.snapshot("e1", items);
    let mut p = Projector::new();
    let mut page = Page::default();
    for frame in encode_message("s1", &ServerMsg::Snapshot(Box::new(snapshot)), max_frame) {
        assert!(
            frame.len() <= max_frame.max(MIN_MAX_FRAME),
            "a frame is over the limit"
        );
        p.handle_frame(&frame, 0).expect("snapshot frames decode");
    }
    apply(&mut page, &p.drain());
    for frame in encode_events("s1", "e1", &log[c..], max_frame) {
        p.handle_frame(&frame.text, 0).expect("event frames decode");
        apply(&mut page, &p.drain());
    }
    let mut pages = 0;
    while p.start("s1") > 0 {
        let (start, older) = whole.history(p.start("s1"), page_items);
        let msg = ServerMsg::History {
            id: format!("c{pages}"),
            session: "s1".into(),
            start,
            items: older,
        };
        for frame in encode_message("s1", &msg, max_frame) {
            p.handle_frame(&frame, 0).expect("history frames decode");
        }
        apply(&mut page, &p.drain());
        pages += 1;
        assert!(pages <= log.len() + 1, "paging ends");
    }
    let timeline = p.timeline("s1").expect("tracked");
    let outcome = Outcome {
        items: p.items("s1").to_vec(),
        lifecycle: p.lifecycle("s1").expect("tracked"),
        usage: timeline.usage(),
        approvals: timeline.pending_approvals().map(str::to_owned).collect(),
    };
    (outcome, page.items)
}

/// At every cursor in `cursors` (ascending): snapshot + the rest + paging == one pass.
fn check(
    log: &[Event],
    cursors: impl IntoIterator<Item = usize>,
    items: usize,
    page_items: usize,
    max_frame: usize,
) {
    let want = full(log);
    let mut whole = Projection::new("s1");
    for e in log {
        whole.handle_event(e, 0);
    }
    let mut server = Projection::new("s1");
    for c in cursors {
        for e in &log[server.after() as usize..c] {
            server.handle_event(e, 0);
        }
        assert_eq!(server.after(), c as u64);
        let (got, page) = through_snapshot(log, (&server, &whole), items, page_items, max_frame);
        assert_eq!(got, want, "projector at cursor {c} of {}", log.len());
        assert_eq!(page, want.items, "page at cursor {c} of {}", log.len());
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn every_cursor_of_real_transcripts_projects_as_one_pass() {
    for bytes in [DEBUSSY, TAKOPI] {
        let log = transcript(bytes);
        for (items, page) in [(1, 3), (200, 50)] {
            check(&log, 0..=log.len(), items, page, 1 << 20);
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn every_cursor_of_seeded_sessions_projects_as_one_pass() {
    for seed in 1..=SEEDS {
        let log = seeded(seed, 8);
        for (items, page) in [(1, 4), (5, 3)] {
            check(&log, 0..=log.len(), items, page, 1 << 20);
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn sampled_cursors_of_a_long_session_project_as_one_pass_in_small_frames() {
    let log = seeded(99, 300);
    let step = log.len() / 11;
    let cursors: Vec<usize> = (0..=log.len())
        .step_by(step)
        .chain([log.len() - 1, log.len()])
        .collect();
    check(&log, cursors, 200, 500, MIN_MAX_FRAME);
}

#[wasm_bindgen_test(unsupported = test)]
fn a_snapshot_holds_the_last_items_and_what_is_still_open() {
    let log = seeded(5, 40);
    let mut p = Projection::new("s1");
    for e in &log {
        p.handle_event(e, 0);
    }
    let total = p.timeline().len();
    // Ids are remembered by the dedup's bounded window, not again by the timeline.
    assert_eq!(p.timeline().remembered_ids(), 0);
    let s = p.snapshot("e1", 10);
    assert_eq!(
        s.start + s.items.len(),
        total,
        "the snapshot ends at the end"
    );
    assert!(s.items.len() >= 10);
    assert_eq!(s.after, log.len() as u64);
    // Paged back with pages of 7: every item once, in order.
    let mut before = s.start;
    let mut all = s.items.clone();
    let mut pages = 0;
    while before > 0 {
        let (start, items) = p.history(before, 7);
        assert!(items.len() <= 7 && start + items.len() == before);
        all.splice(0..0, items);
        before = start;
        pages += 1;
    }
    assert_eq!(all, p.timeline().items());
    assert_eq!(pages, s.start.div_ceil(7));
    // A page asked twice is dropped the second time, and a history page of nothing is none.
    let mut client = Projector::new();
    client.handle_msg(ServerMsg::Snapshot(Box::new(s.clone())), 0);
    client.drain();
    let (start, items) = p.history(s.start, 5);
    let page = |id: &str| ServerMsg::History {
        id: id.into(),
        session: "s1".into(),
        start,
        items: items.clone(),
    };
    let first = client.handle_msg(page("c1"), 0);
    let again = client.handle_msg(page("c2"), 0);
    let got = |signal| match signal {
        crate::core::projector::Signal::Reply { result, .. } => result.expect("answered"),
        other => panic!("{other:?}"),
    };
    assert_eq!(got(first), json!({"start": start, "items": items.len()}));
    assert_eq!(got(again), json!({"start": start, "items": 0}));
    assert_eq!(client.drain().sessions[0].older.len(), items.len());
}

#[wasm_bindgen_test(unsupported = test)]
fn a_snapshot_that_points_outside_its_items_is_refused() {
    let log = seeded(3, 6);
    let mut p = Projection::new("s1");
    for e in &log {
        p.handle_event(e, 0);
    }
    let mut s = p.snapshot("e1", 2);
    s.state.timeline.pending.push(s.start + s.items.len() + 3);
    assert!(Projection::restore(s.clone()).is_none());
    let mut client = Projector::new();
    client.handle_msg(ServerMsg::Snapshot(Box::new(s)), 0);
    let batch = client.drain();
    assert_eq!(batch.sessions[0].notes.len(), 1, "{batch:?}");
    assert_eq!(
        client.cursor("s1").map(|c| c.after),
        Some(0),
        "it waits for the log from 0"
    );
}

/// What a companion does with a long session (`companion::snapshot`): every `every` events
/// it keeps the final items apart (stored) and trims its projection to them, through a JSON
/// round trip of the checkpoint now and then (a restart). The kept items and the projection
/// end as one pass does, whatever the rhythm.
#[wasm_bindgen_test(unsupported = test)]
fn a_projection_trimmed_to_its_final_items_ends_as_one_pass() {
    let mut logs: Vec<Vec<Event>> = vec![transcript(DEBUSSY), transcript(TAKOPI)];
    logs.extend((1..=SEEDS).map(|seed| seeded(seed, 30)));
    for (l, log) in logs.iter().enumerate() {
        let want = full(log);
        for every in [1, 3, 17] {
            let mut p = Projection::new("s1");
            let mut stored: Vec<Item> = Vec::new();
            for (n, e) in log.iter().enumerate() {
                p.handle_event(e, 0);
                if (n + 1) % every != 0 {
                    continue;
                }
                let keep = p.final_items();
                assert!(keep >= stored.len(), "final items stay final");
                stored.extend_from_slice(
                    &p.timeline().items()
                        [stored.len() - p.timeline().start()..keep - p.timeline().start()],
                );
                if n % 2 == 0 {
                    p.trim(keep);
                } else {
                    let body = serde_json::to_vec(&p.snapshot_from("e1", keep)).expect("encodes");
                    let back: Snapshot = serde_json::from_slice(&body).expect("decodes");
                    p = Projection::restore(back).expect("restores");
                }
                assert_eq!(p.timeline().start(), keep);
            }
            let held = p.timeline().items();
            let items: Vec<Item> = stored[..p.timeline().start()]
                .iter()
                .chain(held)
                .cloned()
                .collect();
            let got = Outcome::of(&p, items);
            assert_eq!(got, want, "log {l}, trimmed every {every} events");
        }
    }
}

/// An approval nobody answered, in a turn long over, holds no snapshot (nor what a companion
/// stores) back to it once more than MAX_REACH_BACK items followed; before that it does.
#[wasm_bindgen_test(unsupported = test)]
fn an_item_left_open_long_ago_stops_pinning_the_window() {
    let mut log: Vec<Event> = Vec::new();
    let event = |n: usize, kind: EventType, run: Option<&str>, data: Value| {
        let mut init = EventInit::new(
            kind,
            "s1",
            Provider::Claude,
            Timestamp::from_unix_millis(n as i64),
        );
        init.sequence = n as u64;
        init.id = Some(EventId::derive(&["pinned", &n.to_string()]));
        init.run_id = run.map(str::to_owned);
        if let Value::Object(map) = data {
            init.data = map;
        }
        Event::new(init).expect("valid")
    };
    let turn = Some("turn_old");
    log.push(event(1, EventType::RunStarted, turn, json!({})));
    log.push(event(
        2,
        EventType::ToolApprovalRequested,
        turn,
        json!({"request_id": "req_old", "tool_name": "Edit"}),
    ));
    log.push(event(3, EventType::RunCompleted, turn, json!({})));
    let mut p = Projection::new("s1");
    for e in &log {
        p.handle_event(e, 0);
    }
    assert_eq!(p.timeline().len(), 1, "the approval");
    for k in 0..MAX_REACH_BACK + 10 {
        let n = log.len() + 1;
        let e = event(
            n,
            EventType::MessageReceived,
            None,
            json!({"role": "assistant", "content": format!("note {k}"), "message_id": format!("m{k}")}),
        );
        p.handle_event(&e, 0);
        log.push(e);
        let len = p.timeline().len();
        // Within reach, the approval holds the window; out of it, nothing is open.
        let (finals, start) = if len <= MAX_REACH_BACK {
            (0, 0)
        } else {
            (len, len - 5)
        };
        if k % 997 == 0 || len == MAX_REACH_BACK + 1 {
            assert_eq!(p.final_items(), finals, "after {len} items");
            assert_eq!(p.snapshot("e1", 5).start, start, "after {len} items");
        }
    }
    assert_eq!(
        p.timeline().pending_approvals().count(),
        1,
        "it is still pending"
    );
}
