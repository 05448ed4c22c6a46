//! Internally tagged enums (`{"kind": "tool_call", …}`) read by serde without its buffering:
//! how the companion reads the `Item`s of its stored projections. (Clients read frames, and
//! the items in them, with `core::json`.)
//!
//! serde's derive reads an internally tagged enum by first copying the whole object into a
//! tree of its own (`Content`: every string, every nested object), then reading the variant
//! from that tree; and it instantiates that tree's whole deserializer once for every type
//! inside. In the wasm package this was a third of the code (166 KB of 541 KB before
//! wasm-opt), and every snapshot and history page was read twice over (into the tree, then
//! from it). Every object we write has its tag first (serde's `Serialize` writes it first),
//! so [`deserialize`] reads the tag and hands the rest of the same map to an *externally*
//! tagged mirror of the enum, which reads it directly. An object whose tag comes later
//! (another writer's JSON) is read whole as a `serde_json::Value`, written again with the tag
//! first, and read that way: the same result, and the same errors but for the position they
//! name (the object's end), only slower.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Map, Value};

/// An enum serialized with `#[serde(tag = TAG)]`, read through its externally tagged mirror.
pub(crate) trait Tagged: Sized {
    /// The tag's key.
    const TAG: &'static str;
    /// What the error says is expected.
    const EXPECTING: &'static str;

    /// Reads the variant named `tag` from `rest`, the object's other entries (all of them:
    /// what the variant does not know is skipped, as serde does). Usually
    /// `Mirror::deserialize(Variant::new(tag, rest))` for a `#[serde(remote = "Self")]`
    /// mirror of the enum without its tag attribute.
    fn variant<'de, A: MapAccess<'de>>(tag: &str, rest: A) -> Result<Self, A::Error>;
}

/// `Deserialize::deserialize` for a [`Tagged`] enum.
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(TaggedVisitor(PhantomData))
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(key) = map.next_key::<Key<'de>>()? else {
            return Err(de::Error::missing_field(T::TAG));
        };
        if key.as_str() == T::TAG {
            let tag = map.next_value::<Key<'de>>()?;
            return T::variant(tag.as_str(), map);
        }
        // The tag is not first: the object whole, then again with its tag first.
        let mut fields = Map::new();
        fields.insert(key.as_str().to_owned(), map.next_value::<Value>()?);
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            fields.insert(key, value);
        }
        let tag = match fields.remove(T::TAG) {
            Some(Value::String(tag)) => tag,
            Some(other) => {
                return Err(de::Error::invalid_type(unexpected(&other), &"a string tag"));
            }
            None => return Err(de::Error::missing_field(T::TAG)),
        };
        let mut text = String::with_capacity(64);
        text.push('{');
        push_entry(&mut text, T::TAG, &Value::String(tag));
        for (key, value) in &fields {
            text.push(',');
            push_entry(&mut text, key, value);
        }
        text.push('}');
        serde_json::from_str::<Retagged<T>>(&text)
            .map(|r| r.0)
            .map_err(|e| {
                // Its position is in the text written here, not in the input (which gets its own).
                let message = e.to_string();
                let at = format!(" at line {} column {}", e.line(), e.column());
                de::Error::custom(message.strip_suffix(&at).unwrap_or(&message))
            })
    }
}

/// `"key":value`, as JSON.
fn push_entry(text: &mut String, key: &str, value: &Value) {
    text.push_str(&Value::String(key.to_owned()).to_string());
    text.push(':');
    text.push_str(&value.to_string());
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => de::Unexpected::Unsigned(u),
            (_, Some(i), _) => de::Unexpected::Signed(i),
            (_, _, f) => de::Unexpected::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// The enum read again from its re-encoded text (through [`deserialize`], tag first now).
struct Retagged<T>(T);

impl<'de, T: Tagged> de::Deserialize<'de> for Retagged<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d).map(Retagged)
    }
}

/// A key or a tag: borrowed from the input where it can be (no escapes), owned otherwise.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The object after its tag, as an externally tagged enum: the tag names the variant, the
/// rest of the map is the variant's fields.
pub(crate) struct Variant<'t, A> {
    tag: &'t str,
    rest: A,
}

impl<'t, A> Variant<'t, A> {
    pub(crate) fn new(tag: &'t str, rest: A) -> Variant<'t, A> {
        Variant { tag, rest }
    }
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Variant<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for Variant<'_, A> {
    type Error = A::Error;
    type Variant = Rest<A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Rest<A>), A::Error> {
        let name = seed.deserialize(StrDeserializer::<A::Error>::new(self.tag))?;
        Ok((name, Rest(self.rest)))
    }
}

/// The fields of the variant: the rest of the tagged object.
pub(crate) struct Rest<A>(A);

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn unit_variant(mut self) -> Result<(), A::Error> {
        while self
            .0
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        seed.deserialize(MapAccessDeserializer::new(self.0))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, A::Error> {
        Err(de::Error::invalid_type(de::Unexpected::Map, &visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self.0)
    }
}
