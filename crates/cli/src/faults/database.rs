//! The scenario's own database: created beside the one `DATABASE_URL`
//! names, dropped afterwards unless kept.

use anyhow::{Context, Result};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};
use uuid::Uuid;

use crate::database::redact;

/// The scenario's own database, created beside the one `server_url` names.
pub(crate) struct ScenarioDatabase {
    admin: PgConnectOptions,
    pub(crate) name: String,
    pub(crate) url: String,
    /// This run's id (the end of the database's name), in its topics.
    pub(crate) run: String,
}

impl ScenarioDatabase {
    pub(crate) async fn create(server_url: &str) -> Result<ScenarioDatabase> {
        let options: PgConnectOptions = server_url
            .parse()
            .with_context(|| format!("invalid database URL {}", redact(server_url)))?;
        let admin = options.clone().database("postgres");
        let name = format!("jobwire_faults_{}", Uuid::now_v7().simple());
        let mut connection = admin
            .connect()
            .await
            .with_context(|| format!("cannot connect to PostgreSQL at {}", redact(server_url)))?;
        // The name is made of hex digits above: nothing to quote.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok(ScenarioDatabase {
            admin,
            run: name[name.len() - 8..].to_owned(),
            url: database_url(server_url, &name)?,
            name,
        })
    }

    pub(crate) async fn drop_database(&self) -> Result<()> {
        let mut connection = self.admin.connect().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut connection)
        .await?;
        Ok(())
    }
}

/// The URL of database `name` on the server `server_url` names.
pub(crate) fn database_url(server_url: &str, name: &str) -> Result<String> {
    let mut url = url::Url::parse(server_url)
        .with_context(|| format!("invalid database URL {}", redact(server_url)))?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}
