"""artifacts.args_text: a call's args as their keys and values, which the listing's text filter reads.

The filter read the args' JSON, so text=" or { or : matched every artifact that had args, and é written
\\u00e9 was found only as that escape. Existing rows are filled here, a thousand at a time; new ones are
written with it (offload/store/search.py).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

from offload.store.search import args_text

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_BATCH = 1000


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("args_text", sa.Text))
    bind = op.get_bind()
    table = sa.table("artifacts", sa.column("id", sa.String), sa.column("args", sa.Text),
                     sa.column("args_text", sa.Text))
    fill = table.update().where(table.c.id == sa.bindparam("row_id")).values(args_text=sa.bindparam("text"))
    last = ""
    while True:  # by id, so that each batch is one index range and memory stays at a batch
        rows = bind.execute(sa.select(table.c.id, table.c.args).where(table.c.args.is_not(None), table.c.id > last)
                            .order_by(table.c.id).limit(_BATCH)).all()
        if not rows:
            break
        bind.execute(fill, [{"row_id": row_id, "text": args_text(args)} for row_id, args in rows])
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("args_text")
