//! `jobwire migrate`: applying the schema migrations.

use anyhow::Result;
use jobwire_core::SchemaState;
use sqlx::PgPool;

pub(crate) async fn migrate(pool: &PgPool) -> Result<()> {
    let before = jobwire_core::schema_state(pool).await?;
    jobwire_core::migrate(pool).await?;
    outln!("{}", outcome(&before));
    Ok(())
}

/// What `migrate` did, from where the schema stood before it ran.
fn outcome(before: &SchemaState) -> String {
    match before {
        SchemaState::Current => "schema was already up to date; nothing applied".to_owned(),
        SchemaState::Behind { pending } => format!(
            "applied {} migration(s); schema is up to date",
            pending.len()
        ),
        SchemaState::Empty => {
            let total = jobwire_core::MIGRATOR
                .iter()
                .filter(|migration| migration.migration_type.is_up_migration())
                .count();
            format!("created the schema ({total} migrations); schema is up to date")
        }
        _ => "schema is up to date".to_owned(),
    }
}
