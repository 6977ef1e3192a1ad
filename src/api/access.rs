//! The access log and request ids: a span per request with its method, route and request id
//! (the client's `X-Request-Id`, or a new one), into which a handler records the response id
//! it serves; one line when the response starts (status, duration, bytes).

use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody as _;
use axum::extract::MatchedPath;
use axum::http::{Request, Response};
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

/// The access line: logged when the response's headers go out (a stream's own length is in
/// its run's `run stopped` line).
pub fn log(response: &Response<Body>, latency: Duration, _: &Span) {
    let bytes = response.body().size_hint().exact();
    tracing::info!(
        target: "switchyard::access",
        status = response.status().as_u16(),
        duration_ms = %format_args!("{:.3}", latency.as_secs_f64() * 1e3),
        bytes,
        "request"
    );
}
