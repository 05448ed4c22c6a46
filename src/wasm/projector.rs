//! `Projector`: the transport-free client state (see [`crate::core::projector`]). A page that
//! owns its socket (or a worker, or a test) feeds it frames with `ingest` and takes one batch
//! per animation frame with `drain`. The `agentwire/transcripts` build adds
//! `Projector.transcript()` and `finish()` (see [`super::transcript`]).

use wasm_bindgen::prelude::*;

use super::{error, from_json};
use crate::core::json::to_json;
use crate::core::projector::Projector as Core;

/// Server frames (or a provider's raw output) in, one batch of changes out.
#[wasm_bindgen]
pub struct Projector(pub(crate) Core);

#[wasm_bindgen]
impl Projector {
    /// A projector of server frames.
    #[wasm_bindgen(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Projector {
        Projector(Core::new())
    }

    /// One server text frame (or a piece of raw output). A malformed frame throws an
    /// `AgentwireError` (and is noted in the next batch); the state is unchanged by it.
    pub fn ingest(
        &mut self,
        frame: &str,
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsValue> {
        #[cfg(feature = "transcripts")]
        if self.0.is_transcript() {
            return (self.0.handle_provider_text(frame, now_ms as i64)).map_err(super::wire_error);
        }
        match self.0.handle_frame(frame, now_ms as i64) {
            Ok(_) => Ok(()),
            Err(e) => Err(error(e.code(), &e.to_string())),
        }
    }

    /// One server frame as bytes: what a WebSocket hands over for a binary message (with
    /// `binaryType = "arraybuffer"`, wrapped in a `Uint8Array`) from a server asked for
    /// `binary_frames` in `hello`. The same UTF-8 JSON text as `ingest` takes, handled the
    /// same, but copied into wasm memory in one `set` where a string is encoded character by
    /// character (tests/js/src/projector.bench.ts measures both).
    #[wasm_bindgen(js_name = ingestBytes)]
    pub fn ingest_bytes(
        &mut self,
        frame: &[u8],
        #[wasm_bindgen(js_name = nowMs)] now_ms: f64,
    ) -> Result<(), JsValue> {
        #[cfg(feature = "transcripts")]
        if self.0.is_transcript() {
            return (self.0.handle_provider_bytes(frame, now_ms as i64)).map_err(super::wire_error);
        }
        match self.0.handle_frame_bytes(frame, now_ms as i64) {
            Ok(_) => Ok(()),
            Err(e) => Err(error(e.code(), &e.to_string())),
        }
    }

    /// The changes since the previous drain, as one object.
    #[wasm_bindgen(unchecked_return_type = "Batch")]
    pub fn drain(&mut self) -> JsValue {
        from_json(&self.0.drain_json())
    }

    /// The same batch as JSON text (to post to another thread as is).
    #[wasm_bindgen(js_name = drainJson)]
    pub fn drain_json(&mut self) -> String {
        self.0.drain_json()
    }

    /// The session's items now (for a view that mounts late).
    #[wasm_bindgen(unchecked_return_type = "Item[]")]
    pub fn snapshot(&self, session: &str) -> JsValue {
        from_json(&to_json(self.0.items(session)))
    }

    /// The sessions seen, in order of first appearance.
    pub fn sessions(&self) -> Vec<String> {
        self.0.sessions().map(str::to_owned).collect()
    }

    /// The last sequence applied for the session (0 for none).
    pub fn after(&self, session: &str) -> f64 {
        self.0.cursor(session).map_or(0.0, |c| c.after as f64)
    }

    /// The index of the first item held for the session: above 0 after a `snapshot`, until
    /// `history` pages bring the older items (the `before` of the next one).
    pub fn start(&self, session: &str) -> f64 {
        self.0.start(session) as f64
    }

    /// The epoch of the session's cursor, once known.
    pub fn epoch(&self, session: &str) -> Option<String> {
        self.0.cursor(session).and_then(|c| c.epoch.clone())
    }

    #[wasm_bindgen(unchecked_return_type = "Lifecycle | undefined")]
    pub fn lifecycle(&self, session: &str) -> JsValue {
        self.0
            .lifecycle(session)
            .map_or(JsValue::UNDEFINED, |l| JsValue::from_str(l.state.as_str()))
    }

    /// Whether the session's events reach the server's store, as its last `session_status`
    /// said (`undefined` for a session not seen).
    #[wasm_bindgen(unchecked_return_type = "StoreStatus | undefined")]
    pub fn store(&self, session: &str) -> JsValue {
        self.0
            .store(session)
            .map_or(JsValue::UNDEFINED, |s| from_json(&to_json(s)))
    }

    /// The turn in progress, if any.
    #[wasm_bindgen(js_name = activeTurn)]
    pub fn active_turn(&self, session: &str) -> Option<String> {
        self.0.lifecycle(session).and_then(|l| l.active_turn)
    }
}
