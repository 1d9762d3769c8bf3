//! Reading query plans: which indexes a statement's plan scans, which scans
//! ran, and what a transaction read, for tests that pin a plan down
//! whatever the statistics say.

use serde_json::Value;

/// Every node of a plan from `EXPLAIN (FORMAT JSON)` (the whole answer: an
/// array holding one object with a `Plan`).
fn plan_nodes(explained: &Value) -> Vec<&Value> {
    let mut nodes = Vec::new();
    let mut pending = vec![&explained[0]["Plan"]];
    while let Some(node) = pending.pop() {
        nodes.push(node);
        pending.extend(
            node.get("Plans")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        );
    }
    nodes
}

/// Every index named anywhere in a plan from `EXPLAIN (FORMAT JSON)`.
pub fn plan_indexes(explained: &Value) -> Vec<String> {
    plan_nodes(explained)
        .into_iter()
        .filter_map(|node| node.get("Index Name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// The scans of `relation` that ran in a plan from `EXPLAIN (ANALYZE,
/// FORMAT JSON)`, by node type ("Seq Scan", "Index Scan" …); a scan the
/// executor never reached (a one-time filter was false) is left out.
pub fn executed_scans(explained: &Value, relation: &str) -> Vec<String> {
    plan_nodes(explained)
        .into_iter()
        .filter(|node| node.get("Relation Name").and_then(Value::as_str) == Some(relation))
        .filter(|node| {
            node.get("Actual Loops")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                > 0
        })
        .filter_map(|node| node.get("Node Type").and_then(Value::as_str))
        .filter(|node_type| node_type.ends_with("Scan"))
        .map(str::to_owned)
        .collect()
}

/// One of PostgreSQL's per-transaction counters for `table`
/// (`pg_stat_xact_user_tables`: `seq_scan`, `idx_tup_fetch`, `n_tup_ins` …;
/// 0 when the transaction has not touched the table).
pub async fn table_stat_in_transaction(
    conn: &mut sqlx::PgConnection,
    table: &str,
    counter: &str,
) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT coalesce(max({counter}), 0) FROM pg_stat_xact_user_tables WHERE relname = $1"
    )))
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// Rows of `table` this transaction has read so far, by sequential scans
/// and through indexes.
pub async fn rows_read_in_transaction(conn: &mut sqlx::PgConnection, table: &str) -> i64 {
    table_stat_in_transaction(conn, table, "seq_tup_read").await
        + table_stat_in_transaction(conn, table, "idx_tup_fetch").await
}
