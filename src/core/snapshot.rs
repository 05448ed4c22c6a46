//! Snapshots: a session as it stands at a cursor — its last items, lifecycle, usage, pending
//! approvals — projected by the same pipeline the browser runs, so a client can show the end
//! of a long session at once and project the events after the cursor from there, paging older
//! items in on demand (docs/protocol.md, "Snapshots and history").
//!
//! [`Projection`] is the pipeline of one session ([`Dedup`] → [`TurnProjector`] →
//! [`Timeline`], as [`super::projector::Projector`] runs it per session); [`Snapshot`] is what
//! it hands a client; [`Projection::restore`] is what the client makes of it.
//!
//! Invariant (tested at every cursor of seeded sessions): a snapshot taken at cursor C,
//! restored, then fed the events after C, ends with the timeline, lifecycle, usage and
//! pending approvals of one pass over the whole log; paging back from its first item to 0
//! gives the items before it. What a snapshot leaves out is what points before its first
//! item and is closed (a long-finished tool call, an answered approval): an event after C
//! naming such an item again is applied as if the item were unknown. The window always
//! reaches back to the first item still open and to the first item of every turn in progress,
//! so a well-formed log never does that — up to [`MAX_REACH_BACK`](super::timeline::MAX_REACH_BACK) items back: an item left
//! open further back than that (an approval nobody answered, in a turn long over) counts as
//! closed, so that it does not pin every later snapshot (and the companion's stored
//! projection) to it.

use serde::{Deserialize, Serialize};

use super::dedup::Dedup;
use super::event::{Event, Provider};
use super::lifecycle::{LifecycleCheckpoint, LifecycleConfig, TurnProjector};
use super::projector::LifecycleState;
use super::timeline::{Item, Timeline, TimelineState, Usage};

/// What a subscribe asks of a snapshot: at least its last `items` items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    pub items: usize,
}

crate::core::json::json_write!(SnapshotRequest { items });

/// The largest `items` a snapshot or a history page gives, whatever is asked.
pub const MAX_SNAPSHOT_ITEMS: usize = 10_000;

/// The format of the projections a companion stores beside its log (items and snapshots as
/// serialized here, projected by these rules): a stored projection of another format is
/// never read. Change it with either.
pub const PROJECTION_FORMAT: u32 = 1;

/// A session at a cursor. `after`/`epoch` is the cursor: the events after it follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub session: String,
    pub epoch: String,
    pub after: u64,
    /// The index of `items[0]`; items before it exist when it is above 0 (page them in with
    /// `history {before: start}`).
    pub start: usize,
    pub items: Vec<Item>,
    pub lifecycle: LifecycleState,
    pub usage: Usage,
    /// The request ids of the pending approvals, in the order they were requested.
    pub approvals: Vec<String>,
    /// What the client's projection needs to go on from here (opaque to a page).
    pub state: SnapshotState,
}

/// The projection state of a [`Snapshot`] besides its items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotState {
    pub timeline: TimelineState,
    pub lifecycle: LifecycleCheckpoint,
}

super::json::json_struct!(Snapshot {
    session,
    epoch,
    after,
    start,
    items,
    lifecycle,
    usage,
    approvals,
    state,
});
super::json::json_struct!(SnapshotState {
    timeline,
    lifecycle
});

/// One session's projection: the log in, in order; snapshots and history pages out.
pub struct Projection {
    session: String,
    dedup: Dedup,
    lifecycle: TurnProjector,
    timeline: Timeline,
    after: u64,
}

impl Projection {
    pub fn new(session: &str) -> Projection {
        Projection {
            session: session.to_owned(),
            dedup: Dedup::new(),
            lifecycle: TurnProjector::new(LifecycleConfig::new(session, Provider::Generic)),
            timeline: Timeline::new(),
            after: 0,
        }
    }

    /// Applies the next event of the log (each sequence once, in order: what a
    /// [`super::wire::Cursor`] admits), as the browser's projector does. Returns whether it
    /// was new.
    pub fn handle_event(&mut self, event: &Event, now_ms: i64) -> bool {
        self.after = self.after.max(event.sequence());
        if !self.dedup.admit(event).is_new() {
            return false;
        }
        self.lifecycle.handle_event(event, now_ms);
        while self.lifecycle.poll_violation().is_some() {}
        while self.lifecycle.poll_event().is_some() {}
        self.timeline.handle_admitted(event);
        true
    }

    /// The last sequence applied.
    pub fn after(&self) -> u64 {
        self.after
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    pub fn lifecycle(&self) -> &TurnProjector {
        &self.lifecycle
    }

    /// The lifecycle as a page shows it (what [`super::projector::Projector::lifecycle`]
    /// answers).
    pub fn lifecycle_state(&self) -> LifecycleState {
        LifecycleState::of(&self.lifecycle)
    }

    /// The session now, with at least its last `items` items (at most [`MAX_SNAPSHOT_ITEMS`]
    /// asked; more when an open item or a
    /// turn in progress reaches further back; see the module docs).
    pub fn snapshot(&self, epoch: &str, items: usize) -> Snapshot {
        self.snapshot_from(epoch, self.window_start(items.min(MAX_SNAPSHOT_ITEMS)))
    }

    /// Where a snapshot of the last `n` items starts: `n` items back, or further back to the
    /// first item still open or of a turn in progress (never before the first item held).
    pub fn window_start(&self, n: usize) -> usize {
        self.timeline
            .snapshot_start(n, &self.lifecycle.active_turns())
    }

    /// How many of the session's items are final: those before the first one still open or
    /// of a turn in progress. The events after now leave them as they are (see the module
    /// docs), so they can be kept apart from the projection (a companion stores them).
    pub fn final_items(&self) -> usize {
        self.window_start(0)
    }

    /// The session now with its items from `start` on (clamped to the items held). A
    /// `start` past [`Projection::final_items`] leaves out an open item: only
    /// [`Projection::window_start`] gives one that restores exactly.
    pub fn snapshot_from(&self, epoch: &str, start: usize) -> Snapshot {
        let start = start.clamp(self.timeline.start(), self.timeline.len());
        let (items, timeline) = self.timeline.checkpoint(start);
        let runs: std::collections::HashSet<&str> = items.iter().filter_map(Item::run_id).collect();
        let lifecycle = self.lifecycle.checkpoint(|r| runs.contains(r));
        Snapshot {
            session: self.session.clone(),
            epoch: epoch.to_owned(),
            after: self.after,
            start,
            items,
            lifecycle: self.lifecycle_state(),
            usage: self.timeline.usage(),
            approvals: self
                .timeline
                .pending_approvals()
                .map(str::to_owned)
                .collect(),
            state: SnapshotState {
                timeline,
                lifecycle,
            },
        }
    }

    /// Drops the items before `start` (at most [`Projection::final_items`]): from here on the
    /// projection is the one a client restores from a snapshot at `start`, and its memory
    /// is what it holds.
    pub fn trim(&mut self, start: usize) {
        let start = start.min(self.final_items());
        if start <= self.timeline.start() {
            return;
        }
        let dedup = std::mem::take(&mut self.dedup);
        if let Some(mut trimmed) = Projection::restore(self.snapshot_from("", start)) {
            trimmed.timeline.drain();
            trimmed.dedup = dedup;
            *self = trimmed;
        } else {
            debug_assert!(false, "a projection's own snapshot restores");
            self.dedup = dedup;
        }
    }

    /// Older items, just before the first one held (kept apart, see
    /// [`Projection::final_items`]): held from now on. False, changing nothing, when they
    /// do not end where the held items begin.
    pub fn prepend(&mut self, start: usize, items: Vec<Item>) -> bool {
        self.timeline.prepend(start, items)
    }

    /// A client's projection from a snapshot: the snapshot's items held, the events after
    /// its cursor to follow. `None` when the snapshot does not hold together.
    pub fn restore(snapshot: Snapshot) -> Option<Projection> {
        let Snapshot {
            session,
            after,
            start,
            items,
            state,
            ..
        } = snapshot;
        let timeline = Timeline::restore(start, items, state.timeline)?;
        let config = LifecycleConfig::new(&session, Provider::Generic);
        Some(Projection {
            lifecycle: TurnProjector::restore(config, state.lifecycle),
            session,
            dedup: Dedup::new(),
            timeline,
            after,
        })
    }

    /// The parts, for a client's per-session state.
    pub fn into_parts(self) -> (Dedup, TurnProjector, Timeline, u64) {
        (self.dedup, self.lifecycle, self.timeline, self.after)
    }

    /// Up to `limit` (at most [`MAX_SNAPSHOT_ITEMS`]) items just before index `before`: the
    /// page's first index and its items.
    pub fn history(&self, before: usize, limit: usize) -> (usize, Vec<Item>) {
        let (start, items) = self
            .timeline
            .page_before(before, limit.min(MAX_SNAPSHOT_ITEMS));
        (start, items.to_vec())
    }
}

#[cfg(test)]
mod tests;
