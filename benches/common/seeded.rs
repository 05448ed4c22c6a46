//! The seeded coding-agent session of the projector bench as server `events` frames, for
//! `benches/decode.rs` and `examples/project_loop.rs` (one source, so that the bench and the
//! instruction counts read the same frames).

use agentwire::companion::seed::{events, SeedOptions};
use agentwire::core::wire;

/// The first `count` events of the seeded session (`agentwire-testkit seed`), each with its
/// sequence, as JSON.
pub fn log(count: u64) -> Vec<(u64, String)> {
    let options = SeedOptions {
        session: "ses_bench".into(),
        events: count,
        tool_updates: None,
    };
    events(&options)
        .zip(1..)
        .map(|(e, seq)| (seq, e.into_sequenced(seq).to_json()))
        .collect()
}

/// `log` as JSON `events` frames of `per_frame` events each, one after another.
pub fn frames(log: &[(u64, String)], per_frame: usize) -> impl Iterator<Item = String> + '_ {
    log.chunks(per_frame)
        .flat_map(|chunk| {
            let events = chunk.iter().map(|(seq, json)| (*seq, json.as_str()));
            wire::frame_encoded("ses_bench", "bench", events, usize::MAX)
        })
        .map(|f| f.text)
}
