//! Server tool calls of one model turn: each starts as soon as its arguments are complete,
//! runs concurrently with the others (bounded), under its timeout and the run's cancellation.
//! A call's failure — invalid arguments, an error, a timeout, a panic — is its result.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tools::registry::RegisteredTool;
use crate::tools::{ToolContext, ToolErrorKind, ToolOptions, ToolOutput, ToolResult};

/// A server call as the model made it.
#[derive(Clone, Debug)]
pub struct ServerCall {
    pub name: String,
    pub server_label: String,
    pub arguments: String,
    pub options: ToolOptions,
    /// The approval request this call executes (or is denied) under.
    pub approval_request_id: Option<String>,
    /// The id of its `mcp_call` item, fixed when the call is dispatched so that a checkpoint
    /// and the event log name it alike.
    pub item_id: String,
}

/// Progress of a call, tagged with its slot (its place in the model's call order).
pub enum CallEvent {
    Output(usize, String),
    Done(usize, ToolResult),
}

pub struct TurnCalls {
    pub calls: Vec<ServerCall>,
    max_concurrency: usize,
    /// A result's text beyond this is cut (with a marker saying so).
    max_output_bytes: usize,
    /// Made with the first call: most turns have none, and every open run holds its turn
    /// (a channel alone is over 2 KiB).
    running: Option<Running>,
}

/// The calls' tasks and the channel their progress comes back on.
struct Running {
    tasks: JoinSet<()>,
    events: mpsc::UnboundedSender<CallEvent>,
    receiver: mpsc::UnboundedReceiver<CallEvent>,
    limit: Arc<Semaphore>,
}

impl TurnCalls {
    pub fn new(max_concurrency: usize, max_output_bytes: usize) -> TurnCalls {
        TurnCalls {
            calls: Vec::new(),
            max_concurrency,
            max_output_bytes,
            running: None,
        }
    }

    /// Takes a call that is started later (`run`) or never (`fail`); returns its slot.
    pub fn add(&mut self, call: ServerCall) -> usize {
        self.calls.push(call);
        self.calls.len() - 1
    }

    /// The next progress of a call. Waits while none is running, as the channel would: the
    /// turn holds a sender for as long as it lives.
    pub async fn next_event(&mut self) -> Option<CallEvent> {
        match &mut self.running {
            Some(running) => running.receiver.recv().await,
            None => std::future::pending().await,
        }
    }

    fn running(&mut self) -> &mut Running {
        let max_concurrency = self.max_concurrency;
        self.running.get_or_insert_with(|| {
            let (events, receiver) = mpsc::unbounded_channel();
            Running {
                tasks: JoinSet::new(),
                events,
                receiver,
                limit: Arc::new(Semaphore::new(max_concurrency.max(1))),
            }
        })
    }

    /// Starts executing a call now; returns its slot.
    pub fn start(
        &mut self,
        call: ServerCall,
        tool: Arc<RegisteredTool>,
        context: ToolContext,
    ) -> usize {
        let slot = self.add(call);
        self.run(slot, tool, context);
        slot
    }

    /// Starts executing the call in `slot`.
    pub fn run(&mut self, slot: usize, tool: Arc<RegisteredTool>, context: ToolContext) {
        let arguments = self.calls[slot].arguments.clone();
        let max_output_bytes = self.max_output_bytes;
        // The call's span (its own when traces are on, else its run's).
        let span = crate::telemetry::tool_span(&self.calls[slot].name, &context.call_id);
        let running = self.running();
        let events = running.events.clone();
        let limit = running.limit.clone();
        // The set aborts unfinished calls when the turn is dropped (cancel, shutdown). The
        // call logs in its span.
        running.tasks.spawn(tracing::Instrument::instrument(
            async move {
                let Ok(_permit) = limit.acquire_owned().await else {
                    return;
                };
                let output_events = events.clone();
                let output = ToolOutput::new(move |text| {
                    let _ = output_events.send(CallEvent::Output(slot, text));
                });
                let mut result = execute(&tool, context, &arguments, output).await;
                result.cut_to(max_output_bytes);
                let _ = events.send(CallEvent::Done(slot, result));
            },
            span,
        ));
    }

    /// Records a call that is not executed, with the reason as its error result.
    pub fn refuse(&mut self, call: ServerCall, reason: String) -> usize {
        tracing::warn!(tool = %call.name, reason = %reason, "tool call refused");
        let slot = self.add(call);
        self.fail(slot, ToolResult::failure(ToolErrorKind::Refused, reason));
        slot
    }

    /// Ends the call in `slot` without executing it.
    pub fn fail(&mut self, slot: usize, result: ToolResult) {
        let _ = self.running().events.send(CallEvent::Done(slot, result));
    }
}

/// Parses and validates the arguments, then runs the handler under its timeout, turning a
/// panic into an error result. Logs start and end.
async fn execute(
    tool: &RegisteredTool,
    context: ToolContext,
    arguments: &str,
    output: ToolOutput,
) -> ToolResult {
    let name = tool.name().to_string();
    let started = Instant::now();
    let call_id = context.call_id.clone();
    tracing::info!(call_id = %call_id, tool = %name, "tool call started");
    let result = run_handler(tool, context, arguments, output).await;
    let took = started.elapsed();
    let elapsed_ms = took.as_millis() as u64;
    let outcome = match result.error {
        None => "ok",
        Some(ToolErrorKind::Tool) => "tool_error",
        Some(ToolErrorKind::InvalidArguments) => "invalid_arguments",
        Some(ToolErrorKind::Refused) => "refused",
        Some(ToolErrorKind::Transport { .. }) => "transport_failure",
        Some(ToolErrorKind::Timeout) => "timeout",
        Some(ToolErrorKind::Panic) => "panic",
        Some(ToolErrorKind::Cancelled) => "cancelled",
    };
    crate::metrics::tool_call(&tool.server_label, &name, outcome, took);
    crate::telemetry::tool_outcome(outcome);
    match result.error {
        None => {
            tracing::info!(call_id = %call_id, tool = %name, elapsed_ms, outcome, "tool call finished")
        }
        Some(kind) if kind.is_fault() => {
            tracing::error!(call_id = %call_id, tool = %name, elapsed_ms, outcome, error = %result.text, "tool call finished")
        }
        Some(_) => {
            tracing::warn!(call_id = %call_id, tool = %name, elapsed_ms, outcome, error = %result.text, "tool call finished")
        }
    }
    result
}

async fn run_handler(
    tool: &RegisteredTool,
    context: ToolContext,
    arguments: &str,
    output: ToolOutput,
) -> ToolResult {
    let name = tool.name();
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let arguments: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => {
            return ToolResult::failure(
                ToolErrorKind::InvalidArguments,
                format!(
                    "The arguments for '{name}' are not valid JSON: {e}. Call the tool again with a JSON object."
                ),
            );
        }
    };
    if let Err(problems) = tool.validate(&arguments) {
        return ToolResult::failure(
            ToolErrorKind::InvalidArguments,
            format!(
                "Invalid arguments for '{name}': {problems}. Call the tool again with arguments matching its schema."
            ),
        );
    }
    let timeout = tool.options.timeout.unwrap_or(Duration::from_secs(30));
    let cancel: CancellationToken = context.cancel.clone();
    let call = AssertUnwindSafe(tool.handler.call(context, arguments, output)).catch_unwind();
    tokio::select! {
        _ = cancel.cancelled() => ToolResult::failure(ToolErrorKind::Cancelled, format!("The call of '{name}' was cancelled.")),
        finished = tokio::time::timeout(timeout, call) => match finished {
            Err(_) => {
                // Tell the handler to stop whatever it still does.
                cancel.cancel();
                ToolResult::failure(
                    ToolErrorKind::Timeout,
                    format!("The tool '{name}' did not finish within {} ms.", timeout.as_millis()),
                )
            }
            Ok(Err(_panic)) => ToolResult::failure(
                ToolErrorKind::Panic,
                format!("The tool '{name}' failed unexpectedly."),
            ),
            Ok(Ok(result)) => result,
        },
    }
}
