-- Remove schedule $1 (jobs it already created stay). Returns its name.
DELETE FROM job_schedules WHERE name = $1 RETURNING name
