//! A run's event log as stored: **frames**, each a row holding a run's consecutive events
//! written in one batch, instead of a row per event.
//!
//! A text run of 20 deltas emits 28 events, written in a few batches. A row per event cost
//! every event an index entry, a record and six bound values: about 400,000 instructions of a
//! text run's 1.5 million went into storing them (measured with callgrind, SQLite, by leaving
//! the rows out). A frame pays that once per run per batch (about 115,000 in all).
//!
//! A frame's `events` is a JSON array with one entry per event, `[offset, "type", event]`:
//! the event's emit time in milliseconds after the frame's `created_at`, its `type`, and the
//! event's JSON text exactly as it was sent (embedded as it is, not as a string, so that
//! neither writing nor reading escapes it again). Its events are numbered `first_seq` to
//! `last_seq`, without a hole; the primary key is `(response_id, last_seq)`, so the frames
//! holding the events after a number are a range of the key.
//!
//! Frames change how rows are laid out only: the events a reader gets back, their numbers,
//! types, texts and times, are those emitted, whatever batches they were written in.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::error::StoreError;
use crate::protocol::events::{EventRecord, push_json_string};
use crate::protocol::ids::RunIdHasher;

/// A run's consecutive events, ready to be inserted as one row.
pub(super) struct Frame<'a> {
    pub response_id: &'a str,
    pub tenant_id: &'a str,
    pub first_seq: i64,
    pub last_seq: i64,
    /// The first event's emit time (milliseconds since the Unix epoch).
    pub created_at: i64,
    pub events: String,
}

impl<'a> Frame<'a> {
    fn new(event: &'a EventRecord) -> Frame<'a> {
        let sequence = event.sequence_number as i64;
        let mut frame = Frame {
            response_id: &event.response_id,
            tenant_id: &event.tenant_id,
            first_seq: sequence,
            last_seq: sequence,
            created_at: event.created_at,
            events: String::with_capacity(event.data.len() + 64),
        };
        frame.events.push('[');
        frame.push_entry(event);
        frame
    }

    fn push(&mut self, event: &EventRecord) {
        self.last_seq = event.sequence_number as i64;
        self.events.push(',');
        self.push_entry(event);
    }

    fn push_entry(&mut self, event: &EventRecord) {
        let out = &mut self.events;
        out.reserve(event.data.len() + event.event_type.len() + 16);
        out.push('[');
        out.push_str(itoa::Buffer::new().format(event.created_at - self.created_at));
        out.push(',');
        // Event types are plain ASCII names; escaped all the same, as any text put in JSON.
        push_json_string(out, &event.event_type);
        out.push(',');
        out.push_str(&event.data);
        out.push(']');
    }
}

/// The events as frames: for each run, one frame per stretch of consecutive sequence numbers
/// (one per run, as its events come in order), in the order of each frame's first event.
pub(super) fn frames<'a>(events: impl IntoIterator<Item = &'a EventRecord>) -> Vec<Frame<'a>> {
    let mut frames: Vec<Frame<'a>> = Vec::new();
    // The frame each run's latest event went into.
    let mut open: HashMap<&'a str, usize, RunIdHasher> = HashMap::default();
    for event in events {
        let id: &'a str = &event.response_id;
        match open.get(id) {
            Some(&at) if frames[at].last_seq + 1 == event.sequence_number as i64 => {
                frames[at].push(event);
            }
            _ => {
                open.insert(id, frames.len());
                frames.push(Frame::new(event));
            }
        }
    }
    for frame in &mut frames {
        frame.events.push(']');
    }
    frames
}

/// A stored frame, as the readers select it.
#[derive(sqlx::FromRow)]
pub(super) struct FrameRow {
    pub tenant_id: String,
    pub first_seq: i64,
    pub last_seq: i64,
    pub created_at: i64,
    pub events: String,
}

/// The events of `id`'s frames (read in order of `last_seq`) numbered after `after`, at most
/// `limit` of them.
pub(super) fn expand(
    id: &str,
    rows: Vec<FrameRow>,
    after: Option<u64>,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    let response_id: Arc<str> = Arc::from(id);
    let mut tenant: Option<Arc<str>> = None;
    let mut events = Vec::new();
    for row in rows {
        let entries: Vec<(i64, Cow<'_, str>, &RawValue)> = serde_json::from_str(&row.events)
            .map_err(|e| corrupt(id, row.last_seq, &e.to_string()))?;
        if row.first_seq + entries.len() as i64 - 1 != row.last_seq {
            let message = format!("it holds {} events", entries.len());
            return Err(corrupt(id, row.last_seq, &message));
        }
        let tenant_id = match &tenant {
            Some(t) if **t == *row.tenant_id => t.clone(),
            _ => tenant.insert(Arc::from(row.tenant_id.as_str())).clone(),
        };
        let numbered = (row.first_seq.max(0) as u64..).zip(entries);
        for (sequence_number, (offset, kind, data)) in numbered {
            if after.is_some_and(|after| sequence_number <= after) {
                continue;
            }
            if events.len() == limit {
                return Ok(events);
            }
            events.push(EventRecord {
                response_id: response_id.clone(),
                tenant_id: tenant_id.clone(),
                sequence_number,
                event_type: Cow::Owned(kind.into_owned()),
                data: Arc::from(data.get()),
                created_at: row.created_at + offset,
                ends_run: false,
            });
        }
    }
    Ok(events)
}

fn corrupt(id: &str, last_seq: i64, problem: &str) -> StoreError {
    StoreError::corrupt(format!(
        "the stored frame of {id}'s events up to {last_seq} cannot be read: {problem}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, sequence_number: u64, kind: &'static str, data: &str) -> EventRecord {
        EventRecord {
            response_id: Arc::from(id),
            tenant_id: Arc::from("t"),
            sequence_number,
            event_type: Cow::Borrowed(kind),
            data: Arc::from(data),
            created_at: 1_000 + sequence_number as i64 * 7,
            ends_run: false,
        }
    }

    fn row(frame: &Frame<'_>) -> FrameRow {
        FrameRow {
            tenant_id: frame.tenant_id.to_string(),
            first_seq: frame.first_seq,
            last_seq: frame.last_seq,
            created_at: frame.created_at,
            events: frame.events.clone(),
        }
    }

    #[test]
    fn interleaved_runs_get_a_frame_each_and_read_back_as_the_events_written() {
        let written = [
            event(
                "a",
                0,
                "response.created",
                r#"{"type":"response.created","x":"\"q\""}"#,
            ),
            event("b", 4, "response.output_text.delta", r#"{"delta":"é\n"}"#),
            event("a", 1, "response.in_progress", "{}"),
            event("b", 5, "response.output_text.delta", r#"{"delta":" "}"#),
            // A hole (an event of "a" that was not written) starts another frame.
            event("a", 3, "response.completed", r#"{"n":[1,2]}"#),
        ];
        let frames = frames(&written);
        let spans: Vec<(&str, i64, i64)> = frames
            .iter()
            .map(|f| (f.response_id, f.first_seq, f.last_seq))
            .collect();
        assert_eq!(spans, [("a", 0, 1), ("b", 4, 5), ("a", 3, 3)]);

        let a = frames
            .iter()
            .filter(|f| f.response_id == "a")
            .map(row)
            .collect();
        let read = expand("a", a, None, 100).unwrap();
        let expected: Vec<&EventRecord> =
            written.iter().filter(|e| &*e.response_id == "a").collect();
        assert_eq!(read.len(), expected.len());
        for (read, written) in read.iter().zip(expected) {
            assert_eq!(read.sequence_number, written.sequence_number);
            assert_eq!(read.event_type, written.event_type);
            assert_eq!(read.data, written.data);
            assert_eq!(read.created_at, written.created_at);
            assert_eq!(&*read.tenant_id, "t");
        }
    }

    #[test]
    fn reading_after_a_number_skips_into_a_frame_and_stops_at_the_limit() {
        let written: Vec<EventRecord> = (0..6).map(|n| event("a", n, "e", "{}")).collect();
        let frames = frames(&written);
        assert_eq!(frames.len(), 1);
        let numbers = |after, limit| -> Vec<u64> {
            expand("a", vec![row(&frames[0])], after, limit)
                .unwrap()
                .iter()
                .map(|e| e.sequence_number)
                .collect()
        };
        assert_eq!(numbers(Some(2), 100), [3, 4, 5]);
        assert_eq!(numbers(Some(2), 2), [3, 4]);
        assert_eq!(numbers(None, 1), [0]);
        assert!(numbers(Some(5), 10).is_empty());
    }

    #[test]
    fn a_frame_whose_count_does_not_match_its_numbers_is_reported_corrupt() {
        let written = [event("a", 0, "e", "{}")];
        let mut stored = row(&frames(&written)[0]);
        stored.last_seq = 1;
        let error = expand("a", vec![stored], None, 10).unwrap_err();
        assert!(error.to_string().contains("holds 1 events"), "{error}");
    }
}
