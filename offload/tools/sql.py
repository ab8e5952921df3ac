"""SQL over one artifact: an in-memory DuckDB database holding one table, `artifact`, locked down for
hostile queries. The data is loaded from a private temporary file *before* the lock; afterwards a query
must be one read-only SELECT whose parsed tree names only `artifact` (or its own CTEs) and harmless
functions, and it runs under a time limit and a memory limit, its rows streamed back in batches.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import itertools
import math
import re
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import orjson

from offload.errors import InvalidArgument, QueryError, QueryTimeout, TooLarge
from offload.jsontext import dumps
from offload.tools.sql_guard import find_problem
from offload.tools.sql_load import fill_csv, fill_json

__all__ = ["SqlResult", "SqlTable", "SQL_EXAMPLE"]

SQL_EXAMPLE = "SELECT status, count(*) FROM artifact GROUP BY 1"

# Settings applied after the data is loaded, in this order (memory_limit and threads are set when the
# database opens, so loading is bounded too); `lock_configuration` comes last so that no query can turn
# any of them back on: every SET/RESET then fails, even one that got past the statement check.
_LOCKDOWN = (
    ("temp_directory", "''"),  # never spill to disk: over the memory limit a query fails instead
    ("max_temp_directory_size", "'0B'"),
    ("enable_external_access", "false"),  # no files, URLs, ATTACH, COPY, INSTALL/LOAD
    ("disabled_filesystems", "'LocalFileSystem'"),
    ("allow_community_extensions", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("allow_persistent_secrets", "false"),
    ("GLOBAL python_enable_replacements", "false"),  # FROM some_name must never scan a Python variable
    ("GLOBAL python_scan_all_frames", "false"),
    ("lock_configuration", "true"),
)

_TEMP_PATH = re.compile(r"""["']?/[^\s"']*offload-sql-[^\s"']*["']?""")
_COLUMN_HINT_MAX = 40


class SqlTable:
    """An in-memory DuckDB database holding one table named `artifact`, locked down for hostile SQL.

    Build one with `from_rows_ndjson`, `from_csv` or `from_json_array`; run queries with `execute`.
    One table may be shared by threads: query starts are serialized, results stream on their own cursor.
    """

    def __init__(self, conn: duckdb.DuckDBPyConnection, *, memory_limit: str, notes: list[str] | None = None):
        self._conn = conn
        # What a query's result says about how the data became the table: keys renamed, ragged lines.
        self.notes: list[str] = notes or []
        self._memory_limit = memory_limit
        self._lock = threading.Lock()
        self._open_results: weakref.WeakSet[SqlResult] = weakref.WeakSet()
        self._closing = False
        self._closed = False
        self.columns: list[tuple[str, str]] = [
            (name, str(type_)) for name, type_, *_ in conn.execute("DESCRIBE artifact").fetchall()
        ]
        self.rows: int = conn.execute("SELECT count(*) FROM artifact").fetchone()[0]
        # Bytes DuckDB holds for the table: what a cache should count against its budget.
        self.memory_bytes: int = conn.execute(
            "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()"
        ).fetchone()[0]
        # Names a CTE may not take: an unqualified reference to one would otherwise reach a system view.
        self._catalog_names = frozenset(
            name.lower()
            for (name,) in conn.execute(
                "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views()"
            ).fetchall()
        ) - {"artifact"}
        for name, value in _LOCKDOWN:
            conn.execute(f"SET {name} = {value}")

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def from_rows_ndjson(cls, ndjson: bytes, *, memory_limit: str = "256MB", threads: int = 1) -> SqlTable:
        """Load NDJSON bytes (one JSON object per line); each key becomes a column (see `sql_load.fill_json`)."""
        return cls._load(lambda conn, folder: fill_json(conn, folder, ndjson, "newline_delimited", None),
                         "JSON rows", len(ndjson), memory_limit=memory_limit, threads=threads)

    @classmethod
    def from_json_array(
        cls, items: list[Any] | bytes, *, memory_limit: str = "256MB", threads: int = 1
    ) -> SqlTable:
        """Load a JSON array of objects, given as Python objects or as the array's JSON text."""
        # DuckDB reads a top-level array element by element, so `maximum_object_size` bounds one
        # element, not the whole document (the 16 MB failure in NOTES comes from wrapping the array).
        given = None if isinstance(items, (bytes, bytearray, memoryview)) else items
        data = bytes(dumps(items) if given is not None else items)
        return cls._load(lambda conn, folder: fill_json(conn, folder, data, "array", given),
                         "JSON rows", len(data), memory_limit=memory_limit, threads=threads)

    @classmethod
    def from_csv(
        cls,
        data: bytes,
        *,
        delimiter: str = ",",
        header: bool = True,
        memory_limit: str = "256MB",
        threads: int = 1,
    ) -> SqlTable:
        """Load CSV (or TSV with `delimiter="\\t"`) as its shape reads it (offload.content.table): the
        same quoting, rows and column names; types are sniffed from every row. A record with more fields
        than the header keeps them in extra columns, one with fewer gets NULLs, and `notes` names them."""
        return cls._load(lambda conn, folder: fill_csv(conn, folder, data, delimiter, header),
                         "CSV", len(data), memory_limit=memory_limit, threads=threads)

    @classmethod
    def _load(
        cls,
        fill: Callable[[duckdb.DuckDBPyConnection, str], list[str]],
        kind: str,
        size: int,
        *,
        memory_limit: str,
        threads: int,
    ) -> SqlTable:
        """A table filled by `fill(conn, folder)`, which writes the data in the private `folder`, creates
        `artifact` from it and returns the notes a query result carries."""
        conn = duckdb.connect(
            ":memory:",
            config={
                "memory_limit": memory_limit,
                "threads": threads,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            },
        )
        folder = tempfile.mkdtemp(prefix="offload-sql-")  # mode 0700
        try:
            notes = fill(conn, folder)
            return cls(conn, memory_limit=memory_limit, notes=notes)
        except duckdb.OutOfMemoryException as exc:
            conn.close()
            raise TooLarge(
                f"The artifact ({size:,} bytes) does not fit in the SQL memory limit ({memory_limit}). "
                "Use jmespath or grep on it instead, or raise the SQL memory limit."
            ) from exc
        except duckdb.Error as exc:
            conn.close()
            raise QueryError(f"The artifact could not be loaded as {kind} for SQL: {_scrub(exc)}") from exc
        except BaseException:
            conn.close()
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- querying --------------------------------------------------------------------------------

    def execute(self, sql: str, *, timeout: float = 5.0, deadline: float | None = None) -> SqlResult:
        """Run one read-only SELECT over `artifact`; rows come from the result's `iter_rows`.

        `timeout` counts DuckDB's time only (a caller streaming rows out is not charged for its own);
        `deadline`, a `time.monotonic()` instant, also stops DuckDB once the whole answer is late.
        Raises QueryError (refused or failing query, out of memory) or QueryTimeout.
        """
        with self._lock:
            if self._closing:
                raise RuntimeError("this SqlTable is closed")
            cursor = self._conn.cursor()
            # Never committed: closing the cursor rolls back anything a query could have changed.
            cursor.begin()
            result = SqlResult(self, cursor, sql, timeout, deadline)
            self._open_results.add(result)
        try:
            self._check(cursor, sql)
            with self._lock:  # one query start at a time; streaming happens outside the lock
                result._call(cursor.execute, sql)
            result._describe()
        except BaseException:
            result.close()
            raise
        return result

    def close(self) -> None:
        """Release the database; waits for results still being read (they close it when done)."""
        with self._lock:
            self._closing = True
            if any(not result._done for result in list(self._open_results)):
                return
            self._close_now()

    def _result_done(self, result: SqlResult) -> None:
        with self._lock:
            self._open_results.discard(result)
            if self._closing and not any(not r._done for r in list(self._open_results)):
                self._close_now()

    def _close_now(self) -> None:
        if not self._closed:
            self._closed = True
            self._conn.close()

    def __enter__(self) -> SqlTable:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SqlTable artifact: {self.rows} rows, {len(self.columns)} columns>"

    # -- the statement check ----------------------------------------------------------------------

    def _check(self, cursor: duckdb.DuckDBPyConnection, sql: str) -> None:
        problem = find_problem(cursor, sql, self._catalog_names)
        if problem:
            raise self._refuse(problem)

    def _refuse(self, reason: str) -> QueryError:
        return QueryError(f"{reason}\n{self._hint()}")

    def _hint(self) -> str:
        shown = ", ".join(f"{name} ({type_})" for name, type_ in self.columns[:_COLUMN_HINT_MAX])
        more = len(self.columns) - _COLUMN_HINT_MAX
        if more > 0:
            shown += f", … and {more} more (SELECT * FROM artifact LIMIT 0 lists them)"
        notes = "".join(f" Note: {note}" for note in self.notes)
        return (
            f"The data is one table named `artifact` ({self.rows:,} rows) with columns: {shown}.{notes} "
            f"Example: {self.example()}"
        )

    def example(self) -> str:
        """SQL_EXAMPLE over one of this table's own columns, a text one when it has one (the example named
        `status` whatever the columns were)."""
        if not self.columns:
            return SQL_EXAMPLE
        name = next((name for name, type_ in self.columns if type_ == "VARCHAR"), self.columns[0][0])
        quoted = '"' + name.replace('"', '""') + '"'  # quoted: a column may be named `order` or `a b`
        return f"SELECT {quoted}, count(*) FROM artifact GROUP BY 1"


class SqlResult:
    """The rows of one query, read in batches with `iter_rows` (once). JSON-able values: dates and
    times as ISO 8601 text, UUIDs and intervals as text, decimals as numbers (as text when a float
    would change them), BLOBs as base64 text, NaN/Infinity as the strings "NaN"/"Infinity"/"-Infinity",
    integers beyond 64 bits as text, JSON columns parsed."""

    def __init__(self, table: SqlTable, cursor: duckdb.DuckDBPyConnection, sql: str, timeout: float,
                 deadline: float | None = None):
        self.sql = sql
        self.columns: list[str] = []
        self.types: list[str] = []
        self._table = table
        self._cursor = cursor
        self._timeout = timeout
        self._remaining = timeout  # seconds of DuckDB time left; the caller's time between batches is free
        self._deadline = math.inf if deadline is None else deadline  # ...unless the caller set a deadline
        self._fired = False
        self._done = False
        self._started = False
        self._converters: list[Callable[[Any], Any] | None] | None = None
        self.batch_size = 1000

    def iter_rows(self, batch: int = 1000) -> Iterator[dict]:
        """Yield each row as a dict, fetching `batch` rows at a time (never the whole result at once)."""
        for rows in self.iter_batches(batch):
            yield from self.as_dicts(rows)

    def iter_batches(self, batch: int = 1000) -> Iterator[list[tuple]]:
        """Yield the rows `batch` at a time as DuckDB's tuples (once per result); `as_dicts` turns a batch
        into JSON-able dicts, and a caller that only counts rows can skip that, the costly part. The
        caller may set `batch_size` between batches (rows of a MB each: fewer at a time)."""
        if batch < 1:
            raise InvalidArgument(f"batch must be 1 or more, not {batch}.")
        if self._started or self._done:
            raise RuntimeError("iter_rows() or iter_batches() can be called once per SqlResult")
        self._started = True
        self.batch_size = batch
        try:
            while True:
                rows = self._call(self._cursor.fetchmany, max(1, self.batch_size))
                if not rows:
                    return
                yield rows
        finally:
            self.close()

    def as_dicts(self, rows: list[tuple]) -> Iterator[dict]:
        """One batch of `iter_batches` as dicts of JSON-able values."""
        if self._converters is None:
            self._converters = [_converter(type_) for type_ in self.types]
        converters, columns = self._converters, self.columns
        if all(conv is None for conv in converters):
            for row in rows:
                yield dict(zip(columns, row))
        else:
            for row in rows:
                yield {
                    name: (value if conv is None or value is None else conv(value))
                    for name, conv, value in zip(columns, converters, row)
                }

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._cursor.close()
        finally:
            self._table._result_done(self)

    def __enter__(self) -> SqlResult:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _describe(self) -> None:
        names, self.types = [], []
        seen: dict[str, int] = {}
        for name, type_, *_ in self._cursor.description or ():
            # Duplicate names (`SELECT 1 a, 2 a`) would collapse in a dict: suffix them instead.
            count = seen.get(name, 0)
            seen[name] = count + 1
            names.append(name if count == 0 else f"{name}_{count}")
            self.types.append(str(type_))
        self.columns = names

    def _call(self, fn: Callable, *args):
        """Run one DuckDB call under what remains of the time budget, mapping errors for the model."""
        started = _clock()
        if self._remaining <= 0 or started >= self._deadline:
            self._fired = True
            raise self._timeout_error()
        token = _WATCHDOG.arm(min(started + self._remaining, self._deadline), self._interrupt)
        try:
            return fn(*args)
        except duckdb.InterruptException as exc:
            raise self._timeout_error() if self._fired else QueryError("The query was interrupted.") from exc
        except duckdb.OutOfMemoryException as exc:
            raise QueryError(
                f"The query needs more memory than the SQL limit ({self._table._memory_limit}). "
                "Aggregate (GROUP BY), filter with WHERE, select fewer columns, or add LIMIT.\n"
                + self._table._hint()
            ) from exc
        except duckdb.PermissionException as exc:
            raise QueryError(
                f"The query tried to reach outside the artifact, which is not allowed: {_scrub(exc)}\n"
                + self._table._hint()
            ) from exc
        except duckdb.Error as exc:
            if self._fired:
                raise self._timeout_error() from exc
            raise QueryError(f"SQL error: {_scrub(exc)}\n{self._table._hint()}") from exc
        finally:
            _WATCHDOG.disarm(token)
            self._remaining -= _clock() - started

    def _interrupt(self) -> None:
        self._fired = True
        self._cursor.interrupt()

    def _timeout_error(self) -> QueryTimeout:
        return QueryTimeout(
            f"The query stopped after {self._timeout:g} s: it takes too long. Add a WHERE clause or a LIMIT, "
            "avoid joining `artifact` to itself, or aggregate first (e.g. "
            f"{self._table.example()})."
        )


def _scrub(exc: BaseException) -> str:
    """DuckDB's message without the private temporary path the data was loaded from."""
    return _TEMP_PATH.sub("<artifact>", str(exc)).strip()


# -- JSON-able values ---------------------------------------------------------------------------------

_PLAIN_TYPES = frozenset(
    {"VARCHAR", "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
     "UINTEGER", "UBIGINT", "BIT"}
)


def _converter(type_: str) -> Callable[[Any], Any] | None:
    """The converter for one result column, or None when DuckDB's Python values are already JSON-able."""
    if type_ in _PLAIN_TYPES or type_.startswith("ENUM("):
        return None
    if type_ == "JSON":
        return orjson.loads
    if type_ in ("DOUBLE", "FLOAT"):
        return _float
    return jsonable


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def jsonable(value: Any) -> Any:
    """Convert one DuckDB Python value (possibly nested) to something orjson and json both encode."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, decimal.Decimal):
        as_float = float(value)
        return as_float if decimal.Decimal(repr(as_float)) == value else str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, datetime.timedelta)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: jsonable(item) for key, item in value.items()}
        # A MAP with non-text keys: keep the keys' types by listing the pairs.
        return [{"key": jsonable(key), "value": jsonable(item)} for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return str(value)


# -- the time limit --------------------------------------------------------------------------------

_clock = time.monotonic


class _Watchdog:
    """One daemon thread that calls a callback (a cursor's `interrupt`) when its deadline passes.

    A timer that interrupts from another thread is the only time limit that works when the query runs
    off the main thread (web workers, MCP handlers), where signals cannot reach it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, Callable[[], None]]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, callback: Callable[[], None]) -> int:
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = (deadline, callback)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="offload-sql-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = _clock()
                due = [token for token, (deadline, _) in self._armed.items() if deadline <= now]
                for token in due:
                    _, callback = self._armed.pop(token)
                    callback()  # DuckDB's interrupt only sets a flag: quick, safe under the lock
                wait = min((deadline for deadline, _ in self._armed.values()), default=now + 60) - now
                self._cond.wait(timeout=max(wait, 0.001))


_WATCHDOG = _Watchdog()
