//! The errors of [`ApiError`](crate::error::ApiError) as OpenAPI responses
//! (`#/components/responses/<name>`), for the handlers' `#[utoipa::path]` annotations to name
//! and the document to list.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{ToResponse, ToSchema};

use crate::error::ErrorEnvelope;

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
            `previous_response_not_found`, `idempotency_key_reused`. Also a request the \
            upstream model refused (its HTTP 400, 413, 422, or a model it does not have): the \
            upstream's message (secrets hidden) and code (`context_length_exceeded`, \
            `model_not_found`, its own, or `null`), `param` the Responses field where it maps; \
            the response is stored as failed.";
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
            `upstream_stream_error`; `upstream_auth_failed` when it refused the service's own \
            key, `upstream_not_found` when it answered 404 for anything but a model, a \
            `base_url` without `/v1`); the response is stored as failed.";
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
