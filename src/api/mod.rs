//! HTTP: thin axum handlers that parse, call the engine and render. No SQL here.
//!
//! `router` (here) puts the routes together; `responses` and `websocket` serve
//! `/v1/responses`, `service` the models, health, readiness and metrics; `extract` parses
//! bodies and queries into errors that name the field, `sse` writes event streams, `access`
//! logs and tags each request, `state` is what every handler shares, `openapi` and `errors`
//! make the OpenAPI document.

pub(crate) mod access;
mod conversations;
mod errors;
mod extract;
pub mod openapi;
mod responses;
mod service;
pub mod sse;
mod state;
mod ui;
mod websocket;

pub use state::AppState;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};

use crate::error::ApiError;

pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit;
    // Every `/v1` route needs the caller's API key (or open mode).
    let v1 = Router::new()
        .route(
            "/v1/responses",
            axum::routing::post(responses::create).get(responses::list),
        )
        .route(
            "/v1/responses/compact",
            axum::routing::post(responses::compact),
        )
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route(
            "/v1/responses/{id}/submit_tool_outputs",
            axum::routing::post(responses::submit_tool_outputs),
        )
        .route(
            "/v1/responses/{id}/cancel",
            axum::routing::post(responses::cancel),
        )
        .route(
            "/v1/conversations",
            axum::routing::post(conversations::create),
        )
        .route(
            "/v1/conversations/{id}",
            get(conversations::retrieve)
                .post(conversations::update)
                .delete(conversations::delete),
        )
        .route(
            "/v1/conversations/{id}/items",
            get(conversations::list_items).post(conversations::add_items),
        )
        .route(
            "/v1/conversations/{id}/items/{item_id}",
            get(conversations::retrieve_item).delete(conversations::delete_item),
        )
        .route("/v1/models", get(service::models))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ));
    // Made once per process (at the first router) and shared by every request.
    let document = openapi::document();
    let mut pages = Router::new();
    if state.ui.enabled {
        pages = ui::router();
    }
    Router::new()
        .merge(v1)
        .merge(pages)
        .route("/healthz", get(service::healthz))
        .route("/readyz", get(service::readyz))
        .route("/metrics", get(service::metrics))
        // Not under /v1, as /metrics: no key needed.
        .route(
            "/openapi.json",
            get(move || openapi::serve(document.clone())),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            panic_response,
        ))
        .layer(axum::middleware::from_fn(access::log))
        // A span per request, carrying its request id (and the response id once known): what is
        // logged while serving it says which request it was; one access line when it answers.
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(access::span)
                .on_request(())
                .on_response(())
                .on_failure(()),
        )
        // The client's `X-Request-Id`, or a new one; echoed on the response.
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(access::NewRequestId))
        .layer(tower::util::MapRequestLayer::new(access::screen_request_id))
        .with_state(state)
}

/// Finds the caller of a `/v1` request from its API key (401 without a valid one, 429 over
/// its request rate) and hands it to the handler.
async fn authenticate(
    State(state): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<Response, ApiError> {
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let caller = state.auth.authenticate(header).await?;
    access::called_by(&caller);
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal(anyhow::anyhow!("a request handler panicked")).into_response()
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("Invalid URL ({method} {})", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
