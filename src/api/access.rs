//! The access log and request ids: a span per request with its method, route, request id
//! (the client's `X-Request-Id`, or a new one) and client address, into which authentication
//! records the caller's tenant and key and a handler the response id it serves; one line when
//! the response starts (status, duration, bytes, and an error's code). Probes (`/healthz`,
//! `/readyz`, `/metrics`) log theirs at DEBUG: every few seconds from each probe and scraper,
//! they would drown the requests at INFO.

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::extract::{ConnectInfo, MatchedPath};
use axum::http::{Request, Response};
use axum::middleware::Next;
use tower_http::request_id::{MakeRequestId, RequestId};
use tracing::Span;

/// The longest client request id kept; a longer one, or one with characters other than
/// letters, digits and `-_.:/+=@`, is replaced by a new one (it is on every log line).
const REQUEST_ID_MAX: usize = 128;

/// Drops a client's `X-Request-Id` that is too long or has odd characters, so that a new one
/// is made in its place.
pub fn screen_request_id(mut request: Request<Body>) -> Request<Body> {
    let acceptable = |id: &[u8]| {
        !id.is_empty()
            && id.len() <= REQUEST_ID_MAX
            && id
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(b))
    };
    if let Some(id) = request.headers().get(X_REQUEST_ID)
        && !acceptable(id.as_bytes())
    {
        request.headers_mut().remove(X_REQUEST_ID);
    }
    request
}

const X_REQUEST_ID: &str = "x-request-id";

/// A new request id when the client sent none: a UUID.
#[derive(Clone, Copy)]
pub struct NewRequestId;

impl MakeRequestId for NewRequestId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        id.parse().ok().map(RequestId::new)
    }
}

/// The request's span.
pub fn span(request: &Request<Body>) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let id = request
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| tracing::field::display(address));
    // The request's span, at `target`, with the fields every request logs and `extra` ones.
    macro_rules! request_span {
        ($target:expr $(, $($extra:tt)+)?) => {
            tracing::info_span!(
                target: $target,
                "request",
                method = %request.method(),
                route,
                request_id = id,
                client,
                tenant = tracing::field::Empty,
                key_id = tracing::field::Empty,
                response_id = tracing::field::Empty,
                $($($extra)+)?
            )
        };
    }
    if !crate::telemetry::on() {
        return request_span!(module_path!());
    }
    // Probes and scrapes are not traced (a trace every few seconds from each probe): their span
    // has a target the traces leave out.
    if is_probe(route) {
        return request_span!(PROBE_TARGET);
    }
    // With traces: named and typed as OpenTelemetry's HTTP server spans, in the client's trace.
    let span = request_span!(
        module_path!(),
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, request.headers());
    span
}

/// Records the response a request serves in its span (and so on its access line).
pub fn serves(response_id: &str) {
    Span::current().record("response_id", response_id);
}

/// Records who is calling in the request's span (and so on its access line).
pub fn called_by(caller: &crate::auth::Caller) {
    let span = Span::current();
    span.record("tenant", caller.tenant_id.as_str());
    if let Some(key) = caller.key_id() {
        span.record("key_id", key);
    }
}

/// An error response's `error.code` (else its `error.type`), for the access line.
#[derive(Clone)]
pub struct ErrorCode(pub Box<str>);

/// The target of a probe's request span, which traces leave out.
pub const PROBE_TARGET: &str = "switchyard::api::probe";

/// The routes of probes and scrapers, whose access lines are at DEBUG.
fn is_probe(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics")
}

/// The access line and the request metrics, when the response's headers go out (a stream's
/// own length is in its run's `run stopped` line). Runs inside the request's span.
pub async fn log(request: Request<Body>, next: Next) -> Response<Body> {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let bytes = response.body().size_hint().exact();
    let error_code = response.extensions().get::<ErrorCode>().map(|c| &*c.0);
    let route = route.as_deref().unwrap_or("unmatched");
    let duration_ms = format_args!("{:.3}", took.as_secs_f64() * 1e3);
    macro_rules! access_line {
        ($level:expr) => {
            tracing::event!(
                target: "switchyard::access",
                $level,
                status,
                duration_ms = %duration_ms,
                bytes,
                error_code,
                "request"
            )
        };
    }
    if is_probe(route) {
        access_line!(tracing::Level::DEBUG);
    } else {
        access_line!(tracing::Level::INFO);
    }
    if crate::telemetry::on() {
        tracing::Span::current().record("http.response.status_code", status);
    }
    crate::metrics::http_request(method.as_str(), route, status, took);
    response
}
