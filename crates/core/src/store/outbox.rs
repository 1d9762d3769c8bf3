//! Outbox dead letters: rows the relay moved to `job_outbox_dead` after
//! bounded attempts, listed by group and moved back, audited.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::{Error, Result};

/// Outbox dead letters of one topic with one last error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct OutboxDeadGroup {
    /// The outbox topic.
    pub topic: String,
    /// The error the relay recorded last (empty when none).
    pub last_error: String,
    /// Rows in the group.
    pub count: i64,
    /// When the oldest row was moved aside.
    pub first_failed_at: DateTime<Utc>,
    /// When the newest row was moved aside.
    pub last_failed_at: DateTime<Utc>,
}

/// Outbox dead letters grouped by topic and last error, largest group first.
pub async fn outbox_dead_groups<'c, E: PgExecutor<'c>>(
    executor: E,
) -> Result<Vec<OutboxDeadGroup>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/outbox_dead_groups.sql"))
            .fetch_all(executor)
            .await?,
    )
}

/// Which outbox dead letters to move back; `None` matches anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxReplayFilter {
    /// Only this topic.
    pub topic: Option<String>,
    /// Only rows whose last error begins with this (the whole error, or its
    /// first words).
    pub last_error: Option<String>,
    /// Only these outbox ids.
    pub ids: Option<Vec<i64>>,
    /// Most rows moved by one call (one statement, one transaction).
    pub limit: i64,
}

impl Default for OutboxReplayFilter {
    fn default() -> Self {
        OutboxReplayFilter {
            topic: None,
            last_error: None,
            ids: None,
            limit: 1000,
        }
    }
}

/// Move outbox dead letters matching `filter` back into `job_outbox`, due
/// now with a fresh attempt budget, each recorded in `job_outbox_audit`
/// with `actor` and `reason`, in one statement. Returns the ids moved; call
/// again while it returns `filter.limit` of them.
pub async fn replay_outbox_dead<'c, E: PgExecutor<'c>>(
    executor: E,
    filter: &OutboxReplayFilter,
    actor: &str,
    reason: &str,
) -> Result<Vec<i64>> {
    if actor.trim().is_empty() {
        return Err(Error::InvalidArgument {
            argument: "actor",
            reason: "a replay must name who asked for it".into(),
        });
    }
    if filter.limit < 1 {
        return Err(Error::InvalidArgument {
            argument: "limit",
            reason: "must be at least 1".into(),
        });
    }
    // Every error begins with nothing: an empty beginning would replay the
    // whole topic (or every topic) while reading like a narrow filter.
    if filter
        .last_error
        .as_deref()
        .is_some_and(|error| error.trim().is_empty())
    {
        return Err(Error::InvalidArgument {
            argument: "last_error",
            reason: "an empty beginning matches every error; leave it out to replay \
                     a whole topic"
                .into(),
        });
    }
    Ok(
        sqlx::query_scalar(include_str!("../../sql/replay_outbox_dead.sql"))
            .bind(&filter.topic)
            .bind(&filter.last_error)
            .bind(&filter.ids)
            .bind(filter.limit)
            .bind(actor)
            .bind(reason)
            .fetch_all(executor)
            .await?,
    )
}
