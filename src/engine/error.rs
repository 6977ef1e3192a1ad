//! What the engine answers when it cannot do what was asked: the client's mistakes (with the
//! field at fault), states the client may wait out, the upstream model's failures as a client
//! sees them, and faults of the service, whose cause travels with them for the log. The api
//! layer turns each into an HTTP error (`From<EngineError> for ApiError`, in `src/error.rs`).

use std::sync::Arc;

use crate::llm::LlmError;
use crate::protocol::events::ErrorDetail;
use crate::protocol::field::FieldError;
use crate::store::StoreError;

/// The cause of a fault, cheap to clone, with its own chain of sources.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{}", .0.message)]
    Invalid(FieldError, Option<&'static str>),
    #[error("response {0} not found")]
    NotFound(String),
    /// Something else the caller names is not there (or is another tenant's): the message
    /// says what.
    #[error("{0}")]
    Missing(String),
    #[error("the service is shutting down")]
    ShuttingDown,
    /// The database cannot be reached: the client may try again.
    #[error(transparent)]
    Unavailable(StoreError),
    /// A limit of the caller's API key: it may try again after a while.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    /// The upstream model failed a request that has no run (a compaction).
    #[error("{}", .0.message)]
    Upstream(UpstreamFailure),
    /// A fault of ours; the cause is for the log.
    #[error(transparent)]
    Internal(Cause),
}

impl From<FieldError> for EngineError {
    fn from(e: FieldError) -> EngineError {
        EngineError::Invalid(e, None)
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> EngineError {
        match e {
            e if e.is_transient() => EngineError::Unavailable(e),
            other => EngineError::Internal(Arc::new(other)),
        }
    }
}

/// An upstream failure, as a client sees it: what happened, without the upstream's own words
/// (those go to the log) — but for a request the upstream refused, whose words (secrets
/// hidden) tell the client what to change.
#[derive(Clone, Debug)]
pub struct UpstreamFailure {
    pub kind: UpstreamFailureKind,
    pub message: String,
}

/// How the upstream failed, which decides the HTTP status a client gets without a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamFailureKind {
    /// The request was at fault (400): the upstream's own code
    /// (`context_length_exceeded`, `model_not_found`, …, when it gave one) and the Responses
    /// field it names.
    Refused {
        code: Option<String>,
        param: Option<String>,
    },
    /// It did not answer in time (504).
    Timeout,
    /// It was still rate limited after the retries (429), asking to wait this many seconds
    /// when it said.
    RateLimited { retry_after_secs: Option<u64> },
    /// Any other failure (502), with its detailed code (`upstream_error`,
    /// `upstream_unreachable`, `upstream_stream_error`, `upstream_auth_failed`,
    /// `upstream_not_found`).
    Failed { code: &'static str },
}

impl From<LlmError> for UpstreamFailure {
    fn from(error: LlmError) -> UpstreamFailure {
        if let Some(refusal) = error.refusal() {
            return UpstreamFailure {
                kind: UpstreamFailureKind::Refused {
                    code: refusal.code,
                    param: refusal.param,
                },
                message: refusal.message,
            };
        }
        let kind = match &error {
            LlmError::Timeout { .. } => UpstreamFailureKind::Timeout,
            LlmError::Status {
                status: 429,
                retry_after,
                ..
            } => UpstreamFailureKind::RateLimited {
                retry_after_secs: retry_after.map(|wait| wait.as_secs().max(1)),
            },
            other => UpstreamFailureKind::Failed { code: other.code() },
        };
        UpstreamFailure {
            kind,
            message: error.client_message(),
        }
    }
}

impl UpstreamFailure {
    /// The failure as the stream's `error` event carries it (SPEC §7 E): a refused request is
    /// the client's `invalid_request_error` with the upstream's code and field; anything else
    /// a `server_error` with the detailed code.
    pub fn detail(&self) -> ErrorDetail {
        let (kind, code, param) = match &self.kind {
            UpstreamFailureKind::Refused { code, param } => {
                ("invalid_request_error", code.clone(), param.clone())
            }
            UpstreamFailureKind::Timeout => ("server_error", Some("upstream_timeout".into()), None),
            UpstreamFailureKind::RateLimited { .. } => {
                ("server_error", Some("upstream_rate_limited".into()), None)
            }
            UpstreamFailureKind::Failed { code } => ("server_error", Some(code.to_string()), None),
        };
        ErrorDetail {
            kind: kind.into(),
            code,
            message: self.message.clone(),
            param,
        }
    }

    /// `response.error.code`, from the standard's closed set: a refused prompt is
    /// `invalid_prompt`, a rate limit `rate_limit_exceeded`, anything else `server_error`.
    pub fn response_code(&self) -> &'static str {
        match self.kind {
            UpstreamFailureKind::Refused { .. } => "invalid_prompt",
            UpstreamFailureKind::RateLimited { .. } => "rate_limit_exceeded",
            _ => "server_error",
        }
    }
}
