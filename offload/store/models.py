"""The store's tables (SQLAlchemy Core), shared by SQLite, DuckDB and PostgreSQL.

Content is stored once per sha256 (`contents` + `chunks` + `item_blocks`); every stored call is its own
row in `artifacts` pointing at it. `extracts` logs every slice and query so it can be rerun offline.
Keys are text (no autoincrement): DuckDB has no SERIAL, and random ids are what we want anyway.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from .types import ChunkBlob

metadata = MetaData()

contents = Table(
    "contents",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("bytes", BigInteger, nullable=False),
    Column("chars", BigInteger, nullable=False),
    Column("lines", BigInteger, nullable=False),
    Column("chunk_count", Integer, nullable=False),
    Column("items", BigInteger),  # length of the indexed JSON array / NDJSON rows, when indexed
    Column("items_path", Text),  # JMESPath of that array ("" = top level)
    Column("created_at", DateTime, nullable=False),
)

chunks = Table(
    "chunks",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("byte_start", BigInteger, nullable=False),
    Column("char_start", BigInteger, nullable=False),
    Column("line_start", BigInteger, nullable=False),
    Column("data", ChunkBlob(), nullable=False),  # last, so metadata reads stay off the blob pages
)

item_blocks = Table(
    "item_blocks",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("block", Integer, primary_key=True),
    Column("data", ChunkBlob(), nullable=False),  # packed little-endian int64 (start, end) pairs
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("namespace", Text, nullable=False),
    Column("session", Text),
    Column("tool", Text, nullable=False),
    Column("args", Text),  # JSON
    Column("args_text", Text),  # their keys and values, for the listing's text filter (store/search.py)
    Column("kind", String(16), nullable=False),
    Column("content_type", String(120), nullable=False),
    Column("sha256", String(64)),  # null once the content is gone (expired or deleted)
    Column("bytes", BigInteger, nullable=False),
    Column("chars", BigInteger, nullable=False),
    Column("lines", BigInteger, nullable=False),
    Column("items", BigInteger),
    Column("tokens", BigInteger, nullable=False),  # estimate of the raw content
    Column("shown_tokens", BigInteger, nullable=False),  # what the model was shown instead
    Column("reference", Text),  # JSON of the Reference the model got
    Column("meta", Text),  # JSON: exit_code, stderr artifact, notes, ...
    Column("parent_id", String(40)),  # for derived artifacts (large query results)
    Column("pinned", Boolean, nullable=False),
    Column("status", String(16), nullable=False),  # active | expired | deleted
    Column("created_at", DateTime, nullable=False),
    Column("accessed_at", DateTime, nullable=False),
    Column("expires_at", DateTime),
    Column("ended_at", DateTime),  # when it expired or was deleted (the tombstone's date)
    Index("ix_artifacts_ns_created", "namespace", "created_at"),
    Index("ix_artifacts_sha256", "sha256"),
    Index("ix_artifacts_status_expires", "status", "expires_at"),
)

extracts = Table(
    "extracts",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("artifact_id", String(40), nullable=False),
    Column("namespace", Text, nullable=False),
    Column("session", Text),
    Column("op", String(16), nullable=False),  # slice | jmespath | grep | sql
    Column("expression", Text),
    Column("args", Text, nullable=False),  # JSON of the full call
    Column("result_sha256", String(64), nullable=False),
    Column("result_bytes", BigInteger, nullable=False),
    Column("result_artifact_id", String(40)),
    Column("duration_ms", Float, nullable=False),
    Column("created_at", DateTime, nullable=False),
    Index("ix_extracts_artifact", "artifact_id"),
    Index("ix_extracts_ns_created", "namespace", "created_at"),
)
