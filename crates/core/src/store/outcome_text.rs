//! What an attempt's outcome writes, made storable. A handler's error code
//! and message come from anywhere (a binary response body, a panic message,
//! a library's error chain), and so may its retry delay; one that the
//! database refuses must not stop its outcome, or the outcomes written with
//! it in one statement, from being recorded. The texts are cut with
//! [`jobwire_loop::storable_text`], as the relay keeps a broker's refusals.

use std::time::Duration;

/// Longest error code kept, in bytes. Codes are grouped on and indexed
/// (the dead-letter index), where a long one would not fit.
pub const MAX_ERROR_CODE_BYTES: usize = 128;
/// Longest error message kept, in bytes (as the relay keeps a broker's
/// refusal).
pub const MAX_ERROR_MESSAGE_BYTES: usize = jobwire_loop::MAX_ERROR_TEXT_BYTES;
/// Longest retry delay: a job retried later than this is retried this
/// far ahead (a delay past PostgreSQL's last timestamp would make the
/// statement fail).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
