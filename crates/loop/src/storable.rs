//! Text from elsewhere (a handler's error, a broker's refusal) as
//! PostgreSQL's `text` can keep it. A value the database refuses fails the
//! statement that writes it, and with it everything written beside it, on
//! every try.

use std::borrow::Cow;

/// Longest error text kept, in bytes: a job's error message, an outbox
/// row's last refusal.
pub const MAX_ERROR_TEXT_BYTES: usize = 8 * 1024;

/// `text` as PostgreSQL's `text` can hold it, in at most `limit` bytes:
/// each NUL, which it cannot store, becomes U+FFFD, and a longer text is
/// cut on a character boundary and ends in "…".
pub fn storable_text(text: &str, limit: usize) -> Cow<'_, str> {
    let text = if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    };
    if text.len() <= limit {
        return text;
    }
    const ELLIPSIS: &str = "…";
    let mut end = limit.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{ELLIPSIS}", &text[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced_and_long_text_cut_on_a_character() {
        assert_eq!(storable_text("plain", 10), "plain");
        assert!(matches!(storable_text("plain", 10), Cow::Borrowed(_)));
        assert_eq!(storable_text("a\0b", 10), "a\u{FFFD}b");
        assert_eq!(
            storable_text("abcdefghij", 10),
            "abcdefghij",
            "exactly the limit"
        );
        let cut = storable_text("abcdefghijk", 10);
        assert_eq!(cut, "abcdefg…");
        assert_eq!(cut.len(), 10);
        // "é" is two bytes: the cut falls before it, not inside it.
        let cut = storable_text("abcdeéééé", 9);
        assert_eq!(cut, "abcde…");
        assert!(cut.len() <= 9);
    }
}
