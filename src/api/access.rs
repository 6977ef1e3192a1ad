//! The access log and request ids: a span per request with its method, route and request id
//! (the client's `X-Request-Id`, or a new one), into which a handler records the response id
//! it serves; one line when the response starts (status, duration, bytes).

use std::time::Instant;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::extract::MatchedPath;
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
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        request_id = id,
        response_id = tracing::field::Empty,
    )
}

/// Records the response a request serves in its span (and so on its access line).
pub fn serves(response_id: &str) {
    Span::current().record("response_id", response_id);
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
    tracing::info!(
        target: "switchyard::access",
        status,
        duration_ms = %format_args!("{:.3}", took.as_secs_f64() * 1e3),
        bytes,
        "request"
    );
    let route = route.as_deref().unwrap_or("unmatched");
    crate::metrics::http_request(method.as_str(), route, status, took);
    response
}
