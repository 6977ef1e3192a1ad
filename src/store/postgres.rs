//! PostgreSQL: the shared database for deployments with several instances.
//!
//! The event writer's batch is one statement over arrays (see `write_rows`): atomic without
//! `BEGIN`/`COMMIT`, one round trip, and a text that never changes with the batch's size, so
//! each connection prepares it once.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use super::batch::{self, Commit};
use super::sql::{self, ItemRow, RunRow};
use super::{
    ApiKeyRecord, Applied, Backend, BatchOutcome, Change, EventRecord, IdempotentRequest, Lease,
    LeaseAfter, Loss, NewRun, Notification, NotificationStream, Order, RunEnding, RunStore, Saved,
    StoreError, StoredRun, Transition, UsageRow, WriteBatch, findable,
};
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::time::UnixMillis;

/// The channel on which appended events are announced, with the response id as payload.
const EVENTS_CHANNEL: &str = "switchyard_events";
/// The channel on which cancel requests are announced, with the response id as payload.
const CANCEL_CHANNEL: &str = "switchyard_cancel";

pub struct PostgresStore {
    pool: PgPool,
    schema: super::migrate::Schema,
}

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
                return Err(StoreError::Unavailable(format!(
                    "no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        };
        let cause = match &error {
            sqlx::Error::Io(e) => e.to_string(),
            sqlx::Error::Database(e) => e.message().to_string(),
            other => other.to_string(),
        };
        let starting = match &error {
            sqlx::Error::Io(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            ),
            sqlx::Error::Database(e) => super::transient_code(e.code().as_deref()),
            _ => false,
        };
        if !starting {
            return Err(match StoreError::from(error) {
                StoreError::Unavailable(_) => StoreError::Unavailable(cause),
                _ => StoreError::Rejected(cause),
            });
        }
        let Some(left) = STARTUP_WAIT.checked_sub(started.elapsed()) else {
            return Err(StoreError::Unavailable(format!(
                "{cause}, still after {} s of trying",
                STARTUP_WAIT.as_secs()
            )));
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
            .connect_with(options)
            .await?;
        let schema = {
            let mut conn = pool.acquire().await?;
            let read_compat = async |conn: &mut PgConnection| {
                sqlx::query_as(super::migrate::SCHEMA_COMPAT)
                    .fetch_all(conn)
                    .await
                    .ok()
            };
            super::migrate::apply(Self::MIGRATOR, &mut *conn, read_compat).await?
        };
        warn_without_autovacuum(&pool).await;
        Ok(PostgresStore { pool, schema })
    }

    /// A connection for writing (any of the pool's).
    async fn writes(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// A transition's compare-and-set on `conn` (see the SQLite twin for the two errors).
    async fn compare_and_set(
        conn: &mut PgConnection,
        change: &Change<'_>,
    ) -> Result<Result<(), StoreError>, StoreError> {
        let t = change.transition;
        let (holder, until) = match t.lease() {
            LeaseAfter::Caller => (Some(change.caller), Some(change.lease_until)),
            LeaseAfter::Nobody => (None, None),
        };
        let body = change.body.map(sql::to_json).transpose()?;
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

    /// Appends events (without a fence: the caller's transaction just changed the run).
    async fn insert_events(
        conn: &mut PgConnection,
        events: &[EventRecord],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let columns = EventColumns::of(events.iter());
        sqlx::query(
            "INSERT INTO response_events \
             (response_id, sequence_number, tenant_id, event_type, data, created_at) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
             $6::bigint[])",
        )
        .bind(columns.ids)
        .bind(columns.numbers)
        .bind(columns.tenants)
        .bind(columns.types)
        .bind(columns.data)
        .bind(columns.times)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// One statement over arrays: inserts runs (with their input items and first events),
    /// appends events of runs the writer holds (locking their rows against a takeover until
    /// the statement commits; only a running run has a lease holder, so the holder alone is
    /// checked, through the primary key: a condition on the state let a plan made for an
    /// empty table scan the state index, whose entries of ended runs grow until a vacuum), applies runs' endings (a compare-and-set each, under the
    /// writer's lease) with their closing events only where the ending applied, and announces
    /// the events. Returns the ids of the runs held and of those ended.
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
        let all = EventColumns::of(
            new.first_events
                .iter()
                .copied()
                .chain(events)
                .chain(closing),
        );
        // Runs whose events need the writer's lease: not new here, not ending here (an
        // ending's own compare-and-set fences its events, and a row cannot be both locked and
        // updated by one statement).
        let fenced: Vec<&str> = {
            let skip: HashSet<&str> = new.ids.iter().chain(&ending.ids).copied().collect();
            let mut ids: Vec<&str> = events
                .iter()
                .map(|e| &*e.response_id)
                .filter(|id| !skip.contains(id))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        // Both results are asked for: a part of a `WITH` that only reads (the lock, the
        // notifications) runs only if the statement uses it.
        let (held, ended, _announced): (Vec<String>, Vec<String>, i64) = sqlx::query_as(
            "WITH runs AS (
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
                SELECT id FROM responses WHERE id = ANY($21::text[]) AND lease_owner = $22
                ORDER BY id FOR SHARE
            ), ended AS (
                UPDATE responses SET state = e.state, body = e.body, transcript = e.transcript,
                    updated_at = e.at, lease_owner = NULL, lease_expires_at = NULL,
                    expires_at = e.expires, stopped_at = e.stopped, cancel_requested_at = NULL
                FROM UNNEST($23::text[], $24::text[], $25::text[], $26::text[], $27::bigint[],
                    $28::bigint[], $29::bigint[], $30::text[])
                    AS e (id, state, body, transcript, expires, stopped, at, from_state)
                WHERE responses.id = e.id AND responses.state = e.from_state
                    AND responses.lease_owner = $22
                RETURNING responses.id
            ), events AS (
                INSERT INTO response_events
                    (response_id, sequence_number, tenant_id, event_type, data, created_at)
                SELECT * FROM UNNEST($15::text[], $16::bigint[], $17::text[], $18::text[],
                    $19::text[], $20::bigint[])
                    AS e (response_id, sequence_number, tenant_id, event_type, data, created_at)
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
                (SELECT COUNT(*) FROM announced)",
        )
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
        .bind(all.numbers)
        .bind(all.tenants)
        .bind(all.types)
        .bind(all.data)
        .bind(all.times)
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

    async fn last_sequence(conn: &mut PgConnection, id: &str) -> Result<Option<u64>, StoreError> {
        let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQUENCE_NUMBER)
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
        Ok(sql::sequence(last))
    }
}

#[async_trait]
impl Commit for PostgresStore {
    async fn commit(&self, batch: &WriteBatch<'_>) -> Result<BatchOutcome, StoreError> {
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
        let (held, ended) = if inserted_here {
            let mut tx = conn.begin().await?;
            let (held, _) =
                Self::write_rows(&mut tx, batch.holder, &batch.runs, batch.events, &[]).await?;
            let (_, ended) =
                Self::write_rows(&mut tx, batch.holder, &[], &[], &batch.endings).await?;
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

#[async_trait]
impl RunStore for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn schema(&self) -> &super::migrate::Schema {
        &self.schema
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let applied: i64 = sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
            .fetch_one(&self.pool)
            .await?;
        let expected = Self::MIGRATOR.iter().count() as i64;
        if applied < expected {
            return Err(StoreError::Unavailable(format!(
                "{applied} of {expected} migrations applied"
            )));
        }
        Ok(())
    }

    async fn insert_run(&self, run: &NewRun) -> Result<(), StoreError> {
        let mut conn = self.writes().await?;
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
        let holder = run.lease.as_ref().map_or("", |l| l.holder.as_str());
        Self::write_rows(&mut tx, holder, &[run], &[], &[]).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_run(&self, tenant_id: &str, id: &str) -> Result<StoredRun, StoreError> {
        findable(id)?;
        let row: Option<RunRow> = sqlx::query_as(sql::GET_RUN)
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.ok_or(StoreError::NotFound)?.try_into()
    }

    async fn count_unfinished(&self) -> Result<Vec<(super::RunState, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(sql::COUNT_UNFINISHED)
            .fetch_all(&self.pool)
            .await?;
        sql::unfinished_counts(rows)
    }

    async fn state_of(&self, id: &str) -> Result<Option<super::RunState>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let state: Option<String> = sqlx::query_scalar(sql::STATE_OF)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        state.map(|s| sql::parse_state(&s)).transpose()
    }

    async fn transition(&self, change: &Change<'_>) -> Result<Applied, StoreError> {
        findable(change.id)?;
        let mut conn = self.writes().await?;
        let mut tx = conn.begin().await?;
        // The row stays locked until the commit: nobody appends in between.
        Self::compare_and_set(&mut tx, change).await??;
        if !change.append_input.is_empty() {
            let (tenant_id, next): (String, i64) = sqlx::query_as(sql::NEXT_INPUT_POSITION)
                .bind(change.id)
                .fetch_one(&mut *tx)
                .await?;
            let mut items = InputColumns::default();
            for (position, item) in (next..).zip(change.append_input) {
                items.push(change.id, position, &tenant_id, item)?;
            }
            sqlx::query(
                "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) \
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], \
                 $5::text[])",
            )
            .bind(items.runs)
            .bind(items.positions)
            .bind(items.tenants)
            .bind(items.ids)
            .bind(items.items)
            .execute(&mut *tx)
            .await?;
        }
        if let Some(body) = change.body {
            let tenant_id: String = sqlx::query_scalar(sql::TENANT_OF)
                .bind(change.id)
                .fetch_one(&mut *tx)
                .await?;
            let indexed = sql::indexed_items(change.id, &tenant_id, body, change.transition.to())?;
            if !indexed.is_empty() {
                let columns = OutputColumns::of(&indexed);
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
                .execute(&mut *tx)
                .await?;
            }
        }
        let next = Self::last_sequence(&mut tx, change.id)
            .await?
            .map_or(0, |n| n + 1);
        let closing = change
            .closing
            .map(|render| render(next))
            .unwrap_or_default();
        Self::insert_events(&mut tx, &closing).await?;
        tx.commit().await?;
        Ok(Applied {
            next_sequence: next + closing.len() as u64,
        })
    }

    async fn write_batch(&self, batch: &WriteBatch<'_>) -> BatchOutcome {
        batch::write(self, batch).await
    }

    async fn claim_queued(
        &self,
        lease: &Lease,
        now: UnixMillis,
        limit: u32,
    ) -> Result<Vec<StoredRun>, StoreError> {
        // Instances claiming at once skip each other's rows instead of waiting or
        // double-claiming.
        let t = Transition::CLAIM;
        let rows: Vec<RunRow> = sqlx::query_as(concat!(
            "UPDATE responses SET state = $1, lease_owner = $2, lease_expires_at = $3, \
             updated_at = $4 WHERE id IN (SELECT id FROM responses WHERE state = $5 \
             ORDER BY created_at LIMIT $6 FOR UPDATE SKIP LOCKED) AND state = $5 \
             AND lease_owner IS NULL RETURNING ",
            sql::run_columns!()
        ))
        .bind(t.to().as_str())
        .bind(&lease.holder)
        .bind(lease.until)
        .bind(now)
        .bind(t.from().as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        sql::runs(rows)
    }

    async fn claim_stale(
        &self,
        id: &str,
        lease: &Lease,
        now: UnixMillis,
    ) -> Result<Option<StoredRun>, StoreError> {
        findable(id)?;
        let row: Option<RunRow> = sqlx::query_as(sql::CLAIM_STALE)
            .bind(&lease.holder)
            .bind(lease.until)
            .bind(id)
            .bind(Transition::TAKE_OVER.from().as_str())
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
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
            .fetch_optional(&self.pool)
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
        let renewed: Vec<(String, Option<UnixMillis>)> = sqlx::query_as(
            "UPDATE responses SET lease_expires_at = $1 WHERE id = ANY($3) \
             AND lease_owner = $2 RETURNING id, cancel_requested_at",
        )
        .bind(until)
        .bind(holder)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(sql::cancel_requested(renewed))
    }

    async fn release_leases(&self, holder: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query(sql::RELEASE_LEASES)
            .bind(holder)
            .bind(Transition::HAND_OVER.from().as_str())
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn request_cancel(
        &self,
        tenant_id: &str,
        id: &str,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        findable(id)?;
        let marked: i64 = sqlx::query_scalar(
            "WITH marked AS (UPDATE responses SET cancel_requested_at = $1 \
                 WHERE tenant_id = $2 AND id = $3 AND state = 'in_progress' RETURNING id), \
             told AS (SELECT pg_notify($4, id) FROM marked) \
             SELECT COUNT(*) FROM told",
        )
        .bind(now)
        .bind(tenant_id)
        .bind(id)
        .bind(CANCEL_CHANNEL)
        .fetch_one(&self.pool)
        .await?;
        Ok(marked == 1)
    }

    async fn expired_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError> {
        let rows: Vec<RunRow> = sqlx::query_as(sql::EXPIRED_RUNS)
            .bind(now)
            .fetch_all(&self.pool)
            .await?;
        sql::runs(rows)
    }

    async fn stale_runs(&self, now: UnixMillis) -> Result<Vec<StoredRun>, StoreError> {
        let rows: Vec<RunRow> = sqlx::query_as(sql::STALE_RUNS)
            .bind(now)
            .fetch_all(&self.pool)
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
        let rows: Vec<sql::EventRow> = sqlx::query_as(sql::EVENTS_AFTER)
            .bind(id)
            .bind(after.map_or(-1, |n| n as i64))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(sql::events(rows))
    }

    async fn last_sequence_number(&self, id: &str) -> Result<Option<u64>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let last: Option<i64> = sqlx::query_scalar(sql::LAST_SEQUENCE_NUMBER)
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
        Ok(sql::sequence(last))
    }

    async fn input_items(&self, tenant_id: &str, id: &str) -> Result<Vec<Item>, StoreError> {
        if findable(id).is_err() {
            return Ok(Vec::new());
        }
        let rows: Vec<ItemRow> = sqlx::query_as(sql::INPUT_ITEMS)
            .bind(tenant_id)
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
        sql::items(rows)
    }

    async fn find_items(
        &self,
        tenant_id: &str,
        ids: &[&str],
    ) -> Result<Vec<super::FoundItem>, StoreError> {
        let ids: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| findable(id).is_ok())
            .collect();
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
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        sql::found(rows)
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
                        .fetch_optional(&self.pool)
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
            .fetch_all(&self.pool)
            .await?;
        sql::page_of(rows, limit)
    }

    async fn create_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut conn = self.writes().await?;
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
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(Into::into))
    }

    async fn key_by_id(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        if findable(id).is_err() {
            return Ok(None);
        }
        let row: Option<sql::KeyRow> = sqlx::query_as(sql::KEY_BY_ID)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(Into::into))
    }

    async fn list_keys(&self, tenant_id: Option<&str>) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows: Vec<sql::KeyRow> = sqlx::query_as(sql::LIST_KEYS)
            .bind(tenant_id)
            .fetch_all(&self.pool)
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
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(revoked == 1)
    }

    async fn add_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.writes().await?;
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
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    async fn delete_run(&self, tenant_id: &str, id: &str) -> Result<(), StoreError> {
        findable(id)?;
        let mut conn = self.writes().await?;
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
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(Into::into))
    }

    async fn prune(
        &self,
        runs_before: UnixMillis,
        keys_before: UnixMillis,
    ) -> Result<(u64, u64), StoreError> {
        // A transaction per batch, so no deletion holds the tables for long however many
        // runs are due.
        let mut runs = 0;
        loop {
            let mut conn = self.writes().await?;
            let mut tx = conn.begin().await?;
            let ids: Vec<String> = sqlx::query_scalar(sql::prune_runs!())
                .bind(runs_before)
                .bind(sql::PRUNE_BATCH)
                .fetch_all(&mut *tx)
                .await?;
            if !ids.is_empty() {
                for statement in [
                    "DELETE FROM response_events WHERE response_id = ANY($1)",
                    "DELETE FROM input_items WHERE response_id = ANY($1)",
                    "DELETE FROM output_items WHERE response_id = ANY($1)",
                ] {
                    sqlx::query(statement).bind(&ids).execute(&mut *tx).await?;
                }
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
                .execute(&self.pool)
                .await?
                .rows_affected();
            keys += deleted;
            if (deleted as i64) < sql::PRUNE_BATCH {
                break;
            }
        }
        Ok((runs, keys))
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

    async fn upkeep(&self, _: tokio_util::sync::CancellationToken) {
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
            columns.bodies.push(sql::to_json(&run.body)?);
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
    fn of(indexed: &'a [sql::IndexedItem<'a>]) -> OutputColumns<'a> {
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
            columns.bodies.push(sql::to_json(&ending.body)?);
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
