//! The database collector: one process per database turns what the tables
//! hold (depth by state, the oldest runnable job, expired leases, dead
//! letters, the outbox, bloat, schedule delays) into gauges. Elected by an
//! advisory lock held on a connection of its own, so N processes run one
//! set of queries and export one copy; if the leader dies its connection
//! closes, the lock goes with it, and another process takes over at its
//! next tick.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jobwire_core::{QueueOverview, store};
use jobwire_loop::{InvalidSetting, sleep};
use metrics::gauge;
use sqlx::{Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use super::GAUGE_IDLE;
use super::names::*;

/// The collector's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorConfig {
    /// How often the leader reads the database (and followers try to lead).
    pub interval: Duration,
    /// How many FAILED groups (type, error code) are exported as they are;
    /// the rest are summed under `_other`.
    pub failed_groups: i64,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            interval: Duration::from_secs(5),
            failed_groups: 20,
        }
    }
}

/// How long a tick may take before it is abandoned (a database gone
/// mid-query, a connect that never answers; shutdown never waits on one).
/// A gauge set at the start of one round and at the end of the next goes
/// unset for up to two rounds and the interval between them, which must
/// stay within [`GAUGE_IDLE`] (with a second to spare): otherwise every
/// database gauge would vanish between two slow rounds while the leader
/// still reported itself elected, and the alerts that wait on a gauge
/// (`for:`) would start over each time.
fn tick_limit(interval: Duration) -> Duration {
    (GAUGE_IDLE.saturating_sub(interval) / 2).saturating_sub(Duration::from_secs(1))
}

impl CollectorConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_nonzero("collector.interval", self.interval)?;
        // Gauges left unset for GAUGE_IDLE disappear: the leader must set
        // them well within it.
        if self.interval > GAUGE_IDLE / 3 {
            return Err(InvalidSetting::new(
                "collector.interval",
                format!(
                    "must be at most {:?}, got {:?}",
                    GAUGE_IDLE / 3,
                    self.interval
                ),
            ));
        }
        if !(1..=1000).contains(&self.failed_groups) {
            return Err(InvalidSetting::new(
                "collector.failed_groups",
                format!("must be between 1 and 1000, got {}", self.failed_groups),
            ));
        }
        Ok(())
    }
}

/// Collects the database gauges when elected; see the module docs.
pub struct DatabaseCollector {
    pool: PgPool,
    config: CollectorConfig,
}

impl DatabaseCollector {
    /// A collector for `pool`'s database; fails on a setting that cannot work.
    pub fn new(pool: PgPool, config: CollectorConfig) -> Result<Self, InvalidSetting> {
        config.validate()?;
        // A collector that wins the election must have somewhere to put
        // the gauges, or it would hold the lead while exporting nothing.
        // (If the application installed a recorder of its own, they go there.)
        if let Err(err) = super::Metrics::install() {
            tracing::debug!(error = %err, "database gauges go to the application's recorder");
        }
        Ok(DatabaseCollector { pool, config })
    }

    /// Try to lead every interval; while leading, collect every interval.
    /// Until `shutdown` (the lock is released with the connection).
    pub async fn run(self, shutdown: CancellationToken) {
        // The election's connection: never from the pool, whose connections
        // are shared and would carry the lock to other work.
        let mut session: Option<PgConnection> = None;
        let mut leading = false;
        let mut last_round = LastRound::default();
        let tick_limit = tick_limit(self.config.interval);
        loop {
            let ticked = tokio::select! {
                ticked = tokio::time::timeout(tick_limit, self.tick(&mut session, &mut leading, &mut last_round)) => ticked,
                _ = shutdown.cancelled() => break,
            };
            let failure = match ticked {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some(format!("no answer from the database within {tick_limit:?}")),
            };
            if let Some(error) = failure {
                if leading {
                    tracing::warn!(%error, "collecting database metrics failed; giving up the lead");
                } else {
                    tracing::debug!(%error, "metrics collector cannot reach the database");
                }
                // Closing the session releases the lock (if held).
                session = None;
                leading = false;
            }
            gauge!(COLLECTOR_LEADER).set(if leading { 1.0 } else { 0.0 });
            if sleep(self.config.interval, &shutdown).await.is_cancelled() {
                break;
            }
        }
        if let Some(session) = session {
            let _ = session.close().await;
        }
    }

    async fn tick(
        &self,
        session: &mut Option<PgConnection>,
        leading: &mut bool,
        last_round: &mut LastRound,
    ) -> Result<(), jobwire_core::Error> {
        let connection = match session {
            Some(connection) => connection,
            None => {
                let options = self.pool.connect_options();
                let mut connection = PgConnection::connect_with(&options)
                    .await
                    .map_err(jobwire_core::Error::from)?;
                store::keep_collector_session_alive(&mut connection).await?;
                session.insert(connection)
            }
        };
        if !*leading {
            *leading = store::try_lead_metrics_collector(connection).await?;
            if *leading {
                tracing::info!("this process now exports the database metrics");
            } else {
                return Ok(());
            }
        }
        let started = Instant::now();
        collect(connection, self.config.failed_groups, last_round).await?;
        gauge!(COLLECTOR_DURATION).set(started.elapsed().as_secs_f64());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        gauge!(COLLECTOR_LAST_SUCCESS).set(now.as_secs_f64());
        Ok(())
    }
}

/// The spellings of the job states, as the table stores them.
const STATES: [&str; 7] = [
    "QUEUED",
    "RUNNING",
    "RETRY_WAIT",
    "CANCEL_REQUESTED",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
];

/// The most queues exported one by one. Queue names come from whoever
/// enqueues, so beyond this the quietest ones are summed under `_other`:
/// a producer inventing names cannot mint series without bound.
const MAX_QUEUES: usize = 100;

/// `queues`, the busiest [`MAX_QUEUES`] as they are and the rest folded into
/// one `_other` row: depths summed; the oldest age of the queues that are
/// not paused (a paused queue's age grows on purpose); paused only if
/// every folded queue is. (Marked paused when any one was, it hid
/// JobwireQueueBehind for all of them.)
fn bounded_queues(mut queues: Vec<QueueOverview>) -> Vec<QueueOverview> {
    if queues.len() <= MAX_QUEUES {
        return queues;
    }
    let pending = |q: &QueueOverview| q.queued + q.running + q.retry_wait + q.cancel_requested;
    queues.sort_by(|a, b| {
        pending(b)
            .cmp(&pending(a))
            .then_with(|| a.queue.cmp(&b.queue))
    });
    let rest = queues.split_off(MAX_QUEUES);
    let mut other = QueueOverview {
        queue: "_other".into(),
        dispatch: "mixed".into(),
        ..QueueOverview::default()
    };
    other.paused = true;
    for queue in rest {
        other.paused &= queue.paused;
        other.queued += queue.queued;
        other.running += queue.running;
        other.retry_wait += queue.retry_wait;
        other.cancel_requested += queue.cancel_requested;
        other.succeeded += queue.succeeded;
        other.failed += queue.failed;
        other.cancelled += queue.cancelled;
        other.lease_expired += queue.lease_expired;
        if queue.paused {
            continue;
        }
        other.oldest_runnable_age_s =
            match (other.oldest_runnable_age_s, queue.oldest_runnable_age_s) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
    }
    queues.push(other);
    queues
}

/// The label sets of the gauges a round set that can stop existing: a
/// dead-letter group retried or archived, a schedule deleted, a queue
/// folded into `_other`. The next round sets those it no longer sees to 0
/// (and then leaves them, so they disappear after [`GAUGE_IDLE`]): a gauge
/// keeps its last value until set, and `jobwire_failed_jobs` went on
/// showing a replayed group's dead letters until the idle timeout.
#[derive(Default)]
struct LastRound {
    queues: HashSet<String>,
    /// Each group with when its gauge was last set.
    failed_groups: HashMap<(String, String), Instant>,
    schedules: HashSet<String>,
}

/// The dead-letter groups of the last round that are gone now, to be set to
/// 0. A group missing from a round that folded groups into `_other` may be
/// folded, not gone: set to 0, it would read 0 while it held dead letters,
/// and JobwireDeadLettersGrowing would take its whole count for new failures
/// when it came back into the top groups. So it is carried into this round's
/// groups, unset, for as long as its series lives ([`GAUGE_IDLE`] from when
/// it was last set); a round that lists every group meanwhile sets it to 0
/// if it is gone. Past that the series is gone anyway, and so is the group
/// from the carried ones (folding that goes on cannot pile them up).
fn failed_groups_gone(
    last_round: &HashMap<(String, String), Instant>,
    this_round: &mut HashMap<(String, String), Instant>,
    folded: bool,
    now: Instant,
) -> Vec<(String, String)> {
    let missing = last_round
        .iter()
        .filter(|(group, set)| {
            !this_round.contains_key(*group) && now.saturating_duration_since(**set) < GAUGE_IDLE
        })
        .map(|(group, set)| (group.clone(), *set))
        .collect::<Vec<_>>();
    if folded {
        this_round.extend(missing);
        Vec::new()
    } else {
        missing.into_iter().map(|(group, _)| group).collect()
    }
}

/// Read every gauge's source and set the gauges.
async fn collect(
    connection: &mut PgConnection,
    failed_groups: i64,
    last_round: &mut LastRound,
) -> Result<(), jobwire_core::Error> {
    let mut this_round = LastRound::default();
    for queue in bounded_queues(jobwire_core::queue_overview(&mut *connection).await?) {
        this_round.queues.insert(queue.queue.clone());
        let depths = [
            queue.queued,
            queue.running,
            queue.retry_wait,
            queue.cancel_requested,
            queue.succeeded,
            queue.failed,
            queue.cancelled,
        ];
        for (state, jobs) in STATES.into_iter().zip(depths) {
            gauge!(QUEUE_JOBS, "queue" => queue.queue.clone(), "state" => state).set(jobs as f64);
        }
        gauge!(QUEUE_OLDEST_RUNNABLE_AGE, "queue" => queue.queue.clone())
            .set(queue.oldest_runnable_age_s.unwrap_or(0.0).max(0.0));
        gauge!(QUEUE_PAUSED, "queue" => queue.queue.clone()).set(f64::from(u8::from(queue.paused)));
        gauge!(QUEUE_LEASE_EXPIRED, "queue" => queue.queue.clone()).set(queue.lease_expired as f64);
    }
    let mut folded = false;
    for group in store::failed_groups_top(&mut *connection, failed_groups).await? {
        folded |= group.job_type.is_none();
        let job_type = group.job_type.unwrap_or_else(|| "_other".into());
        // An empty label value reads as no label at all in Prometheus.
        let error_code = match group.error_code {
            None => "_other".to_owned(),
            Some(code) if code.is_empty() => "_none".to_owned(),
            Some(code) => code,
        };
        this_round
            .failed_groups
            .insert((job_type.clone(), error_code.clone()), Instant::now());
        gauge!(FAILED_JOBS, "job_type" => job_type, "error_code" => error_code)
            .set(group.jobs as f64);
    }
    let outbox = store::outbox_health(&mut *connection).await?;
    gauge!(OUTBOX_ROWS).set(outbox.waiting as f64);
    gauge!(OUTBOX_DUE_ROWS).set(outbox.due as f64);
    gauge!(OUTBOX_OLDEST_DUE_AGE).set(outbox.oldest_due_age_s.max(0.0));
    gauge!(OUTBOX_DEAD_ROWS).set(outbox.dead as f64);
    for table in store::table_health(&mut *connection).await? {
        let name = table.table_name;
        gauge!(TABLE_LIVE_TUPLES, "table" => name.clone()).set(table.live_tuples as f64);
        gauge!(TABLE_DEAD_TUPLES, "table" => name.clone()).set(table.dead_tuples as f64);
        gauge!(TABLE_LAST_AUTOVACUUM, "table" => name).set(table.last_autovacuum_s.unwrap_or(0.0));
    }
    for schedule in store::schedule_delays(&mut *connection).await? {
        this_round.schedules.insert(schedule.name.clone());
        gauge!(SCHEDULE_DELAY, "schedule" => schedule.name).set(schedule.delay_s);
    }
    for queue in last_round.queues.difference(&this_round.queues) {
        for state in STATES {
            gauge!(QUEUE_JOBS, "queue" => queue.clone(), "state" => state).set(0.0);
        }
        gauge!(QUEUE_OLDEST_RUNNABLE_AGE, "queue" => queue.clone()).set(0.0);
        gauge!(QUEUE_PAUSED, "queue" => queue.clone()).set(0.0);
        gauge!(QUEUE_LEASE_EXPIRED, "queue" => queue.clone()).set(0.0);
    }
    for (job_type, error_code) in failed_groups_gone(
        &last_round.failed_groups,
        &mut this_round.failed_groups,
        folded,
        Instant::now(),
    ) {
        gauge!(FAILED_JOBS, "job_type" => job_type, "error_code" => error_code).set(0.0);
    }
    for schedule in last_round.schedules.difference(&this_round.schedules) {
        gauge!(SCHEDULE_DELAY, "schedule" => schedule.clone()).set(0.0);
    }
    *last_round = this_round;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_at_its_time_limit_still_sets_the_gauges_before_they_vanish() {
        for millis in [1, 1_000, 5_000, 10_000] {
            let interval = Duration::from_millis(millis);
            let config = CollectorConfig {
                interval,
                ..CollectorConfig::default()
            };
            assert!(config.validate().is_ok(), "{interval:?}");
            assert!(
                tick_limit(interval) * 2 + interval < GAUGE_IDLE,
                "{interval:?}: a gauge set early in one slow round and late in the next idles out"
            );
            assert!(tick_limit(interval) >= Duration::from_secs(9));
        }
    }

    fn queue(name: String, queued: i64, age: Option<f64>) -> QueueOverview {
        QueueOverview {
            queue: name,
            dispatch: "postgres".into(),
            queued,
            succeeded: 1,
            oldest_runnable_age_s: age,
            ..QueueOverview::default()
        }
    }

    #[test]
    fn queues_beyond_the_cap_are_summed_under_other() {
        let few: Vec<_> = (0..3).map(|i| queue(format!("q{i}"), i, None)).collect();
        assert_eq!(bounded_queues(few.clone()), few);

        let many: Vec<_> = (0..MAX_QUEUES as i64 + 5)
            .map(|i| queue(format!("q{i:03}"), i, Some(i as f64)))
            .collect();
        let bounded = bounded_queues(many);
        assert_eq!(bounded.len(), MAX_QUEUES + 1);
        // The busiest are kept as they are; the five quietest are folded.
        assert_eq!(bounded[0].queue, format!("q{:03}", MAX_QUEUES + 4));
        let other = bounded.last().unwrap();
        assert_eq!(other.queue, "_other");
        assert_eq!(other.queued, (0..5).sum::<i64>());
        assert_eq!(other.succeeded, 5);
        assert_eq!(other.oldest_runnable_age_s, Some(4.0));
        assert!(!other.paused);
    }

    #[test]
    fn a_paused_queue_among_the_folded_hides_no_other_queues_age() {
        let mut many: Vec<_> = (0..MAX_QUEUES as i64 + 3)
            .map(|i| queue(format!("q{i:03}"), i + 10, Some(1.0)))
            .collect();
        // Two of the quietest: one paused with a very old job, one late.
        many[0] = QueueOverview {
            paused: true,
            ..queue("paused".into(), 0, Some(9_999.0))
        };
        many[1] = queue("late".into(), 1, Some(600.0));
        let other = bounded_queues(many).pop().unwrap();
        assert_eq!(other.queue, "_other");
        assert!(!other.paused, "not every folded queue is paused");
        assert_eq!(other.oldest_runnable_age_s, Some(600.0));

        let all_paused: Vec<_> = (0..MAX_QUEUES as i64 + 2)
            .map(|i| QueueOverview {
                paused: i < 2,
                ..queue(format!("q{i:03}"), i, Some(5.0))
            })
            .collect();
        let other = bounded_queues(all_paused).pop().unwrap();
        assert!(other.paused, "every folded queue is paused");
    }

    fn groups(names: &[&str], set: Instant) -> HashMap<(String, String), Instant> {
        names
            .iter()
            .map(|name| (((*name).to_owned(), "E".to_owned()), set))
            .collect()
    }

    fn sorted(mut groups: Vec<(String, String)>) -> Vec<String> {
        groups.sort();
        groups.into_iter().map(|(job_type, _)| job_type).collect()
    }

    #[test]
    fn a_folded_dead_letter_group_keeps_its_count_until_a_full_round_finds_it_gone() {
        let start = Instant::now();
        let later = |seconds: u64| start + Duration::from_secs(seconds);
        // Every group listed: one retried since is gone, and reads 0.
        let mut this = groups(&["a"], later(10));
        let gone = failed_groups_gone(&groups(&["a", "b"], start), &mut this, false, later(10));
        assert_eq!(sorted(gone), ["b"]);

        // A round that folds: b and c may be in `_other`, so neither is set
        // to 0 now; both are carried, with when they were last set.
        let mut folding = groups(&["a", "_other"], later(10));
        let last = groups(&["a", "b", "c"], start);
        assert!(failed_groups_gone(&last, &mut folding, true, later(10)).is_empty());
        assert_eq!(folding.len(), 4);
        assert_eq!(folding[&("b".to_owned(), "E".to_owned())], start);

        // Folding goes on: still nothing set to 0, nothing forgotten.
        let mut still = groups(&["a", "_other"], later(20));
        assert!(failed_groups_gone(&folding, &mut still, true, later(20)).is_empty());
        assert_eq!(still.len(), 4);

        // The next round lists every group: c is back, b and `_other` are gone.
        let mut full = groups(&["a", "c"], later(25));
        let gone = failed_groups_gone(&still, &mut full, false, later(25));
        assert_eq!(sorted(gone), ["_other", "b"]);
        assert_eq!(full.len(), 2);
    }

    #[test]
    fn a_carried_group_is_dropped_once_its_series_has_idled_out() {
        let start = Instant::now();
        let idle = start + GAUGE_IDLE;
        let mut folding = groups(&["a", "_other"], idle);
        let last = groups(&["b"], start);
        assert!(failed_groups_gone(&last, &mut folding, true, idle).is_empty());
        assert_eq!(folding.len(), 2, "b's series has idled out: not carried");
        let mut full = groups(&["a"], idle);
        assert!(
            failed_groups_gone(&last, &mut full, false, idle).is_empty(),
            "not set to 0 either: that would bring its series back"
        );
    }
}
