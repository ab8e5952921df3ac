"""Portable archives: a namespace's artifacts (with metadata and tombstones), their content, item indexes
and the extract log in one tar file, so a store moves between machines or backends.

Layout: `manifest.json`, `artifacts.ndjson`, `extracts.ndjson`, `contents.ndjson` (sizes and item
paths), then for each content `items/<sha256>` (the packed item index) and `content/<sha256>` (the raw
bytes, streamed chunk by chunk both ways). Import is idempotent: ids already present are skipped, content
is deduplicated.

Every member is checked before what it holds is stored: a content by its name (its sha256, re-hashed as it
is stored), the others by the sha256 the manifest gives them (`digests`), and an item index also by its
bounds within its content. An archive edited or damaged anywhere but in the manifest is refused at the
member it was met in (a forger who rewrites the manifest too is not what this guards against). Archives
written before the manifest carried digests are read without them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np
import orjson
import sqlalchemy as sa

from ..errors import ContentMismatch, InvalidArgument, OffloadError
from .chunking import ItemIndex, index_fault, unpack_block
from .models import artifacts, contents, extracts, item_blocks
from .search import args_text
from .store import Store

FORMAT = "offload-archive"
VERSION = 1
_TIME_COLUMNS = ("created_at", "accessed_at", "expires_at", "ended_at")

Progress = Callable[[int], None]  # called with a number of bytes done


class _ChunkReader(io.RawIOBase):
    """A file object over a stored content's chunks, read one chunk at a time (for tarfile.addfile)."""

    def __init__(self, blocks: Iterator[bytes], progress: Progress | None):
        self._blocks, self._buffer, self._progress = blocks, b"", progress

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._buffer:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._buffer = block
            if self._progress:
                self._progress(len(block))
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


def _dumps(rows: list[dict[str, Any]]) -> bytes:
    out = []
    for row in rows:
        row = {str(key): value for key, value in row.items()}  # SQLAlchemy's keys are a str subclass
        for key in _TIME_COLUMNS:
            if row.get(key) is not None:
                row[key] = row[key].isoformat()
        # a new, exactly sized bytes: orjson's own keeps its 4 KiB or larger buffer for as long as it lives
        out.append(orjson.dumps(row) + b"\n")
    return b"".join(out)


def _loads(data: bytes) -> list[dict[str, Any]]:
    rows = []
    for line in data.splitlines():
        if line.strip():
            row = orjson.loads(line)
            for key in _TIME_COLUMNS:
                if row.get(key) is not None:
                    row[key] = dt.datetime.fromisoformat(row[key])
            rows.append(row)
    return rows


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def export_archive(store: Store, namespace: str, path: Path | BinaryIO, *, progress: Progress | None = None) -> dict:
    """Write the namespace to a tar archive; returns counts. Memory stays at about one chunk."""
    with store.engine.connect() as conn:
        # not args_text: it is derived from args, and made again on import (archives stay version 1)
        exported = sa.select(*(c for c in artifacts.c if c.name != "args_text"))
        rows = [dict(r) for r in conn.execute(exported.where(artifacts.c.namespace == namespace)
                                              .order_by(artifacts.c.created_at, artifacts.c.id)).mappings()]
        logged = [dict(r) for r in conn.execute(sa.select(extracts).where(extracts.c.namespace == namespace)
                                                .order_by(extracts.c.created_at, extracts.c.id)).mappings()]
        shas = sorted({r["sha256"] for r in rows if r["sha256"]})
        infos = [dict(r) for r in conn.execute(sa.select(contents).where(contents.c.sha256.in_(shas))).mappings()]
    members = {"artifacts.ndjson": _dumps(rows), "extracts.ndjson": _dumps(logged),
               "contents.ndjson": _dumps([{k: i[k] for k in ("sha256", "bytes", "items", "items_path")}
                                          for i in infos])}
    digests = {name: _digest(data) for name, data in members.items()}
    digests.update((f"items/{i['sha256']}", _digest(store.item_blob(i["sha256"])))
                   for i in infos if i["items"] is not None)
    manifest = {"format": FORMAT, "version": VERSION, "namespace": namespace, "artifacts": len(rows),
                "extracts": len(logged), "contents": len(infos), "bytes": sum(i["bytes"] for i in infos),
                "digests": digests}
    with contextlib.ExitStack() as stack:
        if isinstance(path, (str, Path)):
            # it holds every result the store does: readable by its owner only, as the store (a new file)
            file = stack.enter_context(open(path, "wb", opener=lambda name, flags: os.open(name, flags, 0o600)))
            tar = stack.enter_context(tarfile.open(fileobj=file, mode="w"))
        else:
            tar = stack.enter_context(tarfile.open(fileobj=path, mode="w|"))
        _write_members(store, tar, manifest, members, infos, progress)
    return manifest


def _write_members(store: Store, tar: tarfile.TarFile, manifest: dict, members: dict[str, bytes],
                   infos: list[dict], progress: Progress | None) -> None:
    """The members in the order import reads them: manifest, rows, then each content's item index (checked
    before the content is stored) and the content."""
    _add_bytes(tar, "manifest.json", orjson.dumps(manifest))
    for name, data in members.items():
        _add_bytes(tar, name, data)
    for info in infos:
        if info["items"] is not None:  # read a second time (once for its digest): one index in memory at once
            _add_bytes(tar, f"items/{info['sha256']}", store.item_blob(info["sha256"]))
        member = tarfile.TarInfo(f"content/{info['sha256']}")
        member.size = info["bytes"]
        tar.addfile(member, io.BufferedReader(_ChunkReader(store.iter_bytes(info["sha256"]), progress)))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def import_archive(store: Store, path: Path | BinaryIO, *, namespace: str | None = None,
                   progress: Progress | None = None) -> dict:
    """Load an archive into `store` (into `namespace`, default the archive's own). Idempotent.

    A file that is not an offload archive, or one damaged on the way (truncated, edited), is refused with
    InvalidArgument naming the file and what is wrong. Each content is re-hashed as it is stored, so a
    damaged one stores nothing; what was already in the store is never changed. Artifacts imported before
    the damage was met stay (importing the intact archive again completes it: ids present are skipped).
    """
    label = str(path) if isinstance(path, (str, Path)) else "the archive"
    # skipped: ids the store holds already; skipped_elsewhere: of those, the ones another namespace holds
    imported: dict[str, Any] = {"artifacts": 0, "extracts": 0, "contents": 0, "skipped": 0, "skipped_elsewhere": {}}
    try:
        opener = tarfile.open(path, "r") if isinstance(path, (str, Path)) else tarfile.open(fileobj=path, mode="r|")
    except tarfile.ReadError as exc:
        raise InvalidArgument(f"{label} is not an offload archive: it is not a tar file ({_first_line(exc)}); "
                              "archives are written by `offload export`. Nothing was imported.") from exc
    try:
        with opener as tar:
            return _import_members(store, tar, namespace, progress, label, imported)
    except OffloadError:
        raise
    except (tarfile.TarError, EOFError, ValueError, KeyError, TypeError, sa.exc.CompileError) as exc:
        why = f"a record lacks its {exc} field" if isinstance(exc, KeyError) else _first_line(exc)
        done = (f"{_count(imported['artifacts'], 'artifact')} and {_count(imported['extracts'], 'extract')} read "
                "before it were imported and stay (import the intact archive again to complete it)"
                if imported["artifacts"] or imported["extracts"] else "nothing was imported")
        raise InvalidArgument(f"{label} is damaged ({why}); {done}. What the store held before is unchanged.") from exc


def _import_members(store: Store, tar: tarfile.TarFile, namespace: str | None, progress: Progress | None,
                    label: str, imported: dict[str, int]) -> dict:
    first = tar.next()
    if first is None or first.name != "manifest.json" or not first.isfile():
        raise InvalidArgument(f"{label} is not an offload archive: it does not start with manifest.json"
                              + (f" (its first member is {first.name!r})" if first is not None else " (it is empty)")
                              + "; archives are written by `offload export`.")
    meta = orjson.loads(tar.extractfile(first).read())
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        found = meta if not isinstance(meta, dict) else {k: meta.get(k) for k in ("format", "version")}
        raise InvalidArgument(f"{label} is not an offload archive of version {VERSION} (its manifest says {found!r})")
    target = namespace if namespace is not None else meta["namespace"]
    digests = meta.get("digests")  # None in archives written before the manifest held them
    if digests is not None and not isinstance(digests, dict):
        raise ValueError("its manifest's digests are not an object")
    rows_by_sha: dict[str, list[dict]] = {}
    infos: dict[str, dict] = {}
    pending_items: dict[str, bytes] = {}
    seen: set[str] = set()
    for member in tar:
        name = member.name
        data = tar.extractfile(member) if member.isfile() else None
        if data is None or member.name == first.name:  # a file's members are listed from the first again
            continue
        if not name.startswith("content/"):
            data = io.BytesIO(_checked(name, data.read(), digests))
            seen.add(name)
        if name == "artifacts.ndjson":
            for row in _loads(data.read()):
                row["namespace"] = target
                held_by = _namespace_of(store, artifacts, row["id"])
                if held_by is not None:
                    imported["skipped"] += 1
                    if held_by != target:  # ids are the store's: another namespace of it holds this one
                        imported["skipped_elsewhere"][held_by] = imported["skipped_elsewhere"].get(held_by, 0) + 1
                elif row["sha256"] is None:  # a tombstone: keep saying "expired"
                    imported["artifacts" if _insert_new(store, artifacts, {
                        **row, "args_text": args_text(row.get("args"))}) else "skipped"] += 1
                else:
                    rows_by_sha.setdefault(row["sha256"], []).append(row)
        elif name == "extracts.ndjson":
            for row in _loads(data.read()):
                row["namespace"] = target
                if not _exists(store, extracts, row["id"]) and _insert_new(store, extracts, row):
                    imported["extracts"] += 1
        elif name == "contents.ndjson":
            infos = {i["sha256"]: i for i in _loads(data.read())}
        elif name.startswith("items/"):
            pending_items[name[6:]] = _bounded_index(name, data.read(), infos.get(name[6:]))
        elif name.startswith("content/"):
            sha = name[8:]
            rows = rows_by_sha.pop(sha, [])
            if rows:
                stored = _import_content(store, sha, data, rows, progress)
                imported["contents"] += 1
                imported["artifacts"] += stored
                imported["skipped"] += len(rows) - stored
    if missing := sorted(set(digests or ()) - seen):  # a member the manifest names never came
        raise ValueError(f"{missing[0]} is missing" + (f", and {len(missing) - 1:,} more members" if len(missing) > 1
                                                       else ""))
    # item indexes come before their content (after it, in archives written before 2026-12-07): attach them
    for sha, blob in pending_items.items():
        _attach_items(store, sha, blob, (infos.get(sha) or {}).get("items_path") or "")
    for rows in rows_by_sha.values():  # rows whose content the archive lacks: keep them as tombstones
        for row in rows:
            imported["artifacts" if _insert_new(store, artifacts, {
                **row, "sha256": None, "status": "deleted", "ended_at": row.get("ended_at") or row["created_at"],
                "args_text": args_text(row.get("args"))}) else "skipped"] += 1
    return {**meta, "imported": imported}


def _checked(name: str, data: bytes, digests: dict | None) -> bytes:
    """`data` when it is what the manifest's digest says; a ValueError (the archive is damaged) if not."""
    if digests is None:
        return data
    expected = digests.get(name)
    if expected is None:
        raise ValueError(f"its member {name!r} is not in its manifest")
    if _digest(data) != expected:
        raise ValueError(f"{name} no longer matches its sha256 in the manifest, so it was not read")
    return data


def _bounded_index(name: str, blob: bytes, info: dict | None) -> bytes:
    """`blob` when it is an item index its content can hold (`index_fault`), as many items as
    contents.ndjson says; a ValueError if not (digest-less archives are read by this check alone)."""
    size, items = (info or {}).get("bytes"), (info or {}).get("items")
    if not isinstance(size, int) or not (items is None or isinstance(items, int)):
        raise ValueError(f"{name} is not the item index of a content in the archive")
    if fault := index_fault(blob, size, items):
        raise ValueError(f"{name} is damaged: {fault}")
    return blob


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].rstrip(":")


def _exists(store: Store, table, key: str) -> bool:
    return _namespace_of(store, table, key) is not None


def _namespace_of(store: Store, table, key: str) -> str | None:
    """The namespace of the row whose id is `key`, None when there is none."""
    with store.engine.connect() as conn:
        return conn.execute(sa.select(table.c.namespace).where(table.c.id == key)).scalar()


def _insert_new(store: Store, table: sa.Table, row: dict[str, Any]) -> bool:
    """Insert `row` unless its id is there: False when another import of the same archive stored it
    after this one looked (`_exists`)."""
    try:
        with store._write() as conn:
            conn.execute(table.insert().values(**row))
        return True
    except sa.exc.IntegrityError:
        if _exists(store, table, row["id"]):
            return False
        raise


def _import_content(store: Store, sha: str, stream: BinaryIO, rows: list[dict], progress: Progress | None) -> int:
    """Store a content and its artifacts; how many of them were new (another import running beside this
    one may have stored some since they were looked for)."""
    def blocks() -> Iterator[bytes]:
        while block := stream.read(1 << 20):
            if progress:
                progress(len(block))
            yield block

    # Every artifact of the content in the transaction that stores it: added one at a time, a gc in
    # between could take the content (when the first was past its TTL) before the next pointed at it.
    # put re-hashes what it stores: a corrupt archive stores nothing.
    try:
        try:
            store.put(rows[0], blocks(), sha, more_rows=rows[1:])
            return len(rows)
        except sa.exc.IntegrityError:
            new = [row for row in rows if not _exists(store, artifacts, row["id"])]
            if len(new) == len(rows):
                raise
            if new:  # the other import stored the content with the rest: it is there to point at
                store.put(new[0], blocks(), sha, more_rows=new[1:])
            return len(new)
    except ContentMismatch as exc:
        # a ValueError: `import_archive` says it is damaged, and what was imported before
        raise ValueError(f"content/{sha} no longer matches its sha256, so it and its {len(rows)} artifact(s) "
                         "were not stored") from exc


def _attach_items(store: Store, sha: str, blob: bytes, path: str) -> None:
    pairs = unpack_block(blob) if blob else np.zeros((0, 2), dtype="<i8")
    with store._write() as conn:
        info = conn.execute(sa.select(contents.c["items"], contents.c.items_path).where(
            contents.c.sha256 == sha)).first()
        if info is None or info[0] is not None:
            return
        index = ItemIndex(path, pairs[:, 0], pairs[:, 1])
        for block, data in index.blocks():
            conn.execute(item_blocks.insert().values(sha256=sha, block=block, data=data))
        conn.execute(contents.update().where(contents.c.sha256 == sha).values(items=len(index), items_path=path))
        conn.execute(artifacts.update().where(artifacts.c.sha256 == sha).values(items=len(index)))
