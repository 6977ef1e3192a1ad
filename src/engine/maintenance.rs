//! What keeps an instance's runs moving besides requests: lease renewal, the sweeps (runs
//! whose holder stopped, paused runs past their deadline, runs past retention), claiming
//! queued runs, news from other instances, and the graceful stop.

use std::time::Duration;

use super::control::StopReason;
use super::launch::Resumption;
use super::{Engine, EngineError};
use crate::protocol::response::ResponseStatus;
use crate::store::StoredRun;
use crate::time::UnixMillis;

/// After the runs were told to hand over, how long they get to reach a safe point.
const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// How often histogram samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

impl Engine {
    /// Starts lease renewal, the sweeps, the claimer, the listener for other instances'
    /// news, and the store's upkeep.
    pub fn start_maintenance(&self) {
        let inner = &self.inner;
        let engine = self.clone();
        let stop = inner.stop_maintenance.clone();
        inner.maintenance.spawn(async move {
            let cancel = |id: &str| {
                if engine.inner.live.stop(id, StopReason::Cancel).is_some() {
                    tracing::info!(response_id = %id, "cancel requested through another instance");
                }
            };
            engine.inner.hub.listen(stop, cancel).await
        });
        let store = inner.store.clone();
        let stop = inner.stop_maintenance.clone();
        inner
            .maintenance
            .spawn(async move { store.upkeep(stop).await });
        let engine = self.clone();
        inner
            .maintenance
            .spawn(async move { engine.claim_loop().await });
        let engine = self.clone();
        inner
            .maintenance
            .spawn(async move { engine.sweep_loop().await });
        // Histogram samples are folded into buckets every few seconds, scraped or not.
        let stop = inner.stop_maintenance.clone();
        inner.maintenance.spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(METRICS_UPKEEP) => crate::metrics::upkeep(),
                }
            }
        });
    }

    /// Claims queued runs when woken (a run queued here) or every `claim_interval`, until
    /// the service stops taking new runs.
    async fn claim_loop(&self) {
        let inner = &self.inner;
        let interval = inner.settings.claim_interval;
        loop {
            tokio::select! {
                _ = inner.stop_maintenance.cancelled() => break,
                _ = inner.queued.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            // No new runs once shutting down.
            if inner.runs.is_closed() {
                break;
            }
            if let Err(e) = self.claim().await {
                tracing::warn!(error = %e, "claiming queued runs failed");
            }
        }
    }

    /// Takes queued runs from the database while this instance has free slots.
    async fn claim(&self) -> Result<(), EngineError> {
        loop {
            let free = self.inner.background_slots.available_permits();
            if free == 0 {
                return Ok(());
            }
            let now = UnixMillis::now();
            let lease = self.lease(now);
            let claimed = self
                .inner
                .store
                .claim_queued(&lease, now, free as u32)
                .await?;
            if claimed.is_empty() {
                return Ok(());
            }
            for run in claimed {
                let Ok(permit) = self.inner.background_slots.clone().try_acquire_owned() else {
                    break;
                };
                let id = run.body.id.clone();
                if let Err(e) = self.start_claimed(run, permit).await {
                    tracing::error!(response_id = %id, error = %e, "cannot start a claimed run");
                }
            }
        }
    }

    /// Starts a run this instance claimed from the queue.
    async fn start_claimed(
        &self,
        run: StoredRun,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), EngineError> {
        let mut body = run.body.clone();
        body.status = ResponseStatus::InProgress;
        let (tenant_id, id) = (run.tenant_id.clone(), body.id.clone());
        // Readers of the stored body see it running.
        self.inner
            .store
            .checkpoint(
                &id,
                self.holder(),
                &body,
                &run.transcript,
                UnixMillis::now(),
            )
            .await?;
        let key_id = run.key_id.as_deref();
        let loaded = match self.load(&tenant_id, &body, &run.transcript, key_id).await {
            Ok(loaded) => loaded,
            Err(e) => {
                // The configuration changed since it was queued (a model or tool server is gone).
                let why = format!("The run cannot start: {e}");
                self.give_up(StoredRun { body, ..run }, &why).await;
                return Ok(());
            }
        };
        let next_sequence = self
            .inner
            .store
            .last_sequence_number(&id)
            .await?
            .map_or(0, |n| n + 1);
        let resumption = Resumption::unattended(StoredRun { body, ..run }, next_sequence);
        let started = self.resume(loaded, resumption);
        // The slot is free again when the run stops.
        self.inner.maintenance.spawn(async move {
            let _ = started.outcome.await;
            drop(permit);
        });
        Ok(())
    }

    /// Every `sweep_interval`: renews the leases of the runs executing here (and stops those
    /// a client asked to cancel through another instance), takes over runs nobody holds,
    /// expires paused runs past their deadline, prunes past retention.
    async fn sweep_loop(&self) {
        let inner = &self.inner;
        let mut tick = tokio::time::interval(inner.settings.sweep_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Runs found abandoned are taken over only once the MCP servers have listed their
        // tools (or `DISCOVERY_WAIT` has passed), so that a turn asked again is offered them.
        let started = tokio::time::Instant::now();
        let mut discovered = false;
        loop {
            tokio::select! {
                _ = inner.stop_maintenance.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.renew_leases().await {
                tracing::warn!(error = %e, "lease renewal failed");
            }
            discovered = discovered
                || inner.registry.discovery_is_settled()
                || started.elapsed() >= super::recovery::DISCOVERY_WAIT;
            if discovered
                && !inner.runs.is_closed()
                && let Err(e) = self.recover_abandoned(false).await
            {
                tracing::warn!(error = %e, "sweep for abandoned runs failed");
            }
            if let Err(e) = self.expire_overdue().await {
                tracing::warn!(error = %e, "sweep for expired runs failed");
            }
            self.flush_usage().await;
            let now = UnixMillis::now();
            let settings = &inner.settings;
            let pruned = inner
                .store
                .prune(
                    now.minus(settings.retention),
                    now.minus(settings.idempotency_ttl),
                )
                .await;
            match pruned {
                Ok((0, 0)) => {}
                Ok((runs, keys)) => tracing::info!(runs, keys, "pruned past the retention windows"),
                Err(e) => tracing::warn!(error = %e, "pruning failed"),
            }
        }
    }

    /// Renews the lease of every run executing here. Only those: a run whose task has
    /// stopped without letting go of it (its database was unreachable) keeps no lease alive,
    /// and is taken over once it runs out.
    async fn renew_leases(&self) -> Result<(), EngineError> {
        let inner = &self.inner;
        let ids = inner.live.ids();
        if ids.is_empty() {
            return Ok(());
        }
        let until = UnixMillis::now().plus(inner.settings.lease_ttl);
        for id in inner.hub.renew(ids, until).await? {
            tracing::info!(response_id = %id, "cancel requested through another instance");
            inner.live.stop(&id, StopReason::Cancel);
        }
        Ok(())
    }

    /// Graceful stop: no new runs; running ones get `grace` to finish, then are handed over
    /// at their next safe point (their model stream or tools are stopped, their open items
    /// closed, their lease released) for another instance — or this one after a restart — to
    /// continue. Queued runs stay queued. Whatever this instance still holds is let go last.
    pub async fn shutdown(&self, grace: Duration) {
        let inner = &self.inner;
        inner.runs.close();
        if tokio::time::timeout(grace, inner.runs.wait())
            .await
            .is_err()
        {
            let running = inner.live.stop_all(StopReason::HandOver);
            tracing::warn!(
                running,
                "grace period over; handing the remaining runs over"
            );
            if tokio::time::timeout(HANDOVER_WAIT, inner.runs.wait())
                .await
                .is_err()
            {
                tracing::error!("runs did not stop after being told to hand over");
            }
        }
        inner.stop_maintenance.cancel();
        inner.maintenance.close();
        inner.maintenance.wait().await;
        self.flush_usage().await;
        match inner.hub.release_all().await {
            Ok(0) => {}
            Ok(released) => tracing::warn!(released, "let go of runs still held at shutdown"),
            Err(e) => {
                tracing::error!(error = %e, "cannot let go of runs at shutdown; their leases run out instead")
            }
        }
    }

    /// Writes the usage added up since the last time; kept for the next time if the store
    /// cannot take it now.
    pub async fn flush_usage(&self) {
        let rows = self.inner.usage.take();
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.inner.store.add_usage(&rows).await {
            tracing::warn!(error = %e, "cannot record token usage; trying again later");
            self.inner.usage.restore(rows);
        }
    }
}
