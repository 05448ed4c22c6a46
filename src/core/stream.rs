//! The cursor buffer: a bounded, ordered window over one session's (or one run's) events,
//! read by a single reader through a cursor, that never loses events silently.
//!
//! This is the AgentSessionManager `EventStream` (push, push_batch, peek, take, count,
//! remaining, get_events, close) with one change that matters: when the buffer is full it
//! still evicts the oldest events, but if an evicted event had not been read yet, the next
//! [`EventStream::take`] carries a [`Gap`] saying how many events the reader missed and where
//! reading resumes. The seed dropped them without a word; here a slow reader always learns it
//! must resync.
//!
//! The driving rule is written on [`EventStream`]. Everything is `&mut self`, no clock, no I/O;
//! every operation is O(1) or O(events returned) amortized, except [`EventStream::seek`]
//! (O(log buffer)) and [`EventStream::get_events`] (a full query, O(buffer)).

use std::collections::VecDeque;

use super::event::{Event, EventType};

/// The buffer size used by [`StreamConfig::new`].
pub const DEFAULT_BUFFER_SIZE: usize = 1000;

/// What an [`EventStream`] accepts and how much it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Every pushed event must belong to this session.
    pub session_id: String,
    /// `Some(run)`: every pushed event must carry exactly this run id (session-level events
    /// without a run are refused). `None`: events of any run, or none, are accepted.
    pub run_id: Option<String>,
    /// How many events the buffer holds; at least 1.
    pub buffer_size: usize,
}

impl StreamConfig {
    /// A session-wide stream (any run) holding [`DEFAULT_BUFFER_SIZE`] events.
    pub fn new(session_id: impl Into<String>) -> StreamConfig {
        StreamConfig {
            session_id: session_id.into(),
            run_id: None,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }

    /// The same config, restricted to one run.
    pub fn with_run(mut self, run_id: impl Into<String>) -> StreamConfig {
        self.run_id = Some(run_id.into());
        self
    }

    /// The same config with another buffer size.
    pub fn with_buffer_size(mut self, buffer_size: usize) -> StreamConfig {
        self.buffer_size = buffer_size;
        self
    }
}

/// Why a stream operation was refused. Nothing is changed when an operation fails.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("event belongs to session {got:?}, stream is for session {expected:?}")]
    SessionMismatch { expected: String, got: String },
    #[error("event belongs to run {got:?}, stream is for run {expected:?}")]
    RunMismatch {
        expected: String,
        got: Option<String>,
    },
    #[error("stream is closed")]
    StreamClosed,
    #[error("invalid cursor {requested}: must be between the current cursor {current} and the last sequence {last}")]
    InvalidCursor {
        requested: u64,
        current: u64,
        last: u64,
    },
    #[error("sequence {got} does not follow the last sequence {last}")]
    NonIncreasingSequence { last: u64, got: u64 },
    #[error("buffer_size must be at least 1")]
    InvalidBufferSize,
}

impl StreamError {
    /// The stable snake_case code, as the seed spells it (`session_mismatch`, …).
    pub const fn code(&self) -> &'static str {
        match self {
            StreamError::SessionMismatch { .. } => "session_mismatch",
            StreamError::RunMismatch { .. } => "run_mismatch",
            StreamError::StreamClosed => "stream_closed",
            StreamError::InvalidCursor { .. } => "invalid_cursor",
            StreamError::NonIncreasingSequence { .. } => "non_increasing_sequence",
            StreamError::InvalidBufferSize => "invalid_buffer_size",
        }
    }
}

/// Events the reader never saw: they were evicted from the buffer before being taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The reader's cursor when the first of these events was evicted: the last sequence it had.
    pub after: u64,
    /// How many events were evicted unread (counted as pushed, so holes in explicit
    /// sequences are not counted).
    pub lost: u64,
    /// The oldest sequence the buffer still holds; everything below it is gone.
    pub first_available: u64,
}

/// The result of [`EventStream::take`]: the events, and the gap before them if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Taken {
    /// In sequence order, all above the previous cursor.
    pub events: Vec<Event>,
    /// `Some` when events were lost since the previous take; it comes before `events`.
    pub gap: Option<Gap>,
}

/// Which events [`EventStream::get_events`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only the unread events (above the cursor); otherwise the whole buffer.
    pub from_cursor: bool,
    /// Only events of this type.
    pub kind: Option<EventType>,
}

/// A bounded, cursor-read buffer of one session's events.
///
/// **Driving rule.** The producer calls [`push`](Self::push) / [`push_batch`](Self::push_batch)
/// as events arrive; the reader calls [`take`](Self::take) and handles `gap` *before* `events`
/// every time (a `Some(gap)` means: resync from the store from `gap.after`, then continue).
/// [`peek`](Self::peek) and [`get_events`](Self::get_events) only look.
///
/// Invariants:
/// * Sequences in the buffer strictly increase; an event pushed with sequence 0 gets
///   `last_sequence() + 1`, an explicit sequence must exceed `last_sequence()` (holes allowed).
/// * The buffer holds the `buffer_size` highest sequences pushed; eviction drops the lowest.
/// * The cursor is a sequence number: every event at or below it has been taken, skipped by
///   [`seek`](Self::seek), or (if evicted before that) counted as lost. It never moves back.
/// * Nothing is lost silently: `taken + skipped + lost_total() == pushed`, and every lost
///   event is reported in exactly one [`Gap`].
/// * A failed operation changes nothing; a closed stream refuses pushes but can be read.
#[derive(Clone, Debug)]
pub struct EventStream {
    session_id: String,
    run_id: Option<String>,
    buffer_size: usize,
    buffer: VecDeque<Event>,
    /// Index in `buffer` of the first event above the cursor.
    read_idx: usize,
    cursor: u64,
    last_sequence: u64,
    closed: bool,
    /// Lost events not yet reported, and the cursor when the first of them was lost.
    pending_lost: u64,
    pending_after: u64,
    lost_total: u64,
}

impl EventStream {
    /// A new, open, empty stream with its cursor at 0.
    pub fn new(config: StreamConfig) -> Result<EventStream, StreamError> {
        if config.buffer_size == 0 {
            return Err(StreamError::InvalidBufferSize);
        }
        Ok(EventStream {
            session_id: config.session_id,
            run_id: config.run_id,
            buffer_size: config.buffer_size,
            // Do not preallocate a large buffer_size up front; grow as events come.
            buffer: VecDeque::with_capacity(config.buffer_size.min(64)),
            read_idx: 0,
            cursor: 0,
            last_sequence: 0,
            closed: false,
            pending_lost: 0,
            pending_after: 0,
            lost_total: 0,
        })
    }

    /// Appends one event, stamping the next sequence when it has none. Returns its sequence.
    /// May evict the oldest event; if that one was unread, it is counted as lost.
    pub fn push(&mut self, event: Event) -> Result<u64, StreamError> {
        let sequence = self.admit(&event, self.last_sequence)?;
        self.append(event, sequence);
        Ok(sequence)
    }

    /// Appends events in order, all or nothing: if any event would be refused, none is pushed
    /// and the error is the first one's.
    pub fn push_batch(&mut self, events: Vec<Event>) -> Result<(), StreamError> {
        let mut sequences = Vec::with_capacity(events.len());
        let mut last = self.last_sequence;
        for event in &events {
            last = self.admit(event, last)?;
            sequences.push(last);
        }
        if self.closed {
            // An empty batch is a push too.
            return Err(StreamError::StreamClosed);
        }
        for (event, sequence) in events.into_iter().zip(sequences) {
            self.append(event, sequence);
        }
        Ok(())
    }

    /// Checks `event` as if pushed after `last`, returning the sequence it would get.
    fn admit(&self, event: &Event, last: u64) -> Result<u64, StreamError> {
        if self.closed {
            return Err(StreamError::StreamClosed);
        }
        if event.session_id() != self.session_id {
            return Err(StreamError::SessionMismatch {
                expected: self.session_id.clone(),
                got: event.session_id().to_owned(),
            });
        }
        if let Some(run) = &self.run_id {
            if event.run_id() != Some(run.as_str()) {
                return Err(StreamError::RunMismatch {
                    expected: run.clone(),
                    got: event.run_id().map(str::to_owned),
                });
            }
        }
        let got = event.sequence();
        let sequence = if got == 0 {
            last.checked_add(1)
        } else {
            Some(got)
        };
        match sequence {
            Some(s) if s > last => Ok(s),
            // Explicit and not above the last, or the sequence space is exhausted.
            _ => Err(StreamError::NonIncreasingSequence { last, got }),
        }
    }

    fn append(&mut self, event: Event, sequence: u64) {
        if self.buffer.len() == self.buffer_size {
            let evicted = self.buffer.pop_front().expect("buffer_size >= 1");
            if self.read_idx > 0 {
                self.read_idx -= 1;
            } else {
                debug_assert!(evicted.sequence() > self.cursor);
                if self.pending_lost == 0 {
                    self.pending_after = self.cursor;
                }
                self.pending_lost += 1;
                self.lost_total += 1;
            }
        }
        let event = if event.sequence() == sequence {
            event
        } else {
            event.into_sequenced(sequence)
        };
        self.buffer.push_back(event);
        self.last_sequence = sequence;
    }

    /// Up to `n` unread events, without moving the cursor.
    pub fn peek(&self, n: usize) -> Vec<&Event> {
        self.buffer.range(self.read_idx..).take(n).collect()
    }

    /// Up to `n` unread events, moving the cursor past them, and the gap before them if
    /// events were lost since the last take. A gap is reported even when `n` is 0 or nothing
    /// is unread. (It cannot fail today; the `Result` leaves room for a stream that can.)
    pub fn take(&mut self, n: usize) -> Result<Taken, StreamError> {
        let gap = (self.pending_lost > 0).then(|| Gap {
            after: self.pending_after,
            lost: self.pending_lost,
            first_available: self.buffer.front().map_or(0, Event::sequence),
        });
        self.pending_lost = 0;
        let end = self.buffer.len().min(self.read_idx.saturating_add(n));
        let events: Vec<Event> = self.buffer.range(self.read_idx..end).cloned().collect();
        if let Some(last) = events.last() {
            self.cursor = last.sequence();
        }
        self.read_idx = end;
        Ok(Taken { events, gap })
    }

    /// The gap the next [`take`](Self::take) will report, without reporting it.
    pub fn pending_gap(&self) -> Option<Gap> {
        (self.pending_lost > 0).then(|| Gap {
            after: self.pending_after,
            lost: self.pending_lost,
            first_available: self.buffer.front().map_or(0, Event::sequence),
        })
    }

    /// How many events the buffer holds.
    pub fn count(&self) -> usize {
        self.buffer.len()
    }

    /// How many buffered events are above the cursor.
    pub fn remaining(&self) -> usize {
        self.buffer.len() - self.read_idx
    }

    /// Every event ever evicted unread, reported or not yet.
    pub fn lost_total(&self) -> u64 {
        self.lost_total
    }

    /// The buffered events matching `filter`, by increasing sequence.
    pub fn get_events(&self, filter: &Filter) -> Vec<&Event> {
        let from = if filter.from_cursor { self.read_idx } else { 0 };
        self.buffer
            .range(from..)
            .filter(|e| filter.kind.is_none_or(|k| e.kind() == k))
            .collect()
    }

    /// The last sequence the reader has (taken or skipped); 0 before any.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The highest sequence ever pushed; 0 before any.
    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// Moves the cursor forward to `cursor`, skipping the buffered events at or below it
    /// (skipped is not lost: no gap is reported for them). `cursor` need not be the sequence
    /// of a buffered event. Refused with `invalid_cursor` when it is below the current cursor
    /// (the cursor never moves back: re-read from the store instead) or above
    /// [`last_sequence`](Self::last_sequence) (that would silently skip events not yet pushed).
    /// Events already counted as lost stay lost and are still reported.
    pub fn seek(&mut self, cursor: u64) -> Result<(), StreamError> {
        if cursor < self.cursor || cursor > self.last_sequence {
            return Err(StreamError::InvalidCursor {
                requested: cursor,
                current: self.cursor,
                last: self.last_sequence,
            });
        }
        self.read_idx = self.buffer.partition_point(|e| e.sequence() <= cursor);
        self.cursor = cursor;
        Ok(())
    }

    /// Refuses all further pushes. Idempotent; reading goes on.
    pub fn close(&mut self) {
        self.closed = true;
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use expect_test::{expect, Expect};
    use proptest::prelude::*;

    use super::*;
    use crate::core::event::{EventInit, Provider};
    use crate::core::time::Timestamp;

    fn ev(kind: EventType, session: &str, run: Option<&str>, seq: u64) -> Event {
        let mut init = EventInit::new(kind, session, Provider::Demo, Timestamp::EPOCH);
        init.run_id = run.map(str::to_owned);
        init.sequence = seq;
        init.correlation_id = Some(format!("{seq}"));
        Event::new(init).unwrap()
    }

    /// An unsequenced message in session s1, run r1; `tag` keeps ids distinct.
    fn msg(tag: u64) -> Event {
        let at = Timestamp::from_unix_millis(tag as i64);
        let mut init = EventInit::new(EventType::MessageStreamed, "s1", Provider::Demo, at);
        init.run_id = Some("r1".into());
        Event::new(init).unwrap()
    }

    fn stream(size: usize) -> EventStream {
        EventStream::new(StreamConfig::new("s1").with_buffer_size(size)).unwrap()
    }

    fn seqs<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<u64> {
        events.into_iter().map(Event::sequence).collect()
    }

    fn render(t: &Taken) -> String {
        let mut out = String::new();
        if let Some(g) = t.gap {
            out += &format!(
                "gap after={} lost={} first_available={}\n",
                g.after, g.lost, g.first_available
            );
        }
        out += &format!("events {:?}", seqs(&t.events));
        out
    }

    /// Pushes `pushes` (0 = auto sequence) into a stream of `size`, then takes `takes`.
    fn check(size: usize, pushes: &[u64], takes: &[usize], expect: Expect) {
        let mut s = stream(size);
        for (i, &seq) in pushes.iter().enumerate() {
            let e = match seq {
                0 => msg(i as u64),
                seq => ev(EventType::MessageStreamed, "s1", Some("r1"), seq),
            };
            s.push(e).unwrap();
        }
        let out: Vec<String> = takes.iter().map(|&n| render(&s.take(n).unwrap())).collect();
        let out = format!(
            "{}\ncursor={} count={} remaining={} lost_total={}",
            out.join("\n"),
            s.cursor(),
            s.count(),
            s.remaining(),
            s.lost_total()
        );
        expect.assert_eq(&out);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn take_in_order_without_loss() {
        check(
            10,
            &[0, 0, 0, 0],
            &[3, 3, 3],
            expect![[r#"
                events [1, 2, 3]
                events [4]
                events []
                cursor=4 count=4 remaining=0 lost_total=0"#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn eviction_of_unread_events_is_reported_once() {
        check(
            3,
            &[0, 0, 0, 0, 0, 0],
            &[2, 5, 1],
            expect![[r#"
                gap after=0 lost=3 first_available=4
                events [4, 5]
                events [6]
                events []
                cursor=6 count=3 remaining=0 lost_total=3"#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn lost_counts_events_not_sequence_holes() {
        check(
            2,
            &[10, 20, 30, 40],
            &[9],
            expect![[r#"
                gap after=0 lost=2 first_available=30
                events [30, 40]
                cursor=40 count=2 remaining=0 lost_total=2"#]],
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn evicting_read_events_is_no_loss() {
        let mut s = stream(2);
        s.push(msg(1)).unwrap();
        s.push(msg(2)).unwrap();
        assert_eq!(seqs(&s.take(2).unwrap().events), [1, 2]);
        s.push(msg(3)).unwrap();
        s.push(msg(4)).unwrap();
        let t = s.take(10).unwrap();
        assert_eq!((t.gap, seqs(&t.events)), (None, vec![3, 4]));
        // Lost while partly read: `after` is the cursor at the first loss.
        for i in 5..=8 {
            s.push(msg(i)).unwrap();
        }
        assert_eq!(
            s.pending_gap(),
            Some(Gap {
                after: 4,
                lost: 2,
                first_available: 7
            })
        );
        let t = s.take(0).unwrap();
        assert_eq!(t.gap.map(|g| g.lost), Some(2));
        assert!(t.events.is_empty());
        assert_eq!(s.pending_gap(), None);
        assert_eq!(seqs(&s.take(5).unwrap().events), [7, 8]);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn peek_does_not_move_the_cursor() {
        let mut s = stream(10);
        for i in 0..4 {
            s.push(msg(i)).unwrap();
        }
        assert_eq!(seqs(s.peek(2)), [1, 2]);
        assert_eq!(seqs(s.peek(2)), [1, 2]);
        s.take(1).unwrap();
        assert_eq!(seqs(s.peek(10)), [2, 3, 4]);
        assert_eq!((s.count(), s.remaining(), s.cursor()), (4, 3, 1));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn explicit_sequences_must_increase() {
        let mut s = stream(10);
        assert_eq!(s.push(ev(EventType::RunStarted, "s1", None, 5)), Ok(5));
        assert_eq!(s.push(msg(1)), Ok(6), "0 gets last + 1");
        for bad in [6, 3] {
            let err = s
                .push(ev(EventType::RunStarted, "s1", None, bad))
                .unwrap_err();
            assert_eq!(
                err,
                StreamError::NonIncreasingSequence { last: 6, got: bad }
            );
            assert_eq!(err.code(), "non_increasing_sequence");
        }
        assert_eq!(s.push(ev(EventType::RunStarted, "s1", None, 9)), Ok(9));
        assert_eq!(s.last_sequence(), 9);
        s.push(ev(EventType::RunStarted, "s1", None, u64::MAX))
            .unwrap();
        assert_eq!(
            s.push(msg(2)),
            Err(StreamError::NonIncreasingSequence {
                last: u64::MAX,
                got: 0
            }),
            "the sequence space is exhausted"
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn context_is_checked() {
        let mut s = stream(10);
        let err = s
            .push(ev(EventType::RunStarted, "s2", None, 0))
            .unwrap_err();
        expect![[r#"session_mismatch: event belongs to session "s2", stream is for session "s1""#]]
            .assert_eq(&format!("{}: {err}", err.code()));
        // A stream without a run accepts any run, and none.
        s.push(ev(EventType::RunStarted, "s1", Some("r9"), 0))
            .unwrap();
        s.push(ev(EventType::SessionStarted, "s1", None, 0))
            .unwrap();

        let mut r = EventStream::new(StreamConfig::new("s1").with_run("r1")).unwrap();
        r.push(ev(EventType::RunStarted, "s1", Some("r1"), 0))
            .unwrap();
        for (run, got) in [(Some("r2"), "Some(\"r2\")"), (None, "None")] {
            let err = r.push(ev(EventType::RunStarted, "s1", run, 0)).unwrap_err();
            assert_eq!(err.code(), "run_mismatch");
            assert_eq!(
                err.to_string(),
                format!("event belongs to run {got}, stream is for run \"r1\"")
            );
        }
        assert_eq!(r.count(), 1);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn buffer_size_must_be_positive() {
        let err = EventStream::new(StreamConfig::new("s1").with_buffer_size(0)).unwrap_err();
        assert_eq!(
            (err.code(), err),
            ("invalid_buffer_size", StreamError::InvalidBufferSize)
        );
        assert_eq!(
            EventStream::new(StreamConfig::new("s1"))
                .unwrap()
                .buffer_size(),
            1000
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn push_batch_is_all_or_nothing() {
        let mut s = stream(3);
        s.push(msg(0)).unwrap();
        let bad = vec![msg(1), ev(EventType::RunStarted, "s1", None, 2), msg(3)];
        assert_eq!(
            s.push_batch(bad),
            Err(StreamError::NonIncreasingSequence { last: 2, got: 2 })
        );
        let bad = vec![msg(1), ev(EventType::RunStarted, "other", None, 0)];
        assert_eq!(s.push_batch(bad).unwrap_err().code(), "session_mismatch");
        assert_eq!((s.count(), s.last_sequence(), s.lost_total()), (1, 1, 0));
        // A batch larger than the buffer keeps its tail and reports the rest.
        s.push_batch((1..=5).map(msg).collect()).unwrap();
        assert_eq!(seqs(s.get_events(&Filter::default())), [4, 5, 6]);
        let t = s.take(10).unwrap();
        assert_eq!(
            t.gap,
            Some(Gap {
                after: 0,
                lost: 3,
                first_available: 4
            })
        );
        assert_eq!(seqs(&t.events), [4, 5, 6]);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn closed_streams_refuse_pushes_but_read() {
        let mut s = stream(10);
        s.push(msg(0)).unwrap();
        s.push(msg(1)).unwrap();
        s.close();
        s.close();
        assert!(s.is_closed());
        assert_eq!(s.push(msg(2)), Err(StreamError::StreamClosed));
        assert_eq!(s.push_batch(vec![]), Err(StreamError::StreamClosed));
        assert_eq!(
            s.push_batch(vec![msg(3)]).unwrap_err().code(),
            "stream_closed"
        );
        assert_eq!(seqs(&s.take(10).unwrap().events), [1, 2]);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn seek_moves_forward_only_and_not_past_the_end() {
        let mut s = stream(10);
        for i in 0..5 {
            s.push(msg(i)).unwrap();
        }
        s.seek(2).unwrap();
        assert_eq!((s.cursor(), s.remaining()), (2, 3));
        s.seek(2).unwrap();
        let err = s.seek(1).unwrap_err();
        assert_eq!(err.code(), "invalid_cursor");
        expect!["invalid cursor 1: must be between the current cursor 2 and the last sequence 5"]
            .assert_eq(&err.to_string());
        assert_eq!(
            s.seek(6),
            Err(StreamError::InvalidCursor {
                requested: 6,
                current: 2,
                last: 5
            })
        );
        let t = s.take(10).unwrap();
        assert_eq!((t.gap, seqs(&t.events)), (None, vec![3, 4, 5]));
        s.seek(5).unwrap();
        assert_eq!(s.seek(4).unwrap_err().code(), "invalid_cursor");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn seek_between_sequences_and_over_lost_events() {
        let mut s = stream(2);
        for seq in [10, 20, 30, 40] {
            s.push(ev(EventType::MessageStreamed, "s1", None, seq))
                .unwrap();
        }
        s.seek(35).unwrap();
        let t = s.take(10).unwrap();
        assert_eq!(
            t.gap,
            Some(Gap {
                after: 0,
                lost: 2,
                first_available: 30
            }),
            "seeking past lost events does not hide them"
        );
        assert_eq!(seqs(&t.events), [40]);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn get_events_filters_by_cursor_and_kind() {
        let mut s = stream(10);
        s.push(ev(EventType::RunStarted, "s1", Some("r1"), 0))
            .unwrap();
        s.push(msg(1)).unwrap();
        s.push(msg(2)).unwrap();
        s.push(ev(EventType::RunCompleted, "s1", Some("r1"), 0))
            .unwrap();
        s.take(2).unwrap();
        let all = Filter::default();
        let streamed = Filter {
            from_cursor: false,
            kind: Some(EventType::MessageStreamed),
        };
        let unread_streamed = Filter {
            from_cursor: true,
            ..streamed
        };
        assert_eq!(seqs(s.get_events(&all)), [1, 2, 3, 4]);
        assert_eq!(seqs(s.get_events(&streamed)), [2, 3]);
        assert_eq!(seqs(s.get_events(&unread_streamed)), [3]);
        assert_eq!(s.cursor(), 2, "get_events does not move the cursor");
    }

    // ---- the buffer against a naive model ----

    #[derive(Clone, Debug)]
    enum Op {
        /// `None` = unsequenced; `Some(off)` = explicit `last + off` (0 repeats the last).
        Push(Option<u64>),
        Batch(Vec<Option<u64>>),
        Take(usize),
        Peek(usize),
        /// Seek to `last_sequence * k / 8` (may be behind or at the cursor).
        Seek(u64),
        Close,
    }

    fn op() -> impl Strategy<Value = Op> {
        let seq = prop_oneof![3 => Just(None), 1 => (0u64..4).prop_map(Some)];
        prop_oneof![
            6 => seq.clone().prop_map(Op::Push),
            2 => prop::collection::vec(seq, 0..6).prop_map(Op::Batch),
            4 => (0usize..5).prop_map(Op::Take),
            1 => (0usize..5).prop_map(Op::Peek),
            1 => (0u64..10).prop_map(Op::Seek),
            1 => Just(Op::Close),
        ]
    }

    /// Raw sequences (0 = unsequenced) for a batch pushed after `last`.
    fn raw_sequences(batch: &[Option<u64>], mut last: u64) -> Vec<u64> {
        batch
            .iter()
            .map(|q| match q {
                None => {
                    last += 1;
                    0
                }
                Some(off) => {
                    let raw = (last + off).max(1);
                    last = last.max(raw);
                    raw
                }
            })
            .collect()
    }

    /// Everything ever pushed, with what became of it. A model, not a buffer: it keeps all.
    #[derive(Default)]
    struct Model {
        size: usize,
        log: Vec<u64>,
        /// Index in `log` of the first event still buffered.
        front: usize,
        /// Index in `log` of the first event above the cursor.
        read: usize,
        cursor: u64,
        closed: bool,
        lost: u64,
        lost_after: u64,
        skipped: u64,
    }

    impl Model {
        fn last(&self) -> u64 {
            self.log.last().copied().unwrap_or(0)
        }

        fn push(&mut self, raw: &[u64]) -> Result<(), StreamError> {
            if self.closed {
                return Err(StreamError::StreamClosed);
            }
            let mut last = self.last();
            let mut seqs = vec![];
            for &got in raw {
                let next = if got == 0 { last + 1 } else { got };
                if next <= last {
                    return Err(StreamError::NonIncreasingSequence { last, got });
                }
                seqs.push(next);
                last = next;
            }
            for s in seqs {
                self.log.push(s);
                if self.log.len() - self.front > self.size {
                    if self.read <= self.front {
                        if self.lost == 0 {
                            self.lost_after = self.cursor;
                        }
                        self.lost += 1;
                        self.read = self.front + 1;
                    }
                    self.front += 1;
                }
            }
            Ok(())
        }

        fn take(&mut self, n: usize) -> (Vec<u64>, Option<Gap>) {
            let gap = (self.lost > 0).then(|| Gap {
                after: self.lost_after,
                lost: self.lost,
                first_available: self.log[self.front],
            });
            self.lost = 0;
            let out = self.peek(n);
            if let Some(&l) = out.last() {
                self.cursor = l;
            }
            self.read += out.len();
            (out, gap)
        }

        fn peek(&self, n: usize) -> Vec<u64> {
            let end = self.log.len().min(self.read.saturating_add(n));
            self.log[self.read..end].to_vec()
        }

        fn seek(&mut self, target: u64) -> Result<(), &'static str> {
            if target < self.cursor || target > self.last() {
                return Err("invalid_cursor");
            }
            let new_read = self.read.max(self.log.partition_point(|&q| q <= target));
            self.skipped += (new_read - self.read) as u64;
            self.read = new_read;
            self.cursor = target;
            Ok(())
        }
    }

    fn events_for(raw: &[u64], tag: usize) -> Vec<Event> {
        raw.iter()
            .enumerate()
            .map(|(j, &q)| match q {
                0 => msg((tag * 10 + j) as u64),
                q => ev(EventType::MessageStreamed, "s1", None, q),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[wasm_bindgen_test(unsupported = test)]
        fn buffer_matches_the_model(size in 1usize..6, ops in prop::collection::vec(op(), 0..60)) {
            let mut s = stream(size);
            let mut m = Model { size, ..Model::default() };
            let (mut taken, mut reported_lost) = (0u64, 0u64);
            let mut last_taken = 0u64;
            for (i, op) in ops.into_iter().enumerate() {
                let prev_cursor = s.cursor();
                match op {
                    Op::Push(q) => {
                        let raw = raw_sequences(&[q], m.last());
                        let want = m.push(&raw).map(|()| m.last());
                        let got = s.push(events_for(&raw, i).pop().unwrap());
                        prop_assert_eq!(got, want);
                    }
                    Op::Batch(b) => {
                        let raw = raw_sequences(&b, m.last());
                        let want = m.push(&raw);
                        prop_assert_eq!(s.push_batch(events_for(&raw, i)), want);
                    }
                    Op::Take(n) => {
                        let t = s.take(n).unwrap();
                        let (want, gap) = m.take(n);
                        prop_assert_eq!(seqs(&t.events), want);
                        prop_assert_eq!(t.gap, gap);
                        for e in &t.events {
                            prop_assert!(e.sequence() > last_taken, "taken sequences strictly increase");
                            last_taken = e.sequence();
                        }
                        if !t.events.is_empty() {
                            prop_assert!(s.cursor() > prev_cursor, "the cursor strictly increases on a take");
                        }
                        taken += t.events.len() as u64;
                        reported_lost += t.gap.map_or(0, |g| g.lost);
                    }
                    Op::Peek(n) => prop_assert_eq!(seqs(s.peek(n)), m.peek(n)),
                    Op::Seek(k) => {
                        let target = m.last() * k / 8;
                        prop_assert_eq!(s.seek(target).map_err(|e| e.code()), m.seek(target));
                    }
                    Op::Close => {
                        s.close();
                        m.closed = true;
                    }
                }
                prop_assert!(s.cursor() >= prev_cursor, "the cursor never moves back");
                prop_assert_eq!(s.cursor(), m.cursor);
                prop_assert_eq!(s.last_sequence(), m.last());
                prop_assert_eq!(s.count(), m.log.len() - m.front);
                prop_assert_eq!(s.remaining(), m.log.len() - m.read);
                prop_assert!(s.count() <= size);
                prop_assert_eq!(seqs(s.get_events(&Filter::default())), m.log[m.front..].to_vec());
                prop_assert_eq!(s.pending_gap().map(|g| g.lost).unwrap_or(0), m.lost);
            }
            // Read to the end: everything pushed was taken, skipped or reported lost.
            let t = s.take(usize::MAX).unwrap();
            taken += t.events.len() as u64;
            reported_lost += t.gap.map_or(0, |g| g.lost);
            prop_assert_eq!(reported_lost, s.lost_total());
            prop_assert_eq!(taken + reported_lost + m.skipped, m.log.len() as u64);
        }

        /// Without seeks, what a reader takes plus what it is told it lost is all that was pushed.
        #[wasm_bindgen_test(unsupported = test)]
        fn taken_plus_lost_is_pushed(size in 1usize..8, pushes in prop::collection::vec(1usize..6, 0..30), takes in prop::collection::vec(0usize..6, 0..30)) {
            let mut s = stream(size);
            let (mut taken, mut lost, mut pushed) = (0u64, 0u64, 0u64);
            for (i, (&p, &t)) in pushes.iter().zip(takes.iter().chain(std::iter::repeat(&0))).enumerate() {
                s.push_batch((0..p).map(|j| msg((i * 10 + j) as u64)).collect()).unwrap();
                pushed += p as u64;
                let got = s.take(t).unwrap();
                taken += got.events.len() as u64;
                lost += got.gap.map_or(0, |g| g.lost);
            }
            let got = s.take(usize::MAX).unwrap();
            taken += got.events.len() as u64;
            lost += got.gap.map_or(0, |g| g.lost);
            prop_assert_eq!(taken + lost, pushed);
            prop_assert_eq!(lost, s.lost_total());
        }
    }
}
