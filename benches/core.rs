//! Core benchmarks: normalization throughput per provider (MB/s and events/s), projection
//! throughput at 1k, 10k and 100k events, and what a snapshot of a long session costs the
//! companion (building its projection, taking a snapshot, encoding it). Numbers go to
//! BENCHMARKS.md; nothing here asserts.
//!
//! Run: `cargo bench --bench core` (add `-- --quick` for a shorter run). Besides Criterion's
//! report, the normalization part prints one `BENCH` line per format (MB/s, 10^6 bytes per
//! second, the median of timed runs, against the 300 MB/s target of issue 14);
//! `-- normalize/codex` (any format's name) times that format alone.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Map, Value};

use agentwire::core::event::{Event, EventInit, EventType, Provider};
use agentwire::core::lifecycle::{LifecycleConfig, TurnProjector};
use agentwire::core::normalize::{normalize, Config, Format};
use agentwire::core::snapshot::Projection;
use agentwire::core::time::Timestamp;
use agentwire::core::timeline::Timeline;
use agentwire::core::wire::ServerMsg;

#[path = "common/corpus.rs"]
mod corpus;
use corpus::corpus;

/// The binary's allocator, so that this measures what it runs (`companion::alloc`).
#[global_allocator]
static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;

fn normalization(c: &mut Criterion) {
    let mut g = c.benchmark_group("normalize");
    for (format, dir) in [
        (Format::Claude, "claude"),
        (Format::Codex, "codex"),
        (Format::Gemini, "gemini"),
        (Format::Opencode, "opencode"),
    ] {
        if !wanted(format) {
            continue;
        }
        let input = corpus(dir);
        let events = normalize(Some(format), Config::new("s1"), &input, Timestamp::EPOCH)
            .events
            .len();
        // Criterion reports bytes/s; events/s = this count / the measured time.
        eprintln!(
            "normalize/{format}: {} bytes -> {events} events per iteration",
            input.len()
        );
        bench_line(format, &input, events);
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(format), &input, |b, input| {
            b.iter(|| {
                normalize(
                    Some(format),
                    Config::new("s1"),
                    black_box(input),
                    Timestamp::EPOCH,
                )
            })
        });
    }
    g.finish();
}

/// False when criterion's filter names another format (`-- normalize/codex` times Codex
/// alone, e.g. under `perf record`).
fn wanted(format: Format) -> bool {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    match filter.as_deref().and_then(|f| f.strip_prefix("normalize/")) {
        Some(name) => name == format.as_str(),
        None => true,
    }
}

/// The normalization throughput target of issue 14, in MB/s.
const TARGET_MB_S: f64 = 300.0;

/// Times whole-input normalizations for about a second and prints the `BENCH` line of one
/// format: the median run's MB/s against the target. The value is per second of this
/// thread's CPU time (the machine is shared; wall time is in the note).
fn bench_line(format: Format, input: &[u8], events: usize) {
    let mut cpu = Vec::new();
    let mut wall = Vec::new();
    let start = Instant::now();
    while cpu.len() < 11 || (start.elapsed() < Duration::from_secs(1) && cpu.len() < 1000) {
        let (t, c) = (Instant::now(), thread_cpu());
        black_box(normalize(
            Some(format),
            Config::new("s1"),
            black_box(input),
            Timestamp::EPOCH,
        ));
        cpu.push(thread_cpu() - c);
        wall.push(t.elapsed());
    }
    cpu.sort();
    wall.sort();
    let (median, median_wall) = (cpu[cpu.len() / 2], wall[wall.len() / 2]);
    let mb_s = |d: Duration| input.len() as f64 / d.as_secs_f64() / 1e6;
    println!(
        "BENCH\tnormalize.{format}\t{:.1}\tMB/s\ttarget {TARGET_MB_S:.0} MB/s\t{:.2}x\t{:.2} MB, {events} events, median of {} runs: {:.2} ms CPU, {:.2} ms wall ({:.1} MB/s)",
        mb_s(median),
        mb_s(median) / TARGET_MB_S,
        input.len() as f64 / 1e6,
        cpu.len(),
        median.as_secs_f64() * 1e3,
        median_wall.as_secs_f64() * 1e3,
        mb_s(median_wall),
    );
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A seeded coding-agent session like the one in reference/anchors.md: per turn a prompt,
/// reasoning deltas, ~20-character text deltas, a tool call with output, usage, a terminal.
pub fn synthetic_session(n: usize) -> Vec<Event> {
    let mut events = Vec::with_capacity(n);
    let mut turn = 0;
    while events.len() < n {
        turn += 1;
        let run = format!("run_{turn}");
        let mut push = |kind: EventType, data: Value| {
            let data: Map<String, Value> = serde_json::from_value(data).unwrap();
            let seq = events.len() as u64 + 1;
            let init = EventInit {
                run_id: Some(run.clone()),
                sequence: seq,
                data,
                ..EventInit::new(
                    kind,
                    "s1",
                    Provider::Claude,
                    Timestamp::from_unix_millis(seq as i64),
                )
            };
            events.push(Event::new(init).unwrap());
        };
        push(EventType::RunStarted, json!({}));
        push(
            EventType::MessageSent,
            json!({"content": "Please fix the failing test"}),
        );
        for _ in 0..5 {
            push(
                EventType::ReasoningStreamed,
                json!({"delta": "thinking about it.. "}),
            );
        }
        let tool = format!("toolu_{turn}");
        push(
            EventType::ToolCallStarted,
            json!({"tool_call_id": tool, "tool_name": "Bash", "tool_input": {"command": "cargo test"}}),
        );
        push(
            EventType::ToolCallCompleted,
            json!({"tool_call_id": tool, "tool_name": "Bash", "tool_output": "test result: ok. 12 passed"}),
        );
        let msg = format!("msg_{turn}");
        for _ in 0..30 {
            push(
                EventType::MessageStreamed,
                json!({"delta": "twenty chars of text", "message_id": msg}),
            );
        }
        push(
            EventType::MessageReceived,
            json!({"content": "twenty chars of text".repeat(30), "message_id": msg}),
        );
        push(
            EventType::TokenUsageUpdated,
            json!({"input_tokens": 1200, "output_tokens": 340}),
        );
        push(EventType::RunCompleted, json!({}));
    }
    events.truncate(n);
    events
}

fn projection(c: &mut Criterion) {
    let mut g = c.benchmark_group("project");
    g.sample_size(10);
    for n in [1_000, 10_000, 100_000] {
        let events = synthetic_session(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(
            BenchmarkId::new("timeline+lifecycle", n),
            &events,
            |b, events| {
                b.iter(|| {
                    let mut lifecycle =
                        TurnProjector::new(LifecycleConfig::new("s1", Provider::Claude));
                    let mut timeline = Timeline::new();
                    for (i, e) in events.iter().enumerate() {
                        lifecycle.handle_event(e, i as i64);
                        timeline.handle_event(e);
                    }
                    black_box((lifecycle.lifecycle(), timeline.render().len()))
                })
            },
        );
    }
    g.finish();
    projection_lines();
}

/// The projection figures as `BENCH` lines for scripts/bench: the median of a few timed runs
/// per size (criterion's own report is above), unless criterion's filter leaves `project` out.
fn projection_lines() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .is_some_and(|f| !"project/timeline+lifecycle".contains(f.split('/').next().unwrap_or("")))
    {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    for n in [1_000, 10_000, 100_000] {
        let events = synthetic_session(n);
        let mut times: Vec<f64> = (0..if quick { 3 } else { 7 })
            .map(|_| {
                let start = std::time::Instant::now();
                let mut lifecycle =
                    TurnProjector::new(LifecycleConfig::new("s1", Provider::Claude));
                let mut timeline = Timeline::new();
                for (i, e) in events.iter().enumerate() {
                    lifecycle.handle_event(e, i as i64);
                    timeline.handle_event(e);
                }
                black_box((lifecycle.lifecycle(), timeline.render().len()));
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        let per_s = n as f64 / ms * 1e3 / 1e6;
        println!(
            "BENCH\tcore.project.{}k\t{ms:.2}\tms\t-\t-\ttimeline+lifecycle, native, {per_s:.2} M events/s",
            n / 1000
        );
    }
}

/// A snapshot of the last 200 items of a long session, as the companion takes one for a page
/// (`companion::snapshot`): the projection built once (a cold request's work besides reading
/// the log), then the snapshot of a held projection and its JSON (a warm request's work), as
/// `BENCH` lines. The page's budget for the whole warm path is 300 ms at 1M events.
fn snapshot(_: &mut Criterion) {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"snapshot".contains(f.as_str())) {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick {
        &[100_000]
    } else {
        &[100_000, 1_000_000]
    };
    for &n in sizes {
        let events = synthetic_session(n);
        let start = Instant::now();
        let mut p = Projection::new("s1");
        for (i, e) in events.iter().enumerate() {
            p.handle_event(e, i as i64);
        }
        let build_ms = start.elapsed().as_secs_f64() * 1e3;
        drop(events);
        let mut take = Vec::new();
        let mut encode = Vec::new();
        let mut bytes = 0;
        for _ in 0..if quick { 3 } else { 7 } {
            let start = Instant::now();
            let snap = p.snapshot("e1", 200);
            take.push(start.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            bytes = black_box(ServerMsg::Snapshot(Box::new(snap)).encode()).len();
            encode.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let k = n / 1000;
        let items = p.timeline().len();
        println!(
            "BENCH\tcore.snapshot.build.{k}k\t{build_ms:.0}\tms\t-\t-\tthe projection of {n} events ({items} items), native, {:.2} M events/s",
            n as f64 / build_ms / 1e3
        );
        println!(
            "BENCH\tcore.snapshot.take.{k}k\t{:.2}\tms\tbudget 300 ms (page, warm)\t-\tthe last 200 items of a held projection",
            median(take)
        );
        println!(
            "BENCH\tcore.snapshot.encode.{k}k\t{:.2}\tms\t-\t-\tits JSON, {bytes} bytes",
            median(encode)
        );
    }
}

criterion_group!(benches, normalization, projection, snapshot);
criterion_main!(benches);
