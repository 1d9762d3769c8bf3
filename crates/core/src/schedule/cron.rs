//! Occurrences of a cron expression in a time zone, under the documented
//! daylight-saving rules (docs/schedules.md):
//!
//! - A cron with **fixed hours** (`30 2 * * *`, `0 9-17 * * MON-FRI`,
//!   `@daily`) is about the wall clock. A local time that does not exist
//!   (clocks jump forward over it) fires once, at the first instant after
//!   the gap; a local time that occurs twice (clocks fall back) fires once,
//!   at its first occurrence.
//! - A cron whose hour field is `*` or a step (`*/15 * * * *`, `0 * * * *`,
//!   `@hourly`) is about elapsed time: it fires at every real instant whose
//!   local time matches. Through a gap nothing matches (the next match is
//!   after it); through a fold the repeated hour matches twice.
//!
//! croner parses the expression and finds matching **wall-clock** times
//! (it is asked about naive local times only); chrono-tz's zone data turns
//! each into zero, one or two real instants, and the rules above choose.

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::{Error, Result};

/// The largest change of a zone's UTC offset at one transition that the
/// search allows for (real ones are at most two hours).
const MAX_SHIFT: TimeDelta = TimeDelta::hours(3);
/// How many wall-clock matches one search may look at before giving up.
const SEARCH_LIMIT: usize = 100_000;
/// Offsets are sampled this often around an instant: transitions are hours
/// apart, so no change of offset hides between two samples.
const SAMPLE: TimeDelta = TimeDelta::minutes(15);

/// A parsed, validated schedule: what fires when.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    cron: Cron,
    zone: Tz,
    follows_elapsed_time: bool,
}

impl CronSchedule {
    /// Parse `expression` (5 fields, or 6 with seconds first, or `@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`) in `timezone` (an IANA
    /// name such as `Asia/Kolkata`, or `UTC`). An expression that never
    /// fires (`0 0 30 2 *`) is refused too.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self> {
        let expression = expression.trim();
        // No year field: a schedule is for repeating, and a cron that runs
        // out of years would leave a schedule that silently never fires.
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expression)
            .map_err(|err| Error::InvalidArgument {
                argument: "cron",
                reason: format!(
                    "{expression:?} is not a cron expression: {}",
                    what_is_wrong(&parser, expression, &err.to_string())
                ),
            })?;
        let zone: Tz = timezone.parse().map_err(|_| Error::InvalidArgument {
            argument: "timezone",
            reason: format!(
                "{timezone:?} is not a time zone name; use an IANA name such as \
                 Asia/Kolkata or America/New_York, or UTC (names from the tz \
                 database, built into jobwire: the machine's own zone files \
                 are not read)"
            ),
        })?;
        let schedule = CronSchedule {
            follows_elapsed_time: hour_field_is_open(expression),
            expression: expression.to_owned(),
            cron,
            zone,
        };
        let start = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
        if schedule.next_after(start).is_none() {
            return Err(Error::InvalidArgument {
                argument: "cron",
                reason: format!("{expression:?} never fires"),
            });
        }
        Ok(schedule)
    }

    /// The expression as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// Whether the hour field is `*` or a step, so the schedule follows
    /// elapsed time through daylight-saving changes (else the wall clock).
    pub fn follows_elapsed_time(&self) -> bool {
        self.follows_elapsed_time
    }

    /// The first occurrence strictly after `after`, or `None` if there is
    /// none (an expression whose last match has passed).
    ///
    /// croner walks wall-clock matches forward; each maps to its instants.
    /// Wall-clock time runs backwards through a fold, so the walk starts at
    /// the lowest wall time shown in the next [`MAX_SHIFT`], and it stops
    /// once a wall time is past any instant that could still beat the best
    /// one found.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Kept inside the years the search can reach, so that the hours
        // added and taken around an instant stay within chrono's range
        // (near its limits they panicked).
        if after >= last_searched() {
            return None;
        }
        let after = after.max(first_searched());
        let samples = (MAX_SHIFT.num_minutes() / SAMPLE.num_minutes()) as i32;
        let mut cursor = self.wall(after);
        for k in 1..=samples {
            cursor = cursor.min(self.wall(after + SAMPLE * k) - SAMPLE);
        }
        let mut best: Option<(DateTime<Utc>, NaiveDateTime)> = None;
        let mut inclusive = cursor < self.wall(after);
        for _ in 0..SEARCH_LIMIT {
            // No further match: the best one found so far (if any) is it.
            let Ok(wall) = self.cron.find_next_occurrence(&cursor, inclusive) else {
                break;
            };
            inclusive = false;
            if let Some((_, stop_after)) = best
                && wall > stop_after
            {
                break;
            }
            for instant in self.instants_of(wall) {
                if instant > after && best.is_none_or(|(best, _)| instant < best) {
                    best = Some((instant, self.stop_after(instant)));
                }
            }
            cursor = wall;
        }
        best.map(|(instant, _)| instant)
    }

    /// The local wall-clock time at `at`.
    fn wall(&self, at: DateTime<Utc>) -> NaiveDateTime {
        at.with_timezone(&self.zone).naive_local()
    }

    /// The zone's UTC offset at `at`.
    fn offset(&self, at: DateTime<Utc>) -> TimeDelta {
        self.wall(at) - at.naive_utc()
    }

    /// The wall time past which no match can map to an instant before
    /// `best`: its own wall time, plus how much larger the offset was in
    /// the hours before it (a fold just before `best`).
    fn stop_after(&self, best: DateTime<Utc>) -> NaiveDateTime {
        let samples = (MAX_SHIFT.num_minutes() / SAMPLE.num_minutes()) as i32;
        let here = self.offset(best);
        let allowance = (1..=samples)
            .map(|k| self.offset(best - SAMPLE * k) - here)
            .fold(TimeDelta::zero(), TimeDelta::max);
        self.wall(best) + allowance
    }

    /// The occurrences strictly after `after`, in order.
    pub fn occurrences_after(
        &self,
        after: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |last| self.next_after(*last))
    }

    /// The real instants at which the wall-clock time `wall` fires.
    fn instants_of(&self, wall: NaiveDateTime) -> Vec<DateTime<Utc>> {
        match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(at) => vec![at.to_utc()],
            LocalResult::Ambiguous(first, second) => {
                let (earlier, later) = (
                    first.to_utc().min(second.to_utc()),
                    first.to_utc().max(second.to_utc()),
                );
                if self.follows_elapsed_time {
                    vec![earlier, later]
                } else {
                    vec![earlier]
                }
            }
            LocalResult::None if self.follows_elapsed_time => Vec::new(),
            LocalResult::None => self.end_of_gap(wall).into_iter().collect(),
        }
    }

    /// The first instant after the gap `wall` falls in: the transition.
    /// Transitions fall on whole minutes, so the first wall-clock minute
    /// after `wall` that exists is the gap's end.
    fn end_of_gap(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let mut minute = wall.with_second(0)?.with_nanosecond(0)?;
        for _ in 0..(24 * 60) {
            minute += TimeDelta::minutes(1);
            match self.zone.from_local_datetime(&minute) {
                LocalResult::Single(at) => return Some(at.to_utc()),
                LocalResult::Ambiguous(first, second) => {
                    return Some(first.to_utc().min(second.to_utc()));
                }
                LocalResult::None => {}
            }
        }
        None
    }
}

/// No occurrence is looked for from this instant on, the last day of the
/// year 9999: croner finds none past the year 5000 anyway, and a day short
/// of a year chrono holds with room to spare keeps the hours a search adds
/// around an instant inside chrono's range.
fn last_searched() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0).unwrap()
}

/// A search from before this instant, the second day of the year 1,
/// starts here: croner finds nothing before the year 1, and the day's
/// margin keeps the hours a search takes around an instant inside
/// chrono's range.
fn first_searched() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(1, 1, 2, 0, 0, 0).unwrap()
}

/// Which field of a refused expression is wrong, as "the minute field
/// \"61\" is not valid: it takes 0-59": croner's errors do not say. Found
/// by parsing each field alone, every other one `*`: the first that fails
/// is at fault (none when each parses alone, e.g. a wrong field count).
fn field_at_fault(parser: &CronParser, expression: &str) -> Option<String> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    // Each field's name and the values it takes.
    let named: &[(&str, &str)] = match fields.len() {
        5 => &FIELDS[1..],
        6 => &FIELDS,
        _ => return None,
    };
    // Each field alone among stars: the first that fails is at fault, however
    // many others do too.
    (0..fields.len()).find_map(|at| {
        let mut alone = vec!["*"; fields.len()];
        alone[at] = fields[at];
        let (name, values) = named[at];
        parser.parse(&alone.join(" ")).is_err().then(|| {
            format!(
                "the {name} field {:?} is not valid: it takes {values}",
                fields[at]
            )
        })
    })
}

/// A cron's fields in order (the second only in a 6-field expression), with
/// the values each takes.
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT (0 and 7 are Sunday)"),
];

/// What is wrong with `expression`, which did not parse (`parser_said`):
/// the field at fault with the values it takes, or the count of fields.
/// The parser's own words name its settings ("when years are disallowed")
/// and its internals ("Component error"), which a user cannot act on.
fn what_is_wrong(parser: &CronParser, expression: &str, parser_said: &str) -> String {
    if let Some(field) = field_at_fault(parser, expression) {
        return field;
    }
    if expression.starts_with('@') {
        return "the nicknames are @hourly, @daily, @weekly, @monthly and @yearly (or @annually)"
            .to_owned();
    }
    let count = expression.split_whitespace().count();
    if !matches!(count, 5 | 6) {
        return format!(
            "it has {count} field(s); a cron has 5 (minute hour day-of-month month \
             day-of-week), or 6 with a second first, and no year"
        );
    }
    parser_said.to_owned()
}

/// Whether a cron's hour field is `*` or a step (`*/2`, `0-23/2`): such a
/// schedule is about elapsed time, not about a time on the wall clock.
fn hour_field_is_open(expression: &str) -> bool {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let hour = match fields.as_slice() {
        [nickname] => return nickname.eq_ignore_ascii_case("@hourly"),
        [_, hour, _, _, _] => hour,
        [_, _, hour, _, _, _] | [_, _, hour, _, _, _, _] => hour,
        _ => return false,
    };
    *hour == "*" || hour.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hour_field_decides_which_rule_applies() {
        for open in [
            "*/15 * * * *",
            "0 * * * *",
            "@hourly",
            "0 0 */2 * * *",
            "0 1-23/2 * * *",
        ] {
            assert!(hour_field_is_open(open), "{open}");
        }
        for fixed in [
            "30 2 * * *",
            "0 9-17 * * MON-FRI",
            "@daily",
            "0 30 1 * * *",
            "0 1,13 * * *",
        ] {
            assert!(!hour_field_is_open(fixed), "{fixed}");
        }
    }

    #[test]
    fn bad_expressions_and_zones_say_what_is_wrong() {
        let err = CronSchedule::parse("61 * * * *", "UTC")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cron") && err.contains("61 * * * *"), "{err}");
        // The field at fault is named, whichever it is.
        for (expression, field) in [
            ("61 * * * *", "the minute field \"61\""),
            ("0 25 * * *", "the hour field \"25\""),
            ("0 8 * 13 *", "the month field \"13\""),
            ("0 8 * * FUNDAY", "the day-of-week field \"FUNDAY\""),
            ("70 0 8 * * *", "the second field \"70\""),
        ] {
            let err = CronSchedule::parse(expression, "UTC")
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{expression}: {err}");
        }
        // Two fields wrong: the first is named.
        let err = CronSchedule::parse("61 25 * * *", "UTC")
            .unwrap_err()
            .to_string();
        assert!(err.contains("the minute field \"61\""), "{err}");
        // A nickname the parser does not know: the ones it does.
        let err = CronSchedule::parse("@midnight", "UTC")
            .unwrap_err()
            .to_string();
        assert!(err.contains("@hourly, @daily"), "{err}");
        // The values the field takes, in words a user can act on.
        let err = CronSchedule::parse("61 8 * * *", "UTC")
            .unwrap_err()
            .to_string();
        assert!(err.contains("it takes 0-59"), "{err}");
        assert!(!err.contains("Component error"), "{err}");
        // A wrong field count has no one field at fault: the count is said.
        for (expression, count) in [("0 8 *", "3"), ("0 0 8 * * * 2026", "7")] {
            let err = CronSchedule::parse(expression, "UTC")
                .unwrap_err()
                .to_string();
            assert!(!err.contains(" field \""), "{err}");
            assert!(err.contains(&format!("it has {count} field(s)")), "{err}");
            assert!(!err.contains("disallowed"), "{err}");
        }
        let err = CronSchedule::parse("0 8 * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(err.contains("timezone") && err.contains("IANA"), "{err}");
        let err = CronSchedule::parse("0 0 30 2 *", "UTC")
            .unwrap_err()
            .to_string();
        assert!(err.contains("never fires"), "{err}");
    }

    /// From any instant chrono can hold, the search answers without
    /// panicking: nothing near the end of its range, the first occurrence
    /// from the year 1 near its start.
    #[test]
    fn a_search_from_the_edges_of_time_answers() {
        for zone in ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"] {
            let every_minute = CronSchedule::parse("* * * * *", zone).unwrap();
            assert_eq!(every_minute.next_after(DateTime::<Utc>::MAX_UTC), None);
            assert_eq!(every_minute.next_after(last_searched()), None);
            let first = every_minute
                .next_after(DateTime::<Utc>::MIN_UTC)
                .expect("an occurrence early in the year 1");
            assert!(first > first_searched(), "{first}");
            assert!(first < first_searched() + TimeDelta::days(2), "{first}");
        }
    }
}
