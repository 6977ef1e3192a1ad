//! What a continuation inherits: every earlier input and output along the chain of
//! `previous_response_id`, oldest first. Instructions are not inherited (SPEC §9).

use super::{Engine, EngineError, MAX_CHAIN_DEPTH};
use crate::protocol::field::FieldError;
use crate::protocol::response::{ResponseObject, ResponseStatus};
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
        // A `store: false` response is not kept once it stops (it is being deleted): only a
        // paused one can be continued (a WebSocket remembers its own, see `SocketMemory`).
        if !first.body.store && first.state != RunState::RequiresAction && first.state.is_final() {
            return Err(not_found());
        }
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
        if let Some(conversation) = &body.conversation {
            return self
                .conversation_before(tenant_id, body, &conversation.id)
                .await;
        }
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

/// What a WebSocket connection remembers of its most recent `store: false` response (Open
/// Responses, WebSocket continuation): the whole context the model saw, so that the next
/// response on the same socket can continue it although it was never stored. Nothing else
/// sees it; it goes with the connection.
#[derive(Default)]
pub struct SocketMemory {
    /// The response being created on the socket, and its context (history and input).
    pending: Option<(String, Vec<Entry>)>,
    /// The most recent finished one, with its output appended.
    last: Option<(String, Vec<Entry>)>,
}

impl SocketMemory {
    /// The context of a response this socket remembers.
    pub(super) fn context_of(&self, id: &str) -> Option<&[Entry]> {
        match &self.last {
            Some((last, context)) if last == id => Some(context),
            _ => None,
        }
    }

    /// A response starts on the socket with this context; remembered once it finishes.
    pub(super) fn started(&mut self, id: &str, context: &[Entry]) {
        self.pending = Some((id.to_string(), context.to_vec()));
    }

    /// A response of this socket finished: a `store: false` one that completed is remembered
    /// (the one before is forgotten), any other is not.
    pub fn finished(&mut self, response: &ResponseObject) {
        let Some((id, mut context)) = self.pending.take() else {
            return;
        };
        let usable = matches!(
            response.status,
            ResponseStatus::Completed | ResponseStatus::Incomplete
        );
        if id != response.id || response.store || !usable {
            return;
        }
        context.extend(response.output.iter().cloned().map(Entry::Item));
        self.last = Some((id, context));
    }

    /// Forgets a response (a continuation of it failed), and the one being created.
    pub fn forget(&mut self, id: &str) {
        self.pending = None;
        if self.last.as_ref().is_some_and(|(last, _)| last == id) {
            self.last = None;
        }
    }
}
