//! `jobwire token`: create, list and revoke the HTTP API's bearer tokens.

use crate::output::visible;
use anyhow::{Result, bail};
use jobwire_core::Scope;
use sqlx::PgPool;

#[derive(clap::Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a token and print its secret (shown this once; only a hash is kept).
    Create {
        /// Who the token is: recorded in job_audit for what it does.
        name: String,
        /// read (look), write (also enqueue and cancel) or admin (also
        /// dead-letter retry, pause and resume).
        #[arg(long, value_parser = ["read", "write", "admin"])]
        scope: String,
        /// Bind the token to a tenant: it then enqueues only that tenant's
        /// jobs and reads only them (read or write scope).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke the live token with this name: it stops working on every API
    /// server within milliseconds (as each hears of it).
    Revoke {
        /// The token's name.
        name: String,
    },
}

pub(crate) async fn token(pool: &PgPool, command: TokenCommand) -> Result<()> {
    match command {
        TokenCommand::Create {
            name,
            scope,
            tenant,
        } => {
            let scope: Scope = scope.parse()?;
            let created =
                jobwire_core::create_tenant_api_token(pool, &name, scope, tenant.as_deref())
                    .await?;
            let bound = match &created.token.tenant {
                Some(tenant) => format!(", bound to tenant {tenant:?}"),
                None => String::new(),
            };
            eprintln!(
                "token {:?} ({}{bound}) created; its secret is shown only now:",
                created.token.name, created.token.scope
            );
            outln!("{}", created.secret);
        }
        TokenCommand::List => {
            let tokens = jobwire_core::list_api_tokens(pool).await?;
            if tokens.is_empty() {
                outln!("no tokens");
            }
            for token in tokens {
                let status = match token.revoked_at {
                    Some(at) => format!("revoked {}", at.to_rfc3339()),
                    None => "live".to_owned(),
                };
                let bound = match &token.tenant {
                    Some(tenant) => format!("  tenant {tenant:?}"),
                    None => String::new(),
                };
                outln!(
                    "{:<24} {:<6} {}  created {}  {status}{bound}",
                    visible(&token.name),
                    token.scope,
                    token.token_id,
                    token.created_at.to_rfc3339()
                );
            }
        }
        TokenCommand::Revoke { name } => {
            if !jobwire_core::revoke_api_token(pool, &name).await? {
                bail!("no live token is called {name:?}");
            }
            outln!("token {name:?} revoked");
        }
    }
    Ok(())
}
