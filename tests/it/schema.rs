//! Properties of the migrated schema that no amount of data should change. On SQLite, and on
//! PostgreSQL when `TEST_DATABASE_URL` is set.

use std::str::FromStr;

use sqlx::{ConnectOptions, Connection, Row};
use switchyard::store;

use crate::support::{Database, backends, run_sql};

/// The store's statements that find one run by its tenant and id.
const LOOKUPS_BY_ID: [&str; 2] = [
    "SELECT tenant_id, state, body, transcript, lease_owner, lease_expires_at, expires_at, \
     updated_at FROM responses WHERE tenant_id = $1 AND id = $2",
    "DELETE FROM responses WHERE tenant_id = $1 AND id = $2",
];

/// The plan a PostgreSQL connection keeps for `statement` once prepared, after its first
/// executions, until an ANALYZE of the table replaces it: its generic plan, made for any
/// values of its parameters (`$1` up to the highest it names, their types inferred).
async fn generic_plan(conn: &mut sqlx::PgConnection, statement: &str) -> String {
    let parameters = (1..=99)
        .rev()
        .find(|n| statement.contains(&format!("${n}")))
        .unwrap_or(0);
    let nulls = match parameters {
        0 => String::new(),
        n => format!("({})", vec!["NULL"; n].join(", ")),
    };
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("PREPARE planned AS {statement}"))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("cannot prepare `{statement}`: {e}"));
    let rows = sqlx::raw_sql(&format!(
        "EXPLAIN EXECUTE planned {nulls}; DEALLOCATE planned"
    ))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let rows: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    rows.join("\n")
}

/// The plan of `statement` on the database at `url`: on PostgreSQL its [`generic_plan`], on
/// SQLite what `EXPLAIN QUERY PLAN` says (SQLite plans a statement as it is prepared, before
/// any parameter is bound).
async fn plan(url: &str, statement: &str) -> String {
    if url.starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        return generic_plan(&mut conn, statement).await;
    }
    let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
    let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}"))
        .fetch_all(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("cannot plan `{statement}`: {e}"));
    let rows: Vec<String> = rows.iter().map(|row| row.get("detail")).collect();
    rows.join("\n")
}

#[tokio::test]
async fn a_run_is_looked_up_by_its_primary_key_even_in_a_plan_made_while_the_table_was_empty() {
    for db in backends().await {
        let url = &db.url;
        // Migrates the new database; its tables are empty.
        store::connect(url, 1).await.unwrap();
        for statement in LOOKUPS_BY_ID {
            // The step that finds the run by its key.
            let by_key = if url.starts_with("postgres") {
                "Index Cond: (id = $2)"
            } else {
                "USING INDEX sqlite_autoindex_responses_1 (id=?)"
            };
            let plan = plan(url, statement).await;
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

/// Applies the migrations up to `version` only, as the release that had no later one did.
async fn migrate_up_to(url: &str, version: i64) {
    let postgres = url.starts_with("postgres");
    let folder = if postgres {
        "migrations/postgres"
    } else {
        "migrations/sqlite"
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut migrator = sqlx::migrate::Migrator::new(path).await.unwrap();
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    if postgres {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        migrator.run_direct(&mut conn).await.unwrap();
    } else {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
            .unwrap()
            .create_if_missing(true);
        let mut conn = options.connect().await.unwrap();
        migrator.run_direct(&mut conn).await.unwrap();
    }
}

#[tokio::test]
async fn events_stored_a_row_each_before_frames_read_back_the_same_after_the_migration() {
    let stored = [
        (
            0_i64,
            "response.created",
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_old","note":"a \"quoted\" é\n"}}"#,
            1_700_000_000_000_i64,
        ),
        (
            1,
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","sequence_number":1,"delta":"Hé"}"#,
            1_700_000_000_250,
        ),
        (
            2,
            "response.completed",
            r#"{"type":"response.completed","sequence_number":2}"#,
            1_700_000_000_900,
        ),
    ];
    for db in backends().await {
        let url = &db.url;
        migrate_up_to(url, 11).await;
        let rows: Vec<String> = stored
            .iter()
            .map(|(number, kind, data, at)| {
                let data = data.replace('\'', "''");
                format!("('resp_old', {number}, 'acme', '{kind}', '{data}', {at})")
            })
            .collect();
        let insert = format!(
            "INSERT INTO response_events \
             (response_id, sequence_number, tenant_id, event_type, data, created_at) VALUES {}",
            rows.join(", ")
        );
        run_sql(url, &[insert]).await;

        // The release with frames migrates the database as it starts.
        let store = store::connect(url, 1).await.unwrap();
        let read = store.events_after("resp_old", None, 10).await.unwrap();
        let read: Vec<(u64, String, String, i64, String)> = read
            .iter()
            .map(|e| {
                let kind = e.event_type.to_string();
                let tenant = e.tenant_id.to_string();
                (
                    e.sequence_number,
                    kind,
                    e.data.to_string(),
                    e.created_at,
                    tenant,
                )
            })
            .collect();
        let expected: Vec<(u64, String, String, i64, String)> = stored
            .iter()
            .map(|(n, kind, data, at)| {
                (
                    *n as u64,
                    kind.to_string(),
                    data.to_string(),
                    *at,
                    "acme".into(),
                )
            })
            .collect();
        assert_eq!(read, expected, "{url}");
        let after = store.events_after("resp_old", Some(1), 10).await.unwrap();
        assert_eq!(after.len(), 1, "{url}");
        assert_eq!(after[0].sequence_number, 2, "{url}");
        assert_eq!(
            store.last_sequence_number("resp_old").await.unwrap(),
            Some(2),
            "{url}"
        );
    }
}

#[tokio::test]
async fn on_postgresql_the_stored_json_is_compressed_with_lz4_when_the_server_has_it() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    store::connect(&db.url, 1).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let version: String = sqlx::query_scalar("SHOW server_version_num")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    if version.parse::<u32>().unwrap() < 140_000 {
        // One compression method (pglz), and no `attcompression` to read.
        return;
    }
    // A server built without lz4 answers `compression method lz4 not supported` here, and
    // migration 13 leaves its columns as they were.
    let has_lz4 = sqlx::query("SET default_toast_compression = lz4")
        .execute(&mut conn)
        .await
        .is_ok();
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.relname::text, a.attname::text, a.attcompression::text \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         WHERE c.relname IN ('response_event_frames', 'responses', 'input_items', 'output_items') \
         AND a.attname IN ('events', 'body', 'transcript', 'item') ORDER BY 1, 2",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(columns.len(), 5, "{columns:?}");
    let expected = if has_lz4 { "l" } else { "" };
    for (table, column, compression) in &columns {
        assert_eq!(compression, expected, "{table}.{column}");
    }
}

#[tokio::test]
async fn on_postgresql_statements_that_check_a_runs_state_or_holder_find_it_by_its_primary_key() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    // Migrates the new database: its tables have no statistics.
    store::connect(&db.url, 1).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // Runs a new service writes in its first seconds under load, before autovacuum's first
    // ANALYZE (or forever, on a server without autovacuum). On a table of a few pages, a
    // scan of the table is the plan, and the cheapest one.
    sqlx::query(
        "INSERT INTO responses (id, tenant_id, state, store, created_at, updated_at, body) \
         SELECT 'resp_' || n, 'default', 'completed', true, 1, 1, repeat('x', 1200) \
         FROM generate_series(1, 500) AS n",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    for (name, statement) in store::postgres::RUNS_BY_ID {
        let plan = generic_plan(&mut conn, statement).await;
        assert!(
            plan.contains("responses_pkey"),
            "{name} is planned as\n{plan}"
        );
        for other in [
            "responses_queued",
            "responses_in_progress",
            "responses_requires_action",
            "responses_lease_owner",
            "responses_stopped",
            "Seq Scan on responses",
        ] {
            assert!(!plan.contains(other), "{name} is planned as\n{plan}");
        }
    }
}

#[tokio::test]
async fn the_sweeps_the_claim_and_the_count_read_the_index_of_the_state_they_look_for() {
    for db in backends().await {
        let url = &db.url;
        let postgres = url.starts_with("postgres");
        // Migrates the new database: its tables have no statistics. Then finished runs, as a
        // service holds after its first minutes: the state indexes have no entry for them.
        store::connect(url, 1).await.unwrap();
        let numbers = if postgres {
            "generate_series(1, 500) AS n"
        } else {
            "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 500) \
             SELECT n FROM s)"
        };
        let finished = format!(
            "INSERT INTO responses (id, tenant_id, state, store, created_at, updated_at, \
             stopped_at, body) SELECT 'resp_' || n, 'default', 'completed', true, n, n, n, \
             '{{}}' FROM {numbers}"
        );
        run_sql(url, &[finished]).await;
        let statements = if postgres {
            store::postgres::RUNS_BY_STATE
        } else {
            store::sqlite::RUNS_BY_STATE
        };
        for (name, statement, indexes) in statements {
            let plan = plan(url, statement).await;
            for index in indexes {
                assert!(
                    plan.contains(index),
                    "{url}: the {name} is planned without {index}:\n{plan}"
                );
            }
            let scans_the_table = plan.lines().any(|line| {
                line.contains("Seq Scan on responses")
                    || (line.trim_start().starts_with("SCAN responses") && !line.contains("INDEX"))
            });
            assert!(
                !scans_the_table,
                "{url}: the {name} reads the table:\n{plan}"
            );
        }
    }
}
