//! The error codes every layer speaks: the wire protocol's error frames and command replies,
//! the HTTP API's `{"error": {"code"}}`, and the errors the npm package throws. One closed
//! list, so a code is never a typo in one layer and a mystery in another; the TypeScript union
//! `ErrorCode` in `src/wasm/types.d.ts` is checked against it by a test.

use std::fmt;

vocabulary! {
    /// A stable, documented error code (docs/protocol.md).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ErrorCode {
        // Frames a server cannot read.
        /// Not JSON, or a field missing or of the wrong type.
        MalformedFrame = "malformed_frame",
        UnknownType = "unknown_type",
        FrameTooLarge = "frame_too_large",
        BinaryFrame = "binary_frame",
        AlreadyHello = "already_hello",
        HelloRequired = "hello_required",
        HelloTimeout = "hello_timeout",
        UnsupportedProtocol = "unsupported_protocol",
        /// A command id over 128 bytes.
        BadCommandId = "bad_command_id",
        /// Not `ses_` and 1 to 64 lowercase hex digits.
        BadSessionId = "bad_session_id",
        TooManySubscriptions = "too_many_subscriptions",
        /// A `history` page asked for while the connection's last one is unanswered.
        TooManyRequests = "too_many_requests",
        // Access.
        ForbiddenHost = "forbidden_host",
        ForbiddenOrigin = "forbidden_origin",
        TokenRequired = "token_required",
        BadToken = "bad_token",
        TooManyAttempts = "too_many_attempts",
        // Commands.
        UnknownSession = "unknown_session",
        UnknownRequest = "unknown_request",
        UnknownProvider = "unknown_provider",
        UnknownMode = "unknown_mode",
        ForegroundTurnActive = "foreground_turn_active",
        NoActiveTurn = "no_active_turn",
        TurnIdUsed = "turn_id_used",
        /// A client-chosen turn id that is not 1–128 of `[A-Za-z0-9_.:-]`.
        BadTurnId = "bad_turn_id",
        EmptyPrompt = "empty_prompt",
        BadCwd = "bad_cwd",
        /// The session's process is not running.
        NotConnected = "not_connected",
        AlreadyRunning = "already_running",
        HostedElsewhere = "hosted_elsewhere",
        NoResumeHandle = "no_resume_handle",
        Unsupported = "unsupported",
        CliNotFound = "cli_not_found",
        SpawnFailed = "spawn_failed",
        StoreError = "store_error",
        /// The agent has not read what was written to its stdin (4 MiB): it is not listening.
        AgentBusy = "agent_busy",
        // The HTTP API's own refusals.
        BadRequest = "bad_request",
        BadBody = "bad_body",
        BodyTooLarge = "body_too_large",
        UnsupportedMediaType = "unsupported_media_type",
        MethodNotAllowed = "method_not_allowed",
        NotFound = "not_found",
        BadSince = "bad_since",
        BadType = "bad_type",
        InternalError = "internal_error",
        // The client's own (the npm package, `agentwire tail`).
        BadOptions = "bad_options",
        BadDecision = "bad_decision",
        NotATranscript = "not_a_transcript",
        ConnectionLost = "connection_lost",
        /// More commands waiting for the connection than the client keeps.
        QueueFull = "queue_full",
        Closed = "closed",
        MalformedEvent = "malformed_event",
        UnknownError = "unknown_error",
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// The string literals of a TypeScript union `export type NAME = "a" | "b" …;`.
    fn union<'a>(source: &'a str, name: &str) -> Vec<&'a str> {
        let start = source
            .find(&format!("export type {name} ="))
            .unwrap_or_else(|| panic!("no type {name}"));
        let body = &source[start..];
        let body = &body[..body.find(';').expect("the union ends")];
        body.split('"').skip(1).step_by(2).collect()
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_typescript_union_is_exactly_this_list() {
        let types = include_str!("../wasm/types.d.ts");
        let mut ts: Vec<&str> = union(types, "ClientErrorCode");
        ts.extend(union(types, "ServerErrorCode"));
        ts.sort_unstable();
        ts.dedup();
        let mut rust: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        rust.sort_unstable();
        assert_eq!(
            ts, rust,
            "src/wasm/types.d.ts ErrorCode vs core::error::ErrorCode"
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn codes_parse_back() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        }
        assert_eq!(ErrorCode::parse("teleport"), None);
    }
}
