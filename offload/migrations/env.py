"""Alembic environment: always run with a connection handed in by offload (see store/engines.py)."""

from alembic import context

from offload.store.models import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
