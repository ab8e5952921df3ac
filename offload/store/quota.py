"""The quota check a put makes before it stores new content: counted seldom, exactly near the quota,
and collecting what may go (in the put's own transaction) when the put is allowed to make room."""

from __future__ import annotations

import time
from typing import Iterable

from sqlalchemy.engine import Connection

from ..errors import QuotaExceeded
from .records import GcReport, utcnow
from .retention import collect, gc_lock

# The quota check before each new content needs the store's total, a SUM over every content row: 0.5 ms
# on an empty store, 3.6 ms at 20,000 contents, and growing. So a writer counts it at most this often,
# adding what it writes itself in between, and counts again whenever that sum comes within QUOTA_NEAR
# of the quota. What other processes wrote in the last second can push the store past its quota
# before anyone notices, then only until the next gc; far from the quota it cannot matter.
QUOTA_RECOUNT_SECONDS = 1.0
QUOTA_NEAR = 0.9


class QuotaCheck:
    """The Store's quota check (`_check_quota`). The Store holds `quota_bytes`, `_used` (when it last
    counted, and what it counted plus what it wrote since), `_used_lock` and `total_bytes(conn)`."""

    def _check_quota(self, conn: Connection, size: int, make_room: Iterable[str] | None = None) -> None:
        """QuotaExceeded if `size` more bytes would take the store over its quota (see QUOTA_RECOUNT_SECONDS
        for when the total is counted and when it is this writer's running sum).

        With `make_room` (artifacts to keep, besides the pinned ones), what `gc(room=size)` would collect
        is collected first, in the caller's transaction, which holds gc's lock until it commits: writers
        near the quota take turns, each counting what the one before left. A gc of its own before a
        retry lost that room to other writers in between: 11 of 72 puts of 12 writers in 4 processes
        on PostgreSQL failed open that way.
        """
        keep = None if make_room is None else tuple(make_room)
        # Near the quota, writers that may make room take turns even when this one fits (one that wrote
        # beside a collecting writer would take the room it made): gc's lock, held until this commits.
        # It is waited for outside `_used_lock`, which a thread of this process holding gc's lock may
        # need: waiting for it while holding `_used_lock` made a cycle PostgreSQL cannot see.
        turn = False
        while True:
            if turn:
                gc_lock(conn)
            with self._used_lock:  # held across the count: a thread holding it is inside its write transaction
                now = time.monotonic()
                known = self._used
                if turn or known is None or now - known[0] >= QUOTA_RECOUNT_SECONDS or \
                        known[1] + size > self.quota_bytes * QUOTA_NEAR:
                    known = (now, self.total_bytes(conn))  # after a turn: what the writer before left
                    if (not turn and keep is not None and conn.dialect.name == "postgresql"
                            and known[1] + size > self.quota_bytes * QUOTA_NEAR):
                        turn = True
                        continue
                self._check_counted(conn, size, keep, known)
                return

    def _check_counted(self, conn: Connection, size: int, keep: tuple[str, ...] | None,
                       known: tuple[float, int]) -> None:
        """`_check_quota` once the store is counted (`known`), under `_used_lock`: collect if over and
        allowed to, refuse if still over, else count this write in."""
        used = known[1]
        # A writer whose count is up to a second old (see QUOTA_RECOUNT_SECONDS) may still write
        # beside the collection and take some of its room: then it collects again, until the write fits
        # or nothing more can go (each round removes a content, so this ends). At most three rounds
        # could refuse a write that a fourth would have fitted, saying that what must stay left no
        # room, which was then not so (the likely cause of 2 failures in ~10 runs, on one machine, of
        # the test of twelve writers near the quota on PostgreSQL).
        collected = False
        report = GcReport()
        while keep is not None and size <= self.quota_bytes and used + size > self.quota_bytes:
            report = GcReport()
            collect(conn, utcnow(), self.quota_bytes - size, keep, report, room=True)
            collected = True
            known = (time.monotonic(), self.total_bytes(conn))
            used = known[1]
            if not report.contents_removed:
                break  # nothing more can go
        # after a collection the count holds evictions this transaction has not committed (a refused
        # put rolls them back): the next write counts again
        if used + size > self.quota_bytes:
            self._used = None if collected else known
            if size > self.quota_bytes:
                raise QuotaExceeded(f"{size:,} bytes are more than the store's whole quota of "
                                    f"{self.quota_bytes:,} bytes (raise OFFLOAD_QUOTA_BYTES)", size)
            if collected:
                raise QuotaExceeded(
                    f"storing {size:,} bytes would take the store over its quota of {self.quota_bytes:,} "
                    f"even with every artifact that may go evicted: {report.staying_bytes:,} bytes must stay "
                    f"(pinned artifacts, the call's own, content being written) of the {used:,} stored; unpin or "
                    "delete some, or raise OFFLOAD_QUOTA_BYTES", size)
            raise QuotaExceeded(
                f"storing {size:,} bytes would take the store to {used + size:,} bytes, over its quota of "
                f"{self.quota_bytes:,} (`offload gc` evicts the least recently used to make room; pinned "
                "artifacts stay: unpin or delete some, or raise OFFLOAD_QUOTA_BYTES)", size)
        # counted as written even if the write then fails: a sum too high only brings a count sooner
        self._used = None if collected else (known[0], used + size)
