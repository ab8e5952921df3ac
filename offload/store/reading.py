"""Reading stored content: chunk by chunk, a byte range from only the chunks that hold it, the item
index of a JSON array, and all of it re-hashed (`verify`). A mixin of `Store`, which provides `_read()`
(a read transaction) and `content()`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterator

import numpy as np
import sqlalchemy as sa

from ..errors import StoreError
from .chunking import ITEMS_PER_BLOCK, index_fault, unpack_block
from .models import artifacts, chunks, contents, item_blocks
from .retention import ACTIVE

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
        if seq is None and self.content(sha256).bytes:  # the first chunk starts at 0: it is gone
            raise _cut_short(sha256, "its first chunk is missing")
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
                with self._read() as conn:  # read to the end: is this the end? (None: deleted meanwhile)
                    count = conn.execute(sa.select(contents.c.chunk_count).where(
                        contents.c.sha256 == sha256)).scalar()
                if count is not None and seq < count:
                    raise _cut_short(sha256, f"chunk {seq:,} of its {count:,} is missing")
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
        reached = None  # where the chunks read so far end: each must start there, and the last reach `end`
        for meta, data in self.iter_chunks(sha256, first, last):
            if reached is not None and meta["byte_start"] != reached:
                break
            lo = max(start - meta["byte_start"], 0)
            hi = min(end - meta["byte_start"], len(data))
            reached = meta["byte_start"] + len(data)
            yield data[lo:hi]
        if reached is None or reached < end:  # a chunk past the last one found is gone
            raise _cut_short(sha256, f"bytes {start:,}–{end - 1:,} are not all there")

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

    def item_blob(self, sha256: str) -> bytes:
        """A content's item index as it is stored: its blocks of packed (start, end) pairs, joined."""
        with self._read() as conn:
            blobs = conn.execute(sa.select(item_blocks.c.data).where(item_blocks.c.sha256 == sha256)
                                 .order_by(item_blocks.c.block)).scalars().all()
        return b"".join(map(bytes, blobs))

    def verify(self) -> list[dict[str, Any]]:
        """Re-hash every stored content; report each whose bytes no longer match (`problem`: "mismatch",
        a chunk missing included), each item index its content cannot have ("items", `why`), and each
        content live artifacts point at that is not stored at all ("missing"), with the artifacts that use
        it.

        Contents are read in transactions of their own, while other processes may delete or collect:
        a content that reads short is looked up again before it is reported, and one deleted meanwhile
        is no problem (one stored again meanwhile is checked again)."""
        a = artifacts.c
        listed = sa.select(contents.c.sha256, contents.c.bytes, contents.c.chunk_count, contents.c.created_at)
        with self._read() as conn:
            infos = conn.execute(listed).all()
        problems = []
        for sha, size, count, created in infos:
            for _again in range(3):
                found = self._rehash(sha, size, count)
                if found is None:
                    break
                try:
                    with self._read() as conn:
                        now = conn.execute(listed.where(contents.c.sha256 == sha)).first()
                except StoreError:
                    break  # a damaged file: reported as it read
                if now is None:
                    found = None  # deleted while it was read
                    break
                if tuple(now) == (sha, size, count, created):
                    break  # the same content, still not matching
                _sha, size, count, created = now  # stored again meanwhile: checked again
            if found is not None:
                with self._read() as conn:
                    ids = conn.execute(sa.select(a.id).where(a.sha256 == sha)).scalars().all()
                problems.append({**found, "artifacts": list(ids)})
        problems += self._damaged_indexes({p["sha256"] for p in problems})
        try:
            problems += self._missing_contents()
        except StoreError:
            if not problems:  # a damaged file: what of it could not be read is reported already
                raise
        return problems

    def _damaged_indexes(self, reported: set[str]) -> list[dict[str, Any]]:
        """verify's "items": item indexes their content cannot have (`index_fault`): a changed offset
        serves one item's bytes for another's, which re-hashing the content does not see."""
        a, c = artifacts.c, contents.c
        with self._read() as conn:
            indexed = conn.execute(sa.select(c.sha256, c.bytes, c["items"]).where(c["items"].is_not(None))).all()
        problems = []
        for sha, size, items in indexed:
            if sha in reported:
                continue
            fault = index_fault(self.item_blob(sha), size, items)
            if fault is None:
                continue
            with self._read() as conn:
                if not conn.execute(sa.select(c.sha256).where(c.sha256 == sha)).first():
                    continue  # deleted while it was read
                ids = conn.execute(sa.select(a.id).where(a.sha256 == sha)).scalars().all()
            problems.append({"sha256": sha, "problem": "items", "actual_sha256": sha, "bytes": size,
                             "actual_bytes": size, "why": fault, "artifacts": list(ids)})
        return problems

    def _missing_contents(self) -> list[dict[str, Any]]:
        """verify's "missing": contents that live artifacts point at and the store does not hold."""
        a = artifacts.c
        # one statement: what it finds missing was missing at one moment, not between two reads
        query = (sa.select(a.sha256, a.id, a.bytes).where(a.status == ACTIVE, a.sha256.is_not(None),
                                                           ~sa.exists().where(contents.c.sha256 == a.sha256))
                 .order_by(a.sha256, a.created_at, a.id))
        with self._read() as conn:
            rows = conn.execute(query).all()
        users: dict[str, list] = {}
        for row in rows:
            users.setdefault(row.sha256, []).append(row)
        return [{"sha256": sha, "problem": "missing", "actual_sha256": None,
                 "bytes": max(row.bytes for row in used), "actual_bytes": 0, "artifacts": [row.id for row in used]}
                for sha, used in users.items()]

    def _rehash(self, sha: str, size: int, count: int) -> dict[str, Any] | None:
        """How the stored chunks of `sha` differ from what its row says, or None if they match."""
        digest = hashlib.sha256()
        seen = n = 0
        try:
            for _meta, data in self.iter_chunks(sha):
                digest.update(data)
                seen += len(data)
                n += 1
        except StoreError:  # a chunk that cannot be read: reported as not matching, the rest checked
            n = -1
        if digest.hexdigest() == sha and seen == size and n == count:
            return None
        return {"sha256": sha, "problem": "mismatch", "actual_sha256": digest.hexdigest(), "bytes": size,
                "actual_bytes": seen}


def _cut_short(sha256: str, how: str) -> StoreError:
    return StoreError(f"the stored content {sha256[:16]}… could not be read whole: {how}. The artifact was "
                      "deleted or evicted while it was read, or its content is damaged (`offload verify` "
                      "checks every content).")
