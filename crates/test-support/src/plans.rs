//! Reading query plans: which indexes a statement's plan scans, for tests
//! that pin a plan down whatever the statistics say.

use serde_json::Value;

/// Every index named anywhere in a plan from `EXPLAIN (FORMAT JSON)` (the
/// whole answer: an array holding one object with a `Plan`).
pub fn plan_indexes(explained: &Value) -> Vec<String> {
    fn walk(node: &Value, found: &mut Vec<String>) {
        if let Some(index) = node.get("Index Name").and_then(Value::as_str) {
            found.push(index.to_owned());
        }
        for child in node
            .get("Plans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, found);
        }
    }
    let mut found = Vec::new();
    walk(&explained[0]["Plan"], &mut found);
    found
}
