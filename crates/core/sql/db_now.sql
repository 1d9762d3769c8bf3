-- The database clock: every timestamp jobwire writes comes from it.
SELECT now()
