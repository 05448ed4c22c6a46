//! The projections snapshots and history pages come from (docs/protocol.md, "Snapshots and
//! history"): per session, the core's [`Projection`] — the pipeline the browser runs — built
//! from the log the first time a client asks, and brought up to date from where it stopped
//! (only the events appended since) each time one asks again.
//!
//! Bounded three ways, the least recently asked-for dropped first: at most [`CAPACITY`]
//! sessions, at most [`EVENT_BUDGET`] events projected across them (a projection costs about
//! 200 bytes per event: one of a million-event session is 200 MiB), and none kept once nobody
//! has asked for it for [`IDLE`]. A session nobody asks a snapshot of costs nothing, a
//! companion whose pages went away holds nothing after a while, and dropping one only costs
//! the next request a rebuild. Nothing here is persisted: the log stays the only truth.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use super::now;
use super::store::{EventQuery, Store, StoreError};
use crate::core::snapshot::{Projection, Snapshot};
use crate::core::timeline::Item;

/// Sessions whose projection is held at once.
pub const CAPACITY: usize = 8;
/// Events projected across the held sessions, at most (the one asked for now is always kept,
/// however long it is).
pub const EVENT_BUDGET: u64 = 1_000_000;
/// A projection nobody asked for in this long is dropped.
pub const IDLE: Duration = Duration::from_secs(10 * 60);
/// Events read from the store per page while a projection catches up.
const PAGE: usize = 4096;

/// One held projection and what the bounds look at.
struct Held {
    session: String,
    projection: Arc<AsyncMutex<Projection>>,
    /// Events it had projected when last brought up to date.
    events: u64,
    used: Instant,
}

/// The bounded cache of projections; see the module docs.
pub struct Projections {
    store: Arc<dyn Store>,
    /// Least recently used first.
    held: Mutex<Vec<Held>>,
}

/// Drops what the bounds do not allow, oldest use first, never `keep` (the session being
/// asked for) nor one a request is building or reading now (dropping it would not free it,
/// and the next request would build a second one).
fn evict(held: &mut Vec<Held>, now: Instant, keep: Option<&str>) {
    let spared =
        |h: &Held| Some(h.session.as_str()) == keep || Arc::strong_count(&h.projection) > 1;
    held.retain(|h| spared(h) || now.duration_since(h.used) < IDLE);
    let over = |held: &Vec<Held>| {
        held.len() > CAPACITY || held.iter().map(|h| h.events).sum::<u64>() > EVENT_BUDGET
    };
    while over(held) {
        match held.iter().position(|h| !spared(h)) {
            Some(i) => drop(held.remove(i)),
            None => break,
        }
    }
}

impl Projections {
    /// The cache; inside a tokio runtime, a task also drops idle projections every minute
    /// (it ends with the cache).
    pub fn new(store: Arc<dyn Store>) -> Arc<Projections> {
        let projections = Arc::new(Projections {
            store,
            held: Mutex::new(Vec::new()),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak: Weak<Projections> = Arc::downgrade(&projections);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(projections) = weak.upgrade() else {
                        return;
                    };
                    evict(&mut projections.lock(), Instant::now(), None);
                }
            });
        }
        projections
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().expect("not poisoned")
    }

    /// How many sessions' projections are held now.
    pub fn held(&self) -> usize {
        self.lock().len()
    }

    fn entry(&self, session: &str) -> Arc<AsyncMutex<Projection>> {
        let mut held = self.lock();
        let mut entry = match held.iter().position(|h| h.session == session) {
            Some(i) => held.remove(i),
            None => Held {
                session: session.to_owned(),
                projection: Arc::new(AsyncMutex::new(Projection::new(session))),
                events: 0,
                used: Instant::now(),
            },
        };
        entry.used = Instant::now();
        let projection = entry.projection.clone();
        held.push(entry);
        evict(&mut held, Instant::now(), Some(session));
        projection
    }

    /// Records how far `session`'s projection got, and applies the bounds.
    fn weigh(&self, session: &str, p: &Projection) {
        let mut held = self.lock();
        if let Some(h) = held.iter_mut().find(|h| h.session == session) {
            h.events = p.after();
        }
        evict(&mut held, Instant::now(), Some(session));
    }

    /// Applies what the log has beyond the projection.
    async fn catch_up(&self, session: &str, p: &mut Projection) -> Result<(), StoreError> {
        loop {
            let query = EventQuery {
                after: Some(p.after()),
                limit: Some(PAGE),
                ..EventQuery::default()
            };
            let events = self.store.get_events(session, &query).await?;
            if events.is_empty() {
                return Ok(());
            }
            let now_ms = now().unix_millis();
            for event in &events {
                p.handle_event(event, now_ms);
            }
            if events.len() < PAGE {
                return Ok(());
            }
            // A long build yields between pages.
            tokio::task::yield_now().await;
        }
    }

    /// The session as the log has it now, with at least its last `items` items.
    pub async fn snapshot(&self, session: &str, items: usize) -> Result<Snapshot, StoreError> {
        let entry = self.entry(session);
        let mut p = entry.lock().await;
        let caught_up = self.catch_up(session, &mut p).await;
        self.weigh(session, &p);
        caught_up?;
        Ok(p.snapshot(self.store.epoch(), items))
    }

    /// Up to `limit` items just before index `before`: the page's first index and its items.
    pub async fn history(
        &self,
        session: &str,
        before: usize,
        limit: usize,
    ) -> Result<(usize, Vec<Item>), StoreError> {
        let entry = self.entry(session);
        let mut p = entry.lock().await;
        let caught_up = self.catch_up(session, &mut p).await;
        self.weigh(session, &p);
        caught_up?;
        Ok(p.history(before, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(session: &str, events: u64, used: Instant) -> Held {
        Held {
            session: session.to_owned(),
            projection: Arc::new(AsyncMutex::new(Projection::new(session))),
            events,
            used,
        }
    }

    /// The held sessions (name, events, seconds since use), the one asked for, who is left.
    type Case = (
        &'static [(&'static str, u64, u64)],
        Option<&'static str>,
        &'static [&'static str],
    );

    /// Each case: the held sessions (name, events, seconds since use; least recent first),
    /// the one being asked for, and who is left.
    #[test]
    fn the_bounds_drop_the_least_recently_used_and_never_the_one_asked_for() {
        let cases: &[Case] = &[
            (&[("a", 10, 30), ("b", 10, 20)], Some("b"), &["a", "b"]),
            // Over the event budget: the oldest go first.
            (
                &[("a", 600_000, 30), ("b", 300_000, 20), ("c", 300_000, 0)],
                Some("c"),
                &["b", "c"],
            ),
            // The one asked for is kept even alone over the budget.
            (
                &[("a", 10, 30), ("big", 3_000_000, 0)],
                Some("big"),
                &["big"],
            ),
            // Idle for longer than IDLE: gone, unless asked for now.
            (&[("a", 10, 601), ("b", 10, 20)], Some("b"), &["b"]),
            (&[("a", 10, 601), ("b", 10, 700)], Some("b"), &["b"]),
            (&[("a", 10, 601), ("b", 10, 20)], None, &["b"]),
            // More sessions than CAPACITY.
            (
                &[
                    ("1", 1, 9),
                    ("2", 1, 8),
                    ("3", 1, 7),
                    ("4", 1, 6),
                    ("5", 1, 5),
                    ("6", 1, 4),
                    ("7", 1, 3),
                    ("8", 1, 2),
                    ("9", 1, 1),
                ],
                Some("9"),
                &["2", "3", "4", "5", "6", "7", "8", "9"],
            ),
        ];
        let now = Instant::now() + Duration::from_secs(3600);
        for (i, (before, keep, after)) in cases.iter().enumerate() {
            let mut list: Vec<Held> = (before.iter())
                .map(|&(s, events, ago)| held(s, events, now - Duration::from_secs(ago)))
                .collect();
            evict(&mut list, now, *keep);
            let left: Vec<&str> = list.iter().map(|h| h.session.as_str()).collect();
            assert_eq!(&left, after, "case {i}");
        }
        // One a request still builds or reads is kept, idle and over the budget as it is.
        let busy = held("busy", 3_000_000, now - Duration::from_secs(700));
        let in_use = busy.projection.clone();
        let mut list = vec![busy, held("b", 10, now)];
        evict(&mut list, now, Some("b"));
        assert_eq!(list.len(), 2);
        drop(in_use);
        evict(&mut list, now, Some("b"));
        assert_eq!(list.len(), 1);
    }
}
