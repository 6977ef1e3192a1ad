//! What a request's input refers to among earlier responses of its tenant (SPEC §5, §9):
//! `item_reference`s resolved to the items they name, replayed server items whose content the
//! client left out filled from the stored ones, and the paused responses that a replayed
//! history answers (clients that replay instead of sending `previous_response_id`).

use std::collections::HashSet;

use super::{Engine, EngineError};
use crate::protocol::field::FieldError;
use crate::protocol::items::Item;
use crate::protocol::request::InputEntry;
use crate::protocol::response::ResponseObject;
use crate::store::{FoundItem, RunState, StoredRun};

/// A request's input with its references resolved, and what the store knew of the ids it
/// names.
pub(super) struct ResolvedInput {
    pub items: Vec<Item>,
    found: Vec<FoundItem>,
}

impl ResolvedInput {
    /// An item the tenant's runs produced, by its id.
    fn output(&self, id: &str) -> Option<&FoundItem> {
        self.found
            .iter()
            .find(|found| found.output && found.item.id() == id)
    }

    /// Whether the store knows an approval request with this id (answered or not).
    pub fn knows_approval_request(&self, id: &str) -> bool {
        self.output(id)
            .is_some_and(|found| matches!(found.item, Item::McpApprovalRequest(_)))
    }

    /// The runs, paused now, that produced the calls this input answers or the approval
    /// requests it decides.
    fn paused_runs(&self) -> Vec<&str> {
        let answered = answered_keys(&self.items);
        let mut runs: Vec<&str> = self
            .found
            .iter()
            .filter(|found| found.output && found.state == RunState::RequiresAction)
            .filter(|found| match &found.item {
                Item::FunctionCall(c) => answered.contains(c.call_id.as_str()),
                Item::CustomToolCall(c) => answered.contains(c.call_id.as_str()),
                Item::LocalShellCall(c) => answered.contains(c.call_id.as_str()),
                Item::McpApprovalRequest(r) => answered.contains(r.id.as_str()),
                _ => false,
            })
            .map(|found| found.response_id.as_str())
            .collect();
        runs.sort_unstable();
        runs.dedup();
        runs
    }
}

/// The call ids an input answers with outputs, and the approval requests it decides.
fn answered_keys(items: &[Item]) -> HashSet<&str> {
    items
        .iter()
        .filter_map(|item| match item {
            Item::McpApprovalResponse(r) => Some(r.approval_request_id.as_str()),
            other => other.as_output().map(|(call_id, _)| call_id),
        })
        .collect()
}

/// A replayed server item whose content the client left out (the OpenAI Agents SDK for
/// JavaScript replays `mcp_call` items without `output` on purpose).
fn lacks_content(item: &Item) -> bool {
    match item {
        Item::McpCall(call) => call.output.is_none() && call.error.is_none(),
        Item::McpListTools(listing) => listing.tools.is_empty() && listing.error.is_none(),
        _ => false,
    }
}

impl Engine {
    /// Resolves `item_reference`s (an unknown id is a 400 naming `input[i].id`) and fills
    /// replayed server items from the stored ones, looking every id the input names up once.
    pub(super) async fn resolve_input(
        &self,
        tenant_id: &str,
        entries: Vec<InputEntry>,
    ) -> Result<ResolvedInput, EngineError> {
        let mut keys: Vec<&str> = Vec::new();
        for entry in &entries {
            match entry {
                InputEntry::Reference(id) => keys.push(id),
                InputEntry::Item(item) if lacks_content(item) => keys.push(item.id()),
                InputEntry::Item(_) => {}
            }
        }
        let items = || {
            entries.iter().filter_map(|e| match e {
                InputEntry::Item(item) => Some(item),
                InputEntry::Reference(_) => None,
            })
        };
        let answered: Vec<&str> = items()
            .flat_map(|item| answered_keys(std::slice::from_ref(item)))
            .collect();
        keys.extend(answered);
        let found = if keys.is_empty() {
            Vec::new()
        } else {
            keys.sort_unstable();
            keys.dedup();
            self.inner.store.find_items(tenant_id, &keys).await?
        };
        let mut resolved = ResolvedInput {
            items: Vec::with_capacity(entries.len()),
            found,
        };
        for (index, entry) in entries.into_iter().enumerate() {
            let item = match entry {
                InputEntry::Reference(id) => {
                    let stored = resolved
                        .output(&id)
                        .or_else(|| resolved.found.iter().find(|f| f.item.id() == id));
                    match stored {
                        Some(found) => found.item.clone(),
                        None => {
                            return Err(FieldError::new(
                                format!("input[{index}].id"),
                                format!("Item with id '{id}' not found."),
                            )
                            .into());
                        }
                    }
                }
                InputEntry::Item(item) if lacks_content(&item) => {
                    match resolved.output(item.id()) {
                        Some(found)
                            if std::mem::discriminant(&found.item)
                                == std::mem::discriminant(&item) =>
                        {
                            found.item.clone()
                        }
                        _ => item,
                    }
                }
                InputEntry::Item(item) => item,
            };
            resolved.items.push(item);
        }
        Ok(resolved)
    }

    /// The paused runs a replayed history answers (no `previous_response_id`): those whose
    /// pending calls the input has outputs for, or whose approval requests it decides.
    pub(super) async fn paused_by_replay(
        &self,
        tenant_id: &str,
        input: &ResolvedInput,
    ) -> Result<Vec<StoredRun>, EngineError> {
        let mut runs = Vec::new();
        for id in input.paused_runs() {
            let run = self.get_run(tenant_id, id).await?;
            if run.state == RunState::RequiresAction && waits_for_input(&run.body, &input.items) {
                runs.push(run);
            }
        }
        Ok(runs)
    }
}

/// Whether the input answers one of the calls or approval requests the paused run waits for.
fn waits_for_input(body: &ResponseObject, items: &[Item]) -> bool {
    let Some(action) = &body.required_action else {
        return false;
    };
    let answered = answered_keys(items);
    let work = &action.submit_tool_outputs;
    work.tool_calls
        .iter()
        .any(|c| answered.contains(c.id.as_str()))
        || work
            .approval_requests
            .iter()
            .any(|r| answered.contains(r.id.as_str()))
}
