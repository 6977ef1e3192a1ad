//! `GET /openapi.json`: the OpenAPI 3.1 document of every endpoint, derived from the handlers'
//! `#[utoipa::path]` annotations and the wire types' schemas, so that it cannot drift from
//! the code. Built once; every request gets the same text.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, RefOr};
use utoipa::{Modify, OpenApi, ToResponse, ToSchema};

use crate::error::ErrorEnvelope;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "switchyard",
        description = "The OpenAI Responses API (`/v1/responses`) in front of an \
            OpenAI-compatible chat-completions upstream, with tool calls executed by the service \
            or paused for the client. Every `/v1` endpoint needs `Authorization: Bearer <api \
            key>`. Streams are Server-Sent Events whose `data:` lines are `StreamEvent`s with a \
            `sequence_number`, ending with `data: [DONE]`."
    ),
    paths(
        super::responses::create,
        super::websocket::upgrade,
        super::responses::compact,
        super::responses::retrieve,
        super::responses::delete,
        super::responses::input_items,
        super::responses::submit_tool_outputs,
        super::responses::cancel,
        super::models,
        super::healthz,
        super::readyz,
        super::metrics,
        serve,
    ),
    components(
        schemas(ErrorEnvelope),
        responses(
            BadRequest,
            Unauthorized,
            NotFound,
            MethodNotAllowed,
            RequestTimeout,
            PayloadTooLarge,
            UnsupportedMediaType,
            RateLimited,
            ServerError,
            UpstreamError,
            ServiceUnavailable,
            UpstreamTimeout,
        )
    ),
    modifiers(&V1Layers),
    tags(
        (name = "responses", description = "Responses (runs): create, read, stream, pause and resume, cancel, delete."),
        (name = "models", description = "The models the service routes."),
        (name = "operations", description = "Health, readiness, metrics and this document; no key needed."),
    )
)]
struct ApiDoc;

/// The document as JSON text, made on first use and kept (a clone shares the bytes).
pub fn document() -> Bytes {
    static DOCUMENT: OnceLock<Bytes> = OnceLock::new();
    DOCUMENT
        .get_or_init(|| match ApiDoc::openapi().to_json() {
            Ok(text) => Bytes::from(text),
            // Plain data with string keys always serialises; should it ever fail, say so in
            // the log and serve an empty object rather than fail the start.
            Err(e) => {
                tracing::error!(error = %e, "the OpenAPI document could not be serialised");
                Bytes::from_static(b"{}")
            }
        })
        .clone()
}

/// `GET /openapi.json`
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    operation_id = "openapi",
    summary = "This document",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of every endpoint.", content_type = "application/json", body = Object),
    ),
)]
pub async fn serve(document: Bytes) -> Response {
    ([(CONTENT_TYPE, "application/json")], document).into_response()
}

/// Name of the security scheme of `/v1`.
const API_KEY: &str = "api_key";

/// What the `/v1` layers add to each of its operations: the API key (`authenticate`), and the
/// errors every `/v1` request may get whatever its handler: 401 (no valid key), 429 (the key's
/// request rate), 503 (the database cannot be reached) and 500 (a fault of the service).
struct V1Layers;

impl Modify for V1Layers {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            API_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key of this service (`switchyard keys create`), as \
                         `Authorization: Bearer <key>`.",
                    ))
                    .build(),
            ),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.options,
                &mut item.head,
                &mut item.patch,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                operation.security = Some(vec![SecurityRequirement::new(
                    API_KEY,
                    Vec::<String>::new(),
                )]);
                for (status, name) in [
                    ("401", Unauthorized::response().0),
                    ("429", RateLimited::response().0),
                    ("500", ServerError::response().0),
                    ("503", ServiceUnavailable::response().0),
                ] {
                    operation
                        .responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
                }
            }
        }
    }
}

/// A response of an error: the envelope, with `Retry-After` where the service sends it.
fn error_response(description: &str, retry_after: bool) -> RefOr<utoipa::openapi::Response> {
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(ErrorEnvelope::name())))
            .build(),
    );
    if retry_after {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                )
                .description(Some("Seconds to wait before trying again (always sent)."))
                .build(),
        );
    }
    RefOr::T(response.build())
}

/// The errors of `ApiError` as responses, `#/components/responses/<name>`, for the
/// annotations of the handlers to name.
pub struct BadRequest;
pub struct Unauthorized;
pub struct NotFound;
pub struct MethodNotAllowed;
pub struct RequestTimeout;
pub struct PayloadTooLarge;
pub struct UnsupportedMediaType;
pub struct RateLimited;
pub struct ServerError;
pub struct UpstreamError;
pub struct ServiceUnavailable;
pub struct UpstreamTimeout;

impl<'r> ToResponse<'r> for BadRequest {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`: a field, query parameter or header is \
            missing, mistyped, out of range or over a limit, or names something that does not \
            exist; `param` names it. Codes: `null`, `model_not_found`, \
            `previous_response_not_found`, `idempotency_key_reused`.";
        ("BadRequest", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for Unauthorized {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`authentication_error`, code `invalid_api_key`: no API key, or one \
            that is not valid (wrong or revoked).";
        ("Unauthorized", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for NotFound {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`: no such response in the caller's tenant \
            (`Response with id '…' not found.`).";
        ("NotFound", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for MethodNotAllowed {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`, code `method_not_allowed`.";
        ("MethodNotAllowed", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for RequestTimeout {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`, code `request_timeout`: the body did not \
            arrive within `server.body_read_timeout_seconds`.";
        ("RequestTimeout", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for PayloadTooLarge {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`, code `request_too_large`: the body is over \
            `server.body_limit_bytes`.";
        ("PayloadTooLarge", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for UnsupportedMediaType {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`invalid_request_error`, code `unsupported_media_type`: the \
            `Content-Type` is not JSON.";
        ("UnsupportedMediaType", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for RateLimited {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`requests`, code `rate_limit_exceeded`: over the key's requests a \
            minute or concurrent runs, or the upstream rate limited a request without a stream.";
        ("RateLimited", error_response(description, true))
    }
}

impl<'r> ToResponse<'r> for ServerError {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`server_error`: a fault of the service; the cause is only in its log.";
        ("ServerError", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for UpstreamError {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`server_error`: the upstream model failed before the stream \
            started (codes `upstream_error`, `upstream_unreachable`, \
            `upstream_stream_error`); the response is stored as failed.";
        ("UpstreamError", error_response(description, false))
    }
}

impl<'r> ToResponse<'r> for ServiceUnavailable {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`server_error`, code `service_unavailable`: the database cannot be \
            reached, or the instance is shutting down (for `/metrics`: this process records no \
            metrics).";
        ("ServiceUnavailable", error_response(description, true))
    }
}

impl<'r> ToResponse<'r> for UpstreamTimeout {
    fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
        let description = "`server_error`, code `upstream_timeout`: the upstream model did not \
            answer in time; the response is stored as failed.";
        ("UpstreamTimeout", error_response(description, false))
    }
}
