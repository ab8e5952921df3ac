"""Column types that need a per-backend spelling."""

from __future__ import annotations

from sqlalchemy import LargeBinary
from sqlalchemy.ext.compiler import compiles


class ChunkBlob(LargeBinary):
    """A content blob. On DuckDB it is stored uncompressed: with the default (ZSTD) compression a
    chunk read grows from ~1 ms to hundreds of ms with the row's position in the table (NOTES.md)."""

    cache_ok = True


@compiles(ChunkBlob, "duckdb")
def _duckdb_chunk_blob(element, compiler, **kw):
    return "BLOB USING COMPRESSION uncompressed"


@compiles(ChunkBlob, "postgresql")
def _pg_chunk_blob(element, compiler, **kw):
    return "BYTEA"


@compiles(ChunkBlob)
def _default_chunk_blob(element, compiler, **kw):
    return "BLOB"
