//! PostgreSQL: the shared database for deployments with several instances.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

use super::StoreError;
use super::sql::impl_run_store;

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    const MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

    pub async fn connect(url: &str, max_connections: u32) -> Result<PostgresStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Self::MIGRATOR
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(format!("migrations failed: {e}")))?;
        Ok(PostgresStore { pool })
    }
}

impl_run_store!(PostgresStore, sqlx::Postgres, "postgres");
