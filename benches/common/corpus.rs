//! The normalization corpus of `benches/core.rs` and `examples/normalize_loop.rs` (one source,
//! so that the bench and the instruction counts time the same bytes).

use std::path::Path;

/// The real transcripts of one format, concatenated and repeated to about 1 MiB.
pub fn corpus(dir: &str) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir);
    let mut one = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // JSON Lines only: pretty documents cannot be concatenated.
        if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
            one.extend(filled(std::fs::read(&p).unwrap()));
            if one.last() != Some(&b'\n') {
                one.push(b'\n');
            }
        }
    }
    let mut out = Vec::with_capacity(1 << 20);
    while out.len() < 1 << 20 && !one.is_empty() {
        out.extend_from_slice(&one);
    }
    out
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
