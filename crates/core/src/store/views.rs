//! Operator views over many jobs: a filtered, paged listing and the queues.

use sqlx::PgExecutor;

use uuid::Uuid;

use crate::{Error, JobFilter, JobStatus, QueueOverview, Result};

/// Up to `limit` jobs matching `filter`, newest first (hot table and history
/// together). For the next page, call again with `filter.before` set to the
/// last job's id.
pub async fn list_jobs<'c, E: PgExecutor<'c>>(
    executor: E,
    filter: &JobFilter,
    limit: i64,
) -> Result<Vec<JobStatus>> {
    let (first, last) = match &filter.id_prefix {
        Some(prefix) => {
            let (first, last) = id_prefix_range(prefix).ok_or_else(|| Error::InvalidJob {
                field: "id_prefix",
                reason: "hex digits of a job id (dashes allowed), at most 32".into(),
            })?;
            (Some(first), Some(last))
        }
        None => (None, None),
    };
    Ok(sqlx::query_as(include_str!("../../sql/list_jobs.sql"))
        .bind(filter.state)
        .bind(&filter.queue)
        .bind(&filter.job_type)
        .bind(filter.before)
        .bind(limit.max(0))
        .bind(first)
        .bind(last)
        .bind(&filter.error_code)
        .fetch_all(executor)
        .await?)
}

/// The first and last job id starting with `prefix` (hex digits, dashes
/// ignored, any case); `None` when it is not one.
pub fn id_prefix_range(prefix: &str) -> Option<(Uuid, Uuid)> {
    let digits: String = prefix.chars().filter(|c| *c != '-').collect();
    if digits.is_empty() || digits.len() > 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let first = format!("{digits:0<32}");
    let last = format!("{digits:f<32}");
    Some((Uuid::parse_str(&first).ok()?, Uuid::parse_str(&last).ok()?))
}

/// Every queue (declared, or holding jobs): dispatch, pause, depth by state
/// and the age of its oldest runnable job.
pub async fn queue_overview<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<QueueOverview>> {
    Ok(sqlx::query_as(include_str!("../../sql/queue_overview.sql"))
        .fetch_all(executor)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::id_prefix_range;

    #[test]
    fn an_id_prefix_covers_exactly_the_ids_that_start_with_it() {
        let (first, last) = id_prefix_range("01a2-30").unwrap();
        assert_eq!(first.to_string(), "01a23000-0000-0000-0000-000000000000");
        assert_eq!(last.to_string(), "01a230ff-ffff-ffff-ffff-ffffffffffff");
        let whole = "01a2304a-cb8c-76c2-b2cf-a4612585c316";
        assert_eq!(
            id_prefix_range(whole).unwrap(),
            (whole.parse().unwrap(), whole.parse().unwrap())
        );
        for bad in ["", "-", "xyz", "01a2'; --", &"a".repeat(33)] {
            assert_eq!(id_prefix_range(bad), None, "{bad:?}");
        }
    }
}
