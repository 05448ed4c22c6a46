//! Arbitrary bytes through every normalizer, in arbitrary chunks: never a panic, and the
//! output never depends on the chunking.
#![no_main]

use agentwire::core::normalize::{normalize, Config, Format, Normalizer};
use agentwire::core::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, input)) = data.split_first() else { return };
    let formats = Format::ALL;
    let format = formats.get(usize::from(selector) % (formats.len() + 1)).copied();
    let mut config = Config::new("fuzz");
    config.max_line_bytes = 4096;
    let whole = normalize(format, config.clone(), input, Timestamp::EPOCH);
    assert_eq!(whole.stats.events as usize, whole.events.len());
    // The same input cut at a place chosen by the selector.
    let cut = usize::from(selector) * 7 % (input.len() + 1);
    let mut n = Normalizer::new(format, config);
    n.handle_bytes(&input[..cut], Timestamp::EPOCH);
    n.handle_bytes(&input[cut..], Timestamp::EPOCH);
    n.handle_eof(Timestamp::EPOCH);
    let events: Vec<_> = std::iter::from_fn(|| n.poll_event()).collect();
    assert_eq!(events, whole.events, "chunking changed the output");
});
