//! `GET /openapi.json`: the OpenAPI 3.1 document of every endpoint, derived from the handlers'
//! `#[utoipa::path]` annotations and the wire types' schemas, so that it cannot drift from
//! the code. Built once; every request gets the same text.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, Ref, RefOr};
use utoipa::{Modify, OpenApi, ToResponse};

use super::errors::{
    BadRequest, MethodNotAllowed, NotFound, PayloadTooLarge, RateLimited, RequestTimeout,
    ServerError, ServiceUnavailable, Unauthorized, UnsupportedMediaType, UpstreamError,
    UpstreamTimeout,
};
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
        super::responses::list,
        super::responses::compact,
        super::responses::retrieve,
        super::responses::delete,
        super::responses::input_items,
        super::responses::submit_tool_outputs,
        super::responses::cancel,
        super::conversations::create,
        super::conversations::retrieve,
        super::conversations::update,
        super::conversations::delete,
        super::conversations::add_items,
        super::conversations::list_items,
        super::conversations::retrieve_item,
        super::conversations::delete_item,
        super::service::models,
        super::service::healthz,
        super::service::readyz,
        super::service::metrics,
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
        (name = "conversations", description = "Conversations kept on the server: their metadata and items."),
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
