//! Connecting to PostgreSQL, with the password kept out of error messages.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use jobwire_core::SchemaState;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// How long the first connection may take before we say the server does not
/// answer (a firewall that drops packets, a wrong host).
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a long-running process (worker, relay, run, serve) waits at
/// startup for a database that refuses connections or is starting up.
pub(crate) const STARTUP_WAIT: Duration = Duration::from_secs(60);

/// A pool to `url`. One connection is opened first, on its own, so that an
/// operator sees the real cause at once — connection refused, password
/// authentication failed, database does not exist — instead of a pool
/// timing out after seconds of retries.
///
/// With `wait`, a server that refuses connections or says it is starting
/// or shutting down (a restart, a failover) is retried, with a warning, for
/// up to that long: a worker restarted beside its database comes up when
/// the database does instead of exiting. Verdicts (a wrong password, a
/// missing database) fail at once either way.
///
/// The sessions take `application_name` unless the URL (or `PGAPPNAME`)
/// names one.
pub(crate) async fn connect(
    url: &str,
    pool_size: u32,
    wait: Option<Duration>,
    application_name: &str,
) -> Result<PgPool> {
    let shown = redact(url);
    require_postgres_url(url)?;
    let mut options: PgConnectOptions = url
        .parse()
        .with_context(|| format!("invalid database URL {shown}"))?;
    if options.get_application_name().is_none() {
        options = options.application_name(application_name);
    }
    let deadline = wait.map(|wait| tokio::time::Instant::now() + wait);
    let mut pause = jobwire_loop::Pause::new(Duration::from_millis(250), Duration::from_secs(2));
    let first = loop {
        let attempt = tokio::time::timeout(FIRST_CONNECT_TIMEOUT, options.connect()).await;
        match attempt {
            Ok(Ok(connection)) => break connection,
            Ok(Err(err))
                if is_startup_transient(&err)
                    && deadline.is_some_and(|deadline| tokio::time::Instant::now() < deadline) =>
            {
                tracing::warn!(error = %err, "PostgreSQL at {shown} is not accepting connections yet; retrying");
                tokio::time::sleep(pause.next_after_failure()).await;
            }
            Ok(Err(err)) => {
                // The reason once: sqlx repeats the database's message in
                // its error's source, with the server's C source line.
                bail!(
                    "cannot connect to PostgreSQL at {shown}: {}",
                    jobwire_core::database_message(&err)
                );
            }
            // A server failing over can drop packets for a while: no answer
            // is retried too, within the wait.
            Err(_) if deadline.is_some_and(|deadline| tokio::time::Instant::now() < deadline) => {
                tracing::warn!(
                    "PostgreSQL at {shown} gave no answer within {} s; retrying",
                    FIRST_CONNECT_TIMEOUT.as_secs()
                );
            }
            Err(_) => bail!(
                "cannot connect to PostgreSQL at {shown}: no answer within {} s",
                FIRST_CONNECT_TIMEOUT.as_secs()
            ),
        }
    };
    let _ = first.close().await;
    PgPoolOptions::new()
        .max_connections(pool_size)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {shown}"))
}

/// A connection failure that a restarting server gives: refused or reset
/// connections, "the database system is starting up / shutting down", and
/// "too many clients", which a crowd of clients reconnecting after a
/// restart gives for a moment.
fn is_startup_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        ),
        sqlx::Error::Database(db) => {
            matches!(
                db.code().as_deref(),
                Some("57P01" | "57P02" | "57P03" | "53300")
            )
        }
        _ => false,
    }
}

/// Long-running processes (workers, relays) never change the schema: in
/// production a schema change is an explicit step (`jobwire migrate`), so a
/// rolling deploy never has a new process lock the hot table. Fails with
/// what to run when the schema is missing or behind.
pub(crate) async fn require_current_schema(pool: &PgPool) -> Result<()> {
    match jobwire_core::schema_state(pool).await? {
        SchemaState::Current => Ok(()),
        SchemaState::Empty => bail!(
            "this database has no jobwire schema: run `jobwire migrate` first (workers and relays never change the schema themselves)"
        ),
        SchemaState::Behind { pending } => bail!(
            "the database schema is behind this jobwire version ({} migration(s) pending: {pending:?}): run `jobwire migrate` first",
            pending.len()
        ),
        other => bail!("unexpected schema state {other:?}"),
    }
}

/// `jobwire run` (everything in one process, for development and small
/// deployments) migrates an empty database itself; a database whose schema
/// is merely behind still needs the explicit `jobwire migrate`.
pub(crate) async fn migrate_if_empty(pool: &PgPool) -> Result<()> {
    if jobwire_core::schema_state(pool).await? == SchemaState::Empty {
        tracing::info!("empty database: applying the jobwire schema");
        jobwire_core::migrate(pool).await?;
        return Ok(());
    }
    require_current_schema(pool).await
}

/// Add what to do to errors an operator can fix: a missing table means the
/// schema was never applied.
pub(crate) fn explain(err: anyhow::Error) -> anyhow::Error {
    let undefined_table = err.chain().any(|cause| {
        let sqlx_error = cause.downcast_ref::<sqlx::Error>().or_else(|| {
            match cause.downcast_ref::<jobwire_core::Error>() {
                Some(jobwire_core::Error::Database(inner)) => Some(inner),
                _ => None,
            }
        });
        matches!(sqlx_error, Some(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01"))
    });
    if undefined_table {
        return err
            .context("the database has no jobwire schema (or an old one): run `jobwire migrate`");
    }
    err
}

/// The driver reads any scheme's URL as PostgreSQL's (a `mysql://` URL
/// reached the PostgreSQL server on its port): refuse any other scheme.
pub(crate) fn require_postgres_url(url: &str) -> Result<()> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
        bail!(
            "{} is not a PostgreSQL URL: it must start with postgres:// or postgresql://",
            redact(url)
        );
    }
    Ok(())
}

/// The URL without its password, for error messages: the one before the
/// host, a `password` (or `sslpassword`) parameter of the query, and in a
/// connection string of key=value pairs (not a URL) any such pair's value.
pub(crate) fn redact(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return redact_key_values(&redact_unparsed_userinfo(url));
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query_pairs().any(|(key, _)| is_password_key(&key)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(key, value)| {
                let value = if is_password_key(&key) {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (key.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// A URL the parser refused (a bad port, say) may still hold
/// `user:password@`: the part between the user's `:` and the `@` is masked.
fn redact_unparsed_userinfo(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return text.to_owned();
    };
    let Some(colon) = authority[..at].find(':') else {
        return text.to_owned();
    };
    format!("{scheme}://{}:***{}", &authority[..colon], &rest[at..])
}

fn is_password_key(key: &str) -> bool {
    key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword")
}

/// `host=db password=secret` as `host=db password=***`: each value of a
/// password key, up to the next space (or its closing quote), masked.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(value_start) = next_password_value(rest) {
        out.push_str(&rest[..value_start]);
        out.push_str("***");
        let value = &rest[value_start..];
        let value_len = match value.strip_prefix('\'') {
            Some(quoted) => quoted.find('\'').map_or(value.len(), |end| end + 2),
            // A space ends it in a key=value string, a `&` in a URL's query.
            None => value
                .find(|c: char| c.is_whitespace() || c == '&')
                .unwrap_or(value.len()),
        };
        rest = &rest[value_start + value_len..];
    }
    out.push_str(rest);
    out
}

/// Where the value of the next `password=` (or `sslpassword =`) starts in
/// `text`.
fn next_password_value(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key_end = from + found + "password".len();
        let after = &text[key_end..];
        let spaces = after.len() - after.trim_start().len();
        if after.trim_start().starts_with('=') {
            let value = &after[spaces + 1..];
            let value_spaces = value.len() - value.trim_start().len();
            return Some(key_end + spaces + 1 + value_spaces);
        }
        from = key_end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::redact;

    /// A password never reaches an error message, in any spelling of a
    /// connection string that carries one.
    #[test]
    fn every_spelling_of_a_password_is_masked() {
        for (given, shown) in [
            (
                "postgres://app:hunter2@db:5432/jobs",
                "postgres://app:***@db:5432/jobs",
            ),
            (
                "postgres://app@db/jobs?password=hunter2&sslmode=require",
                "postgres://app@db/jobs?password=***&sslmode=require",
            ),
            (
                "postgres://db/jobs?user=app&PASSWORD=hunter2",
                "postgres://db/jobs?user=app&PASSWORD=***",
            ),
            (
                "host=db password=hunter2 dbname=jobs",
                "host=db password=*** dbname=jobs",
            ),
            (
                "host=db password = 'hunter 2' sslpassword=x2",
                "host=db password = *** sslpassword=***",
            ),
            ("postgres://app@db/jobs", "postgres://app@db/jobs"),
            // Refused by the URL parser (a bad port): masked all the same.
            (
                "postgres://app:hunter2@db:54x2/jobs?password=hunter2&sslmode=require",
                "postgres://app:***@db:54x2/jobs?password=***&sslmode=require",
            ),
        ] {
            let redacted = redact(given);
            assert_eq!(redacted, shown, "{given}");
            assert!(!redacted.contains("hunter"), "{redacted}");
        }
    }
}
