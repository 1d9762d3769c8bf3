//! A loop's counters as one log line: only those that moved, by name.

use serde::Serialize;

/// `name=value` for every counter of `report` that is not zero, by name,
/// space-separated ("nothing" when all are zero). A worker's
/// report has some thirty counters and a quiet run moves three of them: the
/// stop line names those instead of printing the struct.
pub fn nonzero_counts<T: Serialize>(report: &T) -> String {
    let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(report) else {
        return "nothing".to_owned();
    };
    // Sorted here: the map's own order depends on a serde_json feature
    // another crate of the build may turn on.
    let mut moved: Vec<String> = fields
        .iter()
        .filter(|(_, value)| value.as_u64() != Some(0))
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    moved.sort();
    if moved.is_empty() {
        "nothing".to_owned()
    } else {
        moved.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Report {
        succeeded: u64,
        failed: u64,
        claimed: u64,
    }

    #[test]
    fn names_only_the_counters_that_moved_by_name() {
        let report = Report {
            succeeded: 11,
            failed: 0,
            claimed: 12,
        };
        assert_eq!(nonzero_counts(&report), "claimed=12 succeeded=11");
        let quiet = Report {
            succeeded: 0,
            failed: 0,
            claimed: 0,
        };
        assert_eq!(nonzero_counts(&quiet), "nothing");
    }
}
