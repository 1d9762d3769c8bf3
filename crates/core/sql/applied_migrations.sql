-- The migration versions applied to this database.
SELECT version FROM _sqlx_migrations WHERE success
