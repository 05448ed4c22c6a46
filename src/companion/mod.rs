//! The native companion: hosts agent processes, stores their events durably and serves them
//! over WebSocket, SSE and an HTTP JSON API. Native only.
//!
//! * [`store`]: the durable log (SQLite) behind the `Store` trait.
//! * [`alloc`]: the allocator the binary (and its benches) run on, and how free memory goes
//!   back to the system.
//! * [`host`]: the sessions' registry, and one task per session owning its agent process;
//!   [`session`]: the rules of a session, sans-IO, that the task carries out.
//! * [`adapter`]: how each agent CLI is started and spoken to.
//! * [`server`]: HTTP routes, static files ([`embedded`]: the demo page built into the
//!   binary); [`access`]: who may use them (host, origin,
//!   token); [`listen`]: the accept loop (connection cap, timeouts); [`ws`]: the WebSocket
//!   protocol.
//! * [`agui`]: `POST /ag-ui/{provider}`, the AG-UI 1.0 endpoint over SSE.
//! * [`snapshot`]: the sessions' projections that snapshots and history pages come from.
//! * [`tail`]: the `agentwire tail` terminal client.
//! * [`demo_agent`]: `agentwire demo-agent`, a fake agent speaking Claude Code's stream-json.
//! * Test tools, only with the `testkit` feature (which `cargo test` turns on; they are the
//!   `agentwire-testkit` binary, never the product's): `chaos`, `agentwire-testkit
//!   chaos-proxy`, a fault-injecting TCP proxy for reliability tests; `fake_model`,
//!   `agentwire-testkit fake-model`, a scripted model API server for running the real CLIs
//!   offline in tests.
//!
//! This is the only place that reads the clock and draws random numbers; the core gets both
//! as arguments.

pub mod access;
pub mod adapter;
pub mod agui;
pub mod alloc;
#[cfg(feature = "testkit")]
pub mod chaos;
pub mod demo_agent;
pub mod embedded;
#[cfg(feature = "testkit")]
pub mod fake_model;
pub mod fanout;
pub mod host;
pub mod listen;
#[cfg(feature = "testkit")]
pub mod seed;
pub mod server;
pub mod session;
pub mod snapshot;
pub mod store;
pub mod tail;
pub mod wire_http;
pub mod ws;

use crate::core::event::EventId;
use crate::core::time::Timestamp;

/// The wall clock.
pub fn now() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Timestamp::from_unix_millis(ms)
}

/// `bytes` random bytes from the OS, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random source is available");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random event id.
pub fn random_id() -> EventId {
    EventId::parse(&format!("evt_{}", random_hex(16))).expect("32 lowercase hex digits")
}
