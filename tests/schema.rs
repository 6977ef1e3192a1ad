//! Properties of the migrated schema that no amount of data should change. On SQLite, and on
//! PostgreSQL when `TEST_DATABASE_URL` is set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use sqlx::{Connection, Row};
use switchyard::store;

/// The store's statements that find one run by its tenant and id.
const LOOKUPS_BY_ID: [&str; 2] = [
    "SELECT tenant_id, state, body, transcript, lease_owner, lease_expires_at, expires_at, \
     updated_at FROM responses WHERE tenant_id = $1 AND id = $2",
    "DELETE FROM responses WHERE tenant_id = $1 AND id = $2",
];

#[tokio::test]
async fn a_run_is_looked_up_by_its_primary_key_even_in_a_plan_made_while_the_table_was_empty() {
    for (url, _dir) in database_urls().await {
        // Migrates the new database; its tables are empty.
        store::connect(&url, 1).await.unwrap();
        for statement in LOOKUPS_BY_ID {
            let plan = if url.starts_with("postgres") {
                // The plan a connection keeps for a prepared statement after its first
                // executions, until an ANALYZE of the table replaces it.
                let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                sqlx::query("SET plan_cache_mode = force_generic_plan")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                sqlx::query(&format!("PREPARE lookup (text, text) AS {statement}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let rows = sqlx::query("EXPLAIN EXECUTE lookup ('default', 'resp_x')")
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|row| row.get::<String, _>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            } else {
                let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}"))
                    .bind("default")
                    .bind("resp_x")
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|row| row.get::<String, _>("detail"))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let by_key = if url.starts_with("postgres") {
                "Index Cond: (id = $2)"
            } else {
                "USING INDEX sqlite_autoindex_responses_1 (id=?)"
            };
            assert!(
                plan.contains(by_key),
                "{url}: `{statement}` is planned as\n{plan}"
            );
        }
    }
}

#[tokio::test]
async fn a_statement_is_planned_for_the_table_as_it_is_not_as_it_was_when_first_prepared() {
    let Some(url) = fresh_postgres_url().await else {
        return;
    };
    store::connect(&url, 1).await.unwrap();
    // A connection as the service makes them.
    let options = store::postgres::PostgresStore::connect_options(&url).unwrap();
    let mut conn = sqlx::PgConnection::connect_with(&options).await.unwrap();
    // The shape of the writer's update of runs' endings.
    sqlx::query(
        "PREPARE ending (text[], bigint[]) AS UPDATE responses SET updated_at = e.at \
         FROM UNNEST($1, $2) AS e (id, at) \
         WHERE responses.id = e.id AND responses.state = 'in_progress'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // Used while the table is empty: enough executions for a plan kept for good.
    for _ in 0..8 {
        sqlx::query("EXECUTE ending (ARRAY['resp_x'], ARRAY[1::bigint])")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO responses (id, tenant_id, state, store, created_at, updated_at, body) \
         SELECT 'resp_' || n, 'default', 'completed', true, n, n, '{}' \
         FROM generate_series(1, 20000) AS n",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let plan: Vec<String> =
        sqlx::query("EXPLAIN EXECUTE ending (ARRAY['resp_x'], ARRAY[1::bigint])")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<String, _>(0))
            .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("responses_pkey"), "{plan}");
}
