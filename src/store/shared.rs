//! The store's methods that both backends run the same way, written once: [`SqlStore`] runs the
//! SQL text of `sql.rs` on the connections its backend gives it. A backend ([`StoreBackend`])
//! supplies only what differs: where reads and writes go (SQLite's one writing connection and
//! its readers, PostgreSQL's pool), the inserts of many rows (SQLite's chunked `VALUES` lists,
//! PostgreSQL's arrays), the statement that claims queued runs (with row locks on PostgreSQL),
//! renewing leases, cancel requests and item lookups, the event writer's batch commit, the
//! lease holders it remembers (SQLite), notifications and upkeep.
//!
//! The methods are generic over the sqlx database of the backend. The `where` clause of the
//! `RunStore` impl says what they need of it (each backend's types meet it); it is written out
//! again on the helpers a backend's batch commit shares ([`compare_and_set`],
//! [`take_conversation`], [`conversation_step`]), because Rust does not carry such bounds along
//! with a trait (a trait alias could not stand for them).

use std::future::Future;
use std::ops::DerefMut;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::{
    ColumnIndex, Connection, Database, Decode, Encode, Executor, IntoArguments, Pool, Type,
};
use tokio_util::sync::CancellationToken;

use super::batch::{self, Commit};
use super::error::{StoreError, findable};
use super::frames;
use super::migrate::Schema;
use super::run_store::RunStore;
use super::sql::{self, IndexedItem, ItemRow, RunRow};
use super::state::{LeaseAfter, RunState, Transition};
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

/// Frames of a run's log read per query when reading its events (see `events_after`).
const FRAMES_PER_READ: usize = 64;

/// A store on one backend (`SqliteStore`, `PostgresStore`).
pub struct SqlStore<B> {
    pub(super) backend: B,
    schema: Schema,
}

impl<B> SqlStore<B> {
    /// The store of a backend whose start found and did `schema`.
    pub(super) fn new(backend: B, schema: Schema) -> SqlStore<B> {
        SqlStore { backend, schema }
    }
}

/// A connection of a backend's database.
pub(super) type Conn<B> = <<B as StoreBackend>::Db as Database>::Connection;

/// How many rows a statement changed (each backend's result has it; sqlx has no trait for it).
pub(super) trait Affected {
    fn rows_affected(&self) -> u64;
}

/// What a database backend supplies that [`SqlStore`] cannot write once. Its batch commit is
/// [`Commit`], for the failed-batch policy of `batch.rs`.
pub(super) trait StoreBackend: Commit + Send + Sync + 'static {
    type Db: Database<QueryResult: Affected>;
    /// A connection to write on, the backend's to give until it is dropped.
    type Writer<'a>: DerefMut<Target = Conn<Self>> + Send
    where
        Self: 'a;

    const KIND: Backend;
    const MIGRATOR: Migrator;
    /// Claims queued runs ([`RunStore::claim_queued`]): `$1` the state they go to, `$2` and
    /// `$3` the lease, `$4` now, `$5` how many at most; returns the runs claimed. The state
    /// they leave, `queued`, is written in the statement: only then can the planner use the
    /// index of queued runs (a partial index, migration 14).
    const CLAIM_QUEUED: &'static str;
    /// Lists a tenant's responses ([`RunStore::list_runs`]), newest (highest id) first: `$1`
    /// the tenant, `$2` the id they come after, `$3` the state, `$4` the state they are not
    /// in, `$5` the model, `$6` the metadata pairs they must have (a JSON object), `$7` and
    /// `$8` the creation times from and before, `$9` how many; each filter a NULL leaves out.
    /// The JSON reads of the body are the dialects' own.
    const LIST_RUNS: &'static str;

    /// Where reads go.
    fn readers(&self) -> &Pool<Self::Db>;

    /// Where writes go: waited for, as the backend lets writers in.
    fn writer(&self) -> impl Future<Output = Result<Self::Writer<'_>, StoreError>> + Send;

    /// Inserts a run with its input items and first events.
    fn insert_run(
        conn: &mut Conn<Self>,
        run: &NewRun,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Appends input items to run `id`, the first at position `first`.
    fn append_input(
        conn: &mut Conn<Self>,
        id: &str,
        tenant_id: &str,
        first: i64,
        items: &[Item],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Indexes output items (see [`sql::indexed_items`]); those indexed before are skipped.
    /// None: no statement.
    fn index_output(
        conn: &mut Conn<Self>,
        items: &[IndexedItem<'_>],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Appends events (without a fence: the caller's transaction just changed the run). None:
    /// no statement.
    fn append_events(
        conn: &mut Conn<Self>,
        events: &[EventRecord],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the input items, events and indexed output of the runs `ids` (being pruned).
    fn delete_rows_of(
        conn: &mut Conn<Self>,
        ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// `holder` (`None`: nobody) holds run `id` now: told after the change committed, before
    /// the writing connection is let go. Nothing by default; SQLite remembers it (`Holders`).
    fn leased(&self, _id: &str, _holder: Option<&str>) {}

    /// `holder` let go of every run it held (told as [`StoreBackend::leased`]).
    fn released(&self, _holder: &str) {}

    /// See [`RunStore::renew_leases`] (never asked with no ids).
    fn renew_leases(
        &self,
        holder: &str,
        ids: &[&str],
        until: UnixMillis,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// See [`RunStore::request_cancel`] (`id` is findable).
    fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// See [`RunStore::find_items`] (the ids are findable).
    fn find_items(
        &self,
        tenant_id: &str,
        ids: &[&str],
    ) -> impl Future<Output = Result<Vec<FoundItem>, StoreError>> + Send;

    /// See [`RunStore::notifications`].
    fn notifications(
        &self,
    ) -> impl Future<Output = Result<Option<NotificationStream>, StoreError>> + Send;

    /// See [`RunStore::upkeep`].
    fn upkeep(&self, stop: CancellationToken) -> impl Future<Output = ()> + Send;
}

/// Takes the tenant's conversation `conversation` for the response `run_id`, on `conn`, if no
/// other response holds it: `Locked` when one does, `NotFound` when there is no such
/// conversation. The condition is on the conversation's row alone, so that PostgreSQL's
/// re-check after waiting for the row's lock sees the response that took it.
pub(super) async fn take_conversation<B: StoreBackend>(
    conn: &mut Conn<B>,
    tenant_id: &str,
    conversation: &str,
    run_id: &str,
) -> Result<(), StoreError>
where
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> String: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db>,
    for<'q> Option<String>: Encode<'q, B::Db>,
    for<'q> Option<UnixMillis>: Encode<'q, B::Db>,
    for<'r> &'r str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    let taken = sqlx::query(sql::LOCK_CONVERSATION)
        .bind(tenant_id)
        .bind(conversation)
        .bind(run_id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if taken == 1 {
        return Ok(());
    }
    let exists: i64 = sqlx::query_scalar(sql::CONVERSATION_EXISTS)
        .bind(tenant_id)
        .bind(conversation)
        .fetch_one(&mut *conn)
        .await?;
    Err(match exists {
        0 => StoreError::NotFound,
        _ => StoreError::Locked,
    })
}

/// What a run's change does to the conversation the run belongs to (`body.conversation`), on
/// `conn`, in the change's transaction once it applied. A run that goes on (resumed) takes the
/// conversation: `Locked` when another response holds it. A run that stops or pauses appends
/// its input items, then its output, each item once (an id the conversation has is skipped:
/// a resumed run appends only what is new), and lets go of it; a failed run appends nothing.
/// Nothing happens for a run in no conversation.
pub(super) async fn conversation_step<B: StoreBackend>(
    conn: &mut Conn<B>,
    run_id: &str,
    tenant_id: &str,
    body: &ResponseObject,
    to: RunState,
    now: UnixMillis,
) -> Result<(), StoreError>
where
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> String: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db>,
    for<'q> Option<String>: Encode<'q, B::Db>,
    for<'q> Option<UnixMillis>: Encode<'q, B::Db>,
    for<'r> &'r str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    let Some(conversation) = body.conversation.as_ref().map(|c| c.id.as_str()) else {
        return Ok(());
    };
    if matches!(to, RunState::InProgress | RunState::Queued) {
        return match take_conversation::<B>(conn, tenant_id, conversation, run_id).await {
            // Deleted while the response was paused: it goes on in none (what it is shown
            // is its own items, `Engine::conversation_before`; its new items go nowhere).
            Err(StoreError::NotFound) => Ok(()),
            taken => taken,
        };
    }
    if to != RunState::Failed {
        let rows: Vec<ItemRow> = sqlx::query_as(sql::RUN_INPUT_ITEMS)
            .bind(run_id)
            .fetch_all(&mut *conn)
            .await?;
        let input = sql::items(rows)?;
        for item in input.iter().chain(&body.output) {
            let appended = sqlx::query(sql::APPEND_CONVERSATION_ITEM)
                .bind(conversation)
                .bind(item.id())
                .bind(sql::to_json(item)?)
                .bind(now)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            if appended == 1 {
                sqlx::query(sql::BUMP_CONVERSATION_SEQ)
                    .bind(conversation)
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    sqlx::query(sql::UNLOCK_CONVERSATION)
        .bind(conversation)
        .bind(run_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A transition's compare-and-set on `conn`. The outer error is the database's; the inner one
/// says why the change did not apply: `NotFound`, or `Conflict` with the run's state.
pub(super) async fn compare_and_set<B: StoreBackend>(
    conn: &mut Conn<B>,
    change: &Change<'_>,
) -> Result<Result<(), StoreError>, StoreError>
where
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> String: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db>,
    for<'q> Option<String>: Encode<'q, B::Db>,
    for<'q> Option<UnixMillis>: Encode<'q, B::Db>,
    for<'r> &'r str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    let t = change.transition;
    let (holder, until) = match t.lease() {
        LeaseAfter::Caller => (Some(change.caller), Some(change.lease_until)),
        LeaseAfter::Nobody => (None, None),
    };
    let body = change
        .body
        .map(|body| sql::body_json(body, change.body_json))
        .transpose()?;
    let transcript = change.transcript.map(|t| sql::to_json(&t)).transpose()?;
    let updated = sqlx::query(sql::COMPARE_AND_SET)
        .bind(t.to().as_str())
        .bind(body)
        .bind(transcript)
        .bind(change.now)
        .bind(holder)
        .bind(until)
        .bind(change.expires_at)
        .bind(t.to().is_final().then_some(change.now))
        .bind(change.id)
        .bind(t.from().as_str())
        .bind(sql::guard_name(t.guard()))
        .bind(change.caller)
        .bind(change.now)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if updated == 1 {
        return Ok(Ok(()));
    }
    let state: Option<String> = sqlx::query_scalar(sql::STATE_OF)
        .bind(change.id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(Err(match state {
        None => StoreError::NotFound,
        Some(state) => StoreError::Conflict {
            actual: sql::parse_state(&state)?,
        },
    }))
}

#[async_trait]
impl<B: StoreBackend> RunStore for SqlStore<B>
where
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> String: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Decode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db>,
    for<'q> Option<String>: Encode<'q, B::Db>,
    for<'q> Option<UnixMillis>: Encode<'q, B::Db>,
    for<'r> &'r str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    fn backend(&self) -> Backend {
        B::KIND
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let applied: i64 = sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
            .fetch_one(self.backend.readers())
            .await?;
        let expected = B::MIGRATOR.iter().count() as i64;
        if applied < expected {
            return Err(StoreError::unavailable(format!(
                "{applied} of {expected} migrations applied"
            )));
        }
        Ok(())
    }

    async fn count_unfinished(&self) -> Result<Vec<(RunState, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(sql::COUNT_UNFINISHED)
            .fetch_all(self.backend.readers())
            .await?;
        sql::unfinished_counts(rows)
    }

    async fn insert_run(&self, run: &NewRun) -> Result<(), StoreError> {
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        if let Some(idempotency) = &run.idempotency {
            let recorded = sqlx::query(sql::INSERT_IDEMPOTENCY_KEY)
                .bind(&run.tenant_id)
                .bind(&idempotency.key)
                .bind(&idempotency.request_hash)
                .bind(&run.body.id)
                .bind(run.now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if recorded == 0 {
                return Err(StoreError::KeyTaken);
            }
        }
        if let Some(conversation) = &run.body.conversation {
            take_conversation::<B>(&mut tx, &run.tenant_id, &conversation.id, &run.body.id).await?;
        }
        B::insert_run(&mut tx, run).await?;
        tx.commit().await?;
        let holder = run.lease.as_ref().map(|l| l.holder.as_str());
        self.backend.leased(&run.body.id, holder);
        Ok(())
    }

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, StoreError> {
        findable(id)?;
        let row: Option<RunRow> = sqlx::query_as(sql::GET_RUN)
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(self.backend.readers())
            .await?;
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    async fn state_of(&self, id: &str) -> Result<Option<RunState>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let state: Option<String> = sqlx::query_scalar(sql::STATE_OF)
            .bind(id)
            .fetch_optional(self.backend.readers())
            .await?;
        state.map(|s| sql::parse_state(&s)).transpose()
    }

    async fn transition(&self, change: &Change<'_>) -> Result<Applied, StoreError> {
        findable(change.id)?;
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        // The UPDATE comes first: on SQLite the transaction holds the write lock from the
        // start; on PostgreSQL the row stays locked until the commit, so nobody appends in
        // between.
        compare_and_set::<B>(&mut tx, change).await??;
        if !change.append_input.is_empty() {
            let (tenant_id, next): (String, i64) = sqlx::query_as(sql::NEXT_INPUT_POSITION)
                .bind(change.id)
                .fetch_one(&mut *tx)
                .await?;
            B::append_input(&mut tx, change.id, &tenant_id, next, change.append_input).await?;
        }
        if let Some(body) = change.body {
            let tenant_id: String = sqlx::query_scalar(sql::TENANT_OF)
                .bind(change.id)
                .fetch_one(&mut *tx)
                .await?;
            let indexed = sql::indexed_items(change.id, &tenant_id, body, change.transition.to())?;
            B::index_output(&mut tx, &indexed).await?;
            let to = change.transition.to();
            conversation_step::<B>(&mut tx, change.id, &tenant_id, body, to, change.now).await?;
        }
        let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQUENCE_NUMBER)
            .bind(change.id)
            .fetch_one(&mut *tx)
            .await?;
        let next = sql::sequence(last).map_or(0, |n| n + 1);
        let closing = change
            .closing
            .map(|render| render(next))
            .unwrap_or_default();
        B::append_events(&mut tx, &closing).await?;
        tx.commit().await?;
        let holder = match change.transition.lease() {
            LeaseAfter::Caller => Some(change.caller),
            LeaseAfter::Nobody => None,
        };
        self.backend.leased(change.id, holder);
        Ok(Applied {
            next_sequence: next + closing.len() as u64,
        })
    }

    async fn write_batch(&self, batch: &WriteBatch<'_>) -> BatchOutcome {
        batch::write(&self.backend, batch).await
    }

    async fn claim_queued(
        &self,
        lease: &Lease,
        now: UnixMillis,
        limit: u32,
    ) -> Result<Vec<StoredRun>, StoreError> {
        let t = Transition::CLAIM;
        debug_assert_eq!(
            t.from(),
            RunState::Queued,
            "CLAIM_QUEUED names the state it leaves"
        );
        let rows = sqlx::query_as(B::CLAIM_QUEUED)
            .bind(t.to().as_str())
            .bind(&lease.holder)
            .bind(lease.until)
            .bind(now)
            .bind(i64::from(limit));
        let mut conn = self.backend.writer().await?;
        let rows: Vec<RunRow> = rows.fetch_all(&mut *conn).await?;
        let runs = sql::runs(rows)?;
        for run in &runs {
            self.backend.leased(&run.body.id, Some(&lease.holder));
        }
        Ok(runs)
    }

    async fn claim_stale(
        &self,
        id: &str,
        lease: &Lease,
        now: UnixMillis,
    ) -> Result<Option<StoredRun>, StoreError> {
        findable(id)?;
        let row = sqlx::query_as(sql::CLAIM_STALE)
            .bind(&lease.holder)
            .bind(lease.until)
            .bind(id)
            .bind(Transition::TAKE_OVER.from().as_str())
            .bind(now);
        let mut conn = self.backend.writer().await?;
        let row: Option<RunRow> = row.fetch_optional(&mut *conn).await?;
        if row.is_some() {
            self.backend.leased(id, Some(&lease.holder));
        }
        row.map(TryInto::try_into).transpose()
    }

    async fn checkpoint(
        &self,
        id: &str,
        holder: &str,
        body: &ResponseObject,
        transcript: &[Entry],
        now: UnixMillis,
    ) -> Result<Saved, StoreError> {
        let (body, transcript) = (sql::to_json(body)?, sql::to_json(&transcript)?);
        let saved: Option<Option<UnixMillis>> = sqlx::query_scalar(sql::CHECKPOINT)
            .bind(body)
            .bind(transcript)
            .bind(now)
            .bind(id)
            .bind(holder)
            .fetch_optional(&mut *self.backend.writer().await?)
            .await?;
        match saved {
            Some(cancel) => Ok(Saved {
                cancel_requested: cancel.is_some(),
            }),
            None => {
                let actual = self.state_of(id).await?.ok_or(StoreError::NotFound)?;
                Err(StoreError::Conflict { actual })
            }
        }
    }

    async fn renew_leases(
        &self,
        holder: &str,
        ids: &[&str],
        until: UnixMillis,
    ) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.backend.renew_leases(holder, ids, until).await
    }

    async fn release_leases(&self, holder: &str) -> Result<u64, StoreError> {
        let mut conn = self.backend.writer().await?;
        let released = sqlx::query(sql::RELEASE_LEASES)
            .bind(holder)
            .bind(Transition::HAND_OVER.from().as_str())
            .execute(&mut *conn)
            .await?
            .rows_affected();
        self.backend.released(holder);
        Ok(released)
    }

    async fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        findable(id)?;
        self.backend.request_cancel(tenant_id, id, now).await
    }

    async fn expired_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError> {
        let rows: Vec<RunRow> = sqlx::query_as(sql::EXPIRED_RUNS)
            .bind(now)
            .fetch_all(self.backend.readers())
            .await?;
        sql::runs(rows)
    }

    async fn stale_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError> {
        let rows: Vec<RunRow> = sqlx::query_as(sql::STALE_RUNS)
            .bind(now)
            .fetch_all(self.backend.readers())
            .await?;
        sql::runs(rows)
    }

    async fn events_after(
        &self,
        id: &str,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        if findable(id).is_err() {
            return Ok(Vec::new());
        }
        // Frames are read a few at a time until they hold `limit` events: each holds at least
        // one event after the cursor, often dozens, so reading `limit` of them at once would
        // read (and decode) many times what is asked for.
        let limit = limit as usize;
        let per_read = limit.clamp(1, FRAMES_PER_READ);
        let mut events = Vec::new();
        let mut cursor = after;
        loop {
            let rows: Vec<frames::FrameRow> = sqlx::query_as(sql::FRAMES_AFTER)
                .bind(id)
                .bind(cursor.map_or(-1, |n| n as i64))
                .bind(per_read as i64)
                .fetch_all(self.backend.readers())
                .await?;
            let (read, last) = (rows.len(), rows.last().map(|r| r.last_seq.max(0) as u64));
            events.extend(frames::expand(id, rows, cursor, limit - events.len())?);
            if events.len() >= limit || read < per_read {
                return Ok(events);
            }
            cursor = last;
        }
    }

    async fn last_sequence_number(&self, id: &str) -> Result<Option<u64>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQUENCE_NUMBER)
            .bind(id)
            .fetch_one(self.backend.readers())
            .await?;
        Ok(sql::sequence(last))
    }

    async fn list_runs(
        &self,
        tenant_id: &str,
        filter: &RunFilter,
        limit: u32,
        after: Option<&str>,
    ) -> Result<(Vec<StoredRun>, bool), StoreError> {
        let metadata = (!filter.metadata.is_empty()).then(|| {
            let pairs: serde_json::Map<String, serde_json::Value> = filter
                .metadata
                .iter()
                .map(|(key, value)| (key.clone(), value.as_str().into()))
                .collect();
            serde_json::Value::Object(pairs).to_string()
        });
        // Ids are UUIDv7s, so the primary key orders the listing by creation: no index of
        // its own to keep up on the insert of every run.
        let rows: Vec<RunRow> = sqlx::query_as(B::LIST_RUNS)
            .bind(tenant_id)
            .bind(after)
            .bind(filter.state.map(RunState::as_str))
            .bind(filter.not_state.map(RunState::as_str))
            .bind(filter.model.as_deref())
            .bind(metadata)
            .bind(filter.created_from)
            .bind(filter.created_before)
            .bind(i64::from(limit) + 1)
            .fetch_all(self.backend.readers())
            .await?;
        let mut runs = sql::runs(rows)?;
        let has_more = runs.len() > limit as usize;
        runs.truncate(limit as usize);
        Ok((runs, has_more))
    }

    async fn input_items(&self, tenant_id: &str, id: &str) -> Result<Vec<Item>, StoreError> {
        if findable(id).is_err() {
            return Ok(Vec::new());
        }
        let rows: Vec<ItemRow> = sqlx::query_as(sql::INPUT_ITEMS)
            .bind(tenant_id)
            .bind(id)
            .fetch_all(self.backend.readers())
            .await?;
        sql::items(rows)
    }

    async fn list_input_items(
        &self,
        tenant_id: &str,
        id: &str,
        limit: u32,
        order: Order,
        after: Option<&str>,
    ) -> Result<(Vec<Item>, bool), StoreError> {
        findable(id)?;
        let position: Option<i64> = match after {
            None => None,
            Some(item_id) => {
                findable(item_id)?;
                Some(
                    sqlx::query_scalar(sql::INPUT_ITEM_POSITION)
                        .bind(tenant_id)
                        .bind(id)
                        .bind(item_id)
                        .fetch_optional(self.backend.readers())
                        .await?
                        .ok_or(StoreError::NotFound)?,
                )
            }
        };
        let (query, from) = sql::page(order);
        let rows: Vec<ItemRow> = sqlx::query_as(query)
            .bind(tenant_id)
            .bind(id)
            .bind(position.unwrap_or(from))
            .bind(i64::from(limit) + 1)
            .fetch_all(self.backend.readers())
            .await?;
        sql::page_of(rows, limit)
    }

    async fn find_items(
        &self,
        tenant_id: &str,
        ids: &[&str],
    ) -> Result<Vec<FoundItem>, StoreError> {
        let ids: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| findable(id).is_ok())
            .collect();
        self.backend.find_items(tenant_id, &ids).await
    }

    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        sqlx::query(sql::INSERT_TENANT)
            .bind(&key.tenant_id)
            .bind(key.created_at)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql::INSERT_KEY)
            .bind(&key.id)
            .bind(&key.tenant_id)
            .bind(&key.name)
            .bind(&key.hash)
            .bind(&key.prefix)
            .bind(&key.policy)
            .bind(key.created_at)
            .bind(key.revoked_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn key_by_hash(&self, hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row: Option<sql::KeyRow> = sqlx::query_as(sql::KEY_BY_HASH)
            .bind(hash)
            .fetch_optional(self.backend.readers())
            .await?;
        Ok(row.map(Into::into))
    }

    async fn key_by_id(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let row: Option<sql::KeyRow> = sqlx::query_as(sql::KEY_BY_ID)
            .bind(id)
            .fetch_optional(self.backend.readers())
            .await?;
        Ok(row.map(Into::into))
    }

    async fn list_keys(&self, tenant_id: Option<&str>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows: Vec<sql::KeyRow> = sqlx::query_as(sql::LIST_KEYS)
            .bind(tenant_id)
            .fetch_all(self.backend.readers())
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn revoke_key(&self, id: &str, now: UnixMillis) -> Result<bool, StoreError> {
        if findable(id).is_err() {
            return Ok(false);
        }
        let revoked = sqlx::query(sql::REVOKE_KEY)
            .bind(now)
            .bind(id)
            .execute(&mut *self.backend.writer().await?)
            .await?
            .rows_affected();
        Ok(revoked == 1)
    }

    async fn add_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        for row in rows {
            sqlx::query(sql::ADD_USAGE)
                .bind(&row.tenant_id)
                .bind(&row.key_id)
                .bind(&row.model)
                .bind(&row.day)
                .bind(row.runs)
                .bind(row.input_tokens)
                .bind(row.cached_tokens)
                .bind(row.output_tokens)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn usage(&self, tenant_id: Option<&str>) -> Result<Vec<UsageRow>, StoreError> {
        let rows: Vec<sql::UsageDbRow> = sqlx::query_as(sql::USAGE)
            .bind(tenant_id)
            .fetch_all(self.backend.readers())
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn delete_run(&self, tenant_id: &str, id: &str) -> Result<(), StoreError> {
        findable(id)?;
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        let deleted = sqlx::query(sql::DELETE_RUN)
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        for statement in sql::DELETE_WITH_RUN {
            sqlx::query(statement).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        self.backend.leased(id, None);
        Ok(())
    }

    async fn find_idempotent(
        &self,
        tenant_id: &str,
        key: &str,
    ) -> Result<Option<IdempotentRequest>, StoreError> {
        if findable(key).is_err() {
            return Ok(None);
        }
        let row: Option<sql::IdempotencyRow> = sqlx::query_as(sql::FIND_IDEMPOTENT)
            .bind(tenant_id)
            .bind(key)
            .fetch_optional(self.backend.readers())
            .await?;
        Ok(row.map(Into::into))
    }

    async fn prune(
        &self,
        runs_before: UnixMillis,
        keys_before: UnixMillis,
    ) -> Result<(u64, u64), StoreError> {
        // A transaction per batch, however many runs are due: the SQLite writer's other work
        // goes on between them, and no deletion holds PostgreSQL's tables for long.
        let mut runs = 0;
        loop {
            let mut conn = self.backend.writer().await?;
            let mut tx = conn.begin().await?;
            let ids: Vec<String> = sqlx::query_scalar(sql::prune_runs!())
                .bind(runs_before)
                .bind(sql::PRUNE_BATCH)
                .fetch_all(&mut *tx)
                .await?;
            if !ids.is_empty() {
                B::delete_rows_of(&mut tx, &ids).await?;
            }
            tx.commit().await?;
            runs += ids.len() as u64;
            if (ids.len() as i64) < sql::PRUNE_BATCH {
                break;
            }
        }
        let mut keys = 0;
        loop {
            let deleted = sqlx::query(sql::PRUNE_KEYS)
                .bind(keys_before)
                .bind(sql::PRUNE_BATCH)
                .execute(&mut *self.backend.writer().await?)
                .await?
                .rows_affected();
            keys += deleted;
            if (deleted as i64) < sql::PRUNE_BATCH {
                break;
            }
        }
        Ok((runs, keys))
    }

    async fn create_conversation(
        &self,
        conversation: &ConversationRecord,
        items: &[Item],
    ) -> Result<(), StoreError> {
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        sqlx::query(sql::INSERT_CONVERSATION)
            .bind(&conversation.id)
            .bind(&conversation.tenant_id)
            .bind(conversation.created_at)
            .bind(&conversation.metadata)
            .bind(items.len() as i64)
            .execute(&mut *tx)
            .await?;
        for (seq, item) in items.iter().enumerate() {
            sqlx::query(sql::INSERT_CONVERSATION_ITEM)
                .bind(&conversation.id)
                .bind(seq as i64)
                .bind(item.id())
                .bind(sql::to_json(item)?)
                .bind(conversation.created_at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn get_conversation(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<ConversationRecord, StoreError> {
        findable(id)?;
        let row: Option<sql::ConversationRow> = sqlx::query_as(sql::GET_CONVERSATION)
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(self.backend.readers())
            .await?;
        row.map(Into::into).ok_or(StoreError::NotFound)
    }

    async fn update_conversation(
        &self,
        tenant_id: &str,
        id: &str,
        metadata: &str,
    ) -> Result<ConversationRecord, StoreError> {
        findable(id)?;
        let updated = sqlx::query(sql::UPDATE_CONVERSATION)
            .bind(tenant_id)
            .bind(id)
            .bind(metadata)
            .execute(&mut *self.backend.writer().await?)
            .await?
            .rows_affected();
        if updated == 0 {
            return Err(StoreError::NotFound);
        }
        self.get_conversation(tenant_id, id).await
    }

    async fn delete_conversation(&self, tenant_id: &str, id: &str) -> Result<(), StoreError> {
        findable(id)?;
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        let deleted = sqlx::query(sql::DELETE_CONVERSATION)
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound);
        }
        sqlx::query(sql::DELETE_CONVERSATION_ITEMS)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn append_conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        items: &[Item],
        now: UnixMillis,
    ) -> Result<Appended, StoreError> {
        findable(id)?;
        let mut conn = self.backend.writer().await?;
        let mut tx = conn.begin().await?;
        let first: Option<i64> = sqlx::query_scalar(sql::RESERVE_CONVERSATION_SEQ)
            .bind(tenant_id)
            .bind(id)
            .bind(items.len() as i64)
            .fetch_optional(&mut *tx)
            .await?;
        let first = first.ok_or(StoreError::NotFound)?;
        for (offset, item) in items.iter().enumerate() {
            let inserted = sqlx::query(sql::INSERT_CONVERSATION_ITEM)
                .bind(id)
                .bind(first + offset as i64)
                .bind(item.id())
                .bind(sql::to_json(item)?)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if inserted == 0 {
                // Dropping the transaction rolls it back: nothing is appended.
                return Ok(Appended::Duplicate(item.id().to_string()));
            }
        }
        tx.commit().await?;
        Ok(Appended::Items(items.to_vec()))
    }

    async fn list_conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        limit: u32,
        order: Order,
        after: Option<&str>,
    ) -> Result<(Vec<Item>, bool), StoreError> {
        self.get_conversation(tenant_id, id).await?;
        let seq: Option<i64> = match after {
            None => None,
            Some(item_id) => {
                findable(item_id)?;
                let row: Option<(i64, String)> = sqlx::query_as(sql::CONVERSATION_ITEM)
                    .bind(tenant_id)
                    .bind(id)
                    .bind(item_id)
                    .fetch_optional(self.backend.readers())
                    .await?;
                Some(row.ok_or(StoreError::NotFound)?.0)
            }
        };
        let (query, from) = sql::conversation_page(order);
        let rows: Vec<ItemRow> = sqlx::query_as(query)
            .bind(id)
            .bind(seq.unwrap_or(from))
            .bind(i64::from(limit) + 1)
            .fetch_all(self.backend.readers())
            .await?;
        sql::page_of(rows, limit)
    }

    async fn conversation_history(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Vec<Item>, StoreError> {
        self.get_conversation(tenant_id, id).await?;
        let rows: Vec<ItemRow> = sqlx::query_as(sql::ALL_CONVERSATION_ITEMS)
            .bind(id)
            .fetch_all(self.backend.readers())
            .await?;
        sql::items(rows)
    }

    async fn get_conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<Item, StoreError> {
        findable(id)?;
        findable(item_id)?;
        let row: Option<(i64, String)> = sqlx::query_as(sql::CONVERSATION_ITEM)
            .bind(tenant_id)
            .bind(id)
            .bind(item_id)
            .fetch_optional(self.backend.readers())
            .await?;
        sql::from_json(&row.ok_or(StoreError::NotFound)?.1)
    }

    async fn delete_conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<(), StoreError> {
        self.get_conversation_item(tenant_id, id, item_id).await?;
        sqlx::query(sql::DELETE_CONVERSATION_ITEM)
            .bind(id)
            .bind(item_id)
            .execute(&mut *self.backend.writer().await?)
            .await?;
        Ok(())
    }

    async fn notifications(&self) -> Result<Option<NotificationStream>, StoreError> {
        self.backend.notifications().await
    }

    async fn upkeep(&self, stop: CancellationToken) {
        self.backend.upkeep(stop).await
    }
}
