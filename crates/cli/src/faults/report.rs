//! What a fault-suite run did and found, as text for people and JSON for
//! tests and records.

use std::fmt::Write as _;

use serde::Serialize;

use super::checks::Check;
use super::fleet::{Crash, Role};
use super::load::LoadReport;

/// One fault besides the kills: when it started, how long it took, and
/// whether it happened (a restart that failed tested nothing).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FaultRecord {
    pub(crate) what: String,
    pub(crate) at_s: f64,
    pub(crate) took_s: f64,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Kills {
    pub(crate) workers: usize,
    pub(crate) relays: usize,
}

impl Kills {
    pub(crate) fn count(kills: &[(String, Role)]) -> Kills {
        let workers = kills
            .iter()
            .filter(|(_, role)| *role == Role::Worker)
            .count();
        Kills {
            workers,
            relays: kills.len() - workers,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) database: String,
    pub(crate) log_dir: String,
    pub(crate) paths: Vec<String>,
    pub(crate) jobs_per_path: usize,
    pub(crate) load: LoadReport,
    pub(crate) kills: Kills,
    pub(crate) faults: Vec<FaultRecord>,
    pub(crate) garbage_messages: usize,
    pub(crate) crashes: Vec<Crash>,
    /// Handler runs beyond one per job (retries and lease losses).
    pub(crate) extra_runs: i64,
    /// Leases the sweeper took back from killed workers.
    pub(crate) leases_expired: i64,
    pub(crate) fault_seconds: f64,
    pub(crate) last_fault_at_s: f64,
    pub(crate) drained: bool,
    /// From the end of the last fault to every job terminal and the outbox empty.
    pub(crate) drain_after_last_fault_s: f64,
    /// From the end of the last fault to every job terminal (the outbox may
    /// still hold wake-ups for finished jobs); `None` if they never were.
    pub(crate) jobs_done_after_last_fault_s: Option<f64>,
    pub(crate) checks: Vec<Check>,
}

impl Report {
    pub(crate) fn passed(&self) -> bool {
        self.checks.iter().all(Check::passed)
    }

    pub(crate) fn failed_checks(&self) -> usize {
        self.checks.iter().filter(|check| !check.passed()).count()
    }

    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "jobwire faults: {} paths ({}) x {} jobs, {:.0} s of faults",
            self.paths.len(),
            self.paths.join(", "),
            self.jobs_per_path,
            self.fault_seconds
        );
        let _ = writeln!(
            out,
            "  enqueued {} jobs ({} duplicate enqueues refused by their key; {} enqueue attempts failed and were sent again)",
            self.load.enqueued, self.load.duplicates_refused, self.load.failed_enqueue_attempts
        );
        let _ = writeln!(
            out,
            "  SIGKILLed {} workers and {} relays; {} leases taken back by the sweeper; {} handler runs beyond one per job",
            self.kills.workers, self.kills.relays, self.leases_expired, self.extra_runs
        );
        for fault in &self.faults {
            let _ = writeln!(
                out,
                "  at {:>5.1} s  {} ({:.1} s){}",
                fault.at_s,
                fault.what,
                fault.took_s,
                fault
                    .error
                    .as_deref()
                    .map(|err| format!("  FAILED: {err}"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(out, "  {} garbage messages sent", self.garbage_messages);
        let jobs_done = match self.jobs_done_after_last_fault_s {
            Some(after) => format!("every job terminal {after:.1} s later"),
            None => "jobs still open".to_owned(),
        };
        if self.drained {
            let _ = writeln!(
                out,
                "  last fault ended at {:.1} s; {jobs_done}, the outbox empty {:.1} s later",
                self.last_fault_at_s, self.drain_after_last_fault_s
            );
        } else {
            let _ = writeln!(
                out,
                "  NOT DRAINED {:.1} s after the last fault (at {:.1} s): {jobs_done}, wake-ups still in the outbox",
                self.drain_after_last_fault_s, self.last_fault_at_s
            );
        }
        for crash in &self.crashes {
            let _ = writeln!(
                out,
                "  CRASH: {} exited ({}); its log ends:\n{}",
                crash.process, crash.status, crash.log_tail
            );
        }
        out.push('\n');
        out.push_str(&checks_table(&self.checks));
        let _ = writeln!(
            out,
            "\n  {}; logs in {}",
            if self.passed() {
                "every check passed".to_owned()
            } else {
                format!("{} check(s) FAILED", self.failed_checks())
            },
            self.log_dir
        );
        out
    }
}

/// The checks as a table: name, violations, and a few examples of each
/// failed one.
pub(crate) fn checks_table(checks: &[Check]) -> String {
    // As wide as the longest name, so the counts line up.
    let width = checks
        .iter()
        .map(|check| check.name.chars().count())
        .max()
        .unwrap_or(0)
        .max("check".len());
    let mut out = String::new();
    let _ = writeln!(out, "  {:<width$}  violations", "check");
    for check in checks {
        let _ = writeln!(
            out,
            "  {:<width$}{:>12}{}",
            check.name,
            check.violations,
            if check.passed() {
                String::new()
            } else {
                format!("  e.g. {}", check.examples.join("; "))
            }
        );
    }
    out
}
