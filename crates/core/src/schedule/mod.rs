//! Recurring schedules: a cron expression in a named time zone, turned into
//! occurrences (UTC instants) under explicit daylight-saving rules, with a
//! deterministic jitter per occurrence.
//!
//! An occurrence is identified by its **nominal instant**; the job it
//! creates carries the dedup key `schedule:<name>@<nominal instant>`, so
//! firing one twice is a uniqueness violation the database refuses, not a
//! coordination problem between schedulers.

mod cron;
mod jitter;

pub use cron::CronSchedule;
pub use jitter::jitter_for;

use chrono::{DateTime, SecondsFormat, Utc};

/// The dedup key of a schedule's occurrence.
pub fn occurrence_key(schedule: &str, nominal: DateTime<Utc>) -> String {
    format!(
        "schedule:{schedule}@{}",
        nominal.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}
