//! Database faults a test injects: a real statement failing on the real
//! server, where no broker or network trick can reach.

use sqlx::PgPool;

/// Make the wake-up claim of capped tenants' jobs (the second statement of
/// `claim_by_ids`) fail, as a database that goes away between the two
/// statements would, until [`repair_capped_wake_up_claim`]. The real
/// function is kept under another name.
pub async fn break_capped_wake_up_claim(pool: &PgPool) {
    rename_capped_claim(
        pool,
        "jobwire_claim_ids_capped",
        "jobwire_claim_ids_capped_kept",
    )
    .await;
    sqlx::query(
        "CREATE FUNCTION jobwire_claim_ids_capped(p_ids uuid[], p_owner text,
                                                  p_lease_ms bigint, p_queues text[])
         RETURNS SETOF jobs LANGUAGE plpgsql AS $$
         BEGIN
             RAISE EXCEPTION 'injected fault: the capped wake-up claim fails';
         END $$",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Undo [`break_capped_wake_up_claim`].
pub async fn repair_capped_wake_up_claim(pool: &PgPool) {
    sqlx::query("DROP FUNCTION jobwire_claim_ids_capped(uuid[], text, bigint, text[])")
        .execute(pool)
        .await
        .unwrap();
    rename_capped_claim(
        pool,
        "jobwire_claim_ids_capped_kept",
        "jobwire_claim_ids_capped",
    )
    .await;
}

/// `from` and `to` are this module's own names, never input.
async fn rename_capped_claim(pool: &PgPool, from: &str, to: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER FUNCTION {from}(uuid[], text, bigint, text[]) RENAME TO {to}"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// A refusal of the deployment's own, which no check of jobwire's can see
/// coming: a trigger that fails the insert of any job whose payload's
/// `note` is `refuse`, with a data exception (SQLSTATE 22023).
pub async fn refuse_jobs_noted_refuse(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.payload->>'note' = 'refuse' THEN
                 RAISE EXCEPTION 'refused by the deployment' USING ERRCODE = '22023';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_marked BEFORE INSERT ON jobs
             FOR EACH ROW EXECUTE FUNCTION refuse_marked();",
    )
    .execute(pool)
    .await
    .unwrap();
}
