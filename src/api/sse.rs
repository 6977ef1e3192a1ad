//! Server-Sent Events framing (SPEC §7): `event:` + `data:` + `id:` per event, `: ping` after
//! a quiet interval, `data: [DONE]` after the terminal event.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::StreamExt;

use crate::engine::EventStream;
use crate::protocol::events::is_terminal;
use crate::store::EventRecord;

const PING: &[u8] = b": ping\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

/// One event as an SSE frame.
pub fn frame(event: &EventRecord) -> Bytes {
    let mut out = String::with_capacity(event.data.len() + event.event_type.len() + 32);
    out.push_str("event: ");
    out.push_str(&event.event_type);
    out.push_str("\ndata: ");
    out.push_str(&event.data);
    out.push_str("\nid: ");
    out.push_str(&event.sequence_number.to_string());
    out.push_str("\n\n");
    Bytes::from(out)
}

/// A streaming response over the given events. `[DONE]` follows when the events end after
/// a terminal event (a replay may pass the terminal event of a pause and go on), or end at
/// once (a reader resuming after the last event).
pub fn response(events: EventStream, heartbeat: Duration) -> Response {
    struct State {
        events: EventStream,
        last_was_terminal: bool,
        finished: bool,
    }
    let body = futures_util::stream::unfold(
        State {
            events,
            // Nothing sent yet: ending now means the cursor was already at the end.
            last_was_terminal: true,
            finished: false,
        },
        move |mut state| async move {
            if state.finished {
                return None;
            }
            let bytes = match tokio::time::timeout(heartbeat, state.events.next()).await {
                Err(_) => Bytes::from_static(PING),
                Ok(Some(Ok(event))) => {
                    state.last_was_terminal = is_terminal(&event.event_type);
                    frame(&event)
                }
                Ok(Some(Err(e))) => {
                    tracing::error!(error = %e, "cannot read events for a stream");
                    return None;
                }
                Ok(None) => {
                    state.finished = true;
                    if !state.last_was_terminal {
                        return None;
                    }
                    Bytes::from_static(DONE)
                }
            };
            Some((Ok::<_, std::convert::Infallible>(bytes), state))
        },
    );
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Reverse proxies (nginx) must not buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
