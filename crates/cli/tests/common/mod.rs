//! Helpers shared by the CLI tests.

use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

/// A database of its own for one test, dropped at the end.
pub struct FreshDatabase {
    admin_url: String,
    name: String,
    /// The test database's URL.
    pub url: String,
}

impl FreshDatabase {
    pub async fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("jobwire_cli_{}", Uuid::now_v7().simple());
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

    pub async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url).await.unwrap()
    }

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
