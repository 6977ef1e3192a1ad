//! The persisted pause and what ends it: `submit_tool_outputs` (resume the same run, from the
//! database, on any instance), the standard continuation by `previous_response_id`, and
//! expiry. Every change of state is a compare-and-set; losing one is an answer, not a
//! crash.

use std::collections::HashSet;

use super::launch::Resumption;
use super::lifecycle::{Ending, StoredEnd, end_stored};
use super::run::Decision;
use super::{Engine, EngineError, StartedRun};
use crate::auth::Caller;
use crate::protocol::field::FieldError;
use crate::protocol::items::{
    CallOutput, FunctionCallOutput, Item, McpApprovalResponse, ToolOutput,
};
use crate::protocol::request::SubmitToolOutputs;
use crate::protocol::response::{CallKind, PendingApproval, PendingWork, ResponseObject};
use crate::protocol::transcript::Entry;
use crate::store::{Change, RunState, StoreError, StoredRun, Transition};
use crate::time::UnixMillis;

/// The calls and approval requests a paused run waits for.
fn pending_work(body: &ResponseObject) -> PendingWork {
    body.required_action
        .as_ref()
        .map(|action| action.submit_tool_outputs.clone())
        .unwrap_or_default()
}

fn not_accepting(state: RunState) -> EngineError {
    FieldError::new(
        "",
        format!(
            "Runs in status \"{}\" do not accept tool outputs.",
            state.as_str()
        ),
    )
    .into()
}

/// `['call_A', 'call_B']`, as the standard error texts write lists.
fn quoted_list(ids: &[String]) -> String {
    let quoted: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Every output in `input` must answer a call made earlier in the chain or in `input`, and
/// every approval answer a request a paused run waits for (`pending`), so that an approved
/// call runs once, or one `decided` before (a replayed answer, which runs nothing).
pub(super) fn check_outputs_match_calls(
    history: &[Entry],
    input: &[Item],
    pending: &[PendingApproval],
    decided: &dyn Fn(&str) -> bool,
) -> Result<(), EngineError> {
    let calls: HashSet<String> = history
        .iter()
        .filter_map(Entry::item)
        .chain(input)
        .filter_map(Item::as_call)
        .map(|(id, _, _)| id)
        .collect();
    for (index, item) in input.iter().enumerate() {
        if let Item::McpApprovalResponse(response) = item
            && !pending.iter().any(|r| r.id == response.approval_request_id)
            && !decided(&response.approval_request_id)
        {
            return Err(FieldError::new(
                format!("input[{index}]"),
                format!(
                    "No pending approval request with id {}.",
                    response.approval_request_id
                ),
            )
            .into());
        }
        if let Some((call_id, _)) = item.as_output()
            && !calls.contains(call_id)
        {
            return Err(FieldError::new(
                format!("input[{index}]"),
                format!("No tool call found for function call output with call_id {call_id}."),
            )
            .into());
        }
    }
    Ok(())
}

impl Engine {
    /// `POST /v1/responses/{id}/submit_tool_outputs`: answers every pending call exactly once
    /// and resumes the same run here, whichever instance paused it.
    pub async fn submit_tool_outputs(
        &self,
        caller: &Caller,
        id: &str,
        submission: SubmitToolOutputs,
    ) -> Result<StartedRun, EngineError> {
        if self.inner.runs.is_closed() {
            return Err(EngineError::ShuttingDown);
        }
        let tenant_id = caller.tenant_id.as_str();
        self.check_database().await?;
        self.check_concurrency(caller)?;
        let run = self.get_run(tenant_id, id).await?;
        if run.state != RunState::RequiresAction {
            return Err(not_accepting(run.state));
        }
        if run
            .expires_at
            .is_some_and(|deadline| deadline < UnixMillis::now())
        {
            let state = self.expire(run).await;
            return Err(not_accepting(state));
        }
        let (outputs, decisions) = answers(pending_work(&run.body), &submission)?;
        // Prepared before anything changes: a model or tool server gone from the
        // configuration is the client's error, and the run stays paused.
        let loaded = self
            .load(tenant_id, &run.body, &run.transcript, run.key_id.as_deref())
            .await?;
        let mut body = run.body.clone();
        body.reopen();
        let now = UnixMillis::now();
        let change = Change {
            body: Some(&body),
            append_input: &outputs,
            now,
            lease_until: now.plus(self.inner.settings.lease_ttl),
            ..Change::new(id, Transition::RESUME, self.holder())
        };
        // One compare-and-set: of two concurrent submissions exactly one gets here.
        let applied = match self.inner.store.transition(&change).await {
            Ok(applied) => applied,
            Err(StoreError::Conflict { actual }) => return Err(not_accepting(actual)),
            Err(StoreError::Locked) => {
                return Err(super::conversations::not_taken(StoreError::Locked, &body));
            }
            Err(StoreError::NotFound) => return Err(EngineError::NotFound(id.to_string())),
            Err(e) => return Err(e.into()),
        };
        tracing::info!(outputs = outputs.len(), "run resumed");
        let resumption = Resumption {
            run,
            next_sequence: applied.next_sequence,
            stream: submission.stream == Some(true),
            decisions,
            appended: outputs,
        };
        Ok(self.resume(loaded, resumption))
    }

    /// A continuation answered the paused run's calls: check it answered all, then the
    /// paused run is `completed`. `param` names what referred to it (`previous_response_id`,
    /// or `input` for a replayed history).
    pub(super) async fn complete_by_continuation(
        &self,
        previous: StoredRun,
        input: &[Item],
        param: &str,
    ) -> Result<Vec<Decision>, EngineError> {
        let answered: HashSet<&str> = input
            .iter()
            .filter_map(Item::as_output)
            .map(|(id, _)| id)
            .collect();
        let pending = pending_work(&previous.body);
        for call_id in pending.tool_calls.iter().map(|c| &c.id) {
            if !answered.contains(call_id.as_str()) {
                return Err(FieldError::new(
                    "input",
                    format!("No tool output found for function call {call_id}."),
                )
                .into());
            }
        }
        let requests = pending.approval_requests;
        let asked: HashSet<&str> = requests.iter().map(|r| r.id.as_str()).collect();
        for request in &requests {
            let answered = input.iter().any(|item| {
                matches!(item, Item::McpApprovalResponse(r) if r.approval_request_id == request.id)
            });
            if !answered {
                return Err(FieldError::new(
                    "input",
                    format!(
                        "No approval response found for approval request {}.",
                        request.id
                    ),
                )
                .into());
            }
        }
        // Answers to this run's requests (a replayed history may hold older ones too).
        let answers: Vec<(String, bool, Option<String>)> = input
            .iter()
            .filter_map(|item| match item {
                Item::McpApprovalResponse(r) if asked.contains(r.approval_request_id.as_str()) => {
                    Some((r.approval_request_id.clone(), r.approve, r.reason.clone()))
                }
                _ => None,
            })
            .collect();
        let decisions = decisions(&requests, &answers).map_err(|_| {
            EngineError::from(FieldError::new(
                "input",
                "Each approval request must be answered exactly once.",
            ))
        })?;
        let mut body = previous.body.clone();
        body.required_action = None;
        let change = Change {
            body: Some(&body),
            ..Change::new(&body.id, Transition::CONTINUE, self.holder())
        };
        match self.inner.store.transition(&change).await {
            Ok(_) => Ok(decisions),
            Err(StoreError::Conflict { actual }) => {
                let which = match param {
                    "previous_response_id" => "Previous response",
                    _ => "Response",
                };
                Err(FieldError::new(
                    param,
                    format!(
                        "{which} with id '{}' is no longer waiting for tool outputs (it is {}).",
                        body.id,
                        actual.as_str()
                    ),
                )
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Moves paused runs past their deadline to `expired`.
    pub(super) async fn expire_overdue(&self) -> Result<usize, EngineError> {
        let overdue = self.inner.store.expired_runs(UnixMillis::now()).await?;
        let count = overdue.len();
        for run in overdue {
            self.expire(run).await;
        }
        Ok(count)
    }

    /// Expires one paused run; returns the state it is in afterwards.
    async fn expire(&self, run: StoredRun) -> RunState {
        let mut body = run.body;
        let end = StoredEnd {
            tenant_id: &run.tenant_id,
            from: run.state,
            body: &mut body,
            transcript: None,
        };
        match end_stored(&*self.inner.store, self.holder(), end, &Ending::Expired).await {
            Ok(()) => {
                tracing::info!(response_id = %body.id, "paused run expired");
                RunState::Expired
            }
            Err(StoreError::Conflict { actual }) => actual,
            Err(e) => {
                tracing::warn!(response_id = %body.id, error = %e, "cannot expire a run");
                run.state
            }
        }
    }
}

/// The run's new input items answering its pause with `submission` (one output per pending
/// call, in the calls' order, then the approval answers), and the decisions on its approval
/// requests. Every pending call and request must be answered exactly once, and nothing else.
fn answers(
    pending: PendingWork,
    submission: &SubmitToolOutputs,
) -> Result<(Vec<Item>, Vec<Decision>), EngineError> {
    let expected: Vec<String> = pending.tool_calls.iter().map(|c| c.id.clone()).collect();
    let got: Vec<String> = submission
        .tool_outputs
        .iter()
        .map(|o| o.tool_call_id.clone())
        .collect();
    let unique: HashSet<&String> = got.iter().collect();
    let answers_all = unique.len() == got.len()
        && got.len() == expected.len()
        && expected.iter().all(|id| unique.contains(id));
    if !answers_all {
        return Err(FieldError::new(
            "tool_outputs",
            format!(
                "Expected tool outputs for call_ids {}, got {}",
                quoted_list(&expected),
                quoted_list(&got)
            ),
        )
        .into());
    }
    let requests = pending.approval_requests;
    let answers: Vec<(String, bool, Option<String>)> = submission
        .tool_approvals
        .iter()
        .map(|a| (a.approval_request_id.clone(), a.approve, a.reason.clone()))
        .collect();
    let decisions = decisions(&requests, &answers).map_err(|got| {
        let expected: Vec<String> = requests.iter().map(|r| r.id.clone()).collect();
        EngineError::from(FieldError::new(
            "tool_approvals",
            format!(
                "Expected tool approvals for approval_request_ids {}, got {}",
                quoted_list(&expected),
                quoted_list(&got)
            ),
        ))
    })?;
    // The outputs become input items of the run, in the order of its calls.
    let mut outputs: Vec<Item> = pending
        .tool_calls
        .iter()
        .filter_map(|call| {
            let output = submission
                .tool_outputs
                .iter()
                .find(|o| o.tool_call_id == call.id)?
                .output
                .clone();
            Some(output_item(&call.id, call.kind, output))
        })
        .collect();
    outputs.extend(decisions.iter().map(|d| {
        Item::McpApprovalResponse(McpApprovalResponse {
            id: String::new(),
            approval_request_id: d.request.id.clone(),
            approve: d.approve,
            reason: d.reason.clone(),
            status: None,
        })
    }));
    for item in &mut outputs {
        item.normalise();
    }
    Ok((outputs, decisions))
}

/// The input item answering a call of the given `required_action` type.
fn output_item(call_id: &str, kind: CallKind, output: ToolOutput) -> Item {
    let output = CallOutput {
        id: String::new(),
        call_id: call_id.to_string(),
        output,
        status: None,
    };
    match kind {
        CallKind::Custom => Item::CustomToolCallOutput(output),
        CallKind::LocalShell => Item::LocalShellCallOutput(output),
        CallKind::Function => Item::FunctionCallOutput(FunctionCallOutput {
            id: output.id,
            call_id: output.call_id,
            output: output.output,
            status: None,
        }),
    }
}

/// The approval requests a paused run waits for.
pub(super) fn pending_approvals(body: &ResponseObject) -> Vec<PendingApproval> {
    pending_work(body).approval_requests
}

/// The answers in `answers` (approval request id, approve, reason) for every pending request;
/// each must be answered exactly once.
fn decisions(
    pending: &[PendingApproval],
    answers: &[(String, bool, Option<String>)],
) -> Result<Vec<Decision>, Vec<String>> {
    let expected: HashSet<&str> = pending.iter().map(|r| r.id.as_str()).collect();
    let given: Vec<&str> = answers.iter().map(|(id, _, _)| id.as_str()).collect();
    let unique: HashSet<&str> = given.iter().copied().collect();
    if unique.len() != given.len() || unique != expected {
        return Err(given.iter().map(|s| s.to_string()).collect());
    }
    Ok(pending
        .iter()
        .filter_map(|request| {
            let (_, approve, reason) = answers.iter().find(|(id, _, _)| *id == request.id)?;
            Some(Decision {
                request: request.clone(),
                approve: *approve,
                reason: reason.clone(),
            })
        })
        .collect())
}
