//! Golden transcripts: every provider transcript under tests/data/<format>/ is normalized and
//! rendered one event per line (then its diagnostics and a stats line) and compared with the
//! reviewed `<file>.golden` beside it. `UPDATE_EXPECT=1 cargo test --test goldens` rewrites
//! the goldens; review the diff like code.
// Native only: `wasm-pack test` builds every test target for wasm32 too.
#![cfg(not(target_arch = "wasm32"))]

use std::fs;
use std::path::{Path, PathBuf};

use agentwire::core::normalize::{normalize, Config, Format};
use agentwire::core::render::{render_diagnostics, render_events};
use agentwire::core::time::Timestamp;

fn transcripts() -> Vec<(Format, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut out = Vec::new();
    for dir in fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        let Some(format) = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(Format::parse)
        else {
            continue;
        };
        for file in fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if !name.ends_with(".golden") && !name.ends_with(".md") {
                out.push((format, path));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

pub fn golden_text(format: Format, input: &[u8]) -> String {
    let out = normalize(Some(format), Config::new("s1"), input, Timestamp::EPOCH);
    let s = out.stats;
    format!(
        "{}{}# {} records, {} events, {} ignored, {} diagnostics\n",
        render_events(&out.events),
        render_diagnostics(&out.diagnostics),
        s.records,
        s.events,
        s.ignored,
        s.diagnostics
    )
}

#[test]
fn every_transcript_matches_its_golden() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let all = transcripts();
    assert!(
        all.len() >= 29,
        "the shared fixtures are all here ({} found)",
        all.len()
    );
    let mut failures = Vec::new();
    for (format, path) in all {
        let actual = golden_text(format, &fs::read(&path).unwrap());
        let golden = PathBuf::from(format!("{}.golden", path.display()));
        let expected = fs::read_to_string(&golden).unwrap_or_default();
        if actual != expected {
            if update {
                fs::write(&golden, &actual).unwrap();
            } else {
                failures.push(format!(
                    "{}:\n--- expected\n{expected}+++ actual\n{actual}",
                    golden.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "goldens differ (UPDATE_EXPECT=1 to accept):\n{}",
        failures.join("\n")
    );
}
