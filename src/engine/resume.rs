//! The one way a stored run continues here: after its client answered its pause
//! (`submit_tool_outputs`), after a worker claimed it from the queue, after a takeover from an
//! instance that stopped, after a restart. The run is already held by this instance (each of
//! those is a transition of the state table); what it needs is rebuilt from the database.

use super::create::{Launch, Prepared};
use super::lifecycle::{Ending, StoredEnd, end_stored};
use super::run::Decision;
use super::{Engine, EngineError, StartedRun, announced, pause};
use crate::protocol::items::Item;
use crate::protocol::response::{ResponseObject, ResponseStatus};
use crate::protocol::transcript::Entry;
use crate::store::{Lease, StoredRun};
use crate::time::UnixMillis;

/// What a stored run needs to continue: its request as prepared at creation, its chain, and
/// its input items as stored when it was loaded.
pub(super) struct Loaded {
    prepared: Prepared,
    history: Vec<Entry>,
    input: Vec<Item>,
}

/// A stored run about to continue here.
pub(super) struct Resumption {
    /// As stored before it continues (its body says how it last stopped, and its usage so
    /// far).
    pub run: StoredRun,
    /// The sequence number its next event gets.
    pub next_sequence: u64,
    pub stream: bool,
    /// Approval answers to act on first.
    pub decisions: Vec<Decision>,
    /// Input items appended since it was loaded (the outputs that resume it).
    pub appended: Vec<Item>,
}

impl Engine {
    /// Rebuilds a stored run's request from its body, prepares it as at creation (a model or
    /// tool server gone from the configuration is an error here) and reads its chain.
    /// Servers announced in `seen` (the run's own transcript) are not announced again.
    pub(super) async fn load(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
        seen: &[Entry],
        key_id: Option<&str>,
    ) -> Result<Loaded, EngineError> {
        let request = pause::request_from_body(body);
        // The run goes on under the policy of the key that created it.
        let key = match key_id {
            Some(id) => self.inner.store.key_by_id(id).await?,
            None => None,
        };
        let key = key.map(crate::auth::api_key).transpose()?;
        let history = self.history_of(tenant_id, body).await?;
        let input = self.inner.store.input_items(tenant_id, &body.id).await?;
        let items = history
            .iter()
            .chain(seen)
            .filter_map(Entry::item)
            .chain(&input);
        let policy = key.as_ref().map(|k| &k.policy);
        let prepared = self
            .prepare(&request, &input, &announced(items), policy)
            .await?;
        Ok(Loaded {
            prepared,
            history,
            input,
        })
    }

    /// Continues the run on a task here, its log after `next_sequence - 1`.
    pub(super) fn resume(&self, loaded: Loaded, resumption: Resumption) -> StartedRun {
        let run = resumption.run;
        let mut context = loaded.history;
        let input = loaded.input.into_iter().chain(resumption.appended);
        context.extend(input.map(Entry::Item));
        let mut body = run.body;
        body.status = ResponseStatus::InProgress;
        body.required_action = None;
        body.completed_at = None;
        // Null while running (SPEC §4); the run adds to it when it stops again.
        let prior_usage = body.usage.take();
        let launch = Launch {
            tenant_id: run.tenant_id,
            body,
            context,
            transcript: run.transcript,
            next_sequence: resumption.next_sequence,
            resumed: true,
            stream: resumption.stream,
            decisions: resumption.decisions,
            prior_usage,
            admission: None,
            cancel_requested: run.cancel_requested,
            key_id: run.key_id,
        };
        self.launch(loaded.prepared, launch)
    }

    /// Fails a run this instance holds that cannot continue here.
    pub(super) async fn give_up(&self, mut run: StoredRun, why: &str) {
        let ending = Ending::Abandoned(why.to_string());
        let end = StoredEnd {
            tenant_id: &run.tenant_id,
            from: run.state,
            body: &mut run.body,
            transcript: None,
        };
        match end_stored(&*self.inner.store, self.holder(), end, &ending).await {
            Ok(()) => {
                tracing::warn!(response_id = %run.body.id, why, "failed a run that cannot continue")
            }
            Err(e) => {
                tracing::error!(response_id = %run.body.id, error = %e, "cannot fail a run that cannot continue")
            }
        }
    }

    /// Takes queued runs from the database while this instance has free slots.
    pub(super) async fn claim(&self) -> Result<(), EngineError> {
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

    /// This instance's lease from `now`.
    pub(super) fn lease(&self, now: UnixMillis) -> Lease {
        Lease {
            holder: self.holder().to_string(),
            until: now.plus(self.inner.settings.lease_ttl),
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
        let resumption = Resumption {
            run: StoredRun { body, ..run },
            next_sequence,
            stream: false,
            decisions: Vec::new(),
            appended: Vec::new(),
        };
        let started = self.resume(loaded, resumption);
        // The slot is free again when the run stops.
        self.inner.maintenance.spawn(async move {
            let _ = started.outcome.await;
            drop(permit);
        });
        Ok(())
    }
}
