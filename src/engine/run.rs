//! One run's execution: model turns streamed into output items and events, server tool calls
//! executed concurrently and presented one item at a time, then the final state stored before
//! the terminal event is sent.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::emitter::EventEmitter;
use super::executor::{CallEvent, ServerCall, TurnCalls};
use super::hub::{Inserted, LiveChannel};
use super::toolset::{Executor, ToolSet};
use super::{RunOutcome, close_incomplete, now_ms};
use crate::config::ToolErrorPolicy;
use crate::llm::{FinishReason, LlmClient, LlmError, ModelEvent, ModelRequest};
use crate::protocol::events::{ErrorDetail, Event};
use crate::protocol::ids;
use crate::protocol::items::{
    ContentPart, CustomToolCall, FunctionCall, Item, ItemStatus, LocalShellCall,
    McpApprovalRequest, McpCall, McpListTools, McpToolInfo, Message, OutputText, Role, ShellAction,
};
use crate::protocol::request::CreateResponse;
use crate::protocol::response::{
    CallKind, IncompleteDetails, PendingApproval, PendingCall, PendingFunction, PendingWork,
    RequiredAction, ResponseError, ResponseObject, ResponseStatus, Usage,
};
use crate::protocol::transcript::Entry;
use crate::store::{RunEnding, RunState, RunStore, StoreError};
use crate::tools::registry::RegisteredTool;
use crate::tools::{ToolContext, ToolErrorKind, ToolResult};

/// The model parameters a run uses on every turn (tools are added from its tool set).
pub(super) fn model_request(model: &str, request: &CreateResponse) -> ModelRequest {
    ModelRequest {
        model: model.to_string(),
        instructions: request.instructions.clone(),
        items: Vec::new(),
        tools: Vec::new(),
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

/// The `error` stream event, with its fields flat and nested (SPEC §7 E).
pub(super) fn error_event(code: &str, message: &str) -> Event {
    Event::Error {
        code: Some(code.to_string()),
        message: message.to_string(),
        param: None,
        error: ErrorDetail {
            kind: "server_error".into(),
            code: Some(code.to_string()),
            message: message.to_string(),
            param: None,
        },
    }
}

/// How a run stops (or pauses).
enum Ending {
    Completed,
    /// The client must answer the pending calls.
    RequiresAction,
    /// The client cancelled the run.
    Cancelled,
    /// Another instance took the run over (this one lost its lease): stop without a word,
    /// the run's state and log are the other instance's now.
    Lost,
    Incomplete(&'static str),
    Failed {
        code: &'static str,
        message: String,
        upstream: Option<LlmError>,
    },
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
    pub pause_ttl: std::time::Duration,
}

pub(super) struct RunTask {
    pub store: Arc<dyn RunStore>,
    /// The run's live channel, closed when this execution ends.
    pub live: LiveChannel,
    pub emitter: EventEmitter,
    pub client: Arc<dyn LlmClient>,
    pub request: ModelRequest,
    /// Earlier items of the chain and this run's input.
    pub context: Vec<Entry>,
    pub body: ResponseObject,
    /// What the model has seen of this run's output (hidden calls included).
    pub transcript: Vec<Entry>,
    pub tools: ToolSet,
    /// Tool servers to announce with `mcp_list_tools` (first use in the chain).
    pub listings: Vec<(String, Vec<McpToolInfo>)>,
    pub limits: RunLimits,
    pub tenant_id: String,
    pub stop: CancellationToken,
    pub done: Option<oneshot::Sender<RunOutcome>>,
    pub usage: Usage,
    pub tool_calls_used: u64,
    /// Set when the client cancelled (then `stop` is cancelled too).
    pub cancelled: Arc<AtomicBool>,
    /// Continuing after a pause: the log goes on from `response.in_progress`.
    pub resumed: bool,
    /// The client calls this run waits for, as `required_action` lists them.
    pub pending: Vec<PendingCall>,
    /// The approval requests it waits for, likewise.
    pub pending_approvals: Vec<PendingApproval>,
    /// The client's answers to earlier approval requests, acted on before the next turn.
    pub decisions: Vec<Decision>,
    /// This instance, as the holder of the run's lease.
    pub owner: String,
    /// Set when a checkpoint finds the run taken over (or stopped) elsewhere.
    pub lost: bool,
    /// A new run whose insert is still being committed.
    pub admission: Option<Admission>,
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

/// The assistant message being streamed.
struct OpenMessage {
    output_index: usize,
    item_id: String,
    text: String,
}

/// A tool call while the model streams it.
struct StreamingCall {
    call_id: String,
    name: String,
    arguments: String,
    /// A client call streams live as a `function_call` item: its output index and item id.
    live: Option<(usize, String)>,
}

/// What a model turn produced.
struct Turn {
    finish: Option<FinishReason>,
    /// Client calls emitted this turn (the run pauses for them).
    client_calls: usize,
    /// Approval requests emitted this turn (the run pauses for them too).
    approvals: usize,
    /// Calls accepted this turn, for `parallel_tool_calls: false`.
    accepted: usize,
    calls: TurnCalls,
    /// Server calls dispatched but not started: they start once recorded (`start_saved`).
    starting: Vec<(usize, Arc<RegisteredTool>, ToolContext)>,
    /// A start of this turn was saved: every later start is saved too, so that a crash
    /// finds the turn either not recorded (asked again) or with every call it started.
    recorded: bool,
}

/// A server call once it has its result.
struct Presented {
    call: ServerCall,
    result: ToolResult,
    chunks: Vec<String>,
}

impl RunTask {
    /// Runs the run to its end. Boxed: an async fn keeps its arguments twice (as passed,
    /// and moved into its body), and this state is held by every open run.
    pub async fn execute(mut self: Box<Self>) {
        let id = self.body.id.clone();
        let started = std::time::Instant::now();
        tracing::info!(response_id = %id, model = %self.body.model, resumed = self.resumed, "run started");
        if !self.resumed {
            self.emitter
                .emit(Event::Created {
                    response: Box::new(self.body.clone()),
                })
                .await;
        }
        self.emitter
            .emit(Event::InProgress {
                response: Box::new(self.body.clone()),
            })
            .await;
        for (label, tools) in std::mem::take(&mut self.listings) {
            Box::pin(self.list_tools(label, tools)).await;
        }

        let ending = self.turns().await;
        self.body.usage = Some(self.usage.clone());
        let upstream = Box::pin(self.finish(ending)).await;

        self.live.close().await;
        // An unstored run is kept while it waits for the client, and deleted once it stops.
        if !self.body.store
            && !self.lost
            && self.body.required_action.is_none()
            && let Err(e) = self.store.delete_run(&self.tenant_id, &id).await
        {
            tracing::warn!(response_id = %id, error = %e, "cannot delete an unstored run");
        }
        tracing::info!(
            response_id = %id,
            status = ?self.body.status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "run stopped"
        );
        if let Some(done) = self.done.take() {
            let _ = done.send(RunOutcome {
                response: self.body,
                upstream_failure: upstream,
            });
        }
    }

    /// Acts on the client's approval answers: approved calls execute now (once: an answer is
    /// only taken while the run waits for it), denied ones become results saying so.
    async fn resolve_approvals(&mut self) -> Result<(), Ending> {
        let decisions = std::mem::take(&mut self.decisions);
        if decisions.is_empty() {
            return Ok(());
        }
        // Approved calls have effects: only for a stored run.
        if !Admission::settle(self.admission.take()).await {
            return Err(Ending::Lost);
        }
        let mut calls = TurnCalls::new(self.limits.max_concurrency);
        for decision in decisions {
            let entry = self.tools.get(&decision.request.name).cloned();
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
                    self.tool_calls_used += 1;
                    let context = ToolContext {
                        response_id: self.body.id.clone(),
                        call_id: decision.request.id.clone(),
                        tenant_id: self.tenant_id.clone(),
                        cancel: self.stop.child_token(),
                    };
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
        self.present(calls).await?;
        self.transcript.push(Entry::TurnEnd);
        Ok(())
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
        let max_turns = self.limits.max_turns.max(1);
        // Results of server calls not saved yet: saved while the next turn's request goes out.
        let mut unsaved = false;
        for turn in 1..=max_turns {
            let turn_result = match self.model_turn(std::mem::take(&mut unsaved)).await {
                Ok(turn) => turn,
                Err(ending) => return ending,
            };
            let presented = match Box::pin(self.present(turn_result.calls)).await {
                Ok(presented) => presented,
                Err(ending) => return ending,
            };
            self.transcript.push(Entry::TurnEnd);
            // Server calls ran: their results are saved with the next turn's request (nothing
            // the model does has effects before its calls are saved). Any other way on ends the
            // run, and the ending saves everything.
            unsaved = !presented.is_empty();
            if self.limits.on_error == ToolErrorPolicy::Fail
                && let Some(failed) = presented
                    .iter()
                    .find(|p| p.result.is_error() && p.result.error != Some(ToolErrorKind::Refused))
            {
                return Ending::Failed {
                    code: "tool_error",
                    message: format!(
                        "The tool '{}' failed: {}",
                        failed.call.name, failed.result.text
                    ),
                    upstream: None,
                };
            }
            match turn_result.finish {
                Some(FinishReason::Length) => return Ending::Incomplete("max_output_tokens"),
                Some(FinishReason::ContentFilter) => return Ending::Incomplete("content_filter"),
                _ => {}
            }
            if turn_result.client_calls > 0 || turn_result.approvals > 0 {
                // The client executes its calls; the run waits for their outputs.
                return Ending::RequiresAction;
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
                Box::pin(self.text_message(deltas)).await;
                return Ending::Completed;
            }
            if presented.is_empty() {
                return Ending::Completed;
            }
            if turn == max_turns {
                break;
            }
        }
        Ending::Incomplete("max_turns")
    }

    /// Streams one model turn: text and client calls live, server calls started as soon as
    /// their arguments are complete. With `save_first`, the run's progress is checkpointed
    /// while the request goes out.
    async fn model_turn(&mut self, save_first: bool) -> Result<Turn, Ending> {
        // In a block: the request is not kept for the rest of the turn.
        let (stored, stream) = {
            let mut request = self.request.clone();
            request.items = self.context.clone();
            request.items.extend(self.transcript.iter().cloned());
            let admission = self.admission.take();
            let started = async {
                tokio::select! {
                    _ = self.stop.cancelled() => None,
                    started = self.client.stream(&request) => Some(started),
                }
            };
            let saved = async { !save_first || self.checkpoint(None).await };
            let (stored, saved, started) =
                tokio::join!(Admission::settle(admission), saved, started);
            (stored && saved, started)
        };
        if !stored {
            return Err(Ending::Lost);
        }
        let mut stream = match stream {
            None => return Err(self.stop_ending()),
            Some(Ok(stream)) => stream,
            Some(Err(e)) => return Err(upstream_ending(e)),
        };
        let mut turn = Turn {
            finish: None,
            client_calls: 0,
            approvals: 0,
            accepted: 0,
            calls: TurnCalls::new(self.limits.max_concurrency),
            starting: Vec::new(),
            recorded: false,
        };
        let mut open: Option<OpenMessage> = None;
        // Calls by their index: chunks of several calls may interleave.
        let mut calls: BTreeMap<u32, StreamingCall> = BTreeMap::new();
        loop {
            let next = tokio::select! {
                _ = self.stop.cancelled() => {
                    Box::pin(self.close_message(open.take(), ItemStatus::Incomplete)).await;
                    Box::pin(self.close_live(&mut calls, ItemStatus::Incomplete)).await;
                    return Err(self.stop_ending());
                }
                next = stream.next() => next,
            };
            let Some(next) = next else { break };
            match next {
                Ok(ModelEvent::TextDelta(delta)) => {
                    // Text after calls: the calls are complete.
                    if !calls.is_empty() {
                        Box::pin(self.finish_calls(&mut calls, &mut turn)).await;
                    }
                    let message = match &mut open {
                        Some(message) => message,
                        None => open.insert(Box::pin(self.open_message()).await),
                    };
                    message.text.push_str(&delta);
                    let event = Event::OutputTextDelta {
                        item_id: message.item_id.clone(),
                        output_index: message.output_index,
                        content_index: 0,
                        delta,
                        logprobs: Vec::new(),
                    };
                    self.emitter.emit(event).await;
                }
                Ok(ModelEvent::ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments,
                }) => {
                    if open.is_some() {
                        Box::pin(self.close_message(open.take(), ItemStatus::Completed)).await;
                    }
                    let call = calls.entry(index).or_insert_with(|| StreamingCall {
                        call_id: id.unwrap_or_else(|| ids::new(ids::CALL)),
                        name: String::new(),
                        arguments: String::new(),
                        live: None,
                    });
                    if call.name.is_empty()
                        && let Some(name) = name
                    {
                        call.name = name;
                    }
                    call.arguments.push_str(&arguments);
                    if let Some((output_index, item_id)) = call.live.clone()
                        && !arguments.is_empty()
                    {
                        let event = Event::FunctionCallArgumentsDelta {
                            item_id,
                            output_index,
                            delta: arguments,
                        };
                        self.emitter.emit(event).await;
                    }
                    Box::pin(self.settle_calls(&mut calls, Some(index), &mut turn)).await;
                }
                Ok(ModelEvent::Usage(usage)) => self.usage.add(&usage),
                Ok(ModelEvent::Finish(reason)) => turn.finish = Some(reason),
                // Reasoning text is not surfaced yet.
                Ok(ModelEvent::ReasoningDelta(_)) => {}
                Err(e) => {
                    Box::pin(self.close_message(open.take(), ItemStatus::Incomplete)).await;
                    Box::pin(self.close_live(&mut calls, ItemStatus::Incomplete)).await;
                    return Err(upstream_ending(e));
                }
            }
        }
        let status = match turn.finish {
            Some(FinishReason::Length | FinishReason::ContentFilter) => ItemStatus::Incomplete,
            _ => ItemStatus::Completed,
        };
        Box::pin(self.close_message(open.take(), status)).await;
        Box::pin(self.finish_calls(&mut calls, &mut turn)).await;
        Ok(turn)
    }

    /// While the model streams: calls other than the one receiving chunks are complete once
    /// their arguments parse as JSON; server calls among them start at once. A client
    /// function call streams live as its `function_call` item while no other item is open.
    async fn settle_calls(
        &mut self,
        calls: &mut BTreeMap<u32, StreamingCall>,
        streaming: Option<u32>,
        turn: &mut Turn,
    ) {
        let live = calls
            .iter()
            .find(|(_, c)| c.live.is_some())
            .map(|(i, _)| *i);
        let complete: Vec<u32> = calls
            .iter()
            .filter(|(index, call)| {
                Some(**index) != streaming
                    && arguments_complete(&call.arguments)
                    // An item may not open while another is open.
                    && (live.is_none() || live == Some(**index) || !self.emits_item(call))
            })
            .map(|(index, _)| *index)
            .collect();
        for index in complete {
            if let Some(call) = calls.remove(&index) {
                self.finish_call(call, turn).await;
            }
        }
        self.start_saved(turn).await;
        if calls.values().all(|c| c.live.is_none())
            && let Some(call) = calls.values_mut().find(|c| {
                !c.name.is_empty() && self.client_kind(&c.name) == Some(CallKind::Function)
            })
            && self.accepts_call(turn)
        {
            turn.accepted += 1;
            self.open_function_call(call).await;
        }
    }

    /// The end of the model's turn: every call is complete; the live one closes first.
    async fn finish_calls(&mut self, calls: &mut BTreeMap<u32, StreamingCall>, turn: &mut Turn) {
        if let Some(index) = calls
            .iter()
            .find(|(_, c)| c.live.is_some())
            .map(|(i, _)| *i)
            && let Some(call) = calls.remove(&index)
        {
            self.finish_call(call, turn).await;
        }
        while let Some((_, call)) = calls.pop_first() {
            self.finish_call(call, turn).await;
        }
        self.start_saved(turn).await;
    }

    /// Closes an open `function_call` item as it stands (the turn ended early).
    async fn close_live(&mut self, calls: &mut BTreeMap<u32, StreamingCall>, status: ItemStatus) {
        if let Some(index) = calls
            .iter()
            .find(|(_, c)| c.live.is_some())
            .map(|(i, _)| *i)
            && let Some(call) = calls.remove(&index)
            && let Some((output_index, _)) = call.live.clone()
        {
            self.close_function_call(Some(call), output_index, status)
                .await;
        }
    }

    /// Whether finishing this call puts an item on the stream now (client calls, approval
    /// requests) rather than later (server calls are shown after the model's turn).
    fn emits_item(&self, call: &StreamingCall) -> bool {
        match self.tools.get(&call.name) {
            Some(entry) if entry.callable => {
                matches!(entry.executor, Executor::Client(_)) || entry.needs_approval
            }
            _ => false,
        }
    }

    /// Whether one more call may be accepted this turn (`parallel_tool_calls: false` allows
    /// one).
    fn accepts_call(&self, turn: &Turn) -> bool {
        self.limits.parallel_tool_calls || turn.accepted == 0
    }

    /// The item type of a callable client tool.
    fn client_kind(&self, name: &str) -> Option<CallKind> {
        match self.tools.get(name) {
            Some(entry) if entry.callable => match entry.executor {
                Executor::Client(kind) => Some(kind),
                Executor::Server(_) => None,
            },
            _ => None,
        }
    }

    /// Starts the server calls dispatched since the last start, once a checkpoint records
    /// them: they have effects, and after a crash a recorded call is reported interrupted,
    /// never run again. Calls that became complete together share one checkpoint. Calls of
    /// read-only tools start at once while nothing of the turn is recorded: after a crash
    /// the turn is asked again and they run again.
    async fn start_saved(&mut self, turn: &mut Turn) {
        if turn.starting.is_empty() {
            return;
        }
        let starting = std::mem::take(&mut turn.starting);
        let unrecorded =
            !turn.recorded && starting.iter().all(|(_, tool, _)| tool.options.read_only);
        turn.recorded |= !unrecorded;
        if unrecorded || self.checkpoint(Some(turn)).await {
            for (slot, tool, context) in starting {
                turn.calls.run(slot, tool, context);
            }
        } else {
            self.lost = true;
            self.stop.cancel();
            for (slot, ..) in starting {
                let reason = "The run is executed elsewhere now; the call was not run here.";
                turn.calls
                    .fail(slot, ToolResult::failure(ToolErrorKind::Cancelled, reason));
            }
        }
    }

    /// Saves the run's progress: its transcript, and the server calls of `turn` dispatched
    /// so far (as in-progress `mcp_call` items). `false` when the run is no longer this
    /// instance's to execute.
    async fn checkpoint(&self, turn: Option<&Turn>) -> bool {
        let mut transcript = self.transcript.clone();
        for call in turn.map(|t| t.calls.calls.as_slice()).unwrap_or_default() {
            transcript.push(Entry::Item(Item::McpCall(running_item(call))));
        }
        match self
            .store
            .checkpoint(
                &self.body.id,
                &self.owner,
                &self.body,
                &transcript,
                now_ms(),
            )
            .await
        {
            Ok(()) => true,
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => {
                tracing::warn!(response_id = %self.body.id, "the run is executed elsewhere now; stopping here");
                false
            }
            // A passing database fault: the next checkpoint may succeed.
            Err(e) => {
                tracing::warn!(response_id = %self.body.id, error = %e, "checkpoint failed");
                true
            }
        }
    }

    /// Why a run stopped early: the client's cancel, the service shutting down, or the run
    /// taken over elsewhere.
    fn stop_ending(&self) -> Ending {
        if self.lost {
            return Ending::Lost;
        }
        if self.cancelled.load(Ordering::SeqCst) {
            Ending::Cancelled
        } else {
            shutdown_ending()
        }
    }

    /// Opens a client function call's item and sends the arguments received so far.
    async fn open_function_call(&mut self, call: &mut StreamingCall) {
        let item_id = ids::new(ids::FUNCTION_CALL);
        let output_index = self.body.output.len();
        let item = Item::FunctionCall(FunctionCall {
            id: item_id.clone(),
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: String::new(),
            status: Some(ItemStatus::InProgress),
        });
        self.body.output.push(item.clone());
        self.emitter
            .emit(Event::OutputItemAdded { output_index, item })
            .await;
        if !call.arguments.is_empty() {
            let event = Event::FunctionCallArgumentsDelta {
                item_id: item_id.clone(),
                output_index,
                delta: call.arguments.clone(),
            };
            self.emitter.emit(event).await;
        }
        call.live = Some((output_index, item_id));
    }

    /// A call's arguments are complete: a client call's item is closed (or emitted whole); a
    /// server call starts executing, waits for approval, or is refused with the reason as
    /// its result.
    async fn finish_call(&mut self, mut call: StreamingCall, turn: &mut Turn) {
        if let Some((output_index, _)) = call.live.clone() {
            self.close_function_call(Some(call), output_index, ItemStatus::Completed)
                .await;
            turn.client_calls += 1;
            return;
        }
        let entry = self.tools.get(&call.name).cloned();
        let server_label = entry
            .as_ref()
            .and_then(|e| e.server_label.clone())
            .unwrap_or_else(|| "switchyard".into());
        let options = match entry.as_ref().map(|e| &e.executor) {
            Some(Executor::Server(tool)) => tool.options.clone(),
            _ => Default::default(),
        };
        let server_call = ServerCall {
            name: call.name.clone(),
            server_label,
            arguments: call.arguments.clone(),
            options,
            approval_request_id: None,
            item_id: ids::new(ids::MCP_CALL),
        };
        let refusal = match &entry {
            None => Some(format!(
                "The tool '{}' is not available in this request; use one of the tools you were given.",
                call.name
            )),
            Some(entry) if !entry.callable => Some(format!(
                "The tool '{}' is not allowed by this request's tool_choice.",
                call.name
            )),
            Some(_) if !self.accepts_call(turn) => Some(
                "Only one tool call per turn is allowed (parallel_tool_calls is false); this call was not executed. Call it again on its own."
                    .to_string(),
            ),
            Some(entry)
                if matches!(entry.executor, Executor::Server(_))
                    && !entry.needs_approval
                    && self.limits.max_tool_calls.is_some_and(|max| self.tool_calls_used >= max) =>
            {
                Some(format!(
                    "The limit of {} tool calls for this response is reached; this call was not executed.",
                    self.limits.max_tool_calls.unwrap_or_default()
                ))
            }
            Some(_) => None,
        };
        if let Some(reason) = refusal {
            turn.calls.refuse(server_call, reason);
            return;
        }
        turn.accepted += 1;
        match entry.map(|e| (e.executor, e.needs_approval)) {
            Some((Executor::Client(CallKind::Function), _)) => {
                self.open_function_call(&mut call).await;
                if let Some((output_index, _)) = call.live.clone() {
                    self.close_function_call(Some(call), output_index, ItemStatus::Completed)
                        .await;
                }
                turn.client_calls += 1;
            }
            Some((Executor::Client(kind), _)) => match self.client_item(kind, &call).await {
                Ok(()) => turn.client_calls += 1,
                Err(reason) => {
                    turn.calls.refuse(server_call, reason);
                }
            },
            Some((Executor::Server(_), true)) => {
                self.approval_request(&server_call).await;
                turn.approvals += 1;
            }
            Some((Executor::Server(tool), false)) => {
                self.tool_calls_used += 1;
                let context = ToolContext {
                    response_id: self.body.id.clone(),
                    call_id: call.call_id,
                    tenant_id: self.tenant_id.clone(),
                    cancel: self.stop.child_token(),
                };
                // Started once saved (`start_saved`).
                let slot = turn.calls.add(server_call);
                turn.starting.push((slot, tool, context));
            }
            None => {}
        }
    }

    /// A server call that needs the client's approval: an `mcp_approval_request` item, and
    /// the run will pause for the answer.
    async fn approval_request(&mut self, call: &ServerCall) {
        let output_index = self.body.output.len();
        let request = McpApprovalRequest {
            id: ids::new(ids::MCP_APPROVAL_REQUEST),
            server_label: call.server_label.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            status: Some(ItemStatus::Completed),
        };
        self.pending_approvals.push(PendingApproval {
            id: request.id.clone(),
            server_label: request.server_label.clone(),
            name: request.name.clone(),
            arguments: request.arguments.clone(),
        });
        let item = Item::McpApprovalRequest(request);
        self.body.output.push(item.clone());
        self.emitter
            .emit(Event::OutputItemAdded {
                output_index,
                item: item.clone(),
            })
            .await;
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: item.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(item));
    }

    async fn close_function_call(
        &mut self,
        call: Option<StreamingCall>,
        output_index: usize,
        status: ItemStatus,
    ) {
        let Some(call) = call else { return };
        let Some((_, item_id)) = call.live else {
            return;
        };
        let item = Item::FunctionCall(FunctionCall {
            id: item_id.clone(),
            call_id: call.call_id,
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            status: Some(status),
        });
        self.body.output[output_index] = item.clone();
        if status == ItemStatus::Completed {
            self.pending.push(PendingCall {
                id: item_call_id(&item),
                kind: CallKind::Function,
                function: PendingFunction {
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                },
            });
            self.emitter
                .emit(Event::FunctionCallArgumentsDone {
                    item_id,
                    output_index,
                    name: call.name,
                    arguments: call.arguments,
                })
                .await;
        }
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: item.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(item));
    }

    /// Emits the whole item of a complete custom or shell call, and records it as pending.
    async fn client_item(&mut self, kind: CallKind, call: &StreamingCall) -> Result<(), String> {
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let output_index = self.body.output.len();
        let (item, input) = match kind {
            CallKind::Custom => {
                // The model was shown one string argument `input`; anything else is the input.
                let input = arguments
                    .get("input")
                    .and_then(Value::as_str)
                    .map_or_else(|| call.arguments.clone(), str::to_string);
                let item = Item::CustomToolCall(CustomToolCall {
                    id: ids::new(ids::CUSTOM_TOOL_CALL),
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    input: String::new(),
                    status: Some(ItemStatus::InProgress),
                });
                (item, Some(input))
            }
            _ => {
                let action: ShellAction = serde_json::from_value(arguments).map_err(|e| {
                    format!("The local_shell call is invalid: {e}. Give 'command' as an array of strings.")
                })?;
                let item = Item::LocalShellCall(LocalShellCall {
                    id: ids::new(ids::LOCAL_SHELL_CALL),
                    call_id: call.call_id.clone(),
                    action,
                    status: Some(ItemStatus::InProgress),
                });
                (item, None)
            }
        };
        let item_id = item.id().to_string();
        self.body.output.push(item.clone());
        self.emitter
            .emit(Event::OutputItemAdded {
                output_index,
                item: item.clone(),
            })
            .await;
        let mut done = item;
        if let (Some(input), Item::CustomToolCall(custom)) = (input, &mut done) {
            custom.input = input.clone();
            self.emitter
                .emit(Event::CustomToolCallInputDelta {
                    item_id: item_id.clone(),
                    output_index,
                    delta: input.clone(),
                })
                .await;
            self.emitter
                .emit(Event::CustomToolCallInputDone {
                    item_id,
                    output_index,
                    input,
                })
                .await;
        }
        *done.status_mut() = Some(ItemStatus::Completed);
        let arguments = match &done {
            Item::CustomToolCall(custom) => custom.input.clone(),
            Item::LocalShellCall(shell) => serde_json::to_string(&shell.action).unwrap_or_default(),
            _ => call.arguments.clone(),
        };
        self.pending.push(PendingCall {
            id: call.call_id.clone(),
            kind,
            function: PendingFunction {
                name: call.name.clone(),
                arguments,
            },
        });
        self.body.output[output_index] = done.clone();
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: done.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(done));
        Ok(())
    }

    /// Presents the turn's server calls one item at a time: the first to produce output or
    /// finish takes the stream, the others wait their turn.
    async fn present(&mut self, mut calls: TurnCalls) -> Result<Vec<Presented>, Ending> {
        let count = calls.calls.len();
        let mut chunks: Vec<Vec<String>> = vec![Vec::new(); count];
        let mut results: Vec<Option<ToolResult>> = vec![None; count];
        let mut ready: VecDeque<usize> = VecDeque::new();
        let mut is_ready = vec![false; count];
        let mut speaker: Option<(usize, usize, String)> = None;
        let mut items: Vec<Option<Item>> = vec![None; count];
        let mut remaining = count;
        while remaining > 0 {
            if speaker.is_none()
                && let Some(slot) = ready.pop_front()
            {
                if calls.calls[slot].options.hidden {
                    // Hidden calls never take the stream; they become ready only when done.
                    items[slot] = Some(hidden_item(&calls.calls[slot], results[slot].as_ref()));
                    remaining -= 1;
                    continue;
                }
                let (output_index, item_id) = self.open_call(&calls.calls[slot]).await;
                speaker = Some((slot, output_index, item_id));
            }
            if let Some((slot, output_index, item_id)) = speaker.clone()
                && let Some(result) = &results[slot]
            {
                let result = result.clone();
                let item = self
                    .close_call(&calls.calls[slot], output_index, item_id, &result)
                    .await;
                items[slot] = Some(item);
                remaining -= 1;
                speaker = None;
                continue;
            }
            let event = tokio::select! {
                _ = self.stop.cancelled() => {
                    if let Some((slot, output_index, item_id)) = speaker.take() {
                        let cancelled = ToolResult::failure(ToolErrorKind::Cancelled, "The call was cancelled.");
                        let item = self.close_call(&calls.calls[slot], output_index, item_id, &cancelled).await;
                        items[slot] = Some(item);
                    }
                    // Finished calls are kept.
                    self.transcript
                        .extend(items.into_iter().flatten().map(Entry::Item));
                    return Err(self.stop_ending());
                }
                event = calls.next_event() => event,
            };
            let slot = match event {
                Some(CallEvent::Output(slot, text)) => {
                    chunks[slot].push(text);
                    slot
                }
                Some(CallEvent::Done(slot, result)) => {
                    results[slot] = Some(result);
                    slot
                }
                None => break,
            };
            let hidden_running = calls.calls[slot].options.hidden && results[slot].is_none();
            if !is_ready[slot] && !hidden_running {
                is_ready[slot] = true;
                ready.push_back(slot);
            }
        }
        // The model gets the results in its own call order, whatever order they were shown in.
        self.transcript
            .extend(items.into_iter().flatten().map(Entry::Item));
        Ok(calls
            .calls
            .drain(..)
            .zip(results)
            .zip(chunks)
            .map(|((call, result), chunks)| Presented {
                call,
                result: result.unwrap_or_else(|| {
                    ToolResult::failure(ToolErrorKind::Cancelled, "The call did not finish.")
                }),
                chunks,
            })
            .collect())
    }

    /// Opens a call's `mcp_call` item: added, arguments, in progress.
    async fn open_call(&mut self, call: &ServerCall) -> (usize, String) {
        let item_id = call.item_id.clone();
        let output_index = self.body.output.len();
        let item = Item::McpCall(running_item(call));
        self.body.output.push(item.clone());
        self.emitter
            .emit(Event::OutputItemAdded { output_index, item })
            .await;
        self.emitter
            .emit(Event::McpCallArgumentsDelta {
                item_id: item_id.clone(),
                output_index,
                delta: call.arguments.clone(),
            })
            .await;
        self.emitter
            .emit(Event::McpCallArgumentsDone {
                item_id: item_id.clone(),
                output_index,
                arguments: call.arguments.clone(),
            })
            .await;
        self.emitter
            .emit(Event::McpCallInProgress {
                item_id: item_id.clone(),
                output_index,
            })
            .await;
        (output_index, item_id)
    }

    async fn close_call(
        &mut self,
        call: &ServerCall,
        output_index: usize,
        item_id: String,
        result: &ToolResult,
    ) -> Item {
        let item = Item::McpCall(call_item(call, item_id.clone(), result));
        self.body.output[output_index] = item.clone();
        let event = if result.is_error() {
            Event::McpCallFailed {
                item_id,
                output_index,
            }
        } else {
            Event::McpCallCompleted {
                item_id,
                output_index,
            }
        };
        self.emitter.emit(event).await;
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: item.clone(),
            })
            .await;
        item
    }

    /// Announces a tool server's tools (`mcp_list_tools`).
    async fn list_tools(&mut self, server_label: String, tools: Vec<McpToolInfo>) {
        let item_id = ids::new(ids::MCP_LIST_TOOLS);
        let output_index = self.body.output.len();
        let mut listing = McpListTools {
            id: item_id.clone(),
            server_label,
            tools,
            error: None,
            status: Some(ItemStatus::InProgress),
        };
        self.body.output.push(Item::McpListTools(listing.clone()));
        self.emitter
            .emit(Event::OutputItemAdded {
                output_index,
                item: Item::McpListTools(listing.clone()),
            })
            .await;
        self.emitter
            .emit(Event::McpListToolsInProgress {
                item_id: item_id.clone(),
                output_index,
            })
            .await;
        self.emitter
            .emit(Event::McpListToolsCompleted {
                item_id,
                output_index,
            })
            .await;
        listing.status = Some(ItemStatus::Completed);
        let item = Item::McpListTools(listing);
        self.body.output[output_index] = item.clone();
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: item.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(item));
    }

    /// A whole assistant message from known text pieces (the output of a `return_direct`
    /// tool), streamed as deltas.
    async fn text_message(&mut self, deltas: Vec<String>) {
        let mut message = self.open_message().await;
        for delta in deltas {
            message.text.push_str(&delta);
            let event = Event::OutputTextDelta {
                item_id: message.item_id.clone(),
                output_index: message.output_index,
                content_index: 0,
                delta,
                logprobs: Vec::new(),
            };
            self.emitter.emit(event).await;
        }
        self.close_message(Some(message), ItemStatus::Completed)
            .await;
    }

    async fn open_message(&mut self) -> OpenMessage {
        let item_id = ids::new(ids::MESSAGE);
        let output_index = self.body.output.len();
        let item = Item::Message(Message::assistant(item_id.clone()));
        self.body.output.push(item.clone());
        self.emitter
            .emit(Event::OutputItemAdded { output_index, item })
            .await;
        self.emitter
            .emit(Event::ContentPartAdded {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                part: ContentPart::OutputText(OutputText::new(String::new())),
            })
            .await;
        OpenMessage {
            output_index,
            item_id,
            text: String::new(),
        }
    }

    /// Ends the open message (if any): text done, part done, item done.
    async fn close_message(&mut self, open: Option<OpenMessage>, status: ItemStatus) {
        let Some(open) = open else { return };
        let part = ContentPart::OutputText(OutputText::new(open.text.clone()));
        let item = Item::Message(Message {
            id: open.item_id.clone(),
            role: Role::Assistant,
            content: vec![part.clone()],
            status: Some(status),
        });
        self.body.output[open.output_index] = item.clone();
        self.emitter
            .emit(Event::OutputTextDone {
                item_id: open.item_id.clone(),
                output_index: open.output_index,
                content_index: 0,
                text: open.text,
                logprobs: Vec::new(),
            })
            .await;
        self.emitter
            .emit(Event::ContentPartDone {
                item_id: open.item_id,
                output_index: open.output_index,
                content_index: 0,
                part,
            })
            .await;
        self.emitter
            .emit(Event::OutputItemDone {
                output_index: open.output_index,
                item: item.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(item));
    }

    /// Stores the final state, then sends the terminal event. Returns the upstream failure,
    /// if that is how the run ended.
    async fn finish(&mut self, ending: Ending) -> Option<LlmError> {
        // A run that ends before its first model turn learns here whether it is stored.
        let ending = match Admission::settle(self.admission.take()).await {
            true => ending,
            false => Ending::Lost,
        };
        let id = self.body.id.clone();
        for item in &mut self.body.output {
            close_incomplete(item);
        }
        let mut expires_at = None;
        let (state, upstream) = match ending {
            Ending::Lost => {
                self.lost = true;
                return None;
            }
            Ending::Completed => {
                self.body.status = ResponseStatus::Completed;
                self.body.completed_at = Some(now_ms() / 1000);
                (RunState::Completed, None)
            }
            Ending::RequiresAction => {
                // The model's turn is complete; the client must act (SPEC §3).
                let deadline = now_ms() + self.limits.pause_ttl.as_millis() as i64;
                expires_at = Some(deadline);
                self.body.status = ResponseStatus::Completed;
                self.body.completed_at = Some(now_ms() / 1000);
                self.body.required_action = Some(RequiredAction::new(
                    deadline / 1000,
                    PendingWork {
                        tool_calls: std::mem::take(&mut self.pending),
                        approval_requests: std::mem::take(&mut self.pending_approvals),
                    },
                ));
                (RunState::RequiresAction, None)
            }
            Ending::Cancelled => {
                self.body.status = ResponseStatus::Cancelled;
                (RunState::Cancelled, None)
            }
            Ending::Incomplete(reason) => {
                self.body.status = ResponseStatus::Incomplete;
                self.body.incomplete_details = Some(IncompleteDetails {
                    reason: reason.into(),
                });
                (RunState::Incomplete, None)
            }
            Ending::Failed {
                code,
                message,
                upstream,
            } => {
                tracing::warn!(response_id = %id, code, error = %message, "run failed");
                self.emitter.emit(error_event(code, &message)).await;
                self.body.status = ResponseStatus::Failed;
                self.body.error = Some(ResponseError {
                    code: response_error_code(upstream.as_ref()).into(),
                    message,
                });
                (RunState::Failed, upstream)
            }
        };
        if let Err(e) = super::state::check(RunState::InProgress, state) {
            tracing::error!(response_id = %id, to = state.as_str(), error = %e, "ending refused by the state table");
            return upstream;
        }
        // A run taken over elsewhere (this instance lost its lease) is not ended here.
        let ending = RunEnding {
            id: id.clone(),
            to: state,
            body: self.body.clone(),
            // The run's last use of its transcript.
            transcript: std::mem::take(&mut self.transcript),
            expires_at,
            owner: self.owner.clone(),
            now_ms: now_ms(),
        };
        // Persisted before anyone sees the ending (a paused run is resumable once the client
        // reads `response.completed`), in the event writer's group commit.
        match self.emitter.end_run(ending).await {
            Ok(()) => {}
            Err(StoreError::Conflict {
                actual: RunState::InProgress,
            }) => {
                // Still running, but no longer under this instance's lease: taken over.
                tracing::warn!(response_id = %id, "the run is executed elsewhere now; stopping here");
                self.lost = true;
                return upstream;
            }
            Err(e) => {
                // The run was moved on by someone else (or the database is gone): its stored
                // state stands, and the log gets no second ending.
                tracing::error!(response_id = %id, error = %e, "cannot store the run's final state");
                return upstream;
            }
        }
        let response = Box::new(self.body.clone());
        let event = match state {
            RunState::Completed | RunState::RequiresAction => Event::Completed { response },
            RunState::Incomplete => Event::Incomplete { response },
            // The standard has no cancelled event: `response.failed` with status cancelled.
            _ => Event::Failed { response },
        };
        self.emitter.emit(event).await;
        if let Err(e) = self.emitter.flush().await {
            tracing::error!(response_id = %id, error = %e, "cannot store the run's events");
        }
        upstream
    }
}

/// Whether streamed arguments form a whole JSON value (a call with no arguments sends none).
fn arguments_complete(arguments: &str) -> bool {
    arguments.trim().is_empty() || serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_ok()
}

/// The call id of a client call item.
fn item_call_id(item: &Item) -> String {
    item.as_call().map(|(id, _, _)| id).unwrap_or_default()
}

/// The `mcp_call` item of a call that is running.
fn running_item(call: &ServerCall) -> McpCall {
    McpCall {
        id: call.item_id.clone(),
        server_label: call.server_label.clone(),
        name: call.name.clone(),
        arguments: call.arguments.clone(),
        output: None,
        error: None,
        status: Some(ItemStatus::InProgress),
        approval_request_id: call.approval_request_id.clone(),
        data: None,
    }
}

/// A hidden call's item: stored for the model, never shown.
fn hidden_item(call: &ServerCall, result: Option<&ToolResult>) -> Item {
    let unfinished = ToolResult::failure(ToolErrorKind::Cancelled, "The call did not finish.");
    Item::McpCall(call_item(
        call,
        call.item_id.clone(),
        result.unwrap_or(&unfinished),
    ))
}

/// The `mcp_call` item of a finished call.
fn call_item(call: &ServerCall, id: String, result: &ToolResult) -> McpCall {
    let (output, error, status) = match result.error {
        None => (Some(result.text.clone()), None, ItemStatus::Completed),
        Some(ToolErrorKind::Transport { status: Some(code) }) => (
            None,
            Some(json!({"type": "http_error", "code": code, "message": result.text})),
            ItemStatus::Failed,
        ),
        Some(_) => (
            None,
            Some(json!({"type": "mcp_tool_execution_error", "content": result.text})),
            ItemStatus::Failed,
        ),
    };
    McpCall {
        id,
        server_label: call.server_label.clone(),
        name: call.name.clone(),
        arguments: call.arguments.clone(),
        output,
        error,
        status: Some(status),
        approval_request_id: call.approval_request_id.clone(),
        data: result.data.clone(),
    }
}

fn upstream_ending(error: LlmError) -> Ending {
    Ending::Failed {
        code: error.code(),
        message: error.to_string(),
        upstream: Some(error),
    }
}

fn shutdown_ending() -> Ending {
    Ending::Failed {
        code: "server_shutdown",
        message: "The run was stopped because the service shut down.".into(),
        upstream: None,
    }
}

/// `response.error.code` is a closed set in the standard; our detailed code goes in the
/// `error` event and the message.
fn response_error_code(upstream: Option<&LlmError>) -> &'static str {
    match upstream {
        Some(LlmError::Status { status: 429, .. }) => "rate_limit_exceeded",
        _ => "server_error",
    }
}
