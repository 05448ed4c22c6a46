//! Deduplication: admitting each event once, however often it arrives, in bounded memory.
//!
//! Events reach the core more than once: a reconnect replays from a cursor, history hydration
//! overlaps the live tail, a provider echoes the user's prompt back. Two filters live here:
//!
//! * [`Dedup`] admits an event once by identity: by its id, and by its place in a session's log
//!   (session, sequence). Its memory does not grow with the length of a session.
//! * [`UserEchoFilter`] drops the provider's echo of a prompt the host itself sent, which comes
//!   back with a different id (Claude assigns its own UUID), so identity cannot catch it; it
//!   matches by text against the latest foreground prompt, as paseo does.

use std::collections::VecDeque;

use super::event::EventType;
use super::event_ref::EventView;
use super::hash::{FastMap, FastSet};

/// How many recent event ids [`Dedup::new`] remembers.
pub const DEFAULT_ID_WINDOW: usize = 4096;

/// What [`Dedup::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// First time seen: pass it on.
    New,
    /// Seen before: drop it.
    Duplicate { by: DuplicateBy },
}

impl Admission {
    pub fn is_new(self) -> bool {
        self == Admission::New
    }
}

/// Which rule recognised a duplicate. When both would, `Id` is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DuplicateBy {
    /// An admitted event with the same id is still in the id window.
    Id,
    /// The event is sequenced at or below its session's high-water mark.
    Sequence,
}

/// Idempotent admission of events, by id and by (session, sequence).
///
/// **Driving rule.** Call [`admit`](Self::admit) on every incoming event, in arrival order,
/// and forward it only when the answer is [`Admission::New`]. Only admitted events change the
/// state, so admitting a stream twice admits exactly what admitting it once did.
///
/// Memory is bounded for endless sessions:
/// * per session, one number: the high-water sequence. A sequenced event (sequence > 0) at or
///   below it is a duplicate; above it is new, even when it skips numbers (logs may have holes,
///   and a reader that lost events resumes above them). So an older sequenced event arriving
///   after a newer one is dropped: per session, sequenced events must be admitted in order.
/// * globally, a window of the last `id_window` admitted ids (FIFO), which catches duplicates of
///   unsequenced events (sequence 0) and the same event seen under another sequence or session
///   stream. A duplicate of an unsequenced event older than the window is admitted again;
///   size the window above the longest replay you expect (the default is 4096).
#[derive(Clone, Debug)]
pub struct Dedup {
    id_window: usize,
    /// The ids as their 128 bits (`evt_` + 32 hex digits): no string is kept or hashed.
    ids: FastSet<u128>,
    order: VecDeque<u128>,
    high_water: FastMap<String, u64>,
}

impl Default for Dedup {
    fn default() -> Dedup {
        Dedup::new()
    }
}

impl Dedup {
    /// A filter remembering [`DEFAULT_ID_WINDOW`] ids.
    pub fn new() -> Dedup {
        Dedup::with_id_window(DEFAULT_ID_WINDOW)
    }

    /// A filter remembering the last `id_window` admitted ids; 0 disables id matching
    /// (only sequences are checked).
    pub fn with_id_window(id_window: usize) -> Dedup {
        Dedup {
            id_window,
            ids: FastSet::with_capacity_and_hasher(
                id_window.min(DEFAULT_ID_WINDOW),
                Default::default(),
            ),
            order: VecDeque::with_capacity(id_window.min(DEFAULT_ID_WINDOW)),
            high_water: FastMap::default(),
        }
    }

    /// Decides whether `event` is new, and if so, remembers it. O(1) amortized.
    pub fn admit(&mut self, event: &impl EventView) -> Admission {
        let key = event.id_bits();
        let sequence = event.sequence();
        // The sequence rule first, changing nothing, so that an admitted event's id is looked
        // up once: by the insert that remembers it.
        let mark = match sequence {
            0 => None,
            _ => self.high_water.get_mut(event.session_id()),
        };
        if mark.as_deref().is_some_and(|&mark| sequence <= mark) {
            let by = match self.ids.contains(&key) {
                true => DuplicateBy::Id,
                false => DuplicateBy::Sequence,
            };
            return Admission::Duplicate { by };
        }
        if self.id_window > 0 && !self.ids.insert(key) {
            return Admission::Duplicate {
                by: DuplicateBy::Id,
            };
        }
        match mark {
            Some(mark) => *mark = sequence,
            None if sequence > 0 => {
                self.high_water
                    .insert(event.session_id().to_owned(), sequence);
            }
            None => {}
        }
        if self.id_window > 0 {
            if self.order.len() == self.id_window {
                if let Some(old) = self.order.pop_front() {
                    self.ids.remove(&old);
                }
            }
            self.order.push_back(key);
        }
        Admission::New
    }

    /// The highest sequence admitted for `session_id`, if any.
    pub fn high_water(&self, session_id: &str) -> Option<u64> {
        self.high_water.get(session_id).copied()
    }

    /// How many ids are remembered now (at most the window).
    pub fn remembered_ids(&self) -> usize {
        self.order.len()
    }

    /// Forgets a session's high-water mark (when the session is gone for good). Its ids age
    /// out of the window on their own.
    pub fn forget_session(&mut self, session_id: &str) {
        self.high_water.remove(session_id);
    }
}

/// Drops the provider's echo of the user's prompt (paseo's user-message dedup).
///
/// **Driving rule.** The host calls [`note_prompt`](Self::note_prompt) whenever it sends a
/// foreground prompt, and emits its own `message_sent` for it (that one never goes through this
/// filter). Every event coming *from the provider* is then checked with
/// [`is_echo`](Self::is_echo) and dropped when it is one. One filter per session.
///
/// An echo is a `message_sent` whose `data.content`, trimmed, equals the latest noted prompt,
/// trimmed, and whose run (when it has one) is the prompt's run. Since the host always emits
/// its own `message_sent`, *every* provider echo of that text is suppressed, the first one
/// included, for as long as that prompt is the latest; the paseo invariant "exactly one user
/// message per prompt" then holds even when the provider echoes twice (live and from history).
/// A `message_sent` with other text (a prompt typed into the agent directly) is kept, and so is
/// one tagged with another run. Only the latest prompt is remembered: memory is one string.
#[derive(Clone, Debug, Default)]
pub struct UserEchoFilter {
    latest: Option<(String, String)>,
}

impl UserEchoFilter {
    pub fn new() -> UserEchoFilter {
        UserEchoFilter::default()
    }

    /// Records the foreground prompt just sent for `run_id`; it replaces the previous one.
    pub fn note_prompt(&mut self, run_id: impl Into<String>, text: &str) {
        self.latest = Some((run_id.into(), text.trim().to_owned()));
    }

    /// True when `event` is the provider's echo of the latest noted prompt.
    pub fn is_echo(&self, event: &impl EventView) -> bool {
        let Some((run, text)) = &self.latest else {
            return false;
        };
        event.kind() == EventType::MessageSent
            && event.run_id().is_none_or(|r| r == run)
            && event.data_str("content").map(str::trim) == Some(text.as_str())
    }

    /// The latest noted prompt, as (run id, trimmed text).
    pub fn latest_prompt(&self) -> Option<(&str, &str)> {
        self.latest
            .as_ref()
            .map(|(run, text)| (run.as_str(), text.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::*;
    use crate::core::event::{Event, EventId, EventInit, Provider};
    use crate::core::time::Timestamp;
    use std::collections::{HashMap, HashSet};

    /// An event whose id is derived from `key`, in `session`, at `seq`.
    fn ev(key: u32, session: &str, seq: u64) -> Event {
        let mut init = EventInit::new(
            EventType::MessageStreamed,
            session,
            Provider::Demo,
            Timestamp::EPOCH,
        );
        init.id = Some(EventId::derive(&[&key.to_string()]));
        init.sequence = seq;
        Event::new(init).unwrap()
    }

    fn sent(run: Option<&str>, content: Value) -> Event {
        let mut init = EventInit::new(
            EventType::MessageSent,
            "s1",
            Provider::Claude,
            Timestamp::EPOCH,
        );
        init.run_id = run.map(str::to_owned);
        let mut data = Map::new();
        data.insert("content".into(), content);
        init.data = data;
        Event::new(init).unwrap()
    }

    const NEW: Admission = Admission::New;
    const BY_ID: Admission = Admission::Duplicate {
        by: DuplicateBy::Id,
    };
    const BY_SEQ: Admission = Admission::Duplicate {
        by: DuplicateBy::Sequence,
    };

    #[wasm_bindgen_test(unsupported = test)]
    fn duplicates_by_id_and_by_sequence() {
        let mut d = Dedup::new();
        assert_eq!(d.admit(&ev(1, "s1", 1)), NEW);
        assert_eq!(d.admit(&ev(1, "s1", 1)), BY_ID, "a replay");
        assert_eq!(
            d.admit(&ev(1, "s1", 0)),
            BY_ID,
            "the live copy, unsequenced"
        );
        assert_eq!(d.admit(&ev(1, "s1", 9)), BY_ID, "restamped");
        assert_eq!(
            d.admit(&ev(2, "s1", 1)),
            BY_SEQ,
            "another id at a taken place"
        );
        assert_eq!(d.admit(&ev(3, "s1", 5)), NEW, "holes are allowed");
        assert_eq!(d.admit(&ev(4, "s1", 4)), BY_SEQ, "at or below the mark");
        assert_eq!(d.admit(&ev(5, "s2", 4)), NEW, "marks are per session");
        assert_eq!(d.admit(&ev(6, "s1", 0)), NEW);
        assert_eq!(d.admit(&ev(6, "s1", 0)), BY_ID);
        assert_eq!((d.high_water("s1"), d.high_water("s2")), (Some(5), Some(4)));
        assert_eq!(d.high_water("s3"), None);
        assert!(!BY_SEQ.is_new() && NEW.is_new());
        d.forget_session("s1");
        assert_eq!(d.admit(&ev(7, "s1", 2)), NEW);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_id_window_is_bounded_and_fifo() {
        let mut d = Dedup::with_id_window(2);
        for key in 1..=3 {
            assert_eq!(d.admit(&ev(key, "s1", 0)), NEW);
        }
        assert_eq!(d.remembered_ids(), 2);
        assert_eq!(d.admit(&ev(3, "s1", 0)), BY_ID);
        assert_eq!(d.admit(&ev(2, "s1", 0)), BY_ID);
        assert_eq!(d.admit(&ev(1, "s1", 0)), NEW, "aged out of the window");
        // Duplicates do not refresh or grow the window.
        assert_eq!(d.remembered_ids(), 2);
        assert_eq!(d.admit(&ev(2, "s1", 0)), NEW);

        let mut off = Dedup::with_id_window(0);
        assert_eq!(off.admit(&ev(1, "s1", 0)), NEW);
        assert_eq!(off.admit(&ev(1, "s1", 0)), NEW, "no id window");
        assert_eq!(off.admit(&ev(1, "s1", 3)), NEW);
        assert_eq!(off.admit(&ev(1, "s1", 3)), BY_SEQ);
        assert_eq!(off.remembered_ids(), 0);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn default_window() {
        let mut d = Dedup::default();
        for key in 0..5000 {
            d.admit(&ev(key, "s1", 0));
        }
        assert_eq!(d.remembered_ids(), DEFAULT_ID_WINDOW);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn echoes_of_the_latest_prompt_are_suppressed() {
        let mut f = UserEchoFilter::new();
        let echo = sent(Some("r1"), json!("  fix the bug\n"));
        assert!(!f.is_echo(&echo), "nothing noted yet");
        f.note_prompt("r1", "fix the bug ");
        assert_eq!(f.latest_prompt(), Some(("r1", "fix the bug")));
        assert!(f.is_echo(&echo));
        assert!(f.is_echo(&echo), "every echo, not just the first");
        assert!(f.is_echo(&sent(None, json!("fix the bug"))), "untagged");
        assert!(
            !f.is_echo(&sent(Some("r2"), json!("fix the bug"))),
            "another run"
        );
        assert!(
            !f.is_echo(&sent(Some("r1"), json!("fix the bugs"))),
            "other text"
        );
        assert!(
            !f.is_echo(&sent(Some("r1"), json!(["fix the bug"]))),
            "not a string"
        );
        let mut init = EventInit::new(
            EventType::MessageReceived,
            "s1",
            Provider::Claude,
            Timestamp::EPOCH,
        );
        init.data = echo.data().clone();
        let reply = Event::new(init).unwrap();
        assert!(!f.is_echo(&reply), "only message_sent is an echo");
        f.note_prompt("r2", "now the tests");
        assert!(!f.is_echo(&echo), "no longer the latest prompt");
        assert!(f.is_echo(&sent(Some("r2"), json!("now the tests"))));
    }

    fn stream() -> impl Strategy<Value = Vec<(u32, u8, u64)>> {
        // (id key, session, sequence): few keys and sequences so that collisions are common.
        prop::collection::vec((0u32..12, 0u8..2, prop_oneof![Just(0u64), 1u64..8]), 0..40)
    }

    /// A stream with some of its events repeated, in any order.
    fn arrivals() -> impl Strategy<Value = Vec<(u32, u8, u64)>> {
        (
            stream(),
            prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        )
            .prop_flat_map(|(s, picks)| {
                let mut all = s.clone();
                if !s.is_empty() {
                    all.extend(picks.iter().map(|i| *i.get(&s)));
                }
                Just(all).prop_shuffle()
            })
    }

    fn events(s: &[(u32, u8, u64)]) -> Vec<Event> {
        s.iter()
            .map(|&(k, sess, seq)| ev(k, if sess == 0 { "s1" } else { "s2" }, seq))
            .collect()
    }

    fn admitted(d: &mut Dedup, events: &[Event]) -> Vec<Event> {
        events
            .iter()
            .filter(|e| d.admit(*e).is_new())
            .cloned()
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Admitting s then s again admits nothing more than admitting s once.
        #[wasm_bindgen_test(unsupported = test)]
        fn admission_is_idempotent(s in stream()) {
            let evs = events(&s);
            let once = admitted(&mut Dedup::new(), &evs);
            let doubled: Vec<Event> = evs.iter().chain(evs.iter()).cloned().collect();
            let twice = admitted(&mut Dedup::new(), &doubled);
            prop_assert_eq!(twice, once);
        }

        /// Whatever the order and the repeats, each id is admitted at most once, and per
        /// session admitted sequences strictly increase.
        #[wasm_bindgen_test(unsupported = test)]
        fn each_id_at_most_once(s in arrivals()) {
            let evs = events(&s);
            let mut d = Dedup::new();
            let mut ids = HashSet::new();
            let mut marks: HashMap<String, u64> = HashMap::new();
            for e in admitted(&mut d, &evs) {
                prop_assert!(ids.insert(e.id().clone()), "{} admitted twice", e.id());
                if e.sequence() > 0 {
                    let mark = marks.entry(e.session_id().to_owned()).or_default();
                    prop_assert!(e.sequence() > *mark);
                    *mark = e.sequence();
                }
            }
            // And admitting everything once more admits nothing.
            prop_assert!(admitted(&mut d, &evs).is_empty());
        }

        /// A shuffled, duplicated arrival of one log admits every id of it at most once, and
        /// admits all of it when it arrives in order.
        #[wasm_bindgen_test(unsupported = test)]
        fn in_order_log_is_admitted_whole(n in 0u32..30, dups in prop::collection::vec(0usize..30, 0..30)) {
            let log: Vec<Event> = (0..n).map(|k| ev(k, "s1", u64::from(k) + 1)).collect();
            let mut arrival = log.clone();
            for d in dups {
                if let Some(e) = log.get(d) {
                    let at = d.min(arrival.len());
                    arrival.insert(at, e.clone());
                }
            }
            arrival.sort_by_key(Event::sequence);
            let got = admitted(&mut Dedup::new(), &arrival);
            prop_assert_eq!(got, log);
        }
    }
}
