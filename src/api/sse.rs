//! Server-Sent Events framing (SPEC §7): `event:` + `data:` + `id:` per event, `: ping` after
//! a quiet interval, `data: [DONE]` after the terminal event.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::{FutureExt, StreamExt};

use crate::engine::EventStream;
use crate::protocol::events::EventRecord;
use crate::protocol::events::is_terminal;

const PING: &[u8] = b": ping\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

/// Most bytes of ready events sent as one chunk.
const COALESCE_BYTES: usize = 64 * 1024;

/// Appends one event as an SSE frame.
fn push_frame(out: &mut String, event: &EventRecord) {
    out.reserve(event.data.len() + event.event_type.len() + 32);
    out.push_str("event: ");
    out.push_str(&event.event_type);
    out.push_str("\ndata: ");
    out.push_str(&event.data);
    out.push_str("\nid: ");
    out.push_str(itoa::Buffer::new().format(event.sequence_number));
    out.push_str("\n\n");
}

/// A streaming response over the given events. `[DONE]` follows when the events end after
/// a terminal event (a replay may pass the terminal event of a pause and go on), or end at
/// once (a reader resuming after the last event).
///
/// Events that are ready together (the event writer publishes a committed batch at once) go
/// out as one chunk: one write and one wake-up instead of one per event.
pub fn response(events: EventStream, heartbeat: Duration) -> Response {
    struct State {
        events: EventStream,
        last_was_terminal: bool,
        /// The events ended (or failed) while a chunk was being filled.
        ended: Option<bool>,
        finished: bool,
        /// Counted among the open streams while it lives.
        _open: crate::metrics::OpenStream,
    }
    impl State {
        /// Appends an event; false when the stream ends with it.
        fn take(
            &mut self,
            out: &mut String,
            next: Option<Result<std::sync::Arc<EventRecord>, crate::engine::EngineError>>,
        ) -> bool {
            match next {
                Some(Ok(event)) => {
                    self.last_was_terminal = is_terminal(&event.event_type);
                    push_frame(out, &event);
                    true
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "cannot read events for a stream");
                    self.ended = Some(false);
                    false
                }
                None => {
                    self.ended = Some(self.last_was_terminal);
                    false
                }
            }
        }
    }
    let body = futures_util::stream::unfold(
        State {
            events,
            // Nothing sent yet: ending now means the cursor was already at the end.
            last_was_terminal: true,
            ended: None,
            finished: false,
            _open: crate::metrics::OpenStream::new(crate::metrics::Transport::Sse),
        },
        move |mut state| async move {
            if state.finished {
                return None;
            }
            if let Some(done) = state.ended {
                state.finished = true;
                return done.then(|| (Ok(Bytes::from_static(DONE)), state));
            }
            let first = match tokio::time::timeout(heartbeat, state.events.next()).await {
                Err(_) => return Some((Ok(Bytes::from_static(PING)), state)),
                Ok(next) => next,
            };
            let mut out = String::new();
            if state.take(&mut out, first) {
                while out.len() < COALESCE_BYTES {
                    let Some(next) = state.events.next().now_or_never() else {
                        break;
                    };
                    if !state.take(&mut out, next) {
                        break;
                    }
                }
            }
            if out.is_empty() {
                // Ended before anything was sent in this chunk.
                let done = state.ended.unwrap_or(false);
                state.finished = true;
                return done.then(|| (Ok(Bytes::from_static(DONE)), state));
            }
            Some((Ok::<_, std::convert::Infallible>(Bytes::from(out)), state))
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
