"""The store on every backend: atomic puts, ranged reads, dedup, deletes, TTL tombstones, quota, verify."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.errors import ArtifactExpired, ArtifactNotFound, StoreError, StoreLocked
from offload.store import Store, new_id, open_engine, utcnow
from offload.content.shape import find_main
from offload.store.chunking import CHUNK_SIZE, json_item_index, ndjson_item_index
from offload.store.engines import current_revision, head_revision, init_project, resolve_url
from offload.store.retention import ORPHAN_GRACE, drop_orphans, end_artifacts


def _store(url: str, **kw) -> Store:
    return Store(open_engine(url), **kw)


def _row(**extra):
    return {"id": new_id("art_"), "namespace": "", "tool": "t", "kind": "text", "content_type": "text/plain",
            "tokens": 1, "shown_tokens": 1, **extra}


def _put(store: Store, data: bytes, **extra) -> str:
    row = _row(**extra)
    store.put(row, data, hashlib.sha256(data).hexdigest())
    return row["id"]


def _text(n_lines: int) -> bytes:
    return "".join(f"{i:07d} héllo wörld — line {i}\n" for i in range(n_lines)).encode()


def test_new_store_is_migrated_and_upgrade_is_idempotent(store_url):
    engine = open_engine(store_url)
    assert current_revision(engine) == head_revision()
    assert {"artifacts", "contents", "chunks", "item_blocks", "extracts"} <= set(sa.inspect(engine).get_table_names())
    engine.dispose()
    engine = open_engine(store_url)  # a second open finds it current and changes nothing
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_a_store_migrated_by_a_newer_offload_is_refused_with_what_to_do(sqlite_url):
    """Installs of two offload versions can share a store (the per-user one): the older one must say a
    newer one migrated it, not fail inside Alembic, and must not touch it."""
    from offload.errors import StoreError

    store = _store(sqlite_url)
    artifact_id = _put(store, b"kept\n" * 100)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'f00d'")
    store.engine.dispose()
    with pytest.raises(StoreError, match="revision f00d.*newer offload migrated it.*Upgrade offload"):
        open_engine(sqlite_url)
    engine = open_engine(sqlite_url, migrate=False)
    assert current_revision(engine) == "f00d"
    assert Store(engine).get(artifact_id, "")["bytes"] == 500
    engine.dispose()


def test_postgresql_stores_chunks_with_lz4_when_the_server_has_it(pg_database):
    """pglz compressed 50 MB of grep output at ~50 MB a second; lz4 in a fifth of the time (migration 0002)."""
    from conftest import pg_schema_url

    store = _store(pg_schema_url(pg_database))
    data = _text(100_000)  # ~3.5 MB: compressible chunks
    _put(store, data)
    with store.engine.connect() as conn:
        methods = conn.exec_driver_sql(
            "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'").scalar() or []
        declared = conn.exec_driver_sql(
            "SELECT attcompression FROM pg_attribute WHERE attrelid = 'chunks'::regclass AND attname = 'data'").scalar()
        used = set(conn.exec_driver_sql("SELECT pg_column_compression(data) FROM chunks").scalars())
    if "lz4" in methods:
        assert declared == "l" and used == {"lz4"}
    else:  # a server built without lz4 keeps its default, and the migration still passes
        assert declared == "" and used <= {"pglz", None}
    assert b"".join(data for _meta, data in store.iter_chunks(hashlib.sha256(data).hexdigest())) == data
    store.engine.dispose()


def test_roundtrip_and_ranged_reads_cross_chunks(store_url):
    store = _store(store_url)
    data = _text(200_000)  # ~7 MB: several chunks
    sha = hashlib.sha256(data).hexdigest()
    store.put(_row(), data, sha)
    info = store.content(sha)
    assert (info.bytes, info.lines, info.chars) == (len(data), 200_000, len(data.decode()))
    assert info.chunk_count == -(-len(data) // CHUNK_SIZE) or info.chunk_count > 1
    assert b"".join(store.iter_bytes(sha)) == data
    for start, end in [(0, 10), (CHUNK_SIZE - 5, CHUNK_SIZE + 5), (len(data) - 7, len(data)), (123, 3 * CHUNK_SIZE)]:
        assert store.read_range(sha, start, end) == data[start:end]
    # every chunk ends on a newline (lines are short), and its offsets agree with the data
    metas = store.chunk_meta(sha, 0, info.chunk_count)
    for meta in metas:
        prefix = data[: meta["byte_start"]]
        assert meta["line_start"] == prefix.count(b"\n")
        assert meta["char_start"] == len(prefix.decode())
    store.engine.dispose()


def test_item_index_is_stored_and_read_per_block(store_url):
    import orjson

    items = [{"id": i, "name": f"n{i}", "tags": ["a", "b"] if i % 3 else []} for i in range(150_000)]
    data = orjson.dumps({"count": len(items), "data": items})
    store = _store(store_url)
    sha = hashlib.sha256(data).hexdigest()
    store.put(_row(kind="json"), data, sha, item_index=json_item_index(data))
    info = store.content(sha)
    assert (info.items, info.items_path) == (150_000, "data")
    for first in (0, 65_535, 149_990):
        ranges = store.item_ranges(sha, first, first + 3)
        got = [orjson.loads(store.read_range(sha, s, e)) for s, e in ranges]
        assert got == items[first : first + 3]
    nd = b"\n".join(orjson.dumps(x) for x in items[:1000]) + b"\n"
    nsha = hashlib.sha256(nd).hexdigest()
    store.put(_row(kind="ndjson"), nd, nsha, item_index=ndjson_item_index(nd))
    s, e = store.item_ranges(nsha, 999, 1000)[0]
    assert orjson.loads(store.read_range(nsha, s, e)) == items[999]
    store.engine.dispose()


def test_identical_content_stored_once_and_survives_one_delete(store_url):
    store = _store(store_url)
    data = _text(50_000)
    sha = hashlib.sha256(data).hexdigest()
    first, second = _put(store, data, tool="grep"), _put(store, data, tool="rg", session="s2")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM contents").scalar() == 1
    assert store.get(first, "")["tool"] == "grep" and store.get(second, "")["session"] == "s2"
    store.delete(first, "")
    assert b"".join(store.iter_bytes(store.get(second, "")["sha256"])) == data  # still whole
    with pytest.raises(ArtifactExpired, match="deleted"):
        store.get(first, "")
    store.delete(second, "")
    assert not store.has_content(sha)
    store.engine.dispose()


def test_expired_artifact_keeps_a_tombstone_after_gc(store_url):
    store = _store(store_url)
    past = utcnow() - dt.timedelta(hours=1)
    gone = _put(store, b"old result\n" * 1000, expires_at=past)
    pinned = _put(store, b"pinned result\n" * 1000, expires_at=past, pinned=True)
    live = _put(store, b"fresh result\n" * 1000, expires_at=utcnow() + dt.timedelta(days=1))
    with pytest.raises(ArtifactExpired, match="expired") as before:  # before gc: expired, not served
        store.get(gone, "")
    report = store.gc()
    assert report.expired == 1 and report.contents_removed == 1
    with pytest.raises(ArtifactExpired, match="expired") as after:  # after gc: still "expired", not "not found"
        store.get(gone, "")
    # at the same date: when its TTL ended, not when gc came
    assert str(after.value) == str(before.value) and f"{past:%Y-%m-%dT%H:%M}" in str(after.value)
    assert after.value.code == before.value.code == "expired"
    assert store.get(pinned, "")["pinned"] and store.get(live, "")
    with pytest.raises(ArtifactNotFound):
        store.get("art_neverexisted0000", "")
    store.engine.dispose()


def test_gc_evicts_least_recently_used_until_under_quota(store_url):
    store = _store(store_url)
    ids = [_put(store, (f"{n}".encode() * 100 + b"\n") * 1000) for n in range(4)]  # ~100 KB+ each
    size = store.content(store.get(ids[0], "")["sha256"]).bytes
    store.set_pinned(ids[0], "", True)  # the oldest, but pinned: it stays
    report = store.gc(quota_bytes=2 * size + size // 2)
    assert report.evicted == 2
    assert store.total_bytes() <= 2 * size + size // 2
    store.get(ids[0], "")
    with pytest.raises(ArtifactExpired, match="quota"):
        store.get(ids[1], "")
    store.get(ids[3], "")
    store.engine.dispose()


def test_gc_evicts_a_content_by_its_latest_use_and_with_every_artifact_sharing_it(store_url):
    """One artifact at a time, gc evicted the oldest of two sharing a content, which freed nothing, then
    another content that was used after the one the second artifact had just read."""
    store = _store(store_url)
    now = utcnow()
    shared, other = _text(3000), _text(3001)
    old_share = _put(store, shared, accessed_at=now - dt.timedelta(hours=3), created_at=now - dt.timedelta(hours=3))
    used_between = _put(store, other, accessed_at=now - dt.timedelta(hours=2), created_at=now - dt.timedelta(hours=2))
    new_share = _put(store, shared, accessed_at=now - dt.timedelta(hours=1), created_at=now - dt.timedelta(hours=1))
    size = store.content(store.get(old_share, "", touch=False)["sha256"]).bytes
    report = store.gc(quota_bytes=size + size // 2)  # one of the two contents must go
    assert (report.evicted, report.contents_removed) == (1, 1), report
    assert store.get(old_share, "", touch=False) and store.get(new_share, "", touch=False)  # used an hour ago
    with pytest.raises(ArtifactExpired, match="quota"):
        store.get(used_between, "")
    report = store.gc(quota_bytes=size // 2)  # now the shared content too: both of its artifacts at once
    assert (report.evicted, report.contents_removed) == (2, 1), report
    for artifact_id in (old_share, new_share):
        with pytest.raises(ArtifactExpired, match="quota"):
            store.get(artifact_id, "")
    store.engine.dispose()


def _two_gcs_at_once(store: Store, **kwargs) -> tuple[list, list]:
    """Run `store.gc(**kwargs)` on two threads released together; their reports and their errors."""
    import threading

    barrier, reports, errors = threading.Barrier(2), [], []

    def gc() -> None:
        barrier.wait()
        try:
            reports.append(store.gc(**kwargs))
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=gc) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return reports, errors


def test_two_gcs_at_once_expire_and_evict_once(store_url):
    """Two gcs at the same time (two agents of a fleet on PostgreSQL) end each artifact once and evict
    only what takes the store over its quota, not that twice."""
    store = _store(store_url)
    past = utcnow() - dt.timedelta(days=1)
    expired = [_put(store, f"expired {n}\n".encode() * 2000, expires_at=past) for n in range(4)]
    live = [_put(store, f"live {n}\n".encode() * 2000) for n in range(6)]
    size = store.content(store.get(live[0], "", touch=False)["sha256"]).bytes
    quota = 3 * size + size // 2  # the 3 oldest of the 6 live artifacts must go
    reports, errors = _two_gcs_at_once(store, quota_bytes=quota)
    assert errors == []
    assert sum(r.expired for r in reports) == len(expired)
    assert sum(r.evicted for r in reports) == 3
    for artifact_id in expired + live[:3]:
        with pytest.raises(ArtifactExpired):
            store.get(artifact_id, "")
    for artifact_id in live[3:]:
        store.get(artifact_id, "")
    store.engine.dispose()


def test_postgresql_stores_run_read_committed_whatever_the_server_default(pg_database):
    """gc's turn-taking, a delete skipping what a gc ended and the share lock on content a put points at
    all need each statement to see what committed before it (READ COMMITTED). A server or role whose
    default is REPEATABLE READ must not change that: two gcs at once then failed with a serialization
    error."""
    from conftest import pg_schema_url

    url = sa.engine.make_url(pg_schema_url(pg_database))
    url = url.update_query_dict({"options": url.query["options"] + r" -cdefault_transaction_isolation=repeatable\ read"})
    url = url.render_as_string(hide_password=False)
    raw = sa.create_engine(url)
    with raw.connect() as conn:  # the session default this URL gives
        assert conn.exec_driver_sql("SHOW default_transaction_isolation").scalar() == "repeatable read"
    raw.dispose()
    store = _store(url)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
    past = utcnow() - dt.timedelta(days=1)
    expired = [_put(store, f"expired {n}\n".encode() * 2000, expires_at=past) for n in range(4)]
    reports, errors = _two_gcs_at_once(store)
    assert errors == [] and sum(r.expired for r in reports) == len(expired)
    store.engine.dispose()


def test_a_delete_waits_for_a_running_gc_on_postgresql(pg_database):
    """A gc counts the store and evicts from that count: a delete committing in the middle would make it
    evict one artifact too many. So a delete waits while a gc holds its lock (seen in pg_locks), and
    completes after."""
    import threading
    import time

    from conftest import pg_schema_url

    from offload.store.retention import GC_LOCK

    store = _store(pg_schema_url(pg_database))
    doomed = _put(store, b"deleted while a gc runs\n" * 1000)
    holder = sa.create_engine(pg_database)
    done = threading.Event()
    with holder.connect() as conn, conn.begin():
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(GC_LOCK)))  # what a running gc holds
        thread = threading.Thread(target=lambda: (store.delete(doomed, ""), done.set()))
        thread.start()
        deadline = time.monotonic() + 30
        while not conn.execute(sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 0"
                " AND objid = :key AND objsubid = 1"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
                {"key": GC_LOCK}).scalar():
            assert time.monotonic() < deadline, "the delete never asked for the gc lock"
            time.sleep(0.01)
        assert not done.is_set()
    thread.join(timeout=30)
    assert done.is_set()
    with pytest.raises(ArtifactExpired, match="deleted"):
        store.get(doomed, "")
    assert store.total_bytes() == 0
    holder.dispose()
    store.engine.dispose()


def test_content_deleted_while_it_is_read_or_missing_a_chunk_is_never_read_as_whole(store_url):
    """Reading stopped at the first missing chunk as if the content ended there: `offload cat` of an
    artifact deleted meanwhile printed 154 of 217 MB and exited 0."""
    from offload.errors import StoreError

    store = _store(store_url)
    data = b"".join(f"line {i} of a big result\n".encode() for i in range(200_000))  # ~5 MB: 5 chunks
    first = _put(store, data)
    sha = hashlib.sha256(data).hexdigest()
    reading = store.iter_bytes(sha)
    got = next(reading)
    store.delete(first, "")
    with pytest.raises(StoreError, match=f"could not be read whole: it ended after {len(got):,} of its "
                                         f"{len(data):,} bytes"):
        b"".join(reading)
    _put(store, data)
    assert b"".join(store.iter_bytes(sha)) == data
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM chunks WHERE sha256 = :s AND seq = 2"), {"s": sha})
    with pytest.raises(StoreError, match="could not be read whole"):
        b"".join(store.iter_bytes(sha))
    with pytest.raises(StoreError, match="chunk 2 of 1-3 is missing"):
        store.read_range(sha, 1_500_000, 3_500_000)
    assert store.verify()[0]["actual_bytes"] < len(data)  # verify reports it, as before
    store.engine.dispose()


def test_a_gc_making_room_evicts_nothing_it_cannot_make_room_with(store_url):
    """gc(room=) for a write: what must stay (pinned, protected, and content they share) is never evicted,
    and when it alone leaves no room, nothing is evicted at all (it would not make the write fit)."""
    store = _store(store_url)
    pinned = _put(store, _text(600), pinned=True)  # ~29 KB
    shares_pinned = _put(store, _text(600))  # the same content: evicting it frees nothing
    own = _put(store, b"the call's own stderr\n" * 400)
    others = [_put(store, f"result {k}\n".encode() * 2000) for k in range(3)]
    size = store.total_bytes()
    report = store.gc(quota_bytes=size, room=size)  # room for as much again: impossible with the pinned one
    assert report.evicted == 0 and store.total_bytes() == size
    report = store.gc(quota_bytes=size, room=20_000, protect=[own])
    assert report.evicted >= 1 and store.total_bytes() <= size - 20_000
    live = {r["id"] for r in store.list("")[0]}
    assert {pinned, shares_pinned, own} <= live and not set(others) <= live
    store.engine.dispose()


def test_quota_refuses_a_put_that_does_not_fit(store_url):
    from offload.errors import QuotaExceeded

    store = _store(store_url, quota_bytes=1000)
    with pytest.raises(QuotaExceeded):
        _put(store, b"x" * 5000)
    assert store.total_bytes() == 0  # nothing half-stored
    store.engine.dispose()


def test_a_put_that_may_make_room_evicts_in_its_own_transaction(store_url):
    """`make_room`: over the quota, the put collects what gc(room=) would, least recently used first,
    keeping pinned artifacts and those it names; when they leave no room it fails as before, and
    nothing is evicted or stored."""
    from offload.errors import QuotaExceeded

    store = _store(store_url, quota_bytes=100_000)
    pinned = _put(store, b"p" * 30_000, pinned=True)
    named = _put(store, b"n" * 30_000)
    oldest = _put(store, b"o" * 30_000)
    row = _row()
    store.put(row, b"x" * 30_000, hashlib.sha256(b"x" * 30_000).hexdigest(), make_room=[named])
    live = {r["id"] for r in store.list("")[0]}
    assert live == {pinned, named, row["id"]} and store.total_bytes() == 90_000
    with pytest.raises(ArtifactExpired, match="evicted"):
        store.get(oldest, "")
    too_big = b"y" * 50_000  # only the pinned and the named could go
    with pytest.raises(QuotaExceeded):
        store.put(_row(), too_big, hashlib.sha256(too_big).hexdigest(), make_room=[named, row["id"]])
    assert {r["id"] for r in store.list("")[0]} == live and store.total_bytes() == 90_000
    store.engine.dispose()


def test_a_refused_put_that_collected_leaves_no_stale_count(store_url):
    """A put that evicted, still did not fit, and rolled back kept the count after its evictions: the
    next puts trusted it and wrote past the quota. Content being written (no artifact yet) must stay."""
    from offload.errors import QuotaExceeded

    store = _store(store_url, quota_bytes=100_000)
    pending = b"o" * 55_000
    store.put_content(pending, hashlib.sha256(pending).hexdigest())  # another call's, its row to come
    _put(store, b"a" * 40_000)
    with pytest.raises(QuotaExceeded, match="55,000 bytes must stay"):
        store.put(_row(), b"b" * 50_000, hashlib.sha256(b"b" * 50_000).hexdigest(), make_room=())
    assert store.total_bytes() == 95_000  # the eviction was rolled back with the put
    for letter in b"cde":
        data = bytes([letter]) * 10_000
        store.put(_row(), data, hashlib.sha256(data).hexdigest(), make_room=())
        assert store.total_bytes() <= 100_000
    store.engine.dispose()


def test_a_refused_put_says_how_much_must_stay_not_how_much_is_stored(store_url):
    """Pinned content alone leaves no room, so nothing is evicted: the message counted every stored
    byte (the evictable too) as "must stay"."""
    from offload.errors import QuotaExceeded

    store = _store(store_url, quota_bytes=100_000)
    _put(store, b"p" * 60_000, pinned=True)
    _put(store, b"e" * 30_000)
    with pytest.raises(QuotaExceeded, match="60,000 bytes must stay .* of the 90,000 stored"):
        store.put(_row(), b"b" * 50_000, hashlib.sha256(b"b" * 50_000).hexdigest(), make_room=())
    assert store.total_bytes() == 90_000
    store.engine.dispose()


def test_quota_counts_the_store_seldom_and_exactly_near_the_quota(store_url, monkeypatch):
    """The total is a SUM over every content row: far from the quota a writer adds what it writes to its
    last count; near it, it counts again and sees what another writer stored meanwhile."""
    from offload.errors import QuotaExceeded
    from offload.store import quota as quota_module

    monkeypatch.setattr(quota_module, "QUOTA_RECOUNT_SECONDS", 600.0)  # a slow machine: no recount by age

    store = _store(store_url, quota_bytes=100_000)
    other = _store(store_url, quota_bytes=100_000)
    sums: list[str] = []
    sa.event.listen(store.engine, "before_cursor_execute",
                    lambda _c, _cur, statement, *_a: sums.append(statement) if "sum(" in statement.lower() else None)
    _put(store, b"a" * 10_000)
    _put(store, b"b" * 10_000)
    _put(store, b"c" * 10_000)
    assert len(sums) == 1  # counted once, then added to
    _put(other, b"d" * 55_000)  # another writer: 85,000 stored, which `store` has not counted
    with pytest.raises(QuotaExceeded, match="146,000 bytes"):
        _put(store, b"e" * 61_000)  # 91,000 by its own sum: near the quota, so counted again, exactly
    assert len(sums) == 2
    assert store.total_bytes() == 85_000  # nothing of the refused put stored
    store.engine.dispose()
    other.engine.dispose()


def test_verify_reports_altered_bytes(store_url):
    store = _store(store_url)
    good = _put(store, _text(1000))
    bad = _put(store, b"original bytes\n" * 100)
    sha = store.get(bad, "")["sha256"]
    assert store.verify() == []
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE chunks SET data = :d WHERE sha256 = :s"), {"d": b"tampered\n", "s": sha})
    problems = store.verify()
    assert [p["artifacts"] for p in problems] == [[bad]]
    assert good not in problems[0]["artifacts"]
    store.engine.dispose()


def test_verify_reports_an_item_index_its_content_cannot_have(store_url):
    """verify re-hashed contents only: an item index whose offsets changed served one item's bytes for
    another's, and verify said all was well."""
    from offload import Offloader

    with Offloader(store_url) as off:
        aid = off.process("api", [{"id": i} for i in range(5000)]).artifact_id
        sha = off.get(aid)["sha256"]
        assert off.verify() == []
        with off.store.engine.begin() as conn:
            block = conn.execute(sa.text("SELECT data FROM item_blocks WHERE sha256 = :s AND block = 0"),
                                 {"s": sha}).scalar()
            shifted = bytearray(block)
            shifted[16 * 7:16 * 7 + 8] = (10**9).to_bytes(8, "little")  # item 7 starts past item 8
            conn.execute(sa.text("UPDATE item_blocks SET data = :d WHERE sha256 = :s AND block = 0"),
                         {"d": bytes(shifted), "s": sha})
        (problem,) = off.verify()
        assert (problem["problem"], problem["artifacts"]) == ("items", [aid])
        assert "item ranges its content" in problem["why"]


def test_namespaces_do_not_see_each_other(store_url):
    store = _store(store_url)
    mine = _put(store, b"tenant a\n", namespace="a")
    with pytest.raises(ArtifactNotFound):
        store.get(mine, "b")
    assert [r["id"] for r in store.list("a")[0]] == [mine]
    assert store.list("b")[0] == []
    store.engine.dispose()


def test_an_artifact_past_its_ttl_is_neither_listed_nor_counted_before_gc(store_url):
    """`get` answers "expired" for it at once, so listings and stats must not offer it meanwhile."""
    store = _store(store_url)
    past = utcnow() - dt.timedelta(seconds=1)
    gone = _put(store, b"old result\n" * 1000, expires_at=past)
    pinned = _put(store, b"pinned result\n" * 100, expires_at=past, pinned=True)
    live = _put(store, b"fresh result\n" * 10)
    assert {r["id"] for r in store.list("")[0]} == {pinned, live}
    assert gone in {r["id"] for r in store.list("", include_ended=True)[0]}
    stats = store.stats("")
    assert stats["artifacts"] == 2 and stats["bytes"] == 1400 + 130
    assert sum(row["artifacts"] for row in stats["by_tool"]) == 2
    store.engine.dispose()


def test_stats_count_a_namespaces_own_deduplicated_bytes_only(store_url):
    """store_bytes is what this namespace's artifacts take once identical content counts once; the
    store's total would tell one tenant how much the others keep."""
    store = _store(store_url)
    shared, own = b"shared result\n" * 100, b"tenant b only\n" * 300
    _put(store, shared, namespace="a")
    _put(store, shared, namespace="a")
    _put(store, shared, namespace="b")
    _put(store, own, namespace="b")
    a, b, c = store.stats("a"), store.stats("b"), store.stats("c")
    assert (a["bytes"], a["store_bytes"]) == (2 * len(shared), len(shared))
    assert (b["bytes"], b["store_bytes"]) == (len(shared) + len(own), len(shared) + len(own))
    assert (c["artifacts"], c["store_bytes"]) == (0, 0)
    store.engine.dispose()



def test_stats_list_the_top_groups_and_sum_the_rest_exactly(store_url):
    """3,000 one-artifact sessions made /stats 1 MB (every session a row and a filter choice); the top
    groups are listed, and the rest summed so that every total stays exact."""
    store = _store(store_url)
    for i in range(30):
        _put(store, f"{i}\n".encode(), tool=f"t{i % 3}", session=f"s{i}" if i else None, tokens=10 + i,
             shown_tokens=1)
    whole, top = store.stats(""), store.stats("", top=5)
    assert len(whole["by_session"]) == 30 and whole["by_session_rest"] is None
    assert [g["name"] for g in top["by_session"]] == [g["name"] for g in whole["by_session"][:5]]
    rest = top["by_session_rest"]
    assert rest["groups"] == 25 and rest["artifacts"] == 25
    assert rest["bytes"] == sum(g["bytes"] for g in whole["by_session"][5:])
    assert rest["tokens_saved"] == sum(g["tokens_saved"] for g in whole["by_session"][5:])
    assert len(top["by_tool"]) == 3 and top["by_tool_rest"] is None  # all of them fit
    store.engine.dispose()


def test_stats_count_a_small_stored_result_as_keeping_nothing_out(store_url):
    """A result `put` stored though it was small was shown a reference longer than itself: counted as
    negative tokens kept out, it made its tool's figure and the total negative."""
    store = _store(store_url)
    _put(store, b"big\n", tool="grep", tokens=5_000, shown_tokens=300)
    _put(store, b"tiny\n", tool="put", tokens=3, shown_tokens=140)
    stats = store.stats("")
    assert stats["tokens_saved"] == 4_700
    assert {g["name"]: g["tokens_saved"] for g in stats["by_tool"]} == {"grep": 4_700, "put": 0}
    store.engine.dispose()


def test_list_text_filter_is_a_plain_substring(store_url):
    """% and _ in the text filter match themselves, not anything (LIKE wildcards are escaped)."""
    store = _store(store_url)
    plain = _put(store, b"a\n", tool="grep", args='{"pattern": "abc"}')
    percent = _put(store, b"b\n", tool="grep", args='{"pattern": "100%_done"}')
    assert [r["id"] for r in store.list("", text="%")[0]] == [percent]
    assert [r["id"] for r in store.list("", text="0%_d")[0]] == [percent]  # ids hold no % (art_ + base32)
    assert store.list("", text="a_c")[0] == []  # _ is no wildcard: "abc" does not hold "a_c"
    assert {r["id"] for r in store.list("", text="grep")[0]} == {plain, percent}
    noted = _put(store, b"c\n", tool="read", meta='{"notes": ["x"]}')
    assert store.list("", text="notes")[0] == []  # meta's keys, which every artifact has, are not searched
    assert noted in {r["id"] for r in store.list("", text="read")[0]}
    store.engine.dispose()


def test_list_text_filter_matches_args_keys_and_values_not_their_json(store_url):
    r"""text=" (or {, :, a space) matched every artifact whose args were stored as JSON, and an escaped
    character (é written \u00e9, a line break \n) only as its escape: the filter reads the keys and values.
    Each search but null and true holds a character no artifact id (art_ and base32) or tool here has."""
    store = _store(store_url)
    spaced = _put(store, b"a\n", tool="grep", args='{"pat-1": "x9", "n": [10, 1.5], "deep": {"k8": null, "on": true}}')
    punctuated = _put(store, b"b\n", tool="grep",
                      args='{"cmd-0":"echo \\"a:b\\" {c9} [d], e\\nf","s":"caf\\u00e9 C:\\\\d9","u":"p\\u001fq"}')
    repr_only = _put(store, b"c\n", tool="grep", args='"<Thing at 0x1>"')  # args no encoder took: their repr
    _put(store, b"d\n", tool="grep")  # no args

    def found(text: str) -> set[str]:
        return {r["id"] for r in store.list("", text=text)[0]}

    for text in ('"', "{", "}", ":", ",", "[", "]", '"a:b"', "{c9} [d], e", "e\nf", "é", "caf\u00e9 C:\\d9"):
        assert found(text) == {punctuated}, text
    assert found(" ") == {punctuated, repr_only}  # not the spaces after the spaced JSON's : and ,
    assert found("<Thing at 0x1>") == {repr_only}
    for text in ("pat-1", "x9", "10", "1.5", "k8", "null", "true"):  # keys, and values of every JSON type
        assert found(text) == {spaced}, text
    for text in ('"pat-1"', '"x9"', "pat-1: x9", "[10", "10, 1.5", "\\u00e9", "\\n", "C:\\\\d9"):
        assert found(text) == set(), text  # the JSON's quotes, separators, brackets and escapes are not text
    assert found("x9\x1fn") == set()  # no match runs from one key or value into the next (U+001F parts them)
    assert found("p\x1fq") == {punctuated}  # but finds a value that holds U+001F itself
    store.engine.dispose()


def test_migration_0004_fills_args_text_for_the_artifacts_already_stored(store_url):
    """A store made before args_text: its artifacts' args are searched as keys and values once it is opened."""
    from alembic import command

    from offload.store.engines import alembic_config

    engine = open_engine(store_url, migrate=False)
    with engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "0003")
        old = sa.table("artifacts", *(sa.column(name) for name in (
            "id", "namespace", "tool", "args", "kind", "content_type", "bytes", "chars", "lines", "tokens",
            "shown_tokens", "pinned", "status", "created_at", "accessed_at")))
        now = utcnow()
        ids = [new_id("art_") for _ in range(2_500)]  # more than one batch
        conn.execute(old.insert(), [
            {"id": aid, "namespace": "", "tool": "t", "args": None if i % 7 == 0 else f'{{"q-{i}": "v:{i}"}}',
             "kind": "text", "content_type": "text/plain", "bytes": 0, "chars": 0, "lines": 0, "tokens": 1,
             "shown_tokens": 1, "pinned": False, "status": "active", "created_at": now, "accessed_at": now}
            for i, aid in enumerate(ids)])
    engine.dispose()
    store = _store(store_url)
    assert current_revision(store.engine) == head_revision()
    assert store.list("", text='"')[0] == [] and store.list("", text="{")[0] == []
    assert [r["id"] for r in store.list("", text="v:2498")[0]] == [ids[2498]]
    assert [r["id"] for r in store.list("", text="q-1002")[0]] == [ids[1002]]
    assert store.list("", text="q-1002\x1fv")[0] == []  # not across a key and its value
    with store.engine.connect() as conn:
        unfilled = conn.execute(sa.text("SELECT COUNT(*) FROM artifacts WHERE args IS NOT NULL AND args_text IS NULL"))
        assert unfilled.scalar() == 0
    store.engine.dispose()


def test_list_pages_with_a_cursor(store_url):
    store = _store(store_url)
    ids = [_put(store, f"result {i}\n".encode()) for i in range(7)]
    seen, cursor = [], None
    while True:
        rows, cursor = store.list("", limit=3, cursor=cursor)
        seen += [r["id"] for r in rows]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 7
    store.engine.dispose()


# -- embedded-store specifics ------------------------------------------------------------------


def test_store_files_are_owner_only(tmp_path):
    url = f"sqlite:///{tmp_path / 'sub' / 'store.db'}"
    store = _store(url)
    _put(store, b"x\n")
    for name in os.listdir(tmp_path / "sub"):
        mode = stat.S_IMODE(os.stat(tmp_path / "sub" / name).st_mode)
        assert mode == 0o600, (name, oct(mode))
    store.engine.dispose()
    durl = f"duckdb:///{tmp_path / 'd' / 'store.duckdb'}"
    dstore = _store(durl)
    assert stat.S_IMODE(os.stat(tmp_path / "d" / "store.duckdb").st_mode) == 0o600
    dstore.engine.dispose()
    # opening takes group's and others' access away and nothing from the owner: a store the owner made
    # read-only stays so (every open made it 0600, writable)
    path = tmp_path / "sub" / "store.db"
    for given, kept in ((0o644, 0o600), (0o444, 0o400), (0o400, 0o400)):
        os.chmod(path, given)
        _store(url).engine.dispose()
        assert stat.S_IMODE(os.stat(path).st_mode) == kept, oct(given)
    os.chmod(path, 0o600)


@pytest.mark.parametrize("scheme, kind", [("sqlite", "SQLite"), ("duckdb", "DuckDB")])
def test_a_store_url_at_a_file_that_is_no_database_is_refused_and_the_file_left_alone(tmp_path, scheme, kind):
    path = tmp_path / "notes.db"
    path.write_bytes(b"my notes, not a database\n" * 1000)
    with pytest.raises(StoreError, match=rf"{path} exists but is not a {kind} database .*Point --url"):
        open_engine(f"{scheme}:///{path}")
    assert path.read_bytes() == b"my notes, not a database\n" * 1000
    with pytest.raises(StoreError, match=rf"{tmp_path} is a directory; a SQLite or DuckDB store is a file"):
        open_engine(f"{scheme}:///{tmp_path}")


def test_a_duckdb_url_at_a_sqlite_store_names_the_engine_to_use_and_fetches_nothing(tmp_path):
    """DuckDB reads SQLite files through an extension it tried to download: the error was about a URL."""
    path = tmp_path / "store.db"
    _store(f"sqlite:///{path}").engine.dispose()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=rf"{path} is a SQLite database, not a DuckDB one: open it with sqlite:///"):
        open_engine(f"duckdb:///{path}")
    assert path.read_bytes() == before


@pytest.fixture
def here(tmp_path):
    """A folder of the test's own (tmp_path also holds the isolated home and working folder)."""
    folder = tmp_path / "here"
    folder.mkdir()
    return folder


def _state(path) -> tuple:
    """What a path is, to the bit: its type and mode, and a regular file's bytes."""
    info = os.lstat(path)
    return stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), path.read_bytes() if path.is_file() else None


def _not_files(tmp_path) -> list[tuple]:
    """A sticky world-writable folder, a FIFO and a copy of the null device (never the real ones)."""
    made = []
    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    made.append((sticky, "is a directory; a SQLite or DuckDB store is a file"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    made.append((fifo, "is a FIFO"))
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        made.append((null, "is a character device"))
    except PermissionError:  # not root: the folder and the FIFO still say it
        pass
    return made


@pytest.mark.parametrize("scheme", ["sqlite", "duckdb"])
def test_a_store_url_at_what_is_not_a_regular_file_is_refused_and_changes_nothing(here, scheme, monkeypatch):
    """Opening made the folder, device or FIFO it named owner-only (a sticky 1777 folder lost its sticky bit;
    sqlite:////dev/null made the null device 0600), and DuckDB replaced a FIFO or a device by its file."""
    made = _not_files(here)
    for path, says in made:
        before = _state(path)
        with pytest.raises(StoreError) as caught:
            open_engine(f"{scheme}:///{path}")
        assert _state(path) == before, path
        assert re.search(rf"{re.escape(str(path))} {says}.*left as it is", str(caught.value)), str(caught.value)
    sticky = here / "shared"
    monkeypatch.chdir(sticky)
    with pytest.raises(StoreError, match="is a directory"):
        open_engine(".")  # a bare path: the working folder
    assert _state(sticky) == (stat.S_IFDIR, 0o1777, None)
    assert sorted(p.name for p in here.iterdir()) == sorted(p.name for p, _ in made)  # no side file either


@pytest.mark.parametrize("scheme, kind", [("sqlite", "SQLite"), ("duckdb", "DuckDB")])
def test_a_file_that_is_no_database_keeps_its_mode(here, scheme, kind):
    """The error said "the file itself was left as it is", and it had been made 0600."""
    path = here / "notes.txt"
    path.write_bytes(b"my notes\n" * 1000)
    os.chmod(path, 0o664)
    with pytest.raises(StoreError, match=f"not a {kind} database"):
        open_engine(f"{scheme}:///{path}")
    assert _state(path) == (stat.S_IFREG, 0o664, b"my notes\n" * 1000)
    assert [p.name for p in here.iterdir()] == ["notes.txt"]


def test_an_empty_regular_file_becomes_a_duckdb_store(tmp_path):
    path = tmp_path / "new.duckdb"
    path.touch()  # DuckDB refuses an empty file: it is replaced (only a regular file is)
    store = _store(f"duckdb:///{path}")
    assert store.get(_put(store, b"kept\n"), "")["bytes"] == 5
    store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_duckdb_log_is_owner_only_whenever_it_is_there(tmp_path):
    """DuckDB makes X.duckdb.wal anew after each checkpoint, with the umask (0644): readable by anyone while
    the store was open, and after a kill until the next open."""
    path = tmp_path / "store.duckdb"
    log = tmp_path / "store.duckdb.wal"
    old = os.umask(0o022)
    try:
        store = _store(f"duckdb:///{path}")  # the migration wrote the log
        assert log.exists() and stat.S_IMODE(log.stat().st_mode) == 0o600
        with store.engine.connect() as conn:
            conn.exec_driver_sql("CHECKPOINT")  # the log is gone; the next write makes a new one
        assert not log.exists()
        for n in range(3):
            _put(store, b"secret %d\n" % n * 1000)
            assert stat.S_IMODE(log.stat().st_mode) == 0o600, n
        store.close()
    finally:
        os.umask(old)


_NAMES = ["q?mark.db", "pc%41t.db", "h#sh.db", "sp ace ünï.db", "a@b:c.db", "q?d%41 #ü.duckdb"]


@pytest.mark.parametrize("name", _NAMES)
def test_a_store_path_may_hold_any_character(tmp_path, name):
    """f"sqlite:///{path}" read a `?` as the query (q?mark.db made a file named q), `%41` as an A and
    `#` as the end of the URL."""
    folder = tmp_path / "s"
    folder.mkdir()
    path = folder / name
    for url in (str(path), "file_url"):
        if url == "file_url":
            from offload.store.engines import file_url

            url = file_url(path, "duckdb" if name.endswith(".duckdb") else "sqlite")
        store = _store(url)
        _put(store, b"x\n" + url.encode())
        store.close()
        assert sorted(p.name for p in folder.iterdir() if not p.name.endswith((".wal", "-wal", "-shm"))) == [name]
    assert len(Store(open_engine(str(path))).list("")[0]) == 2


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///", "duckdb:///:memory:",
                                 "sqlite:///file::memory:?uri=true"])
def test_an_in_memory_store_holds_big_results(url):
    """A result of 512 KiB or more is written on a worker thread, which got an in-memory database of its own:
    every such result failed ("no such table: contents")."""
    from offload import Offloader

    data = "".join(f'{{"i": {i}, "text": "{"x" * 40}"}}\n' for i in range(100_000))  # ~5.5 MB of NDJSON
    with Offloader(url) as off:
        ref = off.process("cat", data)
        assert b"".join(off.store.iter_bytes(off.store.get(ref.artifact_id, "")["sha256"])) == data.encode()
        assert off.query_artifact(ref.artifact_id, jmespath="[?i == `99999`].i")["result"] == [99999]
        assert off.fetch_slice(ref.artifact_id, offset=-1)["content"].startswith('{"i": 99999, ')
        folder = Path(off.store.engine.url.database).parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not folder.exists()  # nothing of it is left once it is closed
    with Offloader(url) as off:  # a new one is empty, as an in-memory database is
        assert off.store.list("")[0] == []


def test_the_sqlite_log_stays_bounded_beside_a_process_holding_the_store_open(tmp_path):
    """With a server holding the store open there is no last close to fold the log, and each short-lived
    `offload put` counted only its own writes, under the mark: 30 puts of 1.5 MB left a 55 MB log (15 here)."""
    from offload import Offloader
    from offload.store.wal import WAL_CHECKPOINT_AT

    path = tmp_path / "store.db"
    holder = Offloader(str(path))
    holder.store.list("")
    sizes = []
    for i in range(15):
        source = tmp_path / "result.txt"
        source.write_text("".join(f"{i} line {n} " + "y" * 60 + "\n" for n in range(20_000)))  # 1.5 MB
        subprocess.run([sys.executable, "-m", "offload", "--url", str(path), "put", str(source), "--tool", "cat"],
                       check=True, capture_output=True, timeout=120)
        sizes.append(os.path.getsize(f"{path}-wal"))
        holder.store.list("")
    holder.close()
    assert max(sizes) < 3 * WAL_CHECKPOINT_AT, sizes
    assert len(Store(open_engine(str(path))).list("", limit=50)[0]) == 15


def _foreign_sqlite(path, *, alembic: str | None = None) -> None:
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    if alembic is not None:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES (?)", (alembic,))
    conn.commit()
    conn.close()
    os.chmod(path, 0o664)


@pytest.mark.parametrize("alembic", [None, "ae1027a6acf"])
def test_another_programs_sqlite_database_is_refused_and_left_as_it_is(here, alembic):
    """A read (`offload ls`) added offload's tables to it, switched it to WAL mode for good and made it 0600;
    with its own alembic_version, the error said a newer offload had migrated it."""
    import sqlite3

    path = here / "app.db"
    _foreign_sqlite(path, alembic=alembic)
    before = _state(path)
    with pytest.raises(StoreError) as caught:
        open_engine(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path} is not an offload store") and "users" in message, message
    assert "newer offload" not in message and "\n" not in message
    if alembic:
        assert f"revision {alembic}, which is none of offload's" in message
    assert _state(path) == before
    assert [p.name for p in here.iterdir()] == ["app.db"]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


def test_another_programs_sqlite_database_that_cannot_be_read_now_is_refused_not_converted(here):
    """Its tables are read first, to tell whose it is; while its own writer holds it locked they cannot be,
    and opening it anyway would switch it to WAL mode as soon as the lock is gone."""
    import sqlite3

    path = here / "app.db"
    _foreign_sqlite(path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("INSERT INTO users (name) VALUES ('grace')")
    try:
        with pytest.raises(StoreError, match=r"could not be read to tell whether it is an offload store "
                                             r"\(database is locked\); it was left as it is"):
            open_engine(str(path), busy_timeout=0.2)
    finally:
        writer.execute("COMMIT")
    assert writer.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert {name for (name,) in writer.execute("SELECT name FROM sqlite_master")} == {"users"}
    writer.close()


def test_another_programs_duckdb_database_is_refused_and_left_as_it_is(here):
    import duckdb

    path = here / "app.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.close()
    os.chmod(path, 0o664)
    before = _state(path)
    with pytest.raises(StoreError, match=rf"^{re.escape(str(path))} is not an offload store: .*tables: users"):
        open_engine(f"duckdb:///{path}")
    assert _state(path) == before
    assert [p.name for p in here.iterdir()] == ["app.duckdb"]


def test_a_postgresql_store_lives_beside_other_tables_but_not_beside_another_alembic_version(pg_database):
    """A shared database is common: offload's tables go beside other tables. Another program's alembic_version
    is where both would keep their revision: refused as not an offload store, not as a newer offload's."""
    from conftest import pg_schema_url

    url = pg_schema_url(pg_database)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE users (id INTEGER)")
    engine.dispose()
    store = _store(url)
    assert {"users", "artifacts"} <= set(sa.inspect(store.engine).get_table_names())
    store.close()

    url = pg_schema_url(pg_database)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE users (id INTEGER)")
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('ae1027a6acf')")
    with pytest.raises(StoreError, match="is not an offload store: its alembic_version table is at revision "
                                         "ae1027a6acf, which is none of offload's.*schema of its own"):
        open_engine(url)
    assert set(sa.inspect(engine).get_table_names()) == {"users", "alembic_version"}
    engine.dispose()


def test_a_failed_migration_says_what_the_server_said_without_the_sql(pg_database):
    url = pg_database.update_query_dict({"options": "-csearch_path=offload_no_such_schema"})
    with pytest.raises(StoreError) as caught:
        open_engine(url.render_as_string(hide_password=False))
    message = str(caught.value)
    assert message.startswith("Cannot migrate the store postgresql") and "no schema has been selected" in message
    assert "CREATE TABLE" not in message and "sqlalche.me" not in message


def test_store_location_like_git(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert resolve_url(None).startswith("sqlite:///") and "offload" in resolve_url(None)  # per-user
    assert str(tmp_path / "home") in resolve_url(None)
    folder = init_project(project)
    assert (folder / ".gitignore").read_text().strip().endswith("*")
    assert resolve_url(None) == f"sqlite:///{folder / 'store.db'}"
    monkeypatch.setenv("OFFLOAD_URL", str(tmp_path / "x.duckdb"))
    assert resolve_url(None) == f"duckdb:///{tmp_path / 'x.duckdb'}"
    assert resolve_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"


def test_duckdb_held_by_another_process_gives_a_clear_message(tmp_path):
    path = tmp_path / "held.duckdb"
    _store(f"duckdb:///{path}").engine.dispose()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(path)!r})
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked) as info:
            open_engine(f"duckdb:///{path}")
        message = str(info.value)
        assert str(path) in message and "one process" in message and "SQLite" in message
    finally:
        holder.kill()
        holder.wait()


WRITER = """
import hashlib, sys
from offload.store import Store, open_engine, new_id
store = Store(open_engine(sys.argv[1], busy_timeout=30))
for i in range(int(sys.argv[2])):
    data = (f"{sys.argv[3]} {i} " * 2000 + "\\n").encode() * 20
    store.put({"id": new_id("art_"), "namespace": "", "tool": "w", "kind": "text", "content_type": "text/plain",
               "tokens": 1, "shown_tokens": 1}, data, hashlib.sha256(data).hexdigest())
    store.list("", limit=5)
print("done")
"""


def test_sqlite_many_processes_write_and_read_at_once(sqlite_url):
    _store(sqlite_url).engine.dispose()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, sqlite_url, "40", f"w{n}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(3)]
    reader = _store(sqlite_url)
    while any(p.poll() is None for p in procs):
        reader.list("", limit=10)
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    rows, _ = reader.list("", limit=500)
    assert len(rows) == 120
    assert reader.verify() == []
    reader.engine.dispose()


KILLED_WRITER = """
import hashlib, sys, os
from offload.store import Store, open_engine, new_id
from sqlalchemy import event
store = Store(open_engine(sys.argv[1]))
data = os.urandom(1 << 20) * 40
count = 0
@event.listens_for(store.engine, "before_cursor_execute")
def insert_then_die(conn, cursor, statement, parameters, context, executemany):
    global count
    if statement.startswith("INSERT INTO chunks"):
        count += 1
        if count == 3:  # partway through the chunk batches: die without any cleanup
            os.kill(os.getpid(), 9)
store.put({"id": "art_killedmidwrite00", "namespace": "", "tool": "w", "kind": "binary",
           "content_type": "application/octet-stream", "tokens": 1, "shown_tokens": 1},
          data, hashlib.sha256(data).hexdigest())
"""


def test_process_killed_mid_write_leaves_nothing_half_stored(sqlite_url):
    keep = _store(sqlite_url)
    kept = _put(keep, b"stored before the crash\n")
    keep.engine.dispose()
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, sqlite_url], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    store = _store(sqlite_url)  # still opens
    with pytest.raises(ArtifactNotFound):
        store.get("art_killedmidwrite00", "")
    assert store.total_bytes() == len(b"stored before the crash\n")
    assert store.get(kept, "") and store.verify() == []
    store.engine.dispose()


# -- the write path's newer parts: a background WAL checkpoint, rows and indexes handed over late ------

def test_a_new_sqlite_store_has_big_pages_and_an_old_one_keeps_its_own(tmp_path):
    """Big blobs are chains of overflow pages: 32 KiB pages halve a big write. A store made with
    SQLite's 4 KiB pages cannot change them in WAL mode; it keeps them and works as before."""
    import sqlite3

    from offload.store.engines import SQLITE_PAGE_SIZE

    new = _store(f"sqlite:///{tmp_path / 'new.db'}")
    with new.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == SQLITE_PAGE_SIZE == 32768
    new.close()

    old_path = tmp_path / "old.db"
    raw = sqlite3.connect(old_path)
    raw.execute("PRAGMA page_size = 4096")
    raw.execute("PRAGMA journal_mode = WAL")  # the file exists with its page size (a table would make it no store)
    raw.close()
    old = _store(f"sqlite:///{old_path}")
    data = _text(40_000)
    aid = _put(old, data)
    with old.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
    assert b"".join(old.iter_bytes(old.get(aid, "")["sha256"])) == data
    old.close()


def test_a_big_sqlite_put_leaves_the_checkpoint_to_a_background_thread(sqlite_url):
    import sqlite3

    store = _store(sqlite_url)
    with store.engine.connect() as conn:  # our connections never checkpoint inside a COMMIT
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    data = _text(120_000)  # ~4.6 MB: over the 4 MiB that starts a checkpoint
    aid = _put(store, data)
    path = sqlite_url.split("///", 1)[1]
    store._checkpointer.wait()
    raw = sqlite3.connect(path)
    busy, log_frames, done = raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    raw.close()
    assert busy == 0 and done == log_frames  # everything written was already folded into the database
    assert os.path.getsize(path) > len(data)
    assert b"".join((bytes(c) for _, c in store.iter_chunks(store.get(aid, "")["sha256"]))) == data
    store.close()


def test_the_checkpoint_starts_once_the_log_has_grown_by_the_mark_not_after_every_write(sqlite_url):
    """A reset log kept its size on disk: after the first checkpoint the file was over the mark for good,
    and starting a thread after every write cost each put ~1 ms. A restarted log is now cut back."""
    store = _store(sqlite_url)
    _put(store, _text(120_000))  # ~4.6 MB: a checkpoint
    store._checkpointer.wait()
    first = store._checkpointer._thread
    assert first is not None
    for i in range(3):  # ~3 MB more: under the mark, whatever the file's size
        _put(store, _text(25_000) + str(i).encode())
        assert store._checkpointer._thread is first
    _put(store, _text(40_000))  # past it: the next checkpoint
    second = store._checkpointer._thread
    assert second is not first
    second.join()
    for i in range(300):  # small writes log a few pages each: they add up to a checkpoint too
        _put(store, b"small %d" % i)
    assert store._checkpointer._thread is not second
    store.close()


_json_leaves = st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{},:"\\ é\n', max_size=12)
_json_values = st.recursive(_json_leaves, lambda children: st.lists(children, max_size=5)
                            | st.dictionaries(st.text(alphabet='k[]{}",\\', max_size=4), children, max_size=4),
                            max_leaves=25)


@settings(max_examples=150, deadline=None)
@given(doc=st.lists(_json_values, max_size=8) | st.dictionaries(st.text(max_size=3), st.lists(_json_values, max_size=6),
                                                                   min_size=1, max_size=3),
       indent=st.sampled_from([None, 1]))
def test_item_index_ranges_parse_to_the_items_of_the_main_array(doc, indent):
    """Each indexed range parses to the item the whole document holds at that place: brackets, commas
    and escaped quotes inside strings, nested arrays and objects, whitespace around items."""
    import json

    data = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    index = json_item_index(data)
    if isinstance(doc, list):
        assert index is not None and index.path == ""
        items = doc
    else:  # the array the reference names (find_main), or none when the main collection is not an array
        main = find_main(doc)
        if not isinstance(main.value, list):
            assert index is None
            return
        assert index is not None and index.path == main.path
        items = main.value
    assert [json.loads(data[s:e]) for s, e in zip(index.starts.tolist(), index.ends.tolist())] == items


def test_a_scan_block_of_nothing_but_escaped_quotes_is_indexed_and_stored(sqlite_url):
    """The item index scans 16 MB blocks; one that lies inside a single string and holds only escaped
    quotes (\\" pairs) has no structural character left once escapes are dropped. That used to raise
    IndexError inside the store write, and the result was then not stored at all."""
    from offload import Offloader

    data = b'["' + b'\\"' * (17 << 20) + b'"]'  # 34 MB: the second block is all escapes
    index = json_item_index(data)
    assert len(index) == 1 and (int(index.starts[0]), int(index.ends[0])) == (1, len(data) - 1)
    with Offloader(sqlite_url) as off:
        ref = off.put(data, tool="api")
        assert ref.stored and ref.kind == "json" and ref.items == 1
        assert b"".join(off.store.iter_bytes(ref.sha256)) == data


def test_postgresql_gc_dropping_content_and_a_put_reusing_it_never_leave_an_artifact_without_bytes(pg_database):
    """PostgreSQL lets two writers in at once. A gc that finds content unused and drops it, and a put of
    the same bytes that finds the content stored and only adds its row, must not interleave: the put
    would point at bytes that are gone. The put share-locks the content row it reuses, and the drop
    locks it first, so the put waits, finds the content gone and stores it again."""
    import threading

    from tests.conftest import pg_schema_url

    url = pg_schema_url(pg_database)
    dropping, reusing = _store(url), _store(url)
    data = b"shared bytes\n" * 5000
    sha = hashlib.sha256(data).hexdigest()
    first = _put(dropping, data)
    result: dict = {}
    with dropping._write() as conn:  # a gc's transaction, held open mid-way
        end_artifacts(conn, [first], "expired")
        assert drop_orphans(conn, [sha])[0] == 1

        def put_same_bytes():
            result["id"] = _put(reusing, data)

        writer = threading.Thread(target=put_same_bytes)
        writer.start()
        writer.join(timeout=1.5)  # time enough to finish, were it not waiting for the gc
    writer.join(timeout=30)
    assert not writer.is_alive() and "id" in result
    assert b"".join(reusing.iter_bytes(reusing.get(result["id"], "")["sha256"])) == data
    assert reusing.verify() == []
    dropping.close()
    reusing.close()


def _counted_index(data: bytes) -> tuple[Callable[[], object], list[bool]]:
    """An item index given late (a callable, as the offloader gives it), and a list of its calls."""
    asked: list[bool] = []

    def index():
        asked.append(True)
        return json_item_index(data)

    return index, asked


def test_put_takes_its_row_and_item_index_late_and_skips_the_index_for_known_content(store_url):
    store = _store(store_url)
    data = b'[{"a": 1}, {"a": 2}, {"a": 3}]'
    sha = hashlib.sha256(data).hexdigest()
    index, asked = _counted_index(data)
    first, second = _row(), _row()
    info = store.put(lambda: first, data, sha, item_index=index)
    assert info.items == 3 and asked == [True]
    store.put(lambda: second, data, sha, item_index=index)  # same content: stored once, indexed once
    assert asked == [True]
    assert store.get(first["id"], "")["sha256"] == store.get(second["id"], "")["sha256"] == sha
    store.close()


def test_content_stored_ahead_of_its_row_is_stored_again_if_gc_took_it_meanwhile(store_url):
    """The offloader stores a result's bytes first (`put_content`) and its artifact row once the
    reference is built; content that no artifact uses yet is an orphan to gc, and the row's `put` must
    then store it again rather than point at nothing."""
    store = _store(store_url)
    data = b'[{"a": 1}, {"a": 2}, {"a": 3}]'
    sha = hashlib.sha256(data).hexdigest()
    index, asked = _counted_index(data)
    assert store.put_content(data, sha, item_index=index).items == 3 and store.has_content(sha)
    row = _row(kind="json")
    store.put(row, data, sha, item_index=index)  # the content is there: only the row is added
    assert asked == [True]
    store.discard_content(sha)  # used by an artifact now: kept
    assert store.has_content(sha)

    orphan = b"an orphan\n" * 100
    orphan_sha = hashlib.sha256(orphan).hexdigest()
    store.put_content(orphan, orphan_sha)
    # another process's gc while the row is still to come leaves it alone (PostgreSQL does not
    # serialise writers); once it is older than any write in progress, it is a killed writer's
    assert store.gc().contents_removed == 0 and store.has_content(orphan_sha)
    later = utcnow() + ORPHAN_GRACE + dt.timedelta(seconds=1)
    assert store.gc(now=later).contents_removed == 1 and not store.has_content(orphan_sha)
    late = _row()
    info = store.put(late, orphan, orphan_sha)
    assert info.bytes == len(orphan) and store.has_content(orphan_sha)
    assert b"".join(store.iter_bytes(orphan_sha)) == orphan
    store.close()


def test_a_row_that_never_comes_stores_nothing(store_url):
    store = _store(store_url)
    data = _text(1000)
    sha = hashlib.sha256(data).hexdigest()

    def fails():
        raise RuntimeError("the reference could not be built")

    with pytest.raises(RuntimeError):
        store.put(fails, data, sha)
    assert not store.has_content(sha)  # the chunks written before the row was asked for are rolled back
    assert store.list("")[0] == []
    store.close()


@pytest.mark.postgres
def test_a_shell_put_with_known_stderr_and_a_gc_do_not_deadlock(pg_database):
    """A gc beside a shell put whose stderr's content was stored before, by another artifact: stored
    in one transaction with the result's, a put share-locked that content, then waited for gc's lock
    near the quota while the gc held it and waited to drop the content (PostgreSQL failed one: found
    in review). The stderr is now stored in its own transaction, just before the result's."""
    import threading

    from conftest import pg_schema_url
    from offload import Offloader

    url = pg_schema_url(pg_database)
    stderr = b"".join(b"npm WARN deprecated package-%d@1.0.0: please upgrade %s\n" % (i, b"w" * 30) for i in range(3000))
    stdout = b"".join(b"out %d %s\n" % (i, b"x" * 60) for i in range(3000))
    writer, collector = Offloader(url, quota_bytes=480_000), Offloader(url)
    writer.process("read", stderr)  # the stderr's content, stored by an earlier artifact
    store = writer.store
    original = store.put
    paused, go = threading.Event(), threading.Event()

    def pausing(row, *args, **kwargs):
        info = original(row, *args, **kwargs)
        if not callable(row) and row["tool"] == "bash:stderr":
            paused.set()
            go.wait(10)
        return info

    store.put = pausing
    results = {}

    def put():
        results["ref"] = writer.process("bash", {"stdout": stdout, "stderr": stderr, "exit_code": 1})

    def gc():
        try:
            results["gc"] = collector.gc(quota_bytes=0)
        except Exception as exc:  # noqa: BLE001 - the deadlock victim
            results["gc"] = exc

    putting = threading.Thread(target=put)
    putting.start()
    assert paused.wait(10)
    collecting = threading.Thread(target=gc)
    collecting.start()
    time.sleep(1.0)  # the gc now waits for the put (for its lock, or its content)
    go.set()
    putting.join(30)
    collecting.join(30)
    assert results["ref"].stored, results["ref"].error
    assert not isinstance(results["gc"], Exception), results["gc"]
    writer.close()
    collector.close()


@pytest.mark.postgres
def test_a_writer_waiting_for_its_turn_near_the_quota_holds_no_lock_another_thread_needs(pg_database):
    """Near the quota a writer that may make room waits for gc's lock, held by the writer before it until
    that one commits. It waited holding the process's count lock, which the writer before needed for a
    second quota check in its transaction: a cycle PostgreSQL cannot see, broken only by the lock
    timeout, which failed the waiting put (the root of 22 of 72 stressed shell puts timing out). Now it
    waits for gc's lock first, and takes the count lock after."""
    import threading

    from conftest import pg_schema_url

    url = pg_schema_url(pg_database)
    store = Store(open_engine(url, busy_timeout=3), quota_bytes=100_000)  # the cycle ends in a 3 s timeout
    _put(store, b"f" * 93_000)  # 93% full: every write that may make room takes its turn
    results: dict = {}
    first_in, done = threading.Event(), threading.Event()

    def first():
        with store._write() as conn:
            store._check_quota(conn, 1_000, make_room=())  # takes gc's lock until this commits
            first_in.set()
            done.wait(10)
            store._check_quota(conn, 1_000, make_room=())  # a second check in the same transaction
            results["first"] = "checked twice"

    def second():
        data = b"s" * 1_000
        try:
            store.put(_row(), data, hashlib.sha256(data).hexdigest(), make_room=())
            results["second"] = "stored"
        except Exception as exc:  # noqa: BLE001 - the lock timeout of the cycle
            results["second"] = exc

    writer = threading.Thread(target=first)
    writer.start()
    assert first_in.wait(10)
    waiter = threading.Thread(target=second)
    waiter.start()
    watch = sa.create_engine(pg_database)
    with watch.connect() as conn:  # the second writer is waiting for gc's lock
        for _ in range(200):
            if conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                    "AND NOT granted")).scalar():
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the second writer never waited for gc's lock")
    watch.dispose()
    done.set()
    writer.join(30)
    waiter.join(30)
    assert results == {"first": "checked twice", "second": "stored"}, results
    assert store.total_bytes() == 94_000  # the first writer only checked
    store.close()


def test_bytes_that_cannot_be_the_content_are_refused_and_store_nothing(store_url):
    """An import stored b"" under a real sha256 (it took the content to be there already): that content
    then read as nothing for good, and a fresh put of the real bytes found it and read as nothing too."""
    from offload.errors import ContentMismatch

    store = _store(store_url)
    data = _text(2000)
    sha = hashlib.sha256(data).hexdigest()
    for wrong in (b"", b"short but not these bytes\n"):
        row = _row()
        with pytest.raises(ContentMismatch, match="nothing was stored"):
            store.put(row, wrong, sha)
        with pytest.raises(ArtifactNotFound):
            store.get(row["id"], "")
    with pytest.raises(ContentMismatch):
        store.put_content(b"", sha)
    assert store.total_bytes() == 0 and not store.has_content(sha)
    empty = _put(store, b"")  # the empty content itself is fine
    assert store.get(empty, "")["bytes"] == 0 and store.verify() == []
    store.engine.dispose()


def test_a_content_stored_as_nothing_is_stored_again_by_the_next_put_of_its_bytes(store_url):
    store = _store(store_url)
    data = _text(60_000)  # ~2.5 MB: 3 chunks
    sha = hashlib.sha256(data).hexdigest()
    broken = _row()
    with store.engine.begin() as conn:  # what the import racing gc left: a content row of 0 bytes, no chunks
        conn.execute(sa.text("INSERT INTO contents (sha256, bytes, chars, lines, chunk_count, created_at) "
                             "VALUES (:s, 0, 0, 0, 0, :t)"), {"s": sha, "t": utcnow()})
        conn.execute(sa.text(
            "INSERT INTO artifacts (id, namespace, tool, kind, content_type, sha256, bytes, chars, lines, tokens, "
            "shown_tokens, pinned, status, created_at, accessed_at) VALUES (:i, '', 't', 'text', 'text/plain', :s, "
            "0, 0, 0, 1, 1, false, 'active', :t, :t)"), {"i": broken["id"], "s": sha, "t": utcnow()})
    fresh = _put(store, data)
    assert b"".join(store.iter_bytes(sha)) == data
    for artifact_id in (fresh, broken["id"]):  # the earlier artifact reads whole again
        row = store.get(artifact_id, "")
        assert (row["bytes"], row["lines"]) == (len(data), 60_000)
    assert store.verify() == []
    store.engine.dispose()


def _held_chunks(store: Store, sha: str, after_first: Callable[[], None]):
    """`store.iter_chunks`, which runs `after_first` once the first chunk of `sha` was read."""
    reading = store.iter_chunks

    def iter_chunks(sha256, *args, **kwargs):
        for n, chunk in enumerate(reading(sha256, *args, **kwargs)):
            yield chunk
            if n == 0 and sha256 == sha:
                after_first()
    return iter_chunks


def test_verify_reports_no_mismatch_for_content_deleted_while_it_checked_it(store_url):
    """verify listed the contents once, then read each in transactions of its own: a content deleted
    in between was reported as not matching ({'bytes': 3000000, 'actual_bytes': 2097152, 'artifacts': []})."""
    store = _store(store_url)
    data = _text(100_000)  # ~4 MB: 4 chunks
    sha = hashlib.sha256(data).hexdigest()
    doomed = _put(store, data)
    kept = _put(store, b"another content\n" * 100)
    store.iter_chunks = _held_chunks(store, sha, lambda: store.delete(doomed, ""))
    assert store.verify() == []
    del store.iter_chunks
    again = _put(store, data)  # deleted and stored again meanwhile: checked again, and it matches
    store.iter_chunks = _held_chunks(store, sha, lambda: (store.delete(again, ""), _put(store, data)))
    assert store.verify() == []
    del store.iter_chunks
    with store.engine.begin() as conn:  # while a content that is really damaged is still reported
        conn.execute(sa.text("UPDATE chunks SET data = :d WHERE sha256 = :s AND seq = 1"),
                     {"d": b"damaged\n", "s": sha})
    assert [p["artifacts"] for p in store.verify()] != []
    assert kept not in store.verify()[0]["artifacts"]
    store.engine.dispose()


def test_verify_reports_artifacts_whose_content_is_missing(store_url):
    """With its chunks and contents row gone, verify said all content matched while `cat` failed."""
    store = _store(store_url)
    data = _text(80_000)  # ~3.3 MB: 4 chunks
    sha = hashlib.sha256(data).hexdigest()
    first, second = _put(store, data), _put(store, data)
    other = _put(store, _text(70_000))
    kept = _put(store, b"kept\n")
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM chunks WHERE sha256 = :s"), {"s": sha})
        conn.execute(sa.text("DELETE FROM contents WHERE sha256 = :s"), {"s": sha})
        conn.execute(sa.text("DELETE FROM chunks WHERE sha256 = :s AND seq = 1"),
                     {"s": store.get(other, "")["sha256"]})
    problems = {p["sha256"]: p for p in store.verify()}
    assert set(problems) == {sha, store.get(other, "")["sha256"]}
    assert problems[sha]["problem"] == "missing" and sorted(problems[sha]["artifacts"]) == sorted([first, second])
    assert problems[sha]["bytes"] == len(data) and problems[sha]["actual_bytes"] == 0
    assert problems[store.get(other, "")["sha256"]]["artifacts"] == [other]
    assert kept not in str(problems)
    store.engine.dispose()


@pytest.fixture
def write_lock_held(store_url):
    """A function holding, until the `with` ends, what a write of the artifact `id` waits for on this backend:
    SQLite's write lock (BEGIN IMMEDIATE elsewhere), the artifact's row on PostgreSQL, and on DuckDB the
    store's own writer (another thread in a write transaction)."""
    import contextlib
    import threading

    @contextlib.contextmanager
    def held(store: Store, artifact_id: str):
        if store.backend == "sqlite":
            import sqlite3

            other = sqlite3.connect(store.engine.url.database, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                yield
            finally:
                other.execute("ROLLBACK")
                other.close()
        elif store.backend == "postgresql":
            other = sa.create_engine(store_url)
            with other.connect() as conn, conn.begin():
                conn.execute(sa.text("SELECT id FROM artifacts WHERE id = :i FOR UPDATE"), {"i": artifact_id})
                yield
            other.dispose()
        else:
            inside, release = threading.Event(), threading.Event()

            def writer():
                with store._write():
                    inside.set()
                    release.wait(30)

            thread = threading.Thread(target=writer)
            thread.start()
            inside.wait(10)
            try:
                yield
            finally:
                release.set()
                thread.join()
    return held


def test_a_read_never_waits_behind_a_writer_to_write_when_it_was_read(store_url, write_lock_held):
    """get() wrote accessed_at before returning the row, through the write lock: `offload cat` took 19 s
    behind a transaction held for 20 s elsewhere. The touch is skipped when the lock is not free at once,
    and written by this store's next gc, which evicts by it."""
    store = Store(open_engine(store_url, busy_timeout=5))
    read, other = _put(store, b"read while a writer works\n" * 50), _put(store, b"not read\n" * 50)
    long_ago = utcnow() - dt.timedelta(hours=2)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE artifacts SET accessed_at = :t"), {"t": long_ago})
    with write_lock_held(store, read):
        started = time.monotonic()
        assert store.get(read, "")["id"] == read
        assert time.monotonic() - started < 2
    assert store.get(read, "", touch=False)["accessed_at"] == long_ago  # not written yet
    store.gc()
    assert store.get(read, "", touch=False)["accessed_at"] > long_ago + dt.timedelta(hours=1)
    assert store.get(other, "", touch=False)["accessed_at"] == long_ago
    store.get(other, "")  # a free lock: written at once, as before
    assert store.get(other, "", touch=False)["accessed_at"] > long_ago + dt.timedelta(hours=1)
    with store.engine.begin() as conn:  # and the connection that touched waits as long as before for writes
        timeout = conn.exec_driver_sql("PRAGMA busy_timeout").scalar() if store.backend == "sqlite" else 5000
    assert timeout == 5000
    store.close()


def test_two_stores_on_one_duckdb_file_in_one_process_write_one_at_a_time(tmp_path):
    """The write lock was each Store's own: two Offloaders on one DuckDB file, each putting and deleting the
    same content in a thread of its own, failed 6 of 80 puts ("PRIMARY KEY or UNIQUE constraint violation")."""
    import threading

    url = f"duckdb:///{tmp_path / 'one.duckdb'}"
    first, second = Store(open_engine(url)), Store(open_engine(url))
    data = _text(3000)
    sha = hashlib.sha256(data).hexdigest()
    inside, release, errors = threading.Event(), threading.Event(), []

    def held_index():
        inside.set()
        release.wait(30)

    def put(store, **kw):
        try:
            store.put(_row(), data, sha, **kw)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writing = threading.Thread(target=put, args=(first,), kwargs={"item_index": held_index})
    writing.start()
    assert inside.wait(10)
    waiting = threading.Thread(target=put, args=(second,))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # waits for the first store's write, on the same file
    release.set()
    writing.join()
    waiting.join()
    assert errors == []
    with first.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM contents")).scalar() == 1
        assert conn.execute(sa.text("SELECT count(*) FROM artifacts")).scalar() == 2
    assert b"".join(second.iter_bytes(sha)) == data
    first.close()
    second.close()


def test_a_duckdb_conflict_at_commit_is_retried_like_another_writer_storing_the_content_first(tmp_path):
    """DuckDB checks keys at commit and raises the conflict as a TransactionException (a DatabaseError), so
    the put failed where PostgreSQL's IntegrityError is retried."""
    url = f"duckdb:///{tmp_path / 'one.duckdb'}"
    store = Store(open_engine(url))
    other = Store(open_engine(url))
    other._write_lock = None  # a writer with a connection of its own that this process's lock does not hold back
    data = _text(3000)
    sha = hashlib.sha256(data).hexdigest()
    row, calls = _row(), []

    def late_row():  # called inside the put's transaction, once its content is written
        calls.append(1)
        if len(calls) == 1:
            other.put_content(data, sha)  # commits first
        return row

    store.put(late_row, data, sha)
    assert len(calls) == 2 and store.get(row["id"], "")["bytes"] == len(data)
    assert b"".join(store.iter_bytes(sha)) == data
    store.close()
    other.close()
