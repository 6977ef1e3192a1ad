//! Persistence of runs, their input items and their event logs. `RunStore` is the only way
//! anything reaches the database; `sqlite.rs` and `postgres.rs` implement it with the SQL text
//! and row types of `sql.rs`, and the same policy for failed batches (`batch.rs`).
//!
//! Two rules hold on both backends, whoever calls:
//! * a run's state and lease change only through a [`Transition`] of the table in `state.rs`,
//!   each a compare-and-set;
//! * a run's events are appended only by the holder of its lease, or together with the change
//!   that ends it (its closing events commit with its final state, or not at all).

mod batch;
pub mod migrate;
pub mod postgres;
mod sql;
pub mod sqlite;
pub mod state;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::time::UnixMillis;
pub use state::{Guard, LeaseAfter, RunState, Transition};

/// The tenant every row belongs to until API keys arrive.
pub const DEFAULT_TENANT: &str = "default";

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

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A compare-and-set found the run in another state, or under another lease.
    #[error("conflict: the run is {actual:?}")]
    Conflict { actual: RunState },
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// Another request already holds this idempotency key.
    #[error("the idempotency key is taken")]
    KeyTaken,
    /// The database cannot be reached or is overloaded: trying again later may work.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database refused the statement or its data: trying it again will not help.
    #[error("database error: {0}")]
    Rejected(String),
}

impl StoreError {
    /// Whether the same write may succeed if tried again.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            sqlx::Error::Database(ref db) if !transient_code(db.code().as_deref()) => {
                StoreError::Rejected(e.to_string())
            }
            sqlx::Error::Encode(_)
            | sqlx::Error::TypeNotFound { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::Configuration(_)
            | sqlx::Error::Migrate(_) => StoreError::Rejected(e.to_string()),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// Database error codes that a retry may get past: PostgreSQL's connection failures (class
/// 08), serialization failures and deadlocks (40), lack of resources (53) and an operator
/// stopping the server (57), all five characters long; SQLite's busy and locked (5 and 6,
/// with their extended codes in the high bits), shorter numbers.
fn transient_code(code: Option<&str>) -> bool {
    match code {
        Some(code) if code.len() == 5 => ["08", "40", "53", "57"]
            .iter()
            .any(|class| code.starts_with(class)),
        Some(code) => code.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6)),
        None => false,
    }
}

/// A database cannot hold U+0000 in a text value (PostgreSQL refuses it): a key that holds one
/// names nothing stored, so it is not looked up at all.
fn findable(key: &str) -> Result<(), StoreError> {
    if key.contains('\0') {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

/// A run to insert, with its input items.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub tenant_id: String,
    /// `queued` (held by nobody) or `in_progress` (held by the inserting instance).
    pub state: RunState,
    pub body: ResponseObject,
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

/// One change of a run's state or lease (see [`RunStore::transition`]).
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

#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// What this store's start found and did to the schema.
    fn schema(&self) -> &migrate::Schema;

    /// Succeeds when the database answers and the migrations are applied.
    async fn ping(&self) -> Result<(), StoreError>;

    /// How many runs are in each of the states that are not final, every tenant's (states
    /// with none are left out).
    async fn count_unfinished(&self) -> Result<Vec<(RunState, u64)>, StoreError>;

    /// Inserts a run, its input items and first events in one transaction (with its
    /// idempotency key: `KeyTaken` when another request holds it).
    async fn insert_run(&self, run: &NewRun) -> Result<(), StoreError>;

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, StoreError>;

    /// A run's state, or `None` when there is no such run.
    async fn state_of(&self, id: &str) -> Result<Option<RunState>, StoreError>;

    /// Changes a run's state or lease: a compare-and-set from `transition.from()` under its
    /// guard, writing the change's body, transcript and expiry, appending its input items,
    /// and then its closing events after the log's last, all in one transaction. `Conflict`
    /// (with the state found) when the run is in another state or under another lease,
    /// `NotFound` when there is no such run.
    async fn transition(&self, change: &Change<'_>) -> Result<Applied, StoreError>;

    /// The event writer's group commit: new runs, events (fenced by the writer's lease) and
    /// runs' endings (with their closing events) in one transaction. A batch the database
    /// refuses is written run by run, so that one run's bad row cannot lose the others';
    /// a database that cannot be reached is tried again a few times first.
    async fn write_batch(&self, batch: &WriteBatch<'_>) -> BatchOutcome;

    /// Moves up to `limit` queued runs, oldest first, to `in_progress` under `lease` and
    /// returns them. Concurrent claimers never get the same run.
    async fn claim_queued(
        &self,
        lease: &Lease,
        now: UnixMillis,
        limit: u32,
    ) -> Result<Vec<StoredRun>, StoreError>;

    /// Takes over a running run whose lease ran out before `now` (or was handed over):
    /// the run as it is now under `lease`, or `None` when someone else holds it.
    async fn claim_stale(
        &self,
        id: &str,
        lease: &Lease,
        now: UnixMillis,
    ) -> Result<Option<StoredRun>, StoreError>;

    /// Saves a running run's progress, if `holder` still holds it (`Conflict` otherwise).
    async fn checkpoint(
        &self,
        id: &str,
        holder: &str,
        body: &ResponseObject,
        transcript: &[Entry],
        now: UnixMillis,
    ) -> Result<Saved, StoreError>;

    /// Extends `holder`'s lease on those of `ids` it still holds; returns the ids among them
    /// that a client asked to cancel.
    async fn renew_leases(
        &self,
        holder: &str,
        ids: &[&str],
        until: UnixMillis,
    ) -> Result<Vec<String>, StoreError>;

    /// Lets go of every running run `holder` holds, for another instance to take over at
    /// once (at shutdown); returns how many.
    async fn release_leases(&self, holder: &str) -> Result<u64, StoreError>;

    /// Records that a client asked to cancel a running run and tells its holder (PostgreSQL
    /// `NOTIFY`; otherwise its next lease renewal or checkpoint finds it). `false` when the
    /// run is not running.
    async fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError>;

    /// Runs waiting in `requires_action` whose `expires_at` is before `now`.
    async fn expired_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError>;

    /// Running runs whose lease ran out before `now`, or that nobody holds (handed over).
    async fn stale_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError>;

    /// A run's events with a sequence number above `after` (all with `None`), in order.
    async fn events_after(
        &self,
        id: &str,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError>;

    /// The highest sequence number in a run's event log.
    async fn last_sequence_number(&self, id: &str) -> Result<Option<u64>, StoreError>;

    /// All input items of a run, in order.
    async fn input_items(&self, tenant_id: &str, id: &str) -> Result<Vec<Item>, StoreError>;

    /// Up to `limit` input items after the one with id `after` (from the start without it),
    /// and whether more follow. `NotFound` when `after` names no item of this run.
    async fn list_input_items(
        &self,
        tenant_id: &str,
        id: &str,
        limit: u32,
        order: Order,
        after: Option<&str>,
    ) -> Result<(Vec<Item>, bool), StoreError>;

    /// The items with these ids among the tenant's runs: output items of paused and stopped
    /// runs (also found by the call id of a client call), then input items. An id may be
    /// found more than once (an input item replayed into several runs).
    async fn find_items(&self, tenant_id: &str, ids: &[&str])
    -> Result<Vec<FoundItem>, StoreError>;

    /// Stores a new API key, and its tenant if it is new.
    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;

    /// The key with this hash (revoked or not).
    async fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// The key with this id (revoked or not).
    async fn key_by_id(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every key (of one tenant), oldest first.
    async fn list_keys(&self, tenant_id: Option<&str>) -> Result<Vec<ApiKeyRecord>, StoreError>;

    /// Revokes a key; `false` when there is no such key or it was revoked before.
    async fn revoke_key(&self, id: &str, now: UnixMillis) -> Result<bool, StoreError>;

    /// Adds to the recorded token usage (each row to the row with its tenant, key, model and
    /// day).
    async fn add_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError>;

    /// Recorded usage (of one tenant), by day, tenant, key and model.
    async fn usage(&self, tenant_id: Option<&str>) -> Result<Vec<UsageRow>, StoreError>;

    /// Deletes a run with its items and events.
    async fn delete_run(&self, tenant_id: &str, id: &str) -> Result<(), StoreError>;

    /// The run recorded for an idempotency key.
    async fn find_idempotent(
        &self,
        tenant_id: &str,
        key: &str,
    ) -> Result<Option<IdempotentRequest>, StoreError>;

    /// Deletes runs that stopped before `runs_before` (with their items and events), and
    /// idempotency keys recorded before `keys_before`, oldest first, in transactions of
    /// bounded size. Returns how many runs and keys went.
    async fn prune(
        &self,
        runs_before: UnixMillis,
        keys_before: UnixMillis,
    ) -> Result<(u64, u64), StoreError>;

    /// News from other instances sharing this database (PostgreSQL `LISTEN`); `None` when
    /// the backend has no such channel (SQLite: one process).
    async fn notifications(&self) -> Result<Option<NotificationStream>, StoreError>;

    /// Storage housekeeping beside the writes, until `stop` is cancelled (SQLite: copies its
    /// log into the database off the writer's path). Returns at once when there is none.
    async fn upkeep(&self, stop: tokio_util::sync::CancellationToken);
}

/// Opens the store named by the URL's scheme and applies its migrations.
pub async fn connect(url: &str, max_connections: u32) -> Result<Arc<dyn RunStore>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect(url, max_connections).await?,
        ))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Arc::new(
            postgres::PostgresStore::connect(url, max_connections).await?,
        ))
    } else {
        Err(StoreError::Rejected(format!(
            "unsupported database URL scheme in {url:?}"
        )))
    }
}
