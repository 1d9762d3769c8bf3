//! LISTEN/NOTIFY: wakes the drain tasks when new outbox rows are announced.

use std::sync::Arc;

use jobwire_loop::Wake;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// The LISTEN/NOTIFY channel that announces new outbox rows.
pub const OUTBOX_CHANNEL: &str = "jobwire_outbox";

/// Forward NOTIFYs on [`OUTBOX_CHANNEL`] to the drain tasks: every
/// notification, and every moment some may have been missed, wakes all of
/// them (they check the table, which is the truth), a task in the middle of
/// a pass as soon as the pass ends.
pub(crate) async fn listen(pool: PgPool, wake: Arc<Wake>, shutdown: CancellationToken) {
    jobwire_loop::listen(pool, OUTBOX_CHANNEL, shutdown, |_| wake.send()).await;
}
