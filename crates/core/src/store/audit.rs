//! The audit trail of one job: what operators did to it, and who.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::Result;

/// One operator action on a job, from `job_audit`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AuditEntry {
    /// What was done (`cancel`, `replay`, ...).
    pub action: String,
    /// Who did it: a token's name, or the CLI's `--actor`.
    pub actor: String,
    /// Why, when given.
    pub reason: Option<String>,
    /// Anything else recorded with it.
    pub details: Value,
    /// When, by the database clock.
    pub created_at: DateTime<Utc>,
}

/// Up to `limit` entries of `job_id`'s audit trail, oldest first.
pub async fn job_audit_trail<'c, E: PgExecutor<'c>>(
    executor: E,
    job_id: Uuid,
    limit: i64,
) -> Result<Vec<AuditEntry>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/job_audit_trail.sql"))
            .bind(job_id)
            .bind(limit.max(0))
            .fetch_all(executor)
            .await?,
    )
}
