//! The machine's own ceiling for one-row transactions: how many single-row
//! insert transactions per second `clients` connections commit, measured
//! right before the single-job end-to-end runs so that the two figures come
//! from the same moment of the same run.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sqlx::PgPool;

/// What the probe measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommitRate {
    /// Concurrent connections (the end-to-end run's producer count).
    pub clients: usize,
    /// How long it ran.
    pub seconds: f64,
    /// Committed single-row insert transactions per second.
    pub commits_per_second: f64,
    /// `pgbench`, or `in-process` where pgbench is not installed (the
    /// harness's own client running the same transaction; the report says
    /// which it was).
    pub tool: &'static str,
}

/// The transaction pgbench runs: `BEGIN; INSERT one row; COMMIT`.
const PGBENCH_SCRIPT: &str = "BEGIN;\nINSERT INTO bench_commit_rate (v) VALUES (1);\nCOMMIT;\n";

/// Measure for `duration` with `clients` connections: pgbench when it is on
/// the PATH, else the in-process equivalent.
pub async fn commit_rate(pool: &PgPool, clients: usize, duration: Duration) -> Result<CommitRate> {
    let clients = clients.max(1);
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_commit_rate (id bigserial PRIMARY KEY, v int NOT NULL)",
    )
    .execute(pool)
    .await?;
    let measured = match pgbench(pool, clients, duration).await {
        Ok(rate) => Ok(rate),
        Err(err)
            if err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|err| err.kind() == std::io::ErrorKind::NotFound) =>
        {
            tracing::info!(error = %err, "pgbench is not available; measuring in process");
            in_process(pool, clients, duration).await
        }
        Err(err) => Err(err),
    };
    sqlx::query("TRUNCATE bench_commit_rate")
        .execute(pool)
        .await?;
    measured
}

/// pgbench with connections of its own to the harness's host, port, user
/// and database (a password comes from pgbench's environment, `PGPASSWORD`
/// or `~/.pgpass`); the script is read from its standard input.
async fn pgbench(pool: &PgPool, clients: usize, duration: Duration) -> Result<CommitRate> {
    use tokio::io::AsyncWriteExt as _;
    let options = pool.connect_options();
    let seconds = duration.as_secs().max(1);
    let mut command = tokio::process::Command::new("pgbench");
    command
        .args([
            "-n",
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(4).to_string(),
        ])
        .args(["-T", &seconds.to_string(), "-f", "-"])
        .args([
            "-h",
            options.get_host(),
            "-p",
            &options.get_port().to_string(),
        ])
        .args(["-U", options.get_username()])
        .arg(options.get_database().unwrap_or("postgres"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let mut stdin = child.stdin.take().context("pgbench's stdin")?;
    stdin.write_all(PGBENCH_SCRIPT.as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        bail!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tps = transactions_per_second(&stdout)
        .with_context(|| format!("no tps line in pgbench's output:\n{stdout}"))?;
    Ok(CommitRate {
        clients,
        seconds: seconds as f64,
        commits_per_second: tps,
        tool: "pgbench",
    })
}

/// pgbench's rate: the `tps = ` line without the connections' set-up
/// (pgbench 13 and older print one with it first, then one without).
fn transactions_per_second(stdout: &str) -> Option<f64> {
    let rates: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("tps = "))
        .collect();
    let line = rates
        .iter()
        .find(|line| line.contains("excluding connections establishing"))
        .or(rates.first())?;
    line.strip_prefix("tps = ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The same transaction, `BEGIN; INSERT; COMMIT`, from `clients` tasks of
/// this process, each on a connection of its own.
async fn in_process(pool: &PgPool, clients: usize, duration: Duration) -> Result<CommitRate> {
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(clients).unwrap_or(u32::MAX))
        .connect_with((*pool.connect_options()).clone())
        .await?;
    // Every connection open before the clock starts, as pgbench's rate is
    // read without its connections' set-up.
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(own.acquire().await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for mut conn in connections {
        tasks.spawn(async move {
            let mut commits = 0u64;
            while Instant::now() < deadline {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                sqlx::query("INSERT INTO bench_commit_rate (v) VALUES (1)")
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                commits += 1;
            }
            anyhow::Ok(commits)
        });
    }
    let mut commits = 0;
    while let Some(done) = tasks.join_next().await {
        commits += done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    own.close().await;
    Ok(CommitRate {
        clients,
        seconds,
        commits_per_second: commits as f64 / seconds,
        tool: "in-process",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_without_the_connections_set_up() {
        let pgbench_15 = "number of failed transactions: 0 (0.000%)\nlatency average = 2.077 ms\ninitial connection time = 9.190 ms\ntps = 3851.962845 (without initial connection time)\n";
        assert_eq!(transactions_per_second(pgbench_15), Some(3851.962845));
        let pgbench_13 = "latency average = 2.1 ms\ntps = 3700.5 (including connections establishing)\ntps = 3810.25 (excluding connections establishing)\n";
        assert_eq!(transactions_per_second(pgbench_13), Some(3810.25));
        assert_eq!(transactions_per_second("pgbench: error\n"), None);
    }
}
