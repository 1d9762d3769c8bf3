//! Schedule occurrences through daylight-saving changes, on real zone data.
//! The expected instants come from the tz database itself, read with
//! `zdump -v -c 2026,2027 <zone>`:
//!
//! ```text
//! America/New_York     Sun Mar  8 07:00:00 2026 UT = Sun Mar  8 03:00:00 2026 EDT (02:00-02:59 do not exist)
//! America/New_York     Sun Nov  1 06:00:00 2026 UT = Sun Nov  1 01:00:00 2026 EST (01:00-01:59 twice)
//! Europe/London        Sun Mar 29 01:00:00 2026 UT = Sun Mar 29 02:00:00 2026 BST (01:00-01:59 do not exist)
//! Europe/London        Sun Oct 25 01:00:00 2026 UT = Sun Oct 25 01:00:00 2026 GMT (01:00-01:59 twice)
//! Australia/Lord_Howe  Sat Apr  4 15:00:00 2026 UT = Sun Apr  5 01:30:00 2026 +1030 (01:30-01:59 twice)
//! Australia/Lord_Howe  Sat Oct  3 15:30:00 2026 UT = Sun Oct  4 02:30:00 2026 +11 (02:00-02:29 do not exist)
//! Asia/Kolkata         +05:30 all year
//! ```

use chrono::{DateTime, Utc};
use jobwire_core::schedule::CronSchedule;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

/// The first `expected.len()` occurrences strictly after `after`, as RFC 3339 UTC.
fn check(cron: &str, zone: &str, after: &str, expected: &[&str]) {
    let schedule = CronSchedule::parse(cron, zone).unwrap();
    let got: Vec<String> = schedule
        .occurrences_after(at(after))
        .take(expected.len())
        .map(|at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect();
    assert_eq!(got, expected, "{cron} in {zone} after {after}");
}

#[test]
fn new_york_spring_forward() {
    // Daily at 02:30, which does not exist on March 8: once, at 03:00 EDT.
    check(
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00:00Z",
        &[
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
        ],
    );
    // Every 15 minutes follows elapsed time: 01:45 EST, then 03:00 EDT.
    check(
        "*/15 * * * *",
        "America/New_York",
        "2026-03-08T06:15:00Z",
        &[
            "2026-03-08T06:30:00Z",
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:15:00Z",
            "2026-03-08T07:30:00Z",
        ],
    );
}

#[test]
fn new_york_fall_back() {
    // Daily at 01:30, which happens twice on November 1: once, the first time (EDT).
    check(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T00:00:00Z",
        &[
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    );
    // Hourly fires at each real hour, both 01:00s.
    check(
        "0 * * * *",
        "America/New_York",
        "2026-11-01T03:30:00Z",
        &[
            "2026-11-01T04:00:00Z",
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ],
    );
    check(
        "*/15 * * * *",
        "America/New_York",
        "2026-11-01T05:15:00Z",
        &[
            "2026-11-01T05:30:00Z",
            "2026-11-01T05:45:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:15:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T06:45:00Z",
            "2026-11-01T07:00:00Z",
        ],
    );
}

#[test]
fn london_both_transitions() {
    check(
        "30 1 * * *",
        "Europe/London",
        "2026-03-28T00:00:00Z",
        &[
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z",
        ],
    );
    check(
        "30 1 * * *",
        "Europe/London",
        "2026-10-24T00:00:00Z",
        &[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
        ],
    );
    check(
        "*/15 * * * *",
        "Europe/London",
        "2026-03-29T00:30:00Z",
        &[
            "2026-03-29T00:45:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z",
        ],
    );
    check(
        "*/30 * * * *",
        "Europe/London",
        "2026-10-25T00:00:00Z",
        &[
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T02:00:00Z",
        ],
    );
}

#[test]
fn lord_howe_half_hour_shifts() {
    // April 5: 01:30-01:59 happen twice (+11, then +10:30).
    check(
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-03T00:00:00Z",
        &[
            "2026-04-03T14:45:00Z",
            "2026-04-04T14:45:00Z",
            "2026-04-05T15:15:00Z",
        ],
    );
    check(
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-04-04T14:00:00Z",
        &[
            "2026-04-04T14:15:00Z",
            "2026-04-04T14:30:00Z",
            "2026-04-04T14:45:00Z",
            "2026-04-04T15:00:00Z",
            "2026-04-04T15:15:00Z",
            "2026-04-04T15:30:00Z",
        ],
    );
    // October 4: 02:00-02:29 do not exist; 02:15 runs at 02:30 (+11).
    check(
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-02T00:00:00Z",
        &[
            "2026-10-02T15:45:00Z",
            "2026-10-03T15:30:00Z",
            "2026-10-04T15:15:00Z",
        ],
    );
    check(
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-10-03T14:45:00Z",
        &[
            "2026-10-03T15:00:00Z",
            "2026-10-03T15:15:00Z",
            "2026-10-03T15:30:00Z",
            "2026-10-03T15:45:00Z",
        ],
    );
}

#[test]
fn kolkata_has_no_transitions() {
    check(
        "0 8 * * *",
        "Asia/Kolkata",
        "2026-03-07T00:00:00Z",
        &[
            "2026-03-07T02:30:00Z",
            "2026-03-08T02:30:00Z",
            "2026-03-09T02:30:00Z",
        ],
    );
    check(
        "*/15 * * * *",
        "Asia/Kolkata",
        "2026-11-01T05:50:00Z",
        &[
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:15:00Z",
            "2026-11-01T06:30:00Z",
        ],
    );
}

#[test]
fn seconds_nicknames_names_and_utc() {
    check(
        "30 */20 * * * *",
        "UTC",
        "2026-11-30T10:00:00Z",
        &[
            "2026-11-30T10:00:30Z",
            "2026-11-30T10:20:30Z",
            "2026-11-30T10:40:30Z",
        ],
    );
    check(
        "@daily",
        "Asia/Kolkata",
        "2026-11-30T00:00:00Z",
        &["2026-11-30T18:30:00Z", "2026-12-01T18:30:00Z"],
    );
    check(
        "@hourly",
        "UTC",
        "2026-11-30T10:00:00Z",
        &["2026-11-30T11:00:00Z"],
    );
    // Names of months and days; day of month OR day of week, as in Vixie cron.
    check(
        "0 9 1 JAN,JUL MON-FRI",
        "UTC",
        "2026-11-30T00:00:00Z",
        &["2027-01-01T09:00:00Z", "2027-01-04T09:00:00Z"],
    );
}

/// Random crons and zones: occurrences strictly increase, none repeats, and
/// each is either a local time the cron matches or the first instant after
/// a gap in which a matching local time fell.
#[test]
fn occurrences_always_move_forward() {
    use chrono::{Offset, TimeDelta, TimeZone, Timelike};
    use chrono_tz::Tz;
    let zones = [
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
        "America/Santiago",
        "Pacific/Chatham",
        "UTC",
    ];
    let minutes = ["0", "*/15", "7", "*/5", "30", "0,30"];
    let hours = ["*", "1", "2", "*/2", "0-3", "1,2"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for _ in 0..200 {
        let cron = format!(
            "{} {} * * *",
            minutes[next(minutes.len())],
            hours[next(hours.len())]
        );
        let zone = zones[next(zones.len())];
        let schedule = CronSchedule::parse(&cron, zone).unwrap();
        let tz: Tz = zone.parse().unwrap();
        let start = at("2026-01-01T00:00:00Z") + TimeDelta::days(next(365) as i64);
        let mut last = start;
        for occurrence in schedule.occurrences_after(start).take(60) {
            assert!(
                occurrence > last,
                "{cron} in {zone}: {occurrence} after {last}"
            );
            let local = occurrence.with_timezone(&tz);
            let minute_ok = match minutes
                .iter()
                .find(|m| cron.starts_with(&format!("{m} ")))
                .unwrap()
            {
                &"*/15" => local.minute() % 15 == 0,
                &"*/5" => local.minute() % 5 == 0,
                &"0,30" => local.minute() % 30 == 0,
                m => local.minute() == m.parse::<u32>().unwrap(),
            };
            // A gap-shifted occurrence sits on the transition, whose minute
            // may differ from the cron's.
            let offset_at = |at: DateTime<Utc>| tz.offset_from_utc_datetime(&at.naive_utc()).fix();
            let on_transition =
                offset_at(occurrence - TimeDelta::seconds(1)) != offset_at(occurrence);
            assert!(
                minute_ok || on_transition,
                "{cron} in {zone}: {occurrence} ({local})"
            );
            last = occurrence;
        }
    }
}
