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

    /// Inserts runs and their input items inside a transaction: one statement over arrays
    /// for each table (as `insert_events`).
    async fn insert_run_rows(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        runs: &[&super::NewRun],
    ) -> Result<(), StoreError> {
        if runs.is_empty() {
            return Ok(());
        }
        let mut ids = Vec::with_capacity(runs.len());
        let mut tenants = Vec::with_capacity(runs.len());
        let mut states = Vec::with_capacity(runs.len());
        let mut previous = Vec::with_capacity(runs.len());
        let mut stores = Vec::with_capacity(runs.len());
        let mut times = Vec::with_capacity(runs.len());
        let mut owners = Vec::with_capacity(runs.len());
        let mut leases = Vec::with_capacity(runs.len());
        let mut bodies = Vec::with_capacity(runs.len());
        for run in runs {
            ids.push(run.body.id.as_str());
            tenants.push(run.tenant_id.as_str());
            states.push(run.state.as_str());
            previous.push(run.body.previous_response_id.as_deref());
            stores.push(run.body.store);
            times.push(run.now_ms);
            owners.push(run.lease_owner.as_deref());
            leases.push(run.lease_expires_at);
            bodies.push(to_json(&run.body)?);
        }
        sqlx::query(
            "INSERT INTO responses (id, tenant_id, state, previous_response_id, store, \
             created_at, updated_at, lease_owner, lease_expires_at, body) \
             SELECT id, tenant_id, state, previous, store, at, at, owner, lease, body::jsonb \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], \
             $6::bigint[], $7::text[], $8::bigint[], $9::text[]) \
             AS r (id, tenant_id, state, previous, store, at, owner, lease, body)",
        )
        .bind(ids)
        .bind(tenants)
        .bind(states)
        .bind(previous)
        .bind(stores)
        .bind(times)
        .bind(owners)
        .bind(leases)
        .bind(bodies)
        .execute(&mut **tx)
        .await?;
        let (mut item_runs, mut positions, mut item_tenants, mut item_ids, mut items) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for run in runs {
            for (position, item) in run.input_items.iter().enumerate() {
                item_runs.push(run.body.id.as_str());
                positions.push(position as i64);
                item_tenants.push(run.tenant_id.as_str());
                item_ids.push(item.id());
                items.push(to_json(item)?);
            }
        }
        if items.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) \
             SELECT response_id, position, tenant_id, item_id, item::jsonb \
             FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[]) \
             AS i (response_id, position, tenant_id, item_id, item)",
        )
        .bind(item_runs)
        .bind(positions)
        .bind(item_tenants)
        .bind(item_ids)
        .bind(items)
        .execute(&mut **tx)
        .await?;
        Ok(())
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

/// JSON text for a `jsonb` array element.
fn to_json(value: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Database(format!("cannot encode: {e}")))
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
