//! Properties of the migrated schema that no amount of data should change. On SQLite, and on
//! PostgreSQL when `TEST_DATABASE_URL` is set.

use sqlx::{Connection, Row};
use switchyard::store;

use crate::support::{Database, backends};

/// The store's statements that find one run by its tenant and id.
const LOOKUPS_BY_ID: [&str; 2] = [
    "SELECT tenant_id, state, body, transcript, lease_owner, lease_expires_at, expires_at, \
     updated_at FROM responses WHERE tenant_id = $1 AND id = $2",
    "DELETE FROM responses WHERE tenant_id = $1 AND id = $2",
];

#[tokio::test]
async fn a_run_is_looked_up_by_its_primary_key_even_in_a_plan_made_while_the_table_was_empty() {
    for db in backends().await {
        let url = &db.url;
        // Migrates the new database; its tables are empty.
        store::connect(url, 1).await.unwrap();
        for statement in LOOKUPS_BY_ID {
            // Rows of the plan, and the step that finds the run by its key.
            let (rows, by_key) = if url.starts_with("postgres") {
                // The plan a connection keeps for a prepared statement after its first
                // executions, until an ANALYZE of the table replaces it.
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
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
                let rows: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
                (rows, "Index Cond: (id = $2)")
            } else {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}"))
                    .bind("default")
                    .bind("resp_x")
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
                let rows: Vec<String> = rows.iter().map(|row| row.get("detail")).collect();
                (rows, "USING INDEX sqlite_autoindex_responses_1 (id=?)")
            };
            let plan = rows.join("\n");
            assert!(
                plan.contains(by_key),
                "{url}: `{statement}` is planned as\n{plan}"
            );
        }
    }
}

#[tokio::test]
async fn instances_starting_at_once_on_a_new_postgresql_database_all_migrate_it() {
    // They raced to create the migrations table: some failed to start with a duplicate row
    // of `pg_type` (and so did store contract tests on a fresh database). A SQLite file has
    // one instance.
    let Some(db) = Database::postgres().await else {
        return;
    };
    let starts = (0..8).map(|_| store::connect(&db.url, 1));
    for started in futures_util::future::join_all(starts).await {
        started.unwrap().ping().await.unwrap();
    }
}
