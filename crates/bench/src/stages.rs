//! Where the urgent jobs' time went: arrival → handler start split into
//! stages, from the stream's own ticks (when each job was due), the
//! database's timestamps (`created_at`, the claim's `heartbeat_at`), the
//! transport's stamps on a broker path ([`StageClock`]) and the handler's
//! own start.

use anyhow::Result;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::StageLatency;
use crate::harness::Runs;
use crate::quantile::percentile;
use crate::stage_clock::{StageClock, WakeUpStamps};
use crate::workloads::{Arrivals, millis};

/// Every instant known of one job, in the order the job passes them.
#[derive(Debug, Clone, Copy, Default)]
struct Instants {
    due: Option<DateTime<Utc>>,
    enqueued: Option<DateTime<Utc>>,
    committed: Option<DateTime<Utc>>,
    published: Option<DateTime<Utc>>,
    confirmed: Option<DateTime<Utc>>,
    delivered: Option<DateTime<Utc>>,
    claimed: Option<DateTime<Utc>>,
    started: Option<DateTime<Utc>>,
}

type Point = fn(&Instants) -> Option<DateTime<Utc>>;

/// The stages of a broker path, from one point to the next; the last row is
/// the whole, to set beside the sum of the parts.
#[rustfmt::skip]
const BROKER_STAGES: [(&str, Point, Point); 8] = [
    ("arrives -> enqueue",             |t| t.due,       |t| t.enqueued),
    ("enqueue -> committed",           |t| t.enqueued,  |t| t.committed),
    ("committed -> relay publishes",   |t| t.committed, |t| t.published),
    ("relay publishes -> confirmed",   |t| t.published, |t| t.confirmed),
    ("confirmed -> delivered",         |t| t.confirmed, |t| t.delivered),
    ("delivered -> claim starts",      |t| t.delivered, |t| t.claimed),
    ("claim starts -> handler starts", |t| t.claimed,   |t| t.started),
    ("enqueue -> handler starts",      |t| t.enqueued,  |t| t.started),
];

/// The PostgreSQL path's stages: no relay, no broker.
#[rustfmt::skip]
const POSTGRES_STAGES: [(&str, Point, Point); 5] = [
    ("arrives -> enqueue",             |t| t.due,       |t| t.enqueued),
    ("enqueue -> committed",           |t| t.enqueued,  |t| t.committed),
    ("committed -> claim starts",      |t| t.committed, |t| t.claimed),
    ("claim starts -> handler starts", |t| t.claimed,   |t| t.started),
    ("enqueue -> handler starts",      |t| t.enqueued,  |t| t.started),
];

/// The stages of `queue`'s finished jobs. `arrivals` has when each job was
/// due and when its producer saw its commit; `clock` is the broker path's
/// (none on the PostgreSQL path).
pub(crate) async fn stages(
    pool: &PgPool,
    queue: &str,
    arrivals: &Arrivals,
    runs: &Runs,
    clock: Option<&StageClock>,
) -> Result<Vec<StageLatency>> {
    let rows: Vec<(Uuid, DateTime<Utc>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT job_id, created_at, heartbeat_at FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED'",
    )
    .bind(queue)
    .fetch_all(pool)
    .await?;
    let starts = runs.first_starts();
    let wake_ups = clock.map(StageClock::stamps).unwrap_or_default();
    let jobs: Vec<Instants> = rows
        .into_iter()
        .map(|(job, enqueued, claimed)| {
            let WakeUpStamps {
                published,
                confirmed,
                delivered,
            } = wake_ups.get(&job).copied().unwrap_or_default();
            let arrival = arrivals.get(&job);
            Instants {
                due: arrival.map(|a| a.due),
                enqueued: Some(enqueued),
                committed: arrival.map(|a| a.committed),
                published,
                confirmed,
                delivered,
                claimed,
                started: starts.get(&job).copied(),
            }
        })
        .collect();
    let table: &[(&str, Point, Point)] = if clock.is_some() {
        &BROKER_STAGES
    } else {
        &POSTGRES_STAGES
    };
    Ok(measure(&jobs, table))
}

fn measure(jobs: &[Instants], table: &[(&str, Point, Point)]) -> Vec<StageLatency> {
    table
        .iter()
        .map(|(stage, from, to)| {
            let mut ms: Vec<f64> = jobs
                .iter()
                .filter_map(|job| Some(millis(from(job)?, to(job)?)))
                .collect();
            StageLatency {
                stage: (*stage).to_string(),
                jobs: ms.len(),
                p50_ms: percentile(&mut ms, 0.50),
                p95_ms: percentile(&mut ms, 0.95),
                p99_ms: percentile(&mut ms, 0.99),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn each_stage_runs_from_one_point_to_the_next_over_the_jobs_that_have_both() {
        let t0 = Utc::now();
        let at = |ms: i64| Some(t0 + Duration::milliseconds(ms));
        let whole = Instants {
            due: at(-2),
            enqueued: at(0),
            committed: at(1),
            published: at(2),
            confirmed: at(5),
            delivered: at(4),
            claimed: at(10),
            started: at(11),
        };
        // Claimed by the safety net: never delivered.
        let undelivered = Instants {
            delivered: None,
            claimed: at(30),
            started: at(31),
            ..whole
        };
        let stages = measure(&[whole, undelivered], &BROKER_STAGES);
        let got: Vec<(&str, usize, f64)> = stages
            .iter()
            .map(|s| (s.stage.as_str(), s.jobs, s.p50_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("arrives -> enqueue", 2, 2.0),
                ("enqueue -> committed", 2, 1.0),
                ("committed -> relay publishes", 2, 1.0),
                ("relay publishes -> confirmed", 2, 3.0),
                // Delivered before the confirm reached the relay.
                ("confirmed -> delivered", 1, -1.0),
                ("delivered -> claim starts", 1, 6.0),
                ("claim starts -> handler starts", 2, 1.0),
                ("enqueue -> handler starts", 2, 11.0),
            ]
        );
        assert_eq!(stages[7].p95_ms, 31.0);
    }
}
