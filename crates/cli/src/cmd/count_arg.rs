//! Counts given on the command line that must be at least 1 (a batch size,
//! a number of tasks): refused by the argument's own parser, named by its
//! flag, before the command connects or writes anything.

/// A whole number, at least 1.
pub(crate) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0 is not at least 1".to_owned()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_negative_and_words_are_refused() {
        assert_eq!(at_least_one("7"), Ok(7));
        assert_eq!(at_least_one("0"), Err("0 is not at least 1".to_owned()));
        assert!(at_least_one("-1").unwrap_err().contains("whole number"));
        assert!(at_least_one("many").unwrap_err().contains("whole number"));
    }
}
