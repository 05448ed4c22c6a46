//! agentwire: make coding-agent sessions observable and drivable from a browser, with no lost,
//! duplicated or stuck events.
//!
//! * [`core`]: the pure, sans-IO core (events, normalizers, buffer, dedup, projections); it
//!   compiles unchanged to wasm32 and native.
//! * `cli` (native only): the `agentwire` command line.
//! * `companion` (native only): the server that hosts agents and serves their sessions.
//! * `wasm` (wasm32 only): the `agentwire` npm package, a thin wasm-bindgen shell over
//!   [`core::projector`] and [`core::client`].
//!
//! See ARCHITECTURE.md for the map and the invariants.

pub mod core;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;

#[cfg(not(target_arch = "wasm32"))]
pub mod companion;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

// The core's tests run in a real browser under `wasm-pack test --chrome` (see scripts/test).
#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
