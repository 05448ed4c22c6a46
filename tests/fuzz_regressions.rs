//! Inputs that broke (or were built to break) the normalizers and the wire decoders, replayed
//! through every format: no panic, chunking never changes the output. New fuzz crashes go to
//! tests/data/fuzz-regressions/ (see scripts/fuzz).

#![cfg(not(target_arch = "wasm32"))]

use agentwire::core::normalize::{normalize, Config, Format, Normalizer};
use agentwire::core::time::Timestamp;
use agentwire::core::wire::{ClientMsg, ServerMsg};

#[test]
fn every_regression_input_normalizes_the_same_in_any_chunking_and_never_panics() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fuzz-regressions");
    let mut inputs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 5, "the regression inputs are here");
    for path in inputs {
        let input = std::fs::read(&path).unwrap();
        for format in Format::ALL.iter().copied().map(Some).chain([None]) {
            let whole = normalize(format, Config::new("s1"), &input, Timestamp::EPOCH);
            assert_eq!(whole.stats.events as usize, whole.events.len());
            for step in [1, 3, 64] {
                let mut n = Normalizer::new(format, Config::new("s1"));
                for chunk in input.chunks(step) {
                    n.handle_bytes(chunk, Timestamp::EPOCH);
                }
                n.handle_eof(Timestamp::EPOCH);
                let events: Vec<_> = std::iter::from_fn(|| n.poll_event()).collect();
                assert_eq!(
                    events,
                    whole.events,
                    "{} as {format:?} in chunks of {step}",
                    path.display()
                );
            }
        }
        if let Ok(text) = std::str::from_utf8(&input) {
            let _ = ClientMsg::decode(text, 1 << 20);
            let _ = ServerMsg::decode(text, 1 << 20);
        }
    }
}
