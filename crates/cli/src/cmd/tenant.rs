//! `jobwire tenant`: per-queue caps on how many of one tenant's jobs run at
//! once (docs/tenants.md).

use anyhow::Result;
use sqlx::PgPool;

#[derive(clap::Subcommand)]
pub(crate) enum TenantCommand {
    /// Cap how many jobs of one tenant run at once on a queue: the queue's
    /// default for every tenant, or with --tenant an override for one.
    Set {
        /// The queue.
        queue: String,
        /// The tenant to override (default: every tenant of the queue).
        #[arg(long)]
        tenant: Option<String>,
        /// Most running jobs per tenant (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..),
              required_unless_present = "remove", conflicts_with = "remove")]
        max_running: Option<u32>,
        /// Remove the cap instead (an override falls back to the default).
        #[arg(long)]
        remove: bool,
    },
    /// Show a queue's caps and each tenant's running and waiting jobs.
    List {
        /// The queue.
        queue: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn tenant(pool: &PgPool, command: TenantCommand) -> Result<()> {
    match command {
        TenantCommand::Set {
            queue,
            tenant,
            max_running,
            remove: _,
        } => {
            jobwire_core::set_tenant_cap(pool, &queue, tenant.as_deref(), max_running).await?;
            let whom = match &tenant {
                Some(tenant) => format!("tenant {tenant:?}"),
                None => "every tenant".to_owned(),
            };
            match max_running {
                Some(n) => println!("queue {queue:?}: {whom} runs at most {n} job(s) at once"),
                None => println!("queue {queue:?}: {whom} has no cap of its own now"),
            }
        }
        TenantCommand::List { queue, json } => {
            let caps = jobwire_core::tenant_caps(pool, &queue).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&caps)?);
                return Ok(());
            }
            match caps.default_max_running {
                Some(n) => println!("queue {queue:?}: every tenant at most {n} running"),
                None => println!("queue {queue:?}: no default cap"),
            }
            if caps.tenants.is_empty() {
                println!("no tenant has an override or has run under a cap");
                return Ok(());
            }
            println!(
                "{:<32} {:>9} {:>8} {:>8} {:>8}",
                "tenant", "override", "cap", "running", "waiting"
            );
            let show = |n: Option<i32>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
            for tenant in caps.tenants {
                println!(
                    "{:<32} {:>9} {:>8} {:>8} {:>8}",
                    tenant.tenant,
                    show(tenant.override_max_running),
                    show(tenant.max_running),
                    tenant.running,
                    tenant.waiting
                );
            }
        }
    }
    Ok(())
}
