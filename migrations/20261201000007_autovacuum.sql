-- jobwire schema: vacuum the two hot tables early and quickly.
--
-- PostgreSQL's defaults vacuum a table once a fifth of it is dead
-- (autovacuum_vacuum_scale_factor 0.2). For `jobs`, holding a million
-- finished rows before retention moves them, that is 200,000 dead row
-- versions first, and every claim and completion leaves one (they change
-- `state`, which the partial indexes name, so no update is HOT); the claim
-- index fills with entries for rows long gone and every claim walks past
-- them. `job_outbox` rows are inserted and deleted within moments, so the
-- table is almost all dead rows between vacuums. Here a vacuum starts after
-- 1 % (and at least 1,000 rows) of `jobs`, after 1,000 dead rows of
-- `job_outbox` whatever its size, and after as many inserts (so the
-- visibility map, which index-only scans read, keeps up); and it works with
-- a shorter pause between rounds of I/O, so it finishes before the next
-- burst. Reasoning and the global settings these cannot change
-- (autovacuum_naptime): docs/operations.md, "Vacuum".
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 1,
    autovacuum_vacuum_cost_limit = 1000
);
ALTER TABLE job_outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
