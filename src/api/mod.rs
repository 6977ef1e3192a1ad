//! HTTP: thin axum handlers that parse, call the engine and render. No SQL here.

mod access;
mod extract;
pub mod openapi;
mod responses;
pub mod sse;
mod websocket;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::Serialize;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};

use crate::auth::{AuthError, Authenticator, Caller};
use crate::engine::{Engine, EngineError};
use crate::error::ApiError;
use crate::protocol::response::{Model, ModelList};
use crate::store::StoreError;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub auth: Arc<Authenticator>,
    pub body_limit: usize,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    pub heartbeat: Duration,
    /// Set as shutdown begins: `/readyz` answers 503 from then on.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit;
    // Every `/v1` route needs the caller's API key (or open mode).
    let v1 = Router::new()
        .route(
            "/v1/responses",
            axum::routing::post(responses::create).get(websocket::upgrade),
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
        .route("/v1/models", get(models))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ));
    // Made once per process (at the first router) and shared by every request.
    let document = openapi::document();
    Router::new()
        .merge(v1)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
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
    let caller = state.auth.authenticate(header).await.map_err(|e| match e {
        AuthError::Missing | AuthError::Invalid(_) => ApiError::Unauthorized(e.to_string()),
        AuthError::RateLimited(wait) => ApiError::RateLimited {
            message: e.to_string(),
            retry_after: wait.as_secs().max(1),
        },
        AuthError::Store(StoreError::Unavailable(message)) => {
            ApiError::Unavailable(format!("The database is unavailable: {message}"))
        }
        AuthError::Store(other) => ApiError::Internal(anyhow::anyhow!(other)),
    })?;
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

/// The models the service routes that the caller's key may use.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "models",
    operation_id = "listModels",
    summary = "The models the service routes",
    description = "Every model the configuration routes that the caller's key may use, in \
        configuration order; `owned_by` is the provider's name. A provider's `*` (any other \
        model) is not listed.",
    responses((status = 200, description = "The models.", body = ModelList)),
)]
async fn models(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<ModelList> {
    let policy = caller.policy();
    let data = state
        .engine
        .models()
        .iter()
        .filter(|(id, _)| policy.is_none_or(|p| p.allows_model(id)))
        .map(|(id, provider)| Model {
            id: id.clone(),
            object: "model",
            created: 0,
            owned_by: provider.clone(),
        })
        .collect();
    axum::Json(ModelList {
        object: "list",
        data,
    })
}

/// `GET /healthz`: `{"status": "ok"}`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(example = "ok")]
    status: &'static str,
}

/// `GET /readyz`: `{"database": "sqlite" | "postgres", "status": "ready"}` (keys in the order
/// they always had).
#[derive(Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// The backend: `sqlite` or `postgres`.
    #[schema(example = "sqlite")]
    database: &'static str,
    /// Always `ready`.
    #[schema(example = "ready")]
    status: &'static str,
}

/// Liveness: 200 while the process serves.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "health",
    summary = "Liveness",
    responses((status = 200, description = "The process serves.", body = Health)),
)]
async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok" })
}

/// The metrics in Prometheus text format. Unauthenticated, as `/healthz` is: keep it off
/// public ingress. The stored-run gauges are sampled now.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    summary = "Metrics (Prometheus text format)",
    description = "HTTP requests, runs, streams, the event writer, the upstream and tools, in \
        the Prometheus text exposition format 0.0.4. No key: keep it off public ingress.",
    responses(
        (status = 200, description = "The metrics.", content_type = "text/plain", body = String),
        (status = 503, response = openapi::ServiceUnavailable),
    ),
)]
async fn metrics(State(state): State<AppState>) -> Response {
    state.engine.sample_metrics().await;
    match crate::metrics::render() {
        Some(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        None => {
            ApiError::Unavailable("metrics are not recorded by this process".into()).into_response()
        }
    }
}

/// Longest a readiness check waits for the database.
const READY_WAIT: Duration = Duration::from_secs(1);

/// Ready: not stopping, and the database answers (within a second) with the migrations
/// applied. A load balancer stops routing here as soon as shutdown begins.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "ready",
    summary = "Readiness",
    description = "200 when the database answers within a second with the migrations applied; \
        503 when it does not, and as soon as shutdown begins.",
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, response = openapi::ServiceUnavailable),
    ),
)]
async fn readyz(State(state): State<AppState>) -> Result<axum::Json<Readiness>, ApiError> {
    if state.stopping.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    let store = state.engine.store();
    match tokio::time::timeout(READY_WAIT, store.ping()).await {
        Ok(Ok(())) => Ok(axum::Json(Readiness {
            database: store.backend().as_str(),
            status: "ready",
        })),
        Ok(Err(e)) => Err(ApiError::Unavailable(format!("database not ready: {e}"))),
        Err(_) => Err(ApiError::Unavailable(format!(
            "database not ready: no answer within {} ms",
            READY_WAIT.as_millis()
        ))),
    }
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
            EngineError::Unavailable(message) => {
                ApiError::Unavailable(format!("The database is unavailable: {message}"))
            }
            EngineError::Upstream(failure) if failure.rate_limited.is_some() => {
                ApiError::RateLimited {
                    message: failure.message,
                    retry_after: failure.rate_limited.flatten().unwrap_or(1),
                }
            }
            EngineError::Upstream(failure) => match failure.timeout {
                true => ApiError::UpstreamTimeout {
                    message: failure.message,
                },
                false => ApiError::Upstream {
                    message: failure.message,
                    code: failure.code.into(),
                },
            },
            EngineError::Internal(message) => ApiError::Internal(anyhow::anyhow!(message)),
        }
    }
}
