//! PostgreSQL: the shared database for deployments with several instances.
//!
//! The event writer's batch is one statement over arrays (see `write_rows`): atomic without
//! `BEGIN`/`COMMIT`, one round trip, and a text that never changes with the batch's size, so
//! each connection prepares it once. Inserts of many rows are statements over arrays too;
//! queued runs are claimed with `FOR UPDATE SKIP LOCKED`; appended events and cancel requests
//! are announced with `NOTIFY`, which other instances `LISTEN` for.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgQueryResult};
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio_util::sync::CancellationToken;

use super::batch::Commit;
use super::error::{Cause, StoreError, transient_code};
use super::frames::{Frame, frames};
use super::migrate;
use super::shared::{self, Affected, SqlStore, StoreBackend};
use super::sql::{self, IndexedItem};
use super::types::{
    Backend, BatchOutcome, FoundItem, Loss, NewRun, Notification, NotificationStream, RunEnding,
    WriteBatch,
};
use crate::protocol::events::EventRecord;
use crate::protocol::items::Item;
use crate::time::UnixMillis;

/// The PostgreSQL store: the shared methods over [`PostgresBackend`].
pub type PostgresStore = SqlStore<PostgresBackend>;

/// What PostgreSQL has of its own: one pool, for reads and writes.
pub struct PostgresBackend {
    pool: PgPool,
}

/// The channel on which appended events are announced, with the response id as payload.
const EVENTS_CHANNEL: &str = "switchyard_events";
/// The channel on which cancel requests are announced, with the response id as payload.
const CANCEL_CHANNEL: &str = "switchyard_cancel";

/// How long start-up waits for a database that refuses connections or says it is starting
/// (a docker-compose database without a health check to wait for), trying again at least once
/// a second; a database still down after that is an error, and the supervisor's restart
/// policy waits longer, saying why each time.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
/// The first wait between two attempts, doubled after each up to a second.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// How long one connection attempt may take (a host that drops packets never refuses).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects once, directly, so that a database that cannot be reached is an error that says
/// why (`Connection refused`, `password authentication failed`): the pool retries refused
/// connections until its acquire timeout and then says only `pool timed out`.
async fn first_connection(options: &PgConnectOptions) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let error = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options))
            .await
        {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
                return Ok(());
            }
            Ok(Err(error)) => error,
            Err(_) => {
                return Err(StoreError::unavailable(format!(
                    "no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        };
        // Told in the words of what failed beneath sqlx (the socket, the database), which stays
        // the cause: sqlx's wrapper would only repeat them.
        let (cause, beneath, starting) = match error {
            sqlx::Error::Io(e) => {
                let starting = matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                );
                (
                    e.to_string(),
                    StoreError::Unavailable(Cause::of(e)),
                    starting,
                )
            }
            sqlx::Error::Database(e) => {
                let starting = transient_code(e.code().as_deref());
                let message = e.message().to_string();
                let cause = Cause::from(e.into_error());
                let beneath = match starting {
                    true => StoreError::Unavailable(cause),
                    false => StoreError::Rejected(cause),
                };
                (message, beneath, starting)
            }
            other => (other.to_string(), StoreError::from(other), false),
        };
        if !starting {
            return Err(match beneath {
                StoreError::Unavailable(source) => StoreError::Unavailable(source.saying(cause)),
                StoreError::Rejected(source) | StoreError::Corrupt(source) => {
                    StoreError::Rejected(source.saying(cause))
                }
                _ => StoreError::rejected(cause),
            });
        }
        let Some(left) = STARTUP_WAIT.checked_sub(started.elapsed()) else {
            let message = format!(
                "{cause}, still after {} s of trying",
                STARTUP_WAIT.as_secs()
            );
            return Err(match beneath {
                StoreError::Unavailable(source) => StoreError::Unavailable(source.saying(message)),
                _ => StoreError::unavailable(message),
            });
        };
        if pause == FIRST_PAUSE {
            tracing::warn!(
                error = %cause,
                "cannot connect to the database yet; trying again for {} s",
                STARTUP_WAIT.as_secs()
            );
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// The service leaves its tables' upkeep to autovacuum (PostgreSQL's default). Without it,
/// the plans a connection keeps for its statements stay those made for the tables without
/// statistics, and every version of every run stays in the indexes. The statements on a run's
/// path find runs by primary key whatever the statistics (see [`WRITE_ROWS`]); the sweeps that
/// read the state indexes (expiry, take-over) and a shutdown's release of its leases slow down
/// as the tables grow. An operator who turned it off is told at start-up.
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
    pub async fn connect(url: &str, max_connections: u32) -> Result<PostgresStore, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        first_connection(&options).await?;
        // No ping before handing a connection out: it is a round trip on every statement's
        // path (a tool-loop iteration makes several), and a connection that went bad fails its
        // statement instead, is dropped, and the caller's retry gets a fresh one.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .test_before_acquire(false)
            // A database that cannot be reached is an answer within seconds (a 503 the client
            // may retry), not a request that hangs.
            .acquire_timeout(Duration::from_secs(3))
            // sqlx's default, kept on purpose: a connection's prepared statements are planned
            // again on its successor, for the tables as they are then (see `WRITE_ROWS`).
            .max_lifetime(Duration::from_secs(30 * 60))
            .connect_with(options)
            .await?;
        let schema = {
            let mut conn = pool.acquire().await?;
            let read_compat = async |conn: &mut PgConnection| {
                sqlx::query_as(migrate::SCHEMA_COMPAT)
                    .fetch_all(conn)
                    .await
                    .ok()
            };
            migrate::apply(PostgresBackend::MIGRATOR, &mut *conn, read_compat).await?
        };
        warn_without_autovacuum(&pool).await;
        Ok(SqlStore::new(PostgresBackend { pool }, schema))
    }
}

/// The event writer's statement (see `PostgresBackend::write_rows`). Both results are asked
/// for: a part of a `WITH` that only reads (the lock, the notifications) runs only if the
/// statement uses it.
///
/// Runs are found by id through the primary key whatever the statistics say: the lease check
/// is spelled `IS NOT DISTINCT FROM` (see `sql.rs`), and the endings' update also says
/// `id = ANY($23)` (joined with `UNNEST` alone, its generic plan scanned the table). With
/// `lease_owner = $22`, the plan went through the holder's index on each batch. On a new
/// database without `ANALYZE`, closed ×32, the server spent 565–636 µs of CPU per text run and
/// switchyard served 1,272–1,446 runs/s; spelled as here, 158–162 µs and 2,830–2,940 runs/s.
/// A plan made while the table holds less than about a hundred runs scans it (then the
/// cheapest way); the connection's successor plans again.
const WRITE_ROWS: &str = "WITH runs AS (
                INSERT INTO responses (id, tenant_id, state, previous_response_id, store,
                    created_at, updated_at, lease_owner, lease_expires_at, body, key_id)
                SELECT id, tenant_id, state, previous, store, at, at, owner, lease, body, key
                FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[],
                    $6::bigint[], $7::text[], $8::bigint[], $9::text[], $38::text[])
                    AS r (id, tenant_id, state, previous, store, at, owner, lease, body, key)
            ), items AS (
                INSERT INTO input_items (response_id, position, tenant_id, item_id, item)
                SELECT * FROM UNNEST($10::text[], $11::bigint[], $12::text[], $13::text[],
                    $14::text[])
            ), held AS (
                SELECT id FROM responses
                WHERE id = ANY($21::text[]) AND lease_owner IS NOT DISTINCT FROM $22
                ORDER BY id FOR SHARE
            ), ended AS (
                UPDATE responses SET state = e.state, body = e.body, transcript = e.transcript,
                    updated_at = e.at, lease_owner = NULL, lease_expires_at = NULL,
                    expires_at = e.expires, stopped_at = e.stopped, cancel_requested_at = NULL
                FROM UNNEST($23::text[], $24::text[], $25::text[], $26::text[], $27::bigint[],
                    $28::bigint[], $29::bigint[], $30::text[])
                    AS e (id, state, body, transcript, expires, stopped, at, from_state)
                WHERE responses.id = ANY($23::text[]) AND responses.id = e.id
                    AND responses.state = e.from_state
                    AND responses.lease_owner IS NOT DISTINCT FROM $22
                RETURNING responses.id
            ), events AS (
                INSERT INTO response_event_frames
                    (response_id, last_seq, first_seq, tenant_id, created_at, events)
                SELECT * FROM UNNEST($15::text[], $16::bigint[], $17::bigint[], $18::text[],
                    $19::bigint[], $20::text[])
                    AS e (response_id, last_seq, first_seq, tenant_id, created_at, events)
                WHERE e.response_id = ANY($1::text[])
                    OR e.response_id IN (SELECT id FROM held)
                    OR e.response_id IN (SELECT id FROM ended)
            ), indexed AS (
                INSERT INTO output_items (response_id, item_id, tenant_id, call_id, item)
                SELECT * FROM UNNEST($33::text[], $34::text[], $35::text[], $36::text[],
                    $37::text[]) AS o (response_id, item_id, tenant_id, call_id, item)
                WHERE o.response_id IN (SELECT id FROM ended)
                ON CONFLICT DO NOTHING
            ), announced AS (
                SELECT pg_notify($31, id) FROM UNNEST($32::text[]) AS id
            )
            SELECT ARRAY(SELECT id FROM held), ARRAY(SELECT id FROM ended),
                (SELECT COUNT(*) FROM announced)";

/// Extends the leases of runs `$3` that `$2` holds until `$1`.
const RENEW_LEASES: &str = "UPDATE responses SET lease_expires_at = $1 WHERE id = ANY($3) \
     AND lease_owner IS NOT DISTINCT FROM $2 RETURNING id, cancel_requested_at";

/// Marks run `$3` of tenant `$2` for cancelling at `$1` and tells its holder on channel `$4`.
const REQUEST_CANCEL: &str = "WITH marked AS (UPDATE responses SET cancel_requested_at = $1 \
         WHERE tenant_id = $2 AND id = $3 AND state IS NOT DISTINCT FROM 'in_progress' \
         RETURNING id), \
     told AS (SELECT pg_notify($4, id) FROM marked) \
     SELECT COUNT(*) FROM told";

/// The statements that find runs by id and check their state or holder, named: each must be
/// planned with the primary key alone, even without statistics (see `sql.rs`). Read by a
/// test of their generic plans on a new database.
#[doc(hidden)]
pub const RUNS_BY_ID: [(&str, &str); 6] = [
    ("the event writer's batch", WRITE_ROWS),
    ("lease renewal", RENEW_LEASES),
    ("cancel request", REQUEST_CANCEL),
    ("compare-and-set", sql::COMPARE_AND_SET),
    ("take-over", sql::CLAIM_STALE),
    ("checkpoint", sql::CHECKPOINT),
];

/// See [`sql::runs_by_state`].
#[doc(hidden)]
pub const RUNS_BY_STATE: [sql::RunsByState; 4] =
    sql::runs_by_state(<PostgresBackend as StoreBackend>::CLAIM_QUEUED);

impl PostgresBackend {
    /// One statement over arrays ([`WRITE_ROWS`]): inserts runs (with their input items and
    /// first events), appends events of runs the writer holds (locking their rows against a
    /// takeover until the statement commits; only a running run has a lease holder, so the
    /// holder alone is checked), applies runs' endings (a compare-and-set each, under the
    /// writer's lease) with their closing events only where the ending applied, and announces
    /// the events. Returns the ids of the runs held and of those ended.
    ///
    /// Runs are found by their primary key whatever the statistics say (see [`WRITE_ROWS`]).
    async fn write_rows(
        conn: &mut PgConnection,
        holder: &str,
        runs: &[&NewRun],
        events: &[EventRecord],
        endings: &[&RunEnding],
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let new = RunColumns::of(runs)?;
        let ending = EndingColumns::of(endings)?;
        let mut indexed = Vec::new();
        for e in endings {
            indexed.extend(sql::indexed_items(
                &e.id,
                &e.tenant_id,
                &e.body,
                e.transition.to(),
            )?);
        }
        let output = OutputColumns::of(&indexed);
        let closing = endings.iter().flat_map(|e| &e.events);
        let frames = frames(
            new.first_events
                .iter()
                .copied()
                .chain(events)
                .chain(closing),
        );
        let all = FrameColumns::of(&frames);
        let fenced = fenced(events, &new.ids, &ending.ids);
        let (held, ended, _announced): (Vec<String>, Vec<String>, i64) = sqlx::query_as(WRITE_ROWS)
            .bind(&new.ids)
            .bind(new.tenants)
            .bind(new.states)
            .bind(new.previous)
            .bind(new.stores)
            .bind(new.times)
            .bind(new.owners)
            .bind(new.leases)
            .bind(new.bodies)
            .bind(new.item_runs)
            .bind(new.positions)
            .bind(new.item_tenants)
            .bind(new.item_ids)
            .bind(new.items)
            .bind(all.ids)
            .bind(all.lasts)
            .bind(all.firsts)
            .bind(all.tenants)
            .bind(all.times)
            .bind(all.events)
            .bind(fenced)
            .bind(holder)
            .bind(&ending.ids)
            .bind(ending.states)
            .bind(ending.bodies)
            .bind(ending.transcripts)
            .bind(ending.expires)
            .bind(ending.stopped)
            .bind(ending.times)
            .bind(ending.from)
            .bind(EVENTS_CHANNEL)
            .bind(all.announced)
            .bind(output.runs)
            .bind(output.ids)
            .bind(output.tenants)
            .bind(output.calls)
            .bind(output.items)
            .bind(new.keys)
            .fetch_one(conn)
            .await?;
        Ok((held, ended))
    }
}

/// Runs whose events need the writer's lease: not new here, not ending here (an ending's own
/// compare-and-set fences its events, and a row cannot be both locked and updated by one
/// statement).
fn fenced<'a>(events: &'a [EventRecord], new: &[&str], ending: &[&str]) -> Vec<&'a str> {
    let skip: HashSet<&str> = new.iter().chain(ending).copied().collect();
    let mut ids: Vec<&str> = events
        .iter()
        .map(|e| &*e.response_id)
        .filter(|id| !skip.contains(id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[async_trait]
impl Commit for PostgresBackend {
    async fn commit(&self, batch: &WriteBatch<'_>) -> Result<BatchOutcome, StoreError> {
        let mut conn = self.writer().await?;
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
        // An ending of a run in a conversation changes the conversation in the same
        // transaction (`shared::conversation_step`).
        let conversational = batch.endings.iter().any(|e| e.body.conversation.is_some());
        let (held, ended) = if inserted_here || conversational {
            let mut tx = conn.begin().await?;
            let (held, ended) = if inserted_here {
                let (held, _) =
                    Self::write_rows(&mut tx, batch.holder, &batch.runs, batch.events, &[]).await?;
                let (_, ended) =
                    Self::write_rows(&mut tx, batch.holder, &[], &[], &batch.endings).await?;
                (held, ended)
            } else {
                let endings = &batch.endings;
                Self::write_rows(&mut tx, batch.holder, &batch.runs, batch.events, endings).await?
            };
            for e in &batch.endings {
                if ended.contains(&e.id) {
                    let to = e.transition.to();
                    shared::conversation_step::<Self>(
                        &mut tx,
                        &e.id,
                        &e.tenant_id,
                        &e.body,
                        to,
                        e.now,
                    )
                    .await?;
                }
            }
            tx.commit().await?;
            (held, ended)
        } else {
            let rows = Self::write_rows(
                &mut conn,
                batch.holder,
                &batch.runs,
                batch.events,
                &batch.endings,
            );
            rows.await?
        };
        let held: HashSet<&str> = held.iter().map(String::as_str).collect();
        let ended: HashSet<&str> = ended.iter().map(String::as_str).collect();
        let new: HashSet<&str> = batch.runs.iter().map(|r| r.body.id.as_str()).collect();
        let mut outcome = BatchOutcome::default();
        for event in batch.events {
            let id = &*event.response_id;
            if !(new.contains(id) || held.contains(id) || ended.contains(id)) {
                outcome
                    .lost
                    .insert(event.response_id.clone(), Loss::NotHeld);
            }
        }
        // Why an ending did not apply: looked up only when one did not.
        let missed: Vec<&str> = batch
            .endings
            .iter()
            .map(|e| e.id.as_str())
            .filter(|id| !ended.contains(id))
            .collect();
        let states: Vec<(String, String)> = if missed.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as("SELECT id, state FROM responses WHERE id = ANY($1)")
                .bind(&missed)
                .fetch_all(&mut *conn)
                .await?
        };
        outcome.endings = batch
            .endings
            .iter()
            .map(|ending| {
                if ended.contains(ending.id.as_str()) {
                    return Ok(());
                }
                match states.iter().find(|(id, _)| *id == ending.id) {
                    None => Err(StoreError::NotFound),
                    Some((_, state)) => Err(StoreError::Conflict {
                        actual: sql::parse_state(state)?,
                    }),
                }
            })
            .collect();
        Ok(outcome)
    }
}
impl Affected for PgQueryResult {
    fn rows_affected(&self) -> u64 {
        PgQueryResult::rows_affected(self)
    }
}

impl StoreBackend for PostgresBackend {
    type Db = Postgres;
    type Writer<'a> = PoolConnection<Postgres>;

    const KIND: Backend = Backend::Postgres;
    const MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");
    /// Instances claiming at once skip each other's rows instead of waiting or
    /// double-claiming.
    const CLAIM_QUEUED: &'static str = concat!(
        "UPDATE responses SET state = $1, lease_owner = $2, lease_expires_at = $3, \
         updated_at = $4 WHERE id IN (SELECT id FROM responses WHERE state = 'queued' \
         ORDER BY created_at LIMIT $5 FOR UPDATE SKIP LOCKED) AND state = 'queued' \
         AND lease_owner IS NULL RETURNING ",
        sql::run_columns!()
    );

    /// The body is JSON text: read as `json` (not `jsonb`, which refuses an escaped U+0000).
    const LIST_RUNS: &'static str = concat!(
        "SELECT ",
        sql::run_columns!(),
        " FROM responses WHERE tenant_id = $1 AND (store OR stopped_at IS NULL) \
         AND ($2::text IS NULL OR id < $2) AND ($3::text IS NULL OR state = $3) \
         AND ($4::text IS NULL OR state <> $4) \
         AND ($5::text IS NULL OR body::json ->> 'model' = $5) \
         AND ($6::text IS NULL OR NOT EXISTS (SELECT 1 FROM json_each_text($6::json) AS wanted \
         WHERE (body::json -> 'metadata') ->> wanted.key IS DISTINCT FROM wanted.value)) \
         AND ($7::bigint IS NULL OR created_at >= $7) AND ($8::bigint IS NULL OR created_at < $8) \
         ORDER BY id DESC LIMIT $9"
    );

    fn readers(&self) -> &PgPool {
        &self.pool
    }

    /// A connection for writing (any of the pool's).
    async fn writer(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// The writer's statement with the run alone (its holder fences no events here).
    async fn insert_run(conn: &mut PgConnection, run: &NewRun) -> Result<(), StoreError> {
        let holder = run.lease.as_ref().map_or("", |l| l.holder.as_str());
        Self::write_rows(conn, holder, &[run], &[], &[]).await?;
        Ok(())
    }

    async fn append_input(
        conn: &mut PgConnection,
        id: &str,
        tenant_id: &str,
        first: i64,
        items: &[Item],
    ) -> Result<(), StoreError> {
        let mut columns = InputColumns::default();
        for (position, item) in (first..).zip(items) {
            columns.push(id, position, tenant_id, item)?;
        }
        sqlx::query(
            "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], \
             $5::text[])",
        )
        .bind(columns.runs)
        .bind(columns.positions)
        .bind(columns.tenants)
        .bind(columns.ids)
        .bind(columns.items)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    async fn index_output(
        conn: &mut PgConnection,
        items: &[IndexedItem<'_>],
    ) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let columns = OutputColumns::of(items);
        sqlx::query(
            "INSERT INTO output_items (response_id, item_id, tenant_id, call_id, item) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], \
             $5::text[]) ON CONFLICT DO NOTHING",
        )
        .bind(columns.runs)
        .bind(columns.ids)
        .bind(columns.tenants)
        .bind(columns.calls)
        .bind(columns.items)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    async fn append_events(
        conn: &mut PgConnection,
        events: &[EventRecord],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let frames = frames(events);
        let columns = FrameColumns::of(&frames);
        sqlx::query(
            "INSERT INTO response_event_frames \
             (response_id, last_seq, first_seq, tenant_id, created_at, events) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], \
             $5::bigint[], $6::text[])",
        )
        .bind(columns.ids)
        .bind(columns.lasts)
        .bind(columns.firsts)
        .bind(columns.tenants)
        .bind(columns.times)
        .bind(columns.events)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    async fn delete_rows_of(conn: &mut PgConnection, ids: &[String]) -> Result<(), StoreError> {
        for statement in [
            "DELETE FROM response_event_frames WHERE response_id = ANY($1)",
            "DELETE FROM input_items WHERE response_id = ANY($1)",
            "DELETE FROM output_items WHERE response_id = ANY($1)",
        ] {
            sqlx::query(statement).bind(ids).execute(&mut *conn).await?;
        }
        Ok(())
    }

    async fn renew_leases(
        &self,
        holder: &str,
        ids: &[&str],
        until: UnixMillis,
    ) -> Result<Vec<String>, StoreError> {
        let renewed: Vec<(String, Option<UnixMillis>)> = sqlx::query_as(RENEW_LEASES)
            .bind(until)
            .bind(holder)
            .bind(ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(sql::cancel_requested(renewed))
    }

    /// Marks the run and tells its holder (`NOTIFY`), in one statement.
    async fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let marked: i64 = sqlx::query_scalar(REQUEST_CANCEL)
            .bind(now)
            .bind(tenant_id)
            .bind(id)
            .bind(CANCEL_CHANNEL)
            .fetch_one(&self.pool)
            .await?;
        Ok(marked == 1)
    }

    /// One statement, the ids as one array.
    async fn find_items(
        &self,
        tenant_id: &str,
        ids: &[&str],
    ) -> Result<Vec<FoundItem>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<sql::FoundRow> = sqlx::query_as(
            "SELECT o.response_id, o.item, TRUE AS output, r.state FROM output_items o \
             JOIN responses r ON r.id = o.response_id \
             WHERE o.tenant_id = $1 AND (o.item_id = ANY($2) OR o.call_id = ANY($2)) \
             UNION ALL SELECT i.response_id, i.item, FALSE, r.state FROM input_items i \
             JOIN responses r ON r.id = i.response_id \
             WHERE i.tenant_id = $1 AND i.item_id = ANY($2)",
        )
        .bind(tenant_id)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        sql::found(rows)
    }

    async fn notifications(&self) -> Result<Option<NotificationStream>, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener
            .listen_all([EVENTS_CHANNEL, CANCEL_CHANNEL])
            .await?;
        // `recv` reconnects after a lost connection; notifications sent meanwhile are lost,
        // which followers cover by polling, and holders of cancelled runs by their next lease
        // renewal or checkpoint.
        let stream = futures_util::stream::unfold(listener, |mut listener| async move {
            loop {
                match listener.recv().await {
                    Ok(notification) => {
                        let id = notification.payload().to_string();
                        let news = match notification.channel() {
                            CANCEL_CHANNEL => Notification::CancelRequested(id),
                            _ => Notification::Appended(id),
                        };
                        return Some((news, listener));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "listening for notifications failed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(Box::pin(stream)))
    }

    async fn upkeep(&self, _: CancellationToken) {
        // PostgreSQL looks after itself (autovacuum).
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
    times: Vec<UnixMillis>,
    owners: Vec<Option<&'a str>>,
    leases: Vec<Option<UnixMillis>>,
    bodies: Vec<String>,
    keys: Vec<Option<&'a str>>,
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
            columns.times.push(run.now);
            columns
                .owners
                .push(run.lease.as_ref().map(|l| l.holder.as_str()));
            columns.leases.push(run.lease.as_ref().map(|l| l.until));
            columns
                .bodies
                .push(sql::body_json(&run.body, run.body_json.as_deref())?);
            columns.keys.push(run.key_id.as_deref());
            for (position, item) in (0..).zip(&run.input_items) {
                columns.item_runs.push(run.body.id.as_str());
                columns.positions.push(position);
                columns.item_tenants.push(run.tenant_id.as_str());
                columns.item_ids.push(item.id());
                columns.items.push(sql::to_json(item)?);
            }
            columns.first_events.extend(&run.initial_events);
        }
        Ok(columns)
    }
}

/// Input items appended to one run, as column arrays.
#[derive(Default)]
struct InputColumns<'a> {
    runs: Vec<&'a str>,
    positions: Vec<i64>,
    tenants: Vec<&'a str>,
    ids: Vec<&'a str>,
    items: Vec<String>,
}

impl<'a> InputColumns<'a> {
    fn push(
        &mut self,
        run: &'a str,
        position: i64,
        tenant: &'a str,
        item: &'a Item,
    ) -> Result<(), StoreError> {
        self.runs.push(run);
        self.positions.push(position);
        self.tenants.push(tenant);
        self.ids.push(item.id());
        self.items.push(sql::to_json(item)?);
        Ok(())
    }
}

/// Output items to index, as column arrays.
#[derive(Default)]
struct OutputColumns<'a> {
    runs: Vec<&'a str>,
    ids: Vec<&'a str>,
    tenants: Vec<&'a str>,
    calls: Vec<Option<&'a str>>,
    items: Vec<&'a str>,
}

impl<'a> OutputColumns<'a> {
    fn of(indexed: &'a [IndexedItem<'a>]) -> OutputColumns<'a> {
        let mut columns = OutputColumns::default();
        for item in indexed {
            columns.runs.push(item.response_id);
            columns.ids.push(item.item_id);
            columns.tenants.push(item.tenant_id);
            columns.calls.push(item.call_id);
            columns.items.push(&item.item);
        }
        columns
    }
}

/// Frames of events as column arrays, and the runs to announce them for (each once).
#[derive(Default)]
struct FrameColumns<'a> {
    ids: Vec<&'a str>,
    lasts: Vec<i64>,
    firsts: Vec<i64>,
    tenants: Vec<&'a str>,
    times: Vec<i64>,
    events: Vec<&'a str>,
    announced: Vec<&'a str>,
}

impl<'a> FrameColumns<'a> {
    fn of(frames: &'a [Frame<'a>]) -> FrameColumns<'a> {
        let mut columns = FrameColumns::default();
        for frame in frames {
            columns.ids.push(frame.response_id);
            columns.lasts.push(frame.last_seq);
            columns.firsts.push(frame.first_seq);
            columns.tenants.push(frame.tenant_id);
            columns.times.push(frame.created_at);
            columns.events.push(frame.events.as_str());
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
    expires: Vec<Option<UnixMillis>>,
    stopped: Vec<Option<UnixMillis>>,
    times: Vec<UnixMillis>,
    from: Vec<&'static str>,
}

impl<'a> EndingColumns<'a> {
    fn of(endings: &[&'a RunEnding]) -> Result<EndingColumns<'a>, StoreError> {
        let mut columns = EndingColumns::default();
        for ending in endings {
            let t = ending.transition;
            columns.ids.push(&ending.id);
            columns.states.push(t.to().as_str());
            columns
                .bodies
                .push(sql::body_json(&ending.body, ending.body_json.as_deref())?);
            columns.transcripts.push(sql::to_json(&ending.transcript)?);
            columns.expires.push(ending.expires_at);
            columns
                .stopped
                .push(t.to().is_final().then_some(ending.now));
            columns.times.push(ending.now);
            columns.from.push(t.from().as_str());
        }
        Ok(columns)
    }
}
