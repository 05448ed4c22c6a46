//! The `agentwire/transcripts` entry point (cargo feature `transcripts`): a saved or streaming
//! provider transcript read with no server at all. It is a separate wasm module because the
//! seven provider decoders are most of the code (about 80 KB of the gzipped wasm) and a page
//! that follows live sessions needs none of them.
//!
//! `normalize()` and `project()` print byte for byte what `agentwire normalize --session local
//! --now <t>` and `agentwire project --session local --now <t>` print on stdout: both call the
//! same [`crate::core::render`] functions. `Projector.transcript()` projects raw output live.

use wasm_bindgen::prelude::*;

use super::projector::Projector;
use super::{now_ms, parse_format, wire_error};
use crate::core::normalize::{normalize as run, Config, Normalized};
use crate::core::projector::Projector as Core;
use crate::core::render::{normalize_output, project_output};
use crate::core::time::Timestamp;

fn read(provider: Option<String>, text: &str, now: i64) -> Result<Normalized, JsValue> {
    let format = parse_format(provider.as_deref())?;
    let now = Timestamp::from_unix_millis(now);
    Ok(run(format, Config::new("local"), text.as_bytes(), now))
}

/// One canonical event per line, as JSON (`agentwire normalize`). `provider` null/undefined
/// detects the format; `nowMs` (default: now) stamps lines that carry no time.
#[wasm_bindgen(js_name = normalize)]
pub fn normalize_text(
    #[wasm_bindgen(unchecked_param_type = "Format | null | undefined")] provider: Option<String>,
    text: &str,
    #[wasm_bindgen(js_name = nowMs)] now: Option<f64>,
) -> Result<String, JsValue> {
    let now = now.map_or_else(now_ms, |t| t as i64);
    Ok(normalize_output(&read(provider, text, now)?))
}

/// The lifecycle and the timeline the transcript projects to, as text (`agentwire project`).
#[wasm_bindgen(js_name = project)]
pub fn project_text(
    #[wasm_bindgen(unchecked_param_type = "Format | null | undefined")] provider: Option<String>,
    text: &str,
    #[wasm_bindgen(js_name = nowMs)] now: Option<f64>,
) -> Result<String, JsValue> {
    let now = now.map_or_else(now_ms, |t| t as i64);
    Ok(project_output(&read(provider, text, now)?, "local", now))
}

#[wasm_bindgen]
impl Projector {
    /// A projector of one provider transcript, fed raw output with `ingest` and ended with
    /// `finish`; `provider` null/undefined detects the format; the session defaults to "local".
    pub fn transcript(
        #[wasm_bindgen(unchecked_param_type = "Format | null | undefined")] provider: Option<
            String,
        >,
        session: Option<String>,
    ) -> Result<Projector, JsValue> {
        let format = parse_format(provider.as_deref())?;
        let session = session.as_deref().unwrap_or("local");
        Ok(Projector(Core::transcript(format, session)))
    }

    /// The end of a transcript (a last line without a newline is read now).
    pub fn finish(&mut self, #[wasm_bindgen(js_name = nowMs)] now_ms: f64) -> Result<(), JsValue> {
        self.0.handle_eof(now_ms as i64).map_err(wire_error)
    }
}
