-- Published rows leave the table at once: it stays small and its due index
-- holds only work still to do. (A row marked published_at by another tool is
-- skipped by the claim and left alone.)
DELETE FROM job_outbox WHERE id = ANY($1)
