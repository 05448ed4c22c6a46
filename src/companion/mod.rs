//! The native companion: hosts agent processes, stores their events durably and serves them
//! over WebSocket and HTTP. Native only.

pub mod demo_agent;
pub mod store;
