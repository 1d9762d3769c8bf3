//! What a run measures: throughput, database cost, latency and a path's report.

use serde::Serialize;

use crate::quantile::percentile;
use crate::{CommitRate, NoisyTenant, OutboxLag, RelayRun};

/// PostgreSQL's own counters before and after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DatabaseCost {
    /// Write transactions (transaction ids assigned) per job: the commits
    /// that each cost a WAL flush. Read-only transactions are not counted.
    pub commits_per_job: f64,
    /// WAL bytes per job.
    pub wal_bytes_per_job: f64,
    /// Rows inserted + updated + deleted per job.
    pub rows_written_per_job: f64,
}

/// One measured run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// Jobs in the run.
    pub jobs: usize,
    /// Wall time from start to the last job SUCCEEDED.
    pub seconds: f64,
    /// Jobs per second.
    pub jobs_per_second: f64,
    /// Database cost of the run.
    pub cost: DatabaseCost,
    /// Jobs that did not end SUCCEEDED after exactly one run (must be 0).
    pub lost_or_repeated: usize,
}

/// Latency percentiles of an open-loop stream, in milliseconds, measured
/// from when each job was **due to arrive** (its tick in the stream), not
/// from its `created_at`: a producer that falls behind the rate delays the
/// job as surely as a slow worker does, and counting from the insert would
/// hide that backlog in the producers. "Start" is the handler's own start
/// (not the claim), "finish" the job's `finished_at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Jobs measured.
    pub jobs: i64,
    /// Arrival to handler start, median.
    pub start_p50_ms: f64,
    /// Arrival to handler start, 95th percentile.
    pub start_p95_ms: f64,
    /// Arrival to handler start, 99th percentile.
    pub start_p99_ms: f64,
    /// Arrival to handler start, worst.
    pub start_max_ms: f64,
    /// Arrival to finish, median.
    pub finish_p50_ms: f64,
    /// Arrival to finish, 95th percentile.
    pub finish_p95_ms: f64,
    /// Arrival to finish, 99th percentile.
    pub finish_p99_ms: f64,
    /// Arrival to finish, worst.
    pub finish_max_ms: f64,
    /// Urgent-under-burst only: bulk jobs queued before the urgent stream.
    pub bulk_jobs: i64,
    /// Urgent-under-burst only: bulk jobs still unfinished when the last
    /// urgent job finished (0 would mean the backlog was gone too soon).
    pub bulk_left_at_end: i64,
    /// Jobs of the run (the stream's, and the bulk backlog's) that did not
    /// end SUCCEEDED after one attempt and exactly one handler run.
    pub lost_or_repeated: usize,
}

impl Latency {
    /// The percentiles of jobs' start and finish latencies (ms), one pair per job.
    pub(crate) fn of(mut starts: Vec<f64>, mut finishes: Vec<f64>) -> Latency {
        Latency {
            jobs: starts.len() as i64,
            start_p50_ms: percentile(&mut starts, 0.50),
            start_p95_ms: percentile(&mut starts, 0.95),
            start_p99_ms: percentile(&mut starts, 0.99),
            start_max_ms: percentile(&mut starts, 1.0),
            finish_p50_ms: percentile(&mut finishes, 0.50),
            finish_p95_ms: percentile(&mut finishes, 0.95),
            finish_p99_ms: percentile(&mut finishes, 0.99),
            finish_max_ms: percentile(&mut finishes, 1.0),
            ..Latency::default()
        }
    }
}

/// One stage of the urgent jobs' enqueue → handler start, in ms over the
/// jobs every stamp of the stage was seen for (see `urgent_stages`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageLatency {
    /// What the stage runs from and to (`enqueue -> relay publishes`, ...).
    pub stage: String,
    /// Jobs measured.
    pub jobs: usize,
    /// Median, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

/// Everything measured for one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathReport {
    /// The path.
    pub path: String,
    /// Drain of pre-enqueued jobs.
    pub drain: RunResult,
    /// Producers, one business transaction per job: the median of
    /// `end_to_end_runs` (by jobs/s).
    pub end_to_end: RunResult,
    /// Every single-job end-to-end run, in the order they ran.
    pub end_to_end_runs: Vec<RunResult>,
    /// The plain single-row commit rate with as many clients as producers,
    /// measured right before the single-job runs (`None` when skipped).
    pub commit_rate: Option<CommitRate>,
    /// Producers, `enqueue_batch` jobs per business transaction.
    pub end_to_end_batched: RunResult,
    /// Open-loop arrivals at a steady rate.
    pub steady_rate: Latency,
    /// The arrival rate of `steady_rate`, jobs/s.
    pub rate: u32,
    /// Urgent jobs on their own queue while a bulk backlog drains.
    pub urgent_under_burst: Latency,
    /// Where the urgent jobs' time went, stage by stage, ending at the
    /// handler's start: on a broker path enqueue → relay publishes →
    /// broker confirms → delivered → claimed → handler starts; on the
    /// PostgreSQL path enqueue → claimed → handler starts.
    pub urgent_stages: Vec<StageLatency>,
    /// The relay alone (broker paths).
    pub relay_alone: Option<RelayRun>,
    /// Outbox insert → delivery at a steady rate (broker paths).
    pub outbox_lag: Option<OutboxLag>,
    /// The noisy tenant, caps off then on (empty when not asked for).
    pub noisy_tenant: Vec<NoisyTenant>,
}

impl PathReport {
    /// Jobs lost or run more than once over every run that ran jobs (must be 0).
    pub fn lost_or_repeated(&self) -> usize {
        self.drain.lost_or_repeated
            + self
                .end_to_end_runs
                .iter()
                .map(|run| run.lost_or_repeated)
                .sum::<usize>()
            + self.end_to_end_batched.lost_or_repeated
            + self.steady_rate.lost_or_repeated
            + self.urgent_under_burst.lost_or_repeated
            + self
                .noisy_tenant
                .iter()
                .map(|run| usize::try_from(run.lost_or_repeated).unwrap_or(usize::MAX))
                .sum::<usize>()
    }
}
