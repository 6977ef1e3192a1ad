//! `/v1/responses` handlers.

use axum::Extension;
use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::access;
use super::extract::{ApiJson, ApiJsonBytes, ApiQuery};
use super::sse;
use super::state::AppState;
use super::websocket;
use crate::auth::Caller;
use crate::engine::{IdempotencyKey, ItemPage, RunEnd, StartedRun};
use crate::error::ApiError;
use crate::protocol::items::Item;
use crate::protocol::request::{
    CompactRequest, CreateResponse, ListInputItems, ListResponses, RetrieveResponse,
    SubmitToolOutputs,
};
use crate::protocol::response::{Compacted, Deleted, List, ResponseObject};
use crate::store::{RunFilter, RunState};
use crate::time::UnixMillis;
use sha2::{Digest, Sha256};

// The statuses every `/v1` operation may answer (401, 429, 500, 503) are added to each by
// `openapi::V1Layers`; the annotations below name the others.

/// `POST /v1/responses`. With an `Idempotency-Key` header, a retry with the same body gets
/// the same run.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "responses",
    operation_id = "createResponse",
    summary = "Create a response (a run)",
    description = "Runs model turns with tools until the model answers, a client tool is \
        called (the run pauses with `required_action`), or a limit stops it. Without `stream` \
        or `background`, the reply is the Response object once the run stops or pauses; with \
        `stream: true`, Server-Sent Events from `response.created` to the terminal event, then \
        `data: [DONE]`; with `background: true`, the Response object at once, `queued`.",
    params(
        ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255,
            description = "A retry with the same key and the same body bytes gets the same \
                response (24 hours, per tenant); the same key with another body is a 400."),
    ),
    request_body(
        content = CreateResponse,
        examples(
            ("text" = (summary = "A text answer", value = json!({"model": "gpt-4o-mini", "input": "Say hello."}))),
            ("client_tool" = (summary = "A function the client executes: the run may pause", value = json!({
                "model": "gpt-4o-mini",
                "input": "What is the weather in Paris?",
                "tools": [{"type": "function", "name": "get_weather", "description": "Current weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
            }))),
            ("server_tool" = (summary = "Built-in tools the service executes", value = json!({
                "model": "gpt-4o-mini",
                "input": "What is 6 * 7?",
                "tools": [{"type": "mcp", "server_label": "builtin", "allowed_tools": ["calculator"], "require_approval": "never"}]
            }))),
            ("stream" = (summary = "Streamed", value = json!({"model": "gpt-4o-mini", "input": "Say hello.", "stream": true}))),
            ("background" = (summary = "In the background", value = json!({"model": "gpt-4o-mini", "input": "Say hello.", "background": true, "metadata": {"topic": "greeting"}}))),
        ),
    ),
    responses(
        (status = 200, description = "The Response object (it stopped or paused; `queued` for \
            `background`), or its event stream for `stream: true`.",
            content(
                (ResponseObject = "application/json"),
                (super::sse::ServerSentEvent = "text/event-stream"),
            ),
        ),
        (status = 400, response = super::errors::BadRequest),
        (status = 404, response = super::errors::NotFound),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
        (status = 502, response = super::errors::UpstreamError),
        (status = 504, response = super::errors::UpstreamTimeout),
    ),
)]
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
#[utoipa::path(
    post,
    path = "/v1/responses/compact",
    tag = "responses",
    operation_id = "compactResponse",
    summary = "Compact a context window",
    description = "The model summarises the window (the chain of `previous_response_id`, then \
        `input`): the answer is the window's user messages followed by one `compaction` item, \
        to send as the input of a new response. Nothing is stored.",
    request_body(
        content = CompactRequest,
        example = json!({"model": "gpt-4o-mini", "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Sunny, 24C."}
        ]}),
    ),
    responses(
        (status = 200, description = "The compacted window.", body = Compacted),
        (status = 400, response = super::errors::BadRequest),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
        (status = 502, response = super::errors::UpstreamError),
        (status = 504, response = super::errors::UpstreamTimeout),
    ),
)]
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
#[utoipa::path(
    post,
    path = "/v1/responses/{id}/submit_tool_outputs",
    tag = "responses",
    operation_id = "submitToolOutputs",
    summary = "Answer a paused response and resume it (extension)",
    description = "Outputs for every pending call of a paused response (`required_action`), \
        exactly once each, and answers to its approval requests; the same response goes on. \
        The reply is as for creating one: the Response object once the run stops or pauses \
        again, or the stream (numbering continued) with `stream: true`.",
    params(("id" = String, Path, description = "The response's id (`resp_…`).")),
    request_body(
        content = SubmitToolOutputs,
        example = json!({"tool_outputs": [{"tool_call_id": "call_1", "output": "sunny, 24C"}]}),
    ),
    responses(
        (status = 200, description = "The Response object, or its event stream for `stream: true`.",
            content(
                (ResponseObject = "application/json"),
                (super::sse::ServerSentEvent = "text/event-stream"),
            ),
        ),
        (status = 400, response = super::errors::BadRequest),
        (status = 404, response = super::errors::NotFound),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
        (status = 502, response = super::errors::UpstreamError),
        (status = 504, response = super::errors::UpstreamTimeout),
    ),
)]
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
#[utoipa::path(
    post,
    path = "/v1/responses/{id}/cancel",
    tag = "responses",
    operation_id = "cancelResponse",
    summary = "Cancel a response",
    description = "A queued or paused response is cancelled at once; a running one is stopped \
        wherever it runs (the reply waits up to 10 seconds). A response already stopped is \
        returned unchanged.",
    params(("id" = String, Path, description = "The response's id (`resp_…`).")),
    responses(
        (status = 200, description = "The Response object.", body = ResponseObject),
        (status = 404, response = super::errors::NotFound),
    ),
)]
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
        RunEnd::UpstreamFailed(mut failure) => {
            failure.message = format!(
                "{} (response {} is stored as failed)",
                failure.message, started.id
            );
            Err(failure.into())
        }
        RunEnd::ContinuesElsewhere => Err(ApiError::Unavailable(format!(
            "This instance is stopping; response {} goes on on another instance: \
             GET /v1/responses/{} follows it.",
            started.id, started.id
        ))),
    }
}

/// `GET /v1/responses/{id}`, or its event log with `?stream=true`.
#[utoipa::path(
    get,
    path = "/v1/responses/{id}",
    tag = "responses",
    operation_id = "getResponse",
    summary = "A response, or its event stream",
    description = "The Response object; with `stream=true`, its stored event log replayed with \
        the original sequence numbers (after `starting_after`, or the `Last-Event-ID` header), \
        then followed live until the run stops or pauses, then `data: [DONE]`.",
    params(
        ("id" = String, Path, description = "The response's id (`resp_…`)."),
        RetrieveResponse,
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Like `starting_after`, when the query leaves it out."),
    ),
    responses(
        (status = 200, description = "The Response object, or its event stream for `stream=true`.",
            content(
                (ResponseObject = "application/json"),
                (super::sse::ServerSentEvent = "text/event-stream"),
            ),
        ),
        (status = 400, response = super::errors::BadRequest),
        (status = 404, response = super::errors::NotFound),
    ),
)]
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
#[utoipa::path(
    delete,
    path = "/v1/responses/{id}",
    tag = "responses",
    operation_id = "deleteResponse",
    summary = "Delete a response",
    description = "Deletes the response with its items and event log, whatever its state (a \
        run still executing stops at its next save).",
    params(("id" = String, Path, description = "The response's id (`resp_…`).")),
    responses(
        (status = 200, description = "Deleted.", body = Deleted),
        (status = 404, response = super::errors::NotFound),
    ),
)]
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
#[utoipa::path(
    get,
    path = "/v1/responses/{id}/input_items",
    tag = "responses",
    operation_id = "listInputItems",
    summary = "A response's input items",
    description = "The items the response was given (normalised, references resolved) and \
        those `submit_tool_outputs` added; not the chain's earlier items.",
    params(
        ("id" = String, Path, description = "The response's id (`resp_…`)."),
        ListInputItems,
    ),
    responses(
        (status = 200, description = "A page of items.", body = List<Item>),
        (status = 400, response = super::errors::BadRequest),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn input_items(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ListInputItems>,
) -> Result<Json<List<Item>>, ApiError> {
    access::serves(&id);
    let limit = page_limit(query.limit.as_deref())?;
    let descending = page_descending(query.order.as_deref())?;
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

/// `GET /v1/responses`: the caller's responses, or the WebSocket transport with
/// `Upgrade: websocket`.
#[utoipa::path(
    get,
    path = "/v1/responses",
    tag = "responses",
    operation_id = "listResponses",
    summary = "List responses (extension), or the WebSocket transport",
    description = "The caller's responses (its tenant's), newest first, a page at a time: \
        `after` the previous page's `last_id`. Filters: `status`, `model`, `metadata[KEY]=VALUE` \
        (every pair given must match), `created_after` / `created_before` (Unix seconds), \
        `waiting` (paused until the client answers). A `store: false` response is not listed \
        once it stopped.\n\nWith `Upgrade: websocket`: a WebSocket on which each text message \
        is a `response.create` request (the fields of `POST /v1/responses` and `\"type\": \
        \"response.create\"`) and each response's events come back as text messages, the JSON \
        of the SSE events (Open Responses). One response at a time; an error before a response \
        starts is an `error` message with its HTTP `status`, and the socket goes on.",
    params(
        ListResponses,
        ("metadata" = Option<std::collections::BTreeMap<String, String>>, Query,
            style = DeepObject, explode,
            description = "`metadata[KEY]=VALUE`: only responses whose metadata has `KEY` set to `VALUE`."),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol."),
        (status = 200, description = "A page of responses.", body = List<ResponseObject>),
        (status = 400, response = super::errors::BadRequest),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    match upgrade {
        Ok(upgrade) => return Ok(websocket::accept(state, caller, upgrade)),
        // A request that asks for an upgrade but is not a good one is told why.
        Err(refused) if headers.contains_key(axum::http::header::UPGRADE) => {
            return Ok(refused.into_response());
        }
        Err(_) => {}
    }
    let query = query.unwrap_or_default();
    let ApiQuery(listing) = ApiQuery::<ListResponses>::parse(&query)?;
    let filter = run_filter(&listing, metadata_pairs(&query))?;
    let limit = page_limit(listing.limit.as_deref())?;
    let (runs, has_more) = state
        .engine
        .list(&caller.tenant_id, &filter, limit, listing.after.as_deref())
        .await?;
    let data: Vec<ResponseObject> = runs.into_iter().map(|run| run.body).collect();
    Ok(Json(List {
        object: "list",
        first_id: data.first().map(|r| r.id.clone()),
        last_id: data.last().map(|r| r.id.clone()),
        data,
        has_more,
    })
    .into_response())
}

/// The `metadata[KEY]=VALUE` pairs of a query string.
pub(super) fn metadata_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .filter_map(|(name, value)| {
            let key = name.strip_prefix("metadata[")?.strip_suffix(']')?;
            Some((key.to_owned(), value.into_owned()))
        })
        .collect()
}

/// What a listing's filters select, each checked and named when it is wrong.
pub(super) fn run_filter(
    listing: &ListResponses,
    metadata: Vec<(String, String)>,
) -> Result<RunFilter, ApiError> {
    let state = match listing.status.as_deref() {
        None | Some("") => None,
        Some(text) => Some(RunState::parse(text).ok_or_else(|| {
            let names: Vec<String> = RunState::ALL
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            ApiError::invalid(
                "status",
                format!(
                    "Invalid value for 'status': '{text}'. Expected one of {}.",
                    names.join(", ")
                ),
            )
        })?),
    };
    let waiting = match listing.waiting.as_deref() {
        None | Some("") => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(ApiError::invalid(
                "waiting",
                format!("Invalid value for 'waiting': '{other}'. Expected 'true' or 'false'."),
            ));
        }
    };
    let paused = RunState::RequiresAction;
    let (state, not_state) = match waiting {
        None => (state, None),
        // Asking for paused responses and for another status matches none: an impossible
        // pair of states says so to the store.
        Some(true) => match state {
            Some(other) if other != paused => (Some(other), Some(other)),
            _ => (Some(paused), None),
        },
        Some(false) => (state, Some(paused)),
    };
    for (n, (key, _)) in metadata.iter().enumerate() {
        if metadata[..n].iter().any(|(earlier, _)| earlier == key) {
            return Err(ApiError::invalid(
                "metadata",
                format!("Metadata key '{key}' is given twice: a response has one value per key."),
            ));
        }
        if key.is_empty() || key.chars().count() > 64 {
            return Err(ApiError::invalid(
                "metadata",
                format!("Invalid metadata key '{key}': expected 1 to 64 characters."),
            ));
        }
    }
    Ok(RunFilter {
        state,
        not_state,
        model: listing.model.clone().filter(|m| !m.is_empty()),
        metadata,
        created_from: unix_seconds("created_after", listing.created_after.as_deref())?,
        created_before: unix_seconds("created_before", listing.created_before.as_deref())?,
    })
}

/// A time filter in Unix seconds, as milliseconds.
fn unix_seconds(name: &str, text: Option<&str>) -> Result<Option<UnixMillis>, ApiError> {
    match text {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .and_then(|secs| secs.checked_mul(1000))
            .map(|ms| Some(UnixMillis::from_millis(ms)))
            .ok_or_else(|| {
                ApiError::invalid(
                    name,
                    format!("Invalid '{name}': expected a Unix time in seconds, but got '{text}' instead."),
                )
            }),
    }
}

/// A list's `limit`: 1 to 100, 20 without one.
pub(super) fn page_limit(limit: Option<&str>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(20),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(
                "limit",
                format!(
                    "Invalid 'limit': expected an integer between 1 and 100, but got '{text}' instead."
                ),
            )),
        },
    }
}

/// Whether a list's `order` is `desc` (the default) rather than `asc`.
pub(super) fn page_descending(order: Option<&str>) -> Result<bool, ApiError> {
    match order {
        None | Some("desc") => Ok(true),
        Some("asc") => Ok(false),
        Some(other) => Err(ApiError::invalid(
            "order",
            format!("Invalid value: '{other}'. Supported values are: 'asc' and 'desc'."),
        )),
    }
}
