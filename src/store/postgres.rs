//! PostgreSQL: the shared database for deployments with several instances.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgListener, PgPoolOptions};

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

    fn writes(&self) -> &PgPool {
        &self.pool
    }

    fn reads(&self) -> &PgPool {
        &self.pool
    }

    /// Appends events inside a transaction: one statement over six arrays, whatever the
    /// batch's size. Its text never changes, so each connection prepares it once, and the
    /// server parses six parameters instead of six per event.
    async fn insert_events(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        events: &[super::EventRecord],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let n = events.len();
        let (mut ids, mut numbers, mut tenants) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut types, mut data, mut times) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for event in events {
            ids.push(&*event.response_id);
            numbers.push(event.sequence_number as i64);
            tenants.push(&*event.tenant_id);
            types.push(&*event.event_type);
            data.push(&*event.data);
            times.push(event.created_at);
        }
        sqlx::query(
            "INSERT INTO response_events \
             (response_id, sequence_number, tenant_id, event_type, data, created_at) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
             $6::bigint[])",
        )
        .bind(ids)
        .bind(numbers)
        .bind(tenants)
        .bind(types)
        .bind(data)
        .bind(times)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// The channel on which appended events are announced, with the response id as payload.
const EVENTS_CHANNEL: &str = "switchyard_events";

impl PostgresStore {
    /// One notification per run in the batch, delivered when the transaction commits.
    async fn announce_events(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        events: &[super::EventRecord],
    ) -> Result<(), StoreError> {
        let mut ids: Vec<&str> = events.iter().map(|e| &*e.response_id).collect();
        ids.sort_unstable();
        ids.dedup();
        sqlx::query("SELECT pg_notify($1, id) FROM UNNEST($2::text[]) AS id")
            .bind(EVENTS_CHANNEL)
            .bind(ids)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// PostgreSQL looks after itself.
    async fn upkeep(&self, _: tokio_util::sync::CancellationToken) {}

    async fn before_write(&self, _: &mut sqlx::PgConnection) -> Result<(), StoreError> {
        Ok(())
    }

    async fn notifications(&self) -> Result<Option<super::NotificationStream>, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(EVENTS_CHANNEL).await?;
        // `recv` reconnects after a lost connection; notifications sent meanwhile are lost,
        // which followers cover by polling.
        let stream = futures_util::stream::unfold(listener, |mut listener| async move {
            loop {
                match listener.recv().await {
                    Ok(notification) => {
                        return Some((notification.payload().to_string(), listener));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for events failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(Box::pin(stream)))
    }
}

// Instances claiming at once skip each other's rows instead of waiting or double-claiming.
impl_run_store!(
    PostgresStore,
    sqlx::Postgres,
    "postgres",
    " FOR UPDATE SKIP LOCKED"
);
