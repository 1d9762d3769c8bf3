-- jobwire schema: a schedule's jobs can work for a tenant.
--
-- A schedule's job (`ScheduleSpec::job`, a `NewJob`) could be given a
-- tenant in Rust, and the tenant was dropped: the schedule kept no column
-- for it, so a per-customer schedule's jobs ran outside that customer's cap
-- and limits. The column takes the rules of `jobs.tenant`; NULL (no
-- tenant) is every existing schedule's value, so adding it rewrites
-- nothing.
-- Behind a long transaction on the table the ALTER would wait, and the
-- schedulers with it: give up after 10 s, and let `jobwire migrate` be run
-- again.
SET LOCAL lock_timeout = '10s';

ALTER TABLE job_schedules
    ADD COLUMN tenant text
    CONSTRAINT job_schedules_tenant_named
    CHECK (tenant IS NULL OR (tenant ~ '[^[:space:]]' AND octet_length(tenant) <= 255));
