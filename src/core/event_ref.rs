//! An event borrowed from the frame it was read from, and [`EventView`]: what the projections
//! read of an event, owned or borrowed.
//!
//! A client reads most of every frame only to drop it: the projections look at a few fields of
//! `data`, and an owned [`Event`] builds a map of owned strings for all of it, then frees it. An
//! [`EventRef`] keeps its strings in the frame's text (a string is copied only when it holds an
//! escape) and its `data` as the list of fields the text holds, looked up where it is read. The
//! cursor, [`Dedup`](super::dedup::Dedup), the [`TurnProjector`](super::lifecycle::TurnProjector)
//! and the [`Timeline`](super::timeline::Timeline) take either through [`EventView`].
//!
//! Invariant: an [`EventRef`] is read from exactly the texts an [`Event`] is read from, checked
//! as [`Event::new`] checks, and [`EventRef::into_event`] is the [`Event`] that text reads as
//! (tests below). Where it cannot read a text, its error is not the one to show: the caller
//! reads the text as an [`Event`] to say why.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::event::{Event, EventError, EventId, EventType, Provider, WireParts};
use super::json::{json_fields, FromJson, JsonError, JsonObject, Reader};
use super::time::Timestamp;

pub mod packed;

/// What the projections read of an event: implemented by [`Event`] and [`EventRef`].
pub trait EventView {
    fn id(&self) -> &EventId;
    /// The id's 128 bits ([`EventId::bits`]), the key the projections remember it by.
    fn id_bits(&self) -> u128 {
        self.id().bits()
    }
    fn kind(&self) -> EventType;
    fn session_id(&self) -> &str;
    fn run_id(&self) -> Option<&str>;
    fn sequence(&self) -> u64;
    fn timestamp(&self) -> Timestamp;
    fn correlation_id(&self) -> Option<&str>;
    /// A string field of `data`, if present (`None` for a field of another type).
    fn data_str(&self, key: &str) -> Option<&str>;
    /// A field of `data`, if present.
    fn data_value(&self, key: &str) -> Option<Cow<'_, Value>>;
    /// Whether `data` has the field (of whatever type).
    fn data_has(&self, key: &str) -> bool;
    /// The owned event (what a caller that keeps events stores).
    fn into_event(self) -> Event
    where
        Self: Sized;
}

impl EventView for Event {
    fn id(&self) -> &EventId {
        Event::id(self)
    }
    fn kind(&self) -> EventType {
        Event::kind(self)
    }
    fn session_id(&self) -> &str {
        Event::session_id(self)
    }
    fn run_id(&self) -> Option<&str> {
        Event::run_id(self)
    }
    fn sequence(&self) -> u64 {
        Event::sequence(self)
    }
    fn timestamp(&self) -> Timestamp {
        Event::timestamp(self)
    }
    fn correlation_id(&self) -> Option<&str> {
        Event::correlation_id(self)
    }
    fn data_str(&self, key: &str) -> Option<&str> {
        Event::data_str(self, key)
    }
    fn data_value(&self, key: &str) -> Option<Cow<'_, Value>> {
        self.data().get(key).map(Cow::Borrowed)
    }
    fn data_has(&self, key: &str) -> bool {
        self.data().contains_key(key)
    }
    fn into_event(self) -> Event {
        self
    }
}

/// An event whose strings are borrowed from the text it was read from (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct EventRef<'a> {
    id: LazyId,
    kind: EventType,
    session_id: Cow<'a, str>,
    run_id: Option<Cow<'a, str>>,
    sequence: u64,
    timestamp: Timestamp,
    provider: Provider,
    correlation_id: Option<Cow<'a, str>>,
    data: Fields<'a>,
    /// Where `data` came from: what [`EventView::into_event`] keeps.
    source: Source<'a>,
    metadata: Cow<'a, JsonObject>,
}

/// An id known by its bits, spelled out when first asked for (a packed frame carries only the
/// bits, and the projections key ids by them; the text is wanted for a turn's terminal).
#[derive(Clone, Debug)]
struct LazyId {
    bits: u128,
    text: OnceCell<EventId>,
}

impl LazyId {
    fn of(id: EventId) -> LazyId {
        LazyId {
            bits: id.bits(),
            text: OnceCell::from(id),
        }
    }

    fn id(&self) -> &EventId {
        self.text.get_or_init(|| EventId::from_hash(self.bits))
    }
}

/// The bits are the id (its 32 hex digits), whether or not it was spelled out.
impl PartialEq for LazyId {
    fn eq(&self, other: &LazyId) -> bool {
        self.bits == other.bits
    }
}

/// An [`EventRef`]'s `data` as a whole.
#[derive(Clone, Debug, PartialEq)]
enum Source<'a> {
    /// The object's text in the frame (`""` for `null` or absent).
    Text(&'a str),
    /// An owned event's.
    Object(&'a JsonObject),
    /// A packed frame's fields (no text: the owned event's map is made of them).
    Packed,
}

impl EventView for EventRef<'_> {
    fn id(&self) -> &EventId {
        self.id.id()
    }
    fn id_bits(&self) -> u128 {
        self.id.bits
    }
    fn kind(&self) -> EventType {
        self.kind
    }
    fn session_id(&self) -> &str {
        &self.session_id
    }
    fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }
    fn sequence(&self) -> u64 {
        self.sequence
    }
    fn timestamp(&self) -> Timestamp {
        self.timestamp
    }
    fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }
    fn data_str(&self, key: &str) -> Option<&str> {
        match self.data.get(key)? {
            Field::Str(s) => Some(s),
            Field::Value(_) => None,
        }
    }
    fn data_value(&self, key: &str) -> Option<Cow<'_, Value>> {
        Some(match self.data.get(key)? {
            Field::Str(s) => Cow::Owned(Value::String(s.to_string())),
            Field::Value(v) => Cow::Borrowed(&**v),
        })
    }
    fn data_has(&self, key: &str) -> bool {
        self.data.get(key).is_some()
    }
    fn into_event(self) -> Event {
        self.owned(|_, fields| fields.into_object())
    }
}

impl<'a> EventRef<'a> {
    /// The owned event, its `data` kept as the text it was read from when that text is
    /// [canonical](crate::core::json::is_canonical) (what our writer wrote: a stored line), so
    /// no map is built for it. The client's module never calls this, so the check is not in
    /// it: what a page keeps, it reads.
    pub fn into_event_keeping_text(self) -> Event {
        self.owned(|text, fields| {
            JsonObject::canonical(text).unwrap_or_else(|| fields.into_object())
        })
    }

    /// The owned event, `data` made by `data` from its text and fields when it was read.
    fn owned(self, data: impl FnOnce(&'a str, Fields<'a>) -> JsonObject) -> Event {
        let data = match self.source {
            Source::Object(object) => object.clone(),
            Source::Text(text) => data(text, self.data),
            Source::Packed => self.data.into_object(),
        };
        Event::from_parts(
            self.id.id().clone(),
            self.kind,
            &Arc::from(&*self.session_id),
            self.run_id.as_deref().map(Arc::from),
            self.sequence,
            self.timestamp,
            self.provider,
            self.correlation_id.as_deref().map(Arc::from),
            data,
            self.metadata.into_owned(),
        )
        // (Display, not `expect`'s Debug: see `core::quoted`.)
        .unwrap_or_else(|e| panic!("an EventRef is checked as Event::new checks: {e}"))
    }
}

impl<'a> EventRef<'a> {
    /// An owned event seen as borrowed (its strings and values are not copied; its fields are
    /// listed), for code that takes either as an `EventRef`.
    pub fn of(event: &'a Event) -> EventRef<'a> {
        let data = (event.data().iter())
            .map(|(k, v)| {
                let field = match v {
                    Value::String(s) => Field::Str(Cow::Borrowed(s)),
                    v => Field::Value(Cow::Borrowed(v)),
                };
                (Cow::Borrowed(k.as_str()), field)
            })
            .collect();
        EventRef {
            id: LazyId::of(event.id().clone()),
            kind: event.kind(),
            session_id: Cow::Borrowed(event.session_id()),
            run_id: event.run_id().map(Cow::Borrowed),
            sequence: event.sequence(),
            timestamp: event.timestamp(),
            provider: event.provider(),
            correlation_id: event.correlation_id().map(Cow::Borrowed),
            data: Fields(data),
            source: Source::Object(event.data_object()),
            metadata: Cow::Borrowed(event.metadata_object()),
        }
    }
}

/// An object's fields in the order of the text; a lookup takes a key's last one, as the map
/// read from the same text keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Fields<'a>(Vec<(Cow<'a, str>, Field<'a>)>);

#[derive(Clone, Debug, PartialEq)]
enum Field<'a> {
    Str(Cow<'a, str>),
    Value(Cow<'a, Value>),
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&Field<'a>> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The object, as a map (a repeated key's last value, as serde_json's reader keeps it).
    fn into_object(self) -> JsonObject {
        let mut data = Map::new();
        for (key, field) in self.0 {
            let value = match field {
                Field::Str(s) => Value::String(s.into_owned()),
                Field::Value(v) => v.into_owned(),
            };
            data.insert(key.into_owned(), value);
        }
        JsonObject::from_map(data)
    }
}

/// `data` as read: its fields (none for `null` or absent), or a value that is not an object
/// (refused in [`EventRef::checked`]'s order of checks, as [`Event::new`] would).
enum Data<'a> {
    /// The fields, and the object's text (`""` for `null`).
    Fields(Fields<'a>, &'a str),
    NotAnObject,
}

impl<'a> FromJson<'a> for Data<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, JsonError> {
        if r.peek() != Some(b'{') {
            return Ok(match r.value()? {
                Value::Null => Data::Fields(Fields::default(), ""),
                _ => Data::NotAnObject,
            });
        }
        let (fields, text) = r.spanned(|r| {
            r.object()?;
            let mut fields = Vec::new();
            while let Some(key) = r.key()? {
                let field = match r.peek() {
                    Some(b'"') => Field::Str(r.string()?),
                    _ => Field::Value(Cow::Owned(r.value()?)),
                };
                fields.push((key, field));
            }
            Ok(fields)
        })?;
        Ok(Data::Fields(Fields(fields), text))
    }

    fn absent() -> Option<Self> {
        Some(Data::Fields(Fields::default(), ""))
    }
}

/// The wire's fields of an event, before the checks of [`Event::new`].
struct Raw<'a> {
    id: Option<Cow<'a, str>>,
    kind: Cow<'a, str>,
    session_id: Cow<'a, str>,
    run_id: Option<Cow<'a, str>>,
    sequence: u64,
    timestamp: Cow<'a, str>,
    provider: Provider,
    correlation_id: Option<Cow<'a, str>>,
    data: Data<'a>,
    metadata: Option<Value>,
}

impl<'a> FromJson<'a> for EventRef<'a> {
    fn read(r: &mut Reader<'a>) -> Result<EventRef<'a>, JsonError> {
        r.object()?;
        let raw: Raw<'a> = json_fields!(r, Raw {
            id,
            kind as "type",
            session_id,
            run_id,
            sequence = 0,
            timestamp,
            provider,
            correlation_id,
            data,
            metadata,
        })?;
        EventRef::checked(raw).map_err(|e| r.error(e))
    }
}

impl<'a> EventRef<'a> {
    /// The checks of [`Event::new`] ([`WireParts::check`], as serde's reader makes them).
    fn checked(raw: Raw<'a>) -> Result<EventRef<'a>, EventError> {
        let (id, kind, timestamp) = WireParts {
            id: raw.id.as_deref(),
            kind: &raw.kind,
            session_id: &raw.session_id,
            run_id: raw.run_id.as_deref(),
            sequence: raw.sequence,
            timestamp: &raw.timestamp,
            correlation_id: raw.correlation_id.as_deref(),
            data_is_object: matches!(raw.data, Data::Fields(..)),
            metadata_is_object: matches!(raw.metadata, None | Some(Value::Null | Value::Object(_))),
        }
        .check()?;
        let Data::Fields(data, text) = raw.data else {
            return Err(EventError::NotAnObject { field: "data" });
        };
        let metadata = match raw.metadata {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        Ok(EventRef {
            id: LazyId::of(id),
            kind,
            session_id: raw.session_id,
            run_id: raw.run_id,
            sequence: raw.sequence,
            timestamp,
            provider: raw.provider,
            correlation_id: raw.correlation_id,
            data,
            source: Source::Text(text),
            metadata: Cow::Owned(JsonObject::from_map(metadata)),
        })
    }
}

/// An `events` frame read with its events borrowed (see [`EventsRef::decode`]).
#[derive(Clone, Debug, PartialEq)]
pub struct EventsRef<'a> {
    pub session: Cow<'a, str>,
    pub epoch: Cow<'a, str>,
    pub events: Vec<EventRef<'a>>,
}

impl<'a> EventsRef<'a> {
    /// The frame as an `events` frame, when it is one this reads whole; `None` for any other
    /// frame, and for any text [`ServerMsg::decode`](super::wire::ServerMsg::decode) refuses
    /// (which then says why).
    pub fn decode(frame: &'a str) -> Option<EventsRef<'a>> {
        let mut r = Reader::new(frame);
        r.object().ok()?;
        if r.tag("t").ok()? != "events" {
            return None;
        }
        let read = |r: &mut Reader<'a>| -> Result<EventsRef<'a>, JsonError> {
            json_fields!(
                r,
                EventsRef {
                    session,
                    epoch,
                    events
                }
            )
        };
        let events = read(&mut r).ok()?;
        r.end().ok()?;
        Some(events)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::core::wire::ServerMsg;

    /// Every text reads as an `EventRef` exactly when serde's reader of `Event` (the
    /// companion's, written apart) reads it, and then as the same event, through every
    /// accessor the projections use; a refusal names the same first failure.
    fn check(text: &str) {
        let owned = serde_json::from_str::<Event>(text).map_err(|e| e.to_string());
        let borrowed = Reader::read_all::<EventRef>(text);
        assert_eq!(
            Reader::read_all::<Event>(text).ok().as_ref(),
            owned.as_ref().ok(),
            "{text}"
        );
        match (&owned, borrowed) {
            (Ok(event), Ok(view)) => {
                // Read from the text, and seen through an owned event.
                for view in [&view, &EventRef::of(event)] {
                    for key in [
                        "delta",
                        "content",
                        "n",
                        "tool_input",
                        "absent",
                        "dup",
                        "nul",
                    ] {
                        assert_eq!(view.data_str(key), event.data_str(key), "{text}: {key}");
                        assert_eq!(view.data_value(key), EventView::data_value(event, key));
                        assert_eq!(view.data_has(key), EventView::data_has(event, key));
                    }
                    assert_eq!(EventView::id(view), event.id(), "{text}");
                    assert_eq!(EventView::run_id(view), event.run_id(), "{text}");
                    assert_eq!(EventView::correlation_id(view), event.correlation_id());
                    assert_eq!(&view.clone().into_event(), event, "{text}");
                }
                // Read as a stored line: the same event; its `data` text kept as it is, with
                // no map, exactly when it is canonical; the client's reading builds the map.
                let stored = Event::from_written_json(text).unwrap();
                let data = crate::core::json::JsonObject::from_map(event.data().clone());
                let canonical = text.contains(data.text()) && !data.is_empty();
                assert_eq!(stored.data_object().forms().1, !canonical, "{text}");
                assert_eq!(&stored, event, "{text}");
                assert_eq!(stored.data(), event.data(), "{text}");
                assert_eq!(stored.data_object().forms(), (true, true), "{text}");
                let client = Reader::read_all::<Event>(text).unwrap();
                assert!(client.data_object().forms().1, "{text}");
            }
            (Err(serde), Err(ours)) => {
                let ours = ours.to_string();
                let first = |m: &str| m.split(" at line ").next().unwrap_or("").to_owned();
                let checked = ["event", "must", "required", "timestamp"];
                if checked.iter().any(|word| ours.contains(word)) {
                    assert_eq!(first(serde), first(&ours), "{text}");
                }
            }
            (owned, borrowed) => panic!("{text}: {owned:?} but {borrowed:?}"),
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_event_ref_reads_what_an_event_reads() {
        let base = json!({
            "id": "evt_0123456789abcdef0123456789abcdef",
            "type": "message_streamed",
            "session_id": "s1",
            "run_id": "r1",
            "sequence": 3,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "provider": "claude",
            "data": {"delta": "hé\n\"x\"", "n": 2, "tool_input": {"a": [1, "b"]}, "nul": null},
            "metadata": {"m": 1},
            "schema_version": 1,
        });
        let with = |key: &str, value: Value| {
            let mut v = base.clone();
            v[key] = value;
            v.to_string()
        };
        let without = |key: &str| {
            let mut v = base.clone();
            v.as_object_mut().unwrap().remove(key);
            v.to_string()
        };
        let mut texts = vec![base.to_string()];
        // Absent or null optional parts, a derived id, escapes in every borrowed string.
        for key in [
            "id",
            "run_id",
            "data",
            "metadata",
            "sequence",
            "schema_version",
        ] {
            texts.push(without(key));
        }
        for (key, value) in [
            ("data", Value::Null),
            ("metadata", Value::Null),
            ("run_id", Value::Null),
            ("correlation_id", json!("c\\1")),
            ("session_id", json!("s\"1")),
            ("run_id", json!("r\u{1F600}")),
            ("data", json!({"content": "plain", "delta": ""})),
            ("unknown", json!({"deep": [1, 2]})),
        ] {
            texts.push(with(key, value));
        }
        // A duplicate key in data: the last one counts, as in the map.
        texts.push(
            base.to_string()
                .replace(r#""n":2"#, r#""dup":1,"n":2,"dup":"two""#),
        );
        texts.push(
            base.to_string()
                .replace(r#""n":2"#, r#""dup":"one","n":2,"dup":3"#),
        );
        // Refused by both: every check of Event::new, and malformed values.
        for (key, value) in [
            ("data", json!(5)),
            ("data", json!([1])),
            ("metadata", json!("x")),
            ("type", json!("message_exploded")),
            ("timestamp", json!("yesterday")),
            ("id", json!("evt_1")),
            ("session_id", json!("")),
            ("run_id", json!("")),
            ("provider", json!("nobody")),
            ("sequence", json!(-1)),
            ("correlation_id", json!(7)),
        ] {
            texts.push(with(key, value));
        }
        // Two failures at once: both readers report the same one.
        let mut two = base.clone();
        two["type"] = json!("nope");
        two["session_id"] = json!("");
        texts.push(two.to_string());
        two["type"] = json!("run_started");
        two["data"] = json!(1);
        texts.push(two.to_string());
        texts.push(without("type"));
        texts.push(without("provider"));
        texts.push(
            base.to_string()
                .replace(r#""sequence":3"#, r#""sequence":3,"sequence":4"#),
        );
        texts.push(base.to_string().replace(r#""n":2"#, r#""n":2e999"#));
        texts.push(base.to_string().replace(r#""n":2"#, r#""n":"\ud800""#));
        for text in &texts {
            check(text);
        }
    }

    /// The timeline makes the same items of an event read borrowed as of the owned one, for
    /// every kind of value its fields take (a string, an object, a number, null, absent).
    #[wasm_bindgen_test(unsupported = test)]
    fn the_timeline_reads_borrowed_events_as_owned_ones() {
        use crate::core::timeline::Timeline;
        let values = [json!("out\nput"), json!({"a": [1]}), json!(7), Value::Null];
        let mut texts = Vec::new();
        let mut seq = 0;
        let mut push = |kind: &str, data: Value| {
            seq += 1;
            texts.push(
                json!({
                    "type": kind, "session_id": "s1", "run_id": "r1", "sequence": seq,
                    "timestamp": "2026-01-01T00:00:00Z", "provider": "claude", "data": data,
                })
                .to_string(),
            );
        };
        for (i, v) in values.iter().enumerate() {
            let id = format!("t{i}");
            push(
                "tool_call_started",
                json!({"tool_call_id": id, "tool_name": "Bash", "tool_input": v}),
            );
            push(
                "tool_call_updated",
                json!({"tool_call_id": id, "title": "x", "output_delta": "d"}),
            );
            let end = if i % 2 == 0 {
                "tool_call_completed"
            } else {
                "tool_call_failed"
            };
            push(
                end,
                json!({"tool_call_id": id, "tool_output": v, "error": v, "error_message": v}),
            );
            push(
                "message_streamed",
                json!({"message_id": format!("m{i}"), "delta": v}),
            );
            push(
                "message_received",
                json!({"message_id": format!("m{i}"), "content": v, "discarded": v}),
            );
            push(
                "token_usage_updated",
                json!({"input_tokens": v, "cost_usd": v}),
            );
            push("todo_updated", json!({"items": v}));
            push(
                "error_occurred",
                json!({"provider_error": {"message": v}, "message": v}),
            );
            push(
                "tool_approval_requested",
                json!({"request_id": format!("q{i}"), "tool_input": v}),
            );
        }
        let (mut owned, mut borrowed) = (Timeline::new(), Timeline::new());
        for text in &texts {
            owned.handle_event(&Reader::read_all::<Event>(text).unwrap());
            borrowed.handle_event(&Reader::read_all::<EventRef>(text).unwrap());
        }
        assert_eq!(borrowed.items(), owned.items());
        assert_eq!(borrowed.usage(), owned.usage());
        assert!(owned.items().len() > 10, "{:?}", owned.items());
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn an_events_frame_reads_as_server_msg_reads_it() {
        let event = r#"{"type":"run_started","session_id":"s1","run_id":"r1","sequence":1,"timestamp":"2026-01-01T00:00:00Z","provider":"demo"}"#;
        let frame = |rest: &str| {
            format!(r#"{{"t":"events","session":"s1","epoch":"e1","events":[{event}]{rest}}}"#)
        };
        let read = |text: &str| {
            EventsRef::decode(text).map(|f| {
                let events: Vec<Event> = f.events.into_iter().map(EventRef::into_event).collect();
                (f.session.into_owned(), f.epoch.into_owned(), events)
            })
        };
        let owned = |text: &str| match ServerMsg::decode(text, usize::MAX) {
            Ok(ServerMsg::Events {
                session,
                epoch,
                events,
            }) => Some((session, epoch, events)),
            _ => None,
        };
        for text in [
            frame(""),
            frame(r#","extra":[1]"#),
            r#"{"session":"s1","t":"events","events":[],"epoch":"e1"}"#.to_owned(),
            frame(r#","session":"s2""#),
            frame("").replace("events\",", "welcome\","),
            frame("").replace("run_started", "run_stopped"),
            frame("") + " x",
            frame("").replace(r#","epoch":"e1""#, ""),
            r#"{"t":"pong"}"#.to_owned(),
            "[]".to_owned(),
        ] {
            assert_eq!(read(&text), owned(&text), "{text}");
        }
    }
}
