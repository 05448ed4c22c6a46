//! The structured `provider_error` payload carried by failure events.
//!
//! `run_failed`, `error_occurred` and `session_failed` carry `data.error_message` and, when a
//! provider caused the failure, `data.provider_error` = `{provider, kind, message, exit_code,
//! stderr, truncated}`. Stderr is cut before it is stored: first to a number of lines, then
//! to a number of bytes on a UTF-8 boundary ([`StderrLimits`], 200 lines and 16 KiB by
//! default), and `truncated` says whether anything was cut.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::event::Provider;

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
    /// A short machine-readable cause: `api_error`, `authentication_failed`, `rate_limit`,
    /// `process_exit`, `cli_not_found`, `watchdog`, …
    pub kind: String,
    /// A one-line human summary.
    pub message: String,
    pub exit_code: Option<i32>,
    pub stderr: Option<String>,
    pub truncated: bool,
}

impl ProviderError {
    /// An error with no process details (an API error reported in-band, say).
    pub fn new(provider: Provider, kind: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError {
            provider,
            kind: kind.into(),
            message: message.into(),
            exit_code: None,
            stderr: None,
            truncated: false,
        }
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

    /// The `data` of a failure event: `{error_message, provider_error}`.
    pub fn to_data(&self) -> Map<String, Value> {
        let mut data = Map::new();
        data.insert("error_message".into(), Value::String(self.message.clone()));
        data.insert("provider_error".into(), json!(self));
        data
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
mod tests {
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
