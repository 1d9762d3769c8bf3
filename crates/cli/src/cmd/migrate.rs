//! `jobwire migrate`: applying the schema migrations.

use anyhow::Result;
use sqlx::PgPool;

pub(crate) async fn migrate(pool: &PgPool) -> Result<()> {
    jobwire_core::migrate(pool).await?;
    println!("schema is up to date");
    Ok(())
}
