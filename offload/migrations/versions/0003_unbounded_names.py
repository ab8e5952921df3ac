"""PostgreSQL: tool names, sessions and namespaces of any length, as SQLite and DuckDB already take them.

0001 declared them VARCHAR(200), which only PostgreSQL enforces: there a result whose tool name or
session was longer was not stored ("value too long for type character varying(200)") while the same
call stored fine on the other backends. TEXT costs PostgreSQL nothing more; the other two are unchanged.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-06
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_COLUMNS = {"artifacts": ("namespace", "session", "tool"), "extracts": ("namespace", "session")}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in _COLUMNS.items():
            op.execute(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {c} TYPE TEXT" for c in columns))


def downgrade() -> None:  # refused by PostgreSQL if a longer value is stored: cut or remove it first
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in _COLUMNS.items():
            op.execute(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {c} TYPE VARCHAR(200)" for c in columns))
