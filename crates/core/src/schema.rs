//! The schema contract (the workspace's `migrations/`), applying it, and
//! telling whether a database has it.

use crate::Error;

/// The schema contract: the migrations in the workspace's `migrations/` folder.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Apply every pending migration. Safe to run concurrently from several
/// processes (sqlx takes an advisory lock) and again on an up-to-date schema.
pub async fn migrate(pool: &sqlx::PgPool) -> Result<(), Error> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Where a database stands against [`MIGRATOR`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaState {
    /// No jobwire schema at all (a new, empty database).
    Empty,
    /// Every migration this version knows is applied.
    Current,
    /// Some migrations are not applied yet: run `jobwire migrate`.
    Behind {
        /// The versions still to apply.
        pending: Vec<i64>,
    },
}

/// Compare the database's applied migrations with this version's. Reads only.
pub async fn schema_state(pool: &sqlx::PgPool) -> Result<SchemaState, Error> {
    let has_table: bool = sqlx::query_scalar(include_str!("../sql/schema_exists.sql"))
        .fetch_one(pool)
        .await?;
    if !has_table {
        return Ok(SchemaState::Empty);
    }
    let applied: Vec<i64> = sqlx::query_scalar(include_str!("../sql/applied_migrations.sql"))
        .fetch_all(pool)
        .await?;
    let pending: Vec<i64> = MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .map(|migration| migration.version)
        .filter(|version| !applied.contains(version))
        .collect();
    Ok(match (applied.is_empty(), pending.is_empty()) {
        (true, _) => SchemaState::Empty,
        (false, true) => SchemaState::Current,
        (false, false) => SchemaState::Behind { pending },
    })
}
