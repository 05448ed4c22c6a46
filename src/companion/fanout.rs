//! Fan-out: every subscription of a session reads the same encoded bytes.
//!
//! A [`Follower`] reads a session's log from its own cursor, then tails it; live and replayed
//! events come from the same place, by the same cursor, so there is no gap and no duplicate
//! where catch-up turns into tailing. What followers of one session share lives in its
//! `Tail`: the session's latest events, each encoded to JSON once ([`Encoded`]), and the
//! frames last built from them for each `max_frame`. Invariants:
//!
//! * The tail holds a contiguous run of the session's log, filled only from what a follower
//!   read from the store (never from this companion's own commits, so with several companions
//!   writing one PostgreSQL log it has no holes). A sequence, once stored, never changes, so an
//!   entry is never stale; a read the tail cannot start goes to the store.
//! * At most one follower of a session reads the live edge from the store at a time (the fill
//!   lock); the others that find it taken wait for that read to end, all woken at once
//!   (`Tail::filled`: no hand-over from one waiter to the next, each behind the run queue), and
//!   take its events from the tail. A follower far behind reads the store on its own and does
//!   not hold the others up.
//! * Frames for `(after, last, max_frame)` are built once (`Tail::frames`) and shared: a frame
//!   is [`Text`], whose clones share one buffer, so a hundred subscribers in step cost one
//!   encoding and a hundred reference counts. The bytes are those of
//!   [`wire::encode_events`] on the same events.
//! * Commits reach followers through one dispatcher task per [`Fanout`], which listens to the
//!   store's broadcast and wakes only the followers of the session that moved (all of them if
//!   it lagged). A follower marks the wake-up seen before it reads, so a commit between its read
//!   and its wait still wakes it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use axum::body::Bytes;
use tokio::sync::{broadcast, watch, Notify};

use super::store::{EventQuery, Store, StoreError};
use crate::core::event_ref::packed;
use crate::core::wire::{self, ServerMsg};

/// A text frame whose clones share one buffer.
pub type Text = axum::extract::ws::Utf8Bytes;

/// Events of a session kept encoded in memory, per session with followers.
const TAIL: usize = 1024;
/// Frame sets kept per session (one per `max_frame` in use, and a few recent cursors).
const MEMOS: usize = 8;

/// One stored event, encoded once: its sequence and its [`Event::to_json`](crate::core::event::Event::to_json).
#[derive(Clone, Debug)]
pub struct Encoded {
    pub sequence: u64,
    pub json: Arc<str>,
}

/// One frame to send, shared by every subscriber it goes to.
#[derive(Clone, Debug)]
pub struct OutFrame {
    pub text: Text,
    /// The last sequence it completes (0 for a partial event).
    pub last_sequence: u64,
    /// Its packed form, made by the first subscriber that asked for `packed_events` and
    /// shared by the others.
    pub packed: Arc<Packed>,
}

impl OutFrame {
    /// A frame of its own (not one of a session's shared sets).
    pub fn single(text: Text) -> OutFrame {
        OutFrame {
            text,
            last_sequence: 0,
            packed: Arc::default(),
        }
    }

    /// What goes to a subscriber: the text, and for one that `packs` (asked for
    /// `packed_events`) the packed form's cell. Only such a subscriber ever makes the copy.
    pub fn outgoing(&self, packs: bool) -> Outgoing {
        Outgoing {
            text: self.text.clone(),
            packed: packs.then(|| self.packed.clone()),
        }
    }
}

/// An `events` frame's packed form ([`packed::pack`] of its text), made once when first asked
/// for: `None` inside for a frame that is not one (a `message_part`), which goes as its text.
pub type Packed = OnceLock<Option<Bytes>>;

/// A frame on its way to one connection: its text, and for a session's events frame the cell
/// of its packed form, which a WebSocket that asked for `packed_events` sends instead.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub text: Text,
    pub packed: Option<Arc<Packed>>,
}

impl Outgoing {
    /// The packed bytes, when there are (made here if no one has yet).
    pub fn packed(&self) -> Option<Bytes> {
        let cell = self.packed.as_ref()?;
        cell.get_or_init(|| packed::pack(self.text.as_str()).map(Bytes::from))
            .clone()
    }
}

impl From<Text> for Outgoing {
    fn from(text: Text) -> Outgoing {
        Outgoing { text, packed: None }
    }
}

impl From<String> for Outgoing {
    fn from(text: String) -> Outgoing {
        Outgoing::from(Text::from(text))
    }
}

/// What a [`Follower`] read next.
#[derive(Debug)]
pub enum Page<T> {
    /// The next events after the cursor, in order.
    Events(T),
    /// Nothing more is stored after `latest` (sent once per catch-up).
    CaughtUp(u64),
}

/// What the dispatcher tells the followers of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Wake {
    /// The highest latest sequence a commit announced for the session.
    latest: u64,
    /// How many times the dispatcher lagged: commits may have been missed, so read the store.
    lags: u64,
    /// The store's broadcast closed: nothing more will be committed.
    closed: bool,
}

/// What moved, for [`Fanout::wake`].
#[derive(Clone, Copy)]
enum Moved {
    Committed(u64),
    Lagged,
    Closed,
}
/// The shared tails of one store's sessions; see the module docs.
pub struct Fanout {
    store: Arc<dyn Store>,
    sessions: Mutex<HashMap<String, Weak<Tail>>>,
}

impl Fanout {
    /// Starts the dispatcher; needs a tokio runtime.
    pub fn new(store: Arc<dyn Store>) -> Arc<Fanout> {
        let mut commits = store.subscribe();
        let fanout = Arc::new(Fanout {
            store,
            sessions: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&fanout);
        tokio::spawn(async move {
            loop {
                let received = commits.recv().await;
                let Some(fanout) = weak.upgrade() else { return };
                match received {
                    Ok(c) => fanout.wake(Some(&c.session_id), Moved::Committed(c.latest_sequence)),
                    Err(broadcast::error::RecvError::Lagged(_)) => fanout.wake(None, Moved::Lagged),
                    Err(broadcast::error::RecvError::Closed) => {
                        fanout.wake(None, Moved::Closed);
                        return;
                    }
                }
            }
        });
        fanout
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Wakes the followers of `session` (of every session for `None`).
    fn wake(&self, session: Option<&str>, moved: Moved) {
        let mut sessions = self.sessions.lock().expect("fanout lock");
        let notify = |tail: &Tail| {
            tail.wake.send_modify(|w| match moved {
                Moved::Committed(latest) => w.latest = w.latest.max(latest),
                Moved::Lagged => w.lags += 1,
                Moved::Closed => w.closed = true,
            });
        };
        match session {
            Some(id) => match sessions.get(id).map(Weak::upgrade) {
                Some(Some(tail)) => notify(&tail),
                Some(None) => {
                    sessions.remove(id);
                }
                None => {}
            },
            None => {
                sessions.retain(|_, tail| match tail.upgrade() {
                    Some(tail) => {
                        notify(&tail);
                        true
                    }
                    None => false,
                });
            }
        }
    }

    /// The session's shared tail, made when it has no follower yet.
    fn tail(&self, session: &str) -> Arc<Tail> {
        let mut sessions = self.sessions.lock().expect("fanout lock");
        if let Some(tail) = sessions.get(session).and_then(Weak::upgrade) {
            return tail;
        }
        let tail = Arc::new(Tail {
            session: session.to_owned(),
            state: Mutex::new(TailState::default()),
            fill: tokio::sync::Mutex::new(()),
            filled: Notify::new(),
            wake: watch::channel(Wake::default()).0,
            caught_up: Mutex::new(None),
        });
        sessions.insert(session.to_owned(), Arc::downgrade(&tail));
        tail
    }
}

/// What the followers of one session share.
struct Tail {
    session: String,
    state: Mutex<TailState>,
    /// Held by the follower reading the live edge from the store.
    fill: tokio::sync::Mutex<()>,
    /// Told when a read of the live edge ends, to the followers that found `fill` taken.
    filled: Notify,
    wake: watch::Sender<Wake>,
    /// The last `caught_up` frame, with its `latest`.
    caught_up: Mutex<Option<(u64, Text)>>,
}

#[derive(Default)]
struct TailState {
    /// Contiguous sequences, oldest first.
    events: VecDeque<Encoded>,
    /// Recent frame sets: `(after, last, max_frame)` and its frames.
    memos: VecDeque<(u64, u64, usize, Arc<[OutFrame]>)>,
}

impl Tail {
    /// The events after `after` (at most `limit`), if the tail holds the next one.
    fn read(&self, after: u64, limit: usize) -> Option<Vec<Encoded>> {
        let state = self.state.lock().expect("tail lock");
        let first = state.events.front()?.sequence;
        let last = state.events.back()?.sequence;
        // `after >= last` first: a cursor of u64::MAX must not overflow `after + 1`.
        if after >= last || after + 1 < first {
            return None;
        }
        let skip = (after + 1 - first) as usize;
        Some(
            state
                .events
                .iter()
                .skip(skip)
                .take(limit)
                .cloned()
                .collect(),
        )
    }

    /// The frames of the events after `after` (at most `limit`) for `max_frame`, built once,
    /// with the last sequence they hold, if the tail holds the next event: what
    /// [`Tail::read`] then [`Tail::frames`] give, in one look and without copying the events.
    fn frames_after(
        &self,
        epoch: &str,
        after: u64,
        limit: usize,
        max_frame: usize,
    ) -> Option<(Arc<[OutFrame]>, u64)> {
        let mut state = self.state.lock().expect("tail lock");
        let first = state.events.front()?.sequence;
        let last = state.events.back()?.sequence;
        if after >= last || after + 1 < first || limit == 0 {
            return None;
        }
        let end = last.min(after.saturating_add(limit as u64));
        if let Some((.., frames)) =
            (state.memos.iter()).find(|(a, l, m, _)| (*a, *l, *m) == (after, end, max_frame))
        {
            return Some((frames.clone(), end));
        }
        let skip = (after + 1 - first) as usize;
        let events = state.events.range(skip..skip + (end - after) as usize);
        let frames = self.encode(epoch, events, max_frame);
        state.remember(after, end, max_frame, frames.clone());
        Some((frames, end))
    }

    fn encode<'a>(
        &self,
        epoch: &str,
        events: impl Iterator<Item = &'a Encoded>,
        max_frame: usize,
    ) -> Arc<[OutFrame]> {
        wire::frame_encoded(
            &self.session,
            epoch,
            events.map(|e| (e.sequence, &*e.json)),
            max_frame,
        )
        .into_iter()
        .map(|f| OutFrame {
            text: f.text.into(),
            last_sequence: f.last_sequence,
            packed: Arc::default(),
        })
        .collect()
    }

    fn try_lock_fill(&self) -> Option<Fill<'_>> {
        Some(Fill {
            lock: Some(self.fill.try_lock().ok()?),
            filled: &self.filled,
        })
    }

    /// Whether a read after `after` would extend the tail (or start it): the live edge.
    fn at_edge(&self, after: u64) -> bool {
        let state = self.state.lock().expect("tail lock");
        match (state.events.front(), state.events.back()) {
            (Some(first), Some(last)) => after + 1 >= first.sequence && after >= last.sequence,
            _ => true,
        }
    }

    /// Adds a contiguous run read from the store, keeping the tail contiguous.
    fn extend(&self, run: &[Encoded]) {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return;
        };
        let mut state = self.state.lock().expect("tail lock");
        let end = state.events.back().map(|e| e.sequence);
        match end {
            Some(end) if last.sequence <= end => return,
            Some(end) if first.sequence <= end + 1 => {
                let skip = (end + 1 - first.sequence) as usize;
                state.events.extend(run[skip..].iter().cloned());
            }
            // Empty, or a gap (the tail was dropped while followers were away): start over.
            _ => {
                state.events.clear();
                state.events.extend(run.iter().cloned());
            }
        }
        let excess = state.events.len().saturating_sub(TAIL);
        state.events.drain(..excess);
    }

    /// The frames of `events` (the run after `after`) for `max_frame`, built once.
    fn frames(
        &self,
        epoch: &str,
        after: u64,
        events: &[Encoded],
        max_frame: usize,
    ) -> Arc<[OutFrame]> {
        let last = events.last().map_or(after, |e| e.sequence);
        let mut state = self.state.lock().expect("tail lock");
        if let Some((.., frames)) =
            (state.memos.iter()).find(|(a, l, m, _)| (*a, *l, *m) == (after, last, max_frame))
        {
            return frames.clone();
        }
        let frames = self.encode(epoch, events.iter(), max_frame);
        state.remember(after, last, max_frame, frames.clone());
        frames
    }
}

/// The fill lock, held: on every way out, released and then the waiting followers told.
struct Fill<'a> {
    lock: Option<tokio::sync::MutexGuard<'a, ()>>,
    filled: &'a Notify,
}

impl Drop for Fill<'_> {
    fn drop(&mut self) {
        // Released first: a follower woken finds the lock free.
        drop(self.lock.take());
        self.filled.notify_waiters();
    }
}

impl TailState {
    fn remember(&mut self, after: u64, last: u64, max_frame: usize, frames: Arc<[OutFrame]>) {
        if self.memos.len() == MEMOS {
            self.memos.pop_front();
        }
        self.memos.push_back((after, last, max_frame, frames));
    }
}

fn encode(events: &[crate::core::event::Event]) -> Vec<Encoded> {
    (events.iter())
        .map(|e| Encoded {
            sequence: e.sequence(),
            json: e.to_json().into(),
        })
        .collect()
}

impl Tail {
    /// The `caught_up` frame for `latest`, built once.
    fn caught_up(&self, latest: u64) -> Text {
        let mut memo = self.caught_up.lock().expect("caught-up lock");
        match &*memo {
            Some((at, text)) if *at == latest => text.clone(),
            _ => {
                let text: Text = ServerMsg::CaughtUp {
                    session: self.session.clone(),
                    latest,
                }
                .encode()
                .into();
                *memo = Some((latest, text.clone()));
                text
            }
        }
    }
}

/// Reads a session's log from a cursor, then tails it, woken by the store's commits.
pub struct Follower {
    store: Arc<dyn Store>,
    epoch: String,
    tail: Arc<Tail>,
    wake: watch::Receiver<Wake>,
    after: u64,
    caught_up_sent: bool,
    /// Whether the store may hold events after `after` that no commit announced: at first
    /// (commits before this follower were never announced to it) and after a lag.
    must_read: bool,
    lags: u64,
}

impl Follower {
    /// Listens for commits before the first read, so no commit can be missed between.
    pub fn new(fanout: &Fanout, session: &str, after: u64) -> Follower {
        let tail = fanout.tail(session);
        Follower {
            store: fanout.store.clone(),
            epoch: fanout.store.epoch().to_owned(),
            wake: tail.wake.subscribe(),
            tail,
            after,
            caught_up_sent: false,
            must_read: true,
            lags: 0,
        }
    }

    /// The last sequence handed out.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The next events after the cursor, encoded (at most `limit`), or the end of catch-up.
    pub async fn next_events(&mut self, limit: usize) -> Result<Page<Vec<Encoded>>, StoreError> {
        loop {
            if let Some(page) = self.step(limit).await? {
                return Ok(page);
            }
        }
    }

    /// One look: the next events or the end of catch-up, else (`None`) a wait for the next
    /// wake-up.
    async fn step(&mut self, limit: usize) -> Result<Option<Page<Vec<Encoded>>>, StoreError> {
        // Seen before reading: a commit from now on wakes the wait below.
        let wake = *self.wake.borrow_and_update();
        if wake.closed {
            return Err(StoreError::Closed);
        }
        if wake.lags != self.lags {
            self.lags = wake.lags;
            self.must_read = true;
        }
        if let Some(events) = self.read(limit, wake.latest).await? {
            self.after = events.last().map_or(self.after, |e| e.sequence);
            self.caught_up_sent = false;
            return Ok(Some(Page::Events(events)));
        }
        if !self.caught_up_sent {
            self.caught_up_sent = true;
            return Ok(Some(Page::CaughtUp(self.after)));
        }
        if self.wake.changed().await.is_err() {
            return Err(StoreError::Closed);
        }
        Ok(None)
    }

    /// [`Follower::next_events`] as `max_frame`-bounded frames, shared with every follower of
    /// the session at the same cursor.
    pub async fn next_frames(
        &mut self,
        limit: usize,
        max_frame: usize,
    ) -> Result<Page<Arc<[OutFrame]>>, StoreError> {
        loop {
            // Usually, at the live edge: the tail holds the next events, and their frames.
            let tail = &self.tail;
            if let Some((frames, last)) =
                tail.frames_after(&self.epoch, self.after, limit, max_frame)
            {
                self.after = last;
                self.caught_up_sent = false;
                return Ok(Page::Events(frames));
            }
            let after = self.after;
            match self.step(limit).await? {
                Some(Page::Events(events)) => {
                    let frames = self.tail.frames(&self.epoch, after, &events, max_frame);
                    return Ok(Page::Events(frames));
                }
                Some(Page::CaughtUp(latest)) => return Ok(Page::CaughtUp(latest)),
                None => {}
            }
        }
    }

    /// The `caught_up` frame for `latest`, shared by the session's followers.
    pub fn caught_up(&self, latest: u64) -> Text {
        self.tail.caught_up(latest)
    }

    /// The events after the cursor: from the tail, else from the store (filling the tail).
    /// `None`: nothing is stored after it, as far as commits up to `latest` tell. So a
    /// follower at the live edge reads the store only when a commit announced more.
    async fn read(
        &mut self,
        limit: usize,
        latest: u64,
    ) -> Result<Option<Vec<Encoded>>, StoreError> {
        let tail = &self.tail;
        // At the live edge, one reads for all; the others find its events in the tail.
        let _fill = loop {
            // Made before looking, it hears of every read that ends from now on (a
            // `notify_waiters` reaches a `Notified` from its making, not its first poll).
            let filled = tail.filled.notified();
            if let Some(events) = tail.read(self.after, limit) {
                return Ok(Some(events));
            }
            if !self.must_read && latest <= self.after {
                return Ok(None);
            }
            if !tail.at_edge(self.after) {
                break None;
            }
            match tail.try_lock_fill() {
                Some(fill) => break Some(fill),
                None => filled.await,
            }
        };
        let query = EventQuery {
            after: Some(self.after),
            limit: Some(limit),
            ..EventQuery::default()
        };
        let events = self.store.get_events(&self.tail.session, &query).await?;
        // A short page is everything stored now; a full one may have more behind it.
        self.must_read = events.len() >= limit;
        if events.is_empty() {
            return Ok(None);
        }
        let encoded = encode(&events);
        self.tail.extend(&encoded);
        Ok(Some(encoded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::companion::store::{SessionRecord, SessionState, SqliteStore};
    use crate::core::event::{Event, EventId, EventInit, EventType, Provider};
    use crate::core::time::Timestamp;

    async fn store_with(session: &str, events: usize) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("f.db")).unwrap());
        let at = Timestamp::EPOCH;
        store
            .create_session(SessionRecord::new(
                session,
                "demo",
                "/",
                SessionState::Running,
                "local",
                at,
            ))
            .await
            .unwrap();
        append(&store, session, 0..events).await;
        (dir, store)
    }

    async fn append(store: &Arc<dyn Store>, session: &str, range: std::ops::Range<usize>) {
        let events = range
            .map(|n| {
                let at = Timestamp::from_unix_millis(n as i64);
                let mut init =
                    EventInit::new(EventType::MessageStreamed, session, Provider::Demo, at);
                init.id = Some(EventId::derive(&[session, &n.to_string()]));
                init.data
                    .insert("delta".into(), serde_json::json!(format!("chunk {n}")));
                Event::new(init).unwrap()
            })
            .collect::<Vec<_>>();
        if !events.is_empty() {
            store.append(session, events).await.unwrap();
        }
    }

    /// Reads frames until caught up; returns each page's frame texts and the `latest` told.
    async fn catch_up(follower: &mut Follower, limit: usize) -> (Vec<Arc<[OutFrame]>>, u64) {
        let mut pages = Vec::new();
        loop {
            let page = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                follower.next_frames(limit, wire::DEFAULT_MAX_FRAME),
            )
            .await
            .expect("a page in time")
            .unwrap();
            match page {
                Page::Events(frames) => pages.push(frames),
                Page::CaughtUp(latest) => return (pages, latest),
            }
        }
    }

    fn sequences(pages: &[Arc<[OutFrame]>]) -> Vec<u64> {
        let mut out = Vec::new();
        for frame in pages.iter().flat_map(|p| p.iter()) {
            match ServerMsg::decode(&frame.text, usize::MAX).unwrap() {
                ServerMsg::Events { events, .. } => out.extend(events.iter().map(Event::sequence)),
                other => panic!("unexpected {other:?}"),
            }
        }
        out
    }

    /// Many followers at the live edge, woken by one commit at once: one of them reads it from
    /// the store, and every one gets its events once, in the same buffer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn followers_at_the_edge_share_one_read_and_one_buffer() {
        // (events stored, followers, events appended in one commit)
        let cases = [(0, 1, 1), (10, 3, 1), (100, 200, 7)];
        for (stored, followers, more) in cases {
            let session = "ses_f2";
            let (_dir, store) = store_with(session, stored).await;
            let fanout = Fanout::new(store.clone());
            let (ready_tx, mut ready) = tokio::sync::mpsc::channel(followers);
            let tasks: Vec<_> = (0..followers)
                .map(|_| {
                    let (fanout, ready) = (fanout.clone(), ready_tx.clone());
                    tokio::spawn(async move {
                        let mut follower = Follower::new(&fanout, session, 0);
                        catch_up(&mut follower, 512).await;
                        ready.send(()).await.unwrap();
                        catch_up(&mut follower, 512).await.0
                    })
                })
                .collect();
            for _ in 0..followers {
                ready.recv().await.unwrap();
            }
            append(&store, session, stored..stored + more).await;
            let want: Vec<u64> = (stored as u64 + 1..=(stored + more) as u64).collect();
            let mut buffers = Vec::new();
            for task in tasks {
                let live = task.await.unwrap();
                assert_eq!(sequences(&live), want, "{followers} followers");
                buffers.push(live[0][0].text.as_ptr());
            }
            buffers.dedup();
            assert_eq!(buffers.len(), 1, "one buffer for {followers} followers");
        }
    }

    /// Followers from several cursors, over logs longer than a page and at the live edge:
    /// every event once, in order, each page's bytes those of `encode_events`, and two followers
    /// at one cursor sharing one buffer.
    #[tokio::test]
    async fn followers_read_every_event_once_and_share_frames() {
        // (events stored, page limit, cursor, events appended once caught up)
        let cases = [
            (0, 512, 0, 3),
            (1000, 512, 0, 5),
            (1000, 100, 950, 700),
            (20, 8, 20, 1),
        ];
        for (stored, limit, after, more) in cases {
            let session = "ses_f1";
            let (_dir, store) = store_with(session, stored).await;
            let fanout = Fanout::new(store.clone());
            let mut a = Follower::new(&fanout, session, after as u64);
            let mut b = Follower::new(&fanout, session, after as u64);
            let (pages_a, latest_a) = catch_up(&mut a, limit).await;
            let (pages_b, latest_b) = catch_up(&mut b, limit).await;
            let want: Vec<u64> = (after as u64 + 1..=stored as u64).collect();
            assert_eq!(sequences(&pages_a), want, "{stored} stored, after {after}");
            assert_eq!(sequences(&pages_b), want);
            assert_eq!((latest_a, latest_b), (stored as u64, stored as u64));

            append(&store, session, stored..stored + more).await;
            let (live_a, _) = catch_up(&mut a, limit).await;
            let (live_b, _) = catch_up(&mut b, limit).await;
            let want: Vec<u64> = (stored as u64 + 1..=(stored + more) as u64).collect();
            assert_eq!(sequences(&live_a), want, "live after {stored}");
            assert_eq!(sequences(&live_b), want);
            // Both followers took their live pages from the tail, in the same steps.
            let first = |p: &[Arc<[OutFrame]>]| p[0][0].text.as_ptr();
            assert_eq!(first(&live_a), first(&live_b), "one buffer for both");

            // The bytes are those of encoding the stored events directly.
            let all = store
                .get_events(
                    session,
                    &EventQuery {
                        after: Some(stored as u64),
                        ..EventQuery::default()
                    },
                )
                .await
                .unwrap();
            let page: Vec<Event> = all.into_iter().take(limit).collect();
            let direct =
                wire::encode_events(session, store.epoch(), &page, wire::DEFAULT_MAX_FRAME);
            assert_eq!(&*live_a[0][0].text, direct[0].text.as_str());
        }
    }
}
