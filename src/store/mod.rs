//! Persistence of runs, their input items and their event logs. `RunStore` (`run_store.rs`) is
//! the only way anything reaches the database. `SqlStore` (`shared.rs`) implements it once, with
//! the SQL text and row types of `sql.rs` and the policy for failed batches of `batch.rs`, over a
//! backend (`sqlite.rs`, `postgres.rs`) that supplies only what differs: its connections, the
//! statements that differ, the event writer's batch commit, claims, notifications and upkeep.
//!
//! Two rules hold on both backends, whoever calls:
//! * a run's state and lease change only through a [`Transition`] of the table in `state.rs`,
//!   each a compare-and-set;
//! * a run's events are appended only by the holder of its lease, or together with the change
//!   that ends it (its closing events commit with its final state, or not at all).
//!
//! The files below this one import each other in one direction only (records and errors at the
//! bottom, the backends at the top); this file declares them, re-exports what the rest of the
//! service uses, and holds what no file below it names.

mod batch;
mod error;
mod frames;
pub mod migrate;
pub mod postgres;
mod run_store;
mod shared;
mod sql;
pub mod sqlite;
pub mod state;
mod types;

use std::sync::Arc;

pub use error::{Cause, StoreError};
pub use run_store::RunStore;
pub use shared::SqlStore;
pub use state::{Guard, LeaseAfter, RunState, Transition};
pub use types::{
    ApiKeyRecord, Appended, Applied, Backend, BatchOutcome, Change, ClosingEvents,
    ConversationRecord, FoundItem, IdempotencyKey, IdempotentRequest, Lease, Loss, NewRun,
    Notification, NotificationStream, Order, RunEnding, RunFilter, Saved, StoredRun, UsageRow,
    WriteBatch,
};

/// The tenant every row belongs to until API keys arrive.
pub const DEFAULT_TENANT: &str = "default";

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
        Err(StoreError::rejected(format!(
            "unsupported database URL scheme in {url:?}"
        )))
    }
}
