//! `jobwire outbox`: the outbox's dead letters (rows the relay moved to
//! `job_outbox_dead` after bounded attempts), listed and moved back.

use crate::output::visible;
use anyhow::{Result, bail};
use jobwire_core::OutboxReplayFilter;
use sqlx::PgPool;

#[derive(clap::Subcommand)]
pub(crate) enum OutboxCommand {
    /// List outbox dead letters grouped by topic and last error.
    DeadLetters {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Move outbox dead letters back into the outbox (audited in
    /// job_outbox_audit): by id, or a group by topic and/or error.
    Replay(OutboxReplayArgs),
}

#[derive(clap::Args)]
pub(crate) struct OutboxReplayArgs {
    /// Replay these outbox ids.
    #[arg(long = "id", value_parser = outbox_id)]
    ids: Vec<i64>,
    /// Replay rows of this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Replay rows whose last error begins with this: the error as `dead-letters`
    /// shows it, or its first words.
    #[arg(long)]
    error: Option<String>,
    /// Most rows moved back in one statement (repeated until none is left).
    #[arg(long, default_value_t = 1000)]
    batch_size: i64,
    /// Who is replaying (recorded in job_outbox_audit).
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
    /// Why (recorded in job_outbox_audit).
    #[arg(long, default_value = "replayed from the command line")]
    reason: String,
}

pub(crate) async fn outbox(pool: &PgPool, command: OutboxCommand) -> Result<()> {
    match command {
        OutboxCommand::DeadLetters { json } => dead_letters(pool, json).await,
        OutboxCommand::Replay(args) => replay(pool, args).await,
    }
}

/// UTC to the second: the listing's columns keep their width.
const TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%SZ";

async fn dead_letters(pool: &PgPool, json: bool) -> Result<()> {
    let groups = jobwire_core::outbox_dead_groups(pool).await?;
    if json {
        outln!("{}", crate::output::json_pretty(&groups)?);
        return Ok(());
    }
    if groups.is_empty() {
        outln!("no outbox dead letters");
        return Ok(());
    }
    outln!(
        "{:>7}  {:<32} {:<20} {:<20} last error",
        "rows",
        "topic",
        "first failed",
        "last failed"
    );
    for group in groups {
        outln!(
            "{:>7}  {:<32} {:<20} {:<20} {}",
            group.count,
            visible(&group.topic),
            group.first_failed_at.format(TIME_FORMAT).to_string(),
            group.last_failed_at.format(TIME_FORMAT).to_string(),
            if group.last_error.is_empty() {
                "-".into()
            } else {
                visible(&group.last_error)
            }
        );
    }
    Ok(())
}

async fn replay(pool: &PgPool, args: OutboxReplayArgs) -> Result<()> {
    if args.ids.is_empty() && args.topic.is_none() && args.error.is_none() {
        bail!("name outbox ids with --id, or a group with --topic and/or --error");
    }
    if args.topic.as_deref().is_some_and(|t| t.trim().is_empty()) {
        bail!(
            "--topic must not be empty: name the topic as `jobwire outbox dead-letters` lists it"
        );
    }
    if args.error.as_deref().is_some_and(|e| e.trim().is_empty()) {
        bail!(
            "--error must not be empty: every error begins with nothing, so it would replay \
             the whole topic; leave --error out if that is what you mean"
        );
    }
    if args.batch_size < 1 {
        bail!("--batch-size must be at least 1");
    }
    let asked_for = args.ids.clone();
    let filter = OutboxReplayFilter {
        topic: args.topic,
        last_error: args.error,
        ids: (!args.ids.is_empty()).then_some(args.ids),
        limit: args.batch_size,
    };
    // In batches, so a large group never holds one long transaction.
    let mut moved_back = Vec::new();
    loop {
        let moved =
            jobwire_core::replay_outbox_dead(pool, &filter, &args.actor, &args.reason).await?;
        let last_batch = moved.len() < filter.limit as usize;
        moved_back.extend(moved);
        if last_batch {
            break;
        }
    }
    let total = moved_back.len();
    // Nothing said on stdout when nothing moved: the error below says why
    // (a "0 rows moved" line beside an error read as two answers).
    if total > 0 {
        outln!(
            "{total} outbox {} moved back for publishing",
            if total == 1 { "row" } else { "rows" }
        );
    }
    // Ids asked for by name that did not move are a mistake worth a
    // non-zero exit: a typo, or a row that was never (or is no longer) a
    // dead letter of this topic and error.
    let missing: Vec<String> = asked_for
        .iter()
        .filter(|id| !moved_back.contains(id))
        .map(i64::to_string)
        .collect();
    // A group that matched nothing is as likely a mistyped topic or error.
    if asked_for.is_empty() && total == 0 {
        bail!(
            "no outbox dead letter matches --topic/--error (see `jobwire outbox dead-letters`; \
             --error takes the error as listed there, or its first words)"
        );
    }
    if !missing.is_empty() {
        bail!(
            "not an outbox dead letter{}: {} (see `jobwire outbox dead-letters`)",
            if filter.topic.is_some() || filter.last_error.is_some() {
                " matching --topic/--error"
            } else {
                ""
            },
            missing.join(", ")
        );
    }
    Ok(())
}

/// `--id`: an outbox row's id, a whole number (`job_outbox_dead.id`).
fn outbox_id(text: &str) -> Result<i64, String> {
    text.parse::<i64>().map_err(|_| {
        format!(
            "{text:?} is not an outbox row id: a whole number, the id column of job_outbox_dead"
        )
    })
}
