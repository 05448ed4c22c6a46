//! The store queue's rules as a table of scripts, each run through [`check`]: no store, no
//! process, no clock.
//!
//! A script is one step per line; the trace shows what each step gave.
//! * `push N..M` queues a batch of events numbered N to M; `push state S`, `push handle H`.
//! * `write T` asks for the write to start at `T` ms.
//! * `stored T`, `failed T WHY`, `refused T WHY`: the outcome of the write in flight.
//! * `giveup`: shutdown past its deadline.
//!
//! After each step the trace shows the queue: `unstored`, `full` when reading must stop,
//! `timeout` when a retry waits, `lost` when events were dropped, and the notes it gave.

use expect_test::{expect, Expect};
use serde_json::json;

use super::*;
use crate::core::event::{EventInit, EventType, Provider};

fn event(n: u64) -> Event {
    let mut init = EventInit::new(
        EventType::MessageSent,
        "s1",
        Provider::Demo,
        Timestamp::EPOCH,
    );
    init.data.insert("n".into(), json!(n));
    Event::new(init).unwrap()
}

fn show(op: &StoreOp) -> String {
    match op {
        StoreOp::Append(events) => {
            let ns: Vec<String> = events.iter().map(|e| e.data()["n"].to_string()).collect();
            format!("append {}", ns.join(","))
        }
        StoreOp::State(state, _) => format!("state {}", state.as_str()),
        StoreOp::ProviderSessionId(h) => format!("handle {h}"),
    }
}

fn check(config: StoreQueueConfig, script: &str, expect: Expect) {
    let mut q = StoreQueue::new(config);
    let mut trace = String::new();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let ms = |i: usize| words[i].parse::<i64>().unwrap();
        let why = || words[2..].join(" ");
        let out = match words[..] {
            ["push", "state", s] => {
                q.push(StoreOp::State(
                    SessionState::parse(s).unwrap(),
                    Timestamp::EPOCH,
                ));
                String::new()
            }
            ["push", "handle", h] => {
                q.push(StoreOp::ProviderSessionId(h.to_owned()));
                String::new()
            }
            ["push", range] => {
                let (a, b) = range.split_once("..").unwrap_or((range, range));
                let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                q.push(StoreOp::Append((a..=b).map(event).collect()));
                String::new()
            }
            ["push"] => {
                q.push(StoreOp::Append(Vec::new()));
                String::new()
            }
            ["write", _] => q.poll_write(ms(1)).map_or("none".into(), |op| show(&op)),
            ["stored", _] => {
                q.handle_written(Written::Stored, ms(1));
                String::new()
            }
            ["failed", _, ..] => {
                q.handle_written(Written::Unavailable(why()), ms(1));
                String::new()
            }
            ["refused", _, ..] => {
                q.handle_written(Written::Refused(why()), ms(1));
                String::new()
            }
            ["giveup"] => format!("gave up {}", q.give_up()),
            _ => panic!("bad step {line:?}"),
        };
        let mut state = format!("unstored {}", q.unstored());
        if q.is_full() {
            state.push_str(" full");
        }
        if let Some(at) = q.poll_timeout() {
            state.push_str(&format!(" timeout {at}"));
        }
        if q.lost() > 0 {
            state.push_str(&format!(" lost {}", q.lost()));
        }
        let status = serde_json::to_value(q.status()).unwrap();
        if status["state"] == "unavailable" {
            state.push_str(&format!(
                " unavailable({}, since {}, attempts {})",
                status["error"].as_str().unwrap(),
                status["since"].as_str().unwrap(),
                status["attempts"]
            ));
        }
        let notes: Vec<String> = std::iter::from_fn(|| q.poll_note())
            .map(|n| format!("{n:?}"))
            .collect();
        let out = if out.is_empty() {
            String::new()
        } else {
            format!(" -> {out}")
        };
        trace.push_str(&format!("{line}{out} | {state}\n"));
        for n in notes {
            trace.push_str(&format!("  note {n}\n"));
        }
    }
    expect.assert_eq(&trace);
}

fn small() -> StoreQueueConfig {
    StoreQueueConfig {
        max_unstored: 6,
        max_merge: 4,
        min_backoff_ms: 50,
        max_backoff_ms: 200,
    }
}

#[test]
fn one_write_at_a_time_and_batches_merged_in_order() {
    check(
        small(),
        "push 1..2
         push 3
         write 0
         push 4
         write 0
         stored 5
         write 5
         stored 6
         write 6",
        expect![[r#"
            push 1..2 | unstored 2
            push 3 | unstored 3
            write 0 -> append 1,2,3 | unstored 3
            push 4 | unstored 4
            write 0 -> none | unstored 4
            stored 5 | unstored 1
            write 5 -> append 4 | unstored 1
            stored 6 | unstored 0
            write 6 -> none | unstored 0
        "#]],
    );
}

#[test]
fn a_merge_stops_at_its_bound_and_at_a_state_change_but_a_big_batch_goes_whole() {
    check(
        small(),
        "push 1..3
         push 4..5
         push state closed
         push 6..12
         write 0
         stored 0
         write 0
         stored 0
         write 0
         stored 0
         write 0
         stored 0",
        expect![[r#"
            push 1..3 | unstored 3
            push 4..5 | unstored 5
            push state closed | unstored 5
            push 6..12 | unstored 12 full
            write 0 -> append 1,2,3 | unstored 12 full
            stored 0 | unstored 9 full
            write 0 -> append 4,5 | unstored 9 full
            stored 0 | unstored 7 full
            write 0 -> state closed | unstored 7 full
            stored 0 | unstored 7 full
            write 0 -> append 6,7,8,9,10,11,12 | unstored 7 full
            stored 0 | unstored 0
        "#]],
    );
}

#[test]
fn a_failed_write_is_retried_whole_after_a_doubling_capped_backoff_then_all_goes_in_order() {
    check(
        small(),
        "push 1..2
         write 0
         failed 10 disk full
         push 3
         write 20
         write 60
         failed 61 disk full
         write 100
         write 161
         failed 170 read-only
         write 370
         failed 370 read-only
         write 570
         stored 600
         write 600
         stored 610
         push 4
         write 610
         failed 620 gone",
        expect![[r#"
            push 1..2 | unstored 2
            write 0 -> append 1,2 | unstored 2
            failed 10 disk full | unstored 2 timeout 60 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 1)
              note Unavailable { error: "disk full" }
            push 3 | unstored 3 timeout 60 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 1)
            write 20 -> none | unstored 3 timeout 60 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 1)
            write 60 -> append 1,2,3 | unstored 3 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 1)
            failed 61 disk full | unstored 3 timeout 161 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 2)
            write 100 -> none | unstored 3 timeout 161 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 2)
            write 161 -> append 1,2,3 | unstored 3 unavailable(disk full, since 1970-01-01T00:00:00.010Z, attempts 2)
            failed 170 read-only | unstored 3 timeout 370 unavailable(read-only, since 1970-01-01T00:00:00.010Z, attempts 3)
            write 370 -> append 1,2,3 | unstored 3 unavailable(read-only, since 1970-01-01T00:00:00.010Z, attempts 3)
            failed 370 read-only | unstored 3 timeout 570 unavailable(read-only, since 1970-01-01T00:00:00.010Z, attempts 4)
            write 570 -> append 1,2,3 | unstored 3 unavailable(read-only, since 1970-01-01T00:00:00.010Z, attempts 4)
            stored 600 | unstored 0
              note Recovered { since_ms: 10, attempts: 4 }
            write 600 -> none | unstored 0
            stored 610 | unstored 0
            push 4 | unstored 1
            write 610 -> append 4 | unstored 1
            failed 620 gone | unstored 1 timeout 670 unavailable(gone, since 1970-01-01T00:00:00.620Z, attempts 1)
              note Unavailable { error: "gone" }
        "#]],
    );
}

#[test]
fn full_while_the_store_is_down_and_not_full_once_it_took_some() {
    check(
        small(),
        "push 1..3
         write 0
         failed 0 down
         push 4..5
         push 6
         write 50
         failed 50 down
         write 150
         stored 150
         write 150",
        expect![[r#"
            push 1..3 | unstored 3
            write 0 -> append 1,2,3 | unstored 3
            failed 0 down | unstored 3 timeout 50 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
              note Unavailable { error: "down" }
            push 4..5 | unstored 5 timeout 50 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            push 6 | unstored 6 full timeout 50 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            write 50 -> append 1,2,3 | unstored 6 full unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            failed 50 down | unstored 6 full timeout 150 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 2)
            write 150 -> append 1,2,3 | unstored 6 full unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 2)
            stored 150 | unstored 3
              note Recovered { since_ms: 0, attempts: 2 }
            write 150 -> append 4,5,6 | unstored 3
        "#]],
    );
}

#[test]
fn a_refused_write_is_dropped_and_counted_and_the_next_goes_on() {
    check(
        small(),
        "push 1..2
         push handle h1
         push
         write 0
         refused 0 unknown session
         write 0
         stored 0
         write 0",
        expect![[r#"
            push 1..2 | unstored 2
            push handle h1 | unstored 2
            push | unstored 2
            write 0 -> append 1,2 | unstored 2
            refused 0 unknown session | unstored 0 lost 2
              note Refused { events: 2, error: "unknown session" }
            write 0 -> handle h1 | unstored 0 lost 2
            stored 0 | unstored 0 lost 2
            write 0 -> none | unstored 0 lost 2
        "#]],
    );
}

#[test]
fn giving_up_counts_what_waits_as_lost() {
    check(
        small(),
        "push 1..2
         write 0
         failed 0 down
         push 3
         giveup
         write 100
         stored 100",
        expect![[r#"
            push 1..2 | unstored 2
            write 0 -> append 1,2 | unstored 2
            failed 0 down | unstored 2 timeout 50 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
              note Unavailable { error: "down" }
            push 3 | unstored 3 timeout 50 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            giveup -> gave up 3 | unstored 0 lost 3 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            write 100 -> none | unstored 0 lost 3 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
            stored 100 | unstored 0 lost 3 unavailable(down, since 1970-01-01T00:00:00.000Z, attempts 1)
        "#]],
    );
}
