//! The pure core: canonical events, provider normalizers, the cursor buffer, dedup and the
//! lifecycle and timeline projections.
//!
//! Sans-IO and clock-free: nothing here opens a file or socket, reads the time, spawns a task
//! or knows about JavaScript. Input comes in through `handle_*` (time as an argument), output
//! goes out through `poll_*`/`drain`. The same code runs natively in the companion and as
//! wasm in the browser, and CI checks this boundary (see ARCHITECTURE.md).

pub mod client;
pub mod dedup;
pub mod error;
pub mod event;
pub mod lifecycle;
pub mod normalize;
pub mod projector;
pub mod provider_error;
pub mod render;
pub mod stream;
pub mod time;
pub mod timeline;
pub mod wire;

pub use event::{Event, EventError, EventId, EventInit, EventType, Provider, SCHEMA_VERSION};
pub use normalize::{Config, Diagnostic, DiagnosticKind, Format, Normalized, Normalizer, Stats};
pub use provider_error::{ErrorKind, ProviderError};
pub use time::Timestamp;
