//! Schedules: creating, listing, pausing and removing them, and firing the
//! due ones (the scheduler's one transaction).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::{PgExecutor, PgPool};

use crate::schedule::{CronSchedule, jitter_for, occurrence_key};
use crate::{Enqueuer, Error, NewJob, Result};

/// An occurrence fired this long after its nominal instant or less is on
/// time; an older one was missed (no scheduler ran then) and its
/// schedule's [`MissedRuns`] policy decides.
pub const ON_TIME: TimeDelta = TimeDelta::seconds(60);
/// The longest jitter: a day.
pub const MAX_JITTER_SECONDS: u32 = 86_400;
/// The most missed occurrences `MissedRuns::All` enqueues at once.
pub const MAX_CATCH_UP: u32 = 10_000;
/// How far a scheduler walks a schedule's missed occurrences before it stops
/// counting (an every-second schedule down for longer than this many seconds
/// still fires; its `missed` count is capped).
const MAX_OCCURRENCES_WALKED: usize = 1_000_000;

/// Check a schedule's name: 1 to 128 letters, digits and `. _ : -`,
/// starting with a letter or digit. No schedule can have another name.
pub fn validate_schedule_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if valid {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        argument: "name",
        reason: format!(
            "{name:?}: 1 to 128 letters, digits and . _ : -, starting with a letter or digit"
        ),
    })
}

/// What happens to occurrences that came due while no scheduler ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissedRuns {
    /// No job for a missed occurrence.
    Skip,
    /// One job, for the most recent missed occurrence.
    #[default]
    Latest,
    /// One job per missed occurrence (the most recent `max_catch_up`), oldest first.
    All,
}

impl MissedRuns {
    /// The spelling stored in `job_schedules.missed`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedRuns::Skip => "skip",
            MissedRuns::Latest => "latest",
            MissedRuns::All => "all",
        }
    }
}

impl fmt::Display for MissedRuns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for MissedRuns {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "skip" => Ok(MissedRuns::Skip),
            "latest" => Ok(MissedRuns::Latest),
            "all" => Ok(MissedRuns::All),
            other => Err(Error::InvalidArgument {
                argument: "missed",
                reason: format!("{other:?} is not one of skip, latest, all"),
            }),
        }
    }
}

/// A schedule to create or replace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSpec {
    /// Its name: letters, digits and `. _ : -`, up to 128.
    pub name: String,
    /// The cron expression (5 fields, 6 with seconds, or `@daily` & co).
    pub cron: String,
    /// IANA time zone name, or `UTC`.
    pub timezone: String,
    /// The job every occurrence enqueues (`schedule_name` and
    /// `scheduled_for` are set on it; its dedup key is the occurrence's).
    pub job: NewJob,
    /// Spread each occurrence's start over `[0, jitter_seconds)`.
    pub jitter_seconds: u32,
    /// Missed-run policy.
    pub missed: MissedRuns,
    /// Most missed occurrences [`MissedRuns::All`] enqueues at once.
    pub max_catch_up: u32,
}

impl ScheduleSpec {
    /// A schedule called `name` that enqueues `job` on `cron` in `timezone`
    /// (no jitter, missed runs: latest, catch-up cap 100).
    pub fn new(
        name: impl Into<String>,
        cron: impl Into<String>,
        timezone: impl Into<String>,
        job: NewJob,
    ) -> Self {
        ScheduleSpec {
            name: name.into(),
            cron: cron.into(),
            timezone: timezone.into(),
            job,
            jitter_seconds: 0,
            missed: MissedRuns::Latest,
            max_catch_up: 100,
        }
    }

    /// Check everything before anything is written; returns the parsed cron.
    pub fn validate(&self) -> Result<CronSchedule> {
        validate_schedule_name(&self.name)?;
        let schedule = CronSchedule::parse(&self.cron, &self.timezone)?;
        if self.jitter_seconds > MAX_JITTER_SECONDS {
            return Err(Error::InvalidArgument {
                argument: "jitter_seconds",
                reason: format!(
                    "at most {MAX_JITTER_SECONDS} (a day), got {}",
                    self.jitter_seconds
                ),
            });
        }
        if !(1..=MAX_CATCH_UP).contains(&self.max_catch_up) {
            return Err(Error::InvalidArgument {
                argument: "max_catch_up",
                reason: format!("1 to {MAX_CATCH_UP}, got {}", self.max_catch_up),
            });
        }
        if self.job.run_at.is_some() || self.job.delay.is_some() || self.job.dedup_key.is_some() {
            return Err(Error::InvalidArgument {
                argument: "job",
                reason: "a schedule's job takes its run time and dedup key from each occurrence"
                    .into(),
            });
        }
        Enqueuer.validate(&self.job)?;
        Ok(schedule)
    }
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Schedule {
    /// Its name.
    pub name: String,
    /// The cron expression.
    pub cron: String,
    /// The time zone.
    pub timezone: String,
    /// The job type each occurrence enqueues.
    pub job_type: String,
    /// Its queue.
    pub queue: String,
    /// Its payload.
    pub payload: Value,
    /// Its priority.
    pub priority: i16,
    /// Its attempt budget.
    pub max_attempts: i32,
    /// Jitter window in seconds.
    pub jitter_seconds: i32,
    /// Missed-run policy (`skip`, `latest`, `all`).
    pub missed: String,
    /// Catch-up cap of the `all` policy.
    pub max_catch_up: i32,
    /// Whether it is paused.
    pub paused: bool,
    /// The next nominal instant to fire (none: it never fires again).
    pub next_run_at: Option<DateTime<Utc>>,
    /// The nominal instant of the last occurrence fired.
    pub last_fired_for: Option<DateTime<Utc>>,
    /// When that occurrence was fired.
    pub last_fired_at: Option<DateTime<Utc>>,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Last changed at.
    pub updated_at: DateTime<Utc>,
    /// The tenant its jobs work for (the queue's running cap for that
    /// tenant applies; enqueue limits do not refuse an occurrence), or none.
    pub tenant: Option<String>,
}

impl Schedule {
    /// Its next `n` nominal instants from `after` (for display).
    pub fn next_occurrences(&self, after: DateTime<Utc>, n: usize) -> Result<Vec<DateTime<Utc>>> {
        let schedule = CronSchedule::parse(&self.cron, &self.timezone)?;
        Ok(schedule.occurrences_after(after).take(n).collect())
    }

    /// Why its cron or zone cannot be evaluated (stored by hand, or by a
    /// version that accepted them), paused or not; `None` when they can.
    /// Such a schedule never fires: the scheduler pauses it when it comes
    /// due.
    pub fn problem(&self) -> Option<String> {
        CronSchedule::parse(&self.cron, &self.timezone)
            .err()
            .map(|err| format!("cannot be evaluated: {err}"))
    }

    /// The next `n` times it will fire, starting with `next_run_at`; none
    /// while it is paused or when it never fires again.
    pub fn upcoming(&self, n: usize) -> Result<Vec<DateTime<Utc>>> {
        match self.next_run_at {
            Some(next) if !self.paused => self.next_occurrences(next - TimeDelta::seconds(1), n),
            _ => Ok(Vec::new()),
        }
    }
}

/// Create or replace a schedule; returns whether it is new. Everything is
/// validated first (cron, zone, jitter, the job, its payload against the
/// database's limit); nothing is written on an error. A replacement with
/// the same cron and zone keeps its next occurrence; a new cron or zone
/// restarts at the next occurrence after now.
pub async fn put_schedule(pool: &PgPool, spec: &ScheduleSpec) -> Result<bool> {
    let schedule = spec.validate()?;
    // The schedule's row is locked before the clock is read: a scheduler
    // firing an occurrence meanwhile is waited for, so a new cron restarts
    // after it. With the clock read first, an occurrence due between that
    // read and the write was fired under the old definition and stored as
    // due again under the new one (twice, with a new job type).
    let mut tx = pool.begin().await?;
    sqlx::query(include_str!("../../sql/lock_schedule.sql"))
        .bind(&spec.name)
        .execute(&mut *tx)
        .await?;
    let (size, limit, now): (i32, i32, DateTime<Utc>) =
        sqlx::query_as(include_str!("../../sql/schedule_put_check.sql"))
            .bind(&spec.job.payload)
            .fetch_one(&mut *tx)
            .await?;
    let (size, limit) = (
        usize::try_from(size).unwrap_or(usize::MAX),
        usize::try_from(limit).unwrap_or(0),
    );
    if size > limit {
        return Err(Error::PayloadTooLarge { size, limit });
    }
    // Stored without a next run, it would never fire, and say nothing.
    let Some(next_run_at) = schedule.next_after(now) else {
        return Err(no_occurrence_after(&schedule, now));
    };
    let created: bool = sqlx::query_scalar(include_str!("../../sql/upsert_schedule.sql"))
        .bind(&spec.name)
        .bind(schedule.expression())
        .bind(schedule.zone().name())
        .bind(&spec.job.job_type)
        .bind(&spec.job.queue)
        .bind(&spec.job.payload)
        .bind(spec.job.priority)
        .bind(spec.job.max_attempts)
        .bind(spec.jitter_seconds as i32)
        .bind(spec.missed.as_str())
        .bind(next_run_at)
        .bind(spec.max_catch_up as i32)
        .bind(&spec.job.tenant)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(created)
}

/// Why a schedule cannot be stored or resumed: a cron that fired once may
/// find nothing from `now` on, one whose next matches all fall in
/// daylight-saving gaps that its elapsed-time rule skips (the search gives
/// up after CronSchedule's limit).
fn no_occurrence_after(schedule: &CronSchedule, now: DateTime<Utc>) -> Error {
    Error::InvalidArgument {
        argument: "cron",
        reason: format!(
            "{:?} has no occurrence after {} in {}: its next matches all fall in \
             daylight-saving gaps, which a cron whose hour field is `*` or a step skips",
            schedule.expression(),
            now.format("%Y-%m-%dT%H:%M:%SZ"),
            schedule.zone().name()
        ),
    }
}

/// Every schedule, by name.
pub async fn list_schedules<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<Schedule>> {
    Ok(sqlx::query_as(include_str!("../../sql/list_schedules.sql"))
        .bind(None::<String>)
        .fetch_all(executor)
        .await?)
}

/// One schedule, if it exists.
pub async fn get_schedule<'c, E: PgExecutor<'c>>(
    executor: E,
    name: &str,
) -> Result<Option<Schedule>> {
    Ok(sqlx::query_as(include_str!("../../sql/list_schedules.sql"))
        .bind(name)
        .fetch_optional(executor)
        .await?)
}

/// Remove a schedule (its jobs stay). Returns false when there was none.
pub async fn delete_schedule<'c, E: PgExecutor<'c>>(executor: E, name: &str) -> Result<bool> {
    let deleted: Option<String> = sqlx::query_scalar(include_str!("../../sql/delete_schedule.sql"))
        .bind(name)
        .fetch_optional(executor)
        .await?;
    Ok(deleted.is_some())
}

/// Pause or resume a schedule. Resuming restarts it at its next occurrence
/// after now (what fell in the pause does not count as missed), and is
/// refused ([`Error::InvalidArgument`] on `cron`) when there is none.
/// Returns false when there is no such schedule.
pub async fn set_schedule_paused(pool: &PgPool, name: &str, paused: bool) -> Result<bool> {
    // The next occurrence is computed from the cron the row holds under
    // this transaction's lock: read before it, a put committing meanwhile
    // had its new cron stored beside a time of the old one (a yearly
    // schedule fired the next minute).
    let mut tx = pool.begin().await?;
    let locked: Option<(String, String, bool)> =
        sqlx::query_as(include_str!("../../sql/lock_schedule.sql"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
    let next = match locked {
        None => return Ok(false),
        // Resuming one that runs changes nothing (set_schedule_paused.sql),
        // whatever its cron.
        Some((cron, timezone, true)) if !paused => {
            let now: DateTime<Utc> = sqlx::query_scalar(include_str!("../../sql/db_clock_now.sql"))
                .fetch_one(&mut *tx)
                .await?;
            let schedule = CronSchedule::parse(&cron, &timezone)?;
            match schedule.next_after(now) {
                Some(next) => Some(next),
                None => return Err(no_occurrence_after(&schedule, now)),
            }
        }
        Some(_) => None,
    };
    let changed: Option<String> =
        sqlx::query_scalar(include_str!("../../sql/set_schedule_paused.sql"))
            .bind(name)
            .bind(paused)
            .bind(next)
            .fetch_optional(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(changed.is_some())
}

#[derive(sqlx::FromRow)]
struct DueSchedule {
    name: String,
    cron: String,
    timezone: String,
    job_type: String,
    queue: String,
    payload: Value,
    priority: i16,
    max_attempts: i32,
    jitter_seconds: i32,
    missed: String,
    max_catch_up: i32,
    next_run_at: DateTime<Utc>,
    tenant: Option<String>,
    db_now: DateTime<Utc>,
}

/// What one round of firing did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FireReport {
    /// Due schedules handled.
    pub schedules: usize,
    /// Jobs enqueued.
    pub enqueued: usize,
    /// Occurrences whose job already existed (another scheduler, or an
    /// earlier life of this one, fired them): nothing written.
    pub already_fired: usize,
    /// Occurrences not enqueued by their schedule's missed-run policy.
    pub skipped: usize,
}

/// The occurrences of one due schedule to enqueue now, and what is left
/// out: the policy applied to every occurrence from `first` to `now`.
fn occurrences_to_fire(
    schedule: &CronSchedule,
    first: DateTime<Utc>,
    now: DateTime<Utc>,
    missed: MissedRuns,
    max_catch_up: usize,
) -> (Vec<DateTime<Utc>>, usize) {
    let mut due = vec![first];
    let mut last = first;
    while due.len() < MAX_OCCURRENCES_WALKED {
        match schedule.next_after(last) {
            Some(next) if next <= now => {
                due.push(next);
                last = next;
            }
            _ => break,
        }
    }
    let on_time = |at: DateTime<Utc>| now - at <= ON_TIME;
    let total = due.len();
    let fire: Vec<DateTime<Utc>> = match missed {
        MissedRuns::Skip => due.into_iter().filter(|at| on_time(*at)).collect(),
        MissedRuns::Latest => vec![*due.last().expect("at least the first")],
        MissedRuns::All => {
            let keep = total.min(max_catch_up.max(1));
            due.split_off(total - keep)
        }
    };
    let left_out = total - fire.len();
    (fire, left_out)
}

/// The jobs of a batch of occurrences, as columns to bind.
#[derive(Default)]
struct OccurrenceColumns {
    queues: Vec<String>,
    job_types: Vec<String>,
    priorities: Vec<i16>,
    payloads: Vec<Value>,
    max_attempts: Vec<i32>,
    run_afters: Vec<DateTime<Utc>>,
    dedup_keys: Vec<String>,
    schedule_names: Vec<String>,
    nominals: Vec<DateTime<Utc>>,
    /// Merged into the payload where it fits (`_schedule`), or `None`.
    notes: Vec<Option<Value>>,
    tenants: Vec<Option<String>>,
}

/// Fire up to `batch` due schedules in one transaction of three statements:
/// take them FOR UPDATE SKIP LOCKED, enqueue all their occurrences (each
/// under its own dedup key, so a second firing writes nothing), advance
/// each `next_run_at`; then commit. Any number of schedulers may call this
/// at once.
pub async fn fire_due_schedules(pool: &PgPool, batch: i64) -> Result<FireReport> {
    let mut tx = pool.begin().await?;
    let due: Vec<DueSchedule> = sqlx::query_as(include_str!("../../sql/due_schedules.sql"))
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?;
    let mut report = FireReport {
        schedules: due.len(),
        ..FireReport::default()
    };
    let mut jobs = OccurrenceColumns::default();
    let (mut names, mut next_runs, mut fired_for) = (Vec::new(), Vec::new(), Vec::new());
    for row in due {
        let cron = match CronSchedule::parse(&row.cron, &row.timezone) {
            Ok(cron) => cron,
            Err(err) => {
                // Stored by hand or by an older version: stop it, loudly.
                tracing::error!(schedule = %row.name, error = %err, "schedule cannot be evaluated; pausing it");
                sqlx::query(include_str!("../../sql/set_schedule_paused.sql"))
                    .bind(&row.name)
                    .bind(true)
                    .bind(None::<DateTime<Utc>>)
                    .execute(&mut *tx)
                    .await?;
                continue;
            }
        };
        let missed = row.missed.parse().unwrap_or_default();
        let (fire, left_out) = occurrences_to_fire(
            &cron,
            row.next_run_at,
            row.db_now,
            missed,
            usize::try_from(row.max_catch_up).unwrap_or(1),
        );
        report.skipped += left_out;
        let payload = row.payload;
        // Say how many runs this one stands for, where the handler looks
        // (merged by the statement, where the payload has room for it).
        let note = (missed == MissedRuns::Latest && left_out > 0 && payload.is_object())
            .then(|| serde_json::json!({ "_schedule": { "missedOccurrences": left_out } }));
        let jitter = u32::try_from(row.jitter_seconds).unwrap_or(0);
        for nominal in &fire {
            jobs.queues.push(row.queue.clone());
            jobs.job_types.push(row.job_type.clone());
            jobs.priorities.push(row.priority);
            jobs.payloads.push(payload.clone());
            jobs.max_attempts.push(row.max_attempts);
            jobs.run_afters
                .push(*nominal + jitter_for(&row.name, *nominal, jitter));
            jobs.dedup_keys.push(occurrence_key(&row.name, *nominal));
            jobs.schedule_names.push(row.name.clone());
            jobs.nominals.push(*nominal);
            jobs.notes.push(note.clone());
            jobs.tenants.push(row.tenant.clone());
        }
        let next = cron.next_after(row.db_now);
        if next.is_none() {
            // Stored as it is (no next run): nothing more to fire. Said,
            // because nothing else would say it.
            tracing::error!(schedule = %row.name, error = %no_occurrence_after(&cron, row.db_now),
                "schedule fires no more until it is replaced");
        }
        next_runs.push(next);
        fired_for.push(fire.last().copied());
        names.push(row.name);
    }
    if !jobs.nominals.is_empty() {
        // Occurrences pass the queues' enqueue limits (migration
        // 20261201000010): a schedule's pace is its cron, and one full
        // queue must not stall every schedule fired with it.
        sqlx::query("SELECT set_config('jobwire.firing_schedules', 'on', true)")
            .execute(&mut *tx)
            .await?;
        let written: Vec<uuid::Uuid> =
            sqlx::query_scalar(include_str!("../../sql/enqueue_occurrences.sql"))
                .bind(&jobs.queues)
                .bind(&jobs.job_types)
                .bind(&jobs.priorities)
                .bind(&jobs.payloads)
                .bind(&jobs.max_attempts)
                .bind(&jobs.run_afters)
                .bind(&jobs.dedup_keys)
                .bind(&jobs.schedule_names)
                .bind(&jobs.nominals)
                .bind(&jobs.notes)
                .bind(&jobs.tenants)
                .fetch_all(&mut *tx)
                .await?;
        report.enqueued = written.len();
        report.already_fired = jobs.nominals.len() - written.len();
    }
    if !names.is_empty() {
        sqlx::query(include_str!("../../sql/advance_schedules.sql"))
            .bind(&names)
            .bind(&next_runs)
            .bind(&fired_for)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn missed_runs_follow_the_policy() {
        let hourly = CronSchedule::parse("0 * * * *", "UTC").unwrap();
        // Down from 00:30 to 03:30: 01:00, 02:00 and 03:00 were missed.
        let first = at("2026-11-30T01:00:00Z");
        let now = at("2026-11-30T03:30:00Z");
        let fire = |missed| occurrences_to_fire(&hourly, first, now, missed, 100);
        assert_eq!(fire(MissedRuns::Skip), (vec![], 3));
        assert_eq!(
            fire(MissedRuns::Latest),
            (vec![at("2026-11-30T03:00:00Z")], 2)
        );
        assert_eq!(
            fire(MissedRuns::All),
            (
                vec![
                    first,
                    at("2026-11-30T02:00:00Z"),
                    at("2026-11-30T03:00:00Z")
                ],
                0
            )
        );
        // The cap keeps the most recent ones.
        assert_eq!(
            occurrences_to_fire(&hourly, first, now, MissedRuns::All, 2),
            (
                vec![at("2026-11-30T02:00:00Z"), at("2026-11-30T03:00:00Z")],
                1
            )
        );
        // On time, every policy fires it.
        let now = at("2026-11-30T01:00:20Z");
        for missed in [MissedRuns::Skip, MissedRuns::Latest, MissedRuns::All] {
            assert_eq!(
                occurrences_to_fire(&hourly, first, now, missed, 100),
                (vec![first], 0)
            );
        }
    }
}
