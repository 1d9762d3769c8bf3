//! Numbers a body carries must reach the table as they were sent.
//!
//! The API parses bodies into `serde_json::Value`, which keeps a number as a
//! 64-bit integer or a double. A number that is neither exactly (an integer
//! past 2^64, more significant digits than a double holds) would be stored
//! rounded, without a word, where `jobwire_enqueue` in SQL keeps it exact
//! (jsonb stores numerics as written). Such a body is refused instead, with
//! the number named, so that nothing is written altered.

/// The first number literal in the JSON `body` that would not survive
/// parsing into a 64-bit integer or a double unchanged in value.
pub(crate) fn first_inexact_number(body: &[u8]) -> Option<String> {
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < body.len() {
        let byte = body[i];
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if byte == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if byte == b'-' || byte.is_ascii_digit() {
            let start = i;
            while i < body.len()
                && matches!(body[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            {
                i += 1;
            }
            // The body parsed as JSON already: a number token is ASCII.
            let token = std::str::from_utf8(&body[start..i]).unwrap_or_default();
            if !survives(token) {
                return Some(token.to_owned());
            }
            continue;
        }
        i += 1;
    }
    None
}

/// Whether `token` (a JSON number) keeps its value as the integer or the
/// double it is parsed into: the double written back (as serde_json
/// writes it) must be the same decimal number.
fn survives(token: &str) -> bool {
    if token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok() {
        return true;
    }
    let Ok(double) = token.parse::<f64>() else {
        return true; // not ours to judge: the parser has accepted the body
    };
    let Ok(written) = serde_json::to_string(&double) else {
        return false;
    };
    decimal(token) == decimal(&written)
}

/// A decimal number's value as (negative, significant digits, exponent of
/// ten): `-12.50e3` is (true, "125", 2). Zero is (false, "", 0) whatever
/// its sign or form.
fn decimal(text: &str) -> (bool, String, i64) {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (
            &unsigned[..at],
            unsigned[at + 1..].parse::<i64>().unwrap_or(0),
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut exponent = exponent - fraction.len() as i64;
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    exponent += (digits.len() - significant.len()) as i64;
    if significant.is_empty() {
        return (false, String::new(), 0);
    }
    (negative, significant.to_owned(), exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_a_double_or_a_64_bit_integer_holds_survive() {
        for token in [
            "0",
            "-0",
            "-0.0",
            "1.5",
            "0.1",
            "-12.50e3",
            "1e300",
            "9223372036854775807",
            "18446744073709551615",
            "-9223372036854775808",
            "123456789012345",
            "1.7976931348623157e308",
        ] {
            assert!(survives(token), "{token}");
        }
    }

    #[test]
    fn numbers_past_them_do_not() {
        for token in [
            "18446744073709551616",
            "123456789012345678901234567890",
            "0.12345678901234567890123",
            "-9223372036854775809.5",
        ] {
            assert!(!survives(token), "{token}");
        }
    }

    #[test]
    fn the_first_inexact_number_is_found_outside_strings() {
        let body = br#"{"s": "123456789012345678901234567890 \" 1e1", "a": [1, 2.5],
                        "n": 123456789012345678901234567890, "m": 18446744073709551616}"#;
        assert_eq!(
            first_inexact_number(body).as_deref(),
            Some("123456789012345678901234567890")
        );
        assert_eq!(
            first_inexact_number(br#"{"n": 1.5, "t": "x\\", "u": 2}"#),
            None
        );
    }

    #[test]
    fn decimals_compare_by_value() {
        assert_eq!(decimal("-12.50e3"), (true, "125".to_owned(), 2));
        assert_eq!(decimal("0.00100"), (false, "1".to_owned(), -3));
        assert_eq!(decimal("1e-3"), decimal("0.001"));
        assert_eq!(decimal("-0.0"), decimal("0"));
    }
}
