//! The endpoints about the service itself: the models it routes, liveness, readiness and
//! metrics.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;

use super::errors::ServiceUnavailable;
use super::state::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::protocol::response::{Model, ModelList};

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
pub async fn models(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<ModelList> {
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
    Json(ModelList {
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
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
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
        (status = 503, response = ServiceUnavailable),
    ),
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
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

/// Ready: not stopping, every MCP server has listed its tools once (or has been failing for
/// `tools.mcp_ready_wait_ms`), and the database answers (within a second) with the migrations
/// applied. A load balancer stops routing here as soon as shutdown begins.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "ready",
    summary = "Readiness",
    description = "200 when the database answers within a second with the migrations applied \
        and every configured MCP server has listed its tools once (or has been failing for \
        tools.mcp_ready_wait_ms, 10 s by default); 503 otherwise, naming what it waits for, \
        and as soon as shutdown begins.",
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, response = ServiceUnavailable),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Readiness>, ApiError> {
    if state.stopping.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    let awaited = state.engine.mcp_servers_awaited();
    if !awaited.is_empty() {
        return Err(ApiError::Unavailable(format!(
            "waiting for MCP servers to list their tools: {}",
            awaited.join(", ")
        )));
    }
    let store = state.engine.store();
    match tokio::time::timeout(READY_WAIT, store.ping()).await {
        Ok(Ok(())) => Ok(Json(Readiness {
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
