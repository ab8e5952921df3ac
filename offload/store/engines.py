"""From a store location to a migrated SQLAlchemy engine.

The store is found like git finds a repository: an explicit URL (or OFFLOAD_URL), else the nearest
`.offload/` folder from the working directory upwards, else a per-user store. SQLite runs in WAL mode
with a busy timeout so several processes share one store; writes take the lock up front (BEGIN
IMMEDIATE) so a reader turning writer never fails with "database is locked" mid-transaction. A SQLite
store this user cannot write is opened read-only (see `_read_only_url`) and never migrated. Opening
changes nothing that is not an offload store: a path that is not a regular file, or a database of
another program, is refused as it is (see `_refuse_non_file`, `_not_offload`).
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import urllib.parse
import weakref
import zlib
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from ..errors import StoreError, StoreLocked, StoreReadOnly
from .models import metadata

PROJECT_DIR = ".offload"
STORE_FILE = "store.db"


def find_project_store(start: Path | None = None) -> Path | None:
    """The nearest `.offload/` folder from `start` (default: the working directory) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_DIR
        if candidate.is_dir():
            return candidate
    return None


def user_store_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("offload", appauthor=False))


def file_url(path: Path | str, backend: str = "sqlite") -> str:
    """The URL of the store file at `path`, whatever its name holds: written as f"sqlite:///{path}", a `?`
    starts the query (q?mark.db opened a file named q), `%41` is read as an A and `#` ends the URL."""
    return URL.create(backend, database=str(path)).render_as_string(hide_password=False)


def resolve_url(url: str | None = None) -> str:
    """The store URL: explicit, OFFLOAD_URL, nearest .offload/, else the per-user store."""
    url = url or os.environ.get("OFFLOAD_URL")
    if not url:
        folder = find_project_store() or user_store_dir()
        return file_url(folder / STORE_FILE)
    if "://" not in url:  # a plain path: the suffix says which embedded engine
        path = Path(url).expanduser().resolve()
        return file_url(path, "duckdb" if path.suffix == ".duckdb" else "sqlite")
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def init_project(folder: Path) -> Path:
    """Create `folder/.offload/` with a .gitignore that ignores everything in it; return the folder."""
    target = folder / PROJECT_DIR
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    gitignore = target / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# offload's store: never commit it\n*\n")
    return target


# ---------------------------------------------------------------------------------------------
# The store file and its side files

def database_file(url: URL) -> Path | None:
    """The file a SQLite or DuckDB URL names; None for PostgreSQL and in-memory databases."""
    backend, database = url.get_backend_name(), url.database
    if backend not in ("sqlite", "duckdb") or database in (None, "", ":memory:"):
        return None
    if backend == "sqlite" and url.query.get("uri") == "true" and database.startswith("file:"):
        # SQLite's URI filename (how a read-only store is opened): file:PATH, PATH percent-encoded
        return Path(urllib.parse.unquote(database.removeprefix("file:").removeprefix("//localhost")))
    return Path(database)


def _in_memory(url: URL) -> bool:
    """An in-memory database: one per connection (the pool gives each thread its own), so what the worker
    thread wrote of a big result was missing from the caller's ("no such table: contents")."""
    backend, database, query = url.get_backend_name(), url.database or "", url.query
    if backend == "duckdb" or (backend == "sqlite" and database in ("", ":memory:")):
        return database == "" or database.startswith(":memory:")
    return backend == "sqlite" and query.get("uri") == "true" and (
        query.get("mode") == "memory" or database.startswith("file::memory:"))


def _temporary_store(url: URL) -> URL:
    """An in-memory URL as a private temporary file (in a 0700 folder of its own), removed when the engine
    is disposed, collected, or the process ends: every thread and connection sees the one database, with
    the same WAL concurrency as a store on disk. A named shared-cache memory database would fail a
    reader beside a writer at once ("database table is locked": no busy timeout there)."""
    backend = url.get_backend_name()
    folder = tempfile.mkdtemp(prefix="offload-memory-")
    path = Path(folder) / ("store.duckdb" if backend == "duckdb" else STORE_FILE)
    query = {k: v for k, v in url.query.items() if k not in ("uri", "mode", "cache", "vfs")}
    return url.set(database=str(path), query=query)


def _remove_when_done(engine: Engine, folder: Path) -> None:
    remove = weakref.finalize(engine, shutil.rmtree, folder, ignore_errors=True)  # also at exit
    event.listen(engine, "engine_disposed", lambda _engine: remove())


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _refuse_non_file(path: Path, shown: str) -> bool:
    """Whether `path` exists; a StoreError, before anything is touched, when it is not a regular file.

    Opening made a folder, a device or a FIFO named as the store owner-only (a sticky 1777 folder lost
    its sticky bit, sqlite:////dev/null made the null device 0600), and DuckDB replaced any empty one
    (a FIFO) by its file: only a regular file, or nothing, may be a store."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:  # a parent that is a file, a folder this user cannot enter
        raise StoreError(f"Cannot open the store {shown}: {path}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISDIR(mode):
        raise StoreError(f"Cannot open the store {shown}: {path} is a directory; a SQLite or DuckDB store is a "
                         f"file (e.g. {path / STORE_FILE}). The directory was left as it is.")
    what = next((f"is {name}, not a regular file" for test, name in _KINDS if test(mode)), "is not a regular file")
    raise StoreError(f"Cannot open the store {shown}: {path} {what}; a SQLite or DuckDB store is a file. Point "
                     f"--url (or OFFLOAD_URL) at a new file; {path} was left as it is.")


def _prepare_path(backend: str, path: Path, existed: bool) -> None:
    """Make the folder, and for SQLite an owner-only (0600) file, before the database engine opens it."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if backend == "sqlite" and not existed:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    elif backend == "duckdb" and existed and os.lstat(path).st_size == 0 and stat.S_ISREG(os.lstat(path).st_mode):
        path.unlink()  # DuckDB refuses an empty file; it creates its own (made owner-only once open)


def owner_only(path: Path, *, follow: bool = True) -> None:
    """Take group's and others' access away from a regular file, and nothing from the owner: a store its
    owner made read-only (0444) stays read-only (it was made 0600, writable, at every open). Only a
    store that opened as one (or its side files) comes here; anything else is left as it is."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISREG(info.st_mode) and mode & 0o077:
        os.chmod(path, mode & 0o700)


def sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


_SIDECARS = ("-wal", "-shm", ".wal", "-journal")  # SQLite's log, its index and its rollback journal; DuckDB's log


def _restrict_sidecars(path: Path) -> None:
    for suffix in _SIDECARS:  # a link there is not SQLite's or DuckDB's own file: not followed
        owner_only(sidecar(path, suffix), follow=False)


def _writable(path: Path) -> bool:
    """Whether this user can write the SQLite store at `path`: the file, and the folder WAL mode makes its
    -wal and -shm files in (or those files, when they are there already). Asked once, at open."""
    if not os.access(path, os.W_OK):
        return False
    if os.access(path.parent, os.W_OK):
        return True
    return all(os.access(sidecar(path, suffix), os.W_OK) for suffix in ("-wal", "-shm"))


def _read_only_url(url: URL, path: Path) -> URL:
    """`url` opened read-only, through SQLite's URI filename.

    A read-write open of a file it cannot write falls back to read-only, but still makes the -shm file
    WAL mode reads through, which a read-only folder refuses ("attempt to write a readonly database").
    Without a -wal file no connection has the store open, so no one is writing it: `immutable=1` reads the
    file alone, with no side file and no lock. With one (a writer has it open, or died with commits only
    the log holds), `mode=ro` reads through the log, which needs its -shm file there or creatable.
    """
    return url.set(database="file:" + urllib.parse.quote(str(path)), query={**url.query, **_read_only_option(path),
                                                                             "uri": "true"})


def _read_only_option(path: Path) -> dict[str, str]:
    return {"mode": "ro"} if sidecar(path, "-wal").exists() else {"immutable": "1"}


def read_only_file(url: URL) -> Path | None:
    """The SQLite store file `url` opens read-only (see `_read_only_url`), else None."""
    query = url.query
    if url.get_backend_name() != "sqlite" or query.get("uri") != "true" or not url.database:
        return None
    if query.get("mode") != "ro" and query.get("immutable") != "1":
        return None
    return database_file(url)


# ---------------------------------------------------------------------------------------------
# Whose database it is

_OFFLOAD_TABLES = frozenset(metadata.tables)
_VERSION_TABLE = "alembic_version"


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())  # reads every migration file: once


@functools.cache
def _revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _scripts().walk_revisions())


def _not_offload(tables: set[str], revision: str | None, *, embedded: bool) -> str | None:
    """Why a database holding `tables` (its alembic revision `revision`) is not an offload store, or None.

    Opening another program's SQLite file added offload's tables beside its own, switched it to WAL mode
    and made it owner-only, for good. A file is one program's store: one with tables and none of
    offload's is refused (`embedded`). A PostgreSQL database is shared: offload's tables live beside
    others, but not beside another program's alembic_version, the table both keep their revision in.
    An unknown revision with offload's tables is a newer offload's (see `_refuse_newer`)."""
    ours = tables & _OFFLOAD_TABLES
    if revision is not None:
        if revision in _revisions() or {"artifacts", "contents", "chunks"} <= ours:
            return None
        return (f"its {_VERSION_TABLE} table is at revision {revision}, which is none of offload's: another "
                f"program's migrations manage it (tables: {_listed(tables)})")
    if ours:
        return (f"it has tables named like offload's ({_listed(ours)}) but no offload schema revision: "
                "offload did not make them")
    others = tables - {_VERSION_TABLE}
    if embedded and others:
        return f"it is another program's database (tables: {_listed(others)})"
    return None


def _listed(tables: set[str], most: int = 8) -> str:
    names = sorted(tables)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(magic)) == magic
    except OSError:  # unreadable: opening it says why
        return False


def _refusal(shown: str, path: Path | None, why: str) -> StoreError:
    if path is not None:
        return StoreError(f"{path} is not an offload store: {why}. Point --url (or OFFLOAD_URL) at an offload "
                          f"store or a new file; {path} was left as it is.")
    return StoreError(f"{shown} is not an offload store: {why}. Give offload a database or a schema of its own "
                      "(CREATE SCHEMA offload, then ?options=-csearch_path%3Doffload); nothing was changed.")


def _sqlite_schema(path: Path, shown: str, read_only: bool, timeout: float) -> tuple[set[str], str | None] | None:
    """`_schema` of the SQLite file at `path`, read without changing it (no WAL switch, no side file: see
    `_read_only_url`); None when it is no SQLite database, or a read-only store (opening says why)."""
    journal = sidecar(path, "-journal").exists()  # a rollback-journal writer is committing: read under its lock
    option = urllib.parse.urlencode({"mode": "ro"} if journal else _read_only_option(path))
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?{option}", uri=True, timeout=timeout)
        try:
            return _schema(conn.execute, sqlite=True)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if read_only or "not a database" in str(exc):  # opening it changes nothing, and says what it is
            return None
        raise StoreError(f"Cannot open the store {shown}: {path} could not be read to tell whether it is an "
                         f"offload store ({exc}); it was left as it is.") from exc


def _schema(execute, *, sqlite: bool) -> tuple[set[str], str | None]:
    """The tables (and views) of the schema a connection works in, and the alembic revision kept there."""
    tables = {row[0] for row in execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'" if sqlite else
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
        "AND table_catalog = current_database()")}
    rows = list(execute(f"SELECT version_num FROM {_VERSION_TABLE}")) if _VERSION_TABLE in tables else []
    return tables, rows[0][0] if rows else None


# ---------------------------------------------------------------------------------------------
# Opening

_FORKED: "weakref.WeakSet[Engine]" = weakref.WeakSet()  # engines whose pools a forked child replaces


def _new_pools_in_child() -> None:
    for engine in list(_FORKED):
        engine.dispose(close=False)  # the parent's connections left open for it, none used here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_pools_in_child)


def _fork_safe(engine: Engine, *, one_process: bool) -> None:
    """A process forked from one holding the store open never uses its parent's connections, which it
    shares the sockets of: a pooled one from another process is dropped, not closed, and a new one made
    (SQLAlchemy's recipe for os.fork). On PostgreSQL, forked workers' calls read one another's replies:
    one failed, one waited forever, and the parent's next write failed too. A DuckDB store is one
    process's (`one_process`): a forked child's writes went to its copy of the parent's database and
    were lost, each said to be stored; the child is refused instead, and its calls fail open.

    The pool itself is replaced in the child too (`_FORKED`), before any checkout: the pool's pre-ping,
    which runs before the checkout event, sent its ping on the parent's socket, and a child waited
    forever for a reply a sibling had read (one run in three, with other stores opened before)."""
    opened_by = os.getpid()
    if not one_process:
        _FORKED.add(engine)

    @sa.event.listens_for(engine, "connect")
    def _connected(_dbapi_connection, record) -> None:
        record.info["pid"] = os.getpid()

    @sa.event.listens_for(engine, "checkout")
    def _checked_out(_dbapi_connection, record, proxy) -> None:
        if one_process and os.getpid() != opened_by:
            raise StoreError(f"this DuckDB store was opened by process {opened_by}, and DuckDB lets one "
                             "process at a time use a database file: use SQLite or PostgreSQL for a store "
                             "several processes share")
        if record.info.get("pid", os.getpid()) != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None  # the parent's: left open for it
            raise sa.exc.DisconnectionError(f"a connection of process {record.info['pid']}, not of this one")


def make_engine(url: str, *, busy_timeout: float = 30.0) -> Engine:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    shown = parsed.render_as_string(hide_password=True)
    temporary = _in_memory(parsed)
    if temporary:
        parsed = _temporary_store(parsed)
    path = database_file(parsed)
    existed = path is not None and _refuse_non_file(path, shown)
    # a file that had something in it may be another program's: it is checked before it is changed
    foreign_check = existed and path.stat().st_size > 0
    read_only = backend == "sqlite" and existed and not _writable(path)
    if backend == "duckdb" and foreign_check and _starts_with(path, _SQLITE_MAGIC):
        # DuckDB reads a SQLite file through its sqlite extension, which it tried to download: an error
        # about a URL, with no network, or a SQLite store opened by another engine
        raise StoreError(f"{path} is a SQLite database, not a DuckDB one: open it with sqlite:///{path} (or give "
                         "the plain path); it was left as it is.")
    if backend == "sqlite" and foreign_check:
        schema = _sqlite_schema(path, shown, read_only, busy_timeout)
        if schema is not None and (why := _not_offload(*schema, embedded=True)) is not None:
            raise _refusal(shown, path, why)
    try:
        if path is not None and not read_only:
            _prepare_path(backend, path, existed)
    except OSError as exc:
        raise StoreError(f"Cannot create the store file {path}: {exc.strerror or exc}") from exc
    if backend == "sqlite":
        engine = sa.create_engine(_read_only_url(parsed, path) if read_only else parsed,
                                  connect_args={"timeout": busy_timeout, "check_same_thread": False})
        _sqlite_events(engine, busy_timeout, read_only=read_only)
    elif backend == "postgresql":
        # Every "lock, then read again" here needs each statement to see what committed before it: READ
        # COMMITTED, whatever the server's or the role's default. Under REPEATABLE READ the snapshot
        # predates the lock wait: two gcs at once fail with a serialization error, a removal of orphaned
        # content misses the artifact a put committed meanwhile (and drops content in use), and a
        # migrator that waited for another's lock reads the revision from before that migration.
        connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": max(1, round(busy_timeout))}
        engine = sa.create_engine(parsed, pool_pre_ping=True, isolation_level="READ COMMITTED",
                                  connect_args=connect_args)
        _postgresql_events(engine, busy_timeout)
    elif backend == "duckdb":
        engine = sa.create_engine(parsed)
    else:
        raise StoreError(f"Unsupported store URL {url!r}: use sqlite:///PATH, duckdb:///PATH or postgresql://…")
    _fork_safe(engine, one_process=backend == "duckdb")
    if temporary:
        _remove_when_done(engine, path.parent)
    try:
        with engine.connect() as conn:  # read-only, a real read: SQLite opens the file (and its log) lazily
            conn.exec_driver_sql("SELECT count(*) FROM sqlite_master" if read_only else "SELECT 1")
            why = (_not_offload(*_schema(conn.exec_driver_sql, sqlite=False), embedded=True)
                   if backend == "duckdb" and foreign_check else None)
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        raise _open_error(url, path, exc, read_only) from exc
    if why is not None:
        engine.dispose()
        raise _refusal(shown, path, why)
    if path is not None and not read_only:  # a read-only store is not ours to change, its modes neither
        owner_only(path)
        _restrict_sidecars(path)
    return engine


def _open_error(url: str, path: Path | None, exc: Exception, read_only: bool = False) -> StoreError:
    text = driver_message(exc)
    if "Could not set lock" in text or "Conflicting lock" in text:
        return StoreLocked(
            f"The DuckDB store {path} is open in another process, and a DuckDB file admits one process at a "
            "time. Stop that process, or use the default SQLite store (many processes can share it) or "
            "PostgreSQL for several writers."
        )
    shown = make_url(url).render_as_string(hide_password=True)
    if path is not None and ("file is not a database" in text or "not a valid DuckDB database" in text):
        return StoreError(f"Cannot open the store {shown}: {path} exists but is not a "
                          f"{'DuckDB' if 'DuckDB' in text else 'SQLite'} database ({text}). Point --url (or "
                          "OFFLOAD_URL) at an offload store or a new file; the file itself was left as it is.")
    if read_only and path is not None and sidecar(path, "-wal").exists() and not sidecar(path, "-shm").exists():
        return StoreReadOnly(path, f"be read ({text}): a writer's log (its -wal file) is beside it, and reading "
                                   "through the log needs a -shm file, which this user cannot make there")
    if path is not None and "readonly database" in text:
        return StoreReadOnly(path, f"be opened ({text})")
    return StoreError(f"Cannot open the store {shown}: {text}")


def driver_message(exc: Exception, *, first_line: bool = False) -> str:
    """What the database driver said, without SQLAlchemy's statement dump and documentation link
    (`first_line`: without the driver's own echo of the statement either)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    if first_line:
        text = text.splitlines()[0] if text else text
    return " ".join(text.split()) or type(exc).__name__


def _sqlite_events(engine: Engine, busy_timeout: float, *, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (pysqlite's own is too late)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if read_only:  # the rest is how to write
            cur.close()
            return
        cur.execute(f"PRAGMA page_size = {SQLITE_PAGE_SIZE}")  # takes effect only on a new, empty file
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
        cur.execute("PRAGMA wal_autocheckpoint = 0")  # wal.WalCheckpointer does it, off the writer's path
        cur.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        write = conn.get_execution_options().get("offload_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _postgresql_events(engine: Engine, busy_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # A row or table lock held elsewhere (a long transaction, a LOCK TABLE, another gc) would make a
        # write wait for ever, and with it the tool call: after busy_timeout the write fails, and the call
        # fails open like on a busy SQLite store. Advisory locks (gc, migrations) wait as long.
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET lock_timeout = {max(1, int(busy_timeout * 1000))}")  # 0 would mean never
        dbapi_conn.commit()  # a SET inside the connection's first transaction would be rolled back with it


# Pages of 32 KiB rather than SQLite's 4 KiB: a chunk's blob is a chain of overflow pages, each its own
# frame in the log, so bigger pages halve the time a big write takes (measured with Store.put: 100 MB
# 436 -> 227 ms, 10 MB 38 -> 27 ms, 1 MB 4.9 -> 3.8 ms) for a small write's 0.6 -> 0.9 ms and an empty
# store of 576 KiB instead of 72 KiB; 64 KiB gained no more. Stores made before keep their page size.
SQLITE_PAGE_SIZE = 32 << 10
# A log restarted from its start (by the first write after a complete checkpoint) is cut back to what that
# write logged, so the file's size is what the log holds; with a limit it kept that size, whatever it held.
WAL_SIZE_LIMIT = 0


# ---------------------------------------------------------------------------------------------
# Migrations

_migrate_lock = threading.Lock()


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "offload:migrations")
    return cfg


def head_revision() -> str:
    return _scripts().get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to head under a lock (one migrator at a time); returns (before, after). What the
    database refuses (a lock held past the busy timeout, a file holding other tables) is a StoreError
    of one line that names the store."""
    try:
        return _upgrade(engine)
    except sa.exc.DBAPIError as exc:
        why = driver_message(exc, first_line=True)
        if "already exists" in why:
            why += " (the database holds tables offload did not make: point --url at an offload store or a new file)"
        raise StoreError(f"Cannot migrate the store {engine.url.render_as_string(hide_password=True)}: {why}") from exc


def _upgrade(engine: Engine) -> tuple[str | None, str]:
    head = head_revision()
    with _migrate_lock:
        before = current_revision(engine)
        if before == head:
            return before, head
        with engine.connect() as conn:
            why = _not_offload(*_schema(conn.exec_driver_sql, sqlite=engine.dialect.name == "sqlite"), embedded=False)
        if why is not None:
            raise _refusal(engine.url.render_as_string(hide_password=True), database_file(engine.url), why)
        _refuse_newer(before, head)
        if (frozen := read_only_file(engine.url)) is not None:
            raise StoreReadOnly(frozen, f"be migrated to this offload's schema (revision {before} to {head})")
        with engine.connect().execution_options(offload_write=True) as conn:
            with conn.begin():
                if engine.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({zlib.crc32(b'offload-migrate')})")
                # another process may have migrated while we waited for the lock
                if MigrationContext.configure(conn).get_current_revision() != head:
                    cfg = alembic_config()
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
    return before, head


def _refuse_newer(revision: str | None, head: str) -> None:
    """A store another install of a newer offload has migrated: this version cannot know its schema."""
    if revision is not None and not revision in _revisions():
        raise StoreError(
            f"The store's schema is at revision {revision}, which this version of offload does not know "
            f"(it knows up to {head}): a newer offload migrated it. Upgrade offload "
            "(pip install -U offload) to use this store.")


def open_engine(url: str | None = None, *, busy_timeout: float = 30.0, migrate: bool = True) -> Engine:
    engine = make_engine(resolve_url(url), busy_timeout=busy_timeout)
    if migrate:
        try:
            upgrade(engine)
        except BaseException:
            engine.dispose()
            raise
        if (path := database_file(engine.url)) is not None and read_only_file(engine.url) is None:
            _restrict_sidecars(path)  # DuckDB made its log for the migration with the umask
    return engine
