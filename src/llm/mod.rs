//! The upstream model. `LlmClient` speaks in Responses terms (items in, model events out) so
//! the engine never sees a provider's wire format; `openai` implements it over the
//! chat-completions streaming API in the dialect of its provider's `profile`, `think` finds
//! `<think>` blocks in streamed text, `refusal` reads an upstream's error replies and says who
//! must act on them, `resilient` adds retries, concurrency caps and fallbacks, `router` picks
//! the client of a model, and `probe` asks each provider for its model list.

mod chunk;
pub mod opaque;
pub mod openai;
pub mod probe;
pub mod profile;
mod refusal;
pub mod resilient;
mod router;
pub mod sse;
pub mod text_tools;
mod think;

pub use refusal::{Blame, ErrorBody, Refusal};
pub use router::ModelRouter;

use std::collections::HashMap;
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
    /// Server tools the model is shown under another name than their own, by (server label,
    /// own name): the history's calls of them are shown under that name.
    pub renamed: HashMap<(String, String), String>,
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
        /// The provider's signature of the call, to be sent back with it ([`opaque`]).
        signature: Option<String>,
    },
    /// A call written in the text (a text tool protocol) that could not be read, as written,
    /// and why.
    MalformedCall {
        protocol: &'static str,
        raw: String,
        reason: String,
    },
    /// Fragments of the provider's reasoning blocks (OpenRouter's `reasoning_details`), to be
    /// sent back with the turn ([`opaque`]).
    ReasoningDetails(Vec<Value>),
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
    #[error("the upstream model answered {status}: {body}")]
    Status {
        status: u16,
        /// What its error reply said, in its own words (for the log; a client sees what
        /// [`LlmError::refusal`] and [`LlmError::client_message`] make of it). Boxed: every
        /// streamed event is a `Result` with this error beside it, and moves its size.
        body: Box<ErrorBody>,
        /// How long the upstream asked to wait before trying again (`Retry-After`).
        retry_after: Option<Duration>,
    },
    #[error("the upstream model's stream broke: {0}")]
    Protocol(String),
}

impl LlmError {
    /// Who must act on the failure: the client, the operator (credentials, URL), or nobody
    /// (the upstream may pass on another try).
    pub fn blame(&self) -> Blame {
        match self {
            LlmError::Status { status, body, .. } => Blame::of(*status, body),
            _ => Blame::Upstream,
        }
    }

    /// The request the upstream refused, as the client is told, when the request was at
    /// fault: the upstream's own message (secrets hidden), code and field.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            LlmError::Status { status, body, .. } if self.blame() == Blame::Request => {
                Some(Refusal::new(*status, body))
            }
            _ => None,
        }
    }

    /// What a client is told of a failure that is not the request's: what happened, without
    /// the upstream's own words (they may name internal hosts, or part of a key); those go to
    /// the log.
    pub fn client_message(&self) -> String {
        if let Some(refusal) = self.refusal() {
            return refusal.message;
        }
        match (self, self.blame()) {
            (LlmError::Connect(_), _) => "The upstream model could not be reached.".into(),
            (LlmError::Timeout { what, after }, _) => format!(
                "The upstream model did not {what} within {} ms.",
                after.as_millis()
            ),
            (LlmError::Status { status: 429, .. }, _) => {
                "The upstream model is rate limited (HTTP 429); try again later.".into()
            }
            (LlmError::Status { status, .. }, Blame::Credentials) => format!(
                "The upstream model refused this service's credentials (HTTP {status}); the \
                 operator must check the provider's API key."
            ),
            (LlmError::Status { status, .. }, Blame::Address) => format!(
                "The upstream model's API answered HTTP {status} (not found); the operator \
                 must check the provider's base_url (it usually ends in /v1)."
            ),
            (LlmError::Status { status, .. }, _) => {
                format!("The upstream model answered HTTP {status}.")
            }
            (LlmError::Protocol(_), _) => "The upstream model's stream broke off.".into(),
        }
    }

    /// The detailed code of this failure, for the `error` event, logs and metrics (a bounded
    /// set; a refused request's own code is in its [`Refusal`]).
    pub fn code(&self) -> &'static str {
        match (self, self.blame()) {
            (LlmError::Connect(_), _) => "upstream_unreachable",
            (LlmError::Timeout { .. }, _) => "upstream_timeout",
            (LlmError::Status { status: 429, .. }, _) => "upstream_rate_limited",
            (LlmError::Status { .. }, Blame::Request) => "upstream_invalid_request",
            (LlmError::Status { .. }, Blame::Credentials) => "upstream_auth_failed",
            (LlmError::Status { .. }, Blame::Address) => "upstream_not_found",
            (LlmError::Status { .. }, Blame::Upstream) => "upstream_error",
            (LlmError::Protocol(_), _) => "upstream_stream_error",
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
