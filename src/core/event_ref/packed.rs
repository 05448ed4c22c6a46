//! Packed `events` frames: the same events as an `events` frame's JSON, in a binary form that
//! a client reads without scanning text (the `packed_events` feature, docs/protocol.md).
//!
//! A JSON reader looks at every byte of a frame: each key is compared, each string scanned for
//! its closing quote and escapes, each id and timestamp parsed from its digits. Here every
//! string is its length and its UTF-8 bytes (never unescaped), an id is its 16 bytes,
//! a timestamp its milliseconds, a type and a provider one byte each, and `data`'s keys and
//! values are listed in the order of the JSON object. What a packed frame says is exactly what
//! the JSON frame it was made from says: [`pack`] reads that frame, and [`unpack`] gives the
//! [`EventsRef`] the JSON reads as (tests below and in the projector's).
//!
//! ```text
//! frame    = MAGIC VERSION varint(length) text str(session) str(epoch) varint(count) event{count}
//! event    = flags:u8 id:16 type:u8 [str(session_id)] [str(run_id)] varint(sequence)
//!            zigzag(timestamp ms) provider:u8 [str(correlation_id)] fields(data) str(metadata)
//! flags    = 1: session_id differs from the frame's session, 2: run_id, 4: correlation_id
//! fields   = varint(count) (str(key) value){count}
//! value    = 0 str(string) | 1 str(JSON text of any other value)
//! str      = varint(length): the next `length` bytes of `text`
//! ```
//!
//! `text` is every string of the frame, in the order they are read: checked as UTF-8 once, then
//! cut at each string's length (a cut inside a character is refused).
//!
//! `metadata` is the object's JSON text, empty for `{}`. A varint is LEB128 (at most 10 bytes).
//! The type is its index in [`EventType::ALL`], the provider its index in [`Provider::ALL`]:
//! both lists only grow at their end, and a test pins them. [`MAGIC`] is a byte no JSON text
//! and no UTF-8 text starts with, so a binary message says which it is by its first byte.

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::Value;

use super::{EventRef, EventsRef, Field, Fields, LazyId, Source};
use crate::core::event::{EventType, Provider};
use crate::core::json::{to_json, JsonObject, Reader};
use crate::core::time::Timestamp;

/// The first byte of a packed frame (a UTF-8 continuation byte: no text starts with it).
pub const MAGIC: u8 = 0xA7;
/// The packing's version, the second byte.
pub const VERSION: u8 = 1;

const SESSION: u8 = 1;
const RUN: u8 = 2;
const CORRELATION: u8 = 4;

/// The first and last millisecond an RFC 3339 timestamp spells (years 0000 to 9999).
const EARLIEST_MS: i64 = -62_167_219_200_000;
const LATEST_MS: i64 = 253_402_300_799_999;

/// Whether a binary frame is packed (else it is JSON text).
pub fn is_packed(frame: &[u8]) -> bool {
    frame.first() == Some(&MAGIC)
}

/// The packed form of an `events` frame's JSON text; `None` for any other frame (and for a
/// text that does not read as one), which then goes as it is.
pub fn pack(frame: &str) -> Option<Vec<u8>> {
    let events = EventsRef::decode(frame)?;
    let mut p = Packer {
        records: Vec::with_capacity(events.events.len() * 40 + 16),
        text: String::with_capacity(frame.len() / 2),
    };
    p.str(&events.session);
    p.str(&events.epoch);
    p.varint(events.events.len() as u64);
    for e in &events.events {
        let mut flags = 0;
        if *e.session_id != *events.session {
            flags |= SESSION;
        }
        if e.run_id.is_some() {
            flags |= RUN;
        }
        if e.correlation_id.is_some() {
            flags |= CORRELATION;
        }
        p.records.push(flags);
        p.records.extend(e.id.bits.to_be_bytes());
        // Declared in the order of `ALL`: a value's discriminant is its index there.
        p.records.push(e.kind as u8);
        if flags & SESSION != 0 {
            p.str(&e.session_id);
        }
        if let Some(run) = &e.run_id {
            p.str(run);
        }
        p.varint(e.sequence);
        let ms = e.timestamp.unix_millis();
        p.varint(((ms << 1) ^ (ms >> 63)) as u64);
        p.records.push(e.provider as u8);
        if let Some(c) = &e.correlation_id {
            p.str(c);
        }
        p.varint(e.data.0.len() as u64);
        for (key, field) in &e.data.0 {
            p.str(key);
            match field {
                Field::Str(s) => {
                    p.records.push(0);
                    p.str(s);
                }
                Field::Value(v) => {
                    p.records.push(1);
                    p.str(&to_json(&**v));
                }
            }
        }
        p.str(if e.metadata.is_empty() {
            ""
        } else {
            e.metadata.text()
        });
    }
    let mut out = Vec::with_capacity(12 + p.text.len() + p.records.len());
    out.extend([MAGIC, VERSION]);
    put_varint(&mut out, p.text.len() as u64);
    out.extend_from_slice(p.text.as_bytes());
    out.append(&mut p.records);
    Some(out)
}

/// A frame being packed: the records, and the text their strings are taken from.
struct Packer {
    records: Vec<u8>,
    text: String,
}

impl Packer {
    fn varint(&mut self, n: u64) {
        put_varint(&mut self.records, n);
    }

    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.text.push_str(s);
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a packed frame: the events the JSON frame it was made from reads as, or why not
/// (with the byte offset where it stopped).
pub fn unpack(frame: &[u8]) -> Result<EventsRef<'_>, String> {
    let mut r = Bytes {
        bytes: frame,
        at: 0,
        text: "",
        next: 0,
        failed: None,
    };
    let (magic, version) = (r.byte(), r.byte());
    if magic != MAGIC {
        r.fail("not a packed frame");
    }
    r.check()?;
    if version != VERSION {
        return Err(format!("packed frame of version {version}, not {VERSION}"));
    }
    // The strings' text, checked as UTF-8 once.
    let len = r.len();
    let at = r.at;
    let text = r.take(len);
    r.check()?;
    r.text = std::str::from_utf8(text)
        .map_err(|e| format!("packed frame: not UTF-8 at byte {}", at + e.valid_up_to()))?;
    let session = r.str();
    let epoch = r.str();
    let count = r.varint();
    // Each event takes at least 22 bytes: a count past what is left is a lie.
    if count > (frame.len() - r.at) as u64 / 22 {
        r.fail("more events than bytes");
    }
    r.check()?;
    let mut events = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let event = r.event(session)?;
        r.check()?;
        events.push(event);
    }
    if r.at != frame.len() {
        r.fail("bytes after the last event");
    } else if r.next != r.text.len() {
        r.fail("text no string takes");
    }
    r.check()?;
    Ok(EventsRef {
        session: Cow::Borrowed(session),
        epoch: Cow::Borrowed(epoch),
        events,
    })
}

/// A packed frame being read: its records at `at`, its strings' text from `next`.
///
/// A read that fails notes where and why (the first failure is kept), gives a zero or an empty
/// string, and leaves the cursor at the end, so that every read after it fails too; the caller
/// asks [`Bytes::check`] once per event instead of a `Result` per byte.
struct Bytes<'a> {
    bytes: &'a [u8],
    at: usize,
    text: &'a str,
    next: usize,
    failed: Option<(usize, &'static str)>,
}

impl<'a> Bytes<'a> {
    #[cold]
    fn fail(&mut self, what: &'static str) {
        self.failed.get_or_insert((self.at, what));
        self.at = self.bytes.len();
    }

    /// The first failure since the start, as the frame's error.
    #[inline]
    fn check(&self) -> Result<(), String> {
        match self.failed {
            None => Ok(()),
            Some((at, what)) => Err(format!("packed frame: {what} at byte {at}")),
        }
    }

    #[inline]
    fn byte(&mut self) -> u8 {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                b
            }
            None => {
                self.fail("truncated");
                0
            }
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> &'a [u8] {
        match self.bytes.get(self.at..).and_then(|rest| rest.get(..n)) {
            Some(taken) => {
                self.at += n;
                taken
            }
            None => {
                self.fail("truncated");
                &[]
            }
        }
    }

    /// A varint: one byte below 128 (a length, a sequence's low numbers) read at once.
    #[inline]
    fn varint(&mut self) -> u64 {
        match self.bytes.get(self.at) {
            Some(&b) if b < 0x80 => {
                self.at += 1;
                u64::from(b)
            }
            _ => self.long_varint(),
        }
    }

    #[inline(never)]
    fn long_varint(&mut self) -> u64 {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte();
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return n;
            }
        }
        self.fail("a varint of more than 10 bytes");
        0
    }

    /// The entry of `list` the next byte indexes; `fallback`, with a failure noted, past its end.
    #[inline]
    fn pick<T: Copy>(&mut self, list: &[T], what: &'static str, fallback: T) -> T {
        match list.get(usize::from(self.byte())) {
            Some(&entry) => entry,
            None => {
                self.fail(what);
                fallback
            }
        }
    }

    /// A length (a varint that fits memory: anything longer than the frame fails later).
    #[inline]
    fn len(&mut self) -> usize {
        usize::try_from(self.varint()).unwrap_or(usize::MAX)
    }

    /// The next string: the text's next `length` bytes, which must end on a character.
    #[inline]
    fn str(&mut self) -> &'a str {
        let at = self.at;
        let len = self.len();
        let end = self.next.saturating_add(len);
        match self.text.get(self.next..end) {
            Some(s) => {
                self.next = end;
                s
            }
            None => {
                self.at = at;
                self.fail("a string past its text, or inside a character,");
                ""
            }
        }
    }

    /// One event, or a failure noted (for [`Bytes::check`]); `Err` for a value that is not
    /// JSON, which says more than a place.
    fn event(&mut self, session: &'a str) -> Result<EventRef<'a>, String> {
        let flags = self.byte();
        if flags & !(SESSION | RUN | CORRELATION) != 0 {
            self.fail("unknown flags");
        }
        let id = self.take(16);
        let bits = id.try_into().map_or(0, u128::from_be_bytes);
        let kind = self.pick(
            EventType::ALL,
            "an unknown event type",
            EventType::RunStarted,
        );
        let session_id = match flags & SESSION {
            0 => session,
            _ => self.str(),
        };
        if session_id.is_empty() {
            self.fail("an empty session_id");
        }
        let run_id = match flags & RUN {
            0 => None,
            _ => Some(self.str()),
        };
        if run_id == Some("") {
            self.fail("an empty run_id");
        }
        let sequence = self.varint();
        let zigzag = self.varint();
        let ms = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
        if !(EARLIEST_MS..=LATEST_MS).contains(&ms) {
            self.fail("a timestamp outside years 0000 to 9999");
        }
        let provider = self.pick(&Provider::ALL, "an unknown provider", Provider::Generic);
        let correlation_id = match flags & CORRELATION {
            0 => None,
            _ => Some(Cow::Borrowed(self.str())),
        };
        let count = self.varint();
        if count > (self.bytes.len() - self.at) as u64 / 3 {
            self.fail("more fields than bytes");
        }
        let mut fields = Vec::with_capacity(if self.failed.is_some() {
            0
        } else {
            count as usize
        });
        for _ in 0..count {
            if self.failed.is_some() {
                break;
            }
            let key = self.str();
            let field = match self.byte() {
                0 => Field::Str(Cow::Borrowed(self.str())),
                1 => {
                    let at = self.at;
                    let text = self.str();
                    match Reader::read_all::<Value>(text) {
                        Ok(v) => Field::Value(Cow::Owned(v)),
                        Err(_) if self.failed.is_some() => break,
                        Err(e) => return Err(format!("packed frame: at byte {at}: {e}")),
                    }
                }
                _ => {
                    self.fail("an unknown value tag");
                    break;
                }
            };
            fields.push((Cow::Borrowed(key), field));
        }
        let at = self.at;
        let metadata = match self.str() {
            "" => JsonObject::new(),
            _ if self.failed.is_some() => JsonObject::new(),
            text => JsonObject::from_text(text)
                .map_err(|e| format!("packed frame: metadata at byte {at}: {e}"))?,
        };
        Ok(EventRef {
            id: LazyId {
                bits,
                text: OnceCell::new(),
            },
            kind,
            session_id: Cow::Borrowed(session_id),
            run_id: run_id.map(Cow::Borrowed),
            sequence,
            timestamp: Timestamp::from_unix_millis(ms),
            provider,
            correlation_id,
            data: Fields(fields),
            source: Source::Packed,
            metadata: Cow::Owned(metadata),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::core::event_ref::EventView;
    use crate::core::wire::ServerMsg;

    /// An `events` frame of session `s1` holding these events' JSON.
    fn frame(events: &[Value]) -> String {
        let events: Vec<String> = events.iter().map(Value::to_string).collect();
        format!(
            r#"{{"t":"events","session":"s1","epoch":"e\"1","events":[{}]}}"#,
            events.join(",")
        )
    }

    fn events() -> Vec<Value> {
        let base = json!({
            "id": "evt_0123456789abcdef0123456789abcdef",
            "type": "message_streamed",
            "session_id": "s1",
            "run_id": "r1",
            "sequence": 3,
            "timestamp": "2026-01-01T00:00:00.123Z",
            "provider": "claude",
            "data": {"delta": "hé\n\"x\" \u{1F600}", "message_id": "m1"},
            "metadata": {},
            "schema_version": 1,
        });
        let with = |changes: Value| {
            let mut v = base.clone();
            for (k, x) in changes.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        let mut all = vec![base.clone()];
        all.push(with(json!({"session_id": "s2", "correlation_id": "c\\1"})));
        all.push(with(
            json!({"run_id": null, "type": "session_started", "provider": "generic"}),
        ));
        all.push(with(
            json!({"timestamp": "1970-01-01T00:00:00Z", "sequence": 0}),
        ));
        all.push(with(json!({"timestamp": "1969-07-20T20:17:40.5Z"})));
        all.push(with(
            json!({"metadata": {"source": {"line": 7}, "z": [1, "two"]}}),
        ));
        all.push(with(json!({"data": {}})));
        all.push(with(json!({"data": null, "metadata": null})));
        all.push(with(json!({
            "type": "tool_call_started",
            "provider": "codex",
            "data": {
                "tool_call_id": "t1", "tool_name": "Bash", "n": -2.5, "big": 18446744073709551615u64,
                "ok": true, "nul": null, "list": [1, {"a": "b"}], "tool_input": {"command": "ls"},
                "": "empty key"
            },
        })));
        let mut no_id = base.clone();
        no_id.as_object_mut().unwrap().remove("id");
        all.push(no_id);
        for (i, kind) in EventType::ALL.iter().enumerate() {
            all.push(with(json!({"type": kind.as_str(), "sequence": 10 + i})));
        }
        for (i, p) in Provider::ALL.iter().enumerate() {
            all.push(with(json!({"provider": p.as_str(), "sequence": 100 + i})));
        }
        all
    }

    /// A packed frame reads as the JSON frame it was made from, event by event and through
    /// every accessor the projections use.
    #[wasm_bindgen_test(unsupported = test)]
    fn a_packed_frame_reads_as_its_json() {
        let mut events = events();
        // A duplicate key: the last one counts, in both.
        let dup = frame(&events[..1]).replace(r#""delta":"#, r#""delta":7,"delta":"#);
        for text in [
            frame(&events),
            frame(&[]),
            dup,
            frame(&events.split_off(20)),
        ] {
            let packed = pack(&text).expect("an events frame");
            assert!(is_packed(&packed));
            assert!(
                packed.len() < text.len(),
                "{} of {}",
                packed.len(),
                text.len()
            );
            assert_eq!(
                ServerMsg::decode_bytes(&packed, usize::MAX),
                ServerMsg::decode(&text, usize::MAX),
                "{text}"
            );
            let (json, packed) = (EventsRef::decode(&text).unwrap(), unpack(&packed).unwrap());
            assert_eq!(
                (&packed.session, &packed.epoch),
                (&json.session, &json.epoch)
            );
            assert_eq!(packed.events.len(), json.events.len());
            for (p, j) in packed.events.iter().zip(&json.events) {
                for key in [
                    "delta",
                    "message_id",
                    "n",
                    "tool_input",
                    "nul",
                    "",
                    "absent",
                ] {
                    assert_eq!(p.data_str(key), j.data_str(key), "{key}");
                    assert_eq!(p.data_value(key), j.data_value(key), "{key}");
                    assert_eq!(p.data_has(key), j.data_has(key), "{key}");
                }
                assert_eq!(
                    (p.id(), p.kind(), p.session_id(), p.run_id(), p.sequence()),
                    (j.id(), j.kind(), j.session_id(), j.run_id(), j.sequence())
                );
                assert_eq!(
                    (p.timestamp(), p.correlation_id()),
                    (j.timestamp(), j.correlation_id())
                );
                assert_eq!(p.clone().into_event(), j.clone().into_event());
            }
        }
        // Not an events frame, or one that does not read: not packed.
        for text in [r#"{"t":"pong"}"#, r#"{"t":"events","session":"s1"}"#, "[]"] {
            assert_eq!(pack(text), None, "{text}");
        }
    }

    /// Whatever the bytes, reading ends in the events or an error that says where, never a
    /// panic: every cut of a frame, every byte changed to a few values, and the lies a hostile
    /// server could tell.
    #[wasm_bindgen_test(unsupported = test)]
    fn hostile_bytes_end_in_an_error_not_a_panic() {
        let packed = pack(&frame(&events()[..6])).unwrap();
        for cut in 0..packed.len() {
            let e = unpack(&packed[..cut]).expect_err("a cut frame");
            assert!(e.contains("truncated") || e.contains("more "), "{cut}: {e}");
        }
        for at in 0..packed.len() {
            for b in [0x00, 0x01, 0x7f, 0x80, 0xa7, 0xff] {
                let mut bytes = packed.clone();
                bytes[at] = b;
                // Either reads (a changed letter) or says why.
                if let Ok(f) = unpack(&bytes) {
                    let _ = f.events.into_iter().map(EventView::into_event).count();
                }
            }
        }
        // A frame of `text` (after the frame's session `s1` and epoch `e`) and `records`
        // (after theirs, and a count of one event).
        let frame = |text: &str, records: &[u8]| {
            let text = format!("s1e{text}");
            let mut b = vec![MAGIC, VERSION, text.len() as u8];
            b.extend_from_slice(text.as_bytes());
            b.extend([2, 1, 1]);
            b.extend_from_slice(records);
            b
        };
        // One event (its records start at byte 9): flags, id, type, a session length (with
        // its text), sequence 1, timestamp, provider, no data, and `metadata`.
        let event = |flags: u8,
                     kind: u8,
                     session: (&[u8], &str),
                     ts: &[u8],
                     provider: u8,
                     metadata: (&[u8], &str)| {
            let mut b = vec![flags];
            b.extend([7; 16]);
            b.push(kind);
            b.extend_from_slice(session.0);
            b.push(1);
            b.extend_from_slice(ts);
            b.push(provider);
            b.push(0);
            b.extend_from_slice(metadata.0);
            frame(&format!("{}{}", session.1, metadata.1), &b)
        };
        let none: (&[u8], &str) = (&[], "");
        let fine = event(0, 0, none, &[2], 0, (&[0], ""));
        assert_eq!(unpack(&fine).unwrap().events.len(), 1);
        for (bytes, error) in [
            (vec![MAGIC, 9], "packed frame of version 9, not 1"),
            (
                vec![b'{', VERSION],
                "packed frame: not a packed frame at byte 2",
            ),
            (vec![MAGIC, VERSION, 2, b'e', 0xff], "not UTF-8 at byte 4"),
            (
                event(8, 0, none, &[2], 0, (&[0], "")),
                "unknown flags at byte 10",
            ),
            (
                event(0, 200, none, &[2], 0, (&[0], "")),
                "an unknown event type at byte 27",
            ),
            (
                event(1, 0, (&[0], ""), &[2], 0, (&[0], "")),
                "an empty session_id at byte 28",
            ),
            (
                event(2, 0, (&[0], ""), &[2], 0, (&[0], "")),
                "an empty run_id at byte 28",
            ),
            (
                event(1, 0, (&[1], "é"), &[2], 0, (&[0], "")),
                "inside a character, at byte 29",
            ),
            (
                event(1, 0, (&[9], "s2"), &[2], 0, (&[0], "")),
                "a string past its text, or inside a character, at byte 29",
            ),
            (
                event(0, 0, none, &[2], 8, (&[0], "")),
                "an unknown provider at byte 30",
            ),
            (
                event(0, 0, none, &[0xff; 11], 0, (&[0], "")),
                "a varint of more than 10 bytes",
            ),
            (
                event(
                    0,
                    0,
                    none,
                    &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1],
                    0,
                    (&[0], ""),
                ),
                "a timestamp outside years 0000 to 9999",
            ),
            (
                event(0, 0, none, &[2], 0, (&[0], "x")),
                "text no string takes at byte",
            ),
            (
                vec![MAGIC, VERSION, 0, 0, 0, 0, 0],
                "bytes after the last event at byte 6",
            ),
            (frame("", &[]), "more events than bytes at byte 9"),
            (
                event(0, 0, none, &[2], 0, (&[2], "[]")),
                "metadata at byte 33",
            ),
        ] {
            let e = unpack(&bytes).expect_err(error);
            assert!(e.contains(error), "{e:?} does not say {error:?}");
        }
        // A data value that is not JSON.
        let mut bad = event(0, 0, none, &[2], 0, (&[0], ""));
        bad[2] += 3;
        bad.splice(6..6, *b"k{x");
        let n = bad.len();
        bad.splice(n - 2.., [1, 1, 1, 2, 0]);
        let e = unpack(&bad).unwrap_err();
        assert!(e.starts_with("packed frame: at byte 36: "), "{e:?}");
    }

    /// A type's and a provider's byte is its index in its list: the lists only grow at the end,
    /// or a client and a server of different versions would read each other's bytes wrong.
    #[wasm_bindgen_test(unsupported = test)]
    fn the_bytes_of_types_and_providers_never_move() {
        let types: Vec<&str> = EventType::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            types[..39],
            [
                "session_created",
                "session_started",
                "session_paused",
                "session_resumed",
                "session_completed",
                "session_failed",
                "session_cancelled",
                "run_started",
                "run_completed",
                "run_failed",
                "run_cancelled",
                "run_timeout",
                "message_sent",
                "message_received",
                "message_streamed",
                "tool_call_started",
                "tool_call_completed",
                "tool_call_failed",
                "error_occurred",
                "error_recovered",
                "token_usage_updated",
                "turn_completed",
                "workspace_snapshot_taken",
                "workspace_diff_computed",
                "policy_violation",
                "tool_approval_requested",
                "tool_approval_granted",
                "tool_approval_denied",
                "reasoning_streamed",
                "reasoning_received",
                "tool_call_updated",
                "tool_call_cancelled",
                "todo_updated",
                "mode_changed",
                "model_changed",
                "thinking_option_changed",
                "attention_required",
                "context_compacted",
                "run_stalled",
            ]
        );
        assert!(types.len() < 256, "a type is one byte");
        // What `pack` writes (the discriminant) is what `unpack` reads (the index).
        for (i, k) in EventType::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{k}");
        }
        for (i, p) in Provider::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i, "{p}");
        }
        let providers = Provider::ALL.map(Provider::as_str);
        assert_eq!(
            providers,
            ["claude", "codex", "gemini", "opencode", "amp", "acp", "demo", "generic"]
        );
    }

    /// The timestamps a packed frame may hold are those RFC 3339 spells, from the first
    /// millisecond of year 0000 to the last of 9999.
    #[wasm_bindgen_test(unsupported = test)]
    fn the_timestamp_bounds_are_those_rfc_3339_spells() {
        for (ms, text) in [
            (EARLIEST_MS, "0000-01-01T00:00:00.000Z"),
            (LATEST_MS, "9999-12-31T23:59:59.999Z"),
        ] {
            let t = Timestamp::from_unix_millis(ms);
            assert_eq!(t.to_string(), text);
            assert_eq!(Timestamp::parse_rfc3339(text), Some(t));
        }
    }
}
