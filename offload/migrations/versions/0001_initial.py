"""Initial store: contents, chunks, item blocks, artifacts, extracts.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from offload.store.types import ChunkBlob

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "contents",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("chars", sa.BigInteger, nullable=False),
        sa.Column("lines", sa.BigInteger, nullable=False),
        sa.Column("chunk_count", sa.Integer, nullable=False),
        sa.Column("items", sa.BigInteger),
        sa.Column("items_path", sa.Text),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "chunks",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("byte_start", sa.BigInteger, nullable=False),
        sa.Column("char_start", sa.BigInteger, nullable=False),
        sa.Column("line_start", sa.BigInteger, nullable=False),
        sa.Column("data", ChunkBlob(), nullable=False),
    )
    op.create_table(
        "item_blocks",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("block", sa.Integer, primary_key=True),
        sa.Column("data", ChunkBlob(), nullable=False),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("session", sa.String(200)),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("args", sa.Text),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("content_type", sa.String(120), nullable=False),
        sa.Column("sha256", sa.String(64)),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("chars", sa.BigInteger, nullable=False),
        sa.Column("lines", sa.BigInteger, nullable=False),
        sa.Column("items", sa.BigInteger),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("shown_tokens", sa.BigInteger, nullable=False),
        sa.Column("reference", sa.Text),
        sa.Column("meta", sa.Text),
        sa.Column("parent_id", sa.String(40)),
        sa.Column("pinned", sa.Boolean, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("accessed_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime),
        sa.Column("ended_at", sa.DateTime),
    )
    op.create_index("ix_artifacts_ns_created", "artifacts", ["namespace", "created_at"])
    op.create_index("ix_artifacts_sha256", "artifacts", ["sha256"])
    op.create_index("ix_artifacts_status_expires", "artifacts", ["status", "expires_at"])
    op.create_table(
        "extracts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("artifact_id", sa.String(40), nullable=False),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("session", sa.String(200)),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("expression", sa.Text),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("result_sha256", sa.String(64), nullable=False),
        sa.Column("result_bytes", sa.BigInteger, nullable=False),
        sa.Column("result_artifact_id", sa.String(40)),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_extracts_artifact", "extracts", ["artifact_id"])
    op.create_index("ix_extracts_ns_created", "extracts", ["namespace", "created_at"])


def downgrade() -> None:
    for table in ("extracts", "artifacts", "item_blocks", "chunks", "contents"):
        op.drop_table(table)
