//! How numbers, times and states read on a page.

use chrono::{DateTime, Utc};
use jobwire_core::JobState;
use maud::{Markup, html};

/// `text` cut after `chars` characters, with `…` when it was cut.
pub(crate) fn truncate(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The line under a job's (or a schedule's) queue that names its tenant,
/// cut to a length a table cell can hold; nothing without a tenant.
pub(crate) fn for_tenant(tenant: Option<&str>) -> Markup {
    html! {
        @if let Some(tenant) = tenant {
            br; span.muted { "for " (truncate(tenant, 40)) }
        }
    }
}

/// A count with thousands separators: 1,840.
pub(crate) fn count(n: impl Into<i128>) -> String {
    let n: i128 = n.into();
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A time, to the second, in UTC, inside a `<time>` element.
pub(crate) fn time(at: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) }
    }
}

/// A time that may be absent.
pub(crate) fn maybe_time(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { span.muted { "—" } },
    }
}

/// A span of seconds as a person says it: 850 ms, 42 s, 3 min 20 s, 5 h 02 min.
pub(crate) fn age(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    if seconds < 1.0 {
        return format!("{} ms", (seconds * 1000.0).round() as u64);
    }
    let whole = seconds.round() as u64;
    match whole {
        0..60 => format!("{whole} s"),
        60..3600 => format!("{} min {:02} s", whole / 60, whole % 60),
        3600..86400 => format!("{} h {:02} min", whole / 3600, whole % 3600 / 60),
        _ => format!("{} d {:02} h", whole / 86400, whole % 86400 / 3600),
    }
}

/// A job state as a coloured badge (the class says which colour).
pub(crate) fn state_badge(state: JobState) -> Markup {
    let class = match state {
        JobState::Queued | JobState::RetryWait => "badge waiting",
        JobState::Running | JobState::CancelRequested => "badge running",
        JobState::Succeeded => "badge done",
        JobState::Failed => "badge failed",
        JobState::Cancelled => "badge cancelled",
    };
    html! { span class=(class) { (state.as_str()) } }
}

/// `path` with a query string of these pairs (values escaped for a URL).
pub(crate) fn href(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        query.append_pair(name, value);
    }
    format!("{path}?{}", query.finish())
}

/// `text` escaped as one segment of a URL path (a space is %20 there, not
/// the form encoding's +). Not for a text that may be `.` or `..`: the
/// browser resolves such a segment away, escaped or not (a queue's name
/// rides in its form instead; a schedule's name cannot start with a dot).
pub(crate) fn path_segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// How a queue's jobs travel: straight from the table, or through a
/// broker topic.
pub(crate) fn dispatch_path(queue: &jobwire_core::QueueOverview) -> Markup {
    html! {
        @match &queue.topic {
            Some(topic) if queue.dispatch == "broker" => { "broker " code { (topic) } }
            _ => { "PostgreSQL" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_on_characters() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 5), "hi");
    }

    #[test]
    fn counts_and_ages_read_as_a_person_writes_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1840), "1,840");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(count(-12345), "-12,345");
        assert_eq!(age(0.25), "250 ms");
        assert_eq!(age(42.4), "42 s");
        assert_eq!(age(200.0), "3 min 20 s");
        assert_eq!(age(5.0 * 3600.0 + 120.0), "5 h 02 min");
        assert_eq!(age(3.0 * 86400.0), "3 d 00 h");
    }

    #[test]
    fn path_segments_survive_the_browser() {
        assert_eq!(path_segment("a b/c+d"), "a%20b%2Fc%2Bd");
        assert_eq!(path_segment("v1.2"), "v1.2");
    }
}
