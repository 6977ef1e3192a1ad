//! PostgreSQL: the shared database for deployments with several instances.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use super::sql::impl_run_store;
use super::{EventRecord, NewRun, RunEnding, StoreError, WriteBatch};

pub struct PostgresStore {
    pool: PgPool,
}

/// The service leaves its tables' upkeep to autovacuum (PostgreSQL's default). Without it,
/// the plans a connection keeps for its statements stay those made for the tables when they
/// were empty, and ended runs stay in the state indexes. Measured with autovacuum off: the
/// writer's batch updated runs' endings through a state index instead of the primary key, and
/// a service whose first load was 32 runs at once did 1,708 runs/s instead of 2,290, and a
/// text run alone then took 6.5 ms instead of 3.0. An operator who turned it off is told at
/// start-up.
async fn warn_without_autovacuum(pool: &PgPool) {
    let setting: Result<String, _> = sqlx::query_scalar("SHOW autovacuum").fetch_one(pool).await;
    if let Ok(setting) = setting
        && setting != "on"
    {
        tracing::warn!(
            "PostgreSQL's autovacuum is off: run ANALYZE and VACUUM on switchyard's tables \
             regularly, or its statements slow down as the tables grow"
        );
    }
}

impl PostgresStore {
    const MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

    pub async fn connect(url: &str, max_connections: u32) -> Result<PostgresStore, StoreError> {
        // No ping before handing a connection out: it is a round trip on every statement's
        // path (a tool-loop iteration makes several), and a connection that went bad fails its
        // statement instead, is dropped, and the caller's retry gets a fresh one.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Self::MIGRATOR
            .run(&pool)
            .await
            .map_err(|e| StoreError::Database(format!("migrations failed: {e}")))?;
        warn_without_autovacuum(&pool).await;
        Ok(PostgresStore { pool })
    }

    /// A connection for writing (any of the pool's).
    async fn writes(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    fn reads(&self) -> &PgPool {
        &self.pool
    }

    /// Inserts runs with their input items and first events inside a transaction.
    async fn insert_runs(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        runs: &[&NewRun],
    ) -> Result<(), StoreError> {
        Self::write_rows(tx, runs, &[], &[]).await.map(|_| ())
    }

    /// The event writer's batch, as one statement: a statement is atomic without a
    /// transaction, so the batch costs one round trip to the server instead of one per table
    /// plus `BEGIN` and `COMMIT` (every event waits for its batch before it is shown).
    async fn commit_batch(
        &self,
        batch: &WriteBatch<'_>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut conn = self.writes().await?;
        // A run inserted by this batch is not yet there for the statement's own update (its
        // parts see the database as it was before it): such a run's ending, when it comes in
        // the same batch, needs a second statement, in one transaction with the first.
        let inserted_here = !batch.endings.is_empty() && {
            let inserted: HashSet<&str> = batch.runs.iter().map(|r| r.body.id.as_str()).collect();
            batch
                .endings
                .iter()
                .any(|e| inserted.contains(e.id.as_str()))
        };
        let ended: HashSet<String> = if inserted_here {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            Self::write_rows(&mut tx, &batch.runs, batch.events, &[]).await?;
            let ended = Self::write_rows(&mut tx, &[], &[], &batch.endings).await?;
            tx.commit().await?;
            ended.into_iter().collect()
        } else {
            let ended = Self::write_rows(&mut conn, &batch.runs, batch.events, &batch.endings);
            ended.await?.into_iter().collect()
        };
        let missed: Vec<&str> = batch
            .endings
            .iter()
            .filter(|e| !ended.contains(e.id.as_str()))
            .map(|e| e.id.as_str())
            .collect();
        // Why an ending did not apply: looked up only when one did not.
        let states: Vec<(String, String)> = if missed.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as("SELECT id, state FROM responses WHERE id = ANY($1)")
                .bind(&missed)
                .fetch_all(&mut *conn)
                .await?
        };
        Ok(batch
            .endings
            .iter()
            .map(|ending| {
                if ended.contains(ending.id.as_str()) {
                    return Ok(());
                }
                match states.iter().find(|(id, _)| *id == ending.id) {
                    None => Err(StoreError::NotFound),
                    Some((_, state)) => Err(StoreError::Conflict {
                        actual: super::sql::parse_state(state)?,
                    }),
                }
            })
            .collect())
    }

    /// One statement over arrays: inserts runs (with their input items and first events) and
    /// events, announces the events, and applies runs' endings (a compare-and-set each: from
    /// `in_progress`, under the ending's lease). Its text never changes whatever the batch,
    /// so each connection prepares it once. Returns the ids of the runs that ended.
    async fn write_rows(
        conn: &mut sqlx::PgConnection,
        runs: &[&NewRun],
        events: &[EventRecord],
        endings: &[&RunEnding],
    ) -> Result<Vec<String>, StoreError> {
        let runs = RunColumns::of(runs)?;
        let events = EventColumns::of(runs.first_events.iter().copied().chain(events));
        let endings = EndingColumns::of(endings)?;
        // Both results are asked for: a part of a `WITH` that only reads (the notifications)
        // runs only if the statement uses it.
        let (ended, _announced): (Vec<String>, i64) = sqlx::query_as(
            "WITH runs AS (
                INSERT INTO responses (id, tenant_id, state, previous_response_id, store,
                    created_at, updated_at, lease_owner, lease_expires_at, body)
                SELECT id, tenant_id, state, previous, store, at, at, owner, lease, body::jsonb
                FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[],
                    $6::bigint[], $7::text[], $8::bigint[], $9::text[])
                    AS r (id, tenant_id, state, previous, store, at, owner, lease, body)
            ), items AS (
                INSERT INTO input_items (response_id, position, tenant_id, item_id, item)
                SELECT response_id, position, tenant_id, item_id, item::jsonb
                FROM UNNEST($10::text[], $11::bigint[], $12::text[], $13::text[], $14::text[])
                    AS i (response_id, position, tenant_id, item_id, item)
            ), events AS (
                INSERT INTO response_events
                    (response_id, sequence_number, tenant_id, event_type, data, created_at)
                SELECT * FROM UNNEST($15::text[], $16::bigint[], $17::text[], $18::text[],
                    $19::text[], $20::bigint[])
            ), ended AS (
                UPDATE responses SET state = e.state, body = e.body::jsonb,
                    transcript = e.transcript::jsonb, updated_at = e.at, lease_owner = NULL,
                    lease_expires_at = NULL, expires_at = e.expires, stopped_at = e.stopped
                FROM UNNEST($21::text[], $22::text[], $23::text[], $24::text[], $25::bigint[],
                    $26::bigint[], $27::text[], $28::bigint[])
                    AS e (id, state, body, transcript, expires, stopped, owner, at)
                WHERE responses.id = e.id AND responses.state = 'in_progress'
                    AND responses.lease_owner = e.owner
                RETURNING responses.id
            ), announced AS (
                SELECT pg_notify($29, id) FROM UNNEST($30::text[]) AS id
            )
            SELECT ARRAY(SELECT id FROM ended), (SELECT COUNT(*) FROM announced)",
        )
        .bind(runs.ids)
        .bind(runs.tenants)
        .bind(runs.states)
        .bind(runs.previous)
        .bind(runs.stores)
        .bind(runs.times)
        .bind(runs.owners)
        .bind(runs.leases)
        .bind(runs.bodies)
        .bind(runs.item_runs)
        .bind(runs.positions)
        .bind(runs.item_tenants)
        .bind(runs.item_ids)
        .bind(runs.items)
        .bind(events.ids)
        .bind(events.numbers)
        .bind(events.tenants)
        .bind(events.types)
        .bind(events.data)
        .bind(events.times)
        .bind(endings.ids)
        .bind(endings.states)
        .bind(endings.bodies)
        .bind(endings.transcripts)
        .bind(endings.expires)
        .bind(endings.stopped)
        .bind(endings.owners)
        .bind(endings.times)
        .bind(EVENTS_CHANNEL)
        .bind(events.announced)
        .fetch_one(conn)
        .await?;
        Ok(ended)
    }
}

/// New runs and their input items as column arrays, with their first events.
#[derive(Default)]
struct RunColumns<'a> {
    ids: Vec<&'a str>,
    tenants: Vec<&'a str>,
    states: Vec<&'static str>,
    previous: Vec<Option<&'a str>>,
    stores: Vec<bool>,
    times: Vec<i64>,
    owners: Vec<Option<&'a str>>,
    leases: Vec<Option<i64>>,
    bodies: Vec<String>,
    item_runs: Vec<&'a str>,
    positions: Vec<i64>,
    item_tenants: Vec<&'a str>,
    item_ids: Vec<&'a str>,
    items: Vec<String>,
    first_events: Vec<&'a EventRecord>,
}

impl<'a> RunColumns<'a> {
    fn of(runs: &[&'a NewRun]) -> Result<RunColumns<'a>, StoreError> {
        let mut columns = RunColumns::default();
        for run in runs {
            columns.ids.push(run.body.id.as_str());
            columns.tenants.push(run.tenant_id.as_str());
            columns.states.push(run.state.as_str());
            columns
                .previous
                .push(run.body.previous_response_id.as_deref());
            columns.stores.push(run.body.store);
            columns.times.push(run.now_ms);
            columns.owners.push(run.lease_owner.as_deref());
            columns.leases.push(run.lease_expires_at);
            columns.bodies.push(to_json(&run.body)?);
            for (position, item) in run.input_items.iter().enumerate() {
                columns.item_runs.push(run.body.id.as_str());
                columns.positions.push(position as i64);
                columns.item_tenants.push(run.tenant_id.as_str());
                columns.item_ids.push(item.id());
                columns.items.push(to_json(item)?);
            }
            columns.first_events.extend(&run.initial_events);
        }
        Ok(columns)
    }
}

/// Events as column arrays, and the runs to announce them for (each once).
#[derive(Default)]
struct EventColumns<'a> {
    ids: Vec<&'a str>,
    numbers: Vec<i64>,
    tenants: Vec<&'a str>,
    types: Vec<&'a str>,
    data: Vec<&'a str>,
    times: Vec<i64>,
    announced: Vec<&'a str>,
}

impl<'a> EventColumns<'a> {
    fn of(events: impl Iterator<Item = &'a EventRecord>) -> EventColumns<'a> {
        let mut columns = EventColumns::default();
        for event in events {
            columns.ids.push(&*event.response_id);
            columns.numbers.push(event.sequence_number as i64);
            columns.tenants.push(&*event.tenant_id);
            columns.types.push(&*event.event_type);
            columns.data.push(&*event.data);
            columns.times.push(event.created_at);
        }
        columns.announced = columns.ids.clone();
        columns.announced.sort_unstable();
        columns.announced.dedup();
        columns
    }
}

/// Runs' endings as column arrays.
#[derive(Default)]
struct EndingColumns<'a> {
    ids: Vec<&'a str>,
    states: Vec<&'static str>,
    bodies: Vec<String>,
    transcripts: Vec<String>,
    expires: Vec<Option<i64>>,
    stopped: Vec<Option<i64>>,
    owners: Vec<&'a str>,
    times: Vec<i64>,
}

impl<'a> EndingColumns<'a> {
    fn of(endings: &[&'a RunEnding]) -> Result<EndingColumns<'a>, StoreError> {
        let mut columns = EndingColumns::default();
        for ending in endings {
            columns.ids.push(&ending.id);
            columns.states.push(ending.to.as_str());
            columns.bodies.push(to_json(&ending.body)?);
            columns.transcripts.push(to_json(&ending.transcript)?);
            columns.expires.push(ending.expires_at);
            columns
                .stopped
                .push(ending.to.is_final().then_some(ending.now_ms));
            columns.owners.push(&ending.owner);
            columns.times.push(ending.now_ms);
        }
        Ok(columns)
    }
}

/// JSON text for a `jsonb` array element.
fn to_json(value: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Database(format!("cannot encode: {e}")))
}

/// The channel on which appended events are announced, with the response id as payload.
const EVENTS_CHANNEL: &str = "switchyard_events";

impl PostgresStore {
    /// PostgreSQL looks after itself.
    async fn upkeep(&self, _: tokio_util::sync::CancellationToken) {}

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
