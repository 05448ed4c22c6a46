//! agentwire: make coding-agent sessions observable and drivable from a browser, with no lost,
//! duplicated or stuck events.
//!
//! * [`core`]: the pure, sans-IO core (events, normalizers, buffer, dedup, projections); it
//!   compiles unchanged to wasm32 and native.
//! * `cli` (native only): the `agentwire` command line.
//!
//! See ARCHITECTURE.md for the map and the invariants.

pub mod core;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;

#[cfg(not(target_arch = "wasm32"))]
pub mod companion;
