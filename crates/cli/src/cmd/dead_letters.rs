//! `jobwire dead-letters`: listing FAILED jobs grouped by type and error code.

use anyhow::Result;
use sqlx::PgPool;

pub(crate) async fn dead_letters(pool: &PgPool, json: bool) -> Result<()> {
    let groups = jobwire_core::dead_letter_groups(pool).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&groups)?);
        return Ok(());
    }
    if groups.is_empty() {
        outln!("no dead letters");
    }
    for group in groups {
        outln!(
            "{:>7}  {:<24} {:<24} last failed {}",
            group.jobs,
            group.job_type,
            group.last_error_code.as_deref().unwrap_or("-"),
            group
                .last_failed_at
                .map(|at| at.to_rfc3339())
                .unwrap_or_default()
        );
        if let Some(error) = group.sample_error.as_deref().and_then(first_line) {
            outln!("{:>7}  newest error: {error}", "");
        }
    }
    Ok(())
}

/// The first line of an error, cut to fit a terminal line (a stack trace
/// or a response body would drown the listing; `--json` has it whole), with
/// control characters shown as `?`: a job's error must not drive the
/// operator's terminal.
fn first_line(error: &str) -> Option<String> {
    const WIDTH: usize = 100;
    let line = error.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let mut shown: String = line
        .chars()
        .take(WIDTH)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if line.chars().nth(WIDTH).is_some() {
        shown.push('…');
    }
    Some(shown)
}
