//! A small pull reader of JSON text: how the client reads server frames (and, in `json/write.rs`,
//! [`ToJson`], the writer of what the core writes).
//!
//! serde's derive reads a type through a visitor that serde_json instantiates, with its whole
//! parser inlined, once per type: in the wasm package that was nearly a third of the code
//! (issue 14, goal 2). Here the parser is one non-generic [`Reader`] (strings borrowed from
//! the frame when they hold no escape, their ends found eight bytes at a time; the key a
//! struct expects next compared with the text in place), and a type is read by a few lines
//! that ask it for what they expect: [`FromJson`], written for structs by `json_struct!` and
//! for closed vocabularies by [`named`] (`json_names!`). The same code
//! reads frames natively (`agentwire tail`, the tests), so the package and the binary cannot
//! disagree.
//!
//! What serde's derive does, this does: unknown fields are skipped, a missing `Option` is
//! `None`, a missing field or a duplicate one is an error, and so is anything after the
//! value. Errors name what was expected and where (`… at line L column C`). Numbers are read
//! as serde_json reads them into a `Value`: integers as `u64` or `i64`, anything else (or an
//! integer out of range) as `f64`, and a float out of range is an error.

use std::borrow::Cow;
use std::fmt::Display;

use serde_json::{Map, Number, Value};

// Used by `parse_float` in wasm only; its tests run everywhere.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
mod float;
mod object;
mod write;
pub use object::{is_canonical, JsonObject, ObjectWriter};
#[doc(hidden)]
pub use write::field;
pub use write::{
    ascii, to_json, to_json_sized, write_f64, write_i64, write_map, write_str, write_u64,
    write_value, Omit, ToJson,
};
pub(crate) use write::{
    decimal, json_pick, json_write, json_write_field, json_write_names, json_write_tagged,
};

/// Nesting deeper than this is refused (as serde_json does, at the same depth).
const MAX_DEPTH: u32 = 128;

/// JSON text that could not be read as what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} at line {line} column {column}")]
pub struct JsonError {
    pub what: String,
    pub line: usize,
    pub column: usize,
}

/// What [`Reader::next_key`] found.
enum Key<'a> {
    /// The object's end.
    End,
    /// The key it was told to expect.
    Expected,
    Other(Cow<'a, str>),
}

/// A cursor over JSON text.
pub struct Reader<'a> {
    text: &'a str,
    at: usize,
    /// No entry of the innermost open object or array has been read yet.
    first: bool,
    depth: u32,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text,
            at: 0,
            first: false,
            depth: 0,
        }
    }

    /// Reads the whole text as one `T`.
    pub fn read_all<T: FromJson<'a>>(text: &'a str) -> Result<T, JsonError> {
        let mut r = Reader::new(text);
        let value = T::read(&mut r)?;
        r.end()?;
        Ok(value)
    }

    /// What `read` reads, and the text it read it from (from the value's first byte on).
    pub fn spanned<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, JsonError>,
    ) -> Result<(T, &'a str), JsonError> {
        self.peek();
        let start = self.at;
        let value = read(self)?;
        Ok((value, &self.text[start..self.at]))
    }

    /// An error at the current position.
    pub fn error(&self, what: impl Display) -> JsonError {
        self.fail(format_args!("{what}"), false)
    }

    /// An error about the byte at the current position (its column, as serde_json counts).
    fn error_here(&self, what: impl Display) -> JsonError {
        self.fail(format_args!("{what}"), true)
    }

    /// Every error is made here, out of the way of the code that reads.
    #[cold]
    #[inline(never)]
    fn fail(&self, what: std::fmt::Arguments<'_>, here: bool) -> JsonError {
        let before = &self.text.as_bytes()[..self.at.min(self.text.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        JsonError {
            what: what.to_string(),
            line: 1 + before.iter().filter(|&&b| b == b'\n').count(),
            column: self.at - line_start + usize::from(here && self.at < self.text.len()),
        }
    }

    #[inline(always)]
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not consumed.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        match self.bytes().get(self.at) {
            Some(&b) if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') => Some(b),
            _ => self.peek_past_whitespace(),
        }
    }

    #[inline(never)]
    fn peek_past_whitespace(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&b) = bytes.get(self.at) {
            if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    #[inline(always)]
    fn eat(&mut self, want: u8, what: &str) -> Result<(), JsonError> {
        match self.peek() {
            Some(b) if b == want => {
                self.at += 1;
                Ok(())
            }
            Some(_) => Err(self.error_here(format_args!("expected {what}"))),
            None => Err(self.error("EOF while parsing a value")),
        }
    }

    /// Nothing but whitespace is left.
    pub fn end(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error_here("trailing characters")),
        }
    }

    #[inline(always)]
    fn enter(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("recursion limit exceeded"));
        }
        self.first = true;
        Ok(())
    }

    #[inline(always)]
    fn leave(&mut self) {
        self.depth -= 1;
        self.first = false;
    }

    /// Opens an object or an array (`open` is its first byte), or says what came instead.
    fn open(&mut self, open: u8, expected: &str) -> Result<(), JsonError> {
        if self.peek() != Some(open) {
            return Err(self.invalid(expected));
        }
        self.at += 1;
        self.enter()
    }

    /// Whether another entry of the open object or array comes, past its comma (`close` is
    /// its last byte, consumed at its end).
    #[inline(always)]
    fn more(&mut self, close: u8, expected: &str) -> Result<bool, JsonError> {
        if self.peek() == Some(close) {
            self.at += 1;
            self.leave();
            return Ok(false);
        }
        if !self.first {
            self.eat(b',', expected)?;
        }
        self.first = false;
        Ok(true)
    }

    /// Opens an object: then [`Reader::key`] until it gives `None`.
    pub fn object(&mut self) -> Result<(), JsonError> {
        self.open(b'{', "a map")
    }

    /// The next key of the open object (its value comes next), or `None` at its end.
    pub fn key(&mut self) -> Result<Option<Cow<'a, str>>, JsonError> {
        Ok(match self.next_key(None)? {
            Key::Other(key) => Some(key),
            Key::End | Key::Expected => None,
        })
    }

    /// The next key of the open object, past its colon. When it is `expected` as it is written
    /// when nothing in it needs an escape, it is compared in place with the text (no string
    /// read, nothing sliced): [`Key::Expected`]. The same key written with an escape, or any
    /// other, is read. `expected` needs no escape itself (the tables' keys are identifiers).
    fn next_key(&mut self, expected: Option<&str>) -> Result<Key<'a>, JsonError> {
        if !self.more(b'}', "`,` or `}`")? {
            return Ok(Key::End);
        }
        match self.peek() {
            Some(b'"') => {}
            None => return Err(self.error("EOF while parsing an object")),
            Some(_) => return Err(self.error_here("key must be a string")),
        }
        let (bytes, after) = (self.bytes(), self.at + 1);
        let plain = expected.filter(|want| {
            let quoted = bytes.get(after..after + want.len() + 1);
            quoted.is_some_and(|q| q[want.len()] == b'"' && &q[..want.len()] == want.as_bytes())
        });
        let key = match plain {
            Some(want) => {
                self.at = after + want.len() + 1;
                Key::Expected
            }
            None => Key::Other(self.string()?),
        };
        self.eat(b':', "`:`")?;
        Ok(key)
    }

    /// Opens an array: then [`Reader::item`] until it gives `false`.
    pub fn array(&mut self) -> Result<(), JsonError> {
        self.open(b'[', "a sequence")
    }

    /// Whether another element of the open array comes (read it next).
    pub fn item(&mut self) -> Result<bool, JsonError> {
        self.more(b']', "`,` or `]`")
    }

    /// "invalid type: {what the next value is}, expected {expected}".
    fn invalid(&mut self, expected: &str) -> JsonError {
        let found = match self.peek() {
            None => return self.error("EOF while parsing a value"),
            Some(b'{') => "map",
            Some(b'[') => "sequence",
            Some(b'"') => "string",
            Some(b't' | b'f') => "boolean",
            Some(b'n') => "null",
            Some(b'-' | b'0'..=b'9') => "number",
            Some(_) => return self.error_here("expected value"),
        };
        self.error_here(format_args!("invalid type: {found}, expected {expected}"))
    }

    /// A string, borrowed from the text unless it holds an escape.
    pub fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.invalid("a string"));
        }
        self.at += 1;
        let bytes = self.bytes();
        let start = self.at;
        let mut i = plain_run(bytes, start);
        while let Some(&b) = bytes.get(i) {
            match b {
                b'"' => {
                    self.at = i + 1;
                    return Ok(Cow::Borrowed(&self.text[start..i]));
                }
                b'\\' => break,
                0..=0x1f => {
                    self.at = i;
                    return Err(self.error_here(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ));
                }
                _ => i += 1,
            }
        }
        if i >= bytes.len() {
            self.at = i;
            return Err(self.error("EOF while parsing a string"));
        }
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.text[start..i]);
        self.at = i;
        self.unescape(&mut out)?;
        Ok(Cow::Owned(out))
    }

    /// The rest of a string that holds an escape, from the first backslash or later.
    fn unescape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let bytes = self.bytes();
        loop {
            let start = self.at;
            self.at = plain_run(bytes, start);
            out.push_str(&self.text[start..self.at]);
            match bytes.get(self.at) {
                None => return Err(self.error("EOF while parsing a string")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {}
                Some(_) => {
                    return Err(self.error_here(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ))
                }
            }
            self.at += 1;
            let Some(&escape) = bytes.get(self.at) else {
                return Err(self.error("EOF while parsing a string"));
            };
            self.at += 1;
            let c = match short_escape(escape) {
                Some(c) => c,
                None if escape == b'u' => self.unicode_escape()?,
                None => {
                    self.at -= 1;
                    return Err(self.error_here("invalid escape"));
                }
            };
            out.push(c);
        }
    }

    /// The character of a `\u` escape (a surrogate pair is two), after its `\u`.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let high = self.hex4()?;
        let code = match high {
            0xD800..=0xDBFF => {
                if !self.text[self.at..].starts_with("\\u") {
                    return Err(self.error("unexpected end of hex escape"));
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.error("lone leading surrogate in hex escape"));
                }
                0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("lone leading surrogate in hex escape")),
            _ => high,
        };
        char::from_u32(code).ok_or_else(|| self.error("invalid unicode code point"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let code = hex4(self.text.get(self.at..self.at + 4));
        let code = code.ok_or_else(|| self.error("invalid escape"))?;
        self.at += 4;
        Ok(code)
    }

    /// The text of the number that comes next, checked against JSON's grammar, and whether
    /// it is an integer.
    fn number_text(&mut self) -> Result<(&'a str, bool), JsonError> {
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(self.invalid("a number"));
        }
        let bytes = self.bytes();
        let start = self.at;
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let mut at = start + usize::from(bytes[start] == b'-');
        let whole = digits(&mut at);
        let leading_zero = bytes.get(at - whole) == Some(&b'0') && whole > 1;
        let mut integer = true;
        let mut ok = whole > 0 && !leading_zero;
        if ok && bytes.get(at) == Some(&b'.') {
            at += 1;
            integer = false;
            ok = digits(&mut at) > 0;
        }
        if ok && matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            integer = false;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            ok = digits(&mut at) > 0;
        }
        self.at = at;
        if !ok {
            return Err(self.error("invalid number"));
        }
        Ok((&self.text[start..at], integer))
    }

    /// A number as serde_json reads it into a `Value`.
    pub fn number(&mut self) -> Result<Number, JsonError> {
        let (text, integer) = self.number_text()?;
        if integer {
            if let Ok(n) = text.parse::<u64>() {
                return Ok(n.into());
            }
            // `-0` is the float -0.0, as serde_json reads it.
            if let Ok(n @ ..=-1) = text.parse::<i64>() {
                return Ok(n.into());
            }
        }
        parse_float(text)
            .and_then(Number::from_f64)
            .ok_or_else(|| self.error("number out of range"))
    }

    /// An unsigned integer.
    pub fn u64(&mut self) -> Result<u64, JsonError> {
        let (text, integer) = self.number_text()?;
        match text.parse::<u64>() {
            Ok(n) if integer => Ok(n),
            _ => Err(self.error(format_args!("invalid value: {text}, expected u64"))),
        }
    }

    /// A signed integer.
    pub fn i64(&mut self) -> Result<i64, JsonError> {
        let (text, integer) = self.number_text()?;
        match text.parse::<i64>() {
            Ok(n) if integer => Ok(n),
            _ => Err(self.error(format_args!("invalid value: {text}, expected i64"))),
        }
    }

    pub fn f64(&mut self) -> Result<f64, JsonError> {
        let n = self.number()?;
        Ok(n.as_f64().expect("a JSON number is an f64"))
    }

    pub fn bool(&mut self) -> Result<bool, JsonError> {
        for (word, value) in [("true", true), ("false", false)] {
            if self.peek() == Some(word.as_bytes()[0]) {
                return self.word(word).map(|()| value);
            }
        }
        Err(self.invalid("a boolean"))
    }

    fn word(&mut self, word: &str) -> Result<(), JsonError> {
        if !self.text[self.at..].starts_with(word) {
            return Err(self.error("expected ident"));
        }
        self.at += word.len();
        Ok(())
    }

    /// `null` (consumed) or not (nothing consumed).
    pub fn null(&mut self) -> Result<bool, JsonError> {
        if self.peek() != Some(b'n') {
            return Ok(false);
        }
        self.word("null").map(|()| true)
    }

    /// Any value, built.
    pub fn value(&mut self) -> Result<Value, JsonError> {
        Ok(match self.peek() {
            Some(b'{') => Value::Object(self.map()?),
            Some(b'[') => Value::Array(Vec::read(self)?),
            Some(b'"') => Value::String(self.string()?.into_owned()),
            Some(b't' | b'f') => Value::Bool(self.bool()?),
            Some(b'n') => {
                self.word("null")?;
                Value::Null
            }
            Some(b'-' | b'0'..=b'9') => Value::Number(self.number()?),
            Some(_) => return Err(self.error_here("expected value")),
            None => return Err(self.error("EOF while parsing a value")),
        })
    }

    /// An object, built.
    pub fn map(&mut self) -> Result<Map<String, Value>, JsonError> {
        self.object()?;
        let mut map = Map::new();
        while let Some(key) = self.key()? {
            let value = self.value()?;
            map.insert(key.into_owned(), value);
        }
        Ok(map)
    }

    /// Skips a value (checked as it is read, nothing built).
    pub fn skip(&mut self) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'{') => {
                self.object()?;
                while self.key()?.is_some() {
                    self.skip()?;
                }
            }
            Some(b'[') => {
                self.array()?;
                while self.item()? {
                    self.skip()?;
                }
            }
            Some(b'"') => {
                self.string()?;
            }
            Some(b't' | b'f') => {
                self.bool()?;
            }
            Some(b'n') => self.word("null")?,
            Some(b'-' | b'0'..=b'9') => {
                self.number_text()?;
            }
            Some(_) => return Err(self.error_here("expected value")),
            None => return Err(self.error("EOF while parsing a value")),
        }
        Ok(())
    }

    /// The string value of key `tag` of the object that was just opened, wherever it is in
    /// that object. When it is the first key it is consumed (the fields follow); otherwise it
    /// is found by skipping over the others and the reader is put back where it was (the
    /// caller skips it among the fields). Our own JSON has its tags first.
    pub fn tag(&mut self, tag: &str) -> Result<Cow<'a, str>, JsonError> {
        let (at, first) = (self.at, self.first);
        let mut leading = true;
        while let Some(key) = self.key()? {
            if key == tag {
                let value = self.string()?;
                if !leading {
                    (self.at, self.first) = (at, first);
                }
                return Ok(value);
            }
            leading = false;
            self.skip()?;
        }
        Err(self.missing(tag))
    }

    /// Reads the open object to its end: a key that is one of `keys` has its value read by
    /// `read`, given the key's index; any other key's value is skipped. One loop for every
    /// struct `json_fields!` reads (its key matching was inlined into each: issue 14, goal 2).
    #[inline(never)]
    pub fn fields(
        &mut self,
        keys: &[&str],
        read: &mut dyn FnMut(&mut Self, usize) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        // Keys mostly come in the table's order (as this crate writes them): the one after the
        // last key found is tried first, compared in place with the text (no string read,
        // nothing sliced), and the key read and the table scanned only when it is not that one.
        let mut next = 0;
        loop {
            let found = match self.next_key(keys.get(next).copied())? {
                Key::End => return Ok(()),
                Key::Expected => Some(next),
                Key::Other(key) => keys.iter().position(|&k| k == key),
            };
            match found {
                Some(i) => {
                    next = i + 1;
                    read(self, i)?
                }
                None => self.skip()?,
            }
        }
    }

    /// Reads a field's value into its slot, refusing a second one.
    pub fn field<T: FromJson<'a>>(
        &mut self,
        slot: &mut Option<T>,
        name: &str,
    ) -> Result<(), JsonError> {
        if slot.is_some() {
            return Err(self.duplicate(name));
        }
        *slot = Some(T::read(self)?);
        Ok(())
    }

    /// A field's value once the object is read: its own, or what an absent one is.
    pub fn present<T: FromJson<'a>>(&self, slot: Option<T>, name: &str) -> Result<T, JsonError> {
        match slot {
            Some(value) => Ok(value),
            None => T::absent().ok_or_else(|| self.missing(name)),
        }
    }

    #[cold]
    #[inline(never)]
    fn duplicate(&self, name: &str) -> JsonError {
        self.fail(format_args!("duplicate field `{name}`"), false)
    }

    #[cold]
    #[inline(never)]
    pub fn missing(&self, name: &str) -> JsonError {
        self.fail(format_args!("missing field `{name}`"), false)
    }
}

/// A checked JSON number's text as the nearest `f64` (`None` past `f64::MAX`): the standard
/// library's reading natively, and in wasm `float::parse`, the same reading in less code.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    #[cfg(target_arch = "wasm32")]
    return float::parse(text);
    #[cfg(not(target_arch = "wasm32"))]
    text.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A word of eight bytes of 1, and of 0x80: for reading bytes eight at a time in a `u64`.
pub(crate) const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
pub(crate) const HIGH: u64 = ONES * 0x80;

/// The high bit of each zero byte of `w` set (bits above the lowest such byte may be set
/// wrongly: only the lowest is to be used, as [`run_until`] does).
#[inline(always)]
pub(crate) fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(ONES) & !w & HIGH
}

/// The end of the run of string bytes from `i` that need no attention: the index of the first
/// `"`, `\\` or control character (or the end), found eight bytes at a time.
#[inline(always)]
pub(crate) fn plain_run(bytes: &[u8], i: usize) -> usize {
    // A byte of `w` is a quote or a backslash (or, for `below`, under 0x20) where its bit in
    // the result is set; bits above the lowest may be false, so only the lowest is used.
    let stops = |w: u64| {
        let below = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let quote = zero_bytes(w ^ (ONES * u64::from(b'"')));
        quote | zero_bytes(w ^ (ONES * u64::from(b'\\'))) | below
    };
    run_until(bytes, i, stops, |b| b == b'"' || b == b'\\' || b < 0x20)
}

/// The character of a one-letter escape (`\n`, `\"`…); `None` for `u` and any other.
#[inline]
pub(crate) fn short_escape(escape: u8) -> Option<char> {
    Some(match escape {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return None,
    })
}

/// The four hex digits of a `\u` escape (either case) as a number.
pub(crate) fn hex4(digits: Option<&str>) -> Option<u32> {
    let digits = digits.filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))?;
    u32::from_str_radix(digits, 16).ok()
}

/// The index of the first byte from `i` that ends a run (or the end), eight bytes at a time:
/// `stops(word)` sets the high bit of such a byte of the word (bits above the lowest such
/// byte may be wrong: only the lowest is used), `stop` says it of one byte, for the last few.
#[inline(always)]
fn run_until(
    bytes: &[u8],
    mut i: usize,
    stops: impl Fn(u64) -> u64,
    stop: impl Fn(u8) -> bool,
) -> usize {
    while let Some(&chunk) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let found = stops(u64::from_le_bytes(chunk));
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while bytes.get(i).is_some_and(|&b| !stop(b)) {
        i += 1;
    }
    i
}

/// A type read from JSON text.
pub trait FromJson<'a>: Sized {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError>;

    /// What a missing field of this type is (`None`: missing is an error).
    fn absent() -> Option<Self> {
        None
    }
}

impl<'a> FromJson<'a> for Cow<'a, str> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.string()
    }
}

impl<'a> FromJson<'a> for String {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.string().map(Cow::into_owned)
    }
}

impl<'a> FromJson<'a> for bool {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.bool()
    }
}

impl<'a> FromJson<'a> for f64 {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.f64()
    }
}

impl<'a> FromJson<'a> for u64 {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.u64()
    }
}

impl<'a> FromJson<'a> for i64 {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.i64()
    }
}

/// Narrower integers: read as `u64`, refused out of range.
macro_rules! narrow {
    ($($t:ty),*) => {$(
        impl<'a> FromJson<'a> for $t {
            fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
                let n = r.u64()?;
                <$t>::try_from(n).map_err(|_| {
                    r.error(format_args!(concat!("invalid value: {}, expected ", stringify!($t)), n))
                })
            }
        }
    )*};
}
narrow!(u32, usize);

impl<'a> FromJson<'a> for Value {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.value()
    }
}

impl<'a> FromJson<'a> for Map<String, Value> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.map()
    }
}

/// `null` or a `T`; a missing field is `None` (as serde's derive has it).
impl<'a, T: FromJson<'a>> FromJson<'a> for Option<T> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        if r.null()? {
            return Ok(None);
        }
        T::read(r).map(Some)
    }

    fn absent() -> Option<Self> {
        Some(None)
    }
}

impl<'a, T: FromJson<'a>> FromJson<'a> for Box<T> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        T::read(r).map(Box::new)
    }
}

impl<'a, T: FromJson<'a>> FromJson<'a> for Vec<T> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.array()?;
        let mut items = Vec::new();
        while r.item()? {
            items.push(T::read(r)?);
        }
        Ok(items)
    }
}

/// A pair, as serde writes a tuple: a two-element array.
impl<'a, A: FromJson<'a>, B: FromJson<'a>> FromJson<'a> for (A, B) {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        r.array()?;
        let short = |r: &Reader<'a>, n| {
            r.error(format_args!(
                "invalid length {n}, expected a tuple of size 2"
            ))
        };
        if !r.item()? {
            return Err(short(r, 0));
        }
        let a = A::read(r)?;
        if !r.item()? {
            return Err(short(r, 1));
        }
        let b = B::read(r)?;
        if r.item()? {
            return Err(r.error("trailing characters: expected a tuple of size 2"));
        }
        Ok((a, b))
    }
}

impl<'a, const N: usize> FromJson<'a> for [u64; N] {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        let all = Vec::<u64>::read(r)?;
        let n = all.len();
        all.try_into().map_err(|_| {
            r.error(format_args!(
                "invalid length {n}, expected an array of length {N}"
            ))
        })
    }
}

/// One of a closed vocabulary, by its name on the wire.
pub fn named<T: Copy>(
    r: &mut Reader<'_>,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, JsonError> {
    let text = r.string()?;
    all.iter()
        .copied()
        .find(|&v| name(v) == text)
        .ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|&v| format!("`{}`", name(v))).collect();
            r.error(format_args!(
                "unknown variant `{text}`, expected one of {}",
                names.join(", ")
            ))
        })
}

/// `FromJson` for a vocabulary enum: `json_names!(Type: [A, B, …])`, by its `as_str`.
macro_rules! json_names {
    ($ty:ident: [$($variant:ident),* $(,)?]) => {
        impl<'a> $crate::core::json::FromJson<'a> for $ty {
            fn read(r: &mut $crate::core::json::Reader<'a>) -> Result<Self, $crate::core::json::JsonError> {
                $crate::core::json::named(r, &[$($ty::$variant),*], $ty::as_str)
            }
        }
    };
}
pub(crate) use json_names;

/// `FromJson` for a struct of named fields, read in any order: `json_struct!(Type { a, b,
/// c = default })`. A field given `= expr` is that when absent; an `Option` is `None`;
/// any other missing field is an error. `fields` reads the rest of an object already opened
/// (a tagged enum's variant after its tag).
macro_rules! json_struct {
    ($ty:ident { $($field:ident $(as $key:literal)? $(= $default:expr)?),* $(,)? }) => {
        impl<'a> $crate::core::json::FromJson<'a> for $ty {
            fn read(r: &mut $crate::core::json::Reader<'a>) -> Result<Self, $crate::core::json::JsonError> {
                r.object()?;
                <$ty>::fields(r)
            }
        }

        impl $ty {
            #[allow(dead_code)]
            pub(crate) fn fields(r: &mut $crate::core::json::Reader<'_>) -> Result<Self, $crate::core::json::JsonError> {
                $crate::core::json::json_fields!(r, $ty { $($field $(as $key)? $(= $default)?),* })
            }
        }
    };
}
pub(crate) use json_struct;

/// The fields of the open object as the struct (or struct-like variant) `$path`, to its end.
/// A field's key is `as "key"` when it is not the field's name. (Shaped for size: the loop
/// over the keys is [`Reader::fields`], one function for every struct, which hands each known
/// key's index to a closure that only borrows the slots; every missing field is found before
/// any is moved, so an early return drops the same slots wherever it leaves.)
macro_rules! json_fields {
    ($r:ident, $($path:ident)::+ { $($field:ident $(as $key:literal)? $(= $default:expr)?),* $(,)? }) => {{
        const KEYS: &[&str] = &[$($crate::core::json::json_key!($field $($key)?)),*];
        $(let mut $field = None;)*
        $r.fields(KEYS, &mut |r, i| {
            let mut n = 0usize;
            $(
                if i == n {
                    return r.field(&mut $field, KEYS[n]);
                }
                n += 1;
            )*
            let _ = n;
            Ok(())
        })?;
        $($(if $field.is_none() {
            $field = Some($default);
        })?)*
        $(if $field.is_none() && $crate::core::json::required(&$field) {
            return Err($r.missing($crate::core::json::json_key!($field $($key)?)));
        })*
        Ok($($path)::+ {
            $($field: $field.or_else($crate::core::json::FromJson::absent).unwrap_or_else(|| unreachable!()),)*
        })
    }};
}
pub(crate) use json_fields;

/// Whether a missing field of this type is an error (see [`FromJson::absent`]).
pub fn required<'a, T: FromJson<'a>>(_: &Option<T>) -> bool {
    T::absent().is_none()
}

macro_rules! json_key {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $key:literal) => {
        $key
    };
}
pub(crate) use json_key;

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// Every value serde_json reads, this reads the same; everything it refuses, this
    /// refuses.
    #[wasm_bindgen_test(unsupported = test)]
    fn values_read_as_serde_json_reads_them() {
        let texts = [
            r#"{"a":1,"b":[true,false,null],"c":{"d":"e"},"f":-2,"g":1.5,"h":"\u00e9\ud83d\ude00\n\t\"\\\/"}"#,
            "  [ ]  ",
            "{}",
            "0",
            "-0",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1e3",
            "1E-3",
            "2.5e+2",
            "\"plain\"",
            "\"\"",
            "[[[]]]",
            r#"{"a":1,"a":2}"#,
        ];
        for text in texts {
            let ours = Reader::read_all::<Value>(text).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
            assert_eq!(ours.to_string(), theirs.to_string(), "{text}");
        }
        let refused = [
            "",
            "{",
            "[1,]",
            "{\"a\":}",
            "{\"a\" 1}",
            "{a:1}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "tru",
            "nul",
            "\"abc",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"\\u12\"",
            "[1 2]",
            "{\"a\":1,}",
            "1 2",
            "\"\u{1}\"",
            "1e400",
            "{\"a\":1}x",
        ];
        for text in refused {
            assert!(
                serde_json::from_str::<Value>(text).is_err(),
                "serde_json reads {text:?}"
            );
            assert!(
                Reader::read_all::<Value>(text).is_err(),
                "{text:?} was read"
            );
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        let err = Reader::read_all::<Value>(&deep).unwrap_err();
        assert_eq!(err.what, "recursion limit exceeded");
    }

    #[derive(Debug, PartialEq)]
    struct Sample {
        name: String,
        count: u32,
        note: Option<String>,
        flag: bool,
        pairs: Vec<(String, usize)>,
    }
    json_struct!(Sample { name, count, note, flag = false, pairs = Vec::new() });

    #[wasm_bindgen_test(unsupported = test)]
    fn structs_read_their_fields_in_any_order_and_say_what_is_wrong() {
        fn read(text: &str) -> Result<Sample, JsonError> {
            Reader::read_all(text)
        }
        let full = Sample {
            name: "a".into(),
            count: 3,
            note: Some("n".into()),
            flag: true,
            pairs: vec![("x".into(), 1)],
        };
        let text = r#"{"pairs":[["x",1]],"flag":true,"extra":{"deep":[1,{"x":null}]},"note":"n","count":3,"name":"a"}"#;
        assert_eq!(read(text), Ok(full));
        let defaults = read(r#"{"name":"a","count":3,"note":null}"#).unwrap();
        assert_eq!(
            (defaults.note, defaults.flag, defaults.pairs),
            (None, false, vec![])
        );
        let check = |text: &str, what: &str, column: usize| {
            let err = read(text).unwrap_err();
            assert_eq!(
                (err.what.as_str(), err.line, err.column),
                (what, 1, column),
                "{text}"
            );
        };
        check(r#"{"name":"a"}"#, "missing field `count`", 12);
        check(
            r#"{"name":"a","name":"b","count":1}"#,
            "duplicate field `name`",
            19,
        );
        check(
            r#"{"name":1,"count":1}"#,
            "invalid type: number, expected a string",
            9,
        );
        check(
            r#"{"name":"a","count":-1}"#,
            "invalid value: -1, expected u64",
            22,
        );
        check(
            r#"{"name":"a","count":4294967296}"#,
            "invalid value: 4294967296, expected u32",
            30,
        );
        check(
            r#"{"name":"a","count":1.5}"#,
            "invalid value: 1.5, expected u64",
            23,
        );
        check(
            r#"{"name":"a","count":1,"pairs":[["x"]]}"#,
            "invalid length 1, expected a tuple of size 2",
            36,
        );
        check(r#"["name"]"#, "invalid type: sequence, expected a map", 1);
        let err = read("{\"name\":\"a\",\n").unwrap_err();
        assert_eq!(
            (err.what.as_str(), err.line, err.column),
            ("EOF while parsing an object", 2, 0)
        );
        let err = read("{\"name\":\"a\",\n\"count\":x}").unwrap_err();
        assert_eq!((err.line, err.column), (2, 9));
        // The key expected next is compared in place; the same key escaped, one that only
        // starts like it, and whitespace anywhere read as before.
        let spaced = read(" {\n \"name\" : \"a\" ,\t\"count\"\r:3 , \"note\":null } ").unwrap();
        assert_eq!((spaced.name.as_str(), spaced.count), ("a", 3));
        let escaped = read(r#"{"n\u0061me":"a","\u0063ount":3}"#).unwrap();
        assert_eq!((escaped.name.as_str(), escaped.count), ("a", 3));
        let near = read(r#"{"nam":"x","namex":"y","name":"a","count":3}"#).unwrap();
        assert_eq!(near.name, "a");
        check(
            r#"{"name":"a","n\u0061me":"b","count":1}"#,
            "duplicate field `name`",
            24,
        );
        check(r#"{"name" "a"}"#, "expected `:`", 9);
        check(r#"{"name"#, "EOF while parsing a string", 6);
        check(r#"{"name""#, "EOF while parsing a value", 7);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_tag_is_found_first_or_anywhere() {
        #[derive(Debug, PartialEq)]
        struct Rest {
            a: u64,
        }
        json_struct!(Rest { a });
        for text in [
            r#"{"t":"x","a":1}"#,
            r#"{"a":1,"t":"x"}"#,
            r#"{ "a" : 1 , "t" : "x" }"#,
        ] {
            let mut r = Reader::new(text);
            r.object().unwrap();
            assert_eq!(r.tag("t").unwrap(), "x", "{text}");
            assert_eq!(Rest::fields(&mut r), Ok(Rest { a: 1 }), "{text}");
            r.end().unwrap();
        }
        let mut r = Reader::new(r#"{"a":1}"#);
        r.object().unwrap();
        assert_eq!(r.tag("t").unwrap_err().what, "missing field `t`");
        let mut r = Reader::new(r#"{"t":1}"#);
        r.object().unwrap();
        assert_eq!(
            r.tag("t").unwrap_err().what,
            "invalid type: number, expected a string"
        );
    }

    /// The word-at-a-time scan stops exactly where a byte-by-byte one does, wherever the
    /// byte falls in its word and whatever surrounds it (multi-byte UTF-8 included).
    #[wasm_bindgen_test(unsupported = test)]
    fn plain_runs_end_at_the_first_byte_that_needs_attention() {
        for stop in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
            for len in 0..20 {
                for from in 0..3.min(len + 1) {
                    let mut text = "é".repeat(len).into_bytes();
                    let at = text.len();
                    text.push(stop);
                    text.extend_from_slice("ab\"".as_bytes());
                    assert_eq!(plain_run(&text, from * 2), at, "{stop} after {len} chars");
                }
            }
        }
        assert_eq!(plain_run(b"abcdefghijklmnop", 0), 16);
        assert_eq!(plain_run(b" !#[]~\x7f", 0), 7);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn strings_without_escapes_are_borrowed() {
        let mut r = Reader::new(r#"["plain","esc\"aped"]"#);
        r.array().unwrap();
        assert!(r.item().unwrap());
        assert!(matches!(r.string().unwrap(), Cow::Borrowed("plain")));
        assert!(r.item().unwrap());
        assert!(matches!(r.string().unwrap(), Cow::Owned(s) if s == "esc\"aped"));
        assert!(!r.item().unwrap());
    }
}
