//! The `agentwire` npm package: a thin wasm-bindgen shell over the pure core, compiled only
//! for wasm32. It is the only code in the crate that knows `JsValue`.
//!
//! One file per JS class ([`projector`]: `Projector`, [`client`]: `Client`) plus
//! `transcript` (cargo feature `transcripts`, the `agentwire/transcripts` entry point) for
//! `normalize`, `project` and `Projector.transcript`. Each export decodes its
//! arguments, calls the core, and maps the error; long-lived state stays in Rust behind the
//! class handle, and the page gets one batch per call (`drain()`), parsed once by the
//! engine's `JSON.parse`, never one JS object per event.
//!
//! JSON rather than `serde-wasm-bindgen`, measured (`tests/js/src/bench.ts`, Node 20, 100k
//! events, a drain per 16 frames): `serde-wasm-bindgen` drains about a third faster (0.72
//! against 0.99 µs per event live, 0.20 against 0.31 in catch-up), but draining is about a
//! tenth of the cost per event either way (ingest is 5 to 8 µs), and it adds 8 KB to the
//! gzipped wasm; JSON text also crosses to a worker as is (`drainJson()`).
//!
//! Errors are real `Error` objects with a machine-readable `.code` (see `types.d.ts`). They
//! are built with `js_sys::Error` rather than `JsError` because `JsError` cannot carry the
//! code.
//!
//! The TypeScript types of everything these exports return are written once, in
//! `types.d.ts`, and emitted into the package's `.d.ts`; `tests/js/types.test.ts` checks them
//! against real outputs.

use wasm_bindgen::prelude::*;

use crate::core::error::ErrorCode;
#[cfg(feature = "transcripts")]
use crate::core::normalize::Format;
use crate::core::wire::WireError;

pub mod client;
mod mem;
pub mod projector;
#[cfg(feature = "transcripts")]
pub mod transcript;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = include_str!("types.d.ts");

/// A JS `Error` with `name = "AgentwireError"` and `code`.
pub(crate) fn error(code: ErrorCode, message: &str) -> JsValue {
    coded_error(code.as_str(), message)
}

/// An error as the server coded it (a newer server may send a code this build does not know).
pub(crate) fn wire_error(e: WireError) -> JsValue {
    coded_error(&e.code, &e.message)
}

fn coded_error(code: &str, message: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name("AgentwireError");
    let _ = js_sys::Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}

/// Parses JSON made by the core into JS values, in one engine call, its text handed over as
/// ASCII ([`crate::core::json::ascii`]: decoded without transcoding).
pub(crate) fn from_json(json: &str) -> JsValue {
    js_sys::JSON::parse(&crate::core::json::ascii(json))
        .unwrap_or_else(|_| panic!("the core always makes valid JSON"))
}

pub(crate) fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

/// `null`/`undefined` detects the format; anything else must be a `Format` name.
#[cfg(feature = "transcripts")]
pub(crate) fn parse_format(provider: Option<&str>) -> Result<Option<Format>, JsValue> {
    match provider {
        None => Ok(None),
        Some(name) => Format::parse(name).map(Some).ok_or_else(|| {
            let names: Vec<_> = Format::ALL.iter().map(|f| f.as_str()).collect();
            let message = format!(
                "unknown provider {name:?}; expected one of {}",
                names.join(", ")
            );
            error(ErrorCode::UnknownProvider, &message)
        }),
    }
}
