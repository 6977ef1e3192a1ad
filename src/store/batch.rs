//! What happens when the event writer's batch does not commit, the same on both backends.
//!
//! A database that cannot be reached may be back in a moment: the batch is tried again a few
//! times. A batch the database refuses (one run's row breaks a constraint, say) fails the
//! same way every time: it is written at once run by run, each run's new row, events and
//! ending in a transaction of their own, so that the other runs of the batch lose nothing and
//! wait for no retries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::error::StoreError;
use super::types::{BatchOutcome, Loss, WriteBatch};
use crate::protocol::events::EventRecord;

/// Delays between attempts to write a batch the database could not be reached for.
const RETRY_DELAYS_MS: [u64; 3] = [10, 100, 500];

/// A backend's commit of a whole batch in one transaction.
#[async_trait]
pub(super) trait Commit: Sync {
    async fn commit(&self, batch: &WriteBatch<'_>) -> Result<BatchOutcome, StoreError>;
}

/// Writes the batch: whole, or run by run when the database refuses it.
pub(super) async fn write(store: &impl Commit, batch: &WriteBatch<'_>) -> BatchOutcome {
    if batch.is_empty() {
        return BatchOutcome::default();
    }
    let mut result = store.commit(batch).await;
    for delay in RETRY_DELAYS_MS {
        match &result {
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, runs = batch.runs.len(), events = batch.events.len(), "writing a batch failed; retrying");
                tokio::time::sleep(Duration::from_millis(delay)).await;
                result = store.commit(batch).await;
            }
            _ => break,
        }
    }
    match result {
        Ok(outcome) => outcome,
        // Still unreachable: every part of the batch fails now (written run by run, each
        // would wait for the database again).
        Err(e) if e.is_transient() => {
            tracing::error!(error = %e, "the database cannot be reached; the batch is not written");
            failed_whole(batch, &e)
        }
        Err(e) => {
            tracing::warn!(error = %e, "writing a batch failed; writing it run by run");
            write_apart(store, batch).await
        }
    }
}

/// The outcome of a batch none of which was written.
fn failed_whole(batch: &WriteBatch<'_>, error: &StoreError) -> BatchOutcome {
    let mut outcome = BatchOutcome::default();
    for run in &batch.runs {
        outcome
            .not_inserted
            .insert(run.body.id.clone(), error.clone());
    }
    for event in batch.events {
        outcome
            .lost
            .insert(event.response_id.clone(), Loss::Failed(error.clone()));
    }
    outcome.endings = batch.endings.iter().map(|_| Err(error.clone())).collect();
    outcome.unreachable = true;
    outcome
}

/// Each run's part of the batch in a transaction of its own.
async fn write_apart(store: &impl Commit, batch: &WriteBatch<'_>) -> BatchOutcome {
    // The runs, in the order they first appear.
    let mut order: Vec<&str> = Vec::new();
    let ids = (batch.runs.iter().map(|r| r.body.id.as_str()))
        .chain(batch.events.iter().map(|e| &*e.response_id))
        .chain(batch.endings.iter().map(|e| e.id.as_str()));
    for id in ids {
        if !order.contains(&id) {
            order.push(id);
        }
    }
    let mut outcome = BatchOutcome::default();
    let mut ended: HashMap<String, Result<(), StoreError>> = HashMap::new();
    for id in order {
        let events: Vec<EventRecord> = batch
            .events
            .iter()
            .filter(|e| &*e.response_id == id)
            .cloned()
            .collect();
        let part = WriteBatch {
            holder: batch.holder,
            runs: batch
                .runs
                .iter()
                .copied()
                .filter(|r| r.body.id == id)
                .collect(),
            events: &events,
            endings: batch
                .endings
                .iter()
                .copied()
                .filter(|e| e.id == id)
                .collect(),
        };
        match store.commit(&part).await {
            Ok(written) => {
                outcome.not_inserted.extend(written.not_inserted);
                outcome.lost.extend(written.lost);
                for (ending, result) in part.endings.iter().zip(written.endings) {
                    ended.insert(ending.id.clone(), result);
                }
            }
            Err(e) => {
                tracing::error!(response_id = %id, error = %e, "a run's part of a batch could not be written");
                for run in &part.runs {
                    outcome.not_inserted.insert(run.body.id.clone(), e.clone());
                }
                if !events.is_empty() {
                    outcome.lost.insert(Arc::from(id), Loss::Failed(e.clone()));
                }
                for ending in &part.endings {
                    ended.insert(ending.id.clone(), Err(e.clone()));
                }
            }
        }
    }
    outcome.endings = batch
        .endings
        .iter()
        .map(|ending| {
            ended
                .remove(ending.id.as_str())
                .unwrap_or_else(|| Err(StoreError::Rejected("the ending was not written".into())))
        })
        .collect();
    outcome
}
