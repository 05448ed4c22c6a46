//! [`JsonObject`]: a JSON object kept in whichever of its two forms it was made in, its
//! text or its map, the other made on first use; and [`is_canonical`], which tells when a
//! text can be kept as it is.
//!
//! An event's `data` is read far more often as text than as a map: the store writes it, the
//! server frames it for every subscriber, and it is read back from the log only to be framed
//! again. Made from a map (a normalizer's output), the text is written once, on first use,
//! and kept; made from text (a stored line, a frame), it is kept as it is when it is exactly
//! what the writer would write for the map it reads as, so no map is built unless something
//! asks for one. Either way a copy is one reference count.
//!
//! Invariant: [`JsonObject::text`] is always `write_map(map)` of [`JsonObject::map`], byte for
//! byte, so two objects are equal exactly when their texts are.

use std::fmt;
use std::sync::{Arc, LazyLock, OnceLock};

use serde_json::{Map, Value};

use super::{plain_run, write_map, Reader, MAX_DEPTH};

/// A JSON object, as its text and as its map (see the module doc). `{}` holds nothing.
#[derive(Clone, Default)]
pub struct JsonObject(Option<Arc<Forms>>);

/// The form it was made in, and the other one once made; both say the same. (The form it was
/// made in is a plain field: a `OnceLock` set at construction still goes through its `Once`,
/// 1.7 % of a Codex normalization.)
enum Forms {
    /// A writer's text keeps its buffer when little of it is spare ([`kept_text`]).
    Text {
        text: String,
        map: OnceLock<Map<String, Value>>,
    },
    Map {
        map: Map<String, Value>,
        text: OnceLock<String>,
    },
}

static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

impl JsonObject {
    /// `{}`.
    pub fn new() -> JsonObject {
        JsonObject(None)
    }

    /// The object of `map`; its text is written when first asked for.
    pub fn from_map(map: Map<String, Value>) -> JsonObject {
        if map.is_empty() {
            return JsonObject(None);
        }
        JsonObject(Some(Arc::new(Forms::Map {
            map,
            text: OnceLock::new(),
        })))
    }

    /// The object that `text` (one JSON object) reads as: the text itself when it is
    /// [canonical](is_canonical), else its map, read now. An error is what reading the text
    /// as a map says.
    pub fn from_text(text: &str) -> Result<JsonObject, super::JsonError> {
        if text.as_bytes().first() == Some(&b'{') && is_canonical(text) {
            return Ok(JsonObject::from_canonical(text));
        }
        Reader::read_all::<Map<String, Value>>(text).map(JsonObject::from_map)
    }

    /// The object of `text` (`""` for none) if the text is [canonical](is_canonical).
    pub(crate) fn canonical(text: &str) -> Option<JsonObject> {
        if text.is_empty() {
            return Some(JsonObject(None));
        }
        (text.as_bytes()[0] == b'{' && is_canonical(text)).then(|| JsonObject::from_canonical(text))
    }

    /// `text`, known to be canonical and an object.
    fn from_canonical(text: impl Into<String>) -> JsonObject {
        let text = kept_text(text.into());
        if text == "{}" {
            return JsonObject(None);
        }
        JsonObject(Some(Arc::new(Forms::Text {
            text,
            map: OnceLock::new(),
        })))
    }

    /// What `serde_json::to_string` writes for the map.
    pub fn text(&self) -> &str {
        let Some(forms) = &self.0 else {
            return "{}";
        };
        match &**forms {
            Forms::Text { text, .. } => text,
            Forms::Map { map, text } => text.get_or_init(|| {
                let mut text = String::with_capacity(64);
                write_map(&mut text, map);
                kept_text(text)
            }),
        }
    }

    /// The object's fields, sorted by key (serde_json's `Map`).
    pub fn map(&self) -> &Map<String, Value> {
        let Some(forms) = &self.0 else {
            return &EMPTY;
        };
        match &**forms {
            Forms::Map { map, .. } => map,
            Forms::Text { text, map } => map.get_or_init(|| {
                Reader::read_all(text)
                    .unwrap_or_else(|e| panic!("a kept text is canonical JSON, so it reads: {e}"))
            }),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Which forms it holds now: (text, map). `{}` holds both.
    #[cfg(test)]
    pub(crate) fn forms(&self) -> (bool, bool) {
        self.0.as_ref().map_or((true, true), |f| match &**f {
            Forms::Text { map, .. } => (true, map.get().is_some()),
            Forms::Map { text, .. } => (text.get().is_some(), true),
        })
    }
}

impl From<Map<String, Value>> for JsonObject {
    fn from(map: Map<String, Value>) -> JsonObject {
        JsonObject::from_map(map)
    }
}

impl PartialEq for JsonObject {
    fn eq(&self, other: &JsonObject) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => true,
            _ => self.text() == other.text(),
        }
    }
}

/// As the map prints.
impl fmt::Debug for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.map(), f)
    }
}

impl serde::Serialize for JsonObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map().serialize(serializer)
    }
}

impl super::ToJson for JsonObject {
    fn write_json(&self, out: &mut String) {
        out.push_str(self.text());
    }
}

/// `text` as an object keeps it: its buffer as it is unless more than a quarter of it (and
/// 16 bytes) is spare, which a shrink would only move to another allocation.
fn kept_text(mut text: String) -> String {
    if text.capacity() - text.len() > text.len() / 4 + 16 {
        text.shrink_to_fit();
    }
    text
}

/// Writes a [`JsonObject`] as its text, field after field, with no map: for the events a
/// normalizer makes most of. Fields given in the order of their keys are written as they come;
/// given in another order (or a key twice), the text is read back into a map and written again
/// in order when finished, so the object is right either way, only slower.
pub struct ObjectWriter<'k> {
    text: String,
    previous: &'k str,
    in_order: bool,
}

impl<'k> ObjectWriter<'k> {
    pub fn new() -> ObjectWriter<'k> {
        ObjectWriter::with_capacity(64)
    }

    /// A writer whose text starts with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> ObjectWriter<'k> {
        let mut text = String::with_capacity(bytes);
        text.push('{');
        ObjectWriter {
            text,
            previous: "",
            in_order: true,
        }
    }

    /// Adds the field `key`: `value`.
    pub fn field<T: super::ToJson + ?Sized>(mut self, key: &'k str, value: &T) -> Self {
        let first = self.text.len() == 1;
        self.in_order &= first || self.previous < key;
        self.previous = key;
        if !first {
            self.text.push(',');
        }
        // A normalizer's own key needs no escape: written as it is, without `write_str`'s loop.
        if plain_run(key.as_bytes(), 0) == key.len() {
            self.text.push('"');
            self.text.push_str(key);
            self.text.push_str("\":");
        } else {
            super::write_str(&mut self.text, key);
            self.text.push(':');
        }
        value.write_json(&mut self.text);
        self
    }

    /// Adds the field `key` when `value` is `Some`.
    pub fn field_if<T: super::ToJson + ?Sized>(self, key: &'k str, value: Option<&T>) -> Self {
        match value {
            Some(value) => self.field(key, value),
            None => self,
        }
    }

    pub fn finish(mut self) -> JsonObject {
        self.text.push('}');
        if self.in_order {
            return JsonObject::from_canonical(self.text);
        }
        let map = Reader::read_all(&self.text).expect("the writer writes JSON");
        JsonObject::from_map(map)
    }
}

impl Default for ObjectWriter<'_> {
    fn default() -> Self {
        ObjectWriter::new()
    }
}

/// Whether `text` is one JSON value written exactly as the writer (and serde_json) writes the
/// value it reads as: no whitespace; an object's keys unique, in order and without escapes;
/// strings escaped only where the writer escapes (`"`, `\` and control characters, in the
/// writer's spelling); numbers as the writer prints the number read (`1.0`, not `1.00`;
/// `-0.0`, not `-0`; an integer beyond 64 bits is a float). So reading such a text and
/// writing it again gives it back, and it can be kept in place of the value.
///
/// `false` is only "not known to be": a key with an escape is never taken as canonical.
pub fn is_canonical(text: &str) -> bool {
    let mut c = Canonical {
        bytes: text.as_bytes(),
        at: 0,
    };
    c.value(0) && c.at == c.bytes.len()
}

struct Canonical<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Canonical<'a> {
    fn eat(&mut self, b: u8) -> bool {
        let here = self.bytes.get(self.at) == Some(&b);
        self.at += usize::from(here);
        here
    }

    fn value(&mut self, depth: u32) -> bool {
        match self.bytes.get(self.at) {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'n') => self.word(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => false,
        }
    }

    fn word(&mut self, word: &[u8]) -> bool {
        let here = self.bytes[self.at..].starts_with(word);
        self.at += if here { word.len() } else { 0 };
        here
    }

    fn object(&mut self, depth: u32) -> bool {
        self.at += 1;
        if depth > MAX_DEPTH {
            return false;
        }
        if self.eat(b'}') {
            return true;
        }
        let mut previous: Option<&[u8]> = None;
        loop {
            // A key with an escape would need unescaping to be compared: not taken.
            let Some((key, false)) = self.string() else {
                return false;
            };
            if previous.is_some_and(|p| p >= key) {
                return false;
            }
            previous = Some(key);
            if !(self.eat(b':') && self.value(depth)) {
                return false;
            }
            if !self.eat(b',') {
                return self.eat(b'}');
            }
        }
    }

    fn array(&mut self, depth: u32) -> bool {
        self.at += 1;
        if depth > MAX_DEPTH {
            return false;
        }
        if self.eat(b']') {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            if !self.eat(b',') {
                return self.eat(b']');
            }
        }
    }

    /// A string as the writer escapes it: its contents, and whether it holds an escape.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            self.at = plain_run(self.bytes, self.at);
            match self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some((&self.bytes[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    let len = escape_len(&self.bytes[self.at + 1..])?;
                    self.at += 1 + len;
                }
                // A control character the writer would have escaped.
                _ => return None,
            }
        }
    }

    fn number(&mut self) -> bool {
        let start = self.at;
        let negative = self.eat(b'-');
        let digits = |c: &mut Canonical<'_>| {
            let from = c.at;
            while c.bytes.get(c.at).is_some_and(u8::is_ascii_digit) {
                c.at += 1;
            }
            c.at - from
        };
        let whole = digits(self);
        // No leading zero (`0` itself is one digit).
        if whole == 0 || (whole > 1 && self.bytes[self.at - whole] == b'0') {
            return false;
        }
        let mut integer = true;
        if self.eat(b'.') {
            integer = false;
            if digits(self) == 0 {
                return false;
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            integer = false;
            self.at += 1;
            if !self.eat(b'-') {
                self.eat(b'+');
            }
            if digits(self) == 0 {
                return false;
            }
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or_default();
        if integer {
            // Read as u64 or (negative, not zero) as i64, and printed back as it is; `-0`
            // and integers beyond 64 bits are floats, printed otherwise.
            return if negative {
                text.parse::<i64>().is_ok_and(|n| n < 0)
            } else {
                text.parse::<u64>().is_ok()
            };
        }
        super::parse_float(text).is_some_and(|f| zmij::Buffer::new().format_finite(f) == text)
    }
}

/// The length of the escape after a `\` when it is the writer's (`\"`, `\\`, `\b`, `\f`,
/// `\n`, `\r`, `\t`, or `\u00xx` in lowercase for the other control characters).
fn escape_len(rest: &[u8]) -> Option<usize> {
    match rest.first()? {
        b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => Some(1),
        b'u' => {
            let hex = rest.get(1..5)?;
            let lower = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
            let short = [0x08, 0x0c, b'\n', b'\r', b'\t'];
            let code = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            (hex.iter().all(|&b| lower(b)) && code.is_some_and(|c| c < 0x20 && !short.contains(&c)))
                .then_some(5)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;

    /// Every text is canonical exactly when serde_json's read-then-write gives it back.
    #[wasm_bindgen_test(unsupported = test)]
    fn a_text_is_canonical_when_reading_and_writing_it_gives_it_back() {
        let texts = [
            r#"{}"#,
            r#"[]"#,
            r#"{"a":1,"b":[true,false,null],"c":{"d":"e"}}"#,
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a": 1}"#,
            r#" {"a":1}"#,
            r#"{"a":1} "#,
            r#"{"a":"\"\\\n\r\t\b\f"}"#,
            r#"{"a":"\u0001\u001f\u0000"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\u0020"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"é/\u007f"}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"😀"}"#,
            "{\"a\":\"\x7f\"}",
            r#"{"a":0,"b":-1,"c":18446744073709551615,"d":-9223372036854775808}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":-9223372036854775809}"#,
            r#"{"a":-0}"#,
            r#"{"a":-0.0}"#,
            r#"{"a":01}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1.00}"#,
            r#"{"a":1e5}"#,
            r#"{"a":100000.0}"#,
            r#"{"a":1e20}"#,
            r#"{"a":1e+20}"#,
            r#"{"a":1E20}"#,
            r#"{"a":1.5e-7}"#,
            r#"{"a":0.1}"#,
            r#"{"a":0.30000000000000004}"#,
            r#"{"a":1.7976931348623157e308}"#,
            r#"{"a":1e400}"#,
            r#"{"a":.5}"#,
            r#"{"a":1.}"#,
            r#"{"a":tru}"#,
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            r#"{"a":1"#,
            r#"{"":1,"a":2}"#,
            r#"{"a":1,"ab":2,"b":3}"#,
            r#"{"é":1,"z":2}"#,
            r#"{"z":1,"é":2}"#,
            r#"{"a\"b":1}"#,
            r#"{"a":[{"b":[],"c":{}}]}"#,
            r#"{"a":[1,2,]}"#,
            r#""text""#,
            r#"12"#,
        ];
        for text in texts {
            let again = serde_json::from_str::<Value>(text)
                .ok()
                .map(|v| serde_json::to_string(&v).unwrap());
            let gives_back = again.as_deref() == Some(text);
            let escaped_key = text.starts_with(r#"{"a\""#);
            assert_eq!(
                is_canonical(text),
                gives_back && !escaped_key,
                "{text}: serde writes it back as {again:?}"
            );
        }
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert!(!is_canonical(&deep));
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(is_canonical(&deep));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_object_made_either_way_has_the_same_text_and_map() {
        for text in [
            r#"{}"#,
            r#"{"delta":"hi","message_id":"m1"}"#,
            r#"{"message_id":"m1","delta":"hi"}"#,
            r#"{"n": 1.50, "s": "\u00e9"}"#,
            r#"{"a":{"z":1,"b":[1e5]},"a":2}"#,
        ] {
            let map: Map<String, Value> = serde_json::from_str(text).unwrap();
            let canonical = serde_json::to_string(&map).unwrap();
            let from_text = JsonObject::from_text(text).unwrap();
            let from_map = JsonObject::from_map(map.clone());
            for object in [&from_text, &from_map] {
                assert_eq!(object.text(), canonical, "{text}");
                assert_eq!(object.map(), &map, "{text}");
                assert_eq!(object.is_empty(), map.is_empty());
            }
            assert_eq!(from_text, from_map);
            assert_eq!(format!("{from_text:?}"), format!("{map:?}"));
            assert_eq!(serde_json::to_string(&from_text).unwrap(), canonical);
        }
        assert_ne!(
            JsonObject::from_text(r#"{"a":1}"#).unwrap(),
            JsonObject::from_text(r#"{"a":1.0}"#).unwrap()
        );
        let written = ObjectWriter::new()
            .field("delta", "a \"quoted\"\n")
            .field("message_id", "m1")
            .field_if("role", None::<&str>)
            .field("n", &1.5)
            .finish();
        let expected = r#"{"delta":"a \"quoted\"\n","message_id":"m1","n":1.5}"#;
        assert_eq!(written.text(), expected);
        assert_eq!(written, JsonObject::from_text(expected).unwrap());
        // Out of order, or a key twice: still the object's text, by way of its map.
        let shuffled = ObjectWriter::new()
            .field("n", &1.5)
            .field("message_id", "m0")
            .field("delta", "a \"quoted\"\n")
            .field("message_id", "m1")
            .finish();
        assert_eq!(shuffled.text(), expected);
        assert!(ObjectWriter::new().finish().is_empty());
        let err = JsonObject::from_text(r#"{"a":}"#).unwrap_err();
        assert!(err.what.contains("expected value"), "{err}");
        assert!(JsonObject::from_text("[1]").is_err());
    }
}
