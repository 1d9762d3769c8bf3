//! [`FreshDatabase`]: a database of its own for a test that cannot use
//! `#[sqlx::test]` (one that runs the `jobwire` binary against a URL); and
//! [`wait_for_count`], to wait on such a process from its database; and
//! [`until_a_session_waits_for_a_lock`], to stage a race between sessions.

use std::time::Duration;

use anyhow::{Result, bail};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

/// Poll until `query` (a count, with `bind` as its one parameter) returns
/// `expected`, or fail after `timeout` with the last count. A query that
/// errors counts as "not yet": it can race a process's start-up (the
/// schema not migrated yet).
pub async fn wait_for_count(
    pool: &PgPool,
    query: &str,
    bind: &str,
    expected: i64,
    timeout: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .bind(bind)
            .fetch_one(pool)
            .await
            .unwrap_or(-1);
        if count == expected {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "stuck at {count} (-1: the query failed), {expected} expected, after {timeout:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until some session of `pool`'s database waits for a lock: a
/// statement a test started on another connection has reached the row
/// (or advisory) lock the test holds. Panics after 10 s.
pub async fn until_a_session_waits_for_a_lock(pool: &PgPool) {
    for _ in 0..1000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no session waited for a lock within 10 s");
}

/// A database of its own for one test, dropped at the end. The server is
/// `DATABASE_URL`'s (default: the local PostgreSQL `scripts/services`
/// starts); the database is empty, with no migrations applied.
pub struct FreshDatabase {
    admin_url: String,
    name: String,
    /// The test database's URL.
    pub url: String,
}

impl FreshDatabase {
    /// Create an empty database with a unique name.
    pub async fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("jobwire_test_{}", Uuid::now_v7().simple());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap();
        // The name is generated above from hex digits only.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let base = admin_url.rsplit_once('/').unwrap().0;
        let url = format!("{base}/{name}");
        FreshDatabase {
            admin_url,
            name,
            url,
        }
    }

    /// A pool on the test database.
    pub async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url).await.unwrap()
    }

    /// Drop the test database, closing any connection still open to it.
    pub async fn drop_database(self) {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
    }
}
