//! What a continuation inherits: every earlier input and output along the chain of
//! `previous_response_id`, oldest first. Instructions are not inherited (SPEC §9).

use super::{Engine, EngineError, MAX_CHAIN_DEPTH};
use crate::protocol::request::FieldError;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::store::{RunState, StoreError, StoredRun};

impl Engine {
    /// The model context a continuation of `previous` inherits, and the previous run.
    pub(super) async fn chain(
        &self,
        tenant_id: &str,
        previous: &str,
    ) -> Result<(Vec<Entry>, StoredRun), EngineError> {
        let not_found = || {
            EngineError::Invalid(
                FieldError::new(
                    "previous_response_id",
                    format!("Previous response with id '{previous}' not found."),
                ),
                Some("previous_response_not_found"),
            )
        };
        let first = match self.inner.store.get_run(tenant_id, previous).await {
            Ok(run) => run,
            Err(StoreError::NotFound) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        if matches!(first.state, RunState::Queued | RunState::InProgress) {
            return Err(FieldError::new(
                "previous_response_id",
                format!("Previous response with id '{previous}' is still in progress."),
            )
            .into());
        }
        let mut segments: Vec<Vec<Entry>> = Vec::new();
        let previous_run = first.clone();
        let mut current = Some(first);
        while let Some(run) = current.take() {
            if segments.len() >= MAX_CHAIN_DEPTH {
                return Err(FieldError::new(
                    "previous_response_id",
                    format!("The chain of previous responses is longer than {MAX_CHAIN_DEPTH}."),
                )
                .into());
            }
            let input = self
                .inner
                .store
                .input_items(tenant_id, &run.body.id)
                .await?;
            let mut segment: Vec<Entry> = input.into_iter().map(Entry::Item).collect();
            // What the model saw, hidden tool calls included (runs stored before the
            // transcript existed have only their output).
            if run.transcript.is_empty() {
                segment.extend(run.body.output.iter().cloned().map(Entry::Item));
            } else {
                segment.extend(run.transcript.iter().cloned());
            }
            segments.push(segment);
            if let Some(parent) = &run.body.previous_response_id {
                current = match self.inner.store.get_run(tenant_id, parent).await {
                    Ok(run) => Some(run),
                    // A deleted ancestor ends the chain; what remains is still usable.
                    Err(StoreError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                };
            }
        }
        Ok((segments.into_iter().rev().flatten().collect(), previous_run))
    }

    /// The history a stored run continues: its chain, or nothing if an ancestor is gone.
    pub(super) async fn history_of(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
    ) -> Result<Vec<Entry>, EngineError> {
        match &body.previous_response_id {
            Some(previous) => match self.chain(tenant_id, previous).await {
                Ok((history, _)) => Ok(history),
                Err(EngineError::Invalid(..)) => Ok(Vec::new()),
                Err(e) => Err(e),
            },
            None => Ok(Vec::new()),
        }
    }
}
