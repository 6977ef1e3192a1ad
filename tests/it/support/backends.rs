//! The databases the tests run on: a fresh one for each test, because instances take over each
//! other's abandoned runs (and count, sweep and prune every run of their database), so tests
//! must not share one.
//!
//! SQLite always; PostgreSQL when `TEST_DATABASE_URL` is set (CI sets it), each test's database
//! created next to that one and named after it, so that CI drops them with it.
//! `TEST_BACKEND=sqlite` or `TEST_BACKEND=postgres` keeps one of the two in the tests that run
//! on both.

use sqlx::Connection;
use tempfile::TempDir;

/// A fresh, empty database of one test.
pub struct Database {
    /// What `database.url` takes: `sqlite://…` or `postgres://…`.
    pub url: String,
    /// An SQLite file's folder, removed with the database.
    _dir: Option<TempDir>,
}

impl Database {
    /// A new SQLite file in a folder of its own.
    pub fn sqlite() -> Database {
        let dir = tempfile::tempdir().unwrap();
        Database {
            url: format!("sqlite://{}/switchyard.db", dir.path().display()),
            _dir: Some(dir),
        }
    }

    /// A new PostgreSQL database, or `None` (with a note in the test's output) when
    /// `TEST_DATABASE_URL` is not set or `TEST_BACKEND` keeps SQLite only: a test of
    /// PostgreSQL alone then passes without running.
    pub async fn postgres() -> Option<Database> {
        let database = fresh_postgres().await;
        if database.is_none() {
            eprintln!(
                "no PostgreSQL (TEST_DATABASE_URL is not set, or TEST_BACKEND=sqlite): skipped"
            );
        }
        database
    }

    /// PostgreSQL when there is one (see [`Database::postgres`]), else SQLite: for a test that
    /// runs once, on the backend CI cares most about.
    pub async fn postgres_or_sqlite() -> Database {
        match fresh_postgres().await {
            Some(database) => database,
            None => Database::sqlite(),
        }
    }
}

/// Every backend a test that runs on both should run on: SQLite, and PostgreSQL when
/// `TEST_DATABASE_URL` is set (`TEST_BACKEND` keeps one), each a fresh database.
pub async fn backends() -> Vec<Database> {
    let mut databases = Vec::new();
    if kept("sqlite") {
        databases.push(Database::sqlite());
    }
    databases.extend(fresh_postgres().await);
    databases
}

/// Whether `TEST_BACKEND` leaves this backend in.
fn kept(backend: &str) -> bool {
    std::env::var("TEST_BACKEND").map_or(true, |only| only == backend)
}

/// A new database next to `TEST_DATABASE_URL`'s, named after it.
async fn fresh_postgres() -> Option<Database> {
    if !kept("postgres") {
        return None;
    }
    let base = std::env::var("TEST_DATABASE_URL").ok()?;
    let (server, current) = base.rsplit_once('/')?;
    let current = current.split('?').next().unwrap_or(current);
    // 16 random hex digits keep the name under PostgreSQL's 63-byte identifier limit.
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{current}_t{}", &unique[..16]);
    let mut admin = sqlx::PgConnection::connect(&base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    Some(Database {
        url: format!("{server}/{name}"),
        _dir: None,
    })
}

/// Runs SQL statements on a test's database, beside the service.
pub async fn run_sql(url: &str, statements: &[impl AsRef<str>]) {
    if url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        for statement in statements {
            sqlx::query(statement.as_ref())
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        for statement in statements {
            sqlx::query(statement.as_ref())
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
    }
}
