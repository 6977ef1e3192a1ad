//! Persistence of runs, their input items and their event logs. `RunStore` is the only way
//! anything reaches the database; SQLite and PostgreSQL implement it with the same SQL.

pub mod postgres;
mod sql;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

pub use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;

/// The tenant every row belongs to until API keys arrive.
pub const DEFAULT_TENANT: &str = "default";

/// The persisted state of a run (SPEC §3). The allowed transitions live in `engine::state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunState {
    Queued,
    InProgress,
    RequiresAction,
    Completed,
    Failed,
    Incomplete,
    Cancelled,
    Expired,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Queued,
        RunState::InProgress,
        RunState::RequiresAction,
        RunState::Completed,
        RunState::Failed,
        RunState::Incomplete,
        RunState::Cancelled,
        RunState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::InProgress => "in_progress",
            RunState::RequiresAction => "requires_action",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Incomplete => "incomplete",
            RunState::Cancelled => "cancelled",
            RunState::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A state the run never leaves.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Completed
                | RunState::Failed
                | RunState::Incomplete
                | RunState::Cancelled
                | RunState::Expired
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A compare-and-set found the run in another state.
    #[error("conflict: the run is {actual:?}")]
    Conflict { actual: RunState },
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// Another request already holds this idempotency key.
    #[error("the idempotency key is taken")]
    KeyTaken,
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            other => StoreError::Database(other.to_string()),
        }
    }
}

/// A run to insert, with its input items.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub tenant_id: String,
    pub state: RunState,
    pub body: ResponseObject,
    pub input_items: Vec<Item>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub now_ms: i64,
    /// The first events of the log, written in the same transaction (a queued run must not
    /// be claimable before they exist).
    pub initial_events: Vec<EventRecord>,
    /// The client's `Idempotency-Key`, recorded in the same transaction: `KeyTaken` if
    /// another request holds it.
    pub idempotency: Option<IdempotencyKey>,
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
    pub created_at: i64,
}

/// What a transition writes besides the state.
#[derive(Clone, Debug)]
pub struct RunUpdate<'a> {
    pub body: &'a ResponseObject,
    pub transcript: &'a [Entry],
    /// Who executes the run from now on (`None`: nobody, it is stopped or waiting).
    pub lease_owner: Option<&'a str>,
    pub lease_expires_at: Option<i64>,
    /// Until when a `requires_action` run waits.
    pub expires_at: Option<i64>,
    /// Input items appended after the existing ones, in the same transaction.
    pub append_input: &'a [Item],
    /// The instance that must still hold the run's lease for the change to apply (the run's
    /// own ending); `None` for changes made on the client's behalf.
    pub expected_owner: Option<&'a str>,
    pub now_ms: i64,
}

/// What the event writer commits together.
#[derive(Default)]
pub struct WriteBatch<'a> {
    pub runs: Vec<&'a NewRun>,
    pub events: &'a [EventRecord],
    pub endings: Vec<&'a RunEnding>,
}

/// A run's own ending: from `in_progress` to `to`, only while `owner` holds its lease.
#[derive(Clone, Debug)]
pub struct RunEnding {
    pub id: String,
    pub to: RunState,
    pub body: ResponseObject,
    pub transcript: Vec<Entry>,
    /// Until when a `requires_action` run waits.
    pub expires_at: Option<i64>,
    pub owner: String,
    pub now_ms: i64,
}

impl RunEnding {
    /// The same change as an update for [`RunStore::transition`].
    pub fn update(&self) -> RunUpdate<'_> {
        RunUpdate {
            body: &self.body,
            transcript: &self.transcript,
            lease_owner: None,
            lease_expires_at: None,
            expires_at: self.expires_at,
            append_input: &[],
            expected_owner: Some(&self.owner),
            now_ms: self.now_ms,
        }
    }
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
    pub lease_expires_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub updated_at: i64,
}

/// One page of `input_items`.
#[derive(Clone, Debug, Default)]
pub struct ItemPage {
    pub limit: u32,
    pub descending: bool,
    pub after: Option<String>,
}

#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Which backend this is, for logs and health output.
    fn backend(&self) -> &'static str;

    /// Succeeds when the database answers and the migrations are applied.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Inserts a run and its input items in one transaction.
    async fn insert_run(&self, run: &NewRun) -> Result<(), StoreError>;

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, StoreError>;

    /// Compare-and-set: moves the run from `from` to `to` and writes the update (appending
    /// its input items) in one transaction, or reports `Conflict` with the state it found
    /// (`NotFound` when there is no such run).
    async fn transition(
        &self,
        id: &str,
        from: RunState,
        to: RunState,
        update: &RunUpdate<'_>,
    ) -> Result<(), StoreError>;

    /// Runs waiting in `requires_action` whose `expires_at` is before `now_ms`.
    async fn expired_runs(&self, now_ms: i64) -> Result<Vec<StoredRun>, StoreError>;

    /// Appends events (any runs) in one transaction.
    async fn append_events(&self, events: &[EventRecord]) -> Result<(), StoreError>;

    /// The event writer's group commit, in one transaction: inserts runs (without idempotency
    /// keys), appends events, then applies runs' endings. An ending whose compare-and-set
    /// fails does not fail the batch: its own result says why.
    async fn write_batch(
        &self,
        batch: &WriteBatch<'_>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError>;

    /// A run's state, or `None` when there is no such run.
    async fn state_of(&self, id: &str) -> Result<Option<RunState>, StoreError>;

    /// Storage housekeeping beside the writes, until `stop` is cancelled (SQLite: copies its
    /// log into the database off the writer's path). Returns at once when there is none.
    async fn upkeep(&self, stop: tokio_util::sync::CancellationToken);

    /// Ids of runs whose events were just appended, by any instance sharing this database
    /// (PostgreSQL `LISTEN`); `None` when the backend has no such channel (SQLite: one
    /// process, whose own hub already knows).
    async fn appended_events(&self) -> Result<Option<NotificationStream>, StoreError>;

    /// A run's events with a sequence number above `after` (all with `None`), in order.
    async fn events_after(
        &self,
        id: &str,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError>;

    /// All input items of a run, in order.
    async fn input_items(&self, tenant_id: &str, id: &str) -> Result<Vec<Item>, StoreError>;

    /// One page of a run's input items and whether more follow. `NotFound` when `after`
    /// names no item of this run.
    async fn list_input_items(
        &self,
        tenant_id: &str,
        id: &str,
        page: &ItemPage,
    ) -> Result<(Vec<Item>, bool), StoreError>;

    /// Deletes a run with its items and events.
    async fn delete_run(&self, tenant_id: &str, id: &str) -> Result<(), StoreError>;

    /// Moves up to `limit` queued runs, oldest first, to `in_progress` under `owner`'s lease
    /// and returns them. Concurrent claimers never get the same run.
    async fn claim_queued(
        &self,
        owner: &str,
        lease_expires_at: i64,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<StoredRun>, StoreError>;

    /// Saves a running run's progress, if `owner` still holds it.
    async fn checkpoint(
        &self,
        id: &str,
        owner: &str,
        body: &ResponseObject,
        transcript: &[Entry],
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// Extends the lease of every unfinished run held by `owner`; returns how many.
    async fn renew_leases(&self, owner: &str, until_ms: i64) -> Result<u64, StoreError>;

    /// In-progress runs not held by `exclude_owner` whose lease ran out before `now_ms`:
    /// their instance is gone. (Queued runs are held by nobody and wait to be claimed.)
    async fn stale_runs(
        &self,
        now_ms: i64,
        exclude_owner: &str,
    ) -> Result<Vec<StoredRun>, StoreError>;

    /// Takes over a running run whose lease ran out before `now_ms`: `true` if this
    /// instance (`owner`) now holds it.
    async fn claim_stale(
        &self,
        id: &str,
        owner: &str,
        lease_expires_at: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;

    /// The highest sequence number in a run's event log.
    async fn last_sequence_number(&self, id: &str) -> Result<Option<u64>, StoreError>;

    /// The run recorded for an idempotency key.
    async fn find_idempotent(
        &self,
        tenant_id: &str,
        key: &str,
    ) -> Result<Option<IdempotentRequest>, StoreError>;

    /// Deletes runs that stopped before `runs_before_ms` (with their items and events), and
    /// idempotency keys recorded before `keys_before_ms`, oldest first, in transactions of
    /// bounded size. Returns how many runs and keys went.
    async fn prune(
        &self,
        runs_before_ms: i64,
        keys_before_ms: i64,
    ) -> Result<(u64, u64), StoreError>;

    /// Runs in one of `states` whose lease is held by `owner`.
    async fn runs_owned_by(
        &self,
        owner: &str,
        states: &[RunState],
    ) -> Result<Vec<StoredRun>, StoreError>;
}

/// Response ids, as announced when their events are appended.
pub type NotificationStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = String> + Send>>;

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
        Err(StoreError::Database(format!(
            "unsupported database URL scheme in {url:?}"
        )))
    }
}
