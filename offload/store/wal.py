"""What a store's write-ahead log needs after each write: SQLite's is folded into the database off the
writer's path (`WalCheckpointer`), DuckDB's kept owner-only (`DuckDBLog`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sqlalchemy.engine import Engine

from .engines import database_file, owner_only, sidecar, read_only_file

WAL_CHECKPOINT_AT = 4 << 20  # bytes the log grew by, whoever wrote them, that start the next checkpoint


class WalCheckpointer:
    """Folds SQLite's write-ahead log into the database on a background thread.

    SQLite's automatic checkpoint runs inside the COMMIT of whichever write pushes the log past 1,000
    pages, so a 100 MB put paid for copying its bytes a second time and for two fsyncs before its tool
    call could return: 0.67 s of a 1.0 s `Store.put`. Our connections turn that off; after each write
    the log file's size (one stat) says how much it holds (see engines.WAL_SIZE_LIMIT), and once it is
    WAL_CHECKPOINT_AT past its size at this process's last checkpoint, a PASSIVE checkpoint runs on
    another connection: it never waits for readers or writers, and sqlite3 releases the GIL while it
    copies. The size counts what every process logged: counting this process's own writes, 30 puts by
    short-lived `offload put` processes (each under the mark) beside a server holding the store open (so
    no last close folded it) left a 55 MB log. The thread is not a daemon: a process that exits right
    after the write that started it lets it finish. Durability is what it was (synchronous=NORMAL never
    fsynced at commit in WAL mode), and a process that dies mid-checkpoint leaves a log the next opener
    recovers from.
    """

    def __init__(self, engine: Engine, path: Path):
        self.engine = engine
        self._log = sidecar(path, "-wal")
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._from = 0  # the log's size when this process last started a checkpoint (roughly: no lock)

    def after_write(self) -> None:
        try:
            size = os.stat(self._log).st_size
        except OSError:  # no log: nothing to fold
            return
        if size < self._from:  # the log restarted since (here or in another process)
            self._from = 0
        if size - self._from < WAL_CHECKPOINT_AT:
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return  # the frames it leaves behind trigger the next one
            self._from = size
            self._thread = threading.Thread(target=self._checkpoint, name="offload-wal-checkpoint")
            self._thread.start()

    def _checkpoint(self) -> None:
        try:
            raw = self.engine.raw_connection()  # autocommit: a checkpoint cannot run inside a transaction
            try:
                raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                raw.close()
        except Exception:  # noqa: BLE001 - the log stays valid; the next write or the last close retries
            pass

    def wait(self) -> None:
        """Let a running checkpoint finish (before the engine is disposed)."""
        thread = self._thread
        if thread is not None:
            thread.join()


class DuckDBLog:
    """Keeps a DuckDB store's write-ahead log (X.duckdb.wal) owner-only.

    DuckDB makes the log anew at the first write after each checkpoint, with the process's umask (0644:
    anyone could read the results it holds while the store is open, and after a kill until the next
    open), and has no setting for its mode. So after each write: one lstat, and a chmod when it is new."""

    def __init__(self, path: Path):
        self._log = sidecar(path, ".wal")

    def after_write(self) -> None:
        owner_only(self._log, follow=False)

    def wait(self) -> None:
        """(Nothing runs in the background.)"""


def wal_checkpointer(engine: Engine) -> WalCheckpointer | DuckDBLog | None:
    """What a store's write-ahead log needs after each write (`after_write`): SQLite's is folded into the
    database, DuckDB's kept owner-only; None for PostgreSQL and a read-only store."""
    path = database_file(engine.url)
    if path is None or read_only_file(engine.url) is not None:
        return None
    if engine.dialect.name == "sqlite":
        return WalCheckpointer(engine, path)
    return DuckDBLog(path) if engine.dialect.name == "duckdb" else None
