//! Arbitrary frames through the wire decoders: a precise error or a message, never a panic;
//! what decodes re-encodes to something that decodes to the same message.
#![no_main]

use agentwire::core::wire::{ClientMsg, ServerMsg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = std::str::from_utf8(data) else { return };
    if let Ok(msg) = ClientMsg::decode(frame, 1 << 20) {
        assert_eq!(ClientMsg::decode(&msg.encode(), usize::MAX).ok(), Some(msg));
    }
    if let Ok(msg) = ServerMsg::decode(frame, 1 << 20) {
        assert_eq!(ServerMsg::decode(&msg.encode(), usize::MAX).ok(), Some(msg));
    }
});
