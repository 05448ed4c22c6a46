//! Decoder for the amp format (not written yet: every record is reported as unknown).

use serde_json::Value;

use super::{Decoder, Out};

pub(crate) struct Amp;

impl Amp {
    pub(crate) fn new() -> Amp {
        Amp
    }
}

impl Decoder for Amp {
    fn record(&mut self, _record: &Value, out: &mut Out<'_>) {
        out.unknown("record (decoder not written yet)");
    }

    fn finish(&mut self, _out: &mut Out<'_>) {}
}
