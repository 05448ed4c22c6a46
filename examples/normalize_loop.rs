//! Normalizes one format's bench corpus (its JSON Lines transcripts under `tests/data`,
//! repeated to about 1 MiB, as `benches/core.rs` builds it) a fixed number of times, so that
//! `perf stat -e instructions:u` counts the same work for two builds, whatever the load.
//!
//! Usage: `cargo run --release --example normalize_loop -- FORMAT [ITERATIONS]`.

use std::hint::black_box;
use std::path::Path;

use agentwire::core::normalize::{normalize, Config, Format};
use agentwire::core::time::Timestamp;

fn main() {
    let mut args = std::env::args().skip(1);
    let format = args
        .next()
        .and_then(|f| Format::parse(&f))
        .expect("a format");
    let iterations: usize = args.next().map_or(100, |n| n.parse().expect("a count"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format.as_str());
    let mut paths: Vec<_> = std::fs::read_dir(&root)
        .expect("the format's test data")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".jsonl") || name.ends_with(".ndjson")
        })
        .collect();
    paths.sort();
    let mut one = Vec::new();
    for p in paths {
        one.extend(filled(std::fs::read(&p).expect("readable file")));
        if one.last() != Some(&b'\n') {
            one.push(b'\n');
        }
    }
    let mut input = Vec::with_capacity(1 << 20);
    while input.len() < 1 << 20 && !one.is_empty() {
        input.extend_from_slice(&one);
    }
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

/// A file of the corpus with the snapshot placeholders of the Gemini CLI's test transcripts
/// (`"<TIMESTAMP>"`, `<DURATION>`, which make their `result` lines invalid JSON) filled with
/// values of the kind the CLI writes there, so that the corpus costs what a real session
/// does (the test data under tests/ keeps them).
fn filled(bytes: Vec<u8>) -> Vec<u8> {
    match String::from_utf8(bytes) {
        Ok(text) => text
            .replace("\"<TIMESTAMP>\"", "\"2025-10-07T09:15:42.123Z\"")
            .replace("<DURATION>", "1834")
            .into_bytes(),
        Err(e) => e.into_bytes(),
    }
}
