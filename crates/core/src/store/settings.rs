//! Settings every enqueue path reads from the database (`job_settings`).

use sqlx::PgExecutor;

use crate::{Error, Result};

/// The hard ceiling on payloads (the `jobs_payload_size` constraint); the
/// configurable limit may not exceed it.
pub const PAYLOAD_CEILING_BYTES: usize = 1024 * 1024;

/// The payload limit in force: the largest payload, in bytes of its jsonb
/// text form (`payload::text`), that an enqueue accepts. The Rust library,
/// the SQL function `jobwire_enqueue` and the HTTP API all apply it.
pub async fn max_payload_bytes<'c, E: PgExecutor<'c>>(executor: E) -> Result<usize> {
    let bytes: i32 = sqlx::query_scalar(include_str!("../../sql/max_payload_bytes.sql"))
        .fetch_one(executor)
        .await?;
    Ok(usize::try_from(bytes).unwrap_or(0))
}

/// Change the payload limit for every enqueue path at once (2 bytes to
/// [`PAYLOAD_CEILING_BYTES`]).
pub async fn set_max_payload_bytes<'c, E: PgExecutor<'c>>(executor: E, bytes: usize) -> Result<()> {
    let bytes = i32::try_from(bytes)
        .ok()
        .filter(|bytes| (2..=PAYLOAD_CEILING_BYTES as i32).contains(bytes))
        .ok_or_else(|| Error::InvalidArgument {
            argument: "max_payload_bytes",
            reason: format!("must be 2 to {PAYLOAD_CEILING_BYTES} bytes, got {bytes}"),
        })?;
    sqlx::query(include_str!("../../sql/set_max_payload_bytes.sql"))
        .bind(bytes)
        .execute(executor)
        .await?;
    Ok(())
}
