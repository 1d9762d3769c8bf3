//! A point in time as people and other services write it: RFC 3339 with an
//! offset, the form the HTTP API and the command line take. One parser, so
//! that both refuse the same texts in the same words.

use chrono::{DateTime, Utc};

/// Parse `text` as an RFC 3339 time with an offset (`2030-01-01T09:00:00Z`,
/// `2030-01-01T10:00:00+01:00`); the error says what is wrong, in words
/// that show the form. A year of more than four digits is named as such:
/// RFC 3339 has no such year, and a job is due before the year 10000.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if text.bytes().take_while(u8::is_ascii_digit).count() > 4 {
        return Err(format!(
            "{text:?} has a year of more than four digits: a job is due before the year 10000"
        ));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|err| {
            format!(
                "{text:?} is not an RFC 3339 time with an offset ({err}); write it like \
                 2030-01-01T09:00:00Z or 2030-01-01T10:00:00+01:00"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_with_an_offset_is_read_in_utc() {
        assert_eq!(
            parse_time("2030-01-01T10:00:00+01:00")
                .unwrap()
                .to_rfc3339(),
            "2030-01-01T09:00:00+00:00"
        );
    }

    #[test]
    fn what_is_refused_says_why() {
        let local = parse_time("2030-01-01T09:00:00").unwrap_err();
        assert!(
            local.contains("not an RFC 3339 time with an offset"),
            "{local}"
        );
        assert!(
            local.contains("write it like 2030-01-01T09:00:00Z"),
            "{local}"
        );
        let far = parse_time("10000-01-01T00:00:00Z").unwrap_err();
        assert!(far.contains("a job is due before the year 10000"), "{far}");
    }
}
