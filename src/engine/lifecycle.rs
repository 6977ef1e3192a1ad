//! How a run ends: the one place that maps each ending to its run state, its wire status and
//! body fields, and its closing events. Whoever ends a run — its own task, a client's cancel
//! or continuation, the expiry sweep, the service failing a run it cannot finish — goes
//! through [`Ending::conclude`], and the state and the closing events commit together.

use std::sync::Arc;

use super::emitter::{record, record_lifecycle};
use super::error::UpstreamFailure;
use crate::protocol::events::{ErrorDetail, Event, EventRecord, Lifecycle};
use crate::protocol::items::{Item, ItemStatus};
use crate::protocol::response::{
    IncompleteDetails, PendingWork, RequiredAction, ResponseError, ResponseObject, ResponseStatus,
};
use crate::protocol::transcript::Entry;
use crate::store::{Change, RunState, RunStore, StoreError, Transition};
use crate::time::UnixMillis;

/// How a run stops, or pauses.
#[derive(Debug)]
pub(crate) enum Ending {
    Completed,
    /// The client must answer the pending calls and approval requests by `deadline`.
    Paused {
        deadline: UnixMillis,
        work: PendingWork,
    },
    /// A client cancelled it.
    Cancelled,
    /// A paused run was not answered in time.
    Expired,
    /// It stopped short: `max_output_tokens`, `max_turns`, a content filter.
    Incomplete(&'static str),
    /// Its model or a tool failed it.
    Failed(Failure),
    /// The service gave it up: nobody can finish it (its task panicked, its data could not
    /// be stored, the model or tools it needs are gone).
    Abandoned(String),
    /// Another instance holds it now: this one writes nothing more.
    Lost,
    /// This instance lets go of it at a safe point (it is stopping); another instance, or
    /// this one after a restart, continues it.
    HandedOver,
}

/// What failed a run.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The upstream model, as a client sees that.
    Upstream(UpstreamFailure),
    /// A tool, with `tools.on_error = "fail"` (code `tool_error`).
    Tool(String),
}

impl Failure {
    /// What the `error` event says, and `response.error.code` (the standard's closed set).
    pub fn shown(&self) -> (ErrorDetail, &'static str) {
        match self {
            Failure::Upstream(failure) => (failure.detail(), failure.response_code()),
            Failure::Tool(message) => (server_error("tool_error", message), "server_error"),
        }
    }
}

/// What an ending does to the stored run.
#[derive(Debug)]
pub(crate) struct Conclusion {
    pub to: RunState,
    /// Until when a paused run waits.
    pub expires_at: Option<UnixMillis>,
    /// The events before the closing one (an `error`), in order.
    pub events: Vec<Event>,
    /// The closing event, carrying the body as concluded.
    pub closing: Lifecycle,
}

impl Ending {
    /// How the run stopped here, as logs and metrics name it.
    pub fn name(&self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Paused { .. } => "paused",
            Ending::Cancelled => "cancelled",
            Ending::Expired => "expired",
            Ending::Incomplete(_) => "incomplete",
            Ending::Failed(_) => "failed",
            Ending::Abandoned(_) => "abandoned",
            Ending::Lost => "lost",
            Ending::HandedOver => "handed_over",
        }
    }

    /// Applies the ending to the run's body (its status and the fields that go with it; items
    /// still open are closed `incomplete`) and says how the run ends. `None` for an ending
    /// that leaves the run's state alone (lost, handed over).
    pub fn conclude(&self, body: &mut ResponseObject, now: UnixMillis) -> Option<Conclusion> {
        let (to, status) = match self {
            Ending::Lost | Ending::HandedOver => return None,
            Ending::Completed => (RunState::Completed, ResponseStatus::Completed),
            // The model's turn is complete; the client must act (SPEC §3).
            Ending::Paused { .. } => (RunState::RequiresAction, ResponseStatus::Completed),
            Ending::Cancelled => (RunState::Cancelled, ResponseStatus::Cancelled),
            Ending::Expired => (RunState::Expired, ResponseStatus::Incomplete),
            Ending::Incomplete(_) => (RunState::Incomplete, ResponseStatus::Incomplete),
            Ending::Failed(_) | Ending::Abandoned(_) => (RunState::Failed, ResponseStatus::Failed),
        };
        for item in &mut body.output {
            close_incomplete(item);
        }
        body.status = status;
        // Whatever an ending says is set here afresh (an ending that could not be stored may
        // be followed by another).
        body.required_action = None;
        body.incomplete_details = None;
        body.error = None;
        body.completed_at =
            matches!(to, RunState::Completed | RunState::RequiresAction).then(|| now.as_secs());
        let mut events = Vec::new();
        let mut expires_at = None;
        match self {
            Ending::Paused { deadline, work } => {
                expires_at = Some(*deadline);
                body.required_action = Some(RequiredAction::new(deadline.as_secs(), work.clone()));
            }
            Ending::Expired => body.incomplete_details = Some(incomplete("tool_outputs_expired")),
            Ending::Incomplete(reason) => body.incomplete_details = Some(incomplete(reason)),
            Ending::Failed(failure) => {
                let (detail, code) = failure.shown();
                body.error = Some(ResponseError {
                    code: code.into(),
                    message: detail.message.clone(),
                });
                events.push(error_event(detail));
            }
            Ending::Abandoned(message) => {
                events.push(error_event(server_error("server_error", message)));
                body.error = Some(ResponseError {
                    code: "server_error".into(),
                    message: message.clone(),
                });
            }
            _ => {}
        }
        let closing = match to {
            RunState::Completed | RunState::RequiresAction => Lifecycle::Completed,
            RunState::Incomplete | RunState::Expired => Lifecycle::Incomplete,
            // The standard has no cancelled event: `response.failed` with status cancelled.
            _ => Lifecycle::Failed,
        };
        Some(Conclusion {
            to,
            expires_at,
            events,
            closing,
        })
    }

    /// The upstream failure that ended the run, if that is how it ended.
    pub fn upstream(self) -> Option<UpstreamFailure> {
        match self {
            Ending::Failed(Failure::Upstream(failure)) => Some(failure),
            _ => None,
        }
    }
}

fn incomplete(reason: &str) -> IncompleteDetails {
    IncompleteDetails {
        reason: reason.into(),
    }
}

/// Marks an item that was still open as `incomplete`.
pub(crate) fn close_incomplete(item: &mut Item) {
    let status = item.status_mut();
    if *status == Some(ItemStatus::InProgress) {
        *status = Some(ItemStatus::Incomplete);
    }
}

/// The `error` stream event, with its fields flat and nested (SPEC §7 E).
fn error_event(error: ErrorDetail) -> Event {
    Event::Error {
        code: error.code.clone(),
        message: error.message.clone(),
        param: error.param.clone(),
        error,
    }
}

/// A failure of the service's side, with its detailed code.
fn server_error(code: &str, message: &str) -> ErrorDetail {
    ErrorDetail {
        kind: "server_error".into(),
        code: Some(code.to_string()),
        message: message.to_string(),
        param: None,
    }
}

/// A stored run to end outside its task.
pub(crate) struct StoredEnd<'a> {
    pub tenant_id: &'a str,
    /// The state it was found in: `queued` or `requires_action` (held by nobody), or
    /// `in_progress` held by the caller.
    pub from: RunState,
    pub body: &'a mut ResponseObject,
    /// Its transcript from now on (`None`: as stored).
    pub transcript: Option<&'a [Entry]>,
}

/// Ends a run in the store: the compare-and-set to its final state and its closing events,
/// numbered after the log's last, in one transaction. `Conflict` when it moved on meanwhile
/// (or is not the caller's to end).
pub(crate) async fn end_stored(
    store: &dyn RunStore,
    caller: &str,
    run: StoredEnd<'_>,
    ending: &Ending,
) -> Result<(), StoreError> {
    let now = UnixMillis::now();
    let id = run.body.id.clone();
    let Some(conclusion) = ending.conclude(run.body, now) else {
        return Ok(());
    };
    let transition = match run.from {
        RunState::InProgress => Transition::ending(conclusion.to),
        from => Transition::unheld(from, conclusion.to),
    }
    .ok_or(StoreError::Conflict { actual: run.from })?;
    let (response_id, tenant_id): (Arc<str>, Arc<str>) =
        (Arc::from(id.as_str()), Arc::from(run.tenant_id));
    let events = &conclusion.events;
    let body: &ResponseObject = run.body;
    // The closing event and the row carry the same body: serialised once.
    let text = serde_json::to_string(body).ok();
    let json = text.as_deref();
    let closing = move |next: u64| -> Vec<EventRecord> {
        let mut records: Vec<EventRecord> = (next..)
            .zip(events)
            .map(|(n, event)| record(event, &response_id, &tenant_id, n))
            .collect();
        let n = next + records.len() as u64;
        let kind = conclusion.closing;
        records.push(record_lifecycle(
            kind,
            body,
            json,
            &response_id,
            &tenant_id,
            n,
        ));
        records
    };
    let change = Change {
        body: Some(body),
        body_json: json,
        transcript: run.transcript,
        expires_at: conclusion.expires_at,
        closing: Some(&closing),
        now,
        ..Change::new(&id, transition, caller)
    };
    store.transition(&change).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> ResponseObject {
        serde_json::from_value(serde_json::json!({
            "id": "resp_1", "object": "response", "created_at": 1, "completed_at": null,
            "status": "in_progress", "error": null, "incomplete_details": null,
            "instructions": null, "model": "m", "output": [
                {"type": "message", "id": "msg_1", "role": "assistant", "content": [],
                 "status": "in_progress"}],
            "parallel_tool_calls": true, "previous_response_id": null, "tools": [],
            "tool_choice": "auto", "truncation": "disabled", "text": {}, "reasoning": {},
            "temperature": null, "top_p": null, "presence_penalty": null,
            "frequency_penalty": null, "top_logprobs": 0, "max_output_tokens": null,
            "max_tool_calls": null, "store": true, "background": false, "service_tier": null,
            "metadata": {}, "safety_identifier": null, "prompt_cache_key": null, "user": null,
            "usage": null, "required_action": null
        }))
        .unwrap()
    }

    /// The state, wire status and closing event types an ending leads to.
    type Expected = Option<(RunState, &'static str, Vec<&'static str>)>;

    #[test]
    fn each_ending_has_one_state_one_status_and_its_closing_events() {
        let now = UnixMillis::from_millis(5_000);
        let cases: Vec<(Ending, Expected)> = vec![
            (
                Ending::Completed,
                Some((RunState::Completed, "completed", vec!["response.completed"])),
            ),
            (
                Ending::Paused {
                    deadline: UnixMillis::from_millis(9_000),
                    work: PendingWork::default(),
                },
                Some((
                    RunState::RequiresAction,
                    "completed",
                    vec!["response.completed"],
                )),
            ),
            (
                Ending::Cancelled,
                Some((RunState::Cancelled, "cancelled", vec!["response.failed"])),
            ),
            (
                Ending::Expired,
                Some((RunState::Expired, "incomplete", vec!["response.incomplete"])),
            ),
            (
                Ending::Incomplete("max_turns"),
                Some((
                    RunState::Incomplete,
                    "incomplete",
                    vec!["response.incomplete"],
                )),
            ),
            (
                Ending::Failed(Failure::Tool("boom".into())),
                Some((RunState::Failed, "failed", vec!["error", "response.failed"])),
            ),
            (
                Ending::Abandoned("gone".into()),
                Some((RunState::Failed, "failed", vec!["error", "response.failed"])),
            ),
            (Ending::Lost, None),
            (Ending::HandedOver, None),
        ];
        for (ending, expected) in cases {
            let mut body = body();
            let concluded = ending.conclude(&mut body, now);
            let Some((state, status, events)) = expected else {
                assert!(concluded.is_none(), "{ending:?}");
                assert_eq!(body, self::body(), "{ending:?} leaves the body alone");
                continue;
            };
            let concluded = concluded.unwrap();
            assert_eq!(concluded.to, state, "{ending:?}");
            let wire = serde_json::to_value(body.status).unwrap();
            assert_eq!(wire, status, "{ending:?}");
            let mut kinds: Vec<&str> = concluded.events.iter().map(Event::kind).collect();
            kinds.push(concluded.closing.kind());
            assert_eq!(kinds, events, "{ending:?}");
            assert_eq!(
                body.output[0].clone().status_mut().clone(),
                Some(ItemStatus::Incomplete)
            );
            assert_eq!(
                body.required_action.is_some(),
                state == RunState::RequiresAction
            );
            assert_eq!(
                body.completed_at.is_some(),
                matches!(state, RunState::Completed | RunState::RequiresAction)
            );
            // Only the final ending of a run says so to its readers.
            assert_eq!(
                concluded.closing.ends_run(&body),
                state != RunState::RequiresAction,
                "{ending:?}"
            );
            assert!(
                crate::store::state::allowed(RunState::InProgress, state)
                    || state == RunState::Expired
            );
        }
    }
}
