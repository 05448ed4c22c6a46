//! The node's lease on a shared store, and ending what dead companions left running: the
//! sessions a previous run of this node left live ([`Hub::recover`]), and those of nodes whose
//! lease ran out ([`Hub::keep_lease`]); a session taken over from this node is stopped here
//! without writing to it (`fence`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::{host_event, provider_of, Command, Hub};
use crate::companion::now;
use crate::companion::store::{SessionRecord, SessionState, StoreError};
use crate::core::event::{Event, EventType};
use crate::core::lifecycle::{LifecycleConfig, TurnProjector};
use crate::core::provider_error::{ErrorKind, ProviderError};
use crate::core::time::Timestamp;

impl Hub {
    /// Marks the sessions that a previous run left starting or running as failed: their
    /// processes died with it. Their open turns end with `run_failed`, then `session_failed`.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        let mut recovered = 0;
        for s in self.store.list_sessions().await? {
            // Another companion's sessions are its own to recover (a shared store).
            let ours = s.node == self.config.node || s.node.is_empty();
            if !s.state.is_live() || !ours {
                continue;
            }
            let message = "the companion stopped while this session's process was running";
            self.fail_orphan(&s, ErrorKind::CompanionRestart, message)
                .await?;
            recovered += 1;
        }
        Ok(recovered)
    }

    /// Renews this node's lease every third of `lease_ms` from now (`serve` renews it once
    /// itself before it serves), for as long as the server runs; each time, takes over the
    /// live sessions of nodes whose lease ran out (a companion that died and did not come
    /// back) and ends them as failed, so that no page shows them running forever. They can
    /// then be resumed on any companion.
    pub async fn keep_lease(self: Arc<Self>) {
        let lease = self.config.lease_ms.max(3);
        let mut tick = tokio::time::interval(Duration::from_millis(lease as u64 / 3));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: the renewal `serve` just made.
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(e) = self.renew_lease().await {
                eprintln!(
                    "agentwire: renewing the lease of node {:?}: {e}",
                    self.node()
                );
            }
        }
    }

    /// One lease round: beat, then take over and fail what dead nodes left running.
    /// Returns how many sessions were taken over.
    pub async fn renew_lease(&self) -> Result<usize, StoreError> {
        let at = now();
        self.store.beat(&self.config.node, at).await?;
        let cutoff = Timestamp::from_unix_millis(at.unix_millis() - self.config.lease_ms);
        let taken = (self.store)
            .take_over_stale(&self.config.node, cutoff, at)
            .await?;
        self.fence().await?;
        for s in &taken {
            let message = "the companion hosting this session stopped renewing its lease";
            eprintln!(
                "agentwire: session {} failed: the node running it stopped renewing its lease",
                s.id
            );
            self.fail_orphan(s, ErrorKind::NodeLost, message).await?;
        }
        Ok(taken.len())
    }

    /// Stops, without writing to them, the sessions this node runs that another companion took
    /// over (this node's lease ran out while it was cut off or stalled).
    async fn fence(&self) -> Result<(), StoreError> {
        let hosted: Vec<(String, mpsc::Sender<Command>)> = (self.sessions.lock())
            .expect("sessions lock")
            .iter()
            .map(|(id, tx)| (id.clone(), tx.clone()))
            .collect();
        for (id, tx) in hosted {
            let Some(record) = self.store.get_session(&id).await? else {
                continue;
            };
            if record.node == self.config.node {
                continue;
            }
            eprintln!(
                "agentwire: session {id} was taken over by node {:?}: stopping its agent here",
                record.node
            );
            self.forget(&id);
            let (reply, rx) = oneshot::channel();
            if tx.send(Command::Abandon(reply)).await.is_ok() {
                let _ = rx.await;
            }
        }
        Ok(())
    }

    /// Ends a session whose process is gone (its companion died): its open turns end with
    /// `run_failed`, then `session_failed`, both with a `provider_error` of `kind`.
    async fn fail_orphan(
        &self,
        s: &SessionRecord,
        kind: ErrorKind,
        message: &str,
    ) -> Result<(), StoreError> {
        let provider = provider_of(&s.provider);
        let mut projector = TurnProjector::new(LifecycleConfig::new(&s.id, provider));
        projector.mark_connected();
        let mut after = 0;
        loop {
            let query = crate::companion::store::EventQuery {
                after: Some(after),
                limit: Some(1_000),
                ..Default::default()
            };
            let page = self.store.get_events(&s.id, &query).await?;
            let Some(last) = page.last() else { break };
            after = last.sequence();
            for e in &page {
                projector.handle_event(e, 0);
            }
        }
        let error = ProviderError::new(provider, kind, message);
        let at = now();
        projector.end_active(
            EventType::RunFailed,
            &Value::Object(error.to_data()),
            at.unix_millis(),
        );
        let ended: Vec<Event> = std::iter::from_fn(|| projector.poll_event()).collect();
        // The turns end first, then the state, then `session_failed`: whoever sees that last
        // event also reads the state `failed` (and a crash in between leaves no turn open).
        if !ended.is_empty() {
            self.store.append(&s.id, ended).await?;
        }
        self.store
            .set_session_state(&s.id, SessionState::Failed, at)
            .await?;
        let failed = host_event(
            &s.id,
            provider,
            None,
            EventType::SessionFailed,
            error.to_data(),
            at,
        );
        self.store.append(&s.id, vec![failed]).await?;
        Ok(())
    }
}
