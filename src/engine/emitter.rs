//! `EventEmitter`: numbers a run's events, serialises each once, and hands it to the hub.

use std::borrow::Cow;
use std::sync::Arc;

use super::hub::EventHub;
use crate::protocol::events::{Event, EventRecord, Lifecycle};
use crate::protocol::response::ResponseObject;
use crate::store::{RunEnding, StoreError};
use crate::time::UnixMillis;

/// An event numbered `sequence_number` in a run's log, serialised.
pub(crate) fn record(
    event: &Event,
    response_id: &Arc<str>,
    tenant_id: &Arc<str>,
    sequence_number: u64,
) -> EventRecord {
    let data = event.to_json(sequence_number);
    let (kind, ends_run) = (event.kind(), event.ends_run());
    stamped(
        kind,
        data,
        ends_run,
        response_id,
        tenant_id,
        sequence_number,
    )
}

/// The record of an event of type `kind` whose JSON text is `data`, emitted now.
fn stamped(
    kind: &'static str,
    data: String,
    ends_run: bool,
    response_id: &Arc<str>,
    tenant_id: &Arc<str>,
    sequence_number: u64,
) -> EventRecord {
    EventRecord {
        response_id: response_id.clone(),
        tenant_id: tenant_id.clone(),
        sequence_number,
        event_type: Cow::Borrowed(kind),
        data: Arc::from(data),
        created_at: UnixMillis::now().as_millis(),
        ends_run,
    }
}

/// A lifecycle event of `response` numbered `sequence_number`, written around `json`, the
/// response's JSON text serialised once for every event and row that carries it (`None`: it
/// could not be serialised, and the event is serialised here, with serde's fallback).
pub(crate) fn record_lifecycle(
    kind: Lifecycle,
    response: &ResponseObject,
    json: Option<&str>,
    response_id: &Arc<str>,
    tenant_id: &Arc<str>,
    sequence_number: u64,
) -> EventRecord {
    let data = match json {
        Some(json) => {
            debug_assert_eq!(
                serde_json::to_string(response).ok().as_deref(),
                Some(json),
                "the JSON text of another response"
            );
            kind.to_json(json, sequence_number)
        }
        None => kind
            .event(Box::new(response.clone()))
            .to_json(sequence_number),
    };
    let ends_run = kind.ends_run(response);
    stamped(
        kind.kind(),
        data,
        ends_run,
        response_id,
        tenant_id,
        sequence_number,
    )
}

pub struct EventEmitter {
    hub: EventHub,
    response_id: Arc<str>,
    tenant_id: Arc<str>,
    next_sequence: u64,
}

impl EventEmitter {
    /// An emitter continuing a log whose next sequence number is `next_sequence`.
    pub fn new(
        hub: EventHub,
        response_id: Arc<str>,
        tenant_id: Arc<str>,
        next_sequence: u64,
    ) -> Self {
        EventEmitter {
            hub,
            response_id,
            tenant_id,
            next_sequence,
        }
    }

    /// Sends the event with the next sequence number; returns that number.
    ///
    /// The event is numbered and serialised before the returned future is first polled, so
    /// the future holds only the record, not the event: it is part of every await in the run
    /// loop, and its size is paid by every open run.
    pub fn emit(&mut self, event: Event) -> impl Future<Output = u64> + Send + '_ {
        let record = self.record(&event);
        self.send(record)
    }

    fn send(&self, record: EventRecord) -> impl Future<Output = u64> + Send + '_ {
        let record = Arc::new(record);
        async move {
            let sequence_number = record.sequence_number;
            self.hub.send(record).await;
            sequence_number
        }
    }

    /// Numbers and serialises the event without sending it (for events written together
    /// with a change of the run itself).
    pub fn record(&mut self, event: &Event) -> EventRecord {
        let sequence_number = self.take_sequence();
        record(event, &self.response_id, &self.tenant_id, sequence_number)
    }

    /// Sends a lifecycle event of `response`, whose JSON text is `json` (see
    /// [`record_lifecycle`]); returns its sequence number.
    pub fn emit_lifecycle(
        &mut self,
        kind: Lifecycle,
        response: &ResponseObject,
        json: Option<&str>,
    ) -> impl Future<Output = u64> + Send + '_ {
        let record = self.record_lifecycle(kind, response, json);
        self.send(record)
    }

    /// Numbers a lifecycle event of `response` without sending it (see
    /// [`record_lifecycle`]).
    pub fn record_lifecycle(
        &mut self,
        kind: Lifecycle,
        response: &ResponseObject,
        json: Option<&str>,
    ) -> EventRecord {
        let sequence_number = self.take_sequence();
        record_lifecycle(
            kind,
            response,
            json,
            &self.response_id,
            &self.tenant_id,
            sequence_number,
        )
    }

    /// The next event's sequence number, taken.
    fn take_sequence(&mut self) -> u64 {
        self.next_sequence += 1;
        self.next_sequence - 1
    }

    /// The sequence number the next event gets.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Stores the run's ending, with its closing events, after everything emitted so far.
    pub async fn end_run(&self, ending: RunEnding) -> Result<(), StoreError> {
        self.hub.end_run(ending).await
    }

    /// Waits until everything emitted so far is stored.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.hub.flush(self.response_id.clone()).await
    }
}
