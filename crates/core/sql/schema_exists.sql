-- Whether the database has sqlx's migration table (any jobwire schema at all).
SELECT to_regclass('_sqlx_migrations') IS NOT NULL
