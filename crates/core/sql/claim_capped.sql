-- The claim of a queue with tenant caps (migration 20261201000009): tenants
-- take turns at equal priority, and a capped tenant's jobs start only into
-- its free slots. Same parameters as claim_batch.sql.
SELECT * FROM jobwire_claim_capped($1, $2::integer, $3, $4, $5)
