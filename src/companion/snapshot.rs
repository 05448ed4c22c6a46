//! The projections snapshots and history pages come from (docs/protocol.md, "Snapshots and
//! history"): per session, the core's [`Projection`] — the pipeline the browser runs — kept
//! beside the log in the store so that no request replays a long session from its start.
//!
//! A session's stored projection is a checkpoint (the projection at a cursor: its items from
//! the first one still open, and the state to go on from there) and the session's *final*
//! items before it, by index (`Store::save_projection`). A projection is checkpointed each
//! time it has applied [`CHECKPOINT_EVERY`] events beyond its last checkpoint — while a
//! request brings it up to date, and in the background for every session the log grows
//! ([`Projections::keep_checkpoints`]) — and then trimmed to its last [`KEEP`] items: its
//! memory is what a page shows, not the session's length. A snapshot is the checkpoint
//! restored, the few events after it applied, and as many final items as it asks for read
//! back from the store; a history page reads the final items it needs. The log stays the
//! only truth: a stored projection of another format or epoch, or one that does not hold
//! together, is ignored and rebuilt from the log; a failed save costs only time.
//!
//! What is held in memory is bounded three ways, the least recently asked-for dropped first:
//! at most [`CAPACITY`] sessions, at most [`ITEM_BUDGET`] items across them, and none kept
//! once nobody has asked for it for [`IDLE`]. Dropping one costs the next request a load of
//! its checkpoint.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Mutex as AsyncMutex;

use super::now;
use super::store::{EventQuery, Store, StoreError, StoredProjection};
use crate::core::snapshot::{Projection, Snapshot, MAX_SNAPSHOT_ITEMS, PROJECTION_FORMAT};
use crate::core::timeline::Item;

/// Sessions whose projection is held at once.
pub const CAPACITY: usize = 8;
/// Items held across the held projections, at most (the one asked for now is always kept,
/// however many it holds).
pub const ITEM_BUDGET: usize = 100_000;
/// A projection nobody asked for in this long is dropped.
pub const IDLE: Duration = Duration::from_secs(10 * 60);
/// A projection is checkpointed once it has applied this many events beyond its last
/// checkpoint: a cold snapshot applies at most about this many.
pub const CHECKPOINT_EVERY: u64 = 4096;
/// Items a projection keeps in memory after a checkpoint: its last this many (more when an
/// open item reaches further back), what snapshots of up to this many items are answered
/// from without reading items back.
pub const KEEP: usize = 1000;
/// Events read from the store per page while a projection catches up.
const PAGE: usize = 4096;

/// A session's projection as held: loaded from the store (or built from the log) on first
/// use, and what the store holds of it.
#[derive(Default)]
struct Slot {
    projection: Option<Projection>,
    saved: Saved,
}

/// What the store holds of a session's projection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Saved {
    /// The stored checkpoint's cursor (0: none).
    after: u64,
    /// How many final items are stored (indices `0..items`).
    items: usize,
    /// The cursor of the last failed save: the next try waits for [`CHECKPOINT_EVERY`]
    /// more events.
    failed: Option<u64>,
}

impl Saved {
    fn due(&self, after: u64) -> bool {
        let last = self.failed.unwrap_or(0).max(self.after);
        after >= last.saturating_add(CHECKPOINT_EVERY)
    }
}

/// One held projection and what the bounds look at.
struct Held {
    session: String,
    slot: Arc<AsyncMutex<Slot>>,
    /// Items it held when last used.
    items: usize,
    used: Instant,
    /// A client asked for it (not only the background checkpointer).
    asked: bool,
}

/// The bounded cache of projections; see the module docs.
pub struct Projections {
    store: Arc<dyn Store>,
    /// Least recently used first.
    held: Mutex<Vec<Held>>,
    /// Events applied to projections so far (what loading from checkpoints saves).
    applied: AtomicU64,
}

/// Drops what the bounds do not allow, oldest use first, never `keep` (the session being
/// asked for) nor one a request is building or reading now (dropping it would not free it,
/// and the next request would build a second one).
fn evict(held: &mut Vec<Held>, now: Instant, keep: Option<&str>) {
    let spared = |h: &Held| Some(h.session.as_str()) == keep || Arc::strong_count(&h.slot) > 1;
    held.retain(|h| spared(h) || (h.asked && now.duration_since(h.used) < IDLE));
    let over = |held: &Vec<Held>| {
        held.len() > CAPACITY || held.iter().map(|h| h.items).sum::<usize>() > ITEM_BUDGET
    };
    while over(held) {
        match held.iter().position(|h| !spared(h)) {
            Some(i) => drop(held.remove(i)),
            None => break,
        }
    }
}

/// Decodes a stored item. Never panics.
fn decode_item(session: &str, index: usize, body: &[u8]) -> Result<Item, StoreError> {
    serde_json::from_slice(body).map_err(|e| {
        StoreError::Corrupt(format!("session {session:?}: projected item {index}: {e}"))
    })
}

/// The projection a stored checkpoint holds, if it holds together with this log.
fn restore(session: &str, epoch: &str, stored: &StoredProjection) -> Option<(Projection, Saved)> {
    let snapshot: Snapshot = serde_json::from_slice(&stored.body).ok()?;
    let fits = snapshot.session == session
        && snapshot.epoch == epoch
        && snapshot.after == stored.after
        && snapshot.start as u64 == stored.items;
    let saved = Saved {
        after: stored.after,
        items: snapshot.start,
        failed: None,
    };
    fits.then(|| Projection::restore(snapshot))?
        .map(|p| (p, saved))
}

impl Projections {
    /// The cache; inside a tokio runtime, a task also drops idle projections every minute
    /// (it ends with the cache).
    pub fn new(store: Arc<dyn Store>) -> Arc<Projections> {
        let projections = Arc::new(Projections {
            store,
            held: Mutex::new(Vec::new()),
            applied: AtomicU64::new(0),
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

    /// How many events this cache has applied to projections.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// How many sessions' projections are held now.
    pub fn held(&self) -> usize {
        self.lock().len()
    }

    fn entry(&self, session: &str, asked: bool) -> Arc<AsyncMutex<Slot>> {
        let mut held = self.lock();
        let mut entry = match held.iter().position(|h| h.session == session) {
            Some(i) => held.remove(i),
            None => Held {
                session: session.to_owned(),
                slot: Arc::new(AsyncMutex::new(Slot::default())),
                items: 0,
                used: Instant::now(),
                asked,
            },
        };
        entry.asked |= asked;
        if asked {
            entry.used = Instant::now();
        }
        let slot = entry.slot.clone();
        held.push(entry);
        evict(&mut held, Instant::now(), Some(session));
        slot
    }

    /// Records what `session`'s projection holds, and applies the bounds.
    fn weigh(&self, session: &str, p: Option<&Projection>) {
        let mut held = self.lock();
        if let Some(h) = held.iter_mut().find(|h| h.session == session) {
            h.items = p.map_or(0, |p| p.timeline().len() - p.timeline().start());
        }
        evict(&mut held, Instant::now(), None);
    }

    /// The slot's projection, loaded from the store's checkpoint (or new) on first use, and
    /// brought up to date with the log, checkpointed on the way when due.
    async fn bring_up<'a>(
        &self,
        session: &str,
        slot: &'a mut Slot,
    ) -> Result<&'a mut Projection, StoreError> {
        if slot.projection.is_none() {
            let stored = self
                .store
                .load_projection(session, PROJECTION_FORMAT)
                .await?;
            // One ahead of the log is not of this log.
            let stored = match stored {
                Some(s) if self.store.latest_sequence(session).await? >= s.after => Some(s),
                _ => None,
            };
            let restored = stored.and_then(|s| restore(session, self.store.epoch(), &s));
            let (p, saved) = match restored {
                Some(r) => r,
                None => (Projection::new(session), Saved::default()),
            };
            slot.saved = saved;
            slot.projection = Some(p);
        }
        let Slot { projection, saved } = slot;
        let p = projection.as_mut().expect("loaded above");
        loop {
            let query = EventQuery {
                after: Some(p.after()),
                limit: Some(PAGE),
                ..EventQuery::default()
            };
            let events = self.store.get_events(session, &query).await?;
            let now_ms = now().unix_millis();
            for event in &events {
                p.handle_event(event, now_ms);
            }
            self.applied
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            if saved.due(p.after()) {
                self.save(session, p, saved).await;
            }
            if events.len() < PAGE {
                return Ok(p);
            }
            // A long build yields between pages.
            tokio::task::yield_now().await;
        }
    }

    /// Stores the projection's checkpoint and the final items not yet stored, then trims it
    /// to its last [`KEEP`] items. A failure is reported and costs only time.
    async fn save(&self, session: &str, p: &mut Projection, saved: &mut Saved) {
        let held = p.timeline().start();
        let boundary = p.final_items().max(held);
        let from = saved.items.clamp(held, boundary);
        let items: Result<Vec<Vec<u8>>, serde_json::Error> = p.timeline().items()
            [from - held..boundary - held]
            .iter()
            .map(serde_json::to_vec)
            .collect();
        let body = serde_json::to_vec(&p.snapshot_from(self.store.epoch(), boundary));
        let result = match (items, body) {
            (Ok(items), Ok(body)) => {
                let checkpoint = StoredProjection {
                    format: PROJECTION_FORMAT,
                    after: p.after(),
                    items: boundary as u64,
                    body,
                };
                (self
                    .store
                    .save_projection(session, from as u64, items, checkpoint))
                .await
                .map_err(|e| e.to_string())
            }
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        };
        match result {
            Ok(()) => {
                *saved = Saved {
                    after: p.after(),
                    items: boundary,
                    failed: None,
                };
                p.trim(p.window_start(KEEP).min(boundary));
            }
            Err(e) => {
                if saved.failed.is_none() {
                    eprintln!("agentwire: session {session}: its projection was not stored: {e}");
                }
                saved.failed = Some(p.after());
            }
        }
    }

    /// The final items `from..to`, read back from the store.
    async fn stored_items(
        &self,
        session: &str,
        from: usize,
        to: usize,
    ) -> Result<Vec<Item>, StoreError> {
        let bodies = (self.store)
            .projected_items(session, PROJECTION_FORMAT, from as u64, to as u64)
            .await?;
        (from..)
            .zip(&bodies)
            .map(|(i, b)| decode_item(session, i, b))
            .collect()
    }

    /// The session as the log has it now, with at least its last `items` items.
    pub async fn snapshot(&self, session: &str, items: usize) -> Result<Snapshot, StoreError> {
        let entry = self.entry(session, true);
        let mut slot = entry.lock().await;
        let result = self.snapshot_of(session, &mut slot, items).await;
        self.weigh(session, slot.projection.as_ref());
        result
    }

    async fn snapshot_of(
        &self,
        session: &str,
        slot: &mut Slot,
        items: usize,
    ) -> Result<Snapshot, StoreError> {
        let p = self.bring_up(session, slot).await?;
        let want = p
            .timeline()
            .len()
            .saturating_sub(items.min(MAX_SNAPSHOT_ITEMS));
        let held = p.timeline().start();
        if want < held {
            let older = self.stored_items(session, want, held).await?;
            p.prepend(want, older);
        }
        Ok(p.snapshot(self.store.epoch(), items))
    }

    /// Up to `limit` items just before index `before`: the page's first index and its items.
    pub async fn history(
        &self,
        session: &str,
        before: usize,
        limit: usize,
    ) -> Result<(usize, Vec<Item>), StoreError> {
        let entry = self.entry(session, true);
        let mut slot = entry.lock().await;
        let result = self.history_of(session, &mut slot, before, limit).await;
        self.weigh(session, slot.projection.as_ref());
        result
    }

    async fn history_of(
        &self,
        session: &str,
        slot: &mut Slot,
        before: usize,
        limit: usize,
    ) -> Result<(usize, Vec<Item>), StoreError> {
        let p = self.bring_up(session, slot).await?;
        let end = before.min(p.timeline().len());
        let start = end.saturating_sub(limit.min(MAX_SNAPSHOT_ITEMS));
        let held = p.timeline().start();
        let mut items = self.stored_items(session, start, held.min(end)).await?;
        if end > held {
            items.extend_from_slice(p.history(end, end - start.max(held)).1.as_slice());
        }
        Ok((start, items))
    }

    /// Brings `session`'s projection up to date and checkpoints it when due, for nobody in
    /// particular: one the pages did not ask for is not kept afterwards. Returns the cursor
    /// of the session's stored checkpoint (0: none).
    pub async fn refresh(&self, session: &str) -> Result<u64, StoreError> {
        let entry = self.entry(session, false);
        let result = {
            let mut slot = entry.lock().await;
            let result = self.bring_up(session, &mut slot).await.map(drop);
            self.weigh(session, slot.projection.as_ref());
            result.map(|()| slot.saved.after)
        };
        drop(entry);
        let mut held = self.lock();
        held.retain(|h| h.session != session || h.asked || Arc::strong_count(&h.slot) > 1);
        result
    }

    /// Keeps every session's stored projection within [`CHECKPOINT_EVERY`] events of its
    /// log: at start for the sessions already stored, then as commits come, one session at
    /// a time. Runs until the store closes or the cache is dropped.
    pub async fn keep_checkpoints(self: Arc<Self>) {
        let mut commits = self.store.subscribe();
        let weak = Arc::downgrade(&self);
        // The cursor of each session's stored checkpoint, as far as this task knows.
        let mut stored: HashMap<String, u64> = HashMap::new();
        let mut due: Vec<String> = Vec::new();
        let sessions = match self.store.list_sessions().await {
            Ok(sessions) => sessions,
            Err(e) => {
                eprintln!("agentwire: keeping projections: {e}");
                Vec::new()
            }
        };
        for s in sessions {
            let checkpoint = self.store.load_projection(&s.id, PROJECTION_FORMAT).await;
            stored.insert(
                s.id.clone(),
                checkpoint.ok().flatten().map_or(0, |p| p.after),
            );
            due.push(s.id);
        }
        drop(self);
        loop {
            while let Some(session) = due.pop() {
                let Some(this) = weak.upgrade() else {
                    return;
                };
                // A candidate is refreshed only when its log outgrew its checkpoint.
                let last = stored.get(&session).copied().unwrap_or(0);
                let latest = this.store.latest_sequence(&session).await.unwrap_or(0);
                if latest < last.saturating_add(CHECKPOINT_EVERY) {
                    continue;
                }
                match this.refresh(&session).await {
                    Ok(after) => drop(stored.insert(session, after)),
                    Err(e) => {
                        eprintln!("agentwire: session {session}: keeping its projection: {e}")
                    }
                }
            }
            match commits.recv().await {
                Ok(c) => {
                    let last = stored.get(&c.session_id).copied().unwrap_or(0);
                    if c.latest_sequence >= last.saturating_add(CHECKPOINT_EVERY)
                        && !due.contains(&c.session_id)
                    {
                        due.push(c.session_id);
                    }
                }
                // Missed commits: every session is a candidate again.
                Err(RecvError::Lagged(_)) => due.extend(stored.keys().cloned()),
                Err(RecvError::Closed) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(session: &str, items: usize, used: Instant) -> Held {
        Held {
            session: session.to_owned(),
            slot: Arc::new(AsyncMutex::new(Slot::default())),
            items,
            used,
            asked: true,
        }
    }

    /// The held sessions (name, items, seconds since use), the one asked for, who is left.
    type Case = (
        &'static [(&'static str, usize, u64)],
        Option<&'static str>,
        &'static [&'static str],
    );

    /// Each case: the held sessions (name, items, seconds since use; least recent first),
    /// the one being asked for, and who is left.
    #[test]
    fn the_bounds_drop_the_least_recently_used_and_never_the_one_asked_for() {
        let cases: &[Case] = &[
            (&[("a", 10, 30), ("b", 10, 20)], Some("b"), &["a", "b"]),
            // Over the item budget: the oldest go first.
            (
                &[("a", 60_000, 30), ("b", 30_000, 20), ("c", 30_000, 0)],
                Some("c"),
                &["b", "c"],
            ),
            // The one asked for is kept even alone over the budget.
            (&[("a", 10, 30), ("big", 300_000, 0)], Some("big"), &["big"]),
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
                .map(|&(s, items, ago)| held(s, items, now - Duration::from_secs(ago)))
                .collect();
            evict(&mut list, now, *keep);
            let left: Vec<&str> = list.iter().map(|h| h.session.as_str()).collect();
            assert_eq!(&left, after, "case {i}");
        }
        // One a request still builds or reads is kept, idle and over the budget as it is.
        let busy = held("busy", 300_000, now - Duration::from_secs(700));
        let in_use = busy.slot.clone();
        let mut list = vec![busy, held("b", 10, now)];
        evict(&mut list, now, Some("b"));
        assert_eq!(list.len(), 2);
        drop(in_use);
        evict(&mut list, now, Some("b"));
        assert_eq!(list.len(), 1);
        // One only the background checkpointer used is dropped once it is done with it.
        let mut list = vec![held("b", 10, now)];
        list[0].asked = false;
        evict(&mut list, now, None);
        assert!(list.is_empty());
    }

    /// A checkpoint is due after CHECKPOINT_EVERY events beyond the stored one, and after a
    /// failed save only CHECKPOINT_EVERY events beyond the failure.
    #[test]
    fn checkpoints_are_due_every_so_many_events() {
        let n = CHECKPOINT_EVERY;
        let cases = [
            (Saved::default(), n - 1, false),
            (Saved::default(), n, true),
            (
                Saved {
                    after: 10,
                    items: 3,
                    failed: None,
                },
                n + 9,
                false,
            ),
            (
                Saved {
                    after: 10,
                    items: 3,
                    failed: None,
                },
                n + 10,
                true,
            ),
            (
                Saved {
                    after: 10,
                    items: 3,
                    failed: Some(n + 10),
                },
                n + 11,
                false,
            ),
            (
                Saved {
                    after: 10,
                    items: 3,
                    failed: Some(n + 10),
                },
                2 * n + 10,
                true,
            ),
        ];
        for (i, (saved, after, want)) in cases.into_iter().enumerate() {
            assert_eq!(saved.due(after), want, "case {i}");
        }
    }
}
