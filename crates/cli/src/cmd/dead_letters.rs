//! `jobwire dead-letters`: listing FAILED jobs grouped by type and error code.

use anyhow::Result;
use sqlx::PgPool;

pub(crate) async fn dead_letters(pool: &PgPool) -> Result<()> {
    let groups = jobwire_core::dead_letter_groups(pool).await?;
    if groups.is_empty() {
        println!("no dead letters");
    }
    for group in groups {
        println!(
            "{:>7}  {:<24} {:<24} last failed {}",
            group.jobs,
            group.job_type,
            group.last_error_code.as_deref().unwrap_or("-"),
            group
                .last_failed_at
                .map(|at| at.to_rfc3339())
                .unwrap_or_default()
        );
    }
    Ok(())
}
