//! Strings quoted for error messages: `{:?}`'s spelling without `{:?}`'s tables.
//!
//! `Debug` for `str` escapes every character that Unicode calls unprintable or a grapheme
//! extender, which pulls the standard library's printable and grapheme tables and
//! `char::escape_debug` into every module that formats an error (about 5 KB of the npm
//! package's wasm). Messages need less: this writes the quotes, escapes `"`, `\` and the
//! control characters exactly as `{:?}` does (`\n`, `\r`, `\t`, `\0`, else `\u{1b}`), and
//! every other character as itself. For printable text the two are the same.

use std::fmt;

/// `s` between double quotes, escaped as `{:?}` escapes ASCII; see the module docs.
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        let mut plain = 0;
        for (i, b) in self.0.bytes().enumerate() {
            let escape = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                b'\0' => "\\0",
                0..0x20 | 0x7f => "",
                _ => continue,
            };
            f.write_str(&self.0[plain..i])?;
            plain = i + 1;
            if escape.is_empty() {
                write!(f, "\\u{{{b:x}}}")?;
            } else {
                f.write_str(escape)?;
            }
        }
        f.write_str(&self.0[plain..])?;
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// Text of printable characters and ASCII controls is quoted as `{:?}` quotes it.
    #[wasm_bindgen_test(unsupported = test)]
    fn printable_text_is_quoted_as_debug_quotes_it() {
        let texts = [
            "",
            "plain",
            "say \"hi\"",
            "back\\slash",
            "a\nb\r\tc\0d",
            "\u{1b}[31mred\u{7f}",
            "\u{1}\u{1f}",
            "é, 日本, 😀, ' and `",
            "\"\"\\\n",
        ];
        for text in texts {
            assert_eq!(Quoted(text).to_string(), format!("{text:?}"), "{text:?}");
        }
    }

    /// Where `{:?}` escapes an unprintable character beyond ASCII, the message keeps it.
    #[wasm_bindgen_test(unsupported = test)]
    fn other_characters_are_kept() {
        assert_eq!(Quoted("a\u{200b}b").to_string(), "\"a\u{200b}b\"");
        assert_eq!(Quoted("\u{301}").to_string(), "\"\u{301}\"");
    }
}
