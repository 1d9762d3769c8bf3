//! How long `jobwire worker` and `jobwire run` keep finished jobs and the
//! side tables' rows: the retention loop's settings on the command line.
//!
//! Durations are written as people say them (`90m`, `12h`, `7days`,
//! `2weeks`); the side tables also take `forever`. Every default is read
//! from [`RetentionConfig::default`], so `--help` shows what the library
//! does when nothing is said.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jobwire_consumer::maintenance::RetentionConfig;

#[derive(clap::Args)]
pub(crate) struct RetentionArgs {
    /// Do not run retention (moving finished jobs to jobs_history, trimming
    /// the side tables) in this process.
    #[arg(long, conflicts_with_all = [
        "keep_finished", "keep_failed", "keep_history", "keep_effects", "keep_audit",
        "keep_outbox_dead",
    ])]
    no_retention: bool,
    /// How long SUCCEEDED and CANCELLED jobs stay in `jobs` after they
    /// finish, before they move to `jobs_history` (e.g. 15m, 6h, 2days).
    #[arg(long, value_name = "DURATION",
          default_value_t = KeepFor(RetentionConfig::default().keep_finished))]
    keep_finished: KeepFor,
    /// How long FAILED jobs (the dead letters, replayable) stay in `jobs`
    /// after they fail, before they move to `jobs_history`.
    #[arg(long, value_name = "DURATION",
          default_value_t = KeepFor(RetentionConfig::default().keep_failed))]
    keep_failed: KeepFor,
    /// How long archived jobs stay in `jobs_history`, or `forever`.
    #[arg(long, value_name = "DURATION|forever",
          default_value_t = KeepOrForever(RetentionConfig::default().keep_history))]
    keep_history: KeepOrForever,
    /// How long effect keys stay in `job_effects`, or `forever`. Keep them
    /// longer than any job can keep retrying, or a late retry could repeat
    /// its effect.
    #[arg(long, value_name = "DURATION|forever",
          default_value_t = KeepOrForever(RetentionConfig::default().keep_effects))]
    keep_effects: KeepOrForever,
    /// How long operator actions stay in `job_audit` and
    /// `job_outbox_audit`, or `forever`.
    #[arg(long, value_name = "DURATION|forever",
          default_value_t = KeepOrForever(RetentionConfig::default().keep_audit))]
    keep_audit: KeepOrForever,
    /// How long outbox rows that could not be published stay in
    /// `job_outbox_dead` (replayable), or `forever`.
    #[arg(long, value_name = "DURATION|forever",
          default_value_t = KeepOrForever(RetentionConfig::default().keep_outbox_dead))]
    keep_outbox_dead: KeepOrForever,
}

impl RetentionArgs {
    /// The retention loop's settings, or `None` with `--no-retention`.
    pub(crate) fn config(&self) -> Option<RetentionConfig> {
        (!self.no_retention).then(|| RetentionConfig {
            keep_finished: self.keep_finished.0,
            keep_failed: self.keep_failed.0,
            keep_history: self.keep_history.0,
            keep_effects: self.keep_effects.0,
            keep_audit: self.keep_audit.0,
            keep_outbox_dead: self.keep_outbox_dead.0,
            ..RetentionConfig::default()
        })
    }
}

/// How long finished jobs stay in `jobs`; zero moves them at the next pass.
#[derive(Clone, Copy, Debug, PartialEq)]
struct KeepFor(Duration);

impl FromStr for KeepFor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        duration(text).map(KeepFor)
    }
}

impl fmt::Display for KeepFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(self.0))
    }
}

/// How long a side table keeps its rows; `None` keeps them forever. Zero is
/// refused: it would delete every row at the next pass.
#[derive(Clone, Copy, Debug, PartialEq)]
struct KeepOrForever(Option<Duration>);

impl FromStr for KeepOrForever {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("forever") {
            return Ok(KeepOrForever(None));
        }
        match duration(text)? {
            Duration::ZERO => Err(
                "a side table must keep its rows for longer than zero; write `forever` to keep them all"
                    .into(),
            ),
            keep => Ok(KeepOrForever(Some(keep))),
        }
    }
}

impl fmt::Display for KeepOrForever {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(keep) => f.write_str(&shown(keep)),
            None => f.write_str("forever"),
        }
    }
}

/// A period in its largest whole unit (`90days`, not humantime's
/// `2months 29days 2h 52m 48s`: its month is 30.44 days).
fn shown(keep: Duration) -> String {
    let secs = keep.as_secs();
    if keep.subsec_nanos() != 0 || secs == 0 {
        return humantime::format_duration(keep).to_string();
    }
    match secs {
        86_400 => "1day".into(),
        _ if secs.is_multiple_of(86_400) => format!("{}days", secs / 86_400),
        _ if secs.is_multiple_of(3_600) => format!("{}h", secs / 3_600),
        _ if secs.is_multiple_of(60) => format!("{}m", secs / 60),
        _ => format!("{secs}s"),
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|err| format!("not a duration ({err}); write it like 90m, 12h, 7days or 2weeks"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_reads_back_as_itself() {
        let defaults = RetentionConfig::default();
        for keep in [defaults.keep_finished, defaults.keep_failed] {
            let shown = KeepFor(keep).to_string();
            assert_eq!(shown.parse::<KeepFor>(), Ok(KeepFor(keep)), "{shown}");
        }
        for keep in [
            defaults.keep_history,
            defaults.keep_effects,
            defaults.keep_audit,
            defaults.keep_outbox_dead,
            None,
        ] {
            let shown = KeepOrForever(keep).to_string();
            assert_eq!(
                shown.parse::<KeepOrForever>(),
                Ok(KeepOrForever(keep)),
                "{shown}"
            );
        }
    }

    #[test]
    fn periods_are_shown_in_their_largest_whole_unit() {
        let day = 86_400;
        for (secs, shown) in [
            (90 * day, "90days"),
            (day, "1day"),
            (3_600, "1h"),
            (5_400, "90m"),
            (61, "61s"),
        ] {
            assert_eq!(KeepFor(Duration::from_secs(secs)).to_string(), shown);
        }
        assert_eq!(
            KeepFor(Duration::from_millis(1_500)).to_string(),
            "1s 500ms"
        );
        assert_eq!(KeepOrForever(None).to_string(), "forever");
    }

    #[test]
    fn durations_are_read_as_people_write_them() {
        assert_eq!(
            "90m".parse::<KeepFor>(),
            Ok(KeepFor(Duration::from_secs(5400)))
        );
        assert_eq!("0s".parse::<KeepFor>(), Ok(KeepFor(Duration::ZERO)));
        assert_eq!(
            "2weeks".parse::<KeepOrForever>(),
            Ok(KeepOrForever(Some(Duration::from_secs(14 * 24 * 3600))))
        );
        assert_eq!("Forever".parse::<KeepOrForever>(), Ok(KeepOrForever(None)));
    }

    #[test]
    fn nonsense_and_a_side_table_kept_for_zero_are_refused() {
        let err = "seven days".parse::<KeepFor>().unwrap_err();
        assert!(err.contains("write it like 90m"), "{err}");
        let err = "0s".parse::<KeepOrForever>().unwrap_err();
        assert!(err.contains("write `forever`"), "{err}");
        assert!("-1h".parse::<KeepOrForever>().is_err());
        assert!("".parse::<KeepFor>().is_err());
    }
}
