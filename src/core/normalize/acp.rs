//! Decoder for the acp format (not written yet: every record is reported as unknown).

use serde_json::Value;

use super::{Decoder, Out};
use crate::core::event::Provider;

pub(crate) struct Acp {
    provider: Provider,
}

impl Acp {
    pub(crate) fn new(provider: Provider) -> Acp {
        Acp { provider }
    }
}

impl Decoder for Acp {
    fn record(&mut self, _record: &Value, out: &mut Out<'_>) {
        out.unknown("record (decoder not written yet)");
    }

    fn finish(&mut self, _out: &mut Out<'_>) {}
}
