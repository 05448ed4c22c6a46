//! How fast a client reads server frames (issue 14, goals 1 and 2): `ServerMsg::decode` of the
//! seeded coding-agent session of the projector bench (`agentwire-testkit frames`: 100k
//! events, live: one per frame, and catch-up: 100 per frame), natively. The browser's figure is
//! tests/js/src/projector.bench.ts's `decode` step; this one is steadier, and runs on any
//! build of the crate with the same API (a before/after: build the parent with this file
//! copied in, and alternate).
//!
//! Run: `cargo bench --bench decode` (`-- --events N`, `-- --reps N`).

use std::time::Instant;

use agentwire::core::event_ref::packed;
use agentwire::core::projector::Projector;
use agentwire::core::wire::ServerMsg;

#[path = "common/seeded.rs"]
mod seeded;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name);
    i.and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (count, reps) = (arg("--events", 100_000), arg("--reps", 7));
    let log = seeded::log(count);
    for (name, per_frame) in [("live", 1), ("catchup", 100)] {
        let frames: Vec<String> = seeded::frames(&log, per_frame).collect();
        let bytes: usize = frames.iter().map(String::len).sum();
        let mut best = f64::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            let mut read = 0;
            for frame in &frames {
                match ServerMsg::decode(frame, usize::MAX) {
                    Ok(ServerMsg::Events { events, .. }) => read += events.len(),
                    other => panic!("not an events frame: {other:?}"),
                }
            }
            best = best.min(start.elapsed().as_secs_f64());
            assert_eq!(read, log.len());
        }
        let ns = best * 1e9 / log.len() as f64;
        let mbs = bytes as f64 / best / 1e6;
        println!("decode {name}: {} events, {bytes} bytes in {} frames: {:.1} ms best of {reps}, {ns:.0} ns/event, {mbs:.0} MB/s", log.len(), frames.len(), best * 1e3);
        println!("BENCH\tdecode.{name}\t{ns:.0}\tns/event\t-\t-\tnative, {mbs:.0} MB/s");
        // The whole Projector as the page drives it: every frame ingested as bytes, a drain
        // (to the JSON text the page parses) every 16 frames.
        let mut best = f64::MAX;
        let mut drained_total = 0;
        for _ in 0..reps {
            let start = Instant::now();
            let mut p = Projector::new();
            let mut drained = 0;
            for (i, frame) in frames.iter().enumerate() {
                p.handle_frame_bytes(frame.as_bytes(), 0).expect("a frame");
                if i % 16 == 15 {
                    drained += p.drain_json().len();
                }
            }
            drained += p.drain_json().len();
            best = best.min(start.elapsed().as_secs_f64());
            assert!(drained > 0);
            drained_total = drained;
        }
        let ns = best * 1e9 / log.len() as f64;
        println!(
            "project {name}: {:.1} ms best of {reps}, {ns:.0} ns/event, {drained_total} bytes drained",
            best * 1e3
        );
        println!("BENCH\tproject.{name}\t{ns:.0}\tns/event\t-\t-\tnative, ingest + drain every 16");
        // The same, on the same frames packed (`packed_events`, what the package's `Client`
        // asks for), packed before the timing.
        let mut packed = Vec::new();
        let mut best = f64::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            packed = (frames.iter())
                .map(|f| packed::pack(f).expect("an events frame"))
                .collect::<Vec<_>>();
            best = best.min(start.elapsed().as_secs_f64());
        }
        // What the companion spends per event packing a frame (once per session: its
        // subscribers share the bytes).
        let ns = best * 1e9 / log.len() as f64;
        println!(
            "pack {name}: {:.1} ms best of {reps}, {ns:.0} ns/event",
            best * 1e3
        );
        println!("BENCH\tpack.{name}\t{ns:.0}\tns/event\t-\t-\tnative, the companion's packing of the JSON frames");
        let packed_bytes: usize = packed.iter().map(Vec::len).sum();
        let mut best = f64::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            let mut p = Projector::new();
            let mut drained = 0;
            for (i, frame) in packed.iter().enumerate() {
                p.handle_frame_bytes(frame, 0).expect("a frame");
                if i % 16 == 15 {
                    drained += p.drain_json().len();
                }
            }
            drained += p.drain_json().len();
            best = best.min(start.elapsed().as_secs_f64());
            assert_eq!(
                drained, drained_total,
                "the same batches as from the JSON frames"
            );
        }
        let ns = best * 1e9 / log.len() as f64;
        println!(
            "project {name}, packed ({packed_bytes} bytes, {:.0} % of the JSON): {:.1} ms best of {reps}, {ns:.0} ns/event",
            packed_bytes as f64 * 100.0 / bytes as f64,
            best * 1e3
        );
        println!("BENCH\tproject.{name}.packed\t{ns:.0}\tns/event\t-\t-\tnative, packed frames, ingest + drain every 16");
    }
}
