//! Pieces of the typed fast path: a decoder may read a record as a borrowed typed struct
//! (`#[derive(Deserialize)]` over these field types) instead of a `serde_json::Value` tree,
//! see [`super::Decoder::record_text`].
//!
//! The rule that keeps the output identical: the fast path only *accepts* a record it reads
//! exactly as the `Value` path would; whenever the typed read fails (a field of another JSON
//! type, a duplicate field, an unexpected shape) or the record is not one it handles, it
//! returns `false` before emitting anything, and the record goes down the `Value` path,
//! which gives the same events and the same diagnostics as before.
//!
//! One difference is left, in the fields no typed struct names: serde skips them with
//! `IgnoredAny`, which checks a number's syntax but not its range, and a `\u` escape's four
//! digits but not that its surrogates pair. A record whose unread fields hold a number beyond
//! `f64` (`1e400`) or a lone surrogate (`"\ud800"`) is taken by the fast path; the `Value`
//! path refuses it as invalid JSON (as it does when the typed read fails for another reason).
//! Finding such values first would take a second scan of every line, 10–14 % of a
//! normalization (stop 41, BENCHMARKS.md), for values that no decoder reads.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use crate::core::json::{hex4, plain_run, short_escape};
use crate::core::time::Timestamp;
use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::{Map, Value};

/// A JSON string, borrowed from the line unless it has escapes.
#[derive(Default)]
pub(crate) struct Str<'a>(pub(crate) Cow<'a, str>);

impl std::ops::Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A record that the typed fast path reads in place, field by field, by [`read_record`].
pub(crate) trait Record<'a> {
    /// The bits of the fields that must be present (else the read fails).
    const REQUIRED: u32;

    /// Reads `key`'s value into its field and returns the field's bit; returns 0, reading
    /// nothing, for a key that is not one of its fields.
    fn field(&mut self, key: &str, value: &mut Scan<'a>) -> Result<u32, Unread>;

    /// Whether the read stopped because the record is not one this reader takes (a type it
    /// leaves to the `Value` path): valid JSON, which needs no check before that path.
    fn refused(&self) -> bool {
        false
    }
}

/// A read that [`Scan`] stopped: the text is not an object it reads itself exactly as
/// serde_json reads it (invalid JSON among such texts), a field is given twice or is of
/// another type, or a required one is missing. The caller takes the `Value` path, which
/// gives the line's events, or its diagnostic.
#[derive(Debug)]
pub(crate) struct Unread;

/// Reads `text`, a JSON object, into `record` (see [`Scan`]). A field given twice or a
/// required one missing fails the read, as in a derived struct; any other key's value is
/// skipped as `IgnoredAny` skips it. `scratch` is where strings are unescaped, kept by the
/// caller from one line to the next.
pub(crate) fn read_record<'a, R: Record<'a>>(
    text: &'a str,
    record: &mut R,
    scratch: &mut String,
) -> Result<(), Unread> {
    let mut s = Scan {
        text,
        at: 0,
        depth: 0,
        scratch: std::mem::take(scratch),
    };
    let read = s.record(record);
    *scratch = s.scratch;
    // What a long string left is not kept for the lines after it.
    if scratch.capacity() > 1 << 16 {
        *scratch = String::new();
    }
    read
}

impl<'a> Scan<'a> {
    /// The whole text as one object into `record`.
    fn record<R: Record<'a>>(&mut self, record: &mut R) -> Result<(), Unread> {
        if self.peek() != Some(b'{') {
            return Err(Unread);
        }
        let mut seen = 0u32;
        self.object(|key, s| match record.field(&key, s)? {
            0 => s.skip::<de::IgnoredAny>(),
            bit if seen & bit != 0 => Err(Unread),
            bit => {
                seen |= bit;
                Ok(())
            }
        })?;
        self.skip_ws();
        match self.at == self.text.len() && R::REQUIRED & !seen == 0 {
            true => Ok(()),
            false => Err(Unread),
        }
    }
}

/// The reader of [`read_record`]: it reads objects, arrays, strings (escapes undone), `true`,
/// `false`, `null` and integers of up to 18 digits itself, by hand, and hands anything else (a
/// float, a negative number, a `\u` escape of a surrogate) to serde_json, from where it stands
/// to that value's end. So every value is what serde_json reads for it, without the cost of a
/// derived struct (each optional field read through `deserialize_option`, the whole moved out
/// through serde's calls) and of serde's per-token calls: Codex's and Gemini's normalizations
/// take 9 and 13 % fewer instructions, and 15 and 23 % less time (BENCHMARKS.md, stop 43).
pub(crate) struct Scan<'a> {
    text: &'a str,
    at: usize,
    /// The objects the scanner is in (1 in the line's).
    depth: usize,
    /// Where a string with escapes is unescaped (its capacity kept from one to the next).
    scratch: String,
}

impl<'a> Scan<'a> {
    #[inline]
    fn skip_ws(&mut self) {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
    }

    #[inline]
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.text.as_bytes().get(self.at).copied()
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    /// At a string's opening quote: the string when it has no escape (read past), else
    /// `None` (nothing read). A control character fails, as in serde_json.
    #[inline]
    fn plain(&mut self) -> Result<Option<&'a str>, Unread> {
        let bytes = self.text.as_bytes();
        let start = self.at + 1;
        let end = plain_run(bytes, start);
        match bytes.get(end) {
            Some(b'"') => {
                self.at = end + 1;
                Ok(Some(&self.text[start..end]))
            }
            Some(b'\\') => Ok(None),
            _ => Err(Unread),
        }
    }

    /// `true`, `false` or `null` (`Some` of `Some(bool)` or `None`), read past; `None`,
    /// reading nothing, for any other value.
    fn word(&mut self) -> Option<Option<bool>> {
        match self.peek()? {
            b't' if self.literal("true") => Some(Some(true)),
            b'f' if self.literal("false") => Some(Some(false)),
            b'n' if self.literal("null") => Some(None),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        let found = self.text[self.at..].starts_with(word);
        self.at += if found { word.len() } else { 0 };
        found
    }

    /// The next value, read by serde_json from here to its end.
    pub(crate) fn serde<T: Deserialize<'a>>(&mut self) -> Result<T, Unread> {
        let mut values = serde_json::Deserializer::from_str(&self.text[self.at..]).into_iter();
        let value = values.next().and_then(Result::ok).ok_or(Unread)?;
        let span = &self.text.as_bytes()[self.at..self.at + values.byte_offset()];
        // serde_json refuses a line nested 128 deep, and would take the value alone: a value
        // that may reach that depth (or has many brackets in its strings) is left to it.
        let limit = 128 - self.depth;
        if span.len() >= 2 * limit
            && span.iter().filter(|&&b| b == b'[' || b == b'{').count() >= limit
        {
            return Err(Unread);
        }
        self.at += span.len();
        Ok(value)
    }

    /// A string.
    #[inline]
    pub(crate) fn str(&mut self) -> Result<Str<'a>, Unread> {
        if self.peek() != Some(b'"') {
            return Err(Unread);
        }
        match self.plain()? {
            Some(s) => Ok(Str(Cow::Borrowed(s))),
            None => self.escaped(),
        }
    }

    /// At a string with an escape: the string unescaped as serde_json unescapes it. A `\u`
    /// escape of a surrogate (half of a pair, or alone) or an escape serde_json refuses is
    /// left to serde_json.
    fn escaped(&mut self) -> Result<Str<'a>, Unread> {
        let bytes = self.text.as_bytes();
        let out = &mut self.scratch;
        out.clear();
        let mut i = self.at + 1;
        loop {
            let end = plain_run(bytes, i);
            out.push_str(&self.text[i..end]);
            let c = match (bytes.get(end), bytes.get(end + 1)) {
                (Some(b'"'), _) => {
                    self.at = end + 1;
                    return Ok(Str(Cow::Owned(out.as_str().to_owned())));
                }
                (Some(b'\\'), Some(&escape)) => match short_escape(escape) {
                    Some(c) => c,
                    None if escape == b'u' => {
                        let digits = self.text.get(end + 2..end + 6);
                        match hex4(digits).and_then(char::from_u32) {
                            Some(c) => {
                                out.push(c);
                                i = end + 6;
                                continue;
                            }
                            None => return self.serde(),
                        }
                    }
                    None => return self.serde(),
                },
                _ => return Err(Unread),
            };
            out.push(c);
            i = end + 2;
        }
    }

    /// A string, or `null` (`None`).
    pub(crate) fn opt_str(&mut self) -> Result<Option<Str<'a>>, Unread> {
        match self.null() {
            true => Ok(None),
            false => self.str().map(Some),
        }
    }

    /// A boolean, or `null` (`None`).
    pub(crate) fn opt_bool(&mut self) -> Result<Option<bool>, Unread> {
        self.word().ok_or(Unread)
    }

    /// A timestamp, as [`Stamp`] reads it.
    pub(crate) fn stamp(&mut self) -> Result<Stamp, Unread> {
        if self.peek() == Some(b'"') {
            return Ok(Stamp(Timestamp::parse_rfc3339(&self.str()?)));
        }
        self.serde()
    }

    /// Any value, as the `Value` serde_json reads: objects, arrays, strings, literals and
    /// integers of at most 18 digits built here, anything else by serde_json.
    pub(crate) fn value(&mut self) -> Result<Value, Unread> {
        let bytes = self.text.as_bytes();
        match self.peek() {
            Some(b'{') => {
                // A key given twice keeps its last value, as in serde_json's map.
                let mut map = Map::new();
                self.object(|key, s| {
                    map.insert(key.0.into_owned(), s.value()?);
                    Ok(())
                })?;
                return Ok(Value::Object(map));
            }
            Some(b'[') => {
                let mut items = Vec::new();
                self.elements(b']', |s| {
                    items.push(s.value()?);
                    Ok(())
                })?;
                return Ok(Value::Array(items));
            }
            Some(b'"') => return Ok(Value::String(self.str()?.0.into_owned())),
            Some(b't' | b'f' | b'n') => {
                if let Some(word) = self.word() {
                    return Ok(word.map_or(Value::Null, Value::Bool));
                }
            }
            Some(b'0'..=b'9') => {
                // `0`, or digits without a leading zero, ending where a value may end.
                let digits = bytes[self.at..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                let end = bytes.get(self.at + digits);
                let ends = matches!(
                    end,
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                );
                if ends && digits <= 18 && (digits == 1 || bytes[self.at] != b'0') {
                    let n = bytes[self.at..self.at + digits]
                        .iter()
                        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
                    self.at += digits;
                    return Ok(Value::from(n));
                }
            }
            _ => {}
        }
        self.serde()
    }

    /// `null`, read past; false (reading nothing) for any other value.
    pub(crate) fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal("null")
    }

    /// An object read for the fields `K` keeps, as [`Slots`] reads it (the others checked
    /// as [`Valid`] checks them); anything else is read by serde_json.
    pub(crate) fn slots<K: SlotKeys, const N: usize>(&mut self) -> Result<Slots<K, N>, Unread> {
        if self.peek() != Some(b'{') {
            return self.serde();
        }
        let mut slots = Slots::new(true);
        self.object(|key, s| match K::slot(&key) {
            Some(slot) => {
                slots.values[slot] = Some(s.value()?);
                Ok(())
            }
            None => s.skip::<Valid>(),
        })?;
        Ok(slots)
    }

    /// Steps past a container's opening bracket, one level deeper: serde_json refuses a line
    /// nested 128 deep.
    fn enter(&mut self) -> Result<(), Unread> {
        self.at += 1;
        self.depth += 1;
        match self.depth < 128 {
            true => Ok(()),
            false => Err(Unread),
        }
    }

    /// At a container's opening bracket: `each` reads each element, up to `close`, then the
    /// scanner reads past it.
    fn elements(
        &mut self,
        close: u8,
        mut each: impl FnMut(&mut Scan<'a>) -> Result<(), Unread>,
    ) -> Result<(), Unread> {
        self.enter()?;
        if !self.eat(close) {
            loop {
                each(self)?;
                if self.eat(b',') {
                    continue;
                }
                if self.eat(close) {
                    break;
                }
                return Err(Unread);
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// At an object (`{`): hands each key to `each`, which reads or skips its value, then
    /// reads past the object.
    pub(crate) fn object(
        &mut self,
        mut each: impl FnMut(Str<'a>, &mut Scan<'a>) -> Result<(), Unread>,
    ) -> Result<(), Unread> {
        self.elements(b'}', |s| {
            let key = s.str()?;
            match s.eat(b':') {
                true => each(key, s),
                false => Err(Unread),
            }
        })
    }

    /// Any value, checked as `T` (`IgnoredAny` or [`Valid`]) checks it, and dropped.
    pub(crate) fn skip<T: Deserialize<'a>>(&mut self) -> Result<(), Unread> {
        match self.peek() {
            Some(b'"') if self.plain()?.is_some() => Ok(()),
            _ if self.word().is_some() => Ok(()),
            _ => self.serde::<T>().map(drop),
        }
    }
}

/// A field read the way `Out::use_timestamp` reads it: an RFC 3339 string or a number of
/// milliseconds; anything else scalar (or absent, or null) stamps nothing. An array or an
/// object fails the typed read (the `Value` path takes the record).
#[derive(Default)]
pub(crate) struct Stamp(pub(crate) Option<Timestamp>);

impl<'de> Deserialize<'de> for Stamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Stamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Stamp, E> {
                Ok(Stamp(Timestamp::parse_rfc3339(s)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Stamp, E> {
                Ok(Stamp(Some(Timestamp::from_unix_millis(n))))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Stamp, E> {
                Ok(Stamp(
                    i64::try_from(n).ok().map(Timestamp::from_unix_millis),
                ))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Stamp, E> {
                Ok(Stamp(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Stamp, E> {
                Ok(Stamp(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Stamp, E> {
                Ok(Stamp(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// `deserialize_with` for an `Option<Value>` (or `Option<IgnoredAny>`) field that must tell
/// `null` (`Some(Null)`, as `obj.get(key)` sees it) from absent (`None`, with
/// `#[serde(default)]`).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// True when `text` can only be read as a JSON object (so a typed struct, which serde would
/// also read from an array, sees the same record as the `Value` path).
pub(crate) fn is_object_text(text: &str) -> bool {
    text.trim_ascii_start().starts_with('{')
}

/// The value of `type` when it is the record's first key and a string without escapes (as
/// every provider writes it): a cheap look that picks the typed reader to try, never a
/// substitute for it (the reader checks `type` again, and anything else).
pub(crate) fn leading_type(text: &str) -> Option<&str> {
    let rest = text
        .trim_ascii_start()
        .strip_prefix('{')?
        .trim_ascii_start();
    let rest = rest.strip_prefix("\"type\"")?.trim_ascii_start();
    let rest = rest.strip_prefix(':')?.trim_ascii_start();
    let rest = rest.strip_prefix('"')?;
    // Bytes, not chars: a type is a few ASCII letters, and `str::find` of a char set decodes
    // every character it passes.
    let end = rest.bytes().position(|b| b == b'"' || b == b'\\')?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// `T` read only from a JSON object: a derived struct would also read an array (its fields
/// by position), which the `Value` path does not take for an object.
pub(crate) struct Obj<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// Any JSON value read as `serde_json::Value` reads it, keeping nothing: the same
/// `deserialize_any` for every value and `deserialize_str` for every key (`Value`'s own calls),
/// so a line fails with exactly the error `Value` would give, without building a tree that is
/// thrown away with it. (`IgnoredAny` is not that: serde_json skips it with a laxer scanner,
/// e.g. a number too large for an `f64` passes.)
pub(crate) struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValidVisitor)
    }
}

struct ValidVisitor;

impl<'de> Visitor<'de> for ValidVisitor {
    type Value = Valid;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_none<E: de::Error>(self) -> Result<Valid, E> {
        Ok(Valid)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Valid, D::Error> {
        Valid::deserialize(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_key::<Str<'de>>()?.is_some() {
            map.next_value::<Valid>()?;
        }
        Ok(Valid)
    }
}

/// Where a typed read keeps the fields of an object it reads as [`Slots`]: each kept key's
/// place, `None` for the others.
pub(crate) trait SlotKeys {
    fn slot(key: &str) -> Option<usize>;
}

/// An object read for a few of its fields (`K` says which, and where each is kept): each the
/// `Value` serde_json reads for it (a repeated one keeps the last, as a `Value` map does), the
/// others checked as `Value` checks them ([`Valid`]) and dropped unbuilt, with no map and no
/// keys built. Anything but an object keeps no field, and is not `object`.
pub(crate) struct Slots<K, const N: usize> {
    pub(crate) object: bool,
    values: [Option<Value>; N],
    keys: PhantomData<K>,
}

impl<K: SlotKeys, const N: usize> Slots<K, N> {
    fn new(object: bool) -> Self {
        Slots {
            object,
            values: std::array::from_fn(|_| None),
            keys: PhantomData,
        }
    }

    /// The field `key`, one of those `K` keeps (a test build panics on any other).
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        let slot = K::slot(key);
        debug_assert!(slot.is_some(), "field {key:?} is not read typed");
        self.values[slot?].as_ref()
    }
}

impl<'de, K: SlotKeys, const N: usize> Deserialize<'de> for Slots<K, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K, const N: usize>(PhantomData<K>);
        impl<'de, K: SlotKeys, const N: usize> Visitor<'de> for V<K, N> {
            type Value = Slots<K, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut slots = Slots::new(true);
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    match K::slot(&key) {
                        Some(slot) => slots.values[slot] = Some(map.next_value()?),
                        None => {
                            map.next_value::<Valid>()?;
                        }
                    }
                }
                Ok(slots)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<Valid>()?.is_some() {}
                Ok(Slots::new(false))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Slots::new(false))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}
