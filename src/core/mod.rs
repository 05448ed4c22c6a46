//! The pure core: canonical events, provider normalizers, the cursor buffer, dedup and the
//! lifecycle and timeline projections.
//!
//! Sans-IO and clock-free: nothing here opens a file or socket, reads the time, spawns a task
//! or knows about JavaScript. Input comes in through `handle_*` (time as an argument), output
//! goes out through `poll_*`/`drain`. The same code runs natively in the companion and as
//! wasm in the browser, and CI checks this boundary (see ARCHITECTURE.md).

/// A closed vocabulary: an enum each of whose values has one snake_case name, with `ALL`,
/// `as_str` and `parse` — how the core writes every list of names that crosses a boundary
/// (event types, cancel reasons, error kinds, error codes). The attributes (derives, serde)
/// are the caller's.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$doc:meta])* $variant:ident = $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// Its name: on the wire, in the store and in the docs.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// Parses a name; `None` for anything else.
            pub fn parse(name: &str) -> Option<$name> {
                match name {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

pub mod client;
pub mod dedup;
pub mod error;
pub mod event;
pub mod event_ref;
pub mod hash;
pub mod json;
pub mod lifecycle;
pub mod normalize;
pub mod projector;
pub mod provider_error;
pub mod quoted;
pub mod render;
pub mod snapshot;
mod sorted;
pub mod stream;
mod tagged;
pub mod time;
pub mod timeline;
pub mod wire;

pub use event::{Event, EventError, EventId, EventInit, EventType, Provider, SCHEMA_VERSION};
pub use normalize::{Config, Diagnostic, DiagnosticKind, Format, Normalized, Normalizer, Stats};
pub use provider_error::{ErrorKind, ProviderError};
pub use time::Timestamp;
