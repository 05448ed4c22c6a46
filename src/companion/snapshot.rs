//! The projections snapshots and history pages come from (docs/protocol.md, "Snapshots and
//! history"): per session, the core's [`Projection`] — the pipeline the browser runs — built
//! from the log the first time a client asks, and brought up to date from where it stopped
//! (only the events appended since) each time one asks again.
//!
//! Bounded: at most [`CAPACITY`] sessions are held, the least recently asked-for dropped
//! first, so a session nobody asks a snapshot of costs nothing, and a companion with many
//! idle sessions holds none of them. Dropping one only costs the next request a rebuild.
//! Nothing here is persisted: the log stays the only truth.

use std::sync::{Arc, Mutex};

use tokio::sync::Mutex as AsyncMutex;

use super::now;
use super::store::{EventQuery, Store, StoreError};
use crate::core::snapshot::{Projection, Snapshot};
use crate::core::timeline::Item;

/// Sessions whose projection is held at once.
pub const CAPACITY: usize = 8;
/// Events read from the store per page while a projection catches up.
const PAGE: usize = 4096;

/// The bounded cache of projections; see the module docs.
pub struct Projections {
    store: Arc<dyn Store>,
    /// Least recently used first.
    held: Mutex<Vec<(String, Arc<AsyncMutex<Projection>>)>>,
}

impl Projections {
    pub fn new(store: Arc<dyn Store>) -> Arc<Projections> {
        Arc::new(Projections {
            store,
            held: Mutex::new(Vec::new()),
        })
    }

    /// How many sessions' projections are held now.
    pub fn held(&self) -> usize {
        self.held.lock().expect("not poisoned").len()
    }

    fn entry(&self, session: &str) -> Arc<AsyncMutex<Projection>> {
        let mut held = self.held.lock().expect("not poisoned");
        let entry = match held.iter().position(|(s, _)| s == session) {
            Some(i) => held.remove(i).1,
            None => Arc::new(AsyncMutex::new(Projection::new(session))),
        };
        held.push((session.to_owned(), entry.clone()));
        if held.len() > CAPACITY {
            held.remove(0);
        }
        entry
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
        self.catch_up(session, &mut p).await?;
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
        self.catch_up(session, &mut p).await?;
        Ok(p.history(before, limit))
    }
}
