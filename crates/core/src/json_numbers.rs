//! Numbers a JSON payload carries must reach the table as they were sent.
//!
//! A payload read into `serde_json::Value` keeps a number as a 64-bit
//! integer or a double. A number that is neither (an integer past 64 bits,
//! more significant digits than a double's text has) would be stored as the
//! nearest double, without a word, where `jobwire_enqueue` in SQL keeps it
//! exact (jsonb stores numerics as written). The HTTP API and the command
//! line read payload text, so they check it with [`first_inexact_number`]
//! and refuse such a payload, with the number named, so that nothing is
//! written altered. (A Rust caller hands over a `Value` already.)

/// The first number literal in the JSON text `body` that a `Value` would
/// not keep as written: not an integer a 64-bit integer holds, nor a number
/// with a fraction or an exponent that a double holds to the digits sent
/// (at most 17 significant digits, not so small it becomes 0). `body` must
/// have parsed as JSON already.
pub fn first_inexact_number(body: &[u8]) -> Option<String> {
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

/// Whether `token` (a JSON number) is a number the API keeps: an integer a
/// 64-bit integer holds, or a number with a fraction or an exponent that a
/// double holds to the digits sent. A double's text never needs more than
/// 17 significant digits (`0.10000000000000001`, as `%.17g` writes it, is
/// the double 0.1); more digits, an integer past 64 bits (a bignum, however
/// close a double comes), or a tiny number that would become 0 are not a
/// double's, and would be stored as something else.
fn survives(token: &str) -> bool {
    if token.parse::<i64>().is_ok() || token.parse::<u64>().is_ok() {
        return true;
    }
    let (mantissa, _) = token.split_once(['e', 'E']).unwrap_or((token, ""));
    let is_integer = !token.contains(['.', 'e', 'E']);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    let Ok(double) = token.parse::<f64>() else {
        return false;
    };
    !is_integer
        && significant.len() <= 17
        && double.is_finite()
        && (double != 0.0 || significant.is_empty())
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
            "0e10",
            "1.5",
            "0.1",
            "-12.50e3",
            "1E+2",
            "1e-7",
            "1e300",
            "9223372036854775807",
            "18446744073709551615",
            "-9223372036854775808",
            "123456789012345",
            "1.7976931348623157e308",
            // What printf's %.17g, PHP before 7.1 and Java write.
            "0.10000000000000001",
            "3.1400000000000001",
            "0.30000000000000004",
            "4.9e-324",
            "5e-324",
            "2.2250738585072014e-308",
            "930.6838399097097",
        ] {
            assert!(survives(token), "{token}");
        }
    }

    #[test]
    fn numbers_past_them_do_not() {
        for token in [
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901234567890",
            "0.12345678901234567890123",
            "-9223372036854775809.5",
            "1e-400",
            "1.5e-9223372036854775808",
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
}
