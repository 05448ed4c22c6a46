//! Decoder for the codex_app_server format (not written yet: every record is reported as unknown).

use serde_json::Value;

use super::{Decoder, Out};

#[derive(Default)]
pub(crate) struct CodexAppServer;

impl Decoder for CodexAppServer {
    fn record(&mut self, _record: &Value, out: &mut Out<'_>) {
        out.unknown("record (decoder not written yet)");
    }

    fn finish(&mut self, _out: &mut Out<'_>) {}
}
