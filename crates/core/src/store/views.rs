//! Operator views over many jobs: a filtered, paged listing and the queues.

use sqlx::{PgExecutor, PgPool};

use uuid::Uuid;

use crate::{Error, JobFilter, JobStatus, QueueOverview, Result};

/// Ids one page of a filtered listing reads at most, per table. A filter
/// that matches few jobs (or none) would otherwise read the whole table for
/// one page; bounded, a page costs about the same whatever the filter, and
/// says where it stopped so the next one reads on.
pub const LIST_SCAN_ROWS: i64 = 100_000;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<JobStatus>,
    /// Where the next page starts (pass as [`JobFilter::before`]); `None`
    /// on the last page. A page of a rare filter may hold fewer jobs than
    /// asked for, even none, and still have a next page: it stopped after
    /// reading [`LIST_SCAN_ROWS`] ids of a table.
    pub next_before: Option<Uuid>,
}

/// Up to `limit` jobs matching `filter`, newest first (hot table and history
/// together). For the next page, call again with `filter.before` set to the
/// page's `next_before`. With a state, queue, type or error-code filter a
/// page reads at most [`LIST_SCAN_ROWS`] ids of each table: it finds where
/// to stop, then reads the page, first in a window of `20 × limit` ids
/// (at least 1,000), and only when that window holds too few matches in the
/// whole share (up to four statements).
pub async fn list_jobs(pool: &PgPool, filter: &JobFilter, limit: i64) -> Result<JobPage> {
    let limit = limit.max(0);
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
    let filtered = filter.state.is_some()
        || filter.queue.is_some()
        || filter.job_type.is_some()
        || filter.error_code.is_some()
        || filter.tenant.is_some();
    if !filtered {
        // Every row matches: the page stops after `limit` rows by itself.
        let jobs = page_between(pool, filter, limit, first, last).await?;
        let next_before = full_page_end(&jobs, limit);
        return Ok(JobPage { jobs, next_before });
    }
    // A small window first (a common filter fills its page there), then
    // the whole share: a rare filter pays for the larger read, a common
    // one does not.
    let first_window = limit.saturating_mul(20).clamp(1_000, LIST_SCAN_ROWS);
    for window in [first_window, LIST_SCAN_ROWS] {
        let floor: Option<Uuid> = sqlx::query_scalar(include_str!("../../sql/list_jobs_floor.sql"))
            .bind(filter.before)
            .bind(first)
            .bind(last)
            .bind(window)
            .fetch_one(pool)
            .await?;
        // The floor lies inside the id range, so it is the page's lower end.
        let bounded_first = floor.or(first);
        let jobs = page_between(pool, filter, limit, bounded_first, last).await?;
        let next_before = full_page_end(&jobs, limit);
        if next_before.is_some() || floor.is_none() || window == LIST_SCAN_ROWS {
            return Ok(JobPage {
                next_before: next_before.or(floor),
                jobs,
            });
        }
    }
    unreachable!("the last window always returns")
}

/// The jobs matching `filter` with ids from `first` to `last` (either end
/// open), below `filter.before`, newest first, at most `limit`.
async fn page_between(
    pool: &PgPool,
    filter: &JobFilter,
    limit: i64,
    first: Option<Uuid>,
    last: Option<Uuid>,
) -> Result<Vec<JobStatus>> {
    Ok(sqlx::query_as(include_str!("../../sql/list_jobs.sql"))
        .bind(filter.state)
        .bind(&filter.queue)
        .bind(&filter.job_type)
        .bind(filter.before)
        .bind(limit)
        .bind(first)
        .bind(last)
        .bind(&filter.error_code)
        .bind(&filter.tenant)
        .fetch_all(pool)
        .await?)
}

/// Where the next page starts when this one came back full.
fn full_page_end(jobs: &[JobStatus], limit: i64) -> Option<Uuid> {
    (limit > 0 && jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|job| job.job_id))
        .flatten()
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
