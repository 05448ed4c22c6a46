//! The structured `provider_error` payload carried by failure events.
//!
//! `run_failed`, `error_occurred` and `session_failed` carry `data.error_message` and, when a
//! provider caused the failure, `data.provider_error` = `{provider, kind, message, exit_code,
//! stderr, truncated}`. Stderr is cut before it is stored: first to a number of lines, then
//! to a number of bytes on a UTF-8 boundary ([`StderrLimits`], 200 lines and 16 KiB by
//! default), and `truncated` says whether anything was cut.
//!
//! `kind` is closed: one [`ErrorKind`] whatever the provider (an HTTP 500 is `server_error`
//! from Claude, Codex, Gemini and OpenCode alike). The provider's own name for the cause,
//! when it has one and it differs, is kept in `data.details.kind`. docs/events.md lists the
//! values; a test checks that the list and the enum agree.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::event::Provider;
use super::json::{write_str, JsonObject, ObjectWriter, ToJson};

vocabulary! {
    /// What caused a failure: the closed vocabulary of `provider_error.kind`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum ErrorKind {
        // The model API, as the agent reports it.
        /// Credentials missing or refused (HTTP 401, 403).
        AuthenticationFailed = "authentication_failed",
        /// The account has no credit left (HTTP 402).
        BillingError = "billing_error",
        /// Too many requests or a quota used up (HTTP 429).
        RateLimit = "rate_limit",
        /// The API refused the request as invalid (HTTP 400, an unknown model…).
        InvalidRequest = "invalid_request",
        /// The conversation no longer fits the model's context window.
        ContextWindowExceeded = "context_window_exceeded",
        /// The API failed on its side (HTTP 5xx).
        ServerError = "server_error",
        /// The API is overloaded (HTTP 529).
        Overloaded = "overloaded",
        /// The API could not be reached, timed out, or its stream broke off.
        ConnectionError = "connection_error",
        // The agent itself.
        /// The model refused to continue.
        Refusal = "refusal",
        /// The turn reached its maximum number of model turns.
        MaxTurns = "max_turns",
        /// The turn reached its maximum budget.
        MaxBudget = "max_budget",
        /// The agent's configuration or environment is incomplete (a missing sandbox tool…).
        ConfigError = "config_error",
        /// The agent answered a protocol request with an error (JSON-RPC), or broke the protocol.
        ProtocolError = "protocol_error",
        /// The agent reported a failure of no more precise kind.
        AgentError = "agent_error",
        // The host (the companion and its lifecycle).
        /// The agent process exited or was killed.
        ProcessExit = "process_exit",
        /// The agent's CLI is not installed.
        CliNotFound = "cli_not_found",
        /// The agent process could not be started.
        SpawnFailed = "spawn_failed",
        /// The agent stopped reading its stdin.
        StdinClosed = "stdin_closed",
        /// The agent's server never answered (OpenCode's `serve`, at start).
        Unreachable = "unreachable",
        /// A request the host made to the agent's server failed (OpenCode's HTTP API).
        RequestFailed = "request_failed",
        /// The agent's server closed its event stream (OpenCode).
        EventStreamClosed = "event_stream_closed",
        /// The agent wrote output the normalizer could not read (a warning).
        UnreadableOutput = "unreadable_output",
        /// A turn was silent past the watchdog's limit.
        Watchdog = "watchdog",
        /// The companion died while the agent ran; the turn ended at its restart.
        CompanionRestart = "companion_restart",
        /// On a shared store, the companion hosting the session stopped renewing its lease.
        NodeLost = "node_lost",
        /// A cause the provider named and this vocabulary does not know (see `details.kind`).
        Unknown = "unknown",
    }
}

impl ErrorKind {
    /// The kind of an HTTP status from the model API, if it says one.
    pub fn from_http_status(status: u64) -> Option<ErrorKind> {
        Some(match status {
            401 | 403 => ErrorKind::AuthenticationFailed,
            402 => ErrorKind::BillingError,
            429 => ErrorKind::RateLimit,
            408 | 504 => ErrorKind::ConnectionError,
            413 => ErrorKind::ContextWindowExceeded,
            400 | 404 | 422 => ErrorKind::InvalidRequest,
            529 => ErrorKind::Overloaded,
            500..=599 => ErrorKind::ServerError,
            _ => return None,
        })
    }

    /// A provider's own name for a cause (any case: `RATE_LIMIT_EXCEEDED`,
    /// `internalServerError`, `overloaded_error`…), mapped onto the vocabulary.
    pub fn classify(own: &str) -> Classified {
        let full = if own.is_empty() {
            Cow::Borrowed("")
        } else {
            snake_case(own)
        };
        let full = full.strip_prefix("error_").unwrap_or(&full);
        let full = full.strip_prefix("fatal_").unwrap_or(full);
        match ErrorKind::parse(full) {
            Some(ErrorKind::AgentError | ErrorKind::Unknown) => {
                return Classified::Generic(ErrorKind::AgentError)
            }
            Some(kind) => return Classified::Known(kind),
            None => {}
        }
        let name = full.strip_suffix("_error").unwrap_or(full);
        use ErrorKind as K;
        Classified::Known(match name {
            "authentication" | "unauthorized" | "unauthenticated" | "permission"
            | "permission_denied" | "provider_auth" | "invalid_api_key" | "auth" => {
                K::AuthenticationFailed
            }
            "billing" | "insufficient_quota" | "payment_required" => K::BillingError,
            "rate_limit"
            | "rate_limit_exceeded"
            | "rate_limited"
            | "resource_exhausted"
            | "quota_exceeded"
            | "too_many_requests"
            | "usage_limit_exceeded" => K::RateLimit,
            "invalid_request" | "bad_request" | "not_found" | "invalid_argument"
            | "model_not_found" => K::InvalidRequest,
            "context_length_exceeded" | "prompt_too_long" | "context_window" => {
                K::ContextWindowExceeded
            }
            "server"
            | "internal_server"
            | "internal"
            | "service_unavailable"
            | "unavailable"
            | "bad_gateway"
            | "response_too_many_failed_attempts" => K::ServerError,
            "overloaded" => K::Overloaded,
            "connection"
            | "network"
            | "timeout"
            | "request_timeout"
            | "deadline_exceeded"
            | "http_connection_failed"
            | "response_stream_connection_failed"
            | "response_stream_disconnected"
            | "stream_disconnected"
            | "fetch_failed" => K::ConnectionError,
            "max_turns_exceeded" => K::MaxTurns,
            "max_budget_usd" => K::MaxBudget,
            "config_warning" | "config" | "sandbox" => K::ConfigError,
            "input" => K::InvalidRequest,
            "turn_limited" => K::MaxTurns,
            "parse" | "rpc" | "method_not_found" | "invalid_params" | "resource_not_found"
            | "cancelled" => K::ProtocolError,
            // Names that say only that something failed: the status or the message may say
            // more.
            "api" => return Classified::Generic(K::ServerError),
            "" | "warning" | "turn_failed" | "item" | "stream" | "retry" | "during_execution"
            | "other" | "aborted" | "turn" | "guardian_warning" | "tool_execution"
            | "cancellation" => return Classified::Generic(K::AgentError),
            _ => return Classified::Unknown,
        })
    }

    /// A kind read from a message's wording ("429 Too Many Requests", "Upstream timeout"),
    /// for providers that give no more than a message: the first of the rules (a kind and its
    /// words, tried in order) whose words its ASCII lowercase holds.
    pub fn from_message(message: &str) -> Option<ErrorKind> {
        let found = message_words(message);
        MESSAGE_RULES.iter().find_map(|(kind, words, all)| {
            let mask = ((1u64 << words.end) - 1) & !((1u64 << words.start) - 1);
            let hit = match all {
                true => found & mask == mask,
                false => found & mask != 0,
            };
            hit.then_some(*kind)
        })
    }
}

/// The words [`ErrorKind::from_message`] looks for (lowercase ASCII), by rule.
const MESSAGE_WORDS: [&str; 32] = [
    // 0..5: rate limits
    "rate limit",
    "rate_limit",
    "too many requests",
    "quota",
    " 429",
    // 5..9: billing
    "out of credit",
    "out of free credit",
    "add credits",
    "billing",
    // 9..11: max turns (both)
    "max",
    "turns",
    // 11..13: overloaded
    "overloaded",
    " 529",
    // 13..18: authentication
    "unauthorized",
    "api key",
    "authenticat",
    " 401",
    " 403",
    // 18..23: server errors
    "internal server error",
    "server error",
    " 500",
    " 502",
    " 503",
    // 23..32: connection errors
    "timeout",
    "timed out",
    "econnrefused",
    "econnreset",
    "network",
    "disconnected",
    "fetch failed",
    "connection",
    "reconnecting",
];

/// The rules of [`ErrorKind::from_message`], tried in order: the kind, its words in
/// [`MESSAGE_WORDS`], and whether all of them (else any) must be there.
const MESSAGE_RULES: [(ErrorKind, std::ops::Range<u32>, bool); 7] = [
    (ErrorKind::RateLimit, 0..5, false),
    (ErrorKind::BillingError, 5..9, false),
    (ErrorKind::MaxTurns, 9..11, true),
    (ErrorKind::Overloaded, 11..13, false),
    (ErrorKind::AuthenticationFailed, 13..18, false),
    (ErrorKind::ServerError, 18..23, false),
    (ErrorKind::ConnectionError, 23..32, false),
];

// The rules' ranges cover `MESSAGE_WORDS` in order, each word once.
const _: () = {
    let mut next = 0;
    let mut i = 0;
    while i < MESSAGE_RULES.len() {
        assert!(MESSAGE_RULES[i].1.start == next && MESSAGE_RULES[i].1.end > next);
        next = MESSAGE_RULES[i].1.end;
        i += 1;
    }
    assert!(next as usize == MESSAGE_WORDS.len() && next <= 64);
};

/// The bucket of a word's (or a message position's) first two bytes, lowercase.
const fn pair_bucket(first: u8, second: u8) -> usize {
    (first.to_ascii_lowercase() as usize * 31 + second.to_ascii_lowercase() as usize) & 0xff
}

/// For each bucket of two first bytes, the words of [`MESSAGE_WORDS`] that start with such a
/// pair (bit `i` for word `i`; every word is at least three bytes long).
const WORDS_BY_PAIR: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < MESSAGE_WORDS.len() {
        let word = MESSAGE_WORDS[i].as_bytes();
        table[pair_bucket(word[0], word[1])] |= 1 << i;
        i += 1;
    }
    table
};

/// The words of [`MESSAGE_WORDS`] that `message`'s ASCII lowercase holds (bit `i` for word
/// `i`), found in one pass: at each byte, only the words whose first two bytes fall in the
/// bucket of the two there are compared.
fn message_words(message: &str) -> u64 {
    let bytes = message.as_bytes();
    let mut found = 0u64;
    for (i, pair) in bytes.windows(2).enumerate() {
        let mut candidates = WORDS_BY_PAIR[pair_bucket(pair[0], pair[1])] & !found;
        while candidates != 0 {
            let word = candidates.trailing_zeros();
            candidates &= candidates - 1;
            let word_bytes = MESSAGE_WORDS[word as usize].as_bytes();
            let here = bytes.get(i..i + word_bytes.len());
            if here.is_some_and(|h| h.eq_ignore_ascii_case(word_bytes)) {
                found |= 1 << word;
            }
        }
    }
    found
}

/// What [`ErrorKind::classify`] made of a provider's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classified {
    /// A name with a precise meaning.
    Known(ErrorKind),
    /// A name that only says something failed (`error`, `turn_failed`, Anthropic's
    /// `api_error`): the kind to use when neither the status nor the message says more.
    Generic(ErrorKind),
    /// A name this vocabulary does not know.
    Unknown,
}

/// `APIError` → `api_error`, `FatalTurnLimitedError` → `fatal_turn_limited_error`,
/// `RESOURCE_EXHAUSTED` → `resource_exhausted`, `rate limit` → `rate_limit`. A name that is
/// snake_case already (most are) comes back as it is, borrowed.
pub(crate) fn snake_case(name: &str) -> Cow<'_, str> {
    let bytes = name.as_bytes();
    let plain = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_';
    if bytes.iter().all(plain)
        && !bytes.is_empty()
        && bytes[0] != b'_'
        && bytes[bytes.len() - 1] != b'_'
        && !name.contains("__")
    {
        return Cow::Borrowed(name);
    }
    // Byte by byte: a byte of a non-ASCII character is not alphanumeric, as the character is
    // not, and the separators it makes collapse into one, as the character's one does.
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &b) in bytes.iter().enumerate() {
        if b.is_ascii_alphanumeric() {
            if b.is_ascii_uppercase() && i > 0 {
                let prev = bytes[i - 1];
                let next_lower = bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase);
                let boundary = prev.is_ascii_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_ascii_uppercase() && next_lower);
                if boundary && !out.ends_with('_') {
                    out.push('_');
                }
            }
            out.push(char::from(b.to_ascii_lowercase()));
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("error");
    }
    Cow::Owned(out)
}

/// Where stderr is cut before it goes into `provider_error.stderr`: first to `max_lines`
/// lines, then to `max_bytes` bytes on a UTF-8 boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StderrLimits {
    pub max_lines: usize,
    pub max_bytes: usize,
}

impl Default for StderrLimits {
    fn default() -> StderrLimits {
        StderrLimits {
            max_lines: 200,
            max_bytes: 16 * 1024,
        }
    }
}

/// What went wrong in a provider, as stored in `data.provider_error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderError {
    pub provider: Provider,
    /// The cause, from the closed vocabulary.
    pub kind: ErrorKind,
    /// A one-line human summary.
    pub message: String,
    pub exit_code: Option<i32>,
    pub stderr: Option<String>,
    pub truncated: bool,
    /// The provider's own name for the cause, when it differs from `kind`: written to
    /// `data.details.kind`, not into `provider_error`.
    #[serde(skip)]
    pub provider_kind: Option<String>,
}

impl ProviderError {
    /// An error with no process details (an API error reported in-band, say).
    pub fn new(provider: Provider, kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            provider,
            kind,
            message: message.into(),
            exit_code: None,
            stderr: None,
            truncated: false,
            provider_kind: None,
        }
    }

    /// An error as the provider reports it: its own name for the cause (`""` when it gives
    /// none), the HTTP status of the model API when known, and its message, mapped onto
    /// [`ErrorKind`]. A status that says whose fault it is (401/403, 402, 429) wins; then a
    /// precise name, then any other status, then the message's wording, then what a vague
    /// name says (`agent_error`), else `unknown`. The own name is kept.
    pub fn from_provider(
        provider: Provider,
        own_kind: &str,
        http_status: Option<u64>,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        let blame = http_status
            .and_then(ErrorKind::from_http_status)
            .filter(|k| {
                matches!(
                    k,
                    ErrorKind::AuthenticationFailed
                        | ErrorKind::BillingError
                        | ErrorKind::RateLimit
                )
            });
        let kind = match ErrorKind::classify(own_kind) {
            _ if blame.is_some() => blame.unwrap_or(ErrorKind::Unknown),
            Classified::Known(kind) => kind,
            other => http_status
                .and_then(ErrorKind::from_http_status)
                .or_else(|| ErrorKind::from_message(&message))
                .unwrap_or(match other {
                    Classified::Generic(kind) => kind,
                    _ => ErrorKind::Unknown,
                }),
        };
        let mut error = ProviderError::new(provider, kind, message);
        error.provider_kind =
            (!own_kind.is_empty() && own_kind != kind.as_str()).then(|| own_kind.to_owned());
        error
    }

    /// Attaches an exit code and stderr, cut to `limits`.
    pub fn with_process(
        mut self,
        exit_code: Option<i32>,
        stderr: &str,
        limits: StderrLimits,
    ) -> Self {
        let (cut, truncated) = truncate_stderr(stderr, limits);
        self.exit_code = exit_code;
        self.stderr = (!cut.is_empty()).then_some(cut);
        self.truncated = truncated;
        self
    }

    /// The `data` of a failure event: `{error_message, provider_error}`, and
    /// `details.kind` when the provider named the cause otherwise.
    pub fn to_data(&self) -> Map<String, Value> {
        let mut data = Map::new();
        data.insert("error_message".into(), Value::String(self.message.clone()));
        data.insert("provider_error".into(), json!(self));
        if let Some(own) = &self.provider_kind {
            add_details(&mut data, json!({ "kind": own }));
        }
        data
    }

    /// The same `data` as [`ProviderError::to_data`] with `fields` inserted (none of its own
    /// keys) and then `details` added by [`add_details`], written as its text with no map: for
    /// the failure events a normalizer makes.
    pub fn data_object(
        &self,
        fields: &[(&str, &dyn ToJson)],
        details: Option<Value>,
    ) -> JsonObject {
        // `details` as `to_data` and the caller's `add_details` make it: the own kind, then the
        // fields of `details` over it when it is an object (anything else is dropped); without
        // an own kind, `details` as it is.
        let details = match (&self.provider_kind, details) {
            (None, details) => details.map(Details::Given),
            (Some(own), Some(Value::Object(mut more))) => {
                more.entry("kind")
                    .or_insert_with(|| Value::String(own.clone()));
                Some(Details::Given(Value::Object(more)))
            }
            (Some(own), _) => Some(Details::Kind(own)),
        };
        let mapped = AsMapped(self);
        let mut all: Vec<(&str, &dyn ToJson)> = Vec::with_capacity(fields.len() + 3);
        if let Some(details) = &details {
            all.push(("details", details));
        }
        all.push(("error_message", &self.message));
        all.push(("provider_error", &mapped));
        all.extend_from_slice(fields);
        all.sort_by_key(|&(key, _)| key);
        let capacity = 160 + 2 * self.message.len() + self.stderr.as_ref().map_or(0, String::len);
        all.into_iter()
            .fold(ObjectWriter::with_capacity(capacity), |w, (key, value)| {
                w.field(key, value)
            })
            .finish()
    }
}

/// `data.details` of a failure event: the caller's, or only the provider's own kind.
enum Details<'a> {
    Given(Value),
    /// `{"kind": own}`.
    Kind(&'a str),
}

impl ToJson for Details<'_> {
    fn write_json(&self, out: &mut String) {
        match self {
            Details::Given(value) => value.write_json(out),
            Details::Kind(own) => {
                out.push_str("{\"kind\":");
                write_str(out, own);
                out.push('}');
            }
        }
    }
}

/// A [`ProviderError`] written as the `Value` of it is (`json!`): its fields in key order.
struct AsMapped<'a>(&'a ProviderError);

impl ToJson for AsMapped<'_> {
    fn write_json(&self, out: &mut String) {
        let e = self.0;
        out.push_str("{\"exit_code\":");
        e.exit_code.map(i64::from).write_json(out);
        out.push_str(",\"kind\":");
        write_str(out, e.kind.as_str());
        out.push_str(",\"message\":");
        write_str(out, &e.message);
        out.push_str(",\"provider\":");
        write_str(out, e.provider.as_str());
        out.push_str(",\"stderr\":");
        e.stderr.write_json(out);
        out.push_str(",\"truncated\":");
        e.truncated.write_json(out);
        out.push('}');
    }
}

/// Merges the fields of `details` (an object) into `data.details`, creating it; anything
/// else becomes `details` when there is none yet.
pub fn add_details(data: &mut Map<String, Value>, details: Value) {
    match (data.get_mut("details"), details) {
        (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
        (Some(_), _) => {}
        (None, details) => {
            data.insert("details".into(), details);
        }
    }
}

/// Cuts `text` to `limits.max_lines` lines, then to `limits.max_bytes` bytes without
/// splitting a UTF-8 character. Returns the text and whether anything was cut.
pub fn truncate_stderr(text: &str, limits: StderrLimits) -> (String, bool) {
    let mut truncated = false;
    let mut end = text.len();
    if let Some((i, _)) = text
        .match_indices('\n')
        .nth(limits.max_lines.saturating_sub(1))
    {
        if limits.max_lines == 0 {
            end = 0;
        } else if i + 1 < text.len() {
            end = i + 1;
        }
    } else if limits.max_lines == 0 && !text.is_empty() {
        end = 0;
    }
    if end < text.len() {
        truncated = true;
    }
    if end > limits.max_bytes {
        end = limits.max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        truncated = true;
    }
    (text[..end].to_owned(), truncated)
}

#[cfg(test)]
pub(crate) mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    fn limits(max_lines: usize, max_bytes: usize) -> StderrLimits {
        StderrLimits {
            max_lines,
            max_bytes,
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn short_text_is_kept_whole() {
        assert_eq!(
            truncate_stderr("a\nb\n", limits(200, 100)),
            ("a\nb\n".into(), false)
        );
        assert_eq!(
            truncate_stderr("a\nb", limits(2, 100)),
            ("a\nb".into(), false)
        );
        assert_eq!(truncate_stderr("", limits(0, 0)), (String::new(), false));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn lines_are_cut_first_then_bytes() {
        assert_eq!(
            truncate_stderr("1\n2\n3\n", limits(2, 100)),
            ("1\n2\n".into(), true)
        );
        assert_eq!(
            truncate_stderr("1\n2\n3\n", limits(2, 3)),
            ("1\n2".into(), true)
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn bytes_are_cut_on_a_char_boundary() {
        // "é" is two bytes: cutting at 3 would split the second one.
        let (cut, truncated) = truncate_stderr("éé", limits(10, 3));
        assert_eq!((cut.as_str(), truncated), ("é", true));
    }

    /// The values listed in the table of docs/events.md under `heading`.
    pub(crate) fn documented(heading: &str) -> Vec<String> {
        let doc = include_str!("../../docs/events.md");
        let section = doc
            .split(heading)
            .nth(1)
            .expect("the heading is in docs/events.md");
        section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('`').nth(1))
            .filter(|v| !v.contains(' '))
            .map(str::to_owned)
            .collect()
    }

    /// The members of the string union `name` in src/wasm/types.d.ts, in order.
    pub(crate) fn ts_union(name: &str) -> Vec<String> {
        let types = include_str!("../wasm/types.d.ts");
        let start = format!("export type {name} =");
        let body = types
            .split(start.as_str())
            .nth(1)
            .expect("the type is in types.d.ts");
        let body = &body[..body.find(';').expect("the union ends")];
        body.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn docs_and_typescript_list_exactly_the_error_kinds() {
        let ours: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(documented("### `provider_error.kind`"), ours);
        assert_eq!(ts_union("ProviderErrorKind"), ours);
        for &k in ErrorKind::ALL {
            assert_eq!(ErrorKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    /// Each provider's spelling of a cause, with its status and message, and what it becomes.
    #[wasm_bindgen_test(unsupported = test)]
    fn every_providers_name_maps_onto_one_kind() {
        let cases: &[(&str, Option<u64>, &str)] = &[
            // An HTTP 500 from each provider.
            ("server_error", Some(500), ""),
            ("internalServerError", None, ""),
            ("api_error", Some(500), "Internal Server Error"),
            ("APIError", Some(500), ""),
            ("", Some(500), ""),
            ("api_error", None, ""),
            ("authentication_failed", Some(401), ""),
            ("unauthorized", None, ""),
            ("ProviderAuthError", None, ""),
            ("RATE_LIMIT_EXCEEDED", Some(429), ""),
            ("rate_limit_error", None, ""),
            ("usageLimitExceeded", None, ""),
            ("overloaded_error", None, ""),
            ("contextWindowExceeded", None, ""),
            ("responseStreamDisconnected", None, ""),
            (
                "stream_error",
                None,
                "stream disconnected before completion",
            ),
            ("APIError", None, "Upstream timeout while calling provider"),
            ("retry", None, "Rate limited: 429 Too Many Requests"),
            ("turn_failed", None, "Aborted: npm is missing"),
            ("error_during_execution", None, ""),
            ("error_max_turns", None, ""),
            ("error_max_budget_usd", None, ""),
            ("configWarning", None, ""),
            ("internal_error", None, ""),
            ("method_not_found", None, ""),
            ("refusal", None, ""),
            ("warning", None, "Loop detected, stopping execution"),
            ("FatalTurnLimitedError", None, ""),
            ("FatalAuthenticationError", None, ""),
            ("", None, "Maximum session turns exceeded"),
            ("SomethingNew", None, "no idea"),
            ("process_exit", None, ""),
        ];
        let got: String = cases
            .iter()
            .map(|(own, status, message)| {
                let e = ProviderError::from_provider(Provider::Generic, own, *status, *message);
                let details = e
                    .to_data()
                    .get("details")
                    .map_or(String::new(), |d| format!(" {d}"));
                format!("{own:?} {status:?} -> {}{details}\n", e.kind.as_str())
            })
            .collect();
        expect_test::expect![[r#"
            "server_error" Some(500) -> server_error
            "internalServerError" None -> server_error {"kind":"internalServerError"}
            "api_error" Some(500) -> server_error {"kind":"api_error"}
            "APIError" Some(500) -> server_error {"kind":"APIError"}
            "" Some(500) -> server_error
            "api_error" None -> server_error {"kind":"api_error"}
            "authentication_failed" Some(401) -> authentication_failed
            "unauthorized" None -> authentication_failed {"kind":"unauthorized"}
            "ProviderAuthError" None -> authentication_failed {"kind":"ProviderAuthError"}
            "RATE_LIMIT_EXCEEDED" Some(429) -> rate_limit {"kind":"RATE_LIMIT_EXCEEDED"}
            "rate_limit_error" None -> rate_limit {"kind":"rate_limit_error"}
            "usageLimitExceeded" None -> rate_limit {"kind":"usageLimitExceeded"}
            "overloaded_error" None -> overloaded {"kind":"overloaded_error"}
            "contextWindowExceeded" None -> context_window_exceeded {"kind":"contextWindowExceeded"}
            "responseStreamDisconnected" None -> connection_error {"kind":"responseStreamDisconnected"}
            "stream_error" None -> connection_error {"kind":"stream_error"}
            "APIError" None -> connection_error {"kind":"APIError"}
            "retry" None -> rate_limit {"kind":"retry"}
            "turn_failed" None -> agent_error {"kind":"turn_failed"}
            "error_during_execution" None -> agent_error {"kind":"error_during_execution"}
            "error_max_turns" None -> max_turns {"kind":"error_max_turns"}
            "error_max_budget_usd" None -> max_budget {"kind":"error_max_budget_usd"}
            "configWarning" None -> config_error {"kind":"configWarning"}
            "internal_error" None -> server_error {"kind":"internal_error"}
            "method_not_found" None -> protocol_error {"kind":"method_not_found"}
            "refusal" None -> refusal
            "warning" None -> agent_error {"kind":"warning"}
            "FatalTurnLimitedError" None -> max_turns {"kind":"FatalTurnLimitedError"}
            "FatalAuthenticationError" None -> authentication_failed {"kind":"FatalAuthenticationError"}
            "" None -> max_turns
            "SomethingNew" None -> unknown {"kind":"SomethingNew"}
            "process_exit" None -> process_exit
        "#]].assert_eq(&got);
    }

    /// [`ErrorKind::from_message`] as it was first written: the message lowercased, then
    /// searched for each rule's words in turn.
    fn from_message_by_search(message: &str) -> Option<ErrorKind> {
        let m = message.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| m.contains(w));
        let kind = if has(&[
            "rate limit",
            "rate_limit",
            "too many requests",
            "quota",
            " 429",
        ]) {
            ErrorKind::RateLimit
        } else if has(&[
            "out of credit",
            "out of free credit",
            "add credits",
            "billing",
        ]) {
            ErrorKind::BillingError
        } else if m.contains("max") && m.contains("turns") {
            ErrorKind::MaxTurns
        } else if has(&["overloaded", " 529"]) {
            ErrorKind::Overloaded
        } else if has(&["unauthorized", "api key", "authenticat", " 401", " 403"]) {
            ErrorKind::AuthenticationFailed
        } else if has(&[
            "internal server error",
            "server error",
            " 500",
            " 502",
            " 503",
        ]) {
            ErrorKind::ServerError
        } else if has(&[
            "timeout",
            "timed out",
            "econnrefused",
            "econnreset",
            "network",
            "disconnected",
            "fetch failed",
            "connection",
            "reconnecting",
        ]) {
            ErrorKind::ConnectionError
        } else {
            return None;
        };
        Some(kind)
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn message_words_are_found_as_a_substring_search_finds_them() {
        let mut messages: Vec<String> = [
            "",
            "x",
            "Rate limited: 429 Too Many Requests",
            "Maximum session turns exceeded",
            "turns: max",
            "MAX TURNS",
            "maxturn",
            "stream disconnected before completion",
            "Upstream timeout while calling provider",
            "quota and timeout: the first rule wins",
            "overloaded 401",
            "internal server error",
            "\u{e9}\u{e9} 429 \u{1F600}",
            "status 4290",
            "  401",
            "401",
        ]
        .iter()
        .map(|m| (*m).to_owned())
        .collect();
        for word in MESSAGE_WORDS {
            let cut = &word[..word.len() - 1];
            let shouting = word.to_ascii_uppercase();
            for text in [word, cut, shouting.as_str()] {
                messages.push(text.to_owned());
                messages.push(format!("Error: {text}."));
                messages.push(format!("\u{e9}{text}\u{e9}"));
                messages.push(format!("{text}{text}"));
            }
        }
        for m in &messages {
            assert_eq!(
                ErrorKind::from_message(m),
                from_message_by_search(m),
                "{m:?}"
            );
        }
        let kinds: Vec<_> = messages
            .iter()
            .filter_map(|m| ErrorKind::from_message(m))
            .collect();
        assert!(
            kinds.len() > messages.len() / 2,
            "most messages hold a word"
        );
        for (kind, _, _) in MESSAGE_RULES {
            assert!(kinds.contains(&kind), "{kind:?} is found");
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn snake_case_names() {
        for (raw, want) in [
            ("APIError", "api_error"),
            ("ApiError", "api_error"),
            ("FatalTurnLimitedError", "fatal_turn_limited_error"),
            ("RESOURCE_EXHAUSTED", "resource_exhausted"),
            ("rate limit", "rate_limit"),
            ("already_snake", "already_snake"),
            ("", "error"),
            ("HTTP2Error", "http2_error"),
            ("_lead__double_", "lead_double"),
            ("caf\u{e9}Cr\u{e8}meError", "caf_cr_me_error"),
        ] {
            assert_eq!(snake_case(raw), want, "{raw}");
        }
        assert!(matches!(snake_case("turn_failed"), Cow::Borrowed(_)));
    }

    /// The name as the char-by-char reading made it before names were read as bytes.
    fn snake_case_by_chars(name: &str) -> String {
        let chars: Vec<char> = name.chars().collect();
        let mut out = String::new();
        for (i, &c) in chars.iter().enumerate() {
            if c.is_ascii_alphanumeric() {
                if c.is_ascii_uppercase() && i > 0 {
                    let prev = chars[i - 1];
                    let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
                    let boundary = prev.is_ascii_lowercase()
                        || prev.is_ascii_digit()
                        || (prev.is_ascii_uppercase() && next_lower);
                    if boundary && !out.ends_with('_') {
                        out.push('_');
                    }
                }
                out.push(c.to_ascii_lowercase());
            } else if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
        }
        while out.ends_with('_') {
            out.pop();
        }
        if out.is_empty() {
            out.push_str("error");
        }
        out
    }

    proptest::proptest! {
        /// Bytes or characters, the same name: every mix of cases, digits, separators and
        /// characters of two to four bytes.
        #[wasm_bindgen_test(unsupported = test)]
        fn snake_case_by_bytes_is_by_chars(
            name in "[a-zA-Z0-9_ \\-.\u{e9}\u{4e2d}\u{1f600}]{0,24}",
        ) {
            proptest::prop_assert_eq!(snake_case(&name), snake_case_by_chars(&name));
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn details_merge() {
        let mut data =
            ProviderError::from_provider(Provider::Codex, "turn_failed", None, "x").to_data();
        add_details(&mut data, json!({"codex_error_info": null}));
        assert_eq!(
            data["details"],
            json!({"kind": "turn_failed", "codex_error_info": null})
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn data_object_writes_what_to_data_and_add_details_make() {
        let stderr = "boom \"quoted\"\n\u{1}".repeat(3);
        let errors = [
            ProviderError::from_provider(Provider::Codex, "turn_failed", None, "x"),
            ProviderError::from_provider(Provider::Gemini, "", Some(429), "slow \u{e9}"),
            ProviderError::new(Provider::Claude, ErrorKind::ProcessExit, "exit").with_process(
                Some(-9),
                &stderr,
                StderrLimits::default(),
            ),
        ];
        let details = [
            None,
            Some(json!({"codex_error_info": null, "kind": "mine"})),
            Some(json!("not an object")),
        ];
        let mut checked = 0;
        for error in &errors {
            for details in &details {
                let mut want = error.to_data();
                want.insert("severity".into(), json!("warning"));
                want.insert("duration_ms".into(), json!(12));
                if let Some(d) = details.clone() {
                    add_details(&mut want, d);
                }
                let got = error.data_object(
                    &[("duration_ms", &12u64), ("severity", &"warning")],
                    details.clone(),
                );
                assert_eq!(got.forms(), (true, false), "written as text");
                assert_eq!(got.text(), crate::core::json::to_json(&want), "{error:?}");
                checked += 1;
            }
        }
        assert_eq!(checked, 9);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_default_limits_are_the_seeds() {
        let many: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let (cut, truncated) = truncate_stderr(&many, StderrLimits::default());
        assert!(truncated);
        assert_eq!(cut.lines().count(), 200);
        let wide = "x".repeat(40_000);
        let (cut, _) = truncate_stderr(&wide, StderrLimits::default());
        assert_eq!(cut.len(), 16 * 1024);
    }
}
