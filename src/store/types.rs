//! The store's records: what goes into it (a new run, a change, the event writer's batch) and
//! what comes out (a stored run, a batch's outcome, found items, keys, usage), the same on
//! both backends.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::StoreError;
use super::state::{RunState, Transition};
use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::time::UnixMillis;

/// Which database a store keeps its data in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A run to insert, with its input items.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub tenant_id: String,
    /// `queued` (held by nobody) or `in_progress` (held by the inserting instance).
    pub state: RunState,
    pub body: ResponseObject,
    /// The body's JSON text when its creator serialised it already (for the run's first
    /// events); the store serialises the body otherwise.
    pub body_json: Option<Arc<str>>,
    pub input_items: Vec<Item>,
    pub lease: Option<Lease>,
    pub now: UnixMillis,
    /// The first events of the log, written in the same transaction (a queued run must not
    /// be claimable before they exist).
    pub initial_events: Vec<EventRecord>,
    /// The client's `Idempotency-Key`, recorded in the same transaction: `KeyTaken` if
    /// another request holds it.
    pub idempotency: Option<IdempotencyKey>,
    /// The API key that created it (none in open mode).
    pub key_id: Option<String>,
}

/// Who executes a run, and until when that holds without renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub holder: String,
    pub until: UnixMillis,
}

/// An `Idempotency-Key` and the hash of the request body it came with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    pub request_hash: String,
}

/// A recorded `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotentRequest {
    pub request_hash: String,
    pub response_id: String,
    pub created_at: UnixMillis,
}

/// Closing events of a change, numbered once it applied: the argument is the log's next
/// sequence number.
pub type ClosingEvents<'a> = &'a (dyn Fn(u64) -> Vec<EventRecord> + Send + Sync);

/// One change of a run's state or lease (see
/// [`RunStore::transition`](super::RunStore::transition)).
#[derive(Clone, Copy)]
pub struct Change<'a> {
    pub id: &'a str,
    pub transition: Transition,
    /// The instance making the change: the lease holder it must be, or the one taking it.
    pub caller: &'a str,
    pub now: UnixMillis,
    /// Until when the caller holds the lease, when the transition gives it one.
    pub lease_until: UnixMillis,
    /// The run's body from now on (`None`: unchanged).
    pub body: Option<&'a ResponseObject>,
    /// The body's JSON text when the caller serialised it already.
    pub body_json: Option<&'a str>,
    /// Its transcript from now on (`None`: unchanged).
    pub transcript: Option<&'a [Entry]>,
    /// Until when a `requires_action` run waits.
    pub expires_at: Option<UnixMillis>,
    /// Input items appended after the existing ones.
    pub append_input: &'a [Item],
    /// Events appended after the log's last, in the same transaction.
    pub closing: Option<ClosingEvents<'a>>,
}

impl<'a> Change<'a> {
    /// A change with nothing but the transition: body, transcript and log stay as they are.
    pub fn new(id: &'a str, transition: Transition, caller: &'a str) -> Change<'a> {
        Change {
            id,
            transition,
            caller,
            now: UnixMillis::now(),
            lease_until: UnixMillis::now(),
            body: None,
            body_json: None,
            transcript: None,
            expires_at: None,
            append_input: &[],
            closing: None,
        }
    }
}

/// A change that applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The sequence number the run's next event gets.
    pub next_sequence: u64,
}

/// What the event writer commits together, in one transaction.
pub struct WriteBatch<'a> {
    /// The instance writing. Events of a run it does not hold are not written (see
    /// [`BatchOutcome::lost`]): an instance that lost a run can never write to it.
    pub holder: &'a str,
    pub runs: Vec<&'a NewRun>,
    pub events: &'a [EventRecord],
    pub endings: Vec<&'a RunEnding>,
}

impl WriteBatch<'_> {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.events.is_empty() && self.endings.is_empty()
    }
}

/// A run's own ending, by the holder of its lease: its final state (or its pause) and its
/// closing events commit together or not at all.
#[derive(Clone, Debug)]
pub struct RunEnding {
    pub id: String,
    pub tenant_id: String,
    /// From `in_progress`, under the writer's lease.
    pub transition: Transition,
    pub body: ResponseObject,
    /// The body's JSON text, serialised once for the closing event and the row (`None`: it
    /// could not be, and the store says why).
    pub body_json: Option<String>,
    pub transcript: Vec<Entry>,
    /// Until when a `requires_action` run waits.
    pub expires_at: Option<UnixMillis>,
    pub now: UnixMillis,
    /// Its closing events (`response.completed`, …), numbered after everything it emitted.
    pub events: Vec<EventRecord>,
}

/// What became of a batch.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// New runs that were not stored, and why (their events are not written either).
    pub not_inserted: HashMap<String, StoreError>,
    /// Runs whose events of this batch were not written, and why. Nothing of them after
    /// that point may be written by this writer.
    pub lost: HashMap<Arc<str>, Loss>,
    /// Each ending's result, in the batch's order: `Conflict` when the run is no longer the
    /// writer's to end.
    pub endings: Vec<Result<(), StoreError>>,
    /// The database could not be reached: nothing of the batch was written.
    pub unreachable: bool,
}

/// Why a run's events were not written.
#[derive(Clone, Debug)]
pub enum Loss {
    /// The writer does not hold the run's lease (any more): another instance executes it.
    NotHeld,
    /// The database refused them, or could not be reached.
    Failed(StoreError),
}

/// A stored run.
#[derive(Clone, Debug)]
pub struct StoredRun {
    pub tenant_id: String,
    pub state: RunState,
    pub body: ResponseObject,
    /// Everything the model saw of the output (hidden tool calls included).
    pub transcript: Vec<Entry>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<UnixMillis>,
    pub expires_at: Option<UnixMillis>,
    /// When it was stored (the Response's `created_at` is in whole seconds).
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    /// A client asked to cancel the run while another instance executed it.
    pub cancel_requested: bool,
    /// The API key that created it.
    pub key_id: Option<String>,
}

/// A checkpoint that was saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    /// A client asked to cancel the run (through another instance).
    pub cancel_requested: bool,
}

/// An item found by its id (or a client call by its call id) among a tenant's runs.
#[derive(Clone, Debug)]
pub struct FoundItem {
    pub response_id: String,
    pub item: Item,
    /// An item the run produced (else one of its input items).
    pub output: bool,
    /// The state its run is in.
    pub state: RunState,
}

/// An API key as stored: its secret only as a hash.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub hash: String,
    /// The start of the secret, to recognise the key.
    pub prefix: String,
    /// What the key may do, as JSON.
    pub policy: String,
    pub created_at: UnixMillis,
    pub revoked_at: Option<UnixMillis>,
}

/// Token usage of a tenant's key on a model on one UTC day (`YYYY-MM-DD`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageRow {
    pub tenant_id: String,
    pub key_id: String,
    pub model: String,
    pub day: String,
    pub runs: i64,
    pub input_tokens: i64,
    pub cached_tokens: i64,
    pub output_tokens: i64,
}

/// Which of a tenant's responses a listing shows (`GET /v1/responses`); every field left
/// empty matches every response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only responses in this state.
    pub state: Option<RunState>,
    /// Only responses in any state but this one.
    pub not_state: Option<RunState>,
    pub model: Option<String>,
    /// Metadata pairs a response must all have.
    pub metadata: Vec<(String, String)>,
    /// Created at or after.
    pub created_from: Option<UnixMillis>,
    /// Created before.
    pub created_before: Option<UnixMillis>,
}

/// Order of a page of input items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Ascending,
    Descending,
}

/// News from other instances sharing the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notification {
    /// Events of this run were appended.
    Appended(String),
    /// A client asked to cancel this run.
    CancelRequested(String),
}

pub type NotificationStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Notification> + Send>>;

/// A conversation as stored (its items are apart, in order).
#[derive(Clone, Debug, PartialEq)]
pub struct ConversationRecord {
    pub id: String,
    pub tenant_id: String,
    pub created_at: UnixMillis,
    /// JSON object.
    pub metadata: String,
}

/// Items appended to a conversation: as stored, or the id of one it has already (nothing was
/// appended).
#[derive(Clone, Debug, PartialEq)]
pub enum Appended {
    Items(Vec<Item>),
    Duplicate(String),
}
