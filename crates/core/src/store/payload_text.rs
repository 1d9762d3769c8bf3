//! A job's payload read back in jsonb's text form, for the views of jobs.

use serde_json::Value;

/// A stored payload as text (`payload::text`). jsonb keeps numbers beyond
/// a double's range and nesting deeper than 128, which serde_json refuses:
/// read as a JSON value, one such job made every page and answer that
/// listed it fail. It reads as its JSON when it can, and as a string
/// holding its text when it cannot, so nothing is hidden.
#[derive(sqlx::Type)]
#[sqlx(transparent)]
pub(crate) struct PayloadText(String);

impl From<PayloadText> for Value {
    fn from(PayloadText(text): PayloadText) -> Value {
        match serde_json::from_str(&text) {
            Ok(payload) => payload,
            Err(_) => Value::String(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_serde_json_cannot_read_is_shown_as_its_text() {
        let read = |text: &str| Value::from(PayloadText(text.to_owned()));
        assert_eq!(read(r#"{"n": 1}"#), serde_json::json!({ "n": 1 }));
        assert_eq!(
            read(r#"{"n": 1e400}"#),
            Value::String(r#"{"n": 1e400}"#.into())
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(read(&deep), Value::String(deep.clone()));
    }
}
