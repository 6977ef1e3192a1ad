//! A small SSE client: a stream as the client received it (events, comments, `[DONE]`, the raw
//! bytes), read whole, read until its connection breaks, and the items it shows.

use futures_util::StreamExt;
use serde_json::Value;

/// One SSE event as received.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// The `event:` name.
    pub event: String,
    /// The `id:` (the sequence number, where the service sends one).
    pub id: Option<String>,
    /// The `data:` JSON.
    pub data: Value,
}

/// A whole SSE response.
#[derive(Debug)]
pub struct Sse {
    /// The HTTP status.
    pub status: u16,
    pub content_type: String,
    /// The events, in order (`[DONE]` is not one).
    pub events: Vec<SseEvent>,
    /// Whether `data: [DONE]` arrived.
    pub done: bool,
    /// The comment lines (`: ping`), without the colon.
    pub comments: Vec<String>,
    /// What arrived, byte for byte.
    pub raw: String,
}

impl Sse {
    /// The event names, in order.
    pub fn types(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.event.as_str()).collect()
    }

    /// The last event.
    pub fn last(&self) -> &SseEvent {
        self.events.last().unwrap()
    }

    /// The run's id, from the first event (`response.created`).
    pub fn response_id(&self) -> String {
        self.events[0].data["response"]["id"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Reads a whole SSE response.
pub async fn read_sse(response: reqwest::Response) -> Sse {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let raw = response.text().await.unwrap();
    parse_sse(status, content_type, raw)
}

/// Parses what a stream carried.
pub fn parse_sse(status: u16, content_type: String, raw: String) -> Sse {
    let mut events = Vec::new();
    let mut comments = Vec::new();
    let mut done = false;
    for block in raw.split("\n\n").filter(|b| !b.is_empty()) {
        let mut event = None;
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(comment) = line.strip_prefix(':') {
                comments.push(comment.trim().to_string());
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(v.to_string());
            }
        }
        match data.as_deref() {
            Some("[DONE]") => done = true,
            Some(text) => events.push(SseEvent {
                event: event.unwrap_or_default(),
                id,
                data: serde_json::from_str(text).unwrap(),
            }),
            None => {}
        }
    }
    Sse {
        status,
        content_type,
        events,
        done,
        comments,
        raw,
    }
}

/// Reads a stream until it ends or its connection breaks; keeps what arrived. `first` hears
/// of the first whole event.
pub async fn read_until_cut(
    response: reqwest::Response,
    first: tokio::sync::oneshot::Sender<()>,
) -> Sse {
    let status = response.status().as_u16();
    let mut body = response.bytes_stream();
    let mut raw = String::new();
    let mut first = Some(first);
    while let Some(Ok(chunk)) = body.next().await {
        raw.push_str(&String::from_utf8_lossy(&chunk));
        if raw.contains("\n\n")
            && let Some(first) = first.take()
        {
            let _ = first.send(());
        }
    }
    // A frame cut in half is not an event the client saw.
    let whole = raw.rfind("\n\n").map_or(0, |end| end + 2);
    raw.truncate(whole);
    parse_sse(status, "text/event-stream".into(), raw)
}

/// The items of a stream as they were when done (`response.output_item.done`), in order.
pub fn done_items(sse: &Sse) -> Vec<Value> {
    sse.events
        .iter()
        .filter(|e| e.event == "response.output_item.done")
        .map(|e| e.data["item"].clone())
        .collect()
}

/// Each item's events are contiguous: between its `added` and `done` only its own events.
pub fn assert_items_do_not_interleave(sse: &Sse) {
    let mut open: Option<u64> = None;
    for event in &sse.events {
        let index = event.data.get("output_index").and_then(Value::as_u64);
        match event.event.as_str() {
            "response.output_item.added" => {
                assert_eq!(open, None, "item {index:?} opened inside another");
                open = index;
            }
            "response.output_item.done" => {
                assert_eq!(open, index, "done for an item that is not open");
                open = None;
            }
            _ if index.is_some() => assert_eq!(open, index, "{} outside its item", event.event),
            _ => {}
        }
    }
    assert_eq!(open, None);
}
