"""The extract log: every slice and query, written without making a read wait behind a writer. A mixin of
`Store`, which provides `_write(wait=…)` (a write transaction, or StoreError at once when the lock is
taken and `wait` is False) and `_read()`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

import sqlalchemy as sa

from ..errors import StoreError, StoreReadOnly
from .models import extracts
from .records import decode_cursor, encode_cursor, new_id, page_limit, unbindable_id, utcnow

__all__ = ["ExtractLog"]

log = logging.getLogger("offload")


class ExtractLog:
    """The extract-log half of `Store`."""

    _read: Any  # provided by Store
    _write: Any

    def _start_log(self) -> None:
        self._to_log: list[dict[str, Any]] = []  # extracts to log once the write lock is free (`log_extract`)
        self._logging: threading.Thread | None = None
        self._logging_lock = threading.Lock()

    def log_extract(self, row: dict[str, Any]) -> str:
        """Log a slice or query: at once if the write lock is free, else on a thread that waits for it (as
        any write does) while the answer goes back, so a read never waits behind a writer to log itself
        (`slice` waited as long as the writer). `list_extracts` and `close` wait for that thread."""
        extract_id = row.get("id") or new_id("ext_")
        full = {**row, "id": extract_id, "created_at": utcnow()}
        try:
            with self._write(wait=False) as conn:
                conn.execute(extracts.insert().values(**full))
            return extract_id
        except StoreReadOnly:
            raise
        except StoreError:
            pass
        with self._logging_lock:
            self._to_log.append(full)
            if self._logging is None or not self._logging.is_alive():  # not alive: forked since, or done
                self._logging = threading.Thread(target=self._log_later, name="offload-extract-log")
                self._logging.start()
        return extract_id

    def _log_later(self) -> None:
        while True:
            with self._logging_lock:
                rows, self._to_log = self._to_log, []
                if not rows:
                    self._logging = None
                    return
            try:
                with self._write() as conn:
                    for row in rows:
                        conn.execute(extracts.insert().values(**row))
            except Exception as exc:  # noqa: BLE001 - the answers went back; only their log lines are lost
                log.warning("could not log %d extract(s): %s", len(rows), exc)

    def _logged(self) -> None:
        """Wait for the extracts `_log_later` is writing."""
        thread = self._logging
        if thread is not None:
            thread.join()

    def list_extracts(self, namespace: str, *, extract_id: str | None = None, artifact_id: str | None = None,
                      since: dt.datetime | None = None, until: dt.datetime | None = None,
                      limit: int | None = None, cursor: str | None = None) -> list[dict[str, Any]]:
        """Oldest first; `cursor` (from `page_extracts`) continues after the last row of a page."""
        self._logged()  # what this process logged is there
        if any(unbindable_id(id_) for id_ in (extract_id, artifact_id) if id_):
            return []
        e = extracts.c
        query = sa.select(extracts).where(e.namespace == namespace)
        # an empty id is an id no extract has, as `get("")` says: it stood for no filter, and
        # `rerun --extract ""` re-ran the whole log
        if extract_id is not None:
            query = query.where(e.id == extract_id)
        if artifact_id is not None:
            query = query.where(e.artifact_id == artifact_id)
        if since is not None:
            query = query.where(e.created_at >= since)
        if until is not None:  # as `list`: since inclusive, until exclusive
            query = query.where(e.created_at < until)
        if cursor:
            created, last_id = decode_cursor(cursor)
            query = query.where(sa.or_(e.created_at > created, sa.and_(e.created_at == created, e.id > last_id)))
        query = query.order_by(e.created_at, e.id)
        if limit:
            query = query.limit(limit)
        with self._read() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def page_extracts(self, namespace: str, *, limit: int, cursor: str | None = None,
                      **filters: Any) -> tuple[list[dict[str, Any]], str | None]:
        """`limit` extracts, oldest first, and the cursor of the next page (None after the last)."""
        page_limit(limit)
        rows = self.list_extracts(namespace, limit=limit + 1, cursor=cursor, **filters)
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
