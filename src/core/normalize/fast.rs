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

use crate::core::time::Timestamp;
use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::Value;

/// A JSON string, borrowed from the line unless it has escapes.
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
