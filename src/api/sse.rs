//! Server-Sent Events framing (SPEC §7): `event:` + `data:` + `id:` per event, `: ping` after
//! a quiet interval, `data: [DONE]` after the terminal event.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::{FutureExt, StreamExt};

use utoipa::openapi::RefOr;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::engine::EventStream;
use crate::protocol::events::is_terminal;
use crate::protocol::events::{EventRecord, Sequenced};
use crate::protocol::schema::{constant, one_of};

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
    let body = futures_util::stream::unfold(
        StreamState {
            events,
            // Nothing sent yet: ending now means the cursor was already at the end.
            last_was_terminal: true,
            ended: None,
            finished: false,
            _open: crate::metrics::OpenStream::new(crate::metrics::Transport::Sse),
        },
        move |state| state.next_chunk(heartbeat),
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

/// Where a stream of [`response`] is between two chunks.
struct StreamState {
    events: EventStream,
    last_was_terminal: bool,
    /// The events ended (or failed) while a chunk was being filled.
    ended: Option<bool>,
    finished: bool,
    /// Counted among the open streams while it lives.
    _open: crate::metrics::OpenStream,
}

impl StreamState {
    /// The next chunk of the body: the events ready now (at least one, waited for), a ping
    /// after `heartbeat` without any, or `[DONE]`; `None` when the body is over.
    async fn next_chunk(
        mut self,
        heartbeat: Duration,
    ) -> Option<(Result<Bytes, std::convert::Infallible>, StreamState)> {
        if self.finished {
            return None;
        }
        if let Some(done) = self.ended {
            self.finished = true;
            return done.then(|| (Ok(Bytes::from_static(DONE)), self));
        }
        let first = match tokio::time::timeout(heartbeat, self.events.next()).await {
            Err(_) => return Some((Ok(Bytes::from_static(PING)), self)),
            Ok(next) => next,
        };
        let mut out = String::new();
        if self.take(&mut out, first) {
            while out.len() < COALESCE_BYTES {
                let Some(next) = self.events.next().now_or_never() else {
                    break;
                };
                if !self.take(&mut out, next) {
                    break;
                }
            }
        }
        if out.is_empty() {
            // Ended before anything was sent in this chunk.
            let done = self.ended.unwrap_or(false);
            self.finished = true;
            return done.then(|| (Ok(Bytes::from_static(DONE)), self));
        }
        Some((Ok(Bytes::from(out)), self))
    }

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

/// One event of a stream, for the OpenAPI document: the fields a client's SSE parser reads
/// from a frame of [`push_frame`] (`event`, `id`, `data`), or the closing `data: [DONE]`.
/// (Before OpenAPI 3.2, the schema of a `text/event-stream` describes each of its events.)
pub struct ServerSentEvent;

impl ToSchema for ServerSentEvent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Sequenced::name().into_owned(), Sequenced::schema()));
        <Sequenced as ToSchema>::schemas(schemas);
    }
}

impl PartialSchema for ServerSentEvent {
    fn schema() -> RefOr<Schema> {
        // `contentSchema` is a JSON Schema keyword that utoipa has no field for; an extension
        // is serialised as one more key of the schema object.
        let content_schema: Extensions = [(
            "contentSchema",
            serde_json::json!({"$ref": format!("#/components/schemas/{}", Sequenced::name())}),
        )]
        .into_iter()
        .collect();
        let event = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "event",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^(response\..+|error)$"))
                    .description(Some("The event's `type`.")),
            )
            .property(
                "id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some("^[0-9]+$"))
                    .description(Some(
                        "Its `sequence_number` (send it back as `Last-Event-ID` to resume).",
                    )),
            )
            .property(
                "data",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .content_media_type("application/json")
                    .extensions(Some(content_schema)),
            )
            .required("event")
            .required("data")
            .description(Some(
                "`event: <type>`, `data: <StreamEvent>`, `id: <sequence_number>`",
            ));
        let done = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("data", constant("[DONE]"))
            .required("data")
            .description(Some("`data: [DONE]` after the terminal event"));
        one_of([event.into(), done.into()]).into()
    }
}
