-- The database clock as this statement runs: inside a transaction that
-- waited for a lock, later than now() (the transaction's start).
SELECT clock_timestamp()
