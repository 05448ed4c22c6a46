//! The writing half of `core::json`: JSON text exactly as `serde_json::to_string` writes it,
//! without serde's `Serialize`.
//!
//! serde's derive writes a type through the `Serializer` that serde_json instantiates, with
//! its formatter, once per type; in the wasm package that was some 15 KB of code (issue 14,
//! goal 2), and natively an event cost about 1.5 µs to encode. Here a type writes itself
//! into a `String` through [`ToJson`], written for structs by `json_write!`, for internally
//! tagged enums by `json_write_tagged!` and for closed vocabularies by `json_write_names!`,
//! each a few lines beside the type's serde attributes, which they mirror:
//! `skip_serializing_if` (`Option::is_none`, `Vec::is_empty`, `Not::not`) is a field marked
//! `?` ([`Omit`]), a rename is `field as "key"`, a tag comes first as serde writes it, and a
//! flattened struct's fields follow the others ([`ToJson::write_fields`]).
//!
//! Byte for byte what serde_json writes (its tests compare them): strings escaped as it
//! escapes them (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, any other control character as
//! `\u00xx`; nothing else, neither `/` nor non-ASCII), runs that need no escape found eight
//! bytes at a time (the reader's [`plain_run`](super::plain_run)); integers in decimal; floats
//! by `zmij` as serde_json formats them (`1e300`, `0.1`, `-0.0`), a non-finite one as `null`;
//! objects in their map's order.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Number, Value};

/// A value that writes itself as JSON text.
pub trait ToJson {
    fn write_json(&self, out: &mut String);
}

/// The JSON text of `value`: `serde_json::to_string(value)` for the types that have both.
pub fn to_json<T: ToJson + ?Sized>(value: &T) -> String {
    let mut out = String::new();
    value.write_json(&mut out);
    out
}

/// [`to_json`] into a buffer of the size `hint` says, which then says this text's size and a
/// quarter: for texts written one after another that are much alike (a page's drains), which
/// grow from empty by doubling otherwise, about eight times each.
pub fn to_json_sized<T: ToJson + ?Sized>(value: &T, hint: &mut usize) -> String {
    let mut out = String::with_capacity(*hint);
    value.write_json(&mut out);
    *hint = out.len() + out.len() / 4;
    out
}

/// Whether a field marked `?` is left out: what serde's `skip_serializing_if` says for the
/// field's type (`None`, an empty list, `false`).
pub trait Omit {
    fn omitted(&self) -> bool;
}

impl<T> Omit for Option<T> {
    fn omitted(&self) -> bool {
        self.is_none()
    }
}

impl<T> Omit for Vec<T> {
    fn omitted(&self) -> bool {
        self.is_empty()
    }
}

impl Omit for bool {
    fn omitted(&self) -> bool {
        !*self
    }
}

/// A string, quoted and escaped.
pub fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        let i = super::plain_run(bytes, start);
        out.push_str(&s[start..i]);
        let Some(&b) = bytes.get(i) else {
            break;
        };
        escape(out, b);
        start = i + 1;
    }
    out.push('"');
}

/// The escape of a byte `plain_run` stopped at: `"`, `\` or a control character.
fn escape(out: &mut String, b: u8) {
    let short = match b {
        b'"' => '"',
        b'\\' => '\\',
        0x08 => 'b',
        0x0c => 'f',
        b'\n' => 'n',
        b'\r' => 'r',
        b'\t' => 't',
        _ => return unit_escape(out, u16::from(b)),
    };
    out.push('\\');
    out.push(short);
}

/// `\u` and the UTF-16 unit's four lowercase hex digits (what serde_json writes for a control
/// character, and `ascii` for each unit of a character outside ASCII).
fn unit_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

/// `json` (valid JSON text) with every character outside ASCII written as its `\u` escape (a
/// surrogate pair above U+FFFF): the same value, in bytes a browser turns into a JS string
/// without transcoding. Borrowed when it is ASCII already. Valid JSON has such characters only
/// inside its strings, where an escape means the same character.
///
/// For the wasm package's `JSON.parse` of what the core wrote: a text with one `…` in it made
/// `TextDecoder` take its UTF-8 path for all of it (a drain's 14.8 MB 35 → 7 ms in Node);
/// then, for text wholly in CJK, decoding and parsing twice the bytes is still no slower.
pub fn ascii(json: &str) -> Cow<'_, str> {
    let bytes = json.as_bytes();
    let mut at = ascii_run(bytes, 0);
    if at == bytes.len() {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + json.len() / 4);
    out.push_str(&json[..at]);
    while let Some(c) = json[at..].chars().next() {
        for &mut unit in c.encode_utf16(&mut [0; 2]) {
            unit_escape(&mut out, unit);
        }
        let from = at + c.len_utf8();
        at = ascii_run(bytes, from);
        out.push_str(&json[from..at]);
    }
    Cow::Owned(out)
}

/// The end of the run of ASCII bytes from `i`, found eight bytes at a time.
fn ascii_run(bytes: &[u8], i: usize) -> usize {
    super::run_until(bytes, i, |w| w & super::HIGH, |b| !b.is_ascii())
}

/// An unsigned integer in decimal.
pub fn write_u64(out: &mut String, n: u64) {
    out.push_str(std::str::from_utf8(decimal(n, &mut [0; 20])).unwrap_or_default());
}

/// The decimal digits of `n` (what `n.to_string()` writes), at the end of `buf`.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// A signed integer in decimal.
pub fn write_i64(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    write_u64(out, n.unsigned_abs());
}

/// A float as serde_json writes one: its shortest form (by `zmij`, as serde_json), `null`
/// when it is not finite.
pub fn write_f64(out: &mut String, f: f64) {
    if f.is_finite() {
        out.push_str(zmij::Buffer::new().format_finite(f));
    } else {
        out.push_str("null");
    }
}

/// A `serde_json::Value`, as `serde_json::to_string` writes it.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => b.write_json(out),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => items.write_json(out),
        Value::Object(map) => write_map(out, map),
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(u) = n.as_u64() {
        write_u64(out, u);
    } else if let Some(i) = n.as_i64() {
        write_i64(out, i);
    } else {
        write_f64(out, n.as_f64().unwrap_or(f64::NAN));
    }
}

/// An object, in the map's order (sorted by key, as serde_json's `Map` keeps it).
pub fn write_map(out: &mut String, map: &Map<String, Value>) {
    out.push('{');
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, key);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

/// One field of an object: `key` is `,"name":` (the comma left out for the object's first).
#[doc(hidden)]
pub fn field<T: ToJson + ?Sized>(out: &mut String, first: &mut bool, key: &str, value: &T) {
    out.push_str(if *first { &key[1..] } else { key });
    *first = false;
    value.write_json(out);
}

impl ToJson for str {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for String {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for Arc<str> {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for Cow<'_, str> {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for bool {
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

impl ToJson for u64 {
    fn write_json(&self, out: &mut String) {
        write_u64(out, *self);
    }
}

impl ToJson for u32 {
    fn write_json(&self, out: &mut String) {
        write_u64(out, u64::from(*self));
    }
}

impl ToJson for usize {
    fn write_json(&self, out: &mut String) {
        write_u64(out, *self as u64);
    }
}

impl ToJson for i64 {
    fn write_json(&self, out: &mut String) {
        write_i64(out, *self);
    }
}

impl ToJson for f64 {
    fn write_json(&self, out: &mut String) {
        write_f64(out, *self);
    }
}

impl ToJson for Value {
    fn write_json(&self, out: &mut String) {
        write_value(out, self);
    }
}

impl ToJson for Map<String, Value> {
    fn write_json(&self, out: &mut String) {
        write_map(out, self);
    }
}

/// `null` or the value.
impl<T: ToJson> ToJson for Option<T> {
    fn write_json(&self, out: &mut String) {
        match self {
            Some(value) => value.write_json(out),
            None => out.push_str("null"),
        }
    }
}

impl<T: ToJson + ?Sized> ToJson for Box<T> {
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

impl<T: ToJson + ?Sized> ToJson for &T {
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

impl<T: ToJson> ToJson for [T] {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, item) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            item.write_json(out);
        }
        out.push(']');
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn write_json(&self, out: &mut String) {
        self.as_slice().write_json(out);
    }
}

/// A pair, as serde writes a tuple: a two-element array.
impl<A: ToJson, B: ToJson> ToJson for (A, B) {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        self.0.write_json(out);
        out.push(',');
        self.1.write_json(out);
        out.push(']');
    }
}

/// `ToJson` for a struct of named fields, in declaration order as serde writes them:
/// `json_write!(Type { a, b?, c as "key", d as "key"? })`, or `Type<T>` for `T: ToJson`. `?`
/// leaves the field out where serde's `skip_serializing_if` does ([`Omit`]); `as` is serde's
/// `rename`. `..flat` at the end writes a `#[serde(flatten)]` struct's fields (its type's
/// `write_fields`). Also gives `write_fields`, the fields without the braces (for a tagged
/// enum's variant or a flattening struct).
macro_rules! json_write {
    ($ty:ident $(<$g:ident>)? { $($field:ident $(as $key:literal)? $(? $(@$omit:ident)?)?),* $(, ..$flat:ident)? $(,)? }) => {
        impl$(<$g: $crate::core::json::ToJson>)? $crate::core::json::ToJson for $ty$(<$g>)? {
            fn write_json(&self, out: &mut String) {
                out.push('{');
                self.write_fields(out, true);
                out.push('}');
            }
        }

        impl$(<$g: $crate::core::json::ToJson>)? $ty$(<$g>)? {
            /// Its fields, each after a comma but the object's first when `first`; whether
            /// the object is still empty after them.
            #[allow(dead_code, unused_mut)]
            pub(crate) fn write_fields(&self, out: &mut String, mut first: bool) -> bool {
                $($crate::core::json::json_write_field!(
                    out, first, self.$field, $field $($key)? $(? $($omit)?)?
                );)*
                $(first = self.$flat.write_fields(out, first);)?
                first
            }
        }
    };
}
pub(crate) use json_write;

/// One field of `json_write!` / `json_write_tagged!`: written, or (marked `?`) left out
/// when [`Omit`] says so.
#[doc(hidden)]
macro_rules! json_write_field {
    ($out:ident, $first:ident, $value:expr, $field:ident $($key:literal)?) => {
        $crate::core::json::field(
            $out,
            &mut $first,
            concat!(",\"", $crate::core::json::json_key!($field $($key)?), "\":"),
            &$value,
        )
    };
    ($out:ident, $first:ident, $value:expr, $field:ident $($key:literal)? ?) => {
        if !$crate::core::json::Omit::omitted(&$value) {
            $crate::core::json::json_write_field!($out, $first, $value, $field $($key)?);
        }
    };
}
pub(crate) use json_write_field;

/// `ToJson` for an internally tagged enum (`#[serde(tag = "t")]`): the tag first, then the
/// variant's fields. A variant is `Name "wire_name" { fields as in json_write! }` or, for a
/// newtype variant of a struct, `Name "wire_name" (Struct)` (the struct's `write_fields`).
/// The enum may borrow (`Type<'a>`).
macro_rules! json_write_tagged {
    ($ty:ident $(<$lt:lifetime>)?: $tag:literal {
        $($variant:ident $name:literal $({ $($field:ident $(as $key:literal)? $(? $(@$omit:ident)?)?),* $(,)? })? $(($inner:ident))?),* $(,)?
    }) => {
        impl$(<$lt>)? $crate::core::json::ToJson for $ty$(<$lt>)? {
            #[allow(unused_mut, unused_variables)]
            fn write_json(&self, out: &mut String) {
                let mut first = false;
                match self {
                    $($ty::$variant $({ $($field),* })? $(($crate::core::json::json_pick!(inner, $inner)))? => {
                        out.push_str(concat!("{\"", $tag, "\":\"", $name, "\""));
                        $($($crate::core::json::json_write_field!(
                            out, first, *$field, $field $($key)? $(? $($omit)?)?
                        );)*)?
                        $(<$inner>::write_fields(inner, out, false);)?
                    })*
                }
                out.push('}');
            }
        }
    };
}
pub(crate) use json_write_tagged;

/// Its first argument (a binding the caller names inside a repetition over the second).
#[doc(hidden)]
macro_rules! json_pick {
    ($pick:tt, $($ignored:tt)*) => {
        $pick
    };
}
pub(crate) use json_pick;

/// `ToJson` for a vocabulary enum written as its name: `json_write_names!(Type)` by its
/// `as_str`, or `json_write_names!(Type { A = "a", B = "b" })`. Names are snake_case
/// words, written as they are (nothing in them needs an escape).
macro_rules! json_write_names {
    ($ty:ident) => {
        impl $crate::core::json::ToJson for $ty {
            fn write_json(&self, out: &mut String) {
                out.push('"');
                out.push_str(self.as_str());
                out.push('"');
            }
        }
    };
    ($ty:ident { $($variant:ident = $name:literal),* $(,)? }) => {
        impl $crate::core::json::ToJson for $ty {
            fn write_json(&self, out: &mut String) {
                out.push_str(match self {
                    $($ty::$variant => concat!("\"", $name, "\""),)*
                });
            }
        }
    };
}
pub(crate) use json_write_names;

#[cfg(test)]
mod tests {
    use std::fmt::Debug;

    use serde::Serialize;
    use serde_json::json;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::core::client::{ClientBatch, ConnectionState, Transport};
    use crate::core::event::{Event, EventId, EventInit, EventType, Provider};
    use crate::core::lifecycle::{Lifecycle, Stall, ViolationKind};
    use crate::core::normalize::DiagnosticKind;
    use crate::core::projector::{Batch, LifecycleState, Note, SessionBatch};
    use crate::core::snapshot::SnapshotRequest;
    use crate::core::time::Timestamp;
    use crate::core::timeline::{
        Approval, ApprovalStatus, Change, Item, Message, ToolCall, ToolStatus, Usage,
    };
    use crate::core::wire::{ClientMsg, Decision, StoreState, StoreStatus, Thinking, WireError};

    /// Our text is serde_json's, byte for byte.
    fn check<T: ToJson + Serialize + Debug + ?Sized>(value: &T) {
        let theirs = serde_json::to_string(value).unwrap();
        assert_eq!(to_json(value), theirs, "{value:?}");
    }

    /// Strings with every byte that needs an escape (and some that do not) at every offset
    /// of the eight-byte scan, after and before multi-byte characters.
    fn strings() -> Vec<String> {
        let mut all: Vec<String> = vec![
            String::new(),
            (0u8..0x80).map(char::from).collect(),
            "plain ascii that needs nothing at all, longer than a word".into(),
            "é€😀 and \u{7f}\u{80}\u{ff}\u{2028}\u{2029}\u{fffd}/</script>".into(),
        ];
        let specials = [
            "\"", "\\", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{0}", "\u{1}", "\u{b}", "\u{1f}",
            "\u{7f}", "/", "é", "€", "😀", " ",
        ];
        for special in specials {
            for before in 0..17 {
                for filler in ["a", "é", "€", "😀"] {
                    let s = filler.repeat(before) + special + &"b".repeat(before % 9) + special;
                    all.push(s);
                }
            }
        }
        all
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in strings() {
            check(s.as_str());
            check(&Value::String(s));
        }
        // The escapes, spelled out.
        let mut out = String::new();
        write_str(&mut out, "\"\\\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}/é");
        assert_eq!(out, "\"\\\"\\\\\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}/é\"");
    }

    /// `ascii` keeps the value and leaves no byte above 0x7f, wherever the character falls
    /// in its eight-byte word; ASCII text comes back as it was, not copied.
    #[wasm_bindgen_test(unsupported = test)]
    fn ascii_text_means_the_same_value() {
        let texts = [
            "é",
            "…",
            "日本語",
            "😀",
            "\u{ffff}",
            "\u{10000}",
            "\u{7f}",
            "a\"…\\n",
        ];
        for text in texts {
            for pad in 0..18 {
                let value = json!({ "a": "x".repeat(pad) + text + "tail", "…": [text, pad] });
                let json = to_json(&value);
                let escaped = ascii(&json);
                assert!(escaped.is_ascii(), "{escaped}");
                assert_eq!(serde_json::from_str::<Value>(&escaped).unwrap(), value);
            }
        }
        assert_eq!(ascii("\"…\"😀"), "\"\\u2026\"\\ud83d\\ude00");
        let plain = r#"{"a":"0123456789abcdef","b":[1,2]}"#;
        assert!(matches!(ascii(plain), Cow::Borrowed(s) if std::ptr::eq(s, plain)));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn numbers_are_written_as_serde_json_writes_them() {
        let floats = [
            0.0,
            -0.0,
            0.1,
            1.5,
            -2.5,
            1e300,
            -1e-300,
            1e21,
            1e-7,
            123456789.0,
            9007199254740992.0,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            0.30000000000000004,
            100.0,
        ];
        for f in floats {
            check(&f);
            check(&Value::from(f));
        }
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            check(&f);
        }
        for u in [0, 1, 9, 10, 99, 100, u64::from(u32::MAX), u64::MAX] {
            check(&u);
            check(&Value::from(u));
        }
        for i in [i64::MIN, -1, 0, 1, i64::MAX, -1_000_000_007] {
            check(&i);
            check(&Value::from(i));
        }
        check(&u32::MAX);
        check(&usize::MAX);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn values_are_written_as_serde_json_writes_them() {
        let values = [
            json!(null),
            json!(true),
            json!([]),
            json!({}),
            json!([1, -1, 1.5, "x", null, false, [[]], {}]),
            json!({"b": 1, "a": {"z": [1, {"y": null}], "é\"\n": "\u{1}"}, "": ""}),
            json!({"command": "ls -la /tmp", "kind": "x", "t": [1, 2.5, null]}),
        ];
        for v in &values {
            check(v);
            assert_eq!(to_json(v), v.to_string());
            check(v.as_object().unwrap_or(&Map::new()));
        }
    }

    fn event(run: Option<&str>, correlation: Option<&str>, ms: i64, data: Value) -> Event {
        let mut init = EventInit::new(
            EventType::MessageStreamed,
            "ses \"1\"",
            Provider::Claude,
            Timestamp::from_unix_millis(ms),
        );
        init.run_id = run.map(str::to_owned);
        init.correlation_id = correlation.map(str::to_owned);
        init.data = data.as_object().cloned().unwrap_or_default();
        init.metadata.insert("raw\ttype".into(), json!("é😀"));
        Event::new(init).unwrap().into_sequenced(u64::MAX)
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn events_are_written_as_serde_writes_them() {
        let times = [
            0,
            -1,
            1_767_225_600_123,
            253_402_300_799_999,
            253_402_300_800_000,
            -62_167_219_200_000,
            -62_167_219_200_001,
        ];
        for ms in times {
            check(&event(None, None, ms, json!({})));
            check(&Timestamp::from_unix_millis(ms));
        }
        let data = json!({"delta": "a\nb", "n": 1.25, "deep": {"x": [u64::MAX, i64::MIN]}});
        for (run, correlation) in [
            (Some("r1"), None),
            (None, Some("c\"")),
            (Some("r"), Some("c")),
        ] {
            let e = event(run, correlation, 7, data.clone());
            check(&e);
            assert_eq!(e.to_json(), serde_json::to_string(&e).unwrap());
        }
        for &t in EventType::ALL {
            check(&t);
        }
        for p in Provider::ALL {
            check(&p);
        }
        for &r in crate::core::event::CancelReason::ALL {
            check(&r);
        }
        check(&EventId::derive(&["x"]));
    }

    fn items() -> Vec<Item> {
        let message = |id: Option<&str>, run: Option<&str>| Message {
            message_id: id.map(str::to_owned),
            text: "hé\"llo\n".into(),
            streaming: true,
            discarded: false,
            run_id: run.map(str::to_owned),
        };
        let tool = |opt: bool, status| ToolCall {
            tool_call_id: "t1".into(),
            tool_name: "Bash".into(),
            input: json!({"command": "ls", "n": [1, 2.5]}),
            status,
            output: "out\u{1}".into(),
            error: opt.then(|| "boom".into()),
            title: opt.then(|| "title".into()),
            parent_tool_use_id: opt.then(|| "p".into()),
            run_id: opt.then(|| "r".into()),
        };
        let approval = |opt: bool, status| Approval {
            request_id: "a1".into(),
            tool_name: "Edit".into(),
            input: json!(null),
            status,
            tool_call_id: opt.then(|| "t".into()),
            run_id: opt.then(|| "r".into()),
        };
        let mut items = vec![
            Item::UserMessage {
                text: "fix it".into(),
                run_id: None,
            },
            Item::UserMessage {
                text: "".into(),
                run_id: Some("r1".into()),
            },
            Item::AssistantMessage(message(None, None)),
            Item::AssistantMessage(message(Some("m1"), Some("r1"))),
            Item::Reasoning(message(Some("m2"), None)),
            Item::Reasoning(message(None, Some("r2"))),
            Item::Todo {
                items: json!([{"text": "a", "status": "pending"}]),
                run_id: None,
            },
            Item::Todo {
                items: json!([]),
                run_id: Some("r".into()),
            },
            Item::Error {
                message: "bad".into(),
                provider_error: None,
                run_id: None,
            },
            Item::Error {
                message: "bad".into(),
                provider_error: Some(json!({"kind": "rate_limited"})),
                run_id: Some("r".into()),
            },
        ];
        for status in [
            ToolStatus::Running,
            ToolStatus::Completed,
            ToolStatus::Failed,
            ToolStatus::Cancelled,
        ] {
            items.push(Item::ToolCall(tool(false, status)));
            items.push(Item::ToolCall(tool(true, status)));
        }
        for status in [
            ApprovalStatus::Pending,
            ApprovalStatus::Granted,
            ApprovalStatus::Denied,
        ] {
            items.push(Item::Approval(approval(false, status)));
            items.push(Item::Approval(approval(true, status)));
        }
        items
    }

    fn store_statuses() -> Vec<StoreStatus> {
        vec![
            StoreStatus::available(0),
            StoreStatus {
                state: StoreState::Unavailable,
                error: Some("disk \"full\"".into()),
                since: Some(Timestamp::from_unix_millis(1_767_225_600_000)),
                attempts: Some(3),
                unstored: 12,
            },
        ]
    }

    fn notes() -> Vec<Note> {
        let mut notes = vec![
            Note::CaughtUp { latest: 3 },
            Note::Reset {
                epoch: "e".into(),
                reason: "stale_epoch".into(),
            },
            Note::Resync { after: 2 },
            Note::Gap {
                after: 1,
                next_received: 5,
            },
            Note::Diagnostic {
                line: 4,
                kind: DiagnosticKind::InvalidJson,
                message: "expected value".into(),
            },
            Note::Error {
                code: "malformed_frame".into(),
                message: "bad\n".into(),
            },
        ];
        for kind in [
            ViolationKind::DuplicateUserMessage,
            ViolationKind::StaleTerminal,
            ViolationKind::EventAfterTerminal,
            ViolationKind::ReusedTurnId,
            ViolationKind::NonIncreasingSequence,
        ] {
            notes.push(Note::Violation {
                kind,
                sequence: 9,
                applied: true,
            });
        }
        notes.extend(store_statuses().into_iter().map(Note::Store));
        notes
    }

    fn batches() -> Vec<Batch> {
        let changes = vec![
            Change::Insert {
                index: 0,
                item: items()[3].clone(),
            },
            Change::AppendText {
                index: 0,
                text: "more \"text\"".into(),
            },
            Change::Update {
                index: 1,
                item: items()[12].clone(),
            },
            Change::Usage {
                totals: Usage {
                    input_tokens: 1,
                    output_tokens: 2,
                    cache_read_input_tokens: 3,
                    cache_creation_input_tokens: 4,
                    reasoning_output_tokens: 5,
                    cost_usd: 0.1 + 0.2,
                },
            },
            Change::Usage {
                totals: Usage::default(),
            },
            Change::Approvals { pending: vec![] },
            Change::Approvals {
                pending: vec!["a1".into(), "a2".into()],
            },
        ];
        let lifecycles = [
            LifecycleState {
                state: Lifecycle::Running,
                active_turn: Some("r1".into()),
                stalled: Some(Stall {
                    run_id: "r1".into(),
                    silent_ms: 90_000,
                    at_ms: -5,
                }),
            },
            LifecycleState {
                state: Lifecycle::Idle,
                active_turn: None,
                stalled: None,
            },
        ];
        let bare = SessionBatch {
            session: "s1".into(),
            reset: false,
            changes: vec![],
            lifecycle: None,
            start: None,
            older: vec![],
            after: 0,
            epoch: None,
            notes: vec![],
        };
        let mut sessions = vec![bare.clone()];
        for lifecycle in lifecycles {
            sessions.push(SessionBatch {
                session: "s2".into(),
                reset: true,
                changes: changes.clone(),
                lifecycle: Some(lifecycle),
                start: Some(4),
                older: items(),
                after: 17,
                epoch: Some("ep".into()),
                notes: notes(),
            });
        }
        for state in [
            Lifecycle::Initializing,
            Lifecycle::Idle,
            Lifecycle::Running,
            Lifecycle::Error,
            Lifecycle::Closed,
        ] {
            let lifecycle = Some(LifecycleState {
                state,
                active_turn: None,
                stalled: None,
            });
            sessions.push(SessionBatch {
                lifecycle,
                ..bare.clone()
            });
        }
        vec![
            Batch::default(),
            Batch {
                sessions,
                notes: vec![],
            },
            Batch {
                sessions: vec![],
                notes: notes(),
            },
        ]
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn what_a_page_is_handed_is_written_as_serde_writes_it() {
        let items = items();
        check(&items);
        for item in &items {
            check(item);
        }
        for status in store_statuses() {
            check(&status);
        }
        for note in notes() {
            check(&note);
        }
        for batch in batches() {
            check(&batch);
            assert_eq!(batch.to_json(), serde_json::to_string(&batch).unwrap());
            let states = [
                None,
                Some(ConnectionState::Connecting),
                Some(ConnectionState::Live),
                Some(ConnectionState::CaughtUp),
                Some(ConnectionState::Reconnecting),
                Some(ConnectionState::Closed),
            ];
            for (i, state) in states.into_iter().enumerate() {
                let transport = [None, Some(Transport::WebSocket), Some(Transport::Sse)][i % 3];
                let client = ClientBatch {
                    state,
                    transport,
                    batch: batch.clone(),
                };
                check(&client);
                assert_eq!(client.to_json(), serde_json::to_string(&client).unwrap());
            }
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn client_messages_are_written_as_serde_writes_them() {
        let (id, session) = ("c1".to_string(), "s \"1\"".to_string());
        let mut msgs = vec![
            ClientMsg::Hello {
                protocols: vec![1, 2],
                max_frame: None,
                client: None,
                features: vec![],
            },
            ClientMsg::Hello {
                protocols: vec![],
                max_frame: Some(usize::MAX),
                client: Some("agentwire-js/0.1".into()),
                features: vec!["session_status".into(), "binary_frames".into()],
            },
            ClientMsg::Subscribe {
                session: session.clone(),
                after: 0,
                epoch: None,
                snapshot: None,
            },
            ClientMsg::Subscribe {
                session: session.clone(),
                after: 41,
                epoch: Some("e".into()),
                snapshot: Some(SnapshotRequest { items: 200 }),
            },
            ClientMsg::History {
                id: id.clone(),
                session: session.clone(),
                before: 10,
                limit: 5,
            },
            ClientMsg::Unsubscribe {
                session: session.clone(),
            },
            ClientMsg::StartTurn {
                id: id.clone(),
                session: session.clone(),
                prompt: "fix\nthe \"bug\" é😀".into(),
                turn_id: None,
            },
            ClientMsg::StartTurn {
                id: id.clone(),
                session: session.clone(),
                prompt: "".into(),
                turn_id: Some("t-1".into()),
            },
            ClientMsg::Interrupt {
                id: id.clone(),
                session: session.clone(),
                turn_id: None,
            },
            ClientMsg::Interrupt {
                id: id.clone(),
                session: session.clone(),
                turn_id: Some("t".into()),
            },
            ClientMsg::SetMode {
                id: id.clone(),
                session: session.clone(),
                mode: "plan".into(),
            },
            ClientMsg::SetModel {
                id: id.clone(),
                session: session.clone(),
                model: None,
                thinking: None,
            },
            ClientMsg::ResumeSession {
                id: id.clone(),
                session: session.clone(),
            },
            ClientMsg::DescribeSession {
                id: id.clone(),
                session: session.clone(),
            },
            ClientMsg::Ping { id: None },
            ClientMsg::Ping {
                id: Some(id.clone()),
            },
        ];
        for decision in [Decision::Allow, Decision::Deny] {
            msgs.push(ClientMsg::AnswerApproval {
                id: id.clone(),
                session: session.clone(),
                request_id: "a1".into(),
                decision,
            });
        }
        for thinking in [
            Thinking::Off,
            Thinking::Low,
            Thinking::Medium,
            Thinking::High,
        ] {
            msgs.push(ClientMsg::SetModel {
                id: id.clone(),
                session: session.clone(),
                model: Some("opus".into()),
                thinking: Some(thinking),
            });
        }
        for msg in &msgs {
            check(msg);
            assert_eq!(msg.encode(), serde_json::to_string(msg).unwrap());
        }
        check(&msgs);
        check(&WireError {
            code: "queue_full".into(),
            message: "…".into(),
        });
    }

    /// The seeded coding-agent session (the benches'), as a page gets it: every event's
    /// JSON, every drain (one per 16 frames) and the items at the end, as serde writes them.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_seeded_session_drains_as_serde_writes_it() {
        use crate::companion::seed::{events, SeedOptions};
        use crate::core::projector::Projector;
        use crate::core::wire;

        let options = SeedOptions {
            session: "ses_seed".into(),
            events: 3_000,
            tool_updates: Some((2, 5)),
        };
        let log: Vec<(u64, String)> = events(&options)
            .zip(1..)
            .map(|(e, seq)| {
                let e = e.into_sequenced(seq);
                check(&e);
                (seq, e.to_json())
            })
            .collect();
        let mut projector = Projector::new();
        let mut drained = 0;
        for per_frame in [1, 7] {
            let frames = log.chunks(per_frame).flat_map(|chunk| {
                let events = chunk.iter().map(|(seq, json)| (*seq, json.as_str()));
                wire::frame_encoded("ses_seed", "seed", events, usize::MAX)
            });
            for (i, frame) in frames.enumerate() {
                projector.handle_frame(&frame.text, 0).unwrap();
                if i % 16 == 15 {
                    let batch = projector.drain();
                    drained += batch
                        .sessions
                        .iter()
                        .map(|s| s.changes.len())
                        .sum::<usize>();
                    check(&batch);
                }
            }
            let items = projector.items("ses_seed");
            assert!(items.len() > 100, "{} items", items.len());
            check(items);
        }
        assert!(drained > 500, "{drained} changes drained");
    }
}
