//! A job id on the command line, with an error that says what one looks
//! like rather than where the UUID parser stopped.

use uuid::Uuid;

/// Parse the job id of `status`, `cancel` and `replay`.
pub(crate) fn job_id(text: &str) -> Result<Uuid, String> {
    text.trim().parse().map_err(|_| {
        format!(
            "{text:?} is not a job id: a UUID like 01938f5e-7c3a-7d2b-9f4e-2a6c1b8d0e5f, as `jobwire enqueue` prints it"
        )
    })
}
