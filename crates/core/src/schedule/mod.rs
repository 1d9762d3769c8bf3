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

/// How every occurrence's dedup key begins. The enqueue refuses keys that
/// begin so: a job enqueued with an occurrence's key would stand in for
/// that occurrence, which its scheduler then counts as fired.
pub const OCCURRENCE_KEY_PREFIX: &str = "schedule:";

/// The dedup key of a schedule's occurrence.
pub fn occurrence_key(schedule: &str, nominal: DateTime<Utc>) -> String {
    format!(
        "{OCCURRENCE_KEY_PREFIX}{schedule}@{}",
        nominal.to_rfc3339_opts(SecondsFormat::Secs, true)
    )
}
