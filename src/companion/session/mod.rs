//! A hosted session's rules, sans-IO: [`Session`] (in `machine.rs`: the pipeline, the live
//! state, requests, the end of the process) and its [`StoreQueue`] (here: the session's
//! writes to the store, in order, until the store takes them).
//!
//! [`StoreQueue`] holds the session's store writes (event batches, state changes, the CLI's
//! session id) in the order the session made them, and decides when to write what: one write
//! at a time (order is the log's order), consecutive batches merged into one append, a failed
//! write retried from the same place after a backoff that doubles from
//! [`StoreQueueConfig::min_backoff_ms`] to [`StoreQueueConfig::max_backoff_ms`]. It never
//! drops a write because the store failed: when more than
//! [`StoreQueueConfig::max_unstored`] events wait, [`StoreQueue::is_full`] tells the host to
//! stop reading the agent's output (the agent then blocks on its pipe) until the store takes
//! them. Resending a batch whose commit outcome is unknown is safe: appends are idempotent by
//! event id (the [`Store`](super::store::Store) contract).
//!
//! Driving rule: after [`StoreQueue::push`] or [`StoreQueue::handle_written`], and when the
//! time of [`StoreQueue::poll_timeout`] has come, the caller takes [`StoreQueue::poll_write`]
//! (at most one write is in flight) and drains [`StoreQueue::poll_note`]. Time is an argument
//! (`now_ms`); nothing here performs I/O or reads a clock.

mod machine;

use std::collections::VecDeque;

pub(crate) use machine::update_runtime;
pub use machine::{Action, CommandError, Note, ReplyId, Request, Response, Session, SessionConfig};

use super::store::SessionState;
use crate::core::event::Event;
use crate::core::time::Timestamp;
use crate::core::wire::{StoreState, StoreStatus};

/// One write to the store, in session order.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreOp {
    /// Events to append to the session's log.
    Append(Vec<Event>),
    /// The session's state in the sessions table.
    State(SessionState, Timestamp),
    /// The CLI's own session id, to resume it later.
    ProviderSessionId(String),
}

impl StoreOp {
    fn events(&self) -> usize {
        match self {
            StoreOp::Append(events) => events.len(),
            _ => 0,
        }
    }
}

/// How a write ended, as the host classifies the store's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Durable.
    Stored,
    /// The store failed (I/O, disk full, read-only, connection lost) or its outcome is
    /// unknown: the same write is tried again after the backoff.
    Unavailable(String),
    /// The store answered and refused this write for good (not a fault of the store: an
    /// unknown session, an event of another session). It is dropped, and said so.
    Refused(String),
}

/// What the host should log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreNote {
    /// The first failure after the store was available.
    Unavailable { error: String },
    /// The store took a write again after failing since `since_ms`.
    Recovered { since_ms: i64, attempts: u32 },
    /// A write the store refused for good, with the events it held.
    Refused { events: usize, error: String },
}

/// Bounds of a [`StoreQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreQueueConfig {
    /// Events waiting (unstored) beyond which [`StoreQueue::is_full`] holds.
    pub max_unstored: usize,
    /// At most this many events in one merged append (a single larger batch goes whole).
    pub max_merge: usize,
    pub min_backoff_ms: i64,
    pub max_backoff_ms: i64,
}

impl Default for StoreQueueConfig {
    fn default() -> StoreQueueConfig {
        StoreQueueConfig {
            max_unstored: 10_000,
            max_merge: 1_000,
            min_backoff_ms: 50,
            max_backoff_ms: 2_000,
        }
    }
}

/// The store as this session last found it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Health {
    Available,
    Unavailable {
        error: String,
        since_ms: i64,
        attempts: u32,
    },
}

/// A session's unstored writes, in order; see the module docs for the driving rule.
#[derive(Debug)]
pub struct StoreQueue {
    config: StoreQueueConfig,
    queue: VecDeque<StoreOp>,
    /// How many writes at the front of `queue` the write in flight holds (0: none in flight).
    in_flight: usize,
    /// Events in `queue`.
    unstored: usize,
    /// Events dropped: refused by the store, or given up on.
    lost: usize,
    health: Health,
    backoff_ms: i64,
    retry_at: Option<i64>,
    notes: VecDeque<StoreNote>,
}

impl StoreQueue {
    pub fn new(config: StoreQueueConfig) -> StoreQueue {
        StoreQueue {
            backoff_ms: config.min_backoff_ms,
            config,
            queue: VecDeque::new(),
            in_flight: 0,
            unstored: 0,
            lost: 0,
            health: Health::Available,
            retry_at: None,
            notes: VecDeque::new(),
        }
    }

    /// Queues a write after every write queued before it. An empty batch is nothing to write.
    pub fn push(&mut self, op: StoreOp) {
        if matches!(&op, StoreOp::Append(events) if events.is_empty()) {
            return;
        }
        self.unstored += op.events();
        self.queue.push_back(op);
    }

    /// The write to start now, if none is in flight and no backoff is running: the oldest
    /// queued write, with the batches right after it merged in (up to `max_merge` events).
    pub fn poll_write(&mut self, now_ms: i64) -> Option<StoreOp> {
        if self.in_flight > 0 || self.retry_at.is_some_and(|at| now_ms < at) {
            return None;
        }
        self.retry_at = None;
        let first = self.queue.front()?;
        let StoreOp::Append(events) = first else {
            self.in_flight = 1;
            return Some(first.clone());
        };
        let mut merged = events.clone();
        self.in_flight = 1;
        for op in self.queue.iter().skip(1) {
            match op {
                StoreOp::Append(more) if merged.len() + more.len() <= self.config.max_merge => {
                    merged.extend(more.iter().cloned());
                    self.in_flight += 1;
                }
                _ => break,
            }
        }
        Some(StoreOp::Append(merged))
    }

    /// The outcome of the write [`StoreQueue::poll_write`] gave.
    pub fn handle_written(&mut self, written: Written, now_ms: i64) {
        let taken = std::mem::take(&mut self.in_flight);
        if taken == 0 {
            return;
        }
        match written {
            Written::Stored | Written::Refused(_) => {
                let events: usize = self.queue.drain(..taken).map(|op| op.events()).sum();
                self.unstored -= events;
                self.backoff_ms = self.config.min_backoff_ms;
                if let Health::Unavailable {
                    since_ms, attempts, ..
                } = std::mem::replace(&mut self.health, Health::Available)
                {
                    self.notes
                        .push_back(StoreNote::Recovered { since_ms, attempts });
                }
                if let Written::Refused(error) = written {
                    self.lost += events;
                    self.notes.push_back(StoreNote::Refused { events, error });
                }
            }
            Written::Unavailable(error) => {
                self.retry_at = Some(now_ms + self.backoff_ms);
                self.backoff_ms = (self.backoff_ms * 2).min(self.config.max_backoff_ms);
                match &mut self.health {
                    Health::Available => {
                        self.notes.push_back(StoreNote::Unavailable {
                            error: error.clone(),
                        });
                        self.health = Health::Unavailable {
                            error,
                            since_ms: now_ms,
                            attempts: 1,
                        };
                    }
                    Health::Unavailable {
                        error: last,
                        attempts,
                        ..
                    } => {
                        *last = error;
                        *attempts += 1;
                    }
                }
            }
        }
    }

    /// When the next write may start (the end of the backoff), if one waits for it.
    pub fn poll_timeout(&self) -> Option<i64> {
        self.retry_at.filter(|_| self.in_flight == 0)
    }

    pub fn poll_note(&mut self) -> Option<StoreNote> {
        self.notes.pop_front()
    }

    /// Too many events wait: stop reading the agent's output until the store takes some.
    pub fn is_full(&self) -> bool {
        self.unstored >= self.config.max_unstored
    }

    /// Nothing waits and nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether the last write failed (and is waiting to be tried again).
    pub fn is_unavailable(&self) -> bool {
        matches!(self.health, Health::Unavailable { .. })
    }

    /// Events waiting to be stored.
    pub fn unstored(&self) -> usize {
        self.unstored
    }

    /// Events dropped so far (refused, or given up on at shutdown).
    pub fn lost(&self) -> usize {
        self.lost
    }

    /// Drops every queued write (shutdown past its deadline, or the session was taken over)
    /// and returns how many events they held.
    pub fn give_up(&mut self) -> usize {
        let events = self.unstored;
        self.queue.clear();
        self.in_flight = 0;
        self.unstored = 0;
        self.retry_at = None;
        self.lost += events;
        events
    }

    /// The store's state for `describe` and `session_status`: `{"state": "available"|
    /// "unavailable", "unstored": N}`, with `error`, `since` and `attempts` while unavailable.
    pub fn status(&self) -> StoreStatus {
        let unstored = self.unstored as u64;
        match &self.health {
            Health::Available => StoreStatus::available(unstored),
            Health::Unavailable {
                error,
                since_ms,
                attempts,
            } => StoreStatus {
                state: StoreState::Unavailable,
                error: Some(error.clone()),
                since: Some(Timestamp::from_unix_millis(*since_ms)),
                attempts: Some(*attempts),
                unstored,
            },
        }
    }
}

#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod tests;
