-- Puts back the index on a tenant slot's holder as it was before migration
-- 20261204000002 (from migration 20261201000009), and the slot table's
-- default fillfactor, on a database migrated by a build that has the
-- migration: the "before" side of docs/benchmarks.md, "A tenant slot
-- changes holder in place". The completion's statement is the new one
-- (it finds a slot by its key either way); what this restores is the index
-- every change of holder had to write. Never run this on a database you keep.
BEGIN;
CREATE UNIQUE INDEX job_tenant_slots_job_idx ON job_tenant_slots (job_id)
    WHERE job_id IS NOT NULL;
ALTER TABLE job_tenant_slots RESET (fillfactor);
COMMIT;
