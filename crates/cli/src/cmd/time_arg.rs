//! A point in time on the command line: RFC 3339 with an offset, the form
//! the HTTP API takes, with an error that shows that form.

use chrono::{DateTime, Utc};

/// Parse `--run-at`, `--since` and the like.
pub(crate) fn rfc3339_time(text: &str) -> Result<DateTime<Utc>, String> {
    if text.bytes().take_while(u8::is_ascii_digit).count() > 4 {
        return Err(format!(
            "{text:?} has a year of more than four digits: a job is due before the year 10000"
        ));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|err| {
            format!(
                "not an RFC 3339 time with an offset ({err}); write it like 2030-01-01T09:00:00Z or 2030-01-01T10:00:00+01:00"
            )
        })
}
