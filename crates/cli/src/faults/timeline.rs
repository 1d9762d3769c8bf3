//! When the faults besides the kills happen, and running them in order.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sqlx::PgPool;
use tokio::sync::watch;

use super::FaultPath;
use super::disruptions;
use super::report::FaultRecord;
use crate::brokers::BrokerArgs;

/// How long the queues stay paused.
const PAUSE_FOR: Duration = Duration::from_secs(3);

/// Restart PostgreSQL and make sure it was this scenario's server that
/// restarted.
pub(crate) async fn restart_postgres(pool: &PgPool, services: &Path) -> Result<()> {
    let before = disruptions::postgres_started_at(pool).await?;
    disruptions::restart_service(services, "postgres").await?;
    let mut after = disruptions::postgres_started_at(pool).await;
    for _ in 0..20 {
        if after.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = disruptions::postgres_started_at(pool).await;
    }
    if after? == before {
        bail!(
            "the restart did not restart the PostgreSQL server this scenario uses (it started at {before} and still reports that time)"
        );
    }
    Ok(())
}

/// A fault besides the kills.
#[derive(Debug, Clone)]
pub(crate) enum Disruption {
    Restart(&'static str),
    PauseAndResume,
    Garbage,
}

/// When each fault happens, as a share of the fault window: spread out so
/// that each one meets jobs in flight and the system between two faults is
/// never quite at rest.
pub(crate) fn schedule(
    restarts: bool,
    paths: &[FaultPath],
    window: Duration,
) -> Vec<(Duration, Disruption)> {
    let mut plan = Vec::new();
    if restarts && paths.contains(&FaultPath::Rabbitmq) {
        plan.push((0.10, Disruption::Restart("rabbitmq")));
    }
    plan.push((0.20, Disruption::Garbage));
    if restarts && paths.contains(&FaultPath::Kafka) {
        plan.push((0.28, Disruption::Restart("kafka")));
    }
    // PostgreSQL while jobs are still being enqueued: the enqueuer must
    // ride it out too (it waits for this restart before its last jobs, in
    // case the faults before it run late).
    if restarts {
        plan.push((0.45, Disruption::Restart("postgres")));
    }
    plan.push((0.58, Disruption::PauseAndResume));
    if restarts && paths.contains(&FaultPath::Sqs) {
        plan.push((0.75, Disruption::Restart("sqs")));
    }
    plan.into_iter()
        .map(|(share, disruption)| (window.mul_f64(share), disruption))
        .collect()
}

/// What the faults besides the kills act on.
pub(crate) struct Disrupter {
    pub(crate) pool: PgPool,
    /// The script that restarts services.
    pub(crate) services: PathBuf,
    pub(crate) paths: Vec<FaultPath>,
    pub(crate) brokers: BrokerArgs,
    /// The run's id, in its topics.
    pub(crate) run: String,
    /// Told when PostgreSQL's restart begins: the enqueuer waits for it
    /// before its last jobs (see `load::enqueue_all`). Dropped with the
    /// disrupter, which tells the enqueuer not to wait if no restart came.
    pub(crate) restart_begun: watch::Sender<bool>,
}

impl Disrupter {
    /// Run the scheduled faults in order, each at its time (or as soon as
    /// the one before it is over). A fault that fails is recorded, not
    /// fatal: the report says it did not happen. Returns the records and
    /// how many garbage messages were sent.
    pub(crate) async fn run(
        self,
        plan: Vec<(Duration, Disruption)>,
        start: Instant,
    ) -> (Vec<FaultRecord>, usize) {
        let queues: Vec<String> = self.paths.iter().map(|path| path.queue()).collect();
        let mut records = Vec::new();
        let mut garbage = 0;
        for (at, disruption) in plan {
            tokio::time::sleep_until((start + at).into()).await;
            let began = start.elapsed();
            let (what, outcome) = match &disruption {
                Disruption::Restart("postgres") => {
                    self.restart_begun.send_replace(true);
                    (
                        "restart postgres".to_owned(),
                        restart_postgres(&self.pool, &self.services).await,
                    )
                }
                Disruption::Restart(service) => (
                    format!("restart {service}"),
                    disruptions::restart_service(&self.services, service).await,
                ),
                Disruption::PauseAndResume => (
                    format!(
                        "pause every queue for {} s, then resume",
                        PAUSE_FOR.as_secs()
                    ),
                    disruptions::pause_and_resume(&self.pool, &queues, PAUSE_FOR).await,
                ),
                Disruption::Garbage => (
                    "garbage on every wake-up channel".to_owned(),
                    disruptions::send_garbage(&self.pool, &self.paths, &self.brokers, &self.run)
                        .await
                        .map(|sent| garbage = sent),
                ),
            };
            records.push(FaultRecord {
                what,
                at_s: began.as_secs_f64(),
                took_s: (start.elapsed() - began).as_secs_f64(),
                error: outcome.err().map(|err| format!("{err:#}")),
            });
        }
        (records, garbage)
    }
}
