"""The artifact store: put whole, read ranges, list, delete, collect garbage, verify.

Kept deliberately narrow (put / read range / list / delete) so the chunks can later move to an object
store without touching callers. Every write is one transaction: an artifact is visible whole or not
at all. Content is deduplicated by sha256; artifacts are per call and point at it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..errors import (ArtifactExpired, ArtifactNotFound, ContentMismatch, InvalidArgument, StoreError,
                      StoreReadOnly)
from ..tokens import KINDS
from .chunking import CHUNK_SIZE, Chunk, ItemIndex, chunk_stream, count_lines
from .engines import read_only_file
from .models import artifacts, chunks, contents, extracts, item_blocks
from .reading import ContentReading
from .extract_log import ExtractLog
from .quota import QuotaCheck
from .records import (ContentInfo, GcReport, column_text, decode_cursor, encode_cursor, page_limit, unbindable_id,
                      utcnow)
from .retention import ACTIVE, Touches, collect, drop_orphans, end_artifacts, not_beside_gc, total_bytes
from .search import args_text, text_filter
from .wal import wal_checkpointer

ENDED_REASONS = {"expired": "expired", "evicted": "was evicted to keep the store under its size quota",
                 "deleted": "was deleted"}
_TOUCH_EVERY = dt.timedelta(seconds=60)  # accessed_at is for LRU eviction; a minute's precision is plenty

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# Bytes in memory come hashed by their caller (writes.py hashes a result once), and hashing a big one
# again would double that. What costs nothing is checked: no bytes can only be the empty content (an
# import once stored b"" under a real sha256, and the content read as nothing for good), and bytes
# shorter than this are hashed again (a microsecond or two beside a put's half a millisecond).
REHASH_BELOW = 4096


# Built once: every put looks its content up and inserts rows, and building the statements (and their
# cache keys) cost more than running the small ones.
_CONTENT = sa.select(contents).where(contents.c.sha256 == sa.bindparam("sha256"))
_CONTENT_TO_USE = _CONTENT.with_for_update(read=True)
_INSERT_ARTIFACT, _INSERT_CHUNKS, _INSERT_BLOCKS, _INSERT_CONTENT = (
    table.insert() for table in (artifacts, chunks, item_blocks, contents))


# DuckDB admits one writer at a time even inside a process (optimistic conflicts otherwise), and the
# Stores of one process on one DuckDB file share its database: one lock per file, not per Store (two
# Offloaders on one file failed 6 of 80 puts with "PRIMARY KEY or UNIQUE constraint violation").
_duckdb_locks: dict[str, threading.Lock] = {}
_duckdb_locks_lock = threading.Lock()


def _duckdb_write_lock(engine: Engine) -> threading.Lock:
    database = engine.url.database
    if not database or database == ":memory:":  # a database of this engine's alone
        return threading.Lock()
    key = os.path.realpath(database)
    with _duckdb_locks_lock:
        return _duckdb_locks.setdefault(key, threading.Lock())


class Store(ContentReading, ExtractLog, QuotaCheck):
    """One database holding artifacts, their content and the extract log."""

    def __init__(self, engine: Engine, *, quota_bytes: int | None = None):
        self.engine = engine
        self.quota_bytes = quota_bytes
        self._write_lock = _duckdb_write_lock(engine) if engine.dialect.name == "duckdb" else None
        self._checkpointer = wal_checkpointer(engine)
        self.read_only = read_only_file(engine.url)  # the file, when this user cannot write it (see engines)
        self._used: tuple[float, int] | None = None  # (when counted, bytes): see quota.QUOTA_RECOUNT_SECONDS
        self._used_lock = threading.Lock()
        self._touches = Touches()  # reads not yet written to accessed_at (see `_touch`)
        self._start_log()

    def close(self) -> None:
        """Finish background work and release the database."""
        self._logged()
        if self._checkpointer is not None:
            self._checkpointer.wait()
        self.engine.dispose()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    # -- transactions -----------------------------------------------------------------------

    @contextmanager
    def _write(self, *, wait: bool = True) -> Iterator[Connection]:
        """A write transaction. Not `wait`: StoreError at once if another writer holds the lock it needs
        (on PostgreSQL, a lock any of its statements needs), instead of waiting up to the busy timeout."""
        if self.read_only is not None:  # said before the database says "attempt to write a readonly database"
            raise StoreReadOnly(self.read_only)
        lock = self._write_lock
        if lock and not lock.acquire(wait):
            raise StoreError("The store could not be written now: another thread of this process is writing it")
        try:
            with self.engine.connect().execution_options(offload_write=True) as conn:
                with _sqlite_at_once(conn, not wait), conn.begin():
                    if not wait and conn.dialect.name == "postgresql":
                        conn.exec_driver_sql("SET LOCAL lock_timeout = 1")  # 1 ms: 0 would mean never
                    yield conn
        except sa.exc.IntegrityError:
            raise
        except sa.exc.DatabaseError as exc:  # locked past the timeout, a full disk, a damaged file
            if _duckdb_conflict(exc):  # DuckDB's "another writer stored it first": as IntegrityError
                raise sa.exc.IntegrityError(exc.statement, exc.params, exc.orig) from exc
            raise StoreError(f"The store could not be written: {exc.orig}") from exc
        finally:
            if lock:
                lock.release()
        if self._checkpointer is not None:
            self._checkpointer.after_write()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                with conn.begin():
                    yield conn
        except sa.exc.DatabaseError as exc:  # a damaged file: one clear line, not the SQL that met it
            raise StoreError(f"The store could not be read: {exc.orig} ({self.engine.url.render_as_string()})"
                             ) from exc

    # -- writing ----------------------------------------------------------------------------

    def total_bytes(self, conn: Connection | None = None) -> int:
        if conn is not None:
            return total_bytes(conn)
        with self._read() as c:
            return total_bytes(c)

    def has_content(self, sha256: str) -> bool:
        with self._read() as conn:
            return conn.execute(sa.select(contents.c.sha256).where(contents.c.sha256 == sha256)).first() is not None

    def put(self, row: dict[str, Any] | Callable[[], dict[str, Any]], data: bytes | Iterable[bytes], sha256: str,
            *, item_index: ItemIndex | Callable[[], ItemIndex | None] | None = None,
            chunks: list[Chunk] | None = None, make_room: Iterable[str] | None = None,
            more_rows: Iterable[dict[str, Any]] = ()) -> ContentInfo:
        """Store `data` (unless identical content is already stored) and the artifact `row`, atomically.

        `row` holds the artifacts columns except the content's sizes, which are filled in here; it may be
        a function returning them, called once the content is written, inside the same transaction
        (the offloader writes while it builds the reference); so may `item_index`, which is called
        only when the content is new. `chunks` are `data` already cut by `chunk_bytes`, when the
        caller has them. Over the quota the put fails (QuotaExceeded), unless `make_room` is given: then
        it first collects what `gc` would to make room for it, in its own transaction, keeping pinned
        artifacts and those `make_room` names (see `_check_quota`). `more_rows` are further artifacts
        of the same content, stored in the same transaction (an import's: one at a time, a gc in between
        could take the content the next one needs).

        A content row that holds no bytes under a sha256 that is not the empty content's cannot be
        right: it is stored again from `data`, and the artifacts pointing at it read whole again.
        """
        def write(conn: Connection) -> ContentInfo:
            info = self._stored_content(conn, data, sha256, item_index, chunks, make_room, to_use=True)
            now = utcnow()
            for given in (row() if callable(row) else row, *more_rows):
                full = {"created_at": now, "accessed_at": now, "pinned": False, "status": ACTIVE,
                        **given, "sha256": sha256, "bytes": info.bytes, "chars": info.chars,
                        "lines": info.lines, "items": info.items}
                full["args_text"] = args_text(full.get("args"))
                conn.execute(_INSERT_ARTIFACT, full)  # parameters apart: the compiled statement is reused
            return info

        return self._written(write)

    def put_content(self, data: bytes | Iterable[bytes], sha256: str, *,
                    item_index: ItemIndex | Callable[[], ItemIndex | None] | None = None,
                    chunks: list[Chunk] | None = None, make_room: Iterable[str] | None = None) -> ContentInfo:
        """Store `data` alone, in a transaction of its own, unless identical content is already stored.

        The offloader writes a big result's bytes this way while it builds the reference, so that the
        bulk of the write (SQLite writes its log at COMMIT) is done by the time the reference is; the
        `put` of the artifact row that follows finds the content and only adds the row. Until then the
        content belongs to no artifact: it is invisible, and `gc` removes it if the row never comes (a
        killed process), after ORPHAN_GRACE. A `put` whose content was removed meanwhile stores it again.
        """
        return self._written(lambda conn: self._stored_content(conn, data, sha256, item_index, chunks, make_room))

    def _stored_content(self, conn: Connection, data: bytes | Iterable[bytes], sha256: str,
                        item_index: ItemIndex | Callable[[], ItemIndex | None] | None, chunks: list[Chunk] | None,
                        make_room: Iterable[str] | None, *, to_use: bool = False) -> ContentInfo:
        """The content `sha256`, stored from `data` unless it is there (again, over a hollow row)."""
        info = self._content(conn, sha256, to_use=to_use)
        if info is None or _hollow(info):
            info = self._insert_content(conn, data, sha256, item_index, chunks, make_room, replace=info is not None)
        return info

    def discard_content(self, sha256: str) -> None:
        """Remove content that no artifact uses (what `put_content` stored for a row that never came)."""
        with self._write() as conn:
            not_beside_gc(conn)
            drop_orphans(conn, [sha256])

    def _written(self, write: Callable[[Connection], ContentInfo]) -> ContentInfo:
        for attempt in range(2):
            try:
                with self._write() as conn:
                    return write(conn)
            except sa.exc.IntegrityError:
                # another writer stored the same content first (PostgreSQL, or DuckDB: another thread of
                # this process through a connection of its own): it is there now
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _insert_content(self, conn: Connection, data: bytes | Iterable[bytes], sha256: str,
                        item_index: ItemIndex | Callable[[], ItemIndex | None] | None,
                        chunked: list[Chunk] | None = None, make_room: Iterable[str] | None = None,
                        *, replace: bool = False) -> ContentInfo:
        """Write the content's chunks, item index and row; `replace`: its row is there, hollow (see `put`),
        and is written again in place, with the sizes of the artifacts pointing at it."""
        whole = isinstance(data, (bytes, bytearray, memoryview))
        if whole and not _could_be(data, sha256):
            raise ContentMismatch(f"the {len(data):,} bytes given for content {sha256[:16]}… do not hash to it; "
                                  "nothing was stored")
        if whole and self.quota_bytes is not None:
            self._check_quota(conn, len(data), make_room)  # before writing anything, when the size is known
        if replace:
            for table in (chunks, item_blocks):
                conn.execute(table.delete().where(table.c.sha256 == sha256))
        size = chars = newlines = count = 0
        last = b""
        # bytes in memory were hashed by the caller and cannot change; a stream is hashed as it is stored
        digest = None if whole else hashlib.sha256()
        batch: list[dict] = []
        if chunked is None:
            chunked = chunk_stream([bytes(data)] if whole else (bytes(b) for b in data), CHUNK_SIZE)
        for chunk in chunked:
            batch.append({"sha256": sha256, "seq": chunk.seq, "byte_start": chunk.byte_start,
                          "char_start": chunk.char_start, "line_start": chunk.line_start, "data": chunk.data})
            if len(batch) == 8:  # executemany in batches of 8 MiB: fewer round trips, bounded memory
                conn.execute(_INSERT_CHUNKS, batch)
                batch = []
            if digest is not None:
                digest.update(chunk.data)
            size += len(chunk.data)
            chars += chunk.chars
            newlines += chunk.newlines
            count += 1
            last = bytes(chunk.data[-1:])
        if batch:
            conn.execute(_INSERT_CHUNKS, batch)
        if digest is not None and digest.hexdigest() != sha256:
            raise ContentMismatch("content changed while it was being stored (sha256 mismatch); nothing was stored")
        if self.quota_bytes is not None and not whole:
            self._check_quota(conn, size, make_room)
        if callable(item_index):
            item_index = item_index()
        blocks = [{"sha256": sha256, "block": block, "data": blob}
                  for block, blob in (item_index.blocks() if item_index is not None else ())]
        if blocks:
            conn.execute(_INSERT_BLOCKS, blocks)
        info = ContentInfo(sha256, size, chars, count_lines(size, newlines, last == b"\n"), count,
                           len(item_index) if item_index is not None else None,
                           item_index.path if item_index is not None else None)
        values = {"bytes": info.bytes, "chars": info.chars, "lines": info.lines, "chunk_count": count,
                  "items": info.items, "items_path": info.items_path, "created_at": utcnow()}
        if not replace:
            conn.execute(_INSERT_CONTENT, {"sha256": sha256, **values})
            return info
        conn.execute(contents.update().where(contents.c.sha256 == sha256).values(**values))
        conn.execute(artifacts.update().where(artifacts.c.sha256 == sha256).values(
            bytes=info.bytes, chars=info.chars, lines=info.lines, items=info.items))
        return info

    # -- reading metadata -------------------------------------------------------------------

    def _content(self, conn: Connection, sha256: str, *, to_use: bool = False) -> ContentInfo | None:
        """The stored content `sha256`, if any. `to_use`: the caller is about to point an artifact at it,
        so on PostgreSQL the row is share-locked until the caller commits, and a gc dropping it (which
        locks it first, see `retention.drop_orphans`) either finishes before, and this finds nothing,
        or waits and then finds it used. SQLite and DuckDB let one writer at a time in."""
        query = _CONTENT_TO_USE if to_use and conn.dialect.name == "postgresql" else _CONTENT
        row = conn.execute(query, {"sha256": sha256}).mappings().first()
        if row is None:
            return None
        return ContentInfo(row["sha256"], row["bytes"], row["chars"], row["lines"], row["chunk_count"],
                           row["items"], row["items_path"])

    def content(self, sha256: str) -> ContentInfo:
        with self._read() as conn:
            info = self._content(conn, sha256)
        if info is None:
            raise StoreError(f"content {sha256} is missing from the store (run `offload verify`)")
        return info

    def get(self, artifact_id: str, namespace: str, *, touch: bool = True) -> dict[str, Any]:
        """The artifact's row; NotFound for unknown ids and other namespaces, Expired for tombstones."""
        if not isinstance(artifact_id, str):
            raise InvalidArgument(f"artifact_id must be a string like art_…, not {type(artifact_id).__name__}")
        if unbindable_id(artifact_id):
            raise ArtifactNotFound(artifact_id)
        with self._read() as conn:
            row = conn.execute(sa.select(artifacts).where(artifacts.c.id == artifact_id)).mappings().first()
        if row is None or row["namespace"] != namespace:
            raise ArtifactNotFound(artifact_id)
        row = dict(row)
        now = utcnow()
        if row["status"] != ACTIVE:
            ended = row["status"] if row["status"] in ENDED_REASONS else "expired"
            raise ArtifactExpired(artifact_id, _iso(row["ended_at"]), ENDED_REASONS[ended], ended)
        if row["expires_at"] is not None and row["expires_at"] <= now and not row["pinned"]:
            raise ArtifactExpired(artifact_id, _iso(row["expires_at"]))
        if touch and now - row["accessed_at"] > _TOUCH_EVERY and self.read_only is None:
            self._touch(artifact_id, now)
        return row

    def _touch(self, artifact_id: str, now: dt.datetime) -> None:
        """Write when the artifact was read (accessed_at: gc evicts the least recently used first), only
        if the write lock is free at once: a read never waits behind a writer (`cat` waited 19 s behind a
        20 s transaction for this) nor fails for it. A touch that could not be written is kept, and
        written by the next touch or gc of this Store that gets the lock (gc first, so it evicts by what
        this process read); LRU order is advisory."""
        self._touches.add(artifact_id, now)
        try:
            with self._write(wait=False) as conn:
                written = self._touches.write(conn)
        except StoreError:
            return  # written later (see above)
        self._touches.forget(written)

    def find_by_content(self, sha256: str, namespace: str) -> dict[str, Any] | None:
        """The newest live artifact of `namespace` holding exactly this content (id, tool, kind, bytes,
        lines), or None. The context guard names it instead of storing the same bytes again."""
        a = artifacts.c
        query = (sa.select(a.id, a.tool, a.kind, a.bytes, a.lines).where(
            a.sha256 == sha256, a.namespace == namespace, _live())
            .order_by(a.created_at.desc(), a.id.desc()).limit(1))
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        return {str(k): v for k, v in row.items()} if row is not None else None

    def live_ids(self, artifact_ids: Iterable[str], namespace: str) -> set[str]:
        """Those of `artifact_ids` that `get` still answers in `namespace`: the context guard checks the
        artifacts its cached notes and references name before it shows them again."""
        wanted = sorted(id_ for id_ in set(artifact_ids) if not unbindable_id(id_))
        if not wanted:
            return set()
        a = artifacts.c
        with self._read() as conn:
            return set(conn.scalars(sa.select(a.id).where(a.id.in_(wanted), a.namespace == namespace, _live())))

    def list(self, namespace: str, *, limit: int = 50, cursor: str | None = None, tool: str | None = None,
             session: str | None = None, kind: str | None = None, since: dt.datetime | None = None,
             until: dt.datetime | None = None, text: str | None = None,
             include_ended: bool = False) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, `limit` at a time; the cursor continues after the last row returned."""
        page_limit(limit)
        if kind is not None and kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {', '.join(KINDS)} (got {kind!r})")
        a = artifacts.c
        query = sa.select(artifacts).where(a.namespace == namespace)
        if not include_ended:  # past its TTL is ended too, gc or not: `get` answers "expired" for it
            query = query.where(_live())
        # looked for as they are written (a NUL cut SQLite's LIKE pattern short: it matched everything)
        tool, session, kind, text = (column_text(value) for value in (tool, session, kind, text))
        for column, value in ((a.tool, tool), (a.session, session), (a.kind, kind)):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(a.created_at >= since)
        if until is not None:
            query = query.where(a.created_at < until)
        if text:
            query = query.where(text_filter(text))
        if cursor:
            created, last_id = decode_cursor(cursor)
            query = query.where(sa.or_(a.created_at < created, sa.and_(a.created_at == created, a.id < last_id)))
        query = query.order_by(a.created_at.desc(), a.id.desc()).limit(limit + 1)
        with self._read() as conn:
            rows = [dict(r) for r in conn.execute(query).mappings()]
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
        return rows, next_cursor

    def same_results(self, namespace: str, *, tool: str, session: str, sha256: str,
                     limit: int = 20) -> list[dict[str, Any]]:
        """Active, unexpired artifacts of `tool` in `session` holding this content, newest first, with
        their args (JSON text): how a repeated call finds the earlier identical one."""
        a = artifacts.c
        tool, session = column_text(tool), column_text(session)  # as `put` wrote them
        query = (sa.select(a.id, a.args)
                 .where(a.sha256 == sha256, a.namespace == namespace, a.session == session, a.tool == tool,
                        _live())
                 .order_by(a.created_at.desc(), a.id.desc()).limit(limit))
        with self._read() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    # -- changing artifacts -----------------------------------------------------------------

    def set_pinned(self, artifact_id: str, namespace: str, pinned: bool) -> None:
        self.get(artifact_id, namespace, touch=False)
        with self._write() as conn:
            conn.execute(artifacts.update().where(artifacts.c.id == artifact_id).values(pinned=pinned))

    def extend_expiry(self, artifact_id: str, until: dt.datetime) -> None:
        """Keep a live artifact at least until `until` (one that expires sooner, or never, is left as it is
        otherwise): the context guard names an earlier artifact of the same content, which must outlive
        the conversation that names it as one stored now would."""
        a = artifacts.c
        with self._write() as conn:
            conn.execute(artifacts.update().where(a.id == artifact_id, a.status == ACTIVE, a.expires_at.is_not(None),
                                                  a.expires_at < until).values(expires_at=until))

    def delete(self, artifact_id: str, namespace: str) -> None:
        """End the artifact (a tombstone remains) and drop its content if nothing else uses it."""
        row = self.get(artifact_id, namespace, touch=False)
        with self._write() as conn:
            not_beside_gc(conn)
            end_artifacts(conn, [artifact_id], "deleted")
            drop_orphans(conn, [row["sha256"]])

    def gc(self, *, now: dt.datetime | None = None, quota_bytes: int | None = None, room: int = 0,
           protect: Iterable[str] = ()) -> GcReport:
        """Expire what is past its TTL, then evict least recently used until under quota, with `room` bytes
        to spare (a write that did not fit asks for its size); pinned artifacts, the `protect`ed ones (a
        call's own, just written) and whatever shares their content stay.

        The quota is the store's: eviction takes the least recently used whatever their namespace. When
        what must stay leaves no `room`, nothing is evicted (it would not make the write fit)."""
        quota = quota_bytes if quota_bytes is not None else self.quota_bytes
        if quota is not None and room:
            quota = max(quota - room, 0) if room <= quota else None  # nothing can make room for more than all
        report = GcReport()
        with self._write() as conn:
            touched = self._touches.write(conn)
            collect(conn, now or utcnow(), quota, protect, report, room=bool(room))
            report.total_bytes = self.total_bytes(conn)
        self._touches.forget(touched)
        # after the commit: a writer holding `_used_lock` may be waiting for the gc lock this held
        with self._used_lock:
            self._used = (time.monotonic(), report.total_bytes)
        return report

    def stats(self, namespace: str, top: int | None = None) -> dict[str, Any]:
        """Counts and sizes of live artifacts, and tokens kept out of the context, per session and tool
        (the `top` that kept out most, and the rest summed in `by_tool_rest`, `by_session_rest`).

        Tokens kept out = for each artifact, the raw result's estimate minus what the model was shown
        instead, when that is more: a small result `put` stored (its reference longer than itself) keeps
        nothing out; counted as less than nothing, it made totals negative. `store_bytes`
        is what those artifacts take once identical content is counted once: this namespace's own
        figure (the store's total would tell one tenant what the others keep).
        """
        a = artifacts.c
        saved = sa.func.sum(sa.case((a.tokens > a.shown_tokens, a.tokens - a.shown_tokens), else_=0))
        mine = sa.and_(a.namespace == namespace, _live())
        base = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(a.bytes), 0),
                         sa.func.coalesce(sa.func.sum(a.tokens), 0), sa.func.coalesce(saved, 0)).where(mine)
        distinct = sa.select(sa.func.coalesce(sa.func.sum(contents.c.bytes), 0)).where(
            contents.c.sha256.in_(sa.select(a.sha256).where(mine)))
        with self._read() as conn:
            count, size, tokens, kept = conn.execute(base).one()
            groups = {}
            for name, column in (("by_tool", a.tool), ("by_session", a.session)):
                query = (sa.select(column, sa.func.count(), sa.func.coalesce(sa.func.sum(a.bytes), 0),
                                   sa.func.coalesce(saved, 0))
                         .where(mine).group_by(column).order_by(sa.desc(sa.func.coalesce(saved, 0)), column))
                rows = conn.execute(query if top is None else query.limit(top)).all()
                shown = groups[name] = [{"name": r[0], "artifacts": int(r[1]), "bytes": int(r[2]),
                                         "tokens_saved": int(r[3])} for r in rows]
                # the groups past `top`, summed: every figure stays exact, the page bounded
                total_groups = len(shown) if top is None else conn.execute(sa.select(sa.func.count()).select_from(
                    sa.select(column).where(mine).group_by(column).subquery())).scalar_one()
                groups[f"{name}_rest"] = None if int(total_groups) <= len(shown) else {
                    "groups": int(total_groups) - len(shown),
                    "artifacts": int(count) - sum(g["artifacts"] for g in shown),
                    "bytes": int(size) - sum(g["bytes"] for g in shown),
                    "tokens_saved": int(kept) - sum(g["tokens_saved"] for g in shown)}
            extracts_count = conn.execute(sa.select(sa.func.count()).select_from(extracts).where(
                extracts.c.namespace == namespace)).scalar_one()
            store_bytes = conn.execute(distinct).scalar_one()
        return {"artifacts": int(count), "bytes": int(size), "tokens": int(tokens), "tokens_saved": int(kept),
                "extracts": int(extracts_count), "store_bytes": int(store_bytes), **groups}


def _hollow(info: ContentInfo) -> bool:
    """A content row that cannot be its sha256's: no bytes or no chunks, and not the empty content."""
    return (info.bytes == 0 or info.chunk_count == 0) and info.sha256 != EMPTY_SHA256


def _could_be(data: bytes | bytearray | memoryview, sha256: str) -> bool:
    """Whether bytes in memory can be the content `sha256`, as far as that costs nothing (see REHASH_BELOW)."""
    size = memoryview(data).nbytes
    if size == 0:
        return sha256 == EMPTY_SHA256
    return size >= REHASH_BELOW or hashlib.sha256(data).hexdigest() == sha256


def _duckdb_conflict(exc: sa.exc.DatabaseError) -> bool:
    """DuckDB's optimistic write conflicts: a constraint checked at commit ("Failed to commit: PRIMARY KEY
    or UNIQUE constraint violation"), "Conflict on tuple deletion!"; it raises them as TransactionException."""
    return type(exc.orig).__name__ in ("TransactionException", "ConstraintException") and \
        type(exc.orig).__module__.lstrip("_").startswith("duckdb")


@contextmanager
def _sqlite_at_once(conn: Connection, at_once: bool) -> Iterator[None]:
    """On SQLite with `at_once`, lock waits of `conn` fail at once (busy timeout 0) for the block, the
    BEGIN IMMEDIATE included; the connection gets its own timeout back after."""
    if not at_once or conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.driver_connection
    before = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
    raw.execute("PRAGMA busy_timeout = 0")
    try:
        yield
    finally:
        try:
            raw.execute(f"PRAGMA busy_timeout = {before}")
        except Exception:  # noqa: BLE001 - a connection that cannot take it back is not used again
            conn.invalidate()


def _live() -> sa.ColumnElement[bool]:
    """An artifact that answers `get`: active, and pinned or not past its TTL (gc may not have run)."""
    a = artifacts.c
    return sa.and_(a.status == ACTIVE, sa.or_(a.expires_at.is_(None), a.expires_at > utcnow(), a.pinned == sa.true()))


def _iso(value: dt.datetime | None) -> str | None:
    return value.replace(microsecond=0).isoformat() + "Z" if value else None
