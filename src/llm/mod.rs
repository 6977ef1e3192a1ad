//! The upstream model. `LlmClient` speaks in Responses terms (items in, model events out) so
//! the engine never sees a provider's wire format; `openai` implements it over the
//! chat-completions streaming API in the dialect of its provider's `profile`, `think` finds
//! `<think>` blocks in streamed text, `resilient` adds retries, concurrency caps and
//! fallbacks, and `router` picks the client of a model.

pub mod openai;
pub mod profile;
pub mod resilient;
mod router;
pub mod sse;
mod think;

pub use router::ModelRouter;

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;
use serde_json::Value;

use crate::protocol::response::Usage;
use crate::protocol::transcript::Entry;

/// What the engine asks of a model for one turn.
#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    pub model: String,
    pub instructions: Option<String>,
    /// The whole context, oldest first: earlier turns of the chain, the input, and this run's
    /// output so far.
    pub items: Vec<Entry>,
    pub tools: Vec<ToolSpec>,
    /// `auto`, `none`, `required`, or `{"type":"function","name":…}`.
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub max_output_tokens: Option<u64>,
    /// `text.format` when it asks for JSON.
    pub response_format: Option<Value>,
    pub reasoning_effort: Option<String>,
    pub user: Option<String>,
}

/// A tool as the model sees it: a function with a JSON Schema.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Value,
    pub strict: Option<bool>,
}

/// One piece of a streamed model turn.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// A piece of tool call `index`: the first piece carries id and name.
    ToolCallDelta {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Other(String),
}

impl FinishReason {
    pub fn parse(text: &str) -> FinishReason {
        match text {
            "stop" | "end_turn" => FinishReason::Stop,
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_string()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the upstream model: {0}")]
    Connect(String),
    #[error("the upstream model did not {what} within {} ms", after.as_millis())]
    Timeout { what: &'static str, after: Duration },
    #[error("the upstream model answered {status}: {message}")]
    Status {
        status: u16,
        message: String,
        /// How long the upstream asked to wait before trying again (`Retry-After`).
        retry_after: Option<Duration>,
    },
    #[error("the upstream model's stream broke: {0}")]
    Protocol(String),
}

impl LlmError {
    /// What a client is told: what happened, without the upstream's own words (they may name
    /// internal hosts, or part of a key); those go to the log.
    pub fn client_message(&self) -> String {
        match self {
            LlmError::Connect(_) => "The upstream model could not be reached.".into(),
            LlmError::Timeout { what, after } => format!(
                "The upstream model did not {what} within {} ms.",
                after.as_millis()
            ),
            LlmError::Status { status: 429, .. } => {
                "The upstream model is rate limited (HTTP 429); try again later.".into()
            }
            LlmError::Status { status, .. } => {
                format!("The upstream model answered HTTP {status}.")
            }
            LlmError::Protocol(_) => "The upstream model's stream broke off.".into(),
        }
    }

    /// The `code` shown to clients for this failure.
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::Connect(_) => "upstream_unreachable",
            LlmError::Timeout { .. } => "upstream_timeout",
            LlmError::Status { status: 429, .. } => "upstream_rate_limited",
            LlmError::Status { .. } => "upstream_error",
            LlmError::Protocol(_) => "upstream_stream_error",
        }
    }
}

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, LlmError>> + Send>>;

#[async_trait]
pub trait LlmClient: Send + Sync + 'static {
    /// Starts one streamed model turn. Errors before the first event (connection, status,
    /// first-byte timeout) come back here; later ones inside the stream.
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, LlmError>;
}
