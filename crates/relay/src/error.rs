//! The relay's error type.

/// Why the relay could not run or a pass failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// Settings that cannot work.
    #[error(transparent)]
    Config(#[from] jobwire_loop::InvalidSetting),
    /// The database failed (the pass is retried after a pause).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A drain loop (or the LISTEN or shard loop) ended before shutdown: a
    /// bug. The relay stopped rather than stay up publishing nothing.
    #[error("a relay loop ended: {0}; the relay stopped")]
    LoopEnded(String),
}
