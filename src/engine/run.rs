//! One run's execution: model turns streamed into output items and events, then the final
//! state stored before the terminal event is sent.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::emitter::EventEmitter;
use super::hub::EventHub;
use super::state::transition_allowed;
use super::{RunOutcome, close_incomplete, now_ms};
use crate::llm::{FinishReason, LlmClient, LlmError, ModelEvent, ModelRequest};
use crate::protocol::events::{ErrorDetail, Event};
use crate::protocol::ids;
use crate::protocol::items::{ContentPart, Item, ItemStatus, Message, OutputText};
use crate::protocol::request::CreateResponse;
use crate::protocol::response::{
    IncompleteDetails, ResponseError, ResponseObject, ResponseStatus, Usage,
};
use crate::store::{RunState, RunStore};

/// The model parameters a run uses on every turn.
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

/// How a run stops.
enum Ending {
    Completed,
    Incomplete(&'static str),
    Failed {
        code: &'static str,
        message: String,
        upstream: Option<LlmError>,
    },
}

pub(super) struct RunTask {
    pub store: Arc<dyn RunStore>,
    pub hub: EventHub,
    pub emitter: EventEmitter,
    pub client: Arc<dyn LlmClient>,
    pub request: ModelRequest,
    /// Earlier items of the chain and this run's input.
    pub context: Vec<Item>,
    pub body: ResponseObject,
    pub stop: CancellationToken,
    pub done: Option<oneshot::Sender<RunOutcome>>,
}

/// The assistant message being streamed.
struct OpenMessage {
    output_index: usize,
    item_id: String,
    text: String,
}

impl RunTask {
    pub async fn execute(mut self) {
        let id = self.body.id.clone();
        let started = std::time::Instant::now();
        tracing::info!(response_id = %id, model = %self.body.model, "run started");
        self.emitter
            .emit(Event::Created {
                response: Box::new(self.body.clone()),
            })
            .await;
        self.emitter
            .emit(Event::InProgress {
                response: Box::new(self.body.clone()),
            })
            .await;

        let mut usage = Usage::default();
        let ending = self.model_turn(&mut usage).await;
        self.body.usage = Some(usage);
        let upstream = self.finish(ending).await;

        let response_id: Arc<str> = Arc::from(id.as_str());
        self.hub.close(response_id).await;
        if !self.body.store
            && let Err(e) = self
                .store
                .delete_run(crate::store::DEFAULT_TENANT, &id)
                .await
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

    /// Streams one model turn into output items.
    async fn model_turn(&mut self, usage: &mut Usage) -> Ending {
        let mut request = self.request.clone();
        request.items = self.context.clone();
        request.items.extend(self.body.output.iter().cloned());

        let stream = tokio::select! {
            _ = self.stop.cancelled() => return shutdown_ending(),
            started = self.client.stream(&request) => started,
        };
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(e) => return upstream_ending(e),
        };
        let mut open: Option<OpenMessage> = None;
        let mut finish: Option<FinishReason> = None;
        loop {
            let next = tokio::select! {
                _ = self.stop.cancelled() => {
                    self.close_message(open.take(), ItemStatus::Incomplete).await;
                    return shutdown_ending();
                }
                next = stream.next() => next,
            };
            let Some(next) = next else { break };
            match next {
                Ok(ModelEvent::TextDelta(delta)) => {
                    let message = match &mut open {
                        Some(message) => message,
                        None => open.insert(self.open_message().await),
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
                Ok(ModelEvent::Usage(turn)) => usage.add(&turn),
                Ok(ModelEvent::Finish(reason)) => finish = Some(reason),
                // Tools arrive with the tool registry; a model without tools sends none.
                Ok(ModelEvent::ToolCallDelta { .. } | ModelEvent::ReasoningDelta(_)) => {}
                Err(e) => {
                    self.close_message(open.take(), ItemStatus::Incomplete)
                        .await;
                    return upstream_ending(e);
                }
            }
        }
        let ending = match finish {
            Some(FinishReason::Length) => Ending::Incomplete("max_output_tokens"),
            Some(FinishReason::ContentFilter) => Ending::Incomplete("content_filter"),
            _ => Ending::Completed,
        };
        let status = match ending {
            Ending::Completed => ItemStatus::Completed,
            _ => ItemStatus::Incomplete,
        };
        self.close_message(open.take(), status).await;
        ending
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
            role: crate::protocol::items::Role::Assistant,
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
                item,
            })
            .await;
    }

    /// Stores the final state, then sends the terminal event. Returns the upstream failure,
    /// if that is how the run ended.
    async fn finish(&mut self, ending: Ending) -> Option<LlmError> {
        let id = self.body.id.clone();
        for item in &mut self.body.output {
            close_incomplete(item);
        }
        let (state, upstream) = match ending {
            Ending::Completed => {
                self.body.status = ResponseStatus::Completed;
                self.body.completed_at = Some(now_ms() / 1000);
                (RunState::Completed, None)
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
        debug_assert!(transition_allowed(RunState::InProgress, state));
        if let Err(e) = self
            .store
            .transition(&id, RunState::InProgress, state, &self.body, now_ms())
            .await
        {
            // The run was moved on by someone else (or the database is gone): its stored
            // state stands, and the log gets no second ending.
            tracing::error!(response_id = %id, error = %e, "cannot store the run's final state");
            return upstream;
        }
        let response = Box::new(self.body.clone());
        let event = match state {
            RunState::Completed => Event::Completed { response },
            RunState::Incomplete => Event::Incomplete { response },
            _ => Event::Failed { response },
        };
        self.emitter.emit(event).await;
        if let Err(e) = self.emitter.flush().await {
            tracing::error!(response_id = %id, error = %e, "cannot store the run's events");
        }
        upstream
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
