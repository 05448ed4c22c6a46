//! The wasm `Projector`'s work as the page drives it, natively, for instruction counts
//! (`valgrind --tool=callgrind`, or cachegrind's total): the seeded session of the projector
//! bench (`benches/decode.rs`, tests/js/src/projector.bench.ts) as packed `events` frames, each
//! ingested, a drain to JSON every 16 frames. The frames are made before the counted part
//! starts: a run with `--frames-only` counts what to subtract, or callgrind counts only
//! `project` (`--toggle-collect=project_loop::native::project`).
//!
//! Usage: `cargo run --release --example project_loop -- [EVENTS] [PER_FRAME] [--frames-only]
//! [--json]` (20,000 events, one per frame, by default; `--json`: the frames as their JSON
//! text, what `ingest` and `ingestBytes` take from a server not asked for `packed_events`).
//! The browser hashes the projector's maps with FxHash (`core::hash`); natively they use
//! SipHash, so a native count is a little above what the page's code does, unless the build
//! hashes as the page does:
//! `RUSTFLAGS="--cfg agentwire_fxhash" CARGO_TARGET_DIR=target/fxhash cargo build --release
//! --example project_loop` (its own target directory, so the flag reaches no other build).
//! Native only (the seeded session is the companion's); `wasm-pack test` builds the examples
//! for wasm32 too, where `main` is empty.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
#[path = "../benches/common/seeded.rs"]
mod seeded;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::hint::black_box;

    use agentwire::core::event_ref::packed;
    use agentwire::core::projector::Projector;

    use super::seeded;

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let frames_only = args.iter().any(|a| a == "--frames-only");
        let json = args.iter().any(|a| a == "--json");
        let mut numbers = args.iter().filter_map(|a| a.parse::<u64>().ok());
        let count = numbers.next().unwrap_or(20_000);
        let per_frame = numbers.next().unwrap_or(1) as usize;
        let log = seeded::log(count);
        let frames: Vec<Vec<u8>> = seeded::frames(&log, per_frame)
            .map(|f| {
                if json {
                    f.into_bytes()
                } else {
                    packed::pack(&f).expect("an events frame")
                }
            })
            .collect();
        if frames_only {
            println!("{} frames", frames.len());
            return;
        }
        let drained = project(&frames);
        println!(
            "{} events in {} frames, {drained} bytes drained",
            log.len(),
            frames.len()
        );
    }

    /// The counted part (callgrind: `--toggle-collect=project_loop::native::project`).
    #[inline(never)]
    pub fn project(frames: &[Vec<u8>]) -> usize {
        let mut p = Projector::new();
        let mut drained = 0;
        for (i, frame) in frames.iter().enumerate() {
            p.handle_frame_bytes(black_box(frame), 0).expect("a frame");
            if i % 16 == 15 {
                drained += p.drain_json().len();
            }
        }
        drained + p.drain_json().len()
    }
}
