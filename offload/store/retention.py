"""Retention inside a write transaction: ending artifacts, dropping content nothing uses, and the
collection `Store.gc` runs (expired, then orphaned, then least recently used down to a quota), which a
put over the quota also runs in its own transaction to make room for itself; and the reads not yet
written to accessed_at, which that order follows (`Touches`).

On PostgreSQL writers run side by side, so a collection takes gc's advisory lock (`gc_lock`) and a
removal waits for a running one (`not_beside_gc`); SQLite and DuckDB admit one writer at a time.
"""

from __future__ import annotations

import datetime as dt
import threading
import zlib
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .models import artifacts, chunks, contents, item_blocks
from .records import GcReport, utcnow

ACTIVE = "active"
GC_LOCK = zlib.crc32(b"offload-gc")  # PostgreSQL advisory lock key of gc

# Content stored ahead of its artifact row (`put_content`) belongs to no artifact until the row comes,
# a few seconds later at most; gc leaves such content alone this long, so that another process's gc
# cannot take it in between (SQLite serialises writers; PostgreSQL does not).
ORPHAN_GRACE = dt.timedelta(minutes=10)


class Touches:
    """When artifacts were read, kept until a write transaction that got the lock at once takes them to
    accessed_at (`Store._touch`), or a gc, before it evicts by it. At most KEPT (one read each)."""

    KEPT = 10_000

    def __init__(self) -> None:
        self._when: dict[str, dt.datetime] = {}
        self._lock = threading.Lock()

    def add(self, artifact_id: str, when: dt.datetime) -> None:
        with self._lock:
            if len(self._when) < self.KEPT or artifact_id in self._when:
                self._when[artifact_id] = when

    def write(self, conn: Connection) -> dict[str, dt.datetime]:
        """Write them in the caller's transaction; returns them, for `forget` once it has committed."""
        with self._lock:
            touches = dict(self._when)
        if touches:
            conn.execute(artifacts.update().where(artifacts.c.id == sa.bindparam("touched")).values(
                accessed_at=sa.bindparam("when")), [{"touched": i, "when": t} for i, t in touches.items()])
        return touches

    def forget(self, written: dict[str, dt.datetime]) -> None:
        with self._lock:
            for artifact_id, when in written.items():
                if self._when.get(artifact_id) == when:  # not read again meanwhile
                    del self._when[artifact_id]


def total_bytes(conn: Connection) -> int:
    """The store's size: every content once, whoever uses it."""
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(contents.c.bytes), 0))).scalar_one())


def not_beside_gc(conn: Connection) -> None:
    """Wait for a running gc, and keep the next from starting until this transaction ends (PostgreSQL;
    removals may run together). A gc counts the store and evicts from that count: a removal committing
    in the middle would make it evict one artifact too many."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock_shared(GC_LOCK)))


def gc_lock(conn: Connection) -> bool:
    """Take gc's lock until this transaction ends (PostgreSQL; SQLite and DuckDB admit one writer anyway):
    two gcs would both count the store over quota from what they saw before the other evicted, and
    evict twice. True if taken."""
    if conn.dialect.name != "postgresql":
        return False
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(GC_LOCK)))
    return True


def end_artifacts(conn: Connection, ids: list[str], status: str) -> int:
    """End the artifacts `ids` that are still active; how many that was (another writer may have
    ended some first: on PostgreSQL this update waits for it, then skips them). An expired one ended
    when its TTL did, which is what `get` said of it before gc came: the date a tombstone gives stays."""
    ended_at = sa.func.coalesce(artifacts.c.expires_at, utcnow()) if status == "expired" else utcnow()
    return conn.execute(artifacts.update().where(artifacts.c.id.in_(ids), artifacts.c.status == ACTIVE).values(
        status=status, sha256=None, ended_at=ended_at)).rowcount


def drop_orphans(conn: Connection, shas: Iterable[str | None]) -> tuple[int, int]:
    """Remove each of these contents that no artifact points at: (contents removed, bytes freed)."""
    removed = freed = 0
    for sha in sorted({s for s in shas if s}):  # one order for every writer: no lock cycles
        if conn.dialect.name == "postgresql":  # see `Store._content(to_use=True)`
            conn.execute(sa.select(contents.c.sha256).where(contents.c.sha256 == sha).with_for_update())
        used = conn.execute(sa.select(artifacts.c.id).where(artifacts.c.sha256 == sha).limit(1)).first()
        if used is not None:
            continue
        size = conn.execute(sa.select(contents.c.bytes).where(contents.c.sha256 == sha)).scalar()
        if size is None:
            continue  # another writer removed it first
        for table in (chunks, item_blocks, contents):
            conn.execute(table.delete().where(table.c.sha256 == sha))
        removed += 1
        freed += int(size)
    return removed, freed


def collect(conn: Connection, now: dt.datetime, quota: int | None, protect: Iterable[str],
            report: GcReport, *, room: bool) -> None:
    """gc's work in the caller's transaction: expired artifacts, orphaned contents, then the least
    recently used until the store is at most `quota` bytes, never a pinned or `protect`ed artifact nor
    one sharing their content. `room`: a write needs it, so when what must stay is more than `quota`,
    nothing is evicted (it would not make the write fit)."""
    protect = list(protect)
    a = artifacts.c
    gc_lock(conn)
    expired = conn.execute(sa.select(a.id, a.sha256).where(
        a.status == ACTIVE, a.pinned == sa.false(), a.expires_at.is_not(None), a.expires_at <= now)).all()
    orphan_shas = []
    if expired:
        report.expired += end_artifacts(conn, [r.id for r in expired], "expired")
        orphan_shas = [r.sha256 for r in expired]
    # and contents that no artifact ever came to point at (a writer killed between storing a
    # result's bytes and its row), once older than the grace that covers a write in progress
    orphan_shas += conn.execute(sa.select(contents.c.sha256).where(
        ~sa.exists().where(a.sha256 == contents.c.sha256),
        contents.c.created_at <= now - ORPHAN_GRACE)).scalars().all()
    removed, freed = drop_orphans(conn, orphan_shas)
    report.contents_removed += removed
    report.bytes_freed += freed
    if quota is None:
        return
    total = total_bytes(conn)
    # content an artifact that stays points at: evicting another that shares it frees nothing
    held = sa.select(a.sha256).where(a.status == ACTIVE, sa.or_(a.pinned == sa.true(), a.id.in_(protect)))
    staying = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(contents.c.bytes), 0)).where(
        contents.c.sha256.in_(held))).scalar_one()
    writing = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(contents.c.bytes), 0)).where(
        ~sa.exists().where(a.sha256 == contents.c.sha256))).scalar_one()  # within ORPHAN_GRACE: being written
    report.staying_bytes = int(staying) + int(writing)
    # Least recently used first, a content at a time, by the latest use of any artifact pointing at it:
    # the artifacts sharing a content go together, since none frees a byte while another points at it.
    # One at a time, the oldest of them was evicted for nothing, and a content read through one
    # artifact a moment ago went before an older one's.
    candidates = [] if room and int(staying) > quota else conn.execute(
        sa.select(a.sha256).where(a.status == ACTIVE, a.pinned == sa.false(), a.id.not_in(protect),
                                  a.sha256.not_in(held))
        .group_by(a.sha256).order_by(sa.func.max(a.accessed_at), sa.func.max(a.created_at), a.sha256)).scalars().all()
    for sha in candidates:
        if total <= quota:
            break
        sharing = conn.execute(sa.select(a.id, a.pinned).where(a.sha256 == sha, a.status == ACTIVE)).all()
        if any(row.pinned or row.id in protect for row in sharing):
            continue  # pinned since the candidates were read: it stays, and so does its content
        ended = end_artifacts(conn, [row.id for row in sharing], "evicted") if sharing else 0
        if not ended:
            continue  # deleted meanwhile
        report.evicted += ended
        removed, freed = drop_orphans(conn, [sha])
        report.contents_removed += removed
        report.bytes_freed += freed
        total -= freed
