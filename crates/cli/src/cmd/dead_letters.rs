//! `jobwire dead-letters`: listing FAILED jobs grouped by type and error code.

use crate::output::visible;
use anyhow::Result;
use sqlx::PgPool;

pub(crate) async fn dead_letters(pool: &PgPool, json: bool) -> Result<()> {
    let groups = jobwire_core::dead_letter_groups(pool).await?;
    if json {
        outln!("{}", crate::output::json_pretty(&groups)?);
        return Ok(());
    }
    if groups.is_empty() {
        outln!("no dead letters");
        return Ok(());
    }
    outln!(
        "{:>7}  {:<24} {:<24} {:<20} {}",
        "JOBS",
        "TYPE",
        "ERROR CODE",
        "FIRST FAILED",
        "LAST FAILED"
    );
    let at = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map(|at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| "-".into())
    };
    for group in groups {
        outln!(
            "{:>7}  {:<24} {:<24} {:<20} {}",
            group.jobs,
            visible(&group.job_type),
            visible(group.last_error_code.as_deref().unwrap_or("-")),
            at(group.first_failed_at),
            at(group.last_failed_at),
        );
        if let Some(error) = group.sample_error.as_deref().and_then(first_line) {
            outln!("{:>7}  newest error: {error}", "");
        }
        if let Some(replay) = replay_command(&group.job_type, group.last_error_code.as_deref()) {
            outln!("{:>7}  replay: {replay}", "");
            if group.last_error_code.is_none() {
                outln!(
                    "{:>7}          (no code to name: this replays every FAILED job of the type)",
                    ""
                );
            }
        }
    }
    outln!();
    outln!(
        "A group's jobs: the dashboard's dead letters page, or GET /jobs?state=FAILED&type=TYPE&errorCode=CODE."
    );
    Ok(())
}

/// The command that replays one group, to copy; `None` when a word holds
/// a control character (no line typed at a terminal could carry it).
/// Values go as `--flag=value`, so one starting with `-` is not read as a
/// flag. A group without an error code has no flag of its own: the
/// command replays the type's every code, which the listing says beside it.
fn replay_command(job_type: &str, error_code: Option<&str>) -> Option<String> {
    let mut command = format!("jobwire replay --job-type={}", shell_word(job_type)?);
    if let Some(code) = error_code {
        command.push_str(" --error-code=");
        command.push_str(&shell_word(code)?);
    }
    Some(command)
}

/// `word` as one word for a POSIX shell: bare when it holds nothing the
/// shell reads specially, else in single quotes.
fn shell_word(word: &str) -> Option<String> {
    if word.chars().any(char::is_control) {
        return None;
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.:/@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return Some(word.to_owned());
    }
    Some(format!("'{}'", word.replace('\'', r"'\''")))
}

/// The first line of an error, cut to fit a terminal line (a stack trace
/// or a response body would drown the listing; `--json` has it whole), with
/// control characters escaped as everywhere else ([`visible`]): a job's
/// error must not drive the operator's terminal.
fn first_line(error: &str) -> Option<String> {
    const WIDTH: usize = 100;
    let line = error.lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let mut shown: String = line.chars().take(WIDTH).collect();
    if line.chars().nth(WIDTH).is_some() {
        shown.push('…');
    }
    Some(visible(&shown).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_replay_command_is_one_word_per_value() {
        assert_eq!(
            replay_command("deliver_webhook", Some("HTTP_503")).as_deref(),
            Some("jobwire replay --job-type=deliver_webhook --error-code=HTTP_503")
        );
        assert_eq!(
            replay_command("send_email", None).as_deref(),
            Some("jobwire replay --job-type=send_email")
        );
        assert_eq!(
            replay_command("send_email", Some("it's $HOME")).as_deref(),
            Some(r"jobwire replay --job-type=send_email --error-code='it'\''s $HOME'")
        );
        // A value that starts with `-` stays a value.
        assert_eq!(
            replay_command("send_email", Some("-1")).as_deref(),
            Some("jobwire replay --job-type=send_email --error-code=-1")
        );
        assert_eq!(replay_command("send_email", Some("bad\u{1b}[2J")), None);
    }
}
