//! SQLite: the single-machine default. WAL mode so readers never wait for the writer; the
//! file and its folder are created on first start.
//!
//! Writes go through one connection: SQLite admits one writer at a time, and writers
//! contending for the lock wait in its busy handler, which sleeps — measured, that made
//! p99 latency 3–10× worse than queueing the writes here. Reads have a pool of their own.
//!
//! The log is copied into the database beside the writer, not by it (see `upkeep`).
//!
//! One instance serves a file ([`InstanceLock`]): leases between processes on one machine would
//! buy nothing, and two instances would take over each other's live runs.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{Mutex, MutexGuard, Notify};
use tokio_util::sync::CancellationToken;

use super::batch::Commit;
use super::error::{Cause, StoreError};
use super::frames::{Frame, frames};
use super::migrate;
use super::shared::{self, Affected, SqlStore, StoreBackend};
use super::sql::{self, INSERT_CHUNK, IndexedItem};
use super::types::{
    Backend, BatchOutcome, Change, FoundItem, Loss, NewRun, NotificationStream, WriteBatch,
};
use crate::protocol::events::EventRecord;
use crate::protocol::ids::RunIdHasher;
use crate::protocol::items::Item;
use crate::time::UnixMillis;

/// The SQLite store: the shared methods over [`SqliteBackend`].
pub type SqliteStore = SqlStore<SqliteBackend>;

/// What SQLite has of its own: one writing connection, a pool of readers, the lease holders it
/// wrote and the checkpointer's state.
pub struct SqliteBackend {
    /// The one writing connection, outside any pool: a pool pings a connection on its worker
    /// thread each time it is given back, one more round trip after every write.
    writer: Mutex<SqliteConnection>,
    pub(super) readers: SqlitePool,
    /// For the checkpointer's own connection.
    options: SqliteConnectOptions,
    log: LogState,
    holders: Holders,
}

/// The lease holder of each running run, as this store last wrote it. One instance serves a
/// file (it holds its `InstanceLock`) and writes only through this store's one writing
/// connection, so what this store wrote is what the file says: the event writer's fence is
/// answered from here, and a run it does not know (taken over from a previous process, say) is
/// looked up. Measured: a lookup statement per batch cost a text run 0.1 ms (one more round
/// trip to the connection's worker thread), a check inside the insert 85,000 instructions.
/// Changed only after the statement that changes a lease has committed.
/// Looked up per event written.
#[derive(Default)]
struct Holders(std::sync::Mutex<HashMap<String, String, RunIdHasher>>);

impl Holders {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String, RunIdHasher>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who holds `id` now (`None`: nobody; it is not running).
    fn set(&self, id: &str, holder: Option<&str>) {
        let mut holders = self.lock();
        match holder {
            Some(holder) => holders.insert(id.to_string(), holder.to_string()),
            None => holders.remove(id),
        };
    }

    /// The runs of `ids` that `holder` does not hold as far as this store knows, each once
    /// when its ids come together (a batch's events come a run at a time), under one lock.
    fn not_held<'e>(&self, ids: impl Iterator<Item = &'e str>, holder: &str) -> Vec<&'e str> {
        let holders = self.lock();
        let mut last = None;
        ids.filter(|&id| {
            let new = last != Some(id);
            last = Some(id);
            new && holders.get(id).is_none_or(|h| h != holder)
        })
        .collect()
    }

    fn release_all(&self, holder: &str) {
        self.lock().retain(|_, h| h != holder);
    }
}

/// Between the writer and the checkpointer.
#[derive(Default)]
struct LogState {
    /// Something was written since the checkpointer last looked.
    written: Notify,
    /// Writes so far (each time the writing connection was taken).
    writes: AtomicU64,
    /// Bytes of events written so far.
    bytes: AtomicU64,
    /// The checkpointer copied a long log into the database: the writer's next batch first
    /// copies what was appended since, so that its write starts the log over.
    restart: AtomicBool,
}

impl LogState {
    /// The writing connection was taken: a write follows.
    fn write(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.written.notify_one();
    }

    /// The write under way holds `bytes` of events.
    fn events(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Writes and bytes of events so far.
    fn gathered(&self) -> (u64, u64) {
        (
            self.writes.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Log length (pages) at which the writer starts the log over, once the checkpointer has
/// copied it. A longer log makes every page lookup slower and each restart dearer (measured:
/// 16,000 pages was worse than 2,000).
const RESTART_PAGES: i64 = 2_000;
/// Log length at which the writer's connection checkpoints by itself, as SQLite does by
/// default at 1,000: the fallback when no checkpointer runs (a store used without
/// `upkeep`) or it falls behind.
const WRITER_CHECKPOINT_PAGES: u32 = 10_000;
/// How long the checkpointer lets writes gather at least: a page written by many commits is
/// copied once.
const CHECKPOINT_DELAY: Duration = Duration::from_millis(25);
/// Writes the checkpointer lets gather before a pass, unless `CHECKPOINT_BYTES` of events
/// were written or `CHECKPOINT_MAX_DELAY` passed first. A pass sorts the page numbers of the
/// whole log, however little of it is new (most of a pass's cost, `walMerge`): a pass every
/// 25 ms with a few commits between them cost a text run 90,000 instructions at 40 runs/s
/// (callgrind).
const CHECKPOINT_WRITES: u64 = 64;
/// Bytes of events after which the checkpointer passes without waiting for more writes: large
/// writes lengthen the log fast.
const CHECKPOINT_BYTES: u64 = 1 << 20;
/// The longest the checkpointer lets fewer than `CHECKPOINT_WRITES` writes wait.
const CHECKPOINT_MAX_DELAY: Duration = Duration::from_millis(500);

/// Columns of an appended frame of events, in the order `frame_row` binds them.
const FRAME_COLUMNS: &str = "INSERT INTO response_event_frames (response_id, last_seq, first_seq, tenant_id, created_at, events) ";

/// The serving instance's claim on a database file: an exclusive lock on `<file>-lock`, held
/// for as long as the instance serves and released by the kernel however the process ends.
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock of the database at `url`; `None` for an in-memory database. Fails with
    /// a message saying why when another instance holds it.
    pub fn acquire(url: &str) -> Result<Option<InstanceLock>, StoreError> {
        let Some(database) = database_file(url)? else {
            return Ok(None);
        };
        let database = database.as_path();
        create_folder(database)?;
        let mut path = PathBuf::from(database).into_os_string();
        path.push("-lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| {
                let message = format!("cannot open {}: {e}", Path::new(&path).display());
                StoreError::Unavailable(Cause::of(e).saying(message))
            })?;
        match file.try_lock() {
            Ok(()) => Ok(Some(InstanceLock { _file: file })),
            Err(TryLockError::WouldBlock) => Err(StoreError::rejected(format!(
                "the SQLite database {} is in use by another switchyard instance (it holds {}); \
                 one instance serves an SQLite file: stop the other one, or use PostgreSQL to \
                 run several",
                database.display(),
                Path::new(&path).display()
            ))),
            Err(TryLockError::Error(e)) => {
                let message = format!("cannot lock {}: {e}", Path::new(&path).display());
                Err(StoreError::Unavailable(Cause::of(e).saying(message)))
            }
        }
    }
}

/// The file an SQLite URL names (as given: relative to the current folder when relative), or
/// `None` for an in-memory database.
pub fn database_file(url: &str) -> Result<Option<PathBuf>, StoreError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Ok(None);
    }
    Ok(Some(options(url)?.get_filename().to_path_buf()))
}

/// An input item's row.
struct InputRow<'a> {
    response_id: &'a str,
    tenant_id: &'a str,
    position: i64,
    item: &'a Item,
}

/// A frame's values, in the order of `FRAME_COLUMNS`.
fn frame_row<'args>(
    mut row: sqlx::query_builder::Separated<'_, 'args, Sqlite, &'static str>,
    frame: &'args Frame<'args>,
) {
    row.push_bind(frame.response_id)
        .push_bind(frame.last_seq)
        .push_bind(frame.first_seq)
        .push_bind(frame.tenant_id)
        .push_bind(frame.created_at)
        .push_bind(frame.events.as_str());
}

fn options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    SqliteConnectOptions::from_str(url).map_err(|e| {
        let message = format!("invalid SQLite URL {url:?}: {e}");
        StoreError::Rejected(Cause::of(e).saying(message))
    })
}

fn create_folder(database: &Path) -> Result<(), StoreError> {
    match database.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            std::fs::create_dir_all(parent).map_err(|e| {
                let message = format!("cannot create {}: {e}", parent.display());
                StoreError::Unavailable(Cause::of(e).saying(message))
            })
        }
        _ => Ok(()),
    }
}

impl SqliteStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<SqliteStore, StoreError> {
        let options = options(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // With WAL, NORMAL loses no committed data on a process crash (only on power loss).
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        create_folder(options.get_filename())?;
        let mut writer = options
            .clone()
            .pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES.to_string())
            .connect()
            .await?;
        let read_compat = async |conn: &mut SqliteConnection| {
            sqlx::query_as(migrate::SCHEMA_COMPAT)
                .fetch_all(conn)
                .await
                .ok()
        };
        let schema = migrate::apply(SqliteBackend::MIGRATOR, &mut writer, read_compat).await?;
        // Each statement is a round trip to the connection's worker thread; the pool's check
        // before handing a connection out would add one more, and an in-process connection
        // cannot go stale.
        let readers = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .test_before_acquire(false)
            .connect_with(options.clone().read_only(true))
            .await?;
        let backend = SqliteBackend {
            writer: Mutex::new(writer),
            readers,
            options,
            log: LogState::default(),
            holders: Holders::default(),
        };
        Ok(SqlStore::new(backend, schema))
    }
}

impl SqliteBackend {
    /// Inserts runs with their input items (their first events go with the batch's), several
    /// rows per statement.
    async fn insert_runs(conn: &mut SqliteConnection, runs: &[&NewRun]) -> Result<(), StoreError> {
        // Eleven columns a row: chunks stay under SQLite's parameter limit.
        for chunk in runs.chunks(INSERT_CHUNK / 2) {
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO responses (id, tenant_id, state, previous_response_id, store, \
                 created_at, updated_at, lease_owner, lease_expires_at, body, key_id) ",
            );
            let bodies = chunk
                .iter()
                .map(|run| sql::body_json(&run.body, run.body_json.as_deref()))
                .collect::<Result<Vec<_>, _>>()?;
            insert.push_values(chunk.iter().zip(bodies), |mut row, (run, body)| {
                row.push_bind(&run.body.id)
                    .push_bind(&run.tenant_id)
                    .push_bind(run.state.as_str())
                    .push_bind(&run.body.previous_response_id)
                    .push_bind(run.body.store)
                    .push_bind(run.now)
                    .push_bind(run.now)
                    .push_bind(run.lease.as_ref().map(|l| l.holder.as_str()))
                    .push_bind(run.lease.as_ref().map(|l| l.until))
                    .push_bind(body)
                    .push_bind(&run.key_id);
            });
            insert.build().execute(&mut *conn).await?;
        }
        let items: Vec<InputRow> = runs
            .iter()
            .flat_map(|run| {
                let positions = 0..;
                positions
                    .zip(&run.input_items)
                    .map(|(position, item)| InputRow {
                        response_id: &run.body.id,
                        tenant_id: &run.tenant_id,
                        position,
                        item,
                    })
            })
            .collect();
        Self::insert_items(conn, &items).await
    }

    /// Inserts input items, several rows per statement.
    async fn insert_items(
        conn: &mut SqliteConnection,
        items: &[InputRow<'_>],
    ) -> Result<(), StoreError> {
        for chunk in items.chunks(INSERT_CHUNK) {
            let texts = chunk
                .iter()
                .map(|row| sql::to_json(row.item))
                .collect::<Result<Vec<_>, _>>()?;
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) ",
            );
            insert.push_values(chunk.iter().zip(texts), |mut row, (input, text)| {
                row.push_bind(input.response_id)
                    .push_bind(input.position)
                    .push_bind(input.tenant_id)
                    .push_bind(input.item.id())
                    .push_bind(text);
            });
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// Splits the events into those of runs `holder` holds (only a running run has a lease
    /// holder), to be appended, and the runs whose events are not. Runs this store does not
    /// know as `holder`'s (see `Holders`; runs `inserted_here` by the same transaction are) are
    /// looked up first, through the primary key; nothing else writes between that look-up and
    /// the append (this is the one writing connection). A run found held is known from then on.
    async fn held_events<'e>(
        &self,
        conn: &mut SqliteConnection,
        events: &'e [EventRecord],
        holder: &str,
        inserted_here: &[&str],
    ) -> Result<(Vec<&'e EventRecord>, HashMap<Arc<str>, Loss>), StoreError> {
        let ids = events.iter().map(|e| &*e.response_id);
        let mut unknown = self.holders.not_held(ids, holder);
        unknown.retain(|id| !inserted_here.contains(id));
        if unknown.is_empty() {
            return Ok((events.iter().collect(), HashMap::new()));
        }
        unknown.sort_unstable();
        unknown.dedup();
        let mut lookup =
            QueryBuilder::<Sqlite>::new("SELECT id FROM responses WHERE lease_owner = ");
        lookup.push_bind(holder).push(" AND id IN (");
        let mut ids = lookup.separated(", ");
        for id in &unknown {
            ids.push_bind(*id);
        }
        lookup.push(")");
        let held: Vec<String> = lookup.build_query_scalar().fetch_all(&mut *conn).await?;
        for id in &held {
            self.holders.set(id, Some(holder));
        }
        let (mine, lost): (Vec<&EventRecord>, Vec<&EventRecord>) = events.iter().partition(|e| {
            !unknown.contains(&&*e.response_id) || held.iter().any(|id| *id == *e.response_id)
        });
        let lost = lost
            .into_iter()
            .map(|e| (e.response_id.clone(), Loss::NotHeld))
            .collect();
        Ok((mine, lost))
    }

    /// Appends events as frames (see `frames.rs`), several rows per statement (in chunks under
    /// the parameter limit).
    async fn append_frames<'e>(
        conn: &mut SqliteConnection,
        events: impl IntoIterator<Item = &'e EventRecord>,
    ) -> Result<(), StoreError> {
        for chunk in frames(events).chunks(INSERT_CHUNK) {
            let mut insert = QueryBuilder::<Sqlite>::new(FRAME_COLUMNS);
            insert.push_values(chunk, frame_row);
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// Copies the log into the database on a connection of its own, until `stop`.
    ///
    /// SQLite's default is for the writing connection to do it after a commit, every 1,000
    /// pages of log: the copy and two syncs of files, a few milliseconds each time, during
    /// which no event is committed (measured: most of the p99 of the first text delta at 500
    /// runs/s). Copying beside the writer leaves it one short step (`before_write`) to let the
    /// log start over.
    async fn copy_log(&self, stop: CancellationToken) {
        let mut conn = match self.options.connect().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the SQLite checkpointer's connection; the writer checkpoints by itself");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.log.written.notified() => {}
            }
            let since = self.log.gathered();
            let waited = tokio::time::Instant::now();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(CHECKPOINT_DELAY) => {}
            }
            loop {
                let (writes, bytes) = self.log.gathered();
                if writes - since.0 >= CHECKPOINT_WRITES || bytes - since.1 >= CHECKPOINT_BYTES {
                    break;
                }
                let Some(left) = CHECKPOINT_MAX_DELAY.checked_sub(waited.elapsed()) else {
                    break;
                };
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::timeout(left, self.log.written.notified()) => {}
                }
            }
            if stop.is_cancelled() {
                break;
            }
            // PASSIVE: never waits for the writer or readers, copies what it can.
            let pages: Result<(i64, i64, i64), _> =
                sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                    .fetch_one(&mut conn)
                    .await;
            match pages {
                Ok((_, log, _)) if log >= RESTART_PAGES => {
                    self.log.restart.store(true, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "SQLite checkpoint failed"),
            }
        }
        let _ = conn.close().await;
    }

    /// Before a batch: when the checkpointer asked, copies the little the log gained since
    /// its last pass, so that the batch's write starts the log over instead of lengthening it.
    async fn before_write(&self, conn: &mut SqliteConnection) -> Result<(), StoreError> {
        if self.log.restart.swap(false, Ordering::Relaxed) {
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Commit for SqliteBackend {
    /// The batch as a transaction: new runs, the endings' compare-and-sets one by one, then
    /// in one statement the frames of new runs' first events, the events of held runs (fenced)
    /// and the closing events of the endings that applied. Each statement is a round trip to
    /// the connection's worker thread, not over a network.
    async fn commit(&self, batch: &WriteBatch<'_>) -> Result<BatchOutcome, StoreError> {
        let mut conn = self.writer().await?;
        let closing = batch.endings.iter().flat_map(|e| &e.events);
        let bytes = batch.events.iter().chain(closing).map(|e| e.data.len());
        self.log.events(bytes.sum());
        self.before_write(&mut conn).await?;
        let mut outcome = BatchOutcome::default();
        // Only events, the most common batch: one statement is atomic without a transaction,
        // one round trip to the worker thread instead of three.
        if batch.runs.is_empty() && batch.endings.is_empty() && batch.events.len() <= INSERT_CHUNK {
            let (mine, lost) = self
                .held_events(&mut conn, batch.events, batch.holder, &[])
                .await?;
            Self::append_frames(&mut conn, mine).await?;
            outcome.lost = lost;
            return Ok(outcome);
        }
        let mut tx = conn.begin().await?;
        Self::insert_runs(&mut tx, &batch.runs).await?;
        let inserted: Vec<&str> = batch.runs.iter().map(|r| r.body.id.as_str()).collect();
        let (mine, lost) = self
            .held_events(&mut tx, batch.events, batch.holder, &inserted)
            .await?;
        outcome.lost = lost;
        // The closing events of the endings that applied, appended after them with the rest
        // (a frame per run: new runs' first events, then the events written here), and their
        // output to index.
        let mut closing: Vec<&EventRecord> = Vec::new();
        let mut indexed: Vec<IndexedItem> = Vec::new();
        for ending in &batch.endings {
            let change = Change {
                body: Some(&ending.body),
                body_json: ending.body_json.as_deref(),
                transcript: Some(&ending.transcript),
                expires_at: ending.expires_at,
                now: ending.now,
                ..Change::new(&ending.id, ending.transition, batch.holder)
            };
            let result = shared::compare_and_set::<Self>(&mut tx, &change).await?;
            if result.is_ok() {
                let (id, tenant, to) = (&ending.id, &ending.tenant_id, ending.transition.to());
                shared::conversation_step::<Self>(
                    &mut tx,
                    id,
                    tenant,
                    &ending.body,
                    to,
                    ending.now,
                )
                .await?;
                closing.extend(&ending.events);
                indexed.extend(sql::indexed_items(
                    &ending.id,
                    &ending.tenant_id,
                    &ending.body,
                    ending.transition.to(),
                )?);
            }
            outcome.endings.push(result);
        }
        let first = batch.runs.iter().flat_map(|run| &run.initial_events);
        Self::append_frames(&mut tx, first.chain(mine).chain(closing)).await?;
        Self::index_output(&mut tx, &indexed).await?;
        tx.commit().await?;
        for run in &batch.runs {
            let holder = run.lease.as_ref().map(|l| l.holder.as_str());
            self.holders.set(&run.body.id, holder);
        }
        for (ending, result) in batch.endings.iter().zip(&outcome.endings) {
            if result.is_ok() {
                self.holders.set(&ending.id, None);
            }
        }
        Ok(outcome)
    }
}

impl Affected for SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        SqliteQueryResult::rows_affected(self)
    }
}

/// See [`sql::runs_by_state`].
#[doc(hidden)]
pub const RUNS_BY_STATE: [sql::RunsByState; 4] =
    sql::runs_by_state(<SqliteBackend as StoreBackend>::CLAIM_QUEUED);

impl StoreBackend for SqliteBackend {
    type Db = Sqlite;
    type Writer<'a> = MutexGuard<'a, SqliteConnection>;

    const KIND: Backend = Backend::Sqlite;
    const MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");
    /// One process owns the file: claiming needs no row locks.
    const CLAIM_QUEUED: &'static str = concat!(
        "UPDATE responses SET state = $1, lease_owner = $2, lease_expires_at = $3, \
         updated_at = $4 WHERE id IN (SELECT id FROM responses WHERE state = 'queued' \
         ORDER BY created_at LIMIT $5) AND state = 'queued' AND lease_owner IS NULL RETURNING ",
        sql::run_columns!()
    );

    /// `json_each` reads the body's metadata (values are strings, read as text).
    const LIST_RUNS: &'static str = concat!(
        "SELECT ",
        sql::run_columns!(),
        " FROM responses WHERE tenant_id = $1 AND (store OR stopped_at IS NULL) \
         AND ($2 IS NULL OR id < $2) AND ($3 IS NULL OR state = $3) \
         AND ($4 IS NULL OR state <> $4) AND ($5 IS NULL OR json_extract(body, '$.model') = $5) \
         AND ($6 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each($6) AS wanted WHERE NOT EXISTS \
         (SELECT 1 FROM json_each(responses.body, '$.metadata') AS has \
         WHERE has.key = wanted.key AND has.value = wanted.value))) \
         AND ($7 IS NULL OR created_at >= $7) AND ($8 IS NULL OR created_at < $8) \
         ORDER BY id DESC LIMIT $9"
    );

    fn readers(&self) -> &SqlitePool {
        &self.readers
    }

    /// The writing connection, waited for (one write at a time).
    async fn writer(&self) -> Result<MutexGuard<'_, SqliteConnection>, StoreError> {
        self.log.write();
        Ok(self.writer.lock().await)
    }

    async fn insert_run(conn: &mut SqliteConnection, run: &NewRun) -> Result<(), StoreError> {
        Self::insert_runs(conn, &[run]).await?;
        Self::append_frames(conn, &run.initial_events).await
    }

    async fn append_input(
        conn: &mut SqliteConnection,
        id: &str,
        tenant_id: &str,
        first: i64,
        items: &[Item],
    ) -> Result<(), StoreError> {
        let rows: Vec<InputRow> = (first..)
            .zip(items)
            .map(|(position, item)| InputRow {
                response_id: id,
                tenant_id,
                position,
                item,
            })
            .collect();
        Self::insert_items(conn, &rows).await
    }

    /// Several rows per statement (in chunks under the parameter limit).
    async fn index_output(
        conn: &mut SqliteConnection,
        items: &[IndexedItem<'_>],
    ) -> Result<(), StoreError> {
        for chunk in items.chunks(INSERT_CHUNK) {
            let mut insert = QueryBuilder::<Sqlite>::new(
                "INSERT INTO output_items (response_id, item_id, tenant_id, call_id, item) ",
            );
            insert.push_values(chunk, |mut row, indexed| {
                row.push_bind(indexed.response_id)
                    .push_bind(indexed.item_id)
                    .push_bind(indexed.tenant_id)
                    .push_bind(indexed.call_id)
                    .push_bind(indexed.item.as_str());
            });
            insert.push(" ON CONFLICT DO NOTHING");
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }

    async fn append_events(
        conn: &mut SqliteConnection,
        events: &[EventRecord],
    ) -> Result<(), StoreError> {
        Self::append_frames(conn, events).await
    }

    async fn delete_rows_of(conn: &mut SqliteConnection, ids: &[String]) -> Result<(), StoreError> {
        for statement in [
            "DELETE FROM response_event_frames WHERE response_id IN (",
            "DELETE FROM input_items WHERE response_id IN (",
            "DELETE FROM output_items WHERE response_id IN (",
        ] {
            let mut delete = QueryBuilder::<Sqlite>::new(statement);
            let mut list = delete.separated(", ");
            for id in ids {
                list.push_bind(id);
            }
            delete.push(")").build().execute(&mut *conn).await?;
        }
        Ok(())
    }

    fn leased(&self, id: &str, holder: Option<&str>) {
        self.holders.set(id, holder);
    }

    fn released(&self, holder: &str) {
        self.holders.release_all(holder);
    }

    async fn renew_leases(
        &self,
        holder: &str,
        ids: &[&str],
        until: UnixMillis,
    ) -> Result<Vec<String>, StoreError> {
        let ids = sql::to_json(&ids)?;
        let renewed: Vec<(String, Option<UnixMillis>)> = sqlx::query_as(
            "UPDATE responses SET lease_expires_at = $1 WHERE lease_owner = $2 \
             AND id IN (SELECT value FROM json_each($3)) RETURNING id, cancel_requested_at",
        )
        .bind(until)
        .bind(holder)
        .bind(ids)
        .fetch_all(&mut *self.writer().await?)
        .await?;
        Ok(sql::cancel_requested(renewed))
    }

    /// Marks the run; its holder finds the mark at its next lease renewal or checkpoint.
    async fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let marked = sqlx::query(sql::REQUEST_CANCEL)
            .bind(now)
            .bind(tenant_id)
            .bind(id)
            .execute(&mut *self.writer().await?)
            .await?
            .rows_affected();
        Ok(marked == 1)
    }

    /// A statement per chunk of ids, each id bound once per list (under the parameter limit).
    async fn find_items(
        &self,
        tenant_id: &str,
        ids: &[&str],
    ) -> Result<Vec<FoundItem>, StoreError> {
        let mut found = Vec::new();
        for chunk in ids.chunks(INSERT_CHUNK) {
            let mut query = QueryBuilder::<Sqlite>::new(
                "SELECT o.response_id, o.item, TRUE AS output, r.state FROM output_items o \
                 JOIN responses r ON r.id = o.response_id WHERE o.tenant_id = ",
            );
            query.push_bind(tenant_id).push(" AND (o.item_id IN (");
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(") OR o.call_id IN (");
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(
                ")) UNION ALL SELECT i.response_id, i.item, FALSE, r.state FROM input_items i \
                 JOIN responses r ON r.id = i.response_id WHERE i.tenant_id = ",
            );
            query.push_bind(tenant_id).push(" AND i.item_id IN (");
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(")");
            let rows: Vec<sql::FoundRow> = query.build_query_as().fetch_all(&self.readers).await?;
            found.extend(sql::found(rows)?);
        }
        Ok(found)
    }

    async fn notifications(&self) -> Result<Option<NotificationStream>, StoreError> {
        // One process: its own hub already knows everything.
        Ok(None)
    }

    async fn upkeep(&self, stop: CancellationToken) {
        self.copy_log(stop).await
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use super::*;
    use crate::store::{Lease, RunState, RunStore, WriteBatch};

    #[tokio::test]
    async fn pruning_finds_old_runs_through_an_index_without_reading_every_stopped_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.db");
        let store = SqliteStore::connect(&format!("sqlite://{}", path.display()), 1)
            .await
            .unwrap();
        // Rows of (id, parent, notused, detail): the detail names each step.
        let steps: Vec<String> = sqlx::query(concat!("EXPLAIN QUERY PLAN ", sql::prune_runs!()))
            .bind(0i64)
            .bind(1i64)
            .fetch_all(&store.backend.readers)
            .await
            .unwrap()
            .iter()
            .map(|row| sqlx::Row::get::<String, _>(row, 3))
            .collect();
        assert!(
            steps
                .iter()
                .any(|s| s.contains("USING INDEX responses_stopped")),
            "{steps:?}"
        );
        assert!(
            !steps.iter().any(|s| s.contains("TEMP B-TREE")),
            "{steps:?}"
        );
    }

    #[test]
    fn a_second_instance_cannot_take_a_database_file_that_one_holds() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/held.db", dir.path().display());
        let first = InstanceLock::acquire(&url).unwrap();
        assert!(first.is_some());
        let second = InstanceLock::acquire(&url).err().unwrap().to_string();
        assert!(
            second.contains("in use by another switchyard instance"),
            "{second}"
        );
        drop(first);
        assert!(InstanceLock::acquire(&url).unwrap().is_some());
        assert!(InstanceLock::acquire("sqlite::memory:").unwrap().is_none());
    }

    /// Bytes of log per page: the page and its frame header.
    const FRAME_BYTES: u64 = 4096 + 24;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_starts_over_while_writes_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let store = Arc::new(
            SqliteStore::connect(&format!("sqlite://{}", path.display()), 2)
                .await
                .unwrap(),
        );
        let run = NewRun {
            tenant_id: "default".into(),
            state: RunState::InProgress,
            body: serde_json::from_value(serde_json::json!({
                "id": "resp_log", "object": "response", "created_at": 1, "completed_at": null,
                "status": "in_progress", "error": null, "incomplete_details": null,
                "instructions": null, "model": "m", "output": [], "parallel_tool_calls": true,
                "previous_response_id": null, "tools": [], "tool_choice": "auto",
                "truncation": "disabled", "text": {}, "reasoning": {}, "temperature": null,
                "top_p": null, "presence_penalty": null, "frequency_penalty": null,
                "top_logprobs": 0, "max_output_tokens": null, "max_tool_calls": null,
                "store": true, "background": false, "service_tier": null, "metadata": {},
                "safety_identifier": null, "prompt_cache_key": null, "user": null,
                "usage": null, "required_action": null
            }))
            .unwrap(),
            body_json: None,
            input_items: Vec::new(),
            lease: Some(Lease {
                holder: "test".into(),
                until: UnixMillis::MAX,
            }),
            now: UnixMillis::now(),
            initial_events: Vec::new(),
            idempotency: None,
            key_id: None,
        };
        store.insert_run(&run).await.unwrap();
        let stop = CancellationToken::new();
        let upkeep = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move { store.upkeep(stop).await }
        });

        // 30 MB of events, more than 7,000 pages of log: without the checkpointer, the
        // writer would let the log grow to 10,000 pages before copying it. Written at up to
        // 50 MB/s (500 runs/s write ~33 MB/s), not as fast as the loop can go: on a machine
        // whose other work starves the checkpointer, an unpaced writer outruns any bound.
        let data: Arc<str> = Arc::from(format!("\"{}\"", "x".repeat(998)));
        let (batches, per_batch) = (300u64, 100u64);
        for batch in 0..batches {
            let events: Vec<EventRecord> = (0..per_batch)
                .map(|i| EventRecord {
                    response_id: Arc::from("resp_log"),
                    tenant_id: Arc::from("default"),
                    sequence_number: batch * per_batch + i,
                    event_type: Cow::Borrowed("response.output_text.delta"),
                    data: data.clone(),
                    created_at: 0,
                    ends_run: false,
                })
                .collect();
            let batch = WriteBatch {
                holder: "test",
                runs: Vec::new(),
                events: &events,
                endings: Vec::new(),
            };
            let outcome = store.write_batch(&batch).await;
            assert!(outcome.lost.is_empty());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        stop.cancel();
        upkeep.await.unwrap();

        let log = std::fs::metadata(dir.path().join("log.db-wal"))
            .unwrap()
            .len();
        assert!(
            log < 2 * RESTART_PAGES as u64 * FRAME_BYTES,
            "the log reached {log} bytes"
        );
        let stored = store
            .events_after("resp_log", None, u32::MAX)
            .await
            .unwrap();
        assert_eq!(stored.len() as u64, batches * per_batch);
        assert!(
            stored
                .iter()
                .enumerate()
                .all(|(i, e)| e.sequence_number == i as u64 && e.data == data)
        );
    }
}
