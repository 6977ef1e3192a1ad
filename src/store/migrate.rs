//! Migrations, and which releases can run on a schema (expand/contract).
//!
//! Every instance applies the migrations it knows when it starts. A release's migrations only
//! expand the schema (new tables, new nullable or defaulted columns, new indexes), so that the
//! release before it still runs on the migrated database; what the older release needs is
//! removed (contracted) one release later. Each migration records, in `schema_compat`, the
//! oldest migration a binary must know to run on a schema that has it (`requires`). An older
//! binary then starts on a newer schema when every migration it does not know allows it, and
//! refuses to start, naming them, when one does not: during a rolling upgrade, old and new
//! replicas run side by side, and a release can be rolled back without restoring a backup.

use std::collections::BTreeSet;

use sqlx::migrate::{Migrate, MigrateError, Migrator};

use super::error::{Cause, StoreError};

/// What a start found and did to the schema.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schema {
    /// The newest migration this binary knows.
    pub known: i64,
    /// Migrations this start applied, in order.
    pub applied_now: Vec<i64>,
    /// Migrations of a newer release found applied, which allow this binary to run.
    pub newer: Vec<i64>,
}

/// The rows of `schema_compat`: `(version, requires)`.
pub(super) const SCHEMA_COMPAT: &str = "SELECT version, requires FROM schema_compat";

/// Applies the migrations `migrator` knows on `conn`, after checking that the migrations
/// applied by newer releases (if any) allow this binary to run. `read_compat` reads the
/// `schema_compat` rows (`None` when the table cannot be read).
pub(super) async fn apply<C>(
    mut migrator: Migrator,
    conn: &mut C,
    read_compat: impl AsyncFnOnce(&mut C) -> Option<Vec<(i64, i64)>>,
) -> Result<Schema, StoreError>
where
    C: Migrate,
{
    // One start at a time, from the first look at the migrations table: creating it is not
    // safe against itself (`CREATE TABLE IF NOT EXISTS`), and two instances starting at once
    // on a new PostgreSQL database failed on a duplicate row of `pg_type`. The migrator then
    // runs under this lock rather than taking its own. (On SQLite the lock is nothing: a
    // database file has one instance.)
    conn.lock().await.map_err(failed)?;
    migrator.set_locking(false);
    let applied = apply_locked(migrator, conn, read_compat).await;
    let unlocked = conn.unlock().await.map_err(failed);
    let schema = applied?;
    unlocked?;
    Ok(schema)
}

async fn apply_locked<C>(
    mut migrator: Migrator,
    conn: &mut C,
    read_compat: impl AsyncFnOnce(&mut C) -> Option<Vec<(i64, i64)>>,
) -> Result<Schema, StoreError>
where
    C: Migrate,
{
    conn.ensure_migrations_table().await.map_err(failed)?;
    let before: BTreeSet<i64> = conn
        .list_applied_migrations()
        .await
        .map_err(failed)?
        .iter()
        .map(|m| m.version)
        .collect();
    let known: BTreeSet<i64> = migrator.iter().map(|m| m.version).collect();
    let newest_known = known.last().copied().unwrap_or(0);
    let newer: Vec<i64> = before.difference(&known).copied().collect();
    if !newer.is_empty() {
        let compat = read_compat(conn).await;
        allow_newer(newest_known, &newer, compat.as_deref())?;
        migrator.set_ignore_missing(true);
    }
    migrator.run_direct(conn).await.map_err(failed)?;
    Ok(Schema {
        known: newest_known,
        applied_now: known.difference(&before).copied().collect(),
        newer,
    })
}

/// Whether a binary whose newest migration is `newest_known` may run on a schema that also
/// has the migrations `newer`.
fn allow_newer(
    newest_known: i64,
    newer: &[i64],
    compat: Option<&[(i64, i64)]>,
) -> Result<(), StoreError> {
    let requires = |version: i64| {
        compat?
            .iter()
            .find_map(|(v, requires)| (*v == version).then_some(*requires))
    };
    let blocking: Vec<String> = newer
        .iter()
        .filter(|version| requires(**version).is_none_or(|r| r > newest_known))
        .map(|version| match requires(*version) {
            Some(r) => format!("{version} (needs a binary that knows migration {r})"),
            None => format!("{version} (says nothing of older binaries)"),
        })
        .collect();
    if blocking.is_empty() {
        return Ok(());
    }
    Err(StoreError::rejected(format!(
        "the database has migrations of a newer release that this binary (which knows \
         migrations up to {newest_known}) cannot run on: {}. Run the newer release, or restore \
         the backup taken before it was installed",
        blocking.join(", ")
    )))
}

fn failed(e: MigrateError) -> StoreError {
    match e {
        MigrateError::Execute(e) => StoreError::from(e),
        e => {
            let message = format!("migrations failed: {e}");
            StoreError::Rejected(Cause::of(e).saying(message))
        }
    }
}

impl std::fmt::Display for Schema {
    /// What `switchyard migrate` says.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.applied_now.as_slice() {
            [] => write!(f, "no migration to apply")?,
            [one] => write!(f, "applied migration {one}")?,
            [first, .., last] => write!(
                f,
                "applied migrations {first} to {last} ({} of them)",
                self.applied_now.len()
            )?,
        }
        write!(f, "; this release knows migrations up to {}", self.known)?;
        if !self.newer.is_empty() {
            let list: Vec<String> = self.newer.iter().map(i64::to_string).collect();
            write!(
                f,
                "; the database also has migration(s) {} of a newer release, which this one can run on",
                list.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_migration_allows_older_binaries_only_down_to_what_it_requires() {
        let compat = [(11, 10), (12, 11)];
        assert!(allow_newer(10, &[11], Some(&compat)).is_ok());
        let refused = allow_newer(10, &[11, 12], Some(&compat)).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("12 (needs a binary that knows migration 11)"),
            "{refused}"
        );
        let unknown = allow_newer(10, &[13], Some(&compat)).unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("13 (says nothing of older binaries)")
        );
        assert!(allow_newer(10, &[11], None).is_err());
    }

    #[test]
    fn the_report_says_what_was_applied_and_what_newer_release_is_there() {
        let schema = Schema {
            known: 10,
            applied_now: vec![1, 2, 3],
            newer: vec![],
        };
        assert_eq!(
            schema.to_string(),
            "applied migrations 1 to 3 (3 of them); this release knows migrations up to 10"
        );
        let schema = Schema {
            known: 10,
            applied_now: vec![],
            newer: vec![11],
        };
        assert_eq!(
            schema.to_string(),
            "no migration to apply; this release knows migrations up to 10; the database also \
             has migration(s) 11 of a newer release, which this one can run on"
        );
    }
}
