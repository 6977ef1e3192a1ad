//! One model turn as it streams: reasoning into a reasoning item, text into a message, tool
//! call chunks assembled by index.
//! A client call is shown live while no other item is open; a server call starts as soon as
//! its arguments are complete (once a checkpoint records it, unless it is read-only), and is
//! shown after the turn, when its turn's calls are presented.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;

use super::output::{LiveCall, OpenMessage, OpenReasoning};
use super::{RunTask, upstream_ending};
use crate::engine::executor::{ServerCall, TurnCalls};
use crate::engine::lifecycle::Ending;
use crate::engine::toolset::{Executor, ToolEntry};
use crate::llm::opaque::Opaque;
use crate::llm::{FinishReason, ModelEvent};
use crate::protocol::ids;
use crate::protocol::items::ItemStatus;
use crate::protocol::response::CallKind;
use crate::tools::registry::RegisteredTool;
use crate::tools::{ToolContext, ToolErrorKind, ToolResult};

/// A tool call while the model streams it.
pub(super) struct StreamingCall {
    call_id: String,
    name: String,
    arguments: String,
    /// A client call streams live as its `function_call` item.
    live: Option<LiveCall>,
    /// The id of its `mcp_call` item, if it is chosen before the call is complete (a server
    /// call's signature names the item: the model is shown the call under that id).
    item_id: Option<String>,
}

/// A client call made after a server call of the same turn: its item waits until the server
/// calls before it are shown, so that the output follows the model's call order.
pub(super) struct Deferred {
    /// How many of the turn's server calls come before it.
    pub after: usize,
    pub kind: CallKind,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub namespace: Option<String>,
    /// The call as a refused server call, if its item cannot be shown (an invalid action).
    pub refused: ServerCall,
}

/// What a model turn produced.
pub(super) struct Turn {
    pub finish: Option<FinishReason>,
    /// Client calls emitted this turn (the run pauses for them).
    pub client_calls: usize,
    /// Approval requests emitted this turn (the run pauses for them too).
    pub approvals: usize,
    /// Calls accepted this turn, for `parallel_tool_calls: false`.
    accepted: usize,
    pub calls: TurnCalls,
    /// Client calls shown once the server calls before them are (see [`Deferred`]).
    pub deferred: Vec<Deferred>,
    /// Server calls dispatched but not started: they start once recorded (`start_saved`).
    starting: Vec<(usize, Arc<RegisteredTool>, ToolContext)>,
    /// A start of this turn was saved: every later start is saved too, so that a crash
    /// finds the turn either not recorded (asked again) or with every call it started.
    recorded: bool,
    /// Provider state not shown yet ([`crate::llm::opaque`]): call signatures, and the
    /// reasoning blocks streamed so far (merged by their `index`). It is shown as soon as no
    /// call item is open, before the message or calls that follow.
    signatures: Vec<Opaque>,
    details: Vec<serde_json::Value>,
}

/// A call written in the model's text that could not be read ([`ModelEvent::MalformedCall`]).
struct Unreadable {
    protocol: &'static str,
    raw: String,
    reason: String,
}

/// The name an unreadable call is shown to the model under ([`RunTask::malformed_call`]).
const UNREADABLE_CALL: &str = "unreadable_tool_call";

/// One chunk of a tool call ([`ModelEvent::ToolCallDelta`]).
struct CallDelta {
    index: u32,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    signature: Option<String>,
}

/// Calls by their index: chunks of several calls may interleave.
type Calls = BTreeMap<u32, StreamingCall>;

/// What a model turn has open while it streams: at most one of its reasoning and its message
/// (items never interleave), and the calls being streamed.
#[derive(Default)]
struct Streaming {
    reasoning: Option<OpenReasoning>,
    message: Option<OpenMessage>,
    calls: Calls,
}

impl RunTask {
    /// Streams one model turn: reasoning, text and client calls live, server calls started
    /// as soon as their arguments are complete. With `save_first`, the run's progress is
    /// checkpointed while the request goes out.
    pub(super) async fn model_turn(&mut self, save_first: bool) -> Result<Turn, Ending> {
        let mut stream = Box::pin(self.start_turn(save_first)).await?;
        let mut turn = Turn {
            finish: None,
            client_calls: 0,
            approvals: 0,
            accepted: 0,
            calls: TurnCalls::new(
                self.tools.limits.max_concurrency,
                self.tools.limits.max_output_bytes,
            ),
            deferred: Vec::new(),
            starting: Vec::new(),
            recorded: false,
            signatures: Vec::new(),
            details: Vec::new(),
        };
        let mut open = Streaming::default();
        loop {
            let next = tokio::select! {
                _ = self.place.control.token().cancelled() => {
                    Box::pin(self.close_open(&mut open)).await;
                    return Err(self.stop_ending());
                }
                next = stream.next() => next,
            };
            let Some(next) = next else { break };
            match next {
                // The path of almost every event: more text for the item that is open. (Boxed
                // futures only where an item opens or closes: a box per delta cost a text run
                // about 2 % more instructions, and a debug build's 80,000 deltas 35 % more time.)
                Ok(ModelEvent::TextDelta(delta)) if open.message.is_some() => {
                    if let Some(message) = &mut open.message {
                        let event = message.push(&delta);
                        self.out.emitter.emit(event).await;
                    }
                }
                Ok(ModelEvent::ReasoningDelta(delta)) if open.reasoning.is_some() => {
                    if let Some(reasoning) = &mut open.reasoning {
                        let event = reasoning.push(&delta);
                        self.out.emitter.emit(event).await;
                    }
                }
                Ok(ModelEvent::ReasoningDelta(delta)) => {
                    Box::pin(self.reasoning_delta(&mut open, &mut turn, &delta)).await;
                }
                Ok(ModelEvent::TextDelta(delta)) => {
                    Box::pin(self.text_delta(&mut open, &mut turn, &delta)).await;
                }
                Ok(ModelEvent::ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments,
                    signature,
                }) => {
                    self.first_token();
                    if open.message.is_some() || open.reasoning.is_some() {
                        Box::pin(self.close_text(&mut open, ItemStatus::Completed)).await;
                    }
                    let calls = &mut open.calls;
                    let delta = CallDelta {
                        index,
                        id,
                        name,
                        arguments,
                        signature,
                    };
                    Box::pin(self.call_delta(calls, &mut turn, delta)).await;
                }
                Ok(ModelEvent::MalformedCall {
                    protocol,
                    raw,
                    reason,
                }) => {
                    let unreadable = Unreadable {
                        protocol,
                        raw,
                        reason,
                    };
                    Box::pin(self.malformed_call(&mut open, &mut turn, unreadable)).await;
                }
                Ok(ModelEvent::ReasoningDetails(fragments)) => {
                    crate::llm::opaque::merge_details(&mut turn.details, fragments);
                }
                Ok(ModelEvent::Usage(usage)) => {
                    crate::telemetry::turn_usage(usage.input_tokens, usage.output_tokens);
                    self.model.usage.add(&usage);
                }
                Ok(ModelEvent::Finish(reason)) => {
                    crate::telemetry::turn_finished(&reason);
                    turn.finish = Some(reason);
                }
                Err(e) => {
                    Box::pin(self.close_open(&mut open)).await;
                    return Err(upstream_ending(e));
                }
            }
        }
        let status = match turn.finish {
            Some(FinishReason::Length | FinishReason::ContentFilter) => ItemStatus::Incomplete,
            _ => ItemStatus::Completed,
        };
        Box::pin(self.close_text(&mut open, status)).await;
        Box::pin(self.finish_calls(&mut open.calls, &mut turn)).await;
        Ok(turn)
    }

    /// A piece of the model's reasoning: it goes into the open reasoning item, or a new one
    /// after whatever the turn had open.
    async fn reasoning_delta(&mut self, open: &mut Streaming, turn: &mut Turn, delta: &str) {
        self.first_token();
        if !open.calls.is_empty() {
            Box::pin(self.finish_calls(&mut open.calls, turn)).await;
        }
        let message = open.message.take();
        Box::pin(self.out.close_message(message, ItemStatus::Completed)).await;
        let reasoning = match &mut open.reasoning {
            Some(reasoning) => reasoning,
            None => open
                .reasoning
                .insert(Box::pin(self.out.open_reasoning()).await),
        };
        let event = reasoning.push(delta);
        self.out.emitter.emit(event).await;
    }

    /// A piece of the answer: it goes into the open message, or a new one after whatever the
    /// turn had open (the calls before it are complete).
    async fn text_delta(&mut self, open: &mut Streaming, turn: &mut Turn, delta: &str) {
        self.first_token();
        if !open.calls.is_empty() {
            Box::pin(self.finish_calls(&mut open.calls, turn)).await;
        }
        let reasoning = open.reasoning.take();
        Box::pin(self.out.close_reasoning(reasoning, ItemStatus::Completed)).await;
        let message = match &mut open.message {
            Some(message) => message,
            None => {
                Box::pin(self.show_opaque(turn)).await;
                open.message.insert(Box::pin(self.out.open_message()).await)
            }
        };
        let event = message.push(delta);
        self.out.emitter.emit(event).await;
    }

    /// A call the model wrote in its text could not be read: the first time in this execution
    /// the model is asked again, through a hidden refused call whose result says what could
    /// not be read (the client sees nothing of it); after that the text stays as it was.
    async fn malformed_call(
        &mut self,
        open: &mut Streaming,
        turn: &mut Turn,
        unreadable: Unreadable,
    ) {
        let Unreadable {
            protocol,
            raw,
            reason,
        } = unreadable;
        if self.tools.turned_back || !self.accepts_call(turn) {
            tracing::warn!(%reason, "a call in the model's text could not be read; it stays text");
            crate::metrics::text_tool_call(protocol, "left_as_text");
            self.text_delta(open, turn, &raw).await;
            return;
        }
        tracing::warn!(%reason, "a call in the model's text could not be read; the model is asked again");
        crate::metrics::text_tool_call(protocol, "turned_back");
        self.tools.turned_back = true;
        if open.message.is_some() || open.reasoning.is_some() {
            self.close_text(open, ItemStatus::Completed).await;
        }
        let call = ServerCall {
            name: UNREADABLE_CALL.into(),
            server_label: "switchyard".into(),
            arguments: "{}".into(),
            options: crate::tools::ToolOptions {
                hidden: true,
                ..Default::default()
            },
            approval_request_id: None,
            item_id: ids::new(ids::MCP_CALL),
        };
        turn.accepted += 1;
        turn.calls.refuse(
            call,
            format!("Your tool call could not be read: {reason}. Write it again exactly in the format the system prompt gives."),
        );
    }

    /// Closes the turn's open reasoning and message, if any, with `status`.
    async fn close_text(&mut self, open: &mut Streaming, status: ItemStatus) {
        let reasoning = open.reasoning.take();
        Box::pin(self.out.close_reasoning(reasoning, status)).await;
        Box::pin(self.out.close_message(open.message.take(), status)).await;
    }

    /// Sends the turn's request; with `save_first` the run's progress is saved meanwhile.
    /// A new run learns here, before it shows anything, whether its insert committed.
    async fn start_turn(&mut self, save_first: bool) -> Result<crate::llm::ModelStream, Ending> {
        let mut request = self.model.request.clone();
        request.items = self.model.context.clone();
        request.items.extend(self.out.transcript.iter().cloned());
        let admission = self.start.admission.take();
        let started = async {
            tokio::select! {
                _ = self.place.control.token().cancelled() => None,
                started = self.model.client.stream(&request) => Some(started),
            }
        };
        let saved = async { !save_first || self.checkpoint(None).await };
        let (stored, saved, started) =
            tokio::join!(super::Admission::settle(admission), saved, started);
        if !stored || !saved {
            return Err(Ending::Lost);
        }
        match started {
            None => Err(self.stop_ending()),
            Some(Ok(stream)) => Ok(stream),
            Some(Err(e)) => Err(upstream_ending(e)),
        }
    }

    /// Records the time to the first token, at the execution's first text or call.
    fn first_token(&mut self) {
        if let Some(began) = self.start.awaiting_first_token.take() {
            crate::metrics::first_token(&self.out.body.model, began.elapsed());
        }
    }

    /// Closes what the turn had open when it was cut short: its reasoning, its message and
    /// its live call.
    async fn close_open(&mut self, open: &mut Streaming) {
        self.close_text(open, ItemStatus::Incomplete).await;
        let calls = &mut open.calls;
        if let Some(index) = live_index(calls)
            && let Some(call) = calls.remove(&index)
            && let Some(live) = call.live
        {
            self.out
                .close_function_call(
                    live,
                    call.call_id,
                    call.name,
                    call.arguments,
                    ItemStatus::Incomplete,
                )
                .await;
        }
    }

    /// A chunk of a tool call.
    async fn call_delta(&mut self, calls: &mut Calls, turn: &mut Turn, delta: CallDelta) {
        let CallDelta {
            index,
            id,
            name,
            arguments,
            signature,
        } = delta;
        let call = calls.entry(index).or_insert_with(|| StreamingCall {
            call_id: id.unwrap_or_else(|| ids::new(ids::CALL)),
            name: String::new(),
            arguments: String::new(),
            live: None,
            item_id: None,
        });
        if call.name.is_empty()
            && let Some(name) = name
        {
            call.name = name;
        }
        if let Some(signature) = signature {
            // The id the model will be shown the call under: its own for a client call, its
            // item's for a server call.
            let shown_as = match self.client_kind(&call.name) {
                Some(_) => call.call_id.clone(),
                None => call
                    .item_id
                    .get_or_insert_with(|| ids::new(ids::MCP_CALL))
                    .clone(),
            };
            turn.signatures.push(Opaque::CallSignature {
                call_id: shown_as,
                signature,
            });
        }
        call.arguments.push_str(&arguments);
        if let Some(live) = call.live.clone()
            && !arguments.is_empty()
        {
            self.out.function_arguments(&live, &arguments).await;
        }
        self.settle_calls(calls, Some(index), turn).await;
    }

    /// While the model streams: calls other than the one receiving chunks are complete once
    /// their arguments parse as JSON; server calls among them start at once. A client
    /// function call streams live as its `function_call` item while no other item is open.
    async fn settle_calls(&mut self, calls: &mut Calls, streaming: Option<u32>, turn: &mut Turn) {
        let live = live_index(calls);
        if live.is_none() {
            self.show_opaque(turn).await;
        }
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
        // A client call after a server call waits for it (its item is deferred), so only a
        // turn without server calls so far shows one live.
        if calls.values().all(|c| c.live.is_none())
            && turn.calls.calls.is_empty()
            && self.accepts_call(turn)
            && let Some(call) = calls.values_mut().find(|c| {
                !c.name.is_empty() && self.client_kind(&c.name) == Some(CallKind::Function)
            })
        {
            turn.accepted += 1;
            let namespace = self
                .tools
                .set
                .get(&call.name)
                .and_then(|e| e.namespace.clone());
            let live = self
                .out
                .open_function_call(&call.call_id, &call.name, &call.arguments, namespace)
                .await;
            call.live = Some(live);
        }
    }

    /// The end of the model's turn: every call is complete; the live one closes first.
    async fn finish_calls(&mut self, calls: &mut Calls, turn: &mut Turn) {
        if let Some(index) = live_index(calls)
            && let Some(call) = calls.remove(&index)
        {
            self.finish_call(call, turn).await;
        }
        self.show_opaque(turn).await;
        while let Some((_, call)) = calls.pop_first() {
            self.finish_call(call, turn).await;
        }
        self.start_saved(turn).await;
    }

    /// Shows the provider state received so far (no item may be open): the reasoning blocks,
    /// then the call signatures.
    async fn show_opaque(&mut self, turn: &mut Turn) {
        if !turn.details.is_empty() {
            let details = Opaque::ReasoningDetails(std::mem::take(&mut turn.details));
            self.out.opaque_reasoning(&details).await;
        }
        for signature in std::mem::take(&mut turn.signatures) {
            self.out.opaque_reasoning(&signature).await;
        }
    }

    /// A call's arguments are complete: a client call's item is closed (or emitted whole); a
    /// server call starts executing, waits for approval, or is refused with the reason as
    /// its result.
    async fn finish_call(&mut self, mut call: StreamingCall, turn: &mut Turn) {
        if let Some(live) = call.live.take() {
            self.close_client_function(live, call, turn).await;
            return;
        }
        let entry = self.tools.set.get(&call.name).cloned();
        let server_call = self.server_call(&call, entry.as_ref());
        if let Some(reason) = self.refusal(&call.name, entry.as_ref(), turn) {
            turn.calls.refuse(server_call, reason);
            return;
        }
        turn.accepted += 1;
        let Some(entry) = entry else { return };
        if let Executor::Client(kind) = entry.executor
            && !turn.calls.calls.is_empty()
        {
            turn.deferred.push(Deferred {
                after: turn.calls.calls.len(),
                kind,
                call_id: call.call_id,
                name: call.name,
                arguments: call.arguments,
                namespace: entry.namespace,
                refused: server_call,
            });
            turn.client_calls += 1;
            return;
        }
        match (entry.executor, entry.needs_approval) {
            (Executor::Client(CallKind::Function), _) => {
                let live = self
                    .out
                    .open_function_call(
                        &call.call_id,
                        &call.name,
                        &call.arguments,
                        entry.namespace.clone(),
                    )
                    .await;
                self.close_client_function(live, call, turn).await;
            }
            (Executor::Client(kind), _) => {
                let shown = self
                    .out
                    .client_item(
                        kind,
                        &call.call_id,
                        &call.name,
                        &call.arguments,
                        entry.namespace.clone(),
                    )
                    .await;
                match shown {
                    Ok(pending) => {
                        self.waits.calls.push(pending);
                        turn.client_calls += 1;
                    }
                    Err(reason) => {
                        turn.calls.refuse(server_call, reason);
                    }
                }
            }
            (Executor::Server(_), true) => {
                let request = self.out.approval_request(&server_call).await;
                self.waits.approvals.push(request);
                turn.approvals += 1;
            }
            (Executor::Server(tool), false) => {
                self.tools.calls_used += 1;
                let context = self.tool_context(call.call_id);
                // Started once saved (`start_saved`).
                let slot = turn.calls.add(server_call);
                turn.starting.push((slot, tool, context));
            }
        }
    }

    /// Closes a client function call's item: the run will wait for its output.
    async fn close_client_function(
        &mut self,
        live: LiveCall,
        call: StreamingCall,
        turn: &mut Turn,
    ) {
        let pending = self
            .out
            .close_function_call(
                live,
                call.call_id,
                call.name,
                call.arguments,
                ItemStatus::Completed,
            )
            .await;
        self.waits.calls.extend(pending);
        turn.client_calls += 1;
    }

    /// The call as a server call, with its tool's options (the item it gets if it is one, or
    /// if it is refused).
    fn server_call(&self, call: &StreamingCall, entry: Option<&ToolEntry>) -> ServerCall {
        // A server tool's item carries its own name and server, whatever the model was
        // shown.
        let (name, server_label) = match entry {
            Some(ToolEntry {
                name,
                server_label: Some(label),
                ..
            }) => (name.clone(), label.clone()),
            _ => (call.name.clone(), "switchyard".to_string()),
        };
        ServerCall {
            name,
            server_label,
            arguments: call.arguments.clone(),
            options: match entry.map(|e| &e.executor) {
                Some(Executor::Server(tool)) => tool.options.clone(),
                _ => Default::default(),
            },
            approval_request_id: None,
            item_id: call
                .item_id
                .clone()
                .unwrap_or_else(|| ids::new(ids::MCP_CALL)),
        }
    }

    /// Why a call is not executed, if it is not: an unknown tool, one `tool_choice` leaves
    /// out, a second call when `parallel_tool_calls` is false, the run's `max_tool_calls`.
    fn refusal(&self, name: &str, entry: Option<&ToolEntry>, turn: &Turn) -> Option<String> {
        let limits = &self.tools.limits;
        match entry {
            None => Some(format!(
                "The tool '{name}' is not available in this request; use one of the tools you were given."
            )),
            Some(entry) if !entry.callable => Some(format!(
                "The tool '{name}' is not allowed by this request's tool_choice."
            )),
            Some(_) if !self.accepts_call(turn) => Some(
                "Only one tool call per turn is allowed (parallel_tool_calls is false); this call was not executed. Call it again on its own."
                    .to_string(),
            ),
            Some(entry)
                if matches!(entry.executor, Executor::Server(_))
                    && !entry.needs_approval
                    && limits.max_tool_calls.is_some_and(|max| self.tools.calls_used >= max) =>
            {
                Some(format!(
                    "The limit of {} tool calls for this response is reached; this call was not executed.",
                    limits.max_tool_calls.unwrap_or_default()
                ))
            }
            Some(_) => None,
        }
    }

    /// Whether finishing this call puts an item on the stream now (client calls, approval
    /// requests) rather than later (server calls are shown after the model's turn).
    fn emits_item(&self, call: &StreamingCall) -> bool {
        match self.tools.set.get(&call.name) {
            Some(entry) if entry.callable => {
                matches!(entry.executor, Executor::Client(_)) || entry.needs_approval
            }
            _ => false,
        }
    }

    /// Whether one more call may be accepted this turn (`parallel_tool_calls: false` allows
    /// one).
    fn accepts_call(&self, turn: &Turn) -> bool {
        self.tools.limits.parallel_tool_calls || turn.accepted == 0
    }

    /// The item type of a callable client tool.
    fn client_kind(&self, name: &str) -> Option<CallKind> {
        match self.tools.set.get(name) {
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
        if unrecorded || self.checkpoint(Some(&turn.calls)).await {
            for (slot, tool, context) in starting {
                turn.calls.run(slot, tool, context);
            }
        } else {
            for (slot, ..) in starting {
                let reason = "The run is executed elsewhere now; the call was not run here.";
                turn.calls
                    .fail(slot, ToolResult::failure(ToolErrorKind::Cancelled, reason));
            }
        }
    }
}

/// The call streaming live, if one is.
fn live_index(calls: &Calls) -> Option<u32> {
    calls
        .iter()
        .find(|(_, c)| c.live.is_some())
        .map(|(i, _)| *i)
}

/// Whether streamed arguments form a whole JSON value (a call with no arguments sends none).
fn arguments_complete(arguments: &str) -> bool {
    arguments.trim().is_empty() || serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_ok()
}
