//! Idempotent effects: do a side effect at most once per key, even when the
//! job runs again (a crash after the effect, a duplicate wake-up, a stale
//! worker that woke up late).
//!
//! Use it inside one transaction together with the effect itself:
//!
//! ```no_run
//! use jobwire_core::effects::{self, Effect};
//! # async fn charge_in_same_database(tx: &mut sqlx::PgConnection) -> Result<String, sqlx::Error> {
//! #     Ok(String::new())
//! # }
//! # async fn example(pool: sqlx::PgPool, job_id: uuid::Uuid) -> Result<(), Box<dyn std::error::Error>> {
//!
//! let key = effects::effect_key(job_id, "charge-card");
//! let mut tx = pool.begin().await?;
//! let receipt: String = match effects::begin(&mut tx, &key, job_id).await? {
//!     Effect::Done(receipt) => receipt,              // done before: reuse its outcome
//!     Effect::New => {
//!         let receipt = charge_in_same_database(&mut tx).await?;
//!         effects::finish(&mut tx, &key, &receipt).await?;
//!         receipt
//!     }
//! };
//! tx.commit().await?;
//! # Ok(())
//! # }
//! ```
//!
//! For effects outside the database (an HTTP call), pass the effect key (or
//! the job id) to the other system as its idempotency key: the
//! `Idempotency-Key` header, a Stripe idempotency key, an SQS FIFO
//! deduplication id. The key stays the same across attempts of one job.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{Error, Result};

/// The effect key for one operation of one job: stable across attempts.
pub fn effect_key(job_id: Uuid, operation: &str) -> String {
    format!("{job_id}/{operation}")
}

/// What [`begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<T> {
    /// The key is now held by this transaction: do the effect, then
    /// [`finish`] and commit.
    New,
    /// The effect was done (and committed) before; here is its outcome.
    Done(T),
}

/// Claim `key` for `job_id` in the caller's transaction, or return the
/// outcome stored by whoever did the effect before.
pub async fn begin<T: DeserializeOwned>(
    conn: &mut PgConnection,
    key: &str,
    job_id: Uuid,
) -> Result<Effect<T>> {
    if key.is_empty() {
        return Err(Error::InvalidArgument {
            argument: "effect_key",
            reason: "must not be empty".into(),
        });
    }
    let claimed: Option<String> = sqlx::query_scalar(include_str!("../sql/begin_effect.sql"))
        .bind(key)
        .bind(job_id)
        .fetch_optional(&mut *conn)
        .await?;
    if claimed.is_some() {
        return Ok(Effect::New);
    }
    let outcome: Option<serde_json::Value> =
        sqlx::query_scalar(include_str!("../sql/effect_outcome.sql"))
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
    let value = outcome.unwrap_or(serde_json::Value::Null);
    serde_json::from_value(value)
        .map(Effect::Done)
        .map_err(|err| Error::InvalidArgument {
            argument: "effect outcome",
            reason: format!("stored outcome of {key} does not decode: {err}"),
        })
}

/// Store the outcome of an effect claimed with [`begin`] (same transaction).
pub async fn finish<T: Serialize>(conn: &mut PgConnection, key: &str, outcome: &T) -> Result<()> {
    let value = serde_json::to_value(outcome).map_err(|err| Error::InvalidArgument {
        argument: "effect outcome",
        reason: err.to_string(),
    })?;
    sqlx::query(include_str!("../sql/finish_effect.sql"))
        .bind(key)
        .bind(value)
        .execute(&mut *conn)
        .await?;
    Ok(())
}
