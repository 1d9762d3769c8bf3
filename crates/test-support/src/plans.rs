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

/// The scans of `relation` that ran in a plan from `EXPLAIN (ANALYZE,
/// FORMAT JSON)`, by node type ("Seq Scan", "Index Scan" …); a scan the
/// executor never reached (a one-time filter was false) is left out.
pub fn executed_scans(explained: &Value, relation: &str) -> Vec<String> {
    fn walk(node: &Value, relation: &str, found: &mut Vec<String>) {
        let node_type = node.get("Node Type").and_then(Value::as_str);
        let scans_relation = node.get("Relation Name").and_then(Value::as_str) == Some(relation);
        let ran = node
            .get("Actual Loops")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            > 0;
        if let Some(node_type) = node_type
            && scans_relation
            && ran
            && node_type.ends_with("Scan")
        {
            found.push(node_type.to_owned());
        }
        for child in node
            .get("Plans")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(child, relation, found);
        }
    }
    let mut found = Vec::new();
    walk(&explained[0]["Plan"], relation, &mut found);
    found
}
