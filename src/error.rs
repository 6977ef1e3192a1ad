//! `ApiError`: every error a client can see, rendered as the OpenAI error envelope
//! `{"error": {"message", "type", "param", "code"}}` (SPEC §10), and the one conversion into it
//! from each layer below (the engine's errors, upstream failures, authentication). A fault of
//! the service is logged with its cause chain; the client sees a generic message.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::AuthError;
use crate::engine::{EngineError, UpstreamFailure, UpstreamFailureKind};
use crate::protocol::field::FieldError;
use crate::store::StoreError;

/// The body of every HTTP error (SPEC §10): all four keys always present.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// Fields in the order the body always had (alphabetical), so its bytes are unchanged.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// A machine code (`model_not_found`, `invalid_api_key`, …), or `null` for plain
    /// validation errors.
    #[schema(required)]
    pub code: Option<String>,
    pub message: String,
    /// The bad field as a path (`input[0].content`), a header name, or `null`.
    #[schema(required)]
    pub param: Option<String>,
    /// `invalid_request_error`, `authentication_error`, `requests` (429) or `server_error`.
    #[serde(rename = "type")]
    #[schema(example = "invalid_request_error")]
    pub kind: &'static str,
}

/// What a 503 tells a client to wait before trying again, in seconds.
const UNAVAILABLE_RETRY_AFTER: u64 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is wrong; `param` names the field.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
        code: Option<String>,
    },
    /// 401: no API key, or one that is not valid.
    #[error("{0}")]
    Unauthorized(String),
    /// 404 with the given message.
    #[error("{0}")]
    NotFound(String),
    /// 405 for a known path with the wrong method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 413: the body is over the configured limit.
    #[error("request body too large")]
    PayloadTooLarge { limit: usize },
    /// 408: the request body did not arrive in time.
    #[error("request body timeout")]
    RequestTimeout { seconds: u64 },
    /// 415: the body is not JSON.
    #[error("unsupported content type")]
    UnsupportedMediaType,
    /// 502: the upstream model failed before the stream started.
    #[error("upstream error: {message}")]
    Upstream { message: String, code: String },
    /// 504: the upstream model did not answer in time.
    #[error("upstream timeout: {message}")]
    UpstreamTimeout { message: String },
    /// 429: a limit of the caller's key; it may try again after `retry_after` seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    /// 503: not ready (database unreachable) or shutting down; worth retrying shortly.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// 500: a fault of ours; the cause is logged, the client sees a generic message.
    #[error("internal error: {}", cause_chain(.0.as_ref()))]
    Internal(anyhow::Error),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        let param = param.into();
        ApiError::InvalidRequest {
            message: message.into(),
            param: (!param.is_empty()).then_some(param),
            code: None,
        }
    }

    pub fn invalid_with_code(
        param: impl Into<String>,
        message: impl Into<String>,
        code: &str,
    ) -> ApiError {
        ApiError::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
            code: Some(code.into()),
        }
    }

    pub fn response_not_found(id: &str) -> ApiError {
        ApiError::NotFound(format!("Response with id '{id}' not found."))
    }

    /// Seconds a client should wait before trying again, where that is known.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited { retry_after, .. } => Some(*retry_after),
            ApiError::Unavailable(_) => Some(UNAVAILABLE_RETRY_AFTER),
            _ => None,
        }
    }

    pub fn status_code(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Upstream { .. } => StatusCode::BAD_GATEWAY,
            ApiError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error as the WebSocket transport sends it (Open Responses): an `error` event with
    /// the HTTP status it would have had, and a code that is always set (the type when the
    /// error has no code of its own).
    pub fn websocket_event(&self) -> serde_json::Value {
        self.log_fault();
        let (kind, message, param, code) = self.envelope();
        json!({
            "type": "error",
            "status": self.status_code().as_u16(),
            "error": {"type": kind, "code": code.unwrap_or_else(|| kind.to_string()),
                      "message": message, "param": param},
        })
    }

    /// A fault of ours goes to the log with its whole cause chain (the client sees a generic
    /// message).
    fn log_fault(&self) {
        if let ApiError::Internal(cause) = self {
            tracing::error!(error = %cause_chain(cause.as_ref()), "internal error");
        }
    }

    /// `(type, message, param, code)` as the client sees them.
    /// The message a client is shown (a fault's generic one, its cause logged), for a page
    /// that shows it in its own way.
    pub fn shown_message(&self) -> String {
        self.log_fault();
        self.envelope().1
    }

    fn envelope(&self) -> (&'static str, String, Option<String>, Option<String>) {
        match self {
            ApiError::InvalidRequest {
                message,
                param,
                code,
            } => (
                "invalid_request_error",
                message.clone(),
                param.clone(),
                code.clone(),
            ),
            ApiError::Unauthorized(message) => (
                "authentication_error",
                message.clone(),
                None,
                Some("invalid_api_key".into()),
            ),
            ApiError::NotFound(message) => ("invalid_request_error", message.clone(), None, None),
            ApiError::MethodNotAllowed => (
                "invalid_request_error",
                "Method not allowed for this path.".into(),
                None,
                Some("method_not_allowed".into()),
            ),
            ApiError::PayloadTooLarge { limit } => (
                "invalid_request_error",
                format!("Request body too large: the limit is {limit} bytes."),
                None,
                Some("request_too_large".into()),
            ),
            ApiError::RequestTimeout { seconds } => (
                "invalid_request_error",
                format!("The request body did not arrive within {seconds} seconds."),
                None,
                Some("request_timeout".into()),
            ),
            ApiError::UnsupportedMediaType => (
                "invalid_request_error",
                "Expected a JSON request body with 'Content-Type: application/json'.".into(),
                None,
                Some("unsupported_media_type".into()),
            ),
            ApiError::Upstream { message, code } => {
                ("server_error", message.clone(), None, Some(code.clone()))
            }
            ApiError::UpstreamTimeout { message } => (
                "server_error",
                message.clone(),
                None,
                Some("upstream_timeout".into()),
            ),
            ApiError::RateLimited { message, .. } => (
                "requests",
                message.clone(),
                None,
                Some("rate_limit_exceeded".into()),
            ),
            ApiError::Unavailable(message) => (
                "server_error",
                message.clone(),
                None,
                Some("service_unavailable".into()),
            ),
            ApiError::Internal(_) => (
                "server_error",
                "The server had an error while processing your request.".into(),
                None,
                Some("server_error".into()),
            ),
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> ApiError {
        ApiError::invalid(e.param, e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log_fault();
        let status = self.status_code();
        let retry_after = self.retry_after();
        let (kind, message, param, code) = self.envelope();
        let logged = code.as_deref().unwrap_or(kind);
        let logged = crate::api::access::ErrorCode(logged.into());
        let body = ErrorEnvelope {
            error: ErrorBody {
                code,
                message,
                param,
                kind,
            },
        };
        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(logged);
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// A 503 for a database that cannot be reached, naming why.
fn database_unavailable(cause: &StoreError) -> ApiError {
    let why = match cause {
        StoreError::Unavailable(cause) => cause.to_string(),
        other => other.to_string(),
    };
    ApiError::Unavailable(format!("The database is unavailable: {why}"))
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::Invalid(field, code) => ApiError::InvalidRequest {
                message: field.message,
                param: (!field.param.is_empty()).then_some(field.param),
                code: code.map(str::to_string),
            },
            EngineError::NotFound(id) => ApiError::response_not_found(&id),
            EngineError::Missing(message) => ApiError::NotFound(message),
            EngineError::ShuttingDown => ApiError::Unavailable(
                "The service is shutting down; retry on another instance.".into(),
            ),
            EngineError::RateLimited {
                message,
                retry_after_secs,
            } => ApiError::RateLimited {
                message,
                retry_after: retry_after_secs,
            },
            EngineError::Unavailable(cause) => database_unavailable(&cause),
            EngineError::Upstream(failure) => failure.into(),
            EngineError::Internal(cause) => ApiError::Internal(anyhow::Error::new(cause)),
        }
    }
}

/// An upstream failure before any stream (SPEC §10, §14): 400 for a request the upstream
/// refused (with its code and field), 504 for a timeout, 429 while it is rate limited, 502
/// otherwise.
impl From<UpstreamFailure> for ApiError {
    fn from(failure: UpstreamFailure) -> ApiError {
        let message = failure.message;
        match failure.kind {
            UpstreamFailureKind::Refused { code, param } => ApiError::InvalidRequest {
                message,
                param,
                code,
            },
            UpstreamFailureKind::Timeout => ApiError::UpstreamTimeout { message },
            UpstreamFailureKind::RateLimited { retry_after_secs } => ApiError::RateLimited {
                message,
                retry_after: retry_after_secs.unwrap_or(1),
            },
            UpstreamFailureKind::Failed { code } => ApiError::Upstream {
                message,
                code: code.into(),
            },
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        match e {
            AuthError::Missing | AuthError::Invalid(_) => ApiError::Unauthorized(e.to_string()),
            AuthError::RateLimited(wait) => ApiError::RateLimited {
                message: e.to_string(),
                retry_after: wait.as_secs().max(1),
            },
            AuthError::Store(cause) if cause.is_transient() => database_unavailable(&cause),
            AuthError::Store(cause) => ApiError::Internal(anyhow::Error::new(cause)),
        }
    }
}

/// An error and its sources as one line, `error: cause: its cause`; a source whose text is
/// already part of the line (an error that prints its cause) is not repeated.
pub fn cause_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Layer {
        #[error("cannot store the run")]
        Outer(#[source] std::io::Error),
        #[error("database error: {0}")]
        Repeating(#[source] std::io::Error),
    }

    #[test]
    fn a_cause_chain_names_every_cause_once() {
        let disk = || std::io::Error::other("disk full");
        assert_eq!(
            cause_chain(&Layer::Outer(disk())),
            "cannot store the run: disk full"
        );
        assert_eq!(
            cause_chain(&Layer::Repeating(disk())),
            "database error: disk full"
        );
    }

    #[tokio::test]
    async fn an_internal_engine_error_is_a_generic_500_that_keeps_its_sqlx_cause() {
        use sqlx::Connection;
        let mut db = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let refused = sqlx::query("SELECT * FROM responses")
            .execute(&mut db)
            .await
            .unwrap_err();
        let error = ApiError::from(EngineError::from(StoreError::from(refused)));
        assert_eq!(error.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
        let ApiError::Internal(fault) = &error else {
            panic!("{error:?}")
        };
        // The sqlx error itself travels down the chain, not its text.
        let sqlx_error = fault
            .chain()
            .find_map(|cause| cause.downcast_ref::<sqlx::Error>());
        assert!(
            matches!(sqlx_error, Some(sqlx::Error::Database(_))),
            "{fault:?}"
        );
        let line = cause_chain(fault.as_ref());
        assert_eq!(
            line.matches("no such table: responses").count(),
            1,
            "{line}"
        );
        let (_, message, _, _) = error.envelope();
        assert_eq!(
            message,
            "The server had an error while processing your request."
        );
    }
}
