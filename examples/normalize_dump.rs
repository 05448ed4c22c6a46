//! Prints everything the normalizers produce for a set of files, so that two builds can be
//! compared byte for byte (`scripts/normalize-diff` builds this at a base commit and at the
//! work tree, and diffs the two outputs).
//!
//! Usage: `cargo run --release --example normalize_dump -- PATH…` (files or directories,
//! walked recursively, sorted). Each file is read as every format and as detected, whole and
//! fed in 7-byte chunks, with a plain config and with a source and a host run id; for each
//! pass the detected format, every event's `to_json` and `Debug`, every diagnostic and the
//! stats are printed.

use std::path::{Path, PathBuf};

use agentwire::core::normalize::{Config, Format, Normalizer};
use agentwire::core::time::Timestamp;

fn main() {
    let mut files = Vec::new();
    for arg in std::env::args().skip(1) {
        walk(Path::new(&arg), &mut files);
    }
    files.sort();
    let mut out = String::new();
    for path in &files {
        let input = std::fs::read(path).expect("readable file");
        let formats = std::iter::once(None).chain(Format::ALL.iter().copied().map(Some));
        for format in formats {
            for host in [false, true] {
                for chunk in [0, 7] {
                    out.push_str(&format!(
                        "== {} format={} host={host} chunk={chunk}\n",
                        path.display(),
                        format.map_or("auto", Format::as_str),
                    ));
                    pass(&mut out, format, host, chunk, &input);
                    print!("{out}");
                    out.clear();
                }
            }
        }
    }
}

fn pass(out: &mut String, format: Option<Format>, host: bool, chunk: usize, input: &[u8]) {
    let mut config = Config::new("s1");
    if host {
        config.source = "proc-2".to_owned();
    }
    let mut n = Normalizer::new(format, config);
    if host {
        n.expect_run("run_host_1");
        n.expect_run("run_host_2");
    }
    let now = Timestamp::from_unix_millis(1_700_000_000_000);
    let chunks: Vec<&[u8]> = if chunk == 0 {
        vec![input]
    } else {
        input.chunks(chunk).collect()
    };
    for (i, bytes) in chunks.into_iter().enumerate() {
        n.handle_bytes(bytes, now);
        drain(out, &mut n, i);
    }
    n.handle_eof(now);
    drain(out, &mut n, usize::MAX);
    out.push_str(&format!("format {:?}\nstats {:?}\n", n.format(), n.stats()));
}

fn drain(out: &mut String, n: &mut Normalizer, at: usize) {
    while let Some(e) = n.poll_event() {
        out.push_str(&format!("event@{at} {}\n{e:?}\n", e.to_json()));
    }
    while let Some(d) = n.poll_diagnostic() {
        out.push_str(&format!("diag@{at} {d:?}\n"));
    }
}

fn walk(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("readable directory") {
            walk(&entry.expect("directory entry").path(), files);
        }
    } else {
        files.push(path.to_owned());
    }
}
