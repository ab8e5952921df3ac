"""Alembic migrations: one history for SQLite, DuckDB and PostgreSQL, applied on first open."""
