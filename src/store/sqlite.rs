//! SQLite: the single-machine default. WAL mode so readers never wait for the writer; the
//! file and its folder are created on first start.
//!
//! Writes go through one connection: SQLite admits one writer at a time, and writers
//! contending for the lock wait in its busy handler, which sleeps — measured, that made
//! p99 latency 3–10× worse than queueing the writes here. Reads have a pool of their own.
//!
//! The log is copied into the database beside the writer, not by it (see `upkeep`).

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, SqliteConnection, SqlitePool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::StoreError;
use super::sql::impl_run_store;

pub struct SqliteStore {
    /// The one writing connection, outside any pool: a pool pings a connection on its worker
    /// thread each time it is given back, one more round trip after every write.
    writer: tokio::sync::Mutex<SqliteConnection>,
    readers: SqlitePool,
    /// For the checkpointer's own connection.
    options: SqliteConnectOptions,
    log: LogState,
}

/// Between the writer and the checkpointer.
#[derive(Default)]
struct LogState {
    /// Something was written since the checkpointer last looked.
    written: Notify,
    /// The checkpointer copied a long log into the database: the writer's next batch first
    /// copies what was appended since, so that its write starts the log over.
    restart: AtomicBool,
}

/// Log length (pages) at which the writer starts the log over, once the checkpointer has
/// copied it. A longer log makes every page lookup slower and each restart dearer (measured:
/// 16,000 pages was worse than 2,000).
const RESTART_PAGES: i64 = 2_000;
/// Log length at which the writer's connection checkpoints by itself, as SQLite does by
/// default at 1,000: the fallback when no checkpointer runs (a store used without
/// `upkeep`) or it falls behind.
const WRITER_CHECKPOINT_PAGES: u32 = 10_000;
/// How long the checkpointer lets writes gather: a page written by many commits is copied
/// once.
const CHECKPOINT_DELAY: Duration = Duration::from_millis(25);

impl SqliteStore {
    const MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

    pub async fn connect(url: &str, max_connections: u32) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Database(format!("invalid SQLite URL {url:?}: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // With WAL, NORMAL loses no committed data on a process crash (only on power loss).
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        if let Some(parent) = Path::new(options.get_filename()).parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                StoreError::Database(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        let mut writer = options
            .clone()
            .pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES.to_string())
            .connect()
            .await?;
        Self::MIGRATOR
            .run(&mut writer)
            .await
            .map_err(|e| StoreError::Database(format!("migrations failed: {e}")))?;
        // Each statement is a round trip to the connection's worker thread; the pool's check
        // before handing a connection out would add one more, and an in-process connection
        // cannot go stale.
        let readers = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .test_before_acquire(false)
            .connect_with(options.clone().read_only(true))
            .await?;
        Ok(SqliteStore {
            writer: tokio::sync::Mutex::new(writer),
            readers,
            options,
            log: LogState::default(),
        })
    }

    /// The writing connection, waited for (one write at a time).
    async fn writes(&self) -> Result<tokio::sync::MutexGuard<'_, SqliteConnection>, StoreError> {
        self.log.written.notify_one();
        Ok(self.writer.lock().await)
    }

    fn reads(&self) -> &SqlitePool {
        &self.readers
    }

    /// Inserts runs and their input items inside a transaction, several rows per statement.
    async fn insert_run_rows(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        runs: &[&super::NewRun],
    ) -> Result<(), StoreError> {
        use sqlx::types::Json;
        // Ten columns a row: chunks stay under SQLite's parameter limit.
        for chunk in runs.chunks(super::sql::INSERT_CHUNK / 2) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO responses (id, tenant_id, state, previous_response_id, store, \
                 created_at, updated_at, lease_owner, lease_expires_at, body) ",
            );
            insert.push_values(chunk, |mut row, run| {
                row.push_bind(&run.body.id)
                    .push_bind(&run.tenant_id)
                    .push_bind(run.state.as_str())
                    .push_bind(&run.body.previous_response_id)
                    .push_bind(run.body.store)
                    .push_bind(run.now_ms)
                    .push_bind(run.now_ms)
                    .push_bind(&run.lease_owner)
                    .push_bind(run.lease_expires_at)
                    .push_bind(Json(&run.body));
            });
            insert.build().execute(&mut **tx).await?;
        }
        let items: Vec<(&super::NewRun, usize, &crate::protocol::items::Item)> = runs
            .iter()
            .flat_map(|run| {
                run.input_items
                    .iter()
                    .enumerate()
                    .map(move |(i, item)| (*run, i, item))
            })
            .collect();
        for chunk in items.chunks(super::sql::INSERT_CHUNK) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) ",
            );
            insert.push_values(chunk, |mut row, (run, position, item)| {
                row.push_bind(&run.body.id)
                    .push_bind(*position as i64)
                    .push_bind(&run.tenant_id)
                    .push_bind(item.id())
                    .push_bind(Json(*item));
            });
            insert.build().execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Appends events, several rows per statement (in chunks under the parameter limit).
    async fn insert_events(
        conn: &mut SqliteConnection,
        events: &[super::EventRecord],
    ) -> Result<(), StoreError> {
        for chunk in events.chunks(super::sql::INSERT_CHUNK) {
            let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO response_events \
                 (response_id, sequence_number, tenant_id, event_type, data, created_at) ",
            );
            insert.push_values(chunk, |mut row, event| {
                row.push_bind(&*event.response_id)
                    .push_bind(event.sequence_number as i64)
                    .push_bind(&*event.tenant_id)
                    .push_bind(&*event.event_type)
                    .push_bind(&*event.data)
                    .push_bind(event.created_at);
            });
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Copies the log into the database on a connection of its own, until `stop`.
    ///
    /// SQLite's default is for the writing connection to do it after a commit, every 1,000
    /// pages of log: the copy and two syncs of files, a few milliseconds each time, during
    /// which no event is committed (measured: most of the p99 of the first text delta at 500
    /// runs/s). Copying beside the writer leaves it one short step (`before_write`) to let the
    /// log start over.
    async fn upkeep(&self, stop: CancellationToken) {
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
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(CHECKPOINT_DELAY) => {}
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
        let _ = sqlx::Connection::close(conn).await;
    }

    /// Before a batch: when the checkpointer asked, copies the little the log gained since
    /// its last pass, so that the batch's write starts the log over instead of lengthening it.
    async fn before_write(&self, conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
        if self.log.restart.swap(false, Ordering::Relaxed) {
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    /// The event writer's batch, as a transaction: new runs, events, then the endings'
    /// compare-and-sets one by one. Each statement is a round trip to the connection's worker
    /// thread, not over a network.
    async fn commit_batch(
        &self,
        batch: &super::WriteBatch<'_>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut conn = self.writes().await?;
        self.before_write(&mut conn).await?;
        // Only events, the most common batch: one statement is atomic without a transaction,
        // one round trip to the worker thread instead of three.
        if batch.runs.is_empty()
            && batch.endings.is_empty()
            && batch.events.len() <= super::sql::INSERT_CHUNK
        {
            Self::insert_events(&mut conn, batch.events).await?;
            return Ok(Vec::new());
        }
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        Self::insert_runs(&mut tx, &batch.runs).await?;
        Self::insert_events(&mut tx, batch.events).await?;
        let mut results = Vec::with_capacity(batch.endings.len());
        for ending in &batch.endings {
            let update = ending.update();
            let from = super::RunState::InProgress;
            let result = Self::compare_and_set(&mut tx, &ending.id, from, ending.to, &update);
            results.push(result.await?);
        }
        tx.commit().await?;
        Ok(results)
    }

    /// Inserts runs with their input items and first events inside a transaction.
    async fn insert_runs(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        runs: &[&super::NewRun],
    ) -> Result<(), StoreError> {
        Self::insert_run_rows(tx, runs).await?;
        // Their first events, all in one go.
        let events: Vec<super::EventRecord> = runs
            .iter()
            .flat_map(|run| run.initial_events.iter().cloned())
            .collect();
        Self::insert_events(tx, &events).await
    }

    async fn notifications(&self) -> Result<Option<super::NotificationStream>, StoreError> {
        Ok(None)
    }
}

// One process owns the file, so claiming needs no row locks.
impl_run_store!(SqliteStore, sqlx::Sqlite, "sqlite", "");

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use super::*;
    use crate::store::{EventRecord, RunStore, WriteBatch};

    #[tokio::test]
    async fn pruning_finds_old_runs_through_an_index_without_reading_every_stopped_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.db");
        let store = SqliteStore::connect(&format!("sqlite://{}", path.display()), 1)
            .await
            .unwrap();
        // Rows of (id, parent, notused, detail): the detail names each step.
        let steps: Vec<String> = sqlx::query(concat!(
            "EXPLAIN QUERY PLAN ",
            crate::store::sql::prune_runs!()
        ))
        .bind(0i64)
        .bind(1i64)
        .fetch_all(&store.readers)
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
        let stop = CancellationToken::new();
        let upkeep = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move { store.upkeep(stop).await }
        });

        // 30 MB of events, more than 7,000 pages of log: without the checkpointer, the
        // writer would let the log grow to 10,000 pages before copying it. Written at up to
        // 50 MB/s (500 runs/s write ~33 MB/s), not as fast as the loop can go: on a machine
        // whose other work starves the checkpointer, an unpaced writer outruns any bound.
        let data: Arc<str> = Arc::from("x".repeat(1000));
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
                events: &events,
                ..WriteBatch::default()
            };
            store.write_batch(&batch).await.unwrap();
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
