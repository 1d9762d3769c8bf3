//! Standard output that a reader may stop reading. `println!` panics when
//! the reader has gone (`jobwire schedule list | head -1` closes the pipe
//! after one line); these drop the rest of the output instead, and the
//! command ends as it would have (its exit status, flushing its traces), as
//! a shell pipeline expects. Output lost any other way fails the command.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// `println!` for the command's output.
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the command's output.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

/// Set once a write found the reader gone: nothing more is written.
static READER_GONE: AtomicBool = AtomicBool::new(false);
/// Set once a write failed for another reason: the command then fails.
static WRITE_FAILED: AtomicBool = AtomicBool::new(false);

/// Write to standard output. The reader gone (a broken pipe): this and every
/// later write are dropped, and the command ends with its own result. Any
/// other failure (a full disk under a redirect): said on standard error,
/// later writes dropped, and the command fails ([`finish`]): what it
/// printed (a token's only copy, an id a script reads) is lost.
pub(crate) fn write(args: fmt::Arguments<'_>) {
    if READER_GONE.load(Ordering::Relaxed) || WRITE_FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(err) = stdout.write_fmt(args) {
        note(&err);
    }
}

/// After the command: flush what is still buffered (a last line without
/// its newline), and fail if any output was lost other than to a reader
/// that had gone.
pub(crate) fn finish() -> anyhow::Result<()> {
    if !READER_GONE.load(Ordering::Relaxed)
        && !WRITE_FAILED.load(Ordering::Relaxed)
        && let Err(err) = io::stdout().lock().flush()
    {
        note(&err);
    }
    if WRITE_FAILED.load(Ordering::Relaxed) {
        anyhow::bail!("the command's output could not be written in full");
    }
    Ok(())
}

fn note(err: &io::Error) {
    if err.kind() == io::ErrorKind::BrokenPipe {
        READER_GONE.store(true, Ordering::Relaxed);
    } else {
        WRITE_FAILED.store(true, Ordering::Relaxed);
        eprintln!("jobwire: cannot write to standard output: {err}");
    }
}

/// Text from the database (a name, an error a handler returned) as a
/// terminal should see it: each control character written as an escape
/// (`\u{1b}`, `\n`), so that the text cannot drive the terminal (clear it,
/// retitle it, rewrite the lines above) nor break a listing's lines. Names
/// with them are refused since migration 20261206000009; older rows, rows
/// written by hand and error texts can still hold them.
pub(crate) fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// `value` as pretty JSON for `--json`, with DEL and the C1 controls
/// (U+007F to U+009F) escaped as `\u007f` … `\u009f` too. JSON must escape
/// only the C0 controls, so serde_json leaves these raw, and a terminal
/// that shows the output can take U+009B for a control sequence's start.
/// They can only stand inside strings (everything else JSON writes is
/// ASCII), where the escape means the same character to any reader.
pub(crate) fn json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let text = serde_json::to_string_pretty(value)?;
    if !text.chars().any(is_del_or_c1) {
        return Ok(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_del_or_c1(c) {
            escaped.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            escaped.push(c);
        }
    }
    Ok(escaped)
}

fn is_del_or_c1(c: char) -> bool {
    ('\u{7f}'..='\u{9f}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert!(matches!(visible("acme Café"), Cow::Borrowed("acme Café")));
        assert_eq!(
            visible("acme\u{1b}]0;owned\u{7}"),
            "acme\\u{1b}]0;owned\\u{7}"
        );
        assert_eq!(
            visible("line one\nline two\tend"),
            "line one\\nline two\\tend"
        );
        assert_eq!(visible("next\u{85}line"), "next\\u{85}line");
        // Padding still applies, as for any text.
        assert_eq!(format!("[{:<8}]", visible("a\u{7}")), "[a\\u{7}  ]");
    }

    #[test]
    fn json_escapes_del_and_c1_and_reads_back_the_same() {
        let value = serde_json::json!({ "error": "a\u{7f}b\u{9b}2J\u{1b}c", "plain": "Café" });
        let text = json_pretty(&value).unwrap();
        assert!(text.contains(r"a\u007fb\u009b2J\u001bc"), "{text}");
        assert!(text.contains("Café"), "{text}");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
