//! Normalizes one format's bench corpus (its JSON Lines transcripts under `tests/data`,
//! repeated to about 1 MiB: the core bench's, `benches/common/corpus.rs`) a fixed number of
//! times, so that `perf stat -e instructions:u` counts the same work for two builds, whatever
//! the load. It runs on the binary's allocator (`companion::alloc`).
//!
//! Usage: `cargo run --release --example normalize_loop -- FORMAT [ITERATIONS]`.

use std::hint::black_box;

use agentwire::core::normalize::{normalize, Config, Format};
use agentwire::core::time::Timestamp;

#[path = "../benches/common/corpus.rs"]
mod corpus;
use corpus::corpus;

/// The binary's allocator, so that this measures what it runs (`companion::alloc`).
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: agentwire::companion::alloc::Allocator = agentwire::companion::alloc::Allocator;

fn main() {
    let mut args = std::env::args().skip(1);
    let format = args
        .next()
        .and_then(|f| Format::parse(&f))
        .expect("a format");
    let iterations: usize = args.next().map_or(100, |n| n.parse().expect("a count"));
    let input = corpus(format.as_str());
    let mut events = 0;
    for _ in 0..iterations {
        let out = normalize(
            Some(format),
            Config::new("s1"),
            black_box(&input),
            Timestamp::EPOCH,
        );
        events += out.events.len();
    }
    println!(
        "{format}: {iterations} x {} bytes, {events} events",
        input.len()
    );
}
