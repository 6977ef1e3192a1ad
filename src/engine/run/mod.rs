//! One run's execution: model turns streamed into output items and events (`turn.rs`,
//! `output.rs`), server tool calls executed concurrently and presented one item at a time
//! (`present.rs`), until the run ends — through [`Ending`], stored with its closing events
//! before anyone sees them.

mod output;
mod present;
mod turn;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::control::{RunControl, StopReason};
use super::executor::{ServerCall, TurnCalls};
use super::hub::{Inserted, LiveChannel};
use super::lifecycle::{Ending, Failure, StoredEnd, end_stored};
use super::toolset::{Executor, Listing, ToolSet};
use super::usage::UsageMeter;
use super::{RunEnd, RunOutcome};
use crate::config::ToolErrorPolicy;
use crate::llm::{FinishReason, LlmClient, LlmError, ModelRequest};
use crate::protocol::events::{EventRecord, Lifecycle};
use crate::protocol::ids;
use crate::protocol::items::Item;
use crate::protocol::request::CreateResponse;
use crate::protocol::response::{PendingApproval, PendingCall, PendingWork, Usage};
use crate::protocol::transcript::Entry;
use crate::store::{Change, RunEnding, RunState, RunStore, StoreError, Transition};
use crate::time::UnixMillis;
use crate::tools::{ToolContext, ToolErrorKind};
pub(super) use output::{Output, Sealing};

/// The model parameters a run uses on every turn (tools are added from its tool set).
pub(super) fn model_request(model: &str, request: &CreateResponse) -> ModelRequest {
    ModelRequest {
        model: model.to_string(),
        instructions: request.instructions.clone(),
        items: Vec::new(),
        tools: Vec::new(),
        renamed: HashMap::new(),
        tool_choice: None,
        parallel_tool_calls: request.parallel_tool_calls,
        temperature: request.temperature,
        top_p: request.top_p,
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        max_output_tokens: request.max_output_tokens,
        // Validated before the run starts, so this cannot fail here.
        response_format: request.text_format().ok().flatten(),
        reasoning_effort: request
            .reasoning
            .as_ref()
            .and_then(|r| r.get("effort"))
            .and_then(|e| e.as_str())
            .map(str::to_string),
        user: request
            .user
            .clone()
            .or_else(|| request.safety_identifier.clone()),
    }
}

/// Limits and policies a run works under.
#[derive(Clone, Debug)]
pub(super) struct RunLimits {
    pub max_turns: u32,
    pub max_concurrency: usize,
    pub on_error: ToolErrorPolicy,
    pub max_tool_calls: Option<u64>,
    pub parallel_tool_calls: bool,
    /// How long a paused run waits for the client.
    pub pause_ttl: Duration,
    /// A server tool's output beyond this is cut.
    pub max_output_bytes: usize,
}

/// The model and what it is shown besides the run's own output.
pub(super) struct Model {
    pub client: Arc<dyn LlmClient>,
    pub request: ModelRequest,
    /// Earlier items of the chain and this run's input.
    pub context: Vec<Entry>,
    /// Summed over every model turn of the run (its earlier activations included).
    pub usage: Usage,
    /// What its earlier activations used (before a pause).
    pub prior: Usage,
}

/// The tools a run may call and the limits it works under.
pub(super) struct Tools {
    pub set: ToolSet,
    pub limits: RunLimits,
    /// Server calls made so far, for `max_tool_calls`.
    pub calls_used: u64,
    /// A call the model wrote in its text could not be read and the model was asked again
    /// (once per execution; the next unreadable one stays text).
    pub turned_back: bool,
}

/// What the run will wait for if it pauses, and the answers it resumes with.
#[derive(Default)]
pub(super) struct Waits {
    pub calls: Vec<PendingCall>,
    pub approvals: Vec<PendingApproval>,
    /// The client's answers to earlier approval requests, acted on before the next turn.
    pub decisions: Vec<Decision>,
}

/// Where the run executes: its store, this instance as the holder of its lease, its live
/// channel and its stop signal.
pub(super) struct Place {
    pub store: Arc<dyn RunStore>,
    pub tenant_id: String,
    pub holder: String,
    /// Closed when this execution ends.
    pub live: LiveChannel,
    pub control: Arc<RunControl>,
    /// The API key that created the run, whose usage it adds to.
    pub key_id: Option<String>,
    pub usage: Arc<UsageMeter>,
}

/// How the run starts.
pub(super) struct Start {
    /// Continuing (after a pause, a claim, a takeover): the log goes on from
    /// `response.in_progress`.
    pub resumed: bool,
    /// Tool servers to announce with `mcp_list_tools` (first use in the chain).
    pub listings: Vec<Listing>,
    /// A new run whose insert is still being committed.
    pub admission: Option<Admission>,
    /// When this execution began, until the model streams its first text or call.
    pub awaiting_first_token: Option<Instant>,
    /// The body's JSON text as a new run's insert stored it (its first events carry it).
    pub body_json: Option<Arc<str>>,
}

pub(super) struct RunTask {
    pub out: Output,
    pub model: Model,
    pub tools: Tools,
    pub waits: Waits,
    pub place: Place,
    pub start: Start,
    pub done: Option<oneshot::Sender<RunOutcome>>,
}

/// A new run's insert, queued with the event writer: the run starts before it is committed
/// (its first model request does not wait for the commit), and learns the outcome before its
/// first model turn shows anything or it ends. Its events follow the insert in the writer's
/// queue, so none is published before the run is stored.
pub(super) struct Admission {
    pub inserted: Inserted,
    /// Tells the creating request.
    pub report: oneshot::Sender<Result<(), StoreError>>,
}

impl Admission {
    /// Waits for the insert (nothing to wait for without one); false when the run is not
    /// stored and must stop without a trace.
    async fn settle(admission: Option<Admission>) -> bool {
        let Some(admission) = admission else {
            return true;
        };
        let result = admission.inserted.await;
        let stored = result.is_ok();
        // The request may have gone away: the run is stored and goes on all the same.
        let _ = admission.report.send(result);
        stored
    }
}

/// The client's answer to an approval request.
#[derive(Clone, Debug)]
pub struct Decision {
    pub request: PendingApproval,
    pub approve: bool,
    pub reason: Option<String>,
}

impl RunTask {
    /// Runs the run to its end. Boxed: an async fn keeps its arguments twice (as passed,
    /// and moved into its body), and this state is held by every open run.
    pub async fn execute(mut self: Box<Self>) {
        let started = Instant::now();
        self.start.awaiting_first_token = Some(started);
        tracing::info!(model = %self.out.body.model, resumed = self.start.resumed, "run started");
        crate::metrics::run_started(self.start.resumed);
        // The events carry the body: a new run's as its insert serialised it, a resumed run's
        // (only `response.in_progress`) serialised here.
        let json = match self.start.body_json.take() {
            Some(json) => Some(json),
            None => serde_json::to_string(&self.out.body).ok().map(Arc::from),
        };
        let (emitter, body, json) = (&mut self.out.emitter, &self.out.body, json.as_deref());
        if !self.start.resumed {
            emitter.emit_lifecycle(Lifecycle::Created, body, json).await;
        }
        emitter
            .emit_lifecycle(Lifecycle::InProgress, body, json)
            .await;
        for listing in std::mem::take(&mut self.start.listings) {
            Box::pin(self.out.list_tools(listing)).await;
        }

        let ending = self.turns().await;
        self.out.body.usage = Some(self.model.usage.clone());
        let ending = Box::pin(self.finish(ending)).await;

        self.place.live.close().await;
        let used = self.model.usage.minus(&self.model.prior);
        if let Some(key_id) = &self.place.key_id {
            let place = &self.place;
            place
                .usage
                .add(&place.tenant_id, key_id, &self.out.body.model, &used);
        }
        let stopped = !matches!(
            ending,
            Ending::Lost | Ending::HandedOver | Ending::Paused { .. }
        );
        // An unstored run is kept while it waits for the client, and deleted once it stops.
        if stopped && !self.out.body.store {
            let (store, tenant) = (&self.place.store, &self.place.tenant_id);
            if let Err(e) = store.delete_run(tenant, &self.out.body.id).await {
                tracing::warn!(error = %e, "cannot delete an unstored run");
            }
        }
        let took = started.elapsed();
        tracing::info!(
            ending = ending.name(),
            elapsed_ms = took.as_millis() as u64,
            input_tokens = used.input_tokens,
            output_tokens = used.output_tokens,
            "run stopped"
        );
        crate::metrics::run_finished(ending.name(), took);
        crate::metrics::tokens(&self.out.body.model, used.input_tokens, used.output_tokens);
        let end = match ending {
            Ending::Lost | Ending::HandedOver => RunEnd::ContinuesElsewhere,
            ending => ending
                .upstream()
                .map_or(RunEnd::Stopped, RunEnd::UpstreamFailed),
        };
        if let Some(done) = self.done.take() {
            let _ = done.send(RunOutcome {
                response: self.out.body,
                end,
            });
        }
    }

    /// Model turns until the model answers without server tools, or a limit is reached.
    ///
    /// While a run waits for the model, its task holds this future's biggest state: steps
    /// taken once per turn or item are boxed (`Box::pin`) so that the state of every open
    /// run stays small; per-event steps are not (an allocation per event would cost more).
    async fn turns(&mut self) -> Ending {
        if let Err(ending) = Box::pin(self.resolve_approvals()).await {
            return ending;
        }
        let max_turns = self.tools.limits.max_turns.max(1);
        // Results of server calls not saved yet: saved while the next turn's request goes out.
        let mut unsaved = false;
        for number in 1..=max_turns {
            let span = crate::telemetry::turn_span(&self.model.request.model);
            let turn = self.model_turn(std::mem::take(&mut unsaved));
            let turn = match tracing::Instrument::instrument(turn, span).await {
                Ok(turn) => turn,
                Err(ending) => return ending,
            };
            let presented = match Box::pin(self.present(turn.calls, turn.deferred)).await {
                Ok(presented) => presented,
                Err(ending) => return ending,
            };
            self.out.transcript.push(Entry::TurnEnd);
            // Server calls ran: their results are saved with the next turn's request (nothing
            // the model does has effects before its calls are saved). Any other way on ends the
            // run, and the ending saves everything.
            unsaved = !presented.is_empty();
            if self.tools.limits.on_error == ToolErrorPolicy::Fail
                && let Some(failed) = presented
                    .iter()
                    .find(|p| p.result.is_error() && p.result.error != Some(ToolErrorKind::Refused))
            {
                return Ending::Failed(Failure::Tool(format!(
                    "The tool '{}' failed: {}",
                    failed.call.name, failed.result.text
                )));
            }
            match turn.finish {
                Some(FinishReason::Length) => return Ending::Incomplete("max_output_tokens"),
                Some(FinishReason::ContentFilter) => return Ending::Incomplete("content_filter"),
                _ => {}
            }
            if !self.waits.calls.is_empty() || !self.waits.approvals.is_empty() {
                // The client executes its calls; the run waits for their outputs.
                return Ending::Paused {
                    deadline: UnixMillis::now().plus(self.tools.limits.pause_ttl),
                    work: PendingWork {
                        tool_calls: std::mem::take(&mut self.waits.calls),
                        approval_requests: std::mem::take(&mut self.waits.approvals),
                    },
                };
            }
            if let Some(direct) = presented
                .iter()
                .find(|p| p.call.options.return_direct && !p.result.is_error())
            {
                let deltas = if direct.chunks.is_empty() {
                    vec![direct.result.text.clone()]
                } else {
                    direct.chunks.clone()
                };
                Box::pin(self.out.text_message(deltas)).await;
                return Ending::Completed;
            }
            if presented.is_empty() {
                return Ending::Completed;
            }
            if number == max_turns {
                break;
            }
        }
        Ending::Incomplete("max_turns")
    }

    /// Acts on the client's approval answers: approved calls execute now (once: an answer is
    /// only taken while the run waits for it), denied ones become results saying so.
    async fn resolve_approvals(&mut self) -> Result<(), Ending> {
        let decisions = std::mem::take(&mut self.waits.decisions);
        if decisions.is_empty() {
            return Ok(());
        }
        // Approved calls have effects: only for a stored run.
        if !Admission::settle(self.start.admission.take()).await {
            return Err(Ending::Lost);
        }
        let limits = &self.tools.limits;
        let mut calls = TurnCalls::new(limits.max_concurrency, limits.max_output_bytes);
        for decision in decisions {
            let request = &decision.request;
            let entry = self
                .tools
                .set
                .find(&request.server_label, &request.name)
                .cloned();
            let call = ServerCall {
                name: decision.request.name.clone(),
                server_label: decision.request.server_label.clone(),
                arguments: decision.request.arguments.clone(),
                options: match entry.as_ref().map(|e| &e.executor) {
                    Some(Executor::Server(tool)) => tool.options.clone(),
                    _ => Default::default(),
                },
                approval_request_id: Some(decision.request.id.clone()),
                item_id: ids::new(ids::MCP_CALL),
            };
            match (decision.approve, entry.map(|e| e.executor)) {
                (true, Some(Executor::Server(tool))) => {
                    self.tools.calls_used += 1;
                    let context = self.tool_context(decision.request.id.clone());
                    calls.start(call, tool, context);
                }
                (true, _) => {
                    let reason = format!("The tool '{}' is no longer available.", call.name);
                    calls.refuse(call, reason);
                }
                (false, _) => {
                    let reason = match decision.reason.as_deref() {
                        Some(reason) if !reason.is_empty() => {
                            format!("The user denied this call: {reason}")
                        }
                        _ => "The user denied this call.".to_string(),
                    };
                    calls.refuse(call, reason);
                }
            }
        }
        self.present(calls, Vec::new()).await?;
        self.out.transcript.push(Entry::TurnEnd);
        Ok(())
    }

    /// What a tool call of this run is given.
    fn tool_context(&self, call_id: String) -> ToolContext {
        ToolContext {
            response_id: self.out.body.id.clone(),
            call_id,
            tenant_id: self.place.tenant_id.clone(),
            cancel: self.place.control.token().child_token(),
        }
    }

    /// Saves the run's progress: its transcript, and the server calls of `calls` dispatched
    /// so far (as in-progress `mcp_call` items). `false` when the run is no longer this
    /// instance's to execute; a cancel requested through another instance stops it.
    async fn checkpoint(&self, calls: Option<&TurnCalls>) -> bool {
        let mut transcript = self.out.transcript.clone();
        for call in calls.map(|c| c.calls.as_slice()).unwrap_or_default() {
            transcript.push(Entry::Item(Item::McpCall(output::running_item(call))));
        }
        let place = &self.place;
        let body = &self.out.body;
        let saved = place
            .store
            .checkpoint(
                &body.id,
                &place.holder,
                body,
                &transcript,
                UnixMillis::now(),
            )
            .await;
        match saved {
            Ok(saved) => {
                if saved.cancel_requested {
                    place.control.stop(StopReason::Cancel);
                }
                true
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => {
                tracing::warn!("the run is executed elsewhere now; stopping here");
                place.control.stop(StopReason::Lost);
                false
            }
            // A passing database fault: the next checkpoint may succeed.
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed");
                true
            }
        }
    }

    /// Why the run stopped early.
    fn stop_ending(&self) -> Ending {
        match self.place.control.reason() {
            Some(StopReason::Cancel) => Ending::Cancelled,
            Some(StopReason::HandOver | StopReason::Unstored) => Ending::HandedOver,
            Some(StopReason::Refused) => Ending::Abandoned(UNSTORABLE.into()),
            Some(StopReason::Lost) | None => Ending::Lost,
        }
    }

    /// Ends the run: its final state (or pause) and its closing events are stored together in
    /// the event writer's group commit, after everything it emitted; only then does anyone
    /// see them. Returns the ending as it went.
    async fn finish(&mut self, ending: Ending) -> Ending {
        // A run that ends before its first model turn learns here whether it is stored.
        if !Admission::settle(self.start.admission.take()).await {
            return Ending::Lost;
        }
        // What the event writer could not store decides, whatever the run was doing.
        let ending = match self.place.control.reason() {
            Some(StopReason::Lost | StopReason::Refused | StopReason::Unstored) => {
                self.stop_ending()
            }
            _ => ending,
        };
        match ending {
            Ending::Lost => return Ending::Lost,
            Ending::HandedOver => return self.hand_over().await,
            Ending::Abandoned(_) if self.place.control.reason() == Some(StopReason::Refused) => {
                return self.abandon(ending).await;
            }
            _ => {}
        }
        let now = UnixMillis::now();
        let Some(conclusion) = ending.conclude(&mut self.out.body, now) else {
            return ending;
        };
        let Some(transition) = Transition::ending(conclusion.to) else {
            tracing::error!(
                to = conclusion.to.as_str(),
                "ending refused by the state table"
            );
            return ending;
        };
        if let Ending::Failed(failure) = &ending {
            let (shown, _) = failure.shown();
            let code = shown.code.unwrap_or_default();
            tracing::warn!(code, error = %shown.message, "run failed");
        }
        let mut events: Vec<EventRecord> = conclusion
            .events
            .iter()
            .map(|event| self.out.emitter.record(event))
            .collect();
        // The closing event and the row carry the same body: serialised once.
        let body_json = serde_json::to_string(&self.out.body).ok();
        let (kind, body) = (conclusion.closing, &self.out.body);
        let closing = self
            .out
            .emitter
            .record_lifecycle(kind, body, body_json.as_deref());
        events.push(closing);
        let run_ending = RunEnding {
            id: self.out.body.id.clone(),
            tenant_id: self.place.tenant_id.clone(),
            transition,
            body: self.out.body.clone(),
            body_json,
            // The run's last use of its transcript.
            transcript: std::mem::take(&mut self.out.transcript),
            expires_at: conclusion.expires_at,
            now,
            events,
        };
        match self.out.emitter.end_run(run_ending).await {
            Ok(()) => ending,
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => {
                tracing::warn!("the run is executed elsewhere now; stopping here");
                Ending::Lost
            }
            Err(e) => match self.place.control.reason() {
                Some(StopReason::Lost) => Ending::Lost,
                Some(StopReason::Refused) => {
                    self.abandon(Ending::Abandoned(UNSTORABLE.into())).await
                }
                _ => {
                    tracing::error!(error = %e, "cannot store the run's ending; handing it over");
                    self.hand_over().await
                }
            },
        }
    }

    /// Lets go of the run once its events are stored: its lease is released, and another
    /// instance (or this one's next sweep, or after a restart) takes it over from what is
    /// stored.
    async fn hand_over(&mut self) -> Ending {
        if let Err(e) = self.out.emitter.flush().await {
            tracing::warn!(error = %e, "events of a run handed over were not all stored");
        }
        let place = &self.place;
        let change = Change::new(&self.out.body.id, Transition::HAND_OVER, &place.holder);
        match place.store.transition(&change).await {
            Ok(_) => tracing::info!("handed the run over"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand the run over; its lease runs out instead")
            }
        }
        Ending::HandedOver
    }

    /// Fails the run in the store, after the last event stored: its events could not be.
    async fn abandon(&mut self, ending: Ending) -> Ending {
        let place = &self.place;
        let run = StoredEnd {
            tenant_id: &place.tenant_id,
            from: RunState::InProgress,
            body: &mut self.out.body,
            transcript: None,
        };
        match end_stored(&*place.store, &place.holder, run, &ending).await {
            Ok(()) => {
                tracing::error!("failed a run whose progress could not be stored");
                ending
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot fail a run whose progress could not be stored");
                Ending::Lost
            }
        }
    }
}

/// Why a run whose events the database refused was failed.
const UNSTORABLE: &str = "The run stopped: its progress could not be stored.";

fn upstream_ending(error: LlmError) -> Ending {
    // The upstream's own words, for the operator: keys it may quote hidden all the same.
    let said = crate::redact::secrets_in(&error.to_string());
    tracing::warn!(code = error.code(), error = %said, "the upstream model failed");
    Ending::Failed(Failure::Upstream(error.into()))
}
