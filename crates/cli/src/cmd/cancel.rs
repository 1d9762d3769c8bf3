//! `jobwire cancel`: requesting that one job be cancelled.

use anyhow::Result;
use sqlx::PgPool;
use uuid::Uuid;

pub(crate) async fn cancel(pool: &PgPool, job_id: Uuid, actor: &str) -> Result<()> {
    let outcome = jobwire_core::request_cancel(pool, job_id, actor).await?;
    outln!(
        "{job_id}: {}",
        serde_json::to_value(outcome)?.as_str().unwrap_or("?")
    );
    Ok(())
}
