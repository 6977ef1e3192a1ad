//! The SQL both backends share. SQLite and PostgreSQL accept the same statements here (`$N`
//! placeholders, `ON CONFLICT`, plain types), so one implementation is generated for each pool
//! type instead of two copies drifting apart. Backend-specific parts (connecting, pragmas,
//! later `FOR UPDATE SKIP LOCKED`) stay in `sqlite.rs` and `postgres.rs`.

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::types::Json;

use super::{EventRecord, RunState, StoreError, StoredRun};
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;

/// Rows per multi-row INSERT: well under SQLite's 32,766 bound parameters.
pub(super) const INSERT_CHUNK: usize = 1000;
/// Stopped runs (or idempotency keys) pruned per transaction: a few milliseconds of the
/// writer's time each.
pub(super) const PRUNE_BATCH: i64 = 50;

#[derive(sqlx::FromRow)]
pub(super) struct RunRow {
    pub tenant_id: String,
    pub state: String,
    pub body: Json<ResponseObject>,
    pub transcript: Json<Vec<crate::protocol::transcript::Entry>>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub updated_at: i64,
}

impl TryFrom<RunRow> for StoredRun {
    type Error = StoreError;

    fn try_from(row: RunRow) -> Result<StoredRun, StoreError> {
        Ok(StoredRun {
            tenant_id: row.tenant_id,
            state: parse_state(&row.state)?,
            body: row.body.0,
            transcript: row.transcript.0,
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            expires_at: row.expires_at,
            updated_at: row.updated_at,
        })
    }
}

pub(super) fn parse_state(text: &str) -> Result<RunState, StoreError> {
    RunState::parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown run state {text:?}")))
}

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    pub response_id: String,
    pub tenant_id: String,
    pub sequence_number: i64,
    pub event_type: String,
    pub data: String,
    pub created_at: i64,
}

impl From<EventRow> for EventRecord {
    fn from(row: EventRow) -> EventRecord {
        EventRecord {
            response_id: Arc::from(row.response_id),
            tenant_id: Arc::from(row.tenant_id),
            sequence_number: row.sequence_number.max(0) as u64,
            event_type: Cow::Owned(row.event_type),
            data: Arc::from(row.data),
            created_at: row.created_at,
            ends_run: false,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct ItemRow {
    pub item: Json<Item>,
}

/// The columns of a `RunRow`, for `concat!` into queries (no `format!` into SQL).
macro_rules! run_columns {
    () => {
        "tenant_id, state, body, transcript, lease_owner, lease_expires_at, expires_at, updated_at"
    };
}
pub(super) use run_columns;

/// Deletes up to `$2` runs that stopped before `$1`, oldest first, returning their ids.
macro_rules! prune_runs {
    () => {
        "DELETE FROM responses WHERE id IN (SELECT id FROM responses \
         WHERE stopped_at < $1 ORDER BY stopped_at LIMIT $2) RETURNING id"
    };
}
pub(super) use prune_runs;

/// Implements `RunStore` for a store struct with a `pool` field of the given database.
macro_rules! impl_run_store {
    ($store:ty, $db:ty, $backend:literal, $skip_locked:literal) => {
        #[async_trait::async_trait]
        impl $crate::store::RunStore for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                let applied: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM _sqlx_migrations WHERE success = TRUE",
                )
                .fetch_one(self.reads())
                .await?;
                let expected = Self::MIGRATOR.iter().count() as i64;
                if applied < expected {
                    return Err($crate::store::StoreError::Database(format!(
                        "{applied} of {expected} migrations applied"
                    )));
                }
                Ok(())
            }

            async fn insert_run(
                &self,
                run: &$crate::store::NewRun,
            ) -> Result<(), $crate::store::StoreError> {
                let mut conn = self.writes().await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                if let Some(idempotency) = &run.idempotency {
                    let recorded = sqlx::query(
                        "INSERT INTO idempotency_keys (tenant_id, key, request_hash, response_id, created_at) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    )
                    .bind(&run.tenant_id)
                    .bind(&idempotency.key)
                    .bind(&idempotency.request_hash)
                    .bind(&run.body.id)
                    .bind(run.now_ms)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    if recorded == 0 {
                        return Err($crate::store::StoreError::KeyTaken);
                    }
                }
                Self::insert_runs(&mut tx, &[run]).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn write_batch(
                &self,
                batch: &$crate::store::WriteBatch<'_>,
            ) -> Result<Vec<Result<(), $crate::store::StoreError>>, $crate::store::StoreError> {
                if batch.runs.is_empty() && batch.events.is_empty() && batch.endings.is_empty() {
                    return Ok(Vec::new());
                }
                self.commit_batch(batch).await
            }

            async fn get_run(
                &self,
                tenant_id: &str,
                id: &str,
            ) -> Result<$crate::store::StoredRun, $crate::store::StoreError> {
                let row: Option<$crate::store::sql::RunRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    $crate::store::sql::run_columns!(),
                    " FROM responses WHERE tenant_id = $1 AND id = $2"
                ))
                    .bind(tenant_id)
                    .bind(id)
                    .fetch_optional(self.reads())
                    .await?;
                row.ok_or($crate::store::StoreError::NotFound)?.try_into()
            }

            async fn transition(
                &self,
                id: &str,
                from: $crate::store::RunState,
                to: $crate::store::RunState,
                update: &$crate::store::RunUpdate<'_>,
            ) -> Result<(), $crate::store::StoreError> {
                use sqlx::types::Json;
                if update.append_input.is_empty() {
                    // One statement is atomic: no transaction, two round trips fewer.
                    let mut conn = self.writes().await?;
                    return Self::compare_and_set(&mut conn, id, from, to, update).await?;
                }
                let mut conn = self.writes().await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                // The UPDATE comes first so SQLite takes the write lock at once.
                Self::compare_and_set(&mut tx, id, from, to, update).await??;
                let (tenant_id, next): (String, i64) = sqlx::query_as(
                    "SELECT r.tenant_id, COALESCE((SELECT MAX(position) + 1 FROM input_items \
                     WHERE response_id = $1), 0) FROM responses r WHERE r.id = $1",
                )
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
                let items: Vec<(i64, &$crate::protocol::items::Item)> = update
                    .append_input
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (next + i as i64, item))
                    .collect();
                for chunk in items.chunks($crate::store::sql::INSERT_CHUNK) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO input_items (response_id, position, tenant_id, item_id, item) ",
                    );
                    insert.push_values(chunk, |mut row, (position, item)| {
                        row.push_bind(id)
                            .push_bind(*position)
                            .push_bind(&tenant_id)
                            .push_bind(item.id())
                            .push_bind(Json(*item));
                    });
                    insert.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn expired_runs(
                &self,
                now_ms: i64,
            ) -> Result<Vec<$crate::store::StoredRun>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::sql::RunRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    $crate::store::sql::run_columns!(),
                    " FROM responses WHERE state = 'requires_action' AND expires_at < $1 \
                     ORDER BY expires_at"
                ))
                .bind(now_ms)
                .fetch_all(self.reads())
                .await?;
                rows.into_iter().map(TryInto::try_into).collect()
            }

            async fn append_events(
                &self,
                events: &[$crate::store::EventRecord],
            ) -> Result<(), $crate::store::StoreError> {
                let batch = $crate::store::WriteBatch {
                    events,
                    ..Default::default()
                };
                self.write_batch(&batch).await.map(|_| ())
            }

            async fn upkeep(&self, stop: tokio_util::sync::CancellationToken) {
                Self::upkeep(self, stop).await
            }

            async fn appended_events(
                &self,
            ) -> Result<Option<$crate::store::NotificationStream>, $crate::store::StoreError> {
                self.notifications().await
            }

            async fn state_of(
                &self,
                id: &str,
            ) -> Result<Option<$crate::store::RunState>, $crate::store::StoreError> {
                let state: Option<String> =
                    sqlx::query_scalar("SELECT state FROM responses WHERE id = $1")
                        .bind(id)
                        .fetch_optional(self.reads())
                        .await?;
                state
                    .map(|s| $crate::store::sql::parse_state(&s))
                    .transpose()
            }

            async fn events_after(
                &self,
                id: &str,
                after: Option<u64>,
                limit: u32,
            ) -> Result<Vec<$crate::store::EventRecord>, $crate::store::StoreError> {
                let after = after.map_or(-1, |n| n as i64);
                let rows: Vec<$crate::store::sql::EventRow> = sqlx::query_as(
                    "SELECT response_id, sequence_number, tenant_id, event_type, data, created_at \
                     FROM response_events WHERE response_id = $1 AND sequence_number > $2 \
                     ORDER BY sequence_number LIMIT $3",
                )
                .bind(id)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(self.reads())
                .await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn input_items(
                &self,
                tenant_id: &str,
                id: &str,
            ) -> Result<Vec<$crate::protocol::items::Item>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::sql::ItemRow> = sqlx::query_as(
                    "SELECT item FROM input_items WHERE tenant_id = $1 AND response_id = $2 \
                     ORDER BY position",
                )
                .bind(tenant_id)
                .bind(id)
                .fetch_all(self.reads())
                .await?;
                Ok(rows.into_iter().map(|r| r.item.0).collect())
            }

            async fn list_input_items(
                &self,
                tenant_id: &str,
                id: &str,
                page: &$crate::store::ItemPage,
            ) -> Result<(Vec<$crate::protocol::items::Item>, bool), $crate::store::StoreError>
            {
                let after: Option<i64> = match &page.after {
                    None => None,
                    Some(item_id) => Some(
                        sqlx::query_scalar(
                            "SELECT position FROM input_items \
                             WHERE tenant_id = $1 AND response_id = $2 AND item_id = $3",
                        )
                        .bind(tenant_id)
                        .bind(id)
                        .bind(item_id)
                        .fetch_optional(self.reads())
                        .await?
                        .ok_or($crate::store::StoreError::NotFound)?,
                    ),
                };
                let query = if page.descending {
                    "SELECT item FROM input_items WHERE tenant_id = $1 AND response_id = $2 \
                     AND position < $3 ORDER BY position DESC LIMIT $4"
                } else {
                    "SELECT item FROM input_items WHERE tenant_id = $1 AND response_id = $2 \
                     AND position > $3 ORDER BY position ASC LIMIT $4"
                };
                let bound = after.unwrap_or(if page.descending { i64::MAX } else { -1 });
                let rows: Vec<$crate::store::sql::ItemRow> = sqlx::query_as(query)
                    .bind(tenant_id)
                    .bind(id)
                    .bind(bound)
                    .bind(i64::from(page.limit) + 1)
                    .fetch_all(self.reads())
                    .await?;
                let mut items: Vec<_> = rows.into_iter().map(|r| r.item.0).collect();
                let has_more = items.len() > page.limit as usize;
                items.truncate(page.limit as usize);
                Ok((items, has_more))
            }

            async fn delete_run(
                &self,
                tenant_id: &str,
                id: &str,
            ) -> Result<(), $crate::store::StoreError> {
                let mut conn = self.writes().await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let deleted = sqlx::query("DELETE FROM responses WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant_id)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if deleted == 0 {
                    return Err($crate::store::StoreError::NotFound);
                }
                sqlx::query("DELETE FROM input_items WHERE response_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM response_events WHERE response_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn claim_queued(
                &self,
                owner: &str,
                lease_expires_at: i64,
                now_ms: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::StoredRun>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::sql::RunRow> = sqlx::query_as(concat!(
                    "UPDATE responses SET state = 'in_progress', lease_owner = $1, \
                     lease_expires_at = $2, updated_at = $3 \
                     WHERE id IN (SELECT id FROM responses WHERE state = 'queued' \
                     ORDER BY created_at LIMIT $4",
                    $skip_locked,
                    ") AND state = 'queued' RETURNING ",
                    $crate::store::sql::run_columns!()
                ))
                .bind(owner)
                .bind(lease_expires_at)
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(&mut *self.writes().await?)
                .await?;
                rows.into_iter().map(TryInto::try_into).collect()
            }

            async fn checkpoint(
                &self,
                id: &str,
                owner: &str,
                body: &$crate::protocol::response::ResponseObject,
                transcript: &[$crate::protocol::transcript::Entry],
                now_ms: i64,
            ) -> Result<(), $crate::store::StoreError> {
                let updated = sqlx::query(
                    "UPDATE responses SET body = $1, transcript = $2, updated_at = $3 \
                     WHERE id = $4 AND state = 'in_progress' AND lease_owner = $5",
                )
                .bind(sqlx::types::Json(body))
                .bind(sqlx::types::Json(transcript))
                .bind(now_ms)
                .bind(id)
                .bind(owner)
                .execute(&mut *self.writes().await?)
                .await?
                .rows_affected();
                if updated == 1 {
                    Ok(())
                } else {
                    let actual = self.state_of(id).await?.ok_or($crate::store::StoreError::NotFound)?;
                    Err($crate::store::StoreError::Conflict { actual })
                }
            }

            async fn renew_leases(
                &self,
                owner: &str,
                until_ms: i64,
            ) -> Result<u64, $crate::store::StoreError> {
                // Rows another transaction is changing (a run's ending in the event writer's
                // batch) are skipped rather than waited for: waiting on several rows each could
                // deadlock, and an ending run needs no lease.
                Ok(sqlx::query(concat!(
                    "UPDATE responses SET lease_expires_at = $1 WHERE id IN (SELECT id FROM responses \
                     WHERE lease_owner = $2 AND state IN ('queued', 'in_progress')",
                    $skip_locked,
                    ")"
                ))
                .bind(until_ms)
                .bind(owner)
                .execute(&mut *self.writes().await?)
                .await?
                .rows_affected())
            }

            async fn stale_runs(
                &self,
                now_ms: i64,
                exclude_owner: &str,
            ) -> Result<Vec<$crate::store::StoredRun>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::sql::RunRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    $crate::store::sql::run_columns!(),
                    " FROM responses WHERE state = 'in_progress' \
                     AND (lease_owner IS NULL OR lease_owner <> $1) \
                     AND (lease_expires_at IS NULL OR lease_expires_at < $2) \
                     ORDER BY created_at"
                ))
                .bind(exclude_owner)
                .bind(now_ms)
                .fetch_all(self.reads())
                .await?;
                rows.into_iter().map(TryInto::try_into).collect()
            }

            async fn claim_stale(
                &self,
                id: &str,
                owner: &str,
                lease_expires_at: i64,
                now_ms: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                let claimed = sqlx::query(
                    "UPDATE responses SET lease_owner = $1, lease_expires_at = $2 \
                     WHERE id = $3 AND state = 'in_progress' \
                     AND (lease_owner IS NULL OR lease_owner <> $1) \
                     AND (lease_expires_at IS NULL OR lease_expires_at < $4)",
                )
                .bind(owner)
                .bind(lease_expires_at)
                .bind(id)
                .bind(now_ms)
                .execute(&mut *self.writes().await?)
                .await?
                .rows_affected();
                Ok(claimed == 1)
            }

            async fn last_sequence_number(
                &self,
                id: &str,
            ) -> Result<Option<u64>, $crate::store::StoreError> {
                let last: Option<i64> = sqlx::query_scalar(
                    "SELECT MAX(sequence_number) FROM response_events WHERE response_id = $1",
                )
                .bind(id)
                .fetch_one(self.reads())
                .await?;
                Ok(last.map(|n| n.max(0) as u64))
            }

            async fn find_idempotent(
                &self,
                tenant_id: &str,
                key: &str,
            ) -> Result<Option<$crate::store::IdempotentRequest>, $crate::store::StoreError> {
                let row: Option<(String, String, i64)> = sqlx::query_as(
                    "SELECT request_hash, response_id, created_at FROM idempotency_keys \
                     WHERE tenant_id = $1 AND key = $2",
                )
                .bind(tenant_id)
                .bind(key)
                .fetch_optional(self.reads())
                .await?;
                Ok(row.map(|(request_hash, response_id, created_at)| {
                    $crate::store::IdempotentRequest {
                        request_hash,
                        response_id,
                        created_at,
                    }
                }))
            }

            async fn prune(
                &self,
                runs_before_ms: i64,
                keys_before_ms: i64,
            ) -> Result<(u64, u64), $crate::store::StoreError> {
                // A transaction per batch, so the writer's other work goes on between them
                // however many runs are due.
                let batch = $crate::store::sql::PRUNE_BATCH;
                let mut runs = 0;
                loop {
                    let mut conn = self.writes().await?;
                    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                    let ids: Vec<String> = sqlx::query_scalar($crate::store::sql::prune_runs!())
                        .bind(runs_before_ms)
                        .bind(batch)
                        .fetch_all(&mut *tx)
                        .await?;
                    if !ids.is_empty() {
                        for statement in [
                            "DELETE FROM response_events WHERE response_id IN (",
                            "DELETE FROM input_items WHERE response_id IN (",
                        ] {
                            let mut delete = sqlx::QueryBuilder::<$db>::new(statement);
                            let mut list = delete.separated(", ");
                            for id in &ids {
                                list.push_bind(id);
                            }
                            delete.push(")").build().execute(&mut *tx).await?;
                        }
                    }
                    tx.commit().await?;
                    runs += ids.len() as u64;
                    if (ids.len() as i64) < batch {
                        break;
                    }
                }
                let mut keys = 0;
                loop {
                    let deleted = sqlx::query(
                        "DELETE FROM idempotency_keys WHERE (tenant_id, key) IN \
                         (SELECT tenant_id, key FROM idempotency_keys WHERE created_at < $1 \
                          ORDER BY created_at LIMIT $2)",
                    )
                    .bind(keys_before_ms)
                    .bind(batch)
                    .execute(&mut *self.writes().await?)
                    .await?
                    .rows_affected();
                    keys += deleted;
                    if (deleted as i64) < batch {
                        break;
                    }
                }
                Ok((runs, keys))
            }

            async fn runs_owned_by(
                &self,
                owner: &str,
                states: &[$crate::store::RunState],
            ) -> Result<Vec<$crate::store::StoredRun>, $crate::store::StoreError> {
                if states.is_empty() {
                    return Ok(Vec::new());
                }
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                    "SELECT ",
                    $crate::store::sql::run_columns!(),
                    " FROM responses WHERE lease_owner = "
                ));
                query.push_bind(owner).push(" AND state IN (");
                let mut list = query.separated(", ");
                for state in states {
                    list.push_bind(state.as_str());
                }
                query.push(") ORDER BY created_at");
                let rows: Vec<$crate::store::sql::RunRow> =
                    query.build_query_as().fetch_all(self.reads()).await?;
                rows.into_iter().map(TryInto::try_into).collect()
            }
        }

        impl $store {
            /// A run's compare-and-set from `from` to `to` (and, with `expected_owner`, only
            /// under that lease). The outer error is the database's; the inner one says why
            /// the change did not apply: `NotFound`, or `Conflict` with the run's state.
            async fn compare_and_set(
                conn: &mut <$db as sqlx::Database>::Connection,
                id: &str,
                from: $crate::store::RunState,
                to: $crate::store::RunState,
                update: &$crate::store::RunUpdate<'_>,
            ) -> Result<Result<(), $crate::store::StoreError>, $crate::store::StoreError> {
                use sqlx::types::Json;
                let updated = sqlx::query(
                    "UPDATE responses SET state = $1, body = $2, transcript = $3, updated_at = $4, \
                     lease_owner = $5, lease_expires_at = $6, expires_at = $7, stopped_at = $8 \
                     WHERE id = $9 AND state = $10 AND ($11 IS NULL OR lease_owner = $11)",
                )
                .bind(to.as_str())
                .bind(Json(update.body))
                .bind(Json(update.transcript))
                .bind(update.now_ms)
                .bind(update.lease_owner)
                .bind(update.lease_expires_at)
                .bind(update.expires_at)
                .bind(to.is_final().then_some(update.now_ms))
                .bind(id)
                .bind(from.as_str())
                .bind(update.expected_owner)
                .execute(&mut *conn)
                .await?
                .rows_affected();
                if updated == 1 {
                    return Ok(Ok(()));
                }
                let actual: Option<String> =
                    sqlx::query_scalar("SELECT state FROM responses WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&mut *conn)
                        .await?;
                Ok(Err(match actual {
                    None => $crate::store::StoreError::NotFound,
                    Some(state) => $crate::store::StoreError::Conflict {
                        actual: $crate::store::sql::parse_state(&state)?,
                    },
                }))
            }
        }
    };
}

pub(super) use impl_run_store;
