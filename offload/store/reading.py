"""Reading stored content: chunk by chunk, a byte range from only the chunks that hold it, the item
index of a JSON array. A mixin of `Store`, which provides `_read()` (a read transaction) and `content()`.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import sqlalchemy as sa

from ..errors import StoreError
from .chunking import ITEMS_PER_BLOCK, unpack_block
from .models import chunks, item_blocks

__all__ = ["ContentReading"]


class ContentReading:
    """The chunk-reading half of `Store`."""

    _read: Any  # provided by Store
    content: Any

    def chunk_at(self, sha256: str, unit: str, position: int) -> int:
        """Sequence number of the chunk holding `position` (bytes, chars, or a line number)."""
        column = {"bytes": chunks.c.byte_start, "chars": chunks.c.char_start, "lines": chunks.c.line_start}[unit]
        with self._read() as conn:
            seq = conn.execute(sa.select(sa.func.max(chunks.c.seq)).where(
                chunks.c.sha256 == sha256, column <= position)).scalar_one()
        return int(seq or 0)

    def chunk_meta(self, sha256: str, first: int, last: int) -> list[dict[str, int]]:
        c = chunks.c
        with self._read() as conn:
            rows = conn.execute(sa.select(c.seq, c.byte_start, c.char_start, c.line_start).where(
                c.sha256 == sha256, c.seq >= first, c.seq <= last).order_by(c.seq)).mappings()
            return [dict(r) for r in rows]

    def iter_chunks(self, sha256: str, first_seq: int = 0, last_seq: int | None = None
                    ) -> Iterator[tuple[dict[str, int], bytes]]:
        """Chunks from `first_seq` on (to the last, or to `last_seq`, each of which must be there), one
        query each, so memory stays at one chunk."""
        c = chunks.c
        seq = first_seq
        while last_seq is None or seq <= last_seq:
            with self._read() as conn:
                row = conn.execute(sa.select(c.seq, c.byte_start, c.char_start, c.line_start, c.data).where(
                    c.sha256 == sha256, c.seq == seq)).mappings().first()
            if row is None:
                if last_seq is not None:
                    raise _cut_short(sha256, f"chunk {seq:,} of {first_seq:,}-{last_seq:,} is missing")
                return
            meta = {k: row[k] for k in ("seq", "byte_start", "char_start", "line_start")}
            if not isinstance(row["data"], (bytes, bytearray, memoryview)):  # a blob rewritten as text
                raise _cut_short(sha256, f"chunk {seq:,} holds {type(row['data']).__name__}, not bytes")
            yield meta, bytes(row["data"])
            seq += 1

    def read_range(self, sha256: str, start: int, end: int) -> bytes:
        """Bytes [start, end) read from the chunks that hold them only."""
        return b"".join(self.iter_range(sha256, start, end))

    def iter_range(self, sha256: str, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end), a chunk's worth at a time, from the chunks that hold them only."""
        if end <= start:
            return
        first = self.chunk_at(sha256, "bytes", start)
        last = self.chunk_at(sha256, "bytes", end - 1)
        for meta, data in self.iter_chunks(sha256, first, last):
            lo = max(start - meta["byte_start"], 0)
            hi = min(end - meta["byte_start"], len(data))
            yield data[lo:hi]

    def iter_bytes(self, sha256: str) -> Iterator[bytes]:
        """The content's bytes, a chunk at a time, every one of them: a content deleted while it is read,
        or missing a chunk, raises StoreError where it stops (a short read ended as if it were whole)."""
        size = self.content(sha256).bytes
        done = 0
        for meta, data in self.iter_chunks(sha256):
            if meta["byte_start"] != done:
                break
            done += len(data)
            yield data
        if done != size:
            raise _cut_short(sha256, f"it ended after {done:,} of its {size:,} bytes")

    def item_ranges(self, sha256: str, first: int, last: int) -> list[tuple[int, int]]:
        """(start, end) byte ranges of items first..last-1 from the stored item index."""
        if last <= first:
            return []
        b0, b1 = first // ITEMS_PER_BLOCK, (last - 1) // ITEMS_PER_BLOCK
        with self._read() as conn:
            rows = conn.execute(sa.select(item_blocks.c.block, item_blocks.c.data).where(
                item_blocks.c.sha256 == sha256, item_blocks.c.block >= b0, item_blocks.c.block <= b1
            ).order_by(item_blocks.c.block)).all()
        if not rows:
            raise StoreError(f"the item index of {sha256} is missing")
        pairs = np.concatenate([unpack_block(bytes(r.data)) for r in rows])
        offset = first - b0 * ITEMS_PER_BLOCK
        return [(int(a), int(b)) for a, b in pairs[offset : offset + (last - first)].tolist()]


def _cut_short(sha256: str, how: str) -> StoreError:
    return StoreError(f"the stored content {sha256[:16]}… could not be read whole: {how}. The artifact was "
                      "deleted or evicted while it was read, or its content is damaged (`offload verify` "
                      "checks every content).")
