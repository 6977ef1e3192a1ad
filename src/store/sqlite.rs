//! SQLite: the single-machine default. WAL mode so readers never wait for the writer; the
//! file and its folder are created on first start.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::StoreError;
use super::sql::impl_run_store;

pub struct SqliteStore {
    pool: SqlitePool,
}

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
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .connect_with(options)
            .await?;
        Self::MIGRATOR
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(format!("migrations failed: {e}")))?;
        Ok(SqliteStore { pool })
    }
}

impl SqliteStore {
    /// One process owns an SQLite file: its hub already knows what it appends.
    async fn announce_events(
        _: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        _: &[super::EventRecord],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn notifications(&self) -> Result<Option<super::NotificationStream>, StoreError> {
        Ok(None)
    }
}

// One process owns the file, so claiming needs no row locks.
impl_run_store!(SqliteStore, sqlx::Sqlite, "sqlite", "");
