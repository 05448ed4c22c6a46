//! `normalize()` and `project()`: a saved provider transcript, read with no server at all.
//! Their output is byte for byte what `agentwire normalize --session local --now <t>` and
//! `agentwire project --session local --now <t>` print on stdout: both call the same
//! [`crate::core::render`] functions.

use wasm_bindgen::prelude::*;

use super::{now_ms, parse_format};
use crate::core::normalize::{normalize as run, Config, Normalized};
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
