//! What writing JSON costs (issue 14, goals 2 to 4): `Event::to_json` (every stored and every
//! sent event is written once) and the projector's drain `Batch::to_json` (what the page is
//! handed), by `core::json`'s writer, each beside `serde_json::to_string` of the same values
//! (their `Serialize` derives are kept for the companion) in the same run: the seeded
//! coding-agent session of the projector bench, natively.
//!
//! Run: `cargo bench --bench encode` (`-- --events N`, `-- --reps N`, `-- --quick`).

use std::hint::black_box;
use std::time::Instant;

use agentwire::companion::seed::{events, SeedOptions};
use agentwire::core::projector::{Batch, Projector};
use agentwire::core::wire;
use agentwire::core::Event;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name);
    i.and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

/// The best of `reps` runs of `f`, in nanoseconds per event.
fn best(reps: u64, per: usize, mut f: impl FnMut() -> usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let start = Instant::now();
        black_box(f());
        best = best.min(start.elapsed().as_secs_f64());
    }
    best * 1e9 / per as f64
}

fn report(id: &str, what: &str, ours: f64, serde: f64) {
    let ratio = serde / ours;
    println!("{what}: {ours:.0} ns/event, serde_json {serde:.0} ns/event ({ratio:.2}x)");
    println!("BENCH\t{id}\t{ours:.0}\tns/event\tserde_json {serde:.0} ns/event\t{ratio:.2}x\tnative, same run");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let count = arg("--events", if quick { 10_000 } else { 100_000 });
    let reps = arg("--reps", if quick { 3 } else { 7 });
    let options = SeedOptions {
        session: "ses_bench".into(),
        events: count,
        tool_updates: None,
    };
    let log: Vec<Event> = events(&options)
        .zip(1..)
        .map(|(e, seq)| e.into_sequenced(seq))
        .collect();
    let n = log.len();
    let bytes: usize = log.iter().map(|e| e.to_json().len()).sum();
    println!("{n} events, {bytes} bytes of JSON");
    // Alternated, so that both meet the same machine.
    let (mut ours, mut serde) = (f64::MAX, f64::MAX);
    for _ in 0..reps {
        ours = ours.min(best(1, n, || log.iter().map(|e| e.to_json().len()).sum()));
        serde = serde.min(best(1, n, || {
            (log.iter())
                .map(|e| serde_json::to_string(e).unwrap().len())
                .sum()
        }));
    }
    report("encode.event", "Event::to_json", ours, serde);

    // The drains of the projector bench (a drain every 16 frames), live and catch-up.
    let json: Vec<(u64, String)> = log.iter().map(|e| (e.sequence(), e.to_json())).collect();
    for (name, per_frame) in [("live", 1), ("catchup", 100)] {
        let mut p = Projector::new();
        let mut batches: Vec<Batch> = Vec::new();
        let frames = json.chunks(per_frame).flat_map(|chunk| {
            let events = chunk.iter().map(|(seq, json)| (*seq, json.as_str()));
            wire::frame_encoded("ses_bench", "bench", events, usize::MAX)
        });
        for (i, frame) in frames.enumerate() {
            p.handle_frame(&frame.text, 0).expect("a frame");
            if i % 16 == 15 {
                batches.push(p.drain());
            }
        }
        batches.push(p.drain());
        let (mut ours, mut serde) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            ours = ours.min(best(1, n, || {
                batches.iter().map(|b| b.to_json().len()).sum()
            }));
            serde = serde.min(best(1, n, || {
                (batches.iter())
                    .map(|b| serde_json::to_string(b).unwrap().len())
                    .sum()
            }));
        }
        let what = format!("Batch::to_json {name} ({} drains)", batches.len());
        report(&format!("encode.drain.{name}"), &what, ours, serde);
    }
}
