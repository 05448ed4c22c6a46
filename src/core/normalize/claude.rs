//! Decoder for the claude format (not written yet: every record is reported as unknown).

use serde_json::Value;

use super::{Decoder, Out};
use crate::core::event::Provider;

pub(crate) struct Claude {
    provider: Provider,
}

impl Claude {
    pub(crate) fn new(provider: Provider) -> Claude {
        Claude { provider }
    }
}

impl Decoder for Claude {
    fn record(&mut self, _record: &Value, out: &mut Out<'_>) {
        out.unknown("record (decoder not written yet)");
    }

    fn finish(&mut self, _out: &mut Out<'_>) {}
}
