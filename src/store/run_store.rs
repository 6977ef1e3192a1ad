//! `RunStore`: everything the service asks of its database, one method per question or change.
//! `SqlStore` (`shared.rs`) implements it once for both backends.

use async_trait::async_trait;

use super::error::StoreError;
use super::migrate::Schema;
use super::state::RunState;
use super::types::{
    ApiKeyRecord, Appended, Applied, Backend, BatchOutcome, Change, ConversationRecord, FoundItem,
    IdempotentRequest, Lease, NewRun, NotificationStream, Order, RunFilter, Saved, StoredRun,
    UsageRow, WriteBatch,
};
use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::time::UnixMillis;

#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// What this store's start found and did to the schema.
    fn schema(&self) -> &Schema;

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
    /// the run as it is now under `lease`, or `None` when someone else holds it, or the
    /// lease's holder already does.
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

    /// Up to `limit` of a tenant's responses that `filter` matches, newest first, after the
    /// one with id `after` (from the newest without it), and whether more follow. A
    /// `store: false` response is left out once it stopped (it is being deleted).
    async fn list_runs(
        &self,
        tenant_id: &str,
        filter: &RunFilter,
        limit: u32,
        after: Option<&str>,
    ) -> Result<(Vec<StoredRun>, bool), StoreError>;

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

    /// Stores a new conversation with its first items (ids given), in one transaction.
    async fn create_conversation(
        &self,
        conversation: &ConversationRecord,
        items: &[Item],
    ) -> Result<(), StoreError>;

    /// The tenant's conversation (`NotFound` for another tenant's, as for none).
    async fn get_conversation(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<ConversationRecord, StoreError>;

    /// Replaces a conversation's metadata; the conversation as it is then.
    async fn update_conversation(
        &self,
        tenant_id: &str,
        id: &str,
        metadata: &str,
    ) -> Result<ConversationRecord, StoreError>;

    /// Deletes a conversation with its items.
    async fn delete_conversation(&self, tenant_id: &str, id: &str) -> Result<(), StoreError>;

    /// Appends items (ids given) after the conversation's last, numbered under its row, in one
    /// transaction: none when the conversation has one of their ids already.
    async fn append_conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        items: &[Item],
        now: UnixMillis,
    ) -> Result<Appended, StoreError>;

    /// Up to `limit` items of a conversation after the one with id `after`, and whether more
    /// follow. `NotFound` when the conversation or `after` is not there.
    async fn list_conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        limit: u32,
        order: Order,
        after: Option<&str>,
    ) -> Result<(Vec<Item>, bool), StoreError>;

    /// Every item of a conversation, oldest first (`NotFound` for none of the tenant's).
    async fn conversation_history(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Vec<Item>, StoreError>;

    /// One item of a conversation.
    async fn get_conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<Item, StoreError>;

    /// Takes one item out of a conversation.
    async fn delete_conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<(), StoreError>;

    /// News from other instances sharing this database (PostgreSQL `LISTEN`); `None` when
    /// the backend has no such channel (SQLite: one process).
    async fn notifications(&self) -> Result<Option<NotificationStream>, StoreError>;

    /// Storage housekeeping beside the writes, until `stop` is cancelled (SQLite: copies its
    /// log into the database off the writer's path). Returns at once when there is none.
    async fn upkeep(&self, stop: tokio_util::sync::CancellationToken);
}
