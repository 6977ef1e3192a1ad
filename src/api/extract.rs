//! Extractors whose rejections are `ApiError`s naming the bad field, so malformed input gets
//! the OpenAI error envelope instead of axum's plain-text replies.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::state::AppState;
use crate::error::ApiError;
use crate::protocol::field::describe_serde_error;

/// A JSON body.
pub struct ApiJson<T>(pub T);

/// A JSON body with the exact bytes it came as (to recognise a retried request).
pub struct ApiJsonBytes<T>(pub T, pub Bytes);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let ApiJsonBytes(value, _) = ApiJsonBytes::from_request(req, state).await?;
        Ok(ApiJson(value))
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJsonBytes<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json");
        if !content_type.to_ascii_lowercase().contains("json") {
            return Err(ApiError::UnsupportedMediaType);
        }
        let read = tokio::time::timeout(state.body_timeout, Bytes::from_request(req, state));
        let bytes = read
            .await
            .map_err(|_| ApiError::RequestTimeout {
                seconds: state.body_timeout.as_secs(),
            })?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge {
                        limit: state.body_limit,
                    }
                } else {
                    ApiError::invalid(
                        "",
                        format!("Cannot read the request body: {}", rejection.body_text()),
                    )
                }
            })?;
        let value = parse_json(&bytes)?;
        Ok(ApiJsonBytes(value, bytes))
    }
}

/// Parses JSON, naming the field of a type error and the position of a syntax error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize(&mut deserializer) {
        Ok(value) => {
            deserializer.end().map_err(|e| {
                ApiError::invalid(
                    "",
                    format!("We could not parse the JSON body of your request: {e}."),
                )
            })?;
            Ok(value)
        }
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                return Err(ApiError::invalid(
                    "",
                    format!("We could not parse the JSON body of your request: {inner}."),
                ));
            }
            Err(describe_serde_error(&path, &inner.to_string()).into())
        }
    }
}

/// A query string.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        ApiQuery::parse(parts.uri.query().unwrap_or_default())
    }
}

impl<T: DeserializeOwned> ApiQuery<T> {
    /// Parses a query string (without its `?`).
    pub fn parse(query: &str) -> Result<ApiQuery<T>, ApiError> {
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded_parse(query));
        serde_path_to_error::deserialize(deserializer)
            .map(ApiQuery)
            .map_err(|e| {
                let path = e.path().to_string();
                describe_serde_error(&path, &e.into_inner().to_string()).into()
            })
    }
}

fn form_urlencoded_parse(query: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(query.as_bytes())
}
