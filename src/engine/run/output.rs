//! A run's output as it is written: each item's events in the order the standard gives them
//! (added, its parts and deltas, done), its place in `body.output`, and what the model will
//! see of it in the transcript. Items never interleave: the turn opens one at a time.

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::emitter::EventEmitter;
use super::super::executor::ServerCall;
use super::super::toolset::Listing;
use crate::protocol::events::{Event, ReasoningPart};
use crate::protocol::ids;
use crate::protocol::items::{
    ContentPart, CustomToolCall, FunctionCall, Item, ItemStatus, LocalShellCall,
    McpApprovalRequest, McpCall, McpListTools, Message, OutputText, Reasoning, Role, ShellAction,
};
use crate::protocol::response::{
    CallKind, PendingApproval, PendingCall, PendingFunction, ResponseObject,
};
use crate::protocol::transcript::Entry;
use crate::seal::ReasoningSeal;
use crate::tools::{ToolErrorKind, ToolResult};

pub(in crate::engine) struct Output {
    pub emitter: EventEmitter,
    pub body: ResponseObject,
    /// What the model has seen of this run's output (hidden calls included).
    pub transcript: Vec<Entry>,
    /// Reasoning items carry their reasoning sealed, for the client to give back.
    pub sealing: Option<Sealing>,
}

/// How a run seals its reasoning: with the service's key, for its tenant.
pub(in crate::engine) struct Sealing {
    pub seal: Arc<ReasoningSeal>,
    pub tenant: String,
}

/// The assistant message being streamed.
pub(in crate::engine) struct OpenMessage {
    output_index: usize,
    item_id: String,
    text: String,
}

impl OpenMessage {
    pub fn push(&mut self, delta: &str) -> Event {
        self.text.push_str(delta);
        Event::OutputTextDelta {
            item_id: self.item_id.clone(),
            output_index: self.output_index,
            content_index: 0,
            delta: delta.to_string(),
            logprobs: Vec::new(),
        }
    }
}

/// The reasoning item being streamed. With `reasoning.summary` asked for, the reasoning streams
/// as the item's one summary part (a chat-completions upstream gives no separate summary: its
/// reasoning is its own summary); otherwise as its `reasoning_text` content.
pub(in crate::engine) struct OpenReasoning {
    output_index: usize,
    item_id: String,
    text: String,
    summary: bool,
}

impl OpenReasoning {
    pub fn push(&mut self, delta: &str) -> Event {
        self.text.push_str(delta);
        let (item_id, output_index, delta) =
            (self.item_id.clone(), self.output_index, delta.to_string());
        match self.summary {
            true => Event::ReasoningSummaryTextDelta {
                item_id,
                output_index,
                summary_index: 0,
                delta,
            },
            false => Event::ReasoningTextDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
            },
        }
    }
}

/// A client function call shown live while the model streams it: its place and item id.
#[derive(Clone, Debug)]
pub(in crate::engine) struct LiveCall {
    pub output_index: usize,
    pub item_id: String,
    /// The namespace of the called function, if it has one.
    pub namespace: Option<String>,
}

impl Output {
    /// Adds an item at the end of the output; returns its index.
    fn push(&mut self, item: Item) -> usize {
        self.body.output.push(item);
        self.body.output.len() - 1
    }

    /// Emits `output_item.added` of the item at `output_index`.
    async fn added(&mut self, output_index: usize) {
        let item = self.body.output[output_index].clone();
        self.emitter
            .emit(Event::OutputItemAdded { output_index, item })
            .await;
    }

    /// Replaces the item at `output_index` with its final form, emits `output_item.done`
    /// and shows it to the model.
    async fn done(&mut self, output_index: usize, item: Item) {
        self.body.output[output_index] = item.clone();
        self.emitter
            .emit(Event::OutputItemDone {
                output_index,
                item: item.clone(),
            })
            .await;
        self.transcript.push(Entry::Item(item));
    }

    pub async fn open_message(&mut self) -> OpenMessage {
        let item_id = ids::new(ids::MESSAGE);
        let output_index = self.push(Item::Message(Message::assistant(item_id.clone())));
        self.added(output_index).await;
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
    pub async fn close_message(&mut self, open: Option<OpenMessage>, status: ItemStatus) {
        let Some(open) = open else { return };
        let part = ContentPart::OutputText(OutputText::new(open.text.clone()));
        let item = Item::Message(Message {
            id: open.item_id.clone(),
            role: Role::Assistant,
            content: vec![part.clone()],
            status: Some(status),
            phase: None,
        });
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
        self.done(open.output_index, item).await;
    }

    /// Opens a reasoning item (SPEC §13).
    pub async fn open_reasoning(&mut self) -> OpenReasoning {
        let item_id = ids::new(ids::REASONING);
        let summary = self
            .body
            .reasoning
            .get("summary")
            .is_some_and(|s| s.is_string());
        let item = Item::Reasoning(Reasoning {
            id: item_id.clone(),
            summary: Vec::new(),
            content: Some(Vec::new()),
            encrypted_content: None,
            status: Some(ItemStatus::InProgress),
        });
        let output_index = self.push(item);
        self.added(output_index).await;
        // The part its text streams into: a summary part, or a `reasoning_text` part.
        let event = match summary {
            true => Event::ReasoningSummaryPartAdded {
                item_id: item_id.clone(),
                output_index,
                summary_index: 0,
                part: json!({"type": "summary_text", "text": ""}),
            },
            false => Event::ReasoningPartAdded {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                part: ReasoningPart::ReasoningText {
                    text: String::new(),
                },
            },
        };
        self.emitter.emit(event).await;
        OpenReasoning {
            output_index,
            item_id,
            text: String::new(),
            summary,
        }
    }

    /// Ends the open reasoning item (if any): its text or summary done, item done.
    pub async fn close_reasoning(&mut self, open: Option<OpenReasoning>, status: ItemStatus) {
        let Some(open) = open else { return };
        let (item_id, output_index) = (open.item_id.clone(), open.output_index);
        let mut item = Reasoning {
            id: item_id.clone(),
            summary: Vec::new(),
            content: None,
            encrypted_content: self
                .sealing
                .as_ref()
                .map(|s| s.seal.seal(&s.tenant, &open.text)),
            status: Some(status),
        };
        if open.summary {
            let part = json!({"type": "summary_text", "text": open.text});
            self.emitter
                .emit(Event::ReasoningSummaryTextDone {
                    item_id: item_id.clone(),
                    output_index,
                    summary_index: 0,
                    text: open.text,
                })
                .await;
            self.emitter
                .emit(Event::ReasoningSummaryPartDone {
                    item_id,
                    output_index,
                    summary_index: 0,
                    part: part.clone(),
                })
                .await;
            item.summary.push(part);
        } else {
            let text = open.text;
            self.emitter
                .emit(Event::ReasoningTextDone {
                    item_id: item_id.clone(),
                    output_index,
                    content_index: 0,
                    text: text.clone(),
                })
                .await;
            self.emitter
                .emit(Event::ReasoningPartDone {
                    item_id,
                    output_index,
                    content_index: 0,
                    part: ReasoningPart::ReasoningText { text: text.clone() },
                })
                .await;
            item.content = Some(vec![json!({"type": "reasoning_text", "text": text})]);
        }
        self.done(output_index, Item::Reasoning(item)).await;
    }

    /// A reasoning item holding provider state ([`crate::llm::opaque`]): no text, shown whole
    /// before what the turn shows next.
    pub async fn opaque_reasoning(&mut self, state: &crate::llm::opaque::Opaque) {
        let mut reasoning = Reasoning {
            id: ids::new(ids::REASONING),
            summary: Vec::new(),
            content: None,
            encrypted_content: Some(state.encode()),
            status: Some(ItemStatus::InProgress),
        };
        let output_index = self.push(Item::Reasoning(reasoning.clone()));
        self.added(output_index).await;
        reasoning.status = Some(ItemStatus::Completed);
        self.done(output_index, Item::Reasoning(reasoning)).await;
    }

    /// A whole assistant message from known text pieces (the output of a `return_direct`
    /// tool), streamed as deltas.
    pub async fn text_message(&mut self, deltas: Vec<String>) {
        let mut message = self.open_message().await;
        for delta in deltas {
            let event = message.push(&delta);
            self.emitter.emit(event).await;
        }
        self.close_message(Some(message), ItemStatus::Completed)
            .await;
    }

    /// Opens a client function call's item and sends the arguments received so far.
    pub async fn open_function_call(
        &mut self,
        call_id: &str,
        name: &str,
        arguments: &str,
        namespace: Option<String>,
    ) -> LiveCall {
        let item_id = ids::new(ids::FUNCTION_CALL);
        let output_index = self.push(Item::FunctionCall(FunctionCall {
            id: item_id.clone(),
            call_id: call_id.to_string(),
            name: name.to_string(),
            arguments: String::new(),
            status: Some(ItemStatus::InProgress),
            namespace: namespace.clone(),
        }));
        self.added(output_index).await;
        let live = LiveCall {
            output_index,
            item_id,
            namespace,
        };
        if !arguments.is_empty() {
            self.function_arguments(&live, arguments).await;
        }
        live
    }

    /// More arguments of a client function call shown live.
    pub async fn function_arguments(&mut self, live: &LiveCall, delta: &str) {
        let event = Event::FunctionCallArgumentsDelta {
            item_id: live.item_id.clone(),
            output_index: live.output_index,
            delta: delta.to_string(),
        };
        self.emitter.emit(event).await;
    }

    /// Closes a client function call's item; a completed one is a call the run waits for.
    pub async fn close_function_call(
        &mut self,
        live: LiveCall,
        call_id: String,
        name: String,
        arguments: String,
        status: ItemStatus,
    ) -> Option<PendingCall> {
        let item = Item::FunctionCall(FunctionCall {
            id: live.item_id.clone(),
            call_id: call_id.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
            status: Some(status),
            namespace: live.namespace.clone(),
        });
        let pending = (status == ItemStatus::Completed).then(|| PendingCall {
            id: call_id,
            kind: CallKind::Function,
            function: PendingFunction {
                name: name.clone(),
                arguments: arguments.clone(),
            },
        });
        if pending.is_some() {
            self.emitter
                .emit(Event::FunctionCallArgumentsDone {
                    item_id: live.item_id,
                    output_index: live.output_index,
                    name,
                    arguments,
                })
                .await;
        }
        self.done(live.output_index, item).await;
        pending
    }

    /// Emits the whole item of a complete client call of any kind: a call the run waits for.
    /// An invalid shell action is refused with the reason.
    pub async fn client_call(
        &mut self,
        kind: CallKind,
        call_id: &str,
        name: &str,
        arguments: &str,
        namespace: Option<String>,
    ) -> Result<PendingCall, String> {
        if kind != CallKind::Function {
            return self
                .client_item(kind, call_id, name, arguments, namespace)
                .await;
        }
        let live = self
            .open_function_call(call_id, name, arguments, namespace)
            .await;
        let pending = self
            .close_function_call(
                live,
                call_id.to_string(),
                name.to_string(),
                arguments.to_string(),
                ItemStatus::Completed,
            )
            .await;
        pending.ok_or_else(|| "The call could not be shown.".to_string())
    }

    /// Emits the whole item of a complete custom or shell call: a call the run waits for.
    /// An invalid shell action is refused with the reason.
    pub async fn client_item(
        &mut self,
        kind: CallKind,
        call_id: &str,
        name: &str,
        arguments: &str,
        namespace: Option<String>,
    ) -> Result<PendingCall, String> {
        let parsed: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        let (item, input) = match kind {
            CallKind::Custom => {
                // The model was shown one string argument `input`; anything else is the input.
                let input = parsed
                    .get("input")
                    .and_then(Value::as_str)
                    .map_or_else(|| arguments.to_string(), str::to_string);
                let item = Item::CustomToolCall(CustomToolCall {
                    id: ids::new(ids::CUSTOM_TOOL_CALL),
                    call_id: call_id.to_string(),
                    name: name.to_string(),
                    input: String::new(),
                    status: Some(ItemStatus::InProgress),
                    namespace,
                });
                (item, Some(input))
            }
            CallKind::LocalShell | CallKind::Function => {
                let action: ShellAction = serde_json::from_value(parsed).map_err(|e| {
                    format!("The local_shell call is invalid: {e}. Give 'command' as an array of strings.")
                })?;
                let item = Item::LocalShellCall(LocalShellCall {
                    id: ids::new(ids::LOCAL_SHELL_CALL),
                    call_id: call_id.to_string(),
                    action,
                    status: Some(ItemStatus::InProgress),
                });
                (item, None)
            }
        };
        let item_id = item.id().to_string();
        let output_index = self.push(item.clone());
        self.added(output_index).await;
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
            _ => arguments.to_string(),
        };
        self.done(output_index, done).await;
        Ok(PendingCall {
            id: call_id.to_string(),
            kind,
            function: PendingFunction {
                name: name.to_string(),
                arguments,
            },
        })
    }

    /// A server call that needs the client's approval: an `mcp_approval_request` item, and
    /// the request the run will wait for.
    pub async fn approval_request(&mut self, call: &ServerCall) -> PendingApproval {
        let request = McpApprovalRequest {
            id: ids::new(ids::MCP_APPROVAL_REQUEST),
            server_label: call.server_label.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            status: Some(ItemStatus::Completed),
        };
        let pending = PendingApproval {
            id: request.id.clone(),
            server_label: request.server_label.clone(),
            name: request.name.clone(),
            arguments: request.arguments.clone(),
        };
        let item = Item::McpApprovalRequest(request);
        let output_index = self.push(item.clone());
        self.added(output_index).await;
        self.done(output_index, item).await;
        pending
    }

    /// Announces a tool server's tools (`mcp_list_tools`).
    pub async fn list_tools(&mut self, shown: Listing) {
        let item_id = ids::new(ids::MCP_LIST_TOOLS);
        let failed = shown.error.is_some();
        let mut listing = McpListTools {
            id: item_id.clone(),
            server_label: shown.server_label,
            tools: shown.tools,
            error: shown.error,
            status: Some(ItemStatus::InProgress),
        };
        let output_index = self.push(Item::McpListTools(listing.clone()));
        self.added(output_index).await;
        self.emitter
            .emit(Event::McpListToolsInProgress {
                item_id: item_id.clone(),
                output_index,
            })
            .await;
        let event = match failed {
            true => Event::McpListToolsFailed {
                item_id,
                output_index,
            },
            false => Event::McpListToolsCompleted {
                item_id,
                output_index,
            },
        };
        self.emitter.emit(event).await;
        listing.status = Some(match failed {
            true => ItemStatus::Failed,
            false => ItemStatus::Completed,
        });
        self.done(output_index, Item::McpListTools(listing)).await;
    }

    /// Opens a server call's `mcp_call` item: added, arguments, in progress.
    pub async fn open_call(&mut self, call: &ServerCall) -> usize {
        let item_id = call.item_id.clone();
        // Added with no arguments: they arrive in the delta, as OpenAI streams them (a client
        // that concatenates the deltas onto the added item would otherwise see them twice).
        let announced = McpCall {
            arguments: String::new(),
            ..running_item(call)
        };
        let output_index = self.push(Item::McpCall(announced));
        self.added(output_index).await;
        self.body.output[output_index] = Item::McpCall(running_item(call));
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
                item_id,
                output_index,
            })
            .await;
        output_index
    }

    /// Closes a server call's item with its result. The item is not shown to the model here:
    /// the turn's results reach it together, in the model's call order.
    pub async fn close_call(
        &mut self,
        call: &ServerCall,
        output_index: usize,
        result: &ToolResult,
    ) -> Item {
        let item = Item::McpCall(call_item(call, result));
        self.body.output[output_index] = item.clone();
        let item_id = call.item_id.clone();
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
}

/// The `mcp_call` item of a call that is running.
pub(super) fn running_item(call: &ServerCall) -> McpCall {
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

/// The `mcp_call` item of a finished call.
pub(super) fn call_item(call: &ServerCall, result: &ToolResult) -> McpCall {
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
        output,
        error,
        status: Some(status),
        // `output` stays a string (SDKs type it so): the images are parts of `data`.
        data: result.client_data(),
        ..running_item(call)
    }
}
