//! `/v1/responses` handlers.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::extract::{ApiJson, ApiJsonBytes, ApiQuery};
use super::sse;
use super::{AppState, access};
use crate::auth::Caller;
use crate::engine::{IdempotencyKey, ItemPage, RunEnd, StartedRun, UpstreamFailure};
use crate::error::ApiError;
use crate::protocol::items::Item;
use crate::protocol::request::{
    CompactRequest, CreateResponse, ListInputItems, RetrieveResponse, SubmitToolOutputs,
};
use crate::protocol::response::{Compacted, Deleted, List, ResponseObject};
use sha2::{Digest, Sha256};

/// `POST /v1/responses`. With an `Idempotency-Key` header, a retry with the same body gets
/// the same run.
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiJsonBytes(request, body): ApiJsonBytes<CreateResponse>,
) -> Result<Response, ApiError> {
    let idempotency = idempotency_key(&headers, &body)?;
    let started = state.engine.create(&caller, request, idempotency).await?;
    reply(&state, started).await
}

/// `POST /v1/responses/compact`
pub async fn compact(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(request): ApiJson<CompactRequest>,
) -> Result<Json<Compacted>, ApiError> {
    Ok(Json(state.engine.compact(&caller, request).await?))
}

/// Longest accepted `Idempotency-Key`.
const IDEMPOTENCY_KEY_MAX: usize = 255;

fn idempotency_key(headers: &HeaderMap, body: &[u8]) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().unwrap_or_default().trim();
    let visible = key.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX || !visible {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!(
                "Invalid 'Idempotency-Key' header: expected 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters."
            ),
        ));
    }
    let digest = Sha256::digest(body);
    let request_hash = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Some(IdempotencyKey {
        key: key.to_string(),
        request_hash,
    }))
}

/// `POST /v1/responses/{id}/submit_tool_outputs`
pub async fn submit_tool_outputs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(submission): ApiJson<SubmitToolOutputs>,
) -> Result<Response, ApiError> {
    access::serves(&id);
    let started = state
        .engine
        .submit_tool_outputs(&caller, &id, submission)
        .await?;
    reply(&state, started).await
}

/// `POST /v1/responses/{id}/cancel`
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ResponseObject>, ApiError> {
    access::serves(&id);
    Ok(Json(state.engine.cancel(&caller.tenant_id, &id).await?))
}

/// The stream of a started run, or its response object once it stops (or pauses again).
async fn reply(state: &AppState, started: StartedRun) -> Result<Response, ApiError> {
    access::serves(&started.id);
    if let Some(events) = started.events {
        return Ok(sse::response(events, state.heartbeat));
    }
    if let Some(response) = started.immediate {
        return Ok(Json(response).into_response());
    }
    // The run goes on if this client goes away: the task owns it, not this future.
    let outcome = started.outcome.await.map_err(|_| {
        ApiError::Internal(anyhow::anyhow!(
            "run {} ended without an outcome",
            started.id
        ))
    })?;
    match outcome.end {
        RunEnd::Stopped => Ok(Json(outcome.response).into_response()),
        RunEnd::UpstreamFailed(failure) => Err(upstream_error(&started.id, failure)),
        RunEnd::ContinuesElsewhere => Err(ApiError::Unavailable(format!(
            "This instance is stopping; response {} goes on on another instance: \
             GET /v1/responses/{} follows it.",
            started.id, started.id
        ))),
    }
}

/// An upstream failure before any stream: 504 for timeouts, 502 otherwise (SPEC §10).
fn upstream_error(response_id: &str, failure: UpstreamFailure) -> ApiError {
    let message = format!(
        "{} (response {response_id} is stored as failed)",
        failure.message
    );
    if let Some(retry_after) = failure.rate_limited {
        return ApiError::RateLimited {
            message,
            retry_after: retry_after.unwrap_or(1),
        };
    }
    match failure.timeout {
        true => ApiError::UpstreamTimeout { message },
        false => ApiError::Upstream {
            message,
            code: failure.code.into(),
        },
    }
}

/// `GET /v1/responses/{id}`, or its event log with `?stream=true`.
pub async fn retrieve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<RetrieveResponse>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    access::serves(&id);
    if query.stream == Some(true) {
        let after = match query.starting_after {
            Some(n) => Some(n),
            None => last_event_id(&headers)?,
        };
        let events = state.engine.follow(&caller.tenant_id, &id, after).await?;
        return Ok(sse::response(events, state.heartbeat));
    }
    Ok(Json(state.engine.get(&caller.tenant_id, &id).await?).into_response())
}

/// `Last-Event-ID` works like `starting_after` (SPEC §7).
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid(
                "Last-Event-ID",
                "Invalid 'Last-Event-ID' header: expected a sequence number.",
            )
        })
}

/// `DELETE /v1/responses/{id}`
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    access::serves(&id);
    state.engine.delete(&caller.tenant_id, &id).await?;
    Ok(Json(Deleted {
        id,
        object: "response",
        deleted: true,
    }))
}

/// `GET /v1/responses/{id}/input_items`
pub async fn input_items(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListInputItems>,
) -> Result<Json<List<Item>>, ApiError> {
    access::serves(&id);
    let limit = match query.limit.as_deref() {
        None => 20,
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(
                    "limit",
                    format!(
                        "Invalid 'limit': expected an integer between 1 and 100, but got '{text}' instead."
                    ),
                ));
            }
        },
    };
    let descending = match query.order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::invalid(
                "order",
                format!("Invalid value: '{other}'. Supported values are: 'asc' and 'desc'."),
            ));
        }
    };
    let page = ItemPage {
        limit,
        descending,
        after: query.after,
    };
    let (items, has_more) = state
        .engine
        .input_items(&caller.tenant_id, &id, &page)
        .await?;
    Ok(Json(List {
        object: "list",
        first_id: items.first().map(|i| i.id().to_string()),
        last_id: items.last().map(|i| i.id().to_string()),
        data: items,
        has_more,
    }))
}
