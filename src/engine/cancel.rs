//! `POST /v1/responses/{id}/cancel`, through any instance. A run nobody executes (queued,
//! paused) is cancelled in the store. A running run is stopped by the instance that holds it:
//! here directly; elsewhere through a cancel request the holder hears of at once (PostgreSQL
//! `NOTIFY`) or at its next lease renewal or checkpoint; and a run whose holder is gone is
//! taken over here first. Only the holder writes the run's log, so a cancel can never put
//! events after its end or two instances' numbering in one log.

use std::time::{Duration, Instant};

use super::control::StopReason;
use super::lifecycle::{Ending, StoredEnd, end_stored};
use super::{Engine, EngineError};
use crate::protocol::response::ResponseObject;
use crate::store::{RunState, StoreError};
use crate::time::UnixMillis;

/// How long `cancel` waits for a running run to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// How often it looks whether a run executing elsewhere has stopped.
const CANCEL_POLL: Duration = Duration::from_millis(25);

impl Engine {
    /// Stops a queued, running or paused run; a run that already stopped is returned as it
    /// is. A run still running after the wait (its holder has not reached a point where it
    /// can stop) is returned as it is, and stops when its holder gets there.
    pub async fn cancel(&self, tenant_id: &str, id: &str) -> Result<ResponseObject, EngineError> {
        let deadline = Instant::now() + CANCEL_WAIT;
        let mut requested = false;
        loop {
            let mut run = self.get_run(tenant_id, id).await?;
            match run.state {
                state if state.is_final() => return Ok(run.body),
                RunState::Queued | RunState::RequiresAction => {
                    let end = StoredEnd {
                        tenant_id,
                        from: run.state,
                        body: &mut run.body,
                        transcript: None,
                    };
                    match end_stored(&*self.inner.store, self.holder(), end, &Ending::Cancelled)
                        .await
                    {
                        Ok(()) => return Ok(run.body),
                        // It moved on meanwhile (claimed, resumed, finished): look again.
                        Err(StoreError::Conflict { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => {}
            }
            // Running. Here: its task closes its items, stops its model stream and tools,
            // and stores itself.
            if let Some(mut stopped) = self.inner.live.stop(id, StopReason::Cancel) {
                let wait = deadline.saturating_duration_since(Instant::now());
                let _ = tokio::time::timeout(wait, stopped.wait_for(|done| *done)).await;
            } else {
                let now = UnixMillis::now();
                if !requested {
                    requested = self.inner.store.request_cancel(tenant_id, id, now).await?;
                }
                let unheld = run.lease_owner.is_none()
                    || run.lease_expires_at.is_none_or(|until| until < now);
                // Nobody executes it: taken over here, it stops at once (it was asked to).
                if !(requested && unheld && self.recover(id, now).await?) {
                    tokio::time::sleep(CANCEL_POLL).await;
                }
            }
            if Instant::now() >= deadline {
                return Ok(self.get_run(tenant_id, id).await?.body);
            }
        }
    }
}
