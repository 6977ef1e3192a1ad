//! What both backends share: the SQL text they both accept (`$N` placeholders, `ON CONFLICT`,
//! `RETURNING`, plain types) and the row types it reads. `shared.rs` binds and runs it, once
//! for both; statements that differ (claiming with row locks, inserts of many rows, the event
//! writer's batch) are in `sqlite.rs` and `postgres.rs`.
//!
//! JSON is stored as text on both backends: exactly what `serde_json` wrote (a U+0000 in a
//! string is the escape `\u0000`, which PostgreSQL's `jsonb` refuses).
//!
//! A statement that finds a run by its id and also checks its state or lease holder spells
//! those checks `state IS NOT DISTINCT FROM $n` and `lease_owner IS NOT DISTINCT FROM $n`
//! (the same as `=` where the value is never null): PostgreSQL cannot use those conditions
//! with an index, so the primary key is the only index such a statement can be planned with.
//! With `=`, the generic plan a connection keeps for a prepared statement, when it was made
//! while the table had no statistics (a new database before its first `ANALYZE`), read the
//! run through the index on its state or on its holder instead: through the entries of every
//! run in that state, or every run the replica had held, since the last vacuum. See
//! `postgres::RUNS_BY_ID` and the test that reads their plans.

use super::error::{Cause, StoreError};
use super::state::{Guard, RunState};
use super::types::{ApiKeyRecord, FoundItem, IdempotentRequest, Order, StoredRun, UsageRow};
use crate::protocol::items::Item;
use crate::protocol::response::ResponseObject;
use crate::time::UnixMillis;

/// Rows per multi-row INSERT on SQLite: well under its 32,766 bound parameters.
pub(super) const INSERT_CHUNK: usize = 1000;
/// Stopped runs (or idempotency keys) pruned per transaction: a few milliseconds of the
/// writer's time each.
pub(super) const PRUNE_BATCH: i64 = 50;

/// The columns of a [`RunRow`], in every statement that reads one.
macro_rules! run_columns {
    () => {
        "tenant_id, state, body, transcript, lease_owner, lease_expires_at, expires_at, \
         created_at, updated_at, cancel_requested_at, key_id"
    };
}
pub(super) use run_columns;

pub(super) const APPLIED_MIGRATIONS: &str =
    "SELECT COUNT(*) FROM _sqlx_migrations WHERE success = TRUE";

pub(super) const INSERT_IDEMPOTENCY_KEY: &str = "INSERT INTO idempotency_keys \
     (tenant_id, key, request_hash, response_id, created_at) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT DO NOTHING";

pub(super) const GET_RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM responses WHERE tenant_id = $1 AND id = $2"
);

/// Runs by state, for the states that are not final: each count is read from that state's
/// index (migration 14), which holds only the runs in it.
pub(super) const COUNT_UNFINISHED: &str = "SELECT 'queued', COUNT(*) FROM responses \
     WHERE state = 'queued' UNION ALL SELECT 'in_progress', COUNT(*) FROM responses \
     WHERE state = 'in_progress' UNION ALL SELECT 'requires_action', COUNT(*) FROM responses \
     WHERE state = 'requires_action'";

/// Reads the rows of [`COUNT_UNFINISHED`], leaving out the states with no run.
pub(super) fn unfinished_counts(
    rows: Vec<(String, i64)>,
) -> Result<Vec<(RunState, u64)>, StoreError> {
    rows.into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(state, count)| Ok((parse_state(&state)?, count as u64)))
        .collect()
}

pub(super) const STATE_OF: &str = "SELECT state FROM responses WHERE id = $1";

/// A transition's compare-and-set: `$10` the state it leaves, `$11` its guard on the lease
/// (`unheld`, `held` by `$12`, or `run_out` before `$13`). A cancel request stays with a run
/// whose lease moves (`in_progress` → `in_progress`) and goes once it leaves that state.
pub(super) const COMPARE_AND_SET: &str = "UPDATE responses SET state = $1, \
     body = COALESCE($2, body), transcript = COALESCE($3, transcript), updated_at = $4, \
     lease_owner = $5, lease_expires_at = $6, expires_at = $7, stopped_at = $8, \
     cancel_requested_at = CASE WHEN $1 = $10 THEN cancel_requested_at END \
     WHERE id = $9 AND state IS NOT DISTINCT FROM $10 AND (CASE $11 \
         WHEN 'unheld' THEN lease_owner IS NULL \
         WHEN 'held' THEN lease_owner IS NOT DISTINCT FROM $12 \
         ELSE (lease_owner IS NULL OR lease_expires_at < $13) END)";

/// Where a run's appended input items start, and its tenant.
pub(super) const NEXT_INPUT_POSITION: &str = "SELECT r.tenant_id, \
     COALESCE((SELECT MAX(position) + 1 FROM input_items WHERE response_id = $1), 0) \
     FROM responses r WHERE r.id = $1";

pub(super) const LAST_SEQUENCE_NUMBER: &str =
    "SELECT MAX(last_seq) FROM response_event_frames WHERE response_id = $1";

pub(super) const EXPIRED_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM responses WHERE state = 'requires_action' AND expires_at < $1 ORDER BY expires_at"
);

pub(super) const STALE_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM responses WHERE state = 'in_progress' \
     AND (lease_owner IS NULL OR lease_expires_at < $1) ORDER BY created_at"
);

/// The statements that look for runs in a state that is not final, given the backend's claim
/// of queued runs, each with the indexes of migration 14 it reads (a test reads their plans).
pub(super) const fn runs_by_state(claim: &'static str) -> [RunsByState; 4] {
    const ALL: &[&str] = &[
        "responses_queued",
        "responses_in_progress",
        "responses_requires_action",
    ];
    [
        ("queued-run claim", claim, &["responses_queued"]),
        ("take-over sweep", STALE_RUNS, &["responses_in_progress"]),
        ("expiry sweep", EXPIRED_RUNS, &["responses_requires_action"]),
        ("the metrics' count", COUNT_UNFINISHED, ALL),
    ]
}

/// A statement's name, its text, and the indexes it should read.
pub type RunsByState = (&'static str, &'static str, &'static [&'static str]);

/// The take-over: `$4` the state it leaves (and stays in), the lease ran out before `$5`,
/// and `$1`, who claims it, does not hold it already. A start's take-over of what a previous
/// process left counts every lease as run out (`$5` the end of time) and waits for the MCP
/// servers first: meanwhile the periodic sweep may have taken the same run over, and a second
/// claim would have run it twice.
pub(super) const CLAIM_STALE: &str = concat!(
    "UPDATE responses SET lease_owner = $1, lease_expires_at = $2, updated_at = $5 \
     WHERE id = $3 AND state IS NOT DISTINCT FROM $4 \
     AND (lease_owner IS NULL OR (lease_expires_at < $5 AND lease_owner <> $1)) \
     RETURNING ",
    run_columns!()
);

/// A running run's progress, if `$5` still holds it.
pub(super) const CHECKPOINT: &str = "UPDATE responses SET body = $1, transcript = $2, \
     updated_at = $3 WHERE id = $4 AND state IS NOT DISTINCT FROM 'in_progress' \
     AND lease_owner IS NOT DISTINCT FROM $5 \
     RETURNING cancel_requested_at";

/// Every run `$1` holds in state `$2` (`in_progress`), handed over at once.
pub(super) const RELEASE_LEASES: &str = "UPDATE responses SET lease_owner = NULL, \
     lease_expires_at = NULL WHERE lease_owner = $1 AND state = $2";

pub(super) const REQUEST_CANCEL: &str = "UPDATE responses SET cancel_requested_at = $1 \
     WHERE tenant_id = $2 AND id = $3 AND state IS NOT DISTINCT FROM 'in_progress'";

/// The frames holding a run's events after `$2`: at most `$3` of them, each holding at least
/// one of those events (see `frames.rs`).
pub(super) const FRAMES_AFTER: &str = "SELECT tenant_id, first_seq, last_seq, created_at, events \
     FROM response_event_frames WHERE response_id = $1 AND last_seq > $2 \
     ORDER BY last_seq LIMIT $3";

pub(super) const INPUT_ITEMS: &str = "SELECT item FROM input_items \
     WHERE tenant_id = $1 AND response_id = $2 ORDER BY position";

pub(super) const INPUT_ITEM_POSITION: &str = "SELECT position FROM input_items \
     WHERE tenant_id = $1 AND response_id = $2 AND item_id = $3";

pub(super) const INPUT_ITEMS_BEFORE: &str = "SELECT item FROM input_items \
     WHERE tenant_id = $1 AND response_id = $2 AND position < $3 \
     ORDER BY position DESC LIMIT $4";

pub(super) const INPUT_ITEMS_AFTER: &str = "SELECT item FROM input_items \
     WHERE tenant_id = $1 AND response_id = $2 AND position > $3 \
     ORDER BY position ASC LIMIT $4";

pub(super) const DELETE_RUN: &str = "DELETE FROM responses WHERE tenant_id = $1 AND id = $2";
pub(super) const DELETE_INPUT_ITEMS: &str = "DELETE FROM input_items WHERE response_id = $1";
pub(super) const DELETE_EVENTS: &str = "DELETE FROM response_event_frames WHERE response_id = $1";
pub(super) const DELETE_OUTPUT_ITEMS: &str = "DELETE FROM output_items WHERE response_id = $1";

/// What deleting a run also deletes, by its id: its input items, events and indexed output.
pub(super) const DELETE_WITH_RUN: [&str; 4] = [
    DELETE_INPUT_ITEMS,
    DELETE_EVENTS,
    DELETE_OUTPUT_ITEMS,
    RELEASE_CONVERSATION_OF,
];

/// A deleted response lets go of the conversation it held (a running one can be deleted).
pub(super) const RELEASE_CONVERSATION_OF: &str =
    "UPDATE conversations SET active_run = NULL WHERE active_run = $1";

pub(super) const TENANT_OF: &str = "SELECT tenant_id FROM responses WHERE id = $1";

pub(super) const FIND_IDEMPOTENT: &str = "SELECT request_hash, response_id, created_at \
     FROM idempotency_keys WHERE tenant_id = $1 AND key = $2";

/// Deletes up to `$2` runs that stopped before `$1`, oldest first, returning their ids.
macro_rules! prune_runs {
    () => {
        "DELETE FROM responses WHERE id IN (SELECT id FROM responses \
         WHERE stopped_at < $1 ORDER BY stopped_at LIMIT $2) RETURNING id"
    };
}
pub(super) use prune_runs;

pub(super) const PRUNE_KEYS: &str = "DELETE FROM idempotency_keys WHERE (tenant_id, key) IN \
     (SELECT tenant_id, key FROM idempotency_keys WHERE created_at < $1 \
      ORDER BY created_at LIMIT $2)";

/// An output item as indexed (migration 8): its run, its id, the call id of a client call,
/// and the item as JSON.
pub(super) struct IndexedItem<'a> {
    pub response_id: &'a str,
    pub tenant_id: &'a str,
    pub item_id: &'a str,
    pub call_id: Option<&'a str>,
    pub item: String,
}

/// The output items a run's change to `to` indexes: a paused or stopped run's output (those
/// indexed before are skipped by the insert), none for a run that stopped with
/// `store: false`, which is deleted as it stops.
pub(super) fn indexed_items<'a>(
    response_id: &'a str,
    tenant_id: &'a str,
    body: &'a ResponseObject,
    to: RunState,
) -> Result<Vec<IndexedItem<'a>>, StoreError> {
    let indexed = match to {
        RunState::RequiresAction => true,
        to => to.is_final() && body.store,
    };
    if !indexed {
        return Ok(Vec::new());
    }
    body.output
        .iter()
        .map(|item| {
            let call_id = match item {
                Item::FunctionCall(c) => Some(c.call_id.as_str()),
                Item::CustomToolCall(c) => Some(c.call_id.as_str()),
                Item::LocalShellCall(c) => Some(c.call_id.as_str()),
                _ => None,
            };
            Ok(IndexedItem {
                response_id,
                tenant_id,
                item_id: item.id(),
                call_id,
                item: to_json(item)?,
            })
        })
        .collect()
}

/// An item found by id: the run it belongs to, and the item.
#[derive(sqlx::FromRow)]
pub(super) struct FoundRow {
    pub response_id: String,
    pub item: String,
    /// Whether it is an output item (else an input item).
    pub output: bool,
    /// The state of its run.
    pub state: String,
}

pub(super) fn found(rows: Vec<FoundRow>) -> Result<Vec<FoundItem>, StoreError> {
    rows.into_iter()
        .map(|row| {
            Ok(FoundItem {
                response_id: row.response_id,
                item: from_json(&row.item)?,
                output: row.output,
                state: parse_state(&row.state)?,
            })
        })
        .collect()
}

/// The page query for `order`, and where a page without `after` starts.
pub(super) fn page(order: Order) -> (&'static str, i64) {
    match order {
        Order::Descending => (INPUT_ITEMS_BEFORE, i64::MAX),
        Order::Ascending => (INPUT_ITEMS_AFTER, -1),
    }
}

/// A page read with one row more than `limit`: its items, and whether more follow.
pub(super) fn page_of(rows: Vec<ItemRow>, limit: u32) -> Result<(Vec<Item>, bool), StoreError> {
    let mut items = items(rows)?;
    let has_more = items.len() > limit as usize;
    items.truncate(limit as usize);
    Ok((items, has_more))
}

/// Of the renewed runs `(id, cancel requested at)`, those a client asked to cancel.
pub(super) fn cancel_requested(renewed: Vec<(String, Option<UnixMillis>)>) -> Vec<String> {
    renewed
        .into_iter()
        .filter_map(|(id, cancel)| cancel.map(|_| id))
        .collect()
}

/// The guard of a transition as [`COMPARE_AND_SET`] binds it.
pub(super) fn guard_name(guard: Guard) -> &'static str {
    match guard {
        Guard::Unheld => "unheld",
        Guard::HeldByCaller => "held",
        Guard::RunOut => "run_out",
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct RunRow {
    pub tenant_id: String,
    pub state: String,
    pub body: String,
    pub transcript: String,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<UnixMillis>,
    pub expires_at: Option<UnixMillis>,
    pub created_at: UnixMillis,
    pub updated_at: UnixMillis,
    pub cancel_requested_at: Option<UnixMillis>,
    pub key_id: Option<String>,
}

impl TryFrom<RunRow> for StoredRun {
    type Error = StoreError;

    fn try_from(row: RunRow) -> Result<StoredRun, StoreError> {
        Ok(StoredRun {
            tenant_id: row.tenant_id,
            state: parse_state(&row.state)?,
            body: from_json(&row.body)?,
            transcript: from_json(&row.transcript)?,
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            expires_at: row.expires_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
            cancel_requested: row.cancel_requested_at.is_some(),
            key_id: row.key_id,
        })
    }
}

pub(super) fn runs(rows: Vec<RunRow>) -> Result<Vec<StoredRun>, StoreError> {
    rows.into_iter().map(TryInto::try_into).collect()
}

pub(super) fn parse_state(text: &str) -> Result<RunState, StoreError> {
    RunState::parse(text).ok_or_else(|| StoreError::corrupt(format!("unknown run state {text:?}")))
}

#[derive(sqlx::FromRow)]
pub(super) struct ItemRow {
    pub item: String,
}

pub(super) fn items(rows: Vec<ItemRow>) -> Result<Vec<Item>, StoreError> {
    rows.iter().map(|row| from_json(&row.item)).collect()
}

#[derive(sqlx::FromRow)]
pub(super) struct IdempotencyRow {
    pub request_hash: String,
    pub response_id: String,
    pub created_at: UnixMillis,
}

impl From<IdempotencyRow> for IdempotentRequest {
    fn from(row: IdempotencyRow) -> IdempotentRequest {
        IdempotentRequest {
            request_hash: row.request_hash,
            response_id: row.response_id,
            created_at: row.created_at,
        }
    }
}

/// A run's body as stored: the JSON text its caller serialised already (for the events that
/// carry it), else serialised here.
pub(super) fn body_json(body: &ResponseObject, json: Option<&str>) -> Result<String, StoreError> {
    match json {
        Some(json) => {
            debug_assert_eq!(
                to_json(body).ok().as_deref(),
                Some(json),
                "another body's text"
            );
            Ok(json.to_string())
        }
        None => to_json(body),
    }
}

/// JSON text for a column.
pub(super) fn to_json(value: &(impl serde::Serialize + ?Sized)) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| {
        let message = format!("cannot encode: {e}");
        StoreError::Rejected(Cause::of(e).saying(message))
    })
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(Cause::of(e)))
}

/// A sequence number as stored.
pub(super) fn sequence(n: Option<i64>) -> Option<u64> {
    n.map(|n| n.max(0) as u64)
}

pub(super) const INSERT_TENANT: &str =
    "INSERT INTO tenants (id, name, created_at) VALUES ($1, $1, $2) ON CONFLICT DO NOTHING";

pub(super) const INSERT_KEY: &str = "INSERT INTO api_keys \
     (id, tenant_id, name, hash, prefix, policy, created_at, revoked_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// The columns of a [`KeyRow`].
macro_rules! key_columns {
    () => {
        "id, tenant_id, name, hash, prefix, policy, created_at, revoked_at"
    };
}

pub(super) const KEY_BY_HASH: &str =
    concat!("SELECT ", key_columns!(), " FROM api_keys WHERE hash = $1");

pub(super) const KEY_BY_ID: &str =
    concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1");

pub(super) const LIST_KEYS: &str = concat!(
    "SELECT ",
    key_columns!(),
    " FROM api_keys WHERE (CAST($1 AS TEXT) IS NULL OR tenant_id = $1) ORDER BY created_at, id"
);

pub(super) const REVOKE_KEY: &str =
    "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL";

pub(super) const ADD_USAGE: &str = "INSERT INTO usage \
     (tenant_id, key_id, model, day, runs, input_tokens, cached_tokens, output_tokens) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, key_id, model, day) \
     DO UPDATE SET runs = usage.runs + excluded.runs, \
     input_tokens = usage.input_tokens + excluded.input_tokens, \
     cached_tokens = usage.cached_tokens + excluded.cached_tokens, \
     output_tokens = usage.output_tokens + excluded.output_tokens";

pub(super) const USAGE: &str = "SELECT tenant_id, key_id, model, day, runs, input_tokens, \
     cached_tokens, output_tokens FROM usage WHERE (CAST($1 AS TEXT) IS NULL OR tenant_id = $1) \
     ORDER BY day, tenant_id, key_id, model";

#[derive(sqlx::FromRow)]
pub(super) struct KeyRow {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub hash: String,
    pub prefix: String,
    pub policy: String,
    pub created_at: UnixMillis,
    pub revoked_at: Option<UnixMillis>,
}

impl From<KeyRow> for ApiKeyRecord {
    fn from(row: KeyRow) -> ApiKeyRecord {
        ApiKeyRecord {
            id: row.id,
            tenant_id: row.tenant_id,
            name: row.name,
            hash: row.hash,
            prefix: row.prefix,
            policy: row.policy,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct UsageDbRow {
    pub tenant_id: String,
    pub key_id: String,
    pub model: String,
    pub day: String,
    pub runs: i64,
    pub input_tokens: i64,
    pub cached_tokens: i64,
    pub output_tokens: i64,
}

impl From<UsageDbRow> for UsageRow {
    fn from(row: UsageDbRow) -> UsageRow {
        UsageRow {
            tenant_id: row.tenant_id,
            key_id: row.key_id,
            model: row.model,
            day: row.day,
            runs: row.runs,
            input_tokens: row.input_tokens,
            cached_tokens: row.cached_tokens,
            output_tokens: row.output_tokens,
        }
    }
}

pub(super) const INSERT_CONVERSATION: &str = "INSERT INTO conversations \
     (id, tenant_id, created_at, metadata, next_seq) VALUES ($1, $2, $3, $4, $5)";

pub(super) const GET_CONVERSATION: &str = "SELECT id, tenant_id, created_at, metadata \
     FROM conversations WHERE tenant_id = $1 AND id = $2";

pub(super) const UPDATE_CONVERSATION: &str = "UPDATE conversations SET metadata = $3 \
     WHERE tenant_id = $1 AND id = $2";

pub(super) const DELETE_CONVERSATION: &str =
    "DELETE FROM conversations WHERE tenant_id = $1 AND id = $2";

pub(super) const DELETE_CONVERSATION_ITEMS: &str =
    "DELETE FROM conversation_items WHERE conversation_id = $1";

/// Reserves `$3` sequence numbers under the conversation's row (the row lock on PostgreSQL,
/// the one writer on SQLite): the first of them.
pub(super) const RESERVE_CONVERSATION_SEQ: &str = "UPDATE conversations \
     SET next_seq = next_seq + $3 WHERE tenant_id = $1 AND id = $2 RETURNING next_seq - $3";

pub(super) const INSERT_CONVERSATION_ITEM: &str = "INSERT INTO conversation_items \
     (conversation_id, seq, item_id, item, created_at) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT DO NOTHING";

/// The conversation's item with this id, if it is the tenant's.
pub(super) const CONVERSATION_ITEM: &str = "SELECT i.seq, i.item FROM conversation_items i \
     JOIN conversations c ON c.id = i.conversation_id \
     WHERE c.tenant_id = $1 AND c.id = $2 AND i.item_id = $3";

pub(super) const CONVERSATION_ITEMS_BEFORE: &str = "SELECT item FROM conversation_items \
     WHERE conversation_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3";

pub(super) const CONVERSATION_ITEMS_AFTER: &str = "SELECT item FROM conversation_items \
     WHERE conversation_id = $1 AND seq > $2 ORDER BY seq ASC LIMIT $3";

pub(super) const DELETE_CONVERSATION_ITEM: &str =
    "DELETE FROM conversation_items WHERE conversation_id = $1 AND item_id = $2";

#[derive(sqlx::FromRow)]
pub(super) struct ConversationRow {
    pub id: String,
    pub tenant_id: String,
    pub created_at: i64,
    pub metadata: String,
}

impl From<ConversationRow> for super::types::ConversationRecord {
    fn from(row: ConversationRow) -> Self {
        super::types::ConversationRecord {
            id: row.id,
            tenant_id: row.tenant_id,
            created_at: UnixMillis::from_millis(row.created_at),
            metadata: row.metadata,
        }
    }
}

/// A page of a conversation's items in `order`: the statement and where it starts.
pub(super) fn conversation_page(order: Order) -> (&'static str, i64) {
    match order {
        Order::Descending => (CONVERSATION_ITEMS_BEFORE, i64::MAX),
        Order::Ascending => (CONVERSATION_ITEMS_AFTER, -1),
    }
}

/// Takes a conversation for the response `$3`, if no response holds it (or `$3` does).
pub(super) const LOCK_CONVERSATION: &str = "UPDATE conversations SET active_run = $3 \
     WHERE tenant_id = $1 AND id = $2 AND (active_run IS NULL OR active_run = $3)";

/// Lets go of a conversation the response `$2` holds.
pub(super) const UNLOCK_CONVERSATION: &str =
    "UPDATE conversations SET active_run = NULL WHERE id = $1 AND active_run = $2";

pub(super) const CONVERSATION_EXISTS: &str =
    "SELECT COUNT(*) FROM conversations WHERE tenant_id = $1 AND id = $2";

/// Appends one item after a conversation's last, unless the conversation has its id already
/// (then nothing happens); [`BUMP_CONVERSATION_SEQ`] follows when a row was inserted.
pub(super) const APPEND_CONVERSATION_ITEM: &str = "INSERT INTO conversation_items \
     (conversation_id, seq, item_id, item, created_at) \
     SELECT id, next_seq, $2, $3, $4 FROM conversations WHERE id = $1 \
     ON CONFLICT DO NOTHING";

pub(super) const BUMP_CONVERSATION_SEQ: &str =
    "UPDATE conversations SET next_seq = next_seq + 1 WHERE id = $1";

/// A run's input items, in order.
pub(super) const RUN_INPUT_ITEMS: &str =
    "SELECT item FROM input_items WHERE response_id = $1 ORDER BY position";

/// Every item of a conversation, oldest first.
pub(super) const ALL_CONVERSATION_ITEMS: &str =
    "SELECT item FROM conversation_items WHERE conversation_id = $1 ORDER BY seq";
