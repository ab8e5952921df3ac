"""Export / import: a store moves between machines and backends with every artifact and extract intact."""

from __future__ import annotations

import io
import json
import tarfile

import orjson
import pytest

from offload import Offloader
from offload.errors import ArtifactExpired, InvalidArgument


def _fill(off: Offloader) -> dict:
    log = "".join(f"{i} request ok\n" for i in range(50_000)) + "ERROR: failed at the end\n"
    records = [{"id": i, "status": "error" if i % 7 == 0 else "ok"} for i in range(30_000)]
    refs = {"log": off.process("bash", log, args={"cmd": "make -k all"}), "json": off.process("api", records),
            "copy": off.process("bash_again", log), "bin": off.put(bytes(range(256)) * 5000, tool="blob")}
    off.fetch_slice(refs["log"].artifact_id, offset=-1)
    off.query_artifact(refs["json"].artifact_id, jmespath="[?status=='error'].id | [:5]")
    gone = off.put("soon deleted\n", tool="tmp")
    off.delete(gone.artifact_id)
    off.pin(refs["bin"].artifact_id)
    return {"refs": refs, "gone": gone.artifact_id, "log": log, "records": records}


@pytest.mark.parametrize("target_backend", ["postgresql", "duckdb"])
def test_sqlite_to_another_backend_and_back(tmp_path, sqlite_url, pg_database, target_backend):
    from tests.conftest import pg_schema_url

    source = Offloader(sqlite_url)
    made = _fill(source)
    archive = tmp_path / "store.tar"
    manifest = source.export_archive(archive)
    assert manifest["artifacts"] == 5 and manifest["extracts"] == 2 and manifest["contents"] == 3
    target_url = pg_schema_url(pg_database) if target_backend == "postgresql" else f"duckdb:///{tmp_path / 'x.duckdb'}"
    target = Offloader(target_url)
    result = target.import_archive(archive)
    assert result["imported"]["artifacts"] == 5 and result["imported"]["extracts"] == 2
    for name, ref in made["refs"].items():
        assert b"".join(target.iter_raw(ref.artifact_id)) == b"".join(source.iter_raw(ref.artifact_id)), name
        assert target.reference(ref.artifact_id) == source.reference(ref.artifact_id)
        mine, theirs = target.get(ref.artifact_id), source.get(ref.artifact_id)
        for key in ("tool", "kind", "bytes", "lines", "items", "tokens", "shown_tokens", "pinned", "session", "created_at"):
            assert mine[key] == theirs[key], (name, key)
    with pytest.raises(ArtifactExpired):
        target.get(made["gone"])
    page = target.fetch_slice(made["refs"]["json"].artifact_id, unit="items", offset=-2)
    assert json.loads(page["content"]) == made["records"][-2:]  # the item index came along
    assert [e["id"] for e in target.extracts()[:2]] == [e["id"] for e in source.extracts()]
    assert {r["status"] for r in target.rerun()} == {"unchanged"}
    # the args are searched as text in the new store too, and the archive holds only what they are
    assert [r["id"] for r in target.list(text="make -k")[0]] == [made["refs"]["log"].artifact_id]
    assert target.list(text='"')[0] == [] and target.list(text="{")[0] == []
    with tarfile.open(archive) as tar:
        rows = [json.loads(line) for line in tar.extractfile("artifacts.ndjson").read().splitlines()]
    assert rows and not any("args_text" in row for row in rows)
    # and back again into a fresh SQLite store; importing twice changes nothing
    back = Offloader(f"sqlite:///{tmp_path / 'back.db'}")
    target.export_archive(tmp_path / "again.tar")
    back.import_archive(tmp_path / "again.tar")
    again = back.import_archive(tmp_path / "again.tar")
    assert again["imported"]["artifacts"] == 0 and again["imported"]["skipped"] == 5
    assert b"".join(back.iter_raw(made["refs"]["log"].artifact_id)) == made["log"].encode()
    assert back.verify() == []
    for off in (source, target, back):
        off.close()


def test_a_tampered_archive_stores_nothing(tmp_path, sqlite_url):
    import tarfile

    source = Offloader(sqlite_url)
    ref = source.process("bash", "x\n" * 100_000)
    source.export_archive(tmp_path / "a.tar")
    with tarfile.open(tmp_path / "a.tar") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    key = f"content/{ref.sha256}"
    members[key] = members[key].replace(b"x", b"y", 1)
    with tarfile.open(tmp_path / "b.tar", "w") as tar:
        import io

        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    target = Offloader(f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(InvalidArgument, match=rf"b\.tar is damaged \(content/{ref.sha256} no longer matches its "
                                              r"sha256.*\); nothing was imported"):
        target.import_archive(tmp_path / "b.tar")
    assert target.store.total_bytes() == 0


def test_a_damaged_content_says_what_was_imported_before_it(tmp_path, sqlite_url):
    # the error said only that the content did not match, not that the artifacts before it stayed
    source = Offloader(sqlite_url)
    first = source.process("bash", "x\n" * 100_000)
    second = source.process("bash", "y\n" * 100_000)
    source.fetch_slice(first.artifact_id)
    source.export_archive(tmp_path / "a.tar")
    with tarfile.open(tmp_path / "a.tar") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    order = [name for name in members if name.startswith("content/")]
    damaged = order[1]
    members[damaged] = members[damaged][:-1] + b"!"
    _write_tar(tmp_path / "b.tar", members)
    target = Offloader(f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(InvalidArgument, match=r"b\.tar is damaged \(content/\w+ no longer matches its sha256, so it "
                                              r"and its 1 artifact\(s\) were not stored\); 1 artifact and 1 extract "
                                              r"read before it were imported and stay"):
        target.import_archive(tmp_path / "b.tar")
    kept = {first.sha256: first.artifact_id, second.sha256: second.artifact_id}[order[0][len("content/"):]]
    assert target.get(kept)["bytes"] == 200_000
    target.import_archive(tmp_path / "a.tar")  # the intact archive completes it
    assert target.get(first.artifact_id) and target.get(second.artifact_id)


def _write_tar(path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_what_is_not_an_intact_archive_is_refused_clearly_and_the_store_keeps_what_it_had(tmp_path, sqlite_url):
    source = Offloader(sqlite_url)
    log = "".join(f"{i} ok\n" for i in range(200_000))
    source.process("bash", log)
    source.process("api", [{"id": i} for i in range(20_000)])
    whole = tmp_path / "whole.tar"
    source.export_archive(whole)
    with tarfile.open(whole) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        cut_at, cut_later = [m.offset_data + m.size // 2 for m in tar if m.name.startswith("content/")][:2]
    undigested = {**members, "manifest.json": orjson.dumps({
        key: value for key, value in orjson.loads(members["manifest.json"]).items() if key != "digests"})}
    cases = {
        "text.tar": (b"just some text\n", r"is not an offload archive: it is not a tar file"),
        "other.tar": (None, r"does not start with manifest\.json \(its first member is 'notes\.txt'\)"),
        "version.tar": ({**members, "manifest.json": b'{"format": "offload-archive", "version": 99}'},
                        r"not an offload archive of version 1 .*'version': 99"),
        "manifest.tar": ({**members, "manifest.json": b"{not json"}, r"is damaged \(unexpected character.*nothing was imported"),
        "rows.tar": ({**members, "artifacts.ndjson": members["artifacts.ndjson"].replace(b'"bash"', b'"forged"')},
                     r"is damaged \(artifacts\.ndjson no longer matches its sha256 in the manifest, so it was not "
                     r"read\); nothing was imported"),
        # an archive written before the manifest held digests is read by its records' own checks
        "old-rows.tar": ({**undigested, "artifacts.ndjson": b'{"id": "art_x"}\n'},
                         r"is damaged \(a record lacks its 'sha256' field\); nothing was imported"),
        "extra.tar": ({"manifest.json": members["manifest.json"], "notes.txt": b"hi\n", **members},
                      r"is damaged \(its member 'notes\.txt' is not in its manifest\); nothing was imported"),
        "cut.tar": (whole.read_bytes()[:cut_at], r"is damaged \(unexpected end of data\); nothing was imported"),
    }
    target = Offloader(f"sqlite:///{tmp_path / 'target.db'}")
    kept = target.process("bash", "already here\n" * 50_000)
    before = (target.store.total_bytes(), [a["id"] for a in target.list()[0]])
    for name, (data, message) in cases.items():
        path = tmp_path / name
        if data is None:
            _write_tar(path, {"notes.txt": b"hello\n"})
        elif isinstance(data, dict):
            _write_tar(path, data)
        else:
            path.write_bytes(data)
        with pytest.raises(InvalidArgument, match=message):
            target.import_archive(path)
        assert b"".join(target.iter_raw(kept.artifact_id)) == ("already here\n" * 50_000).encode(), name
        assert target.verify() == [], name
    assert target.store.total_bytes() == before[0]  # the cut archive's content was refused whole
    assert {a["id"] for a in target.list()[0]} == set(before[1])
    (tmp_path / "cut-later.tar").write_bytes(whole.read_bytes()[:cut_later])  # one whole content before the cut
    with pytest.raises(InvalidArgument, match=r"is damaged \(unexpected end of data\); 1 artifact and 0 extracts "
                                              r"read before it were imported and stay \(import the intact archive"):
        target.import_archive(tmp_path / "cut-later.tar")
    assert len(target.list()[0]) == 2 and target.verify() == []
    target.import_archive(whole)  # the intact archive completes the import
    assert len(target.list()[0]) == 3
    source.close()
    target.close()


def test_an_edited_item_index_is_refused_before_its_content_is_stored(tmp_path, sqlite_url):
    """Only contents were checked: an archive whose item index had one byte changed imported, and item 96
    of the imported artifact was `[  ]`; `verify` said all was well."""
    source = Offloader(sqlite_url)
    doc = [{"id": i, "name": f"n{i}"} for i in range(20_000)]
    aid = source.process("api", doc).artifact_id
    whole = tmp_path / "whole.tar"
    source.export_archive(whole)
    with tarfile.open(whole) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    (items,) = [name for name in members if name.startswith("items/")]
    assert list(members).index(items) < list(members).index("content/" + items[len("items/"):])
    undigested = {**members, "manifest.json": orjson.dumps({
        key: value for key, value in orjson.loads(members["manifest.json"]).items() if key != "digests"})}
    shifted = bytearray(members[items])
    shifted[16 * 96] ^= 1  # item 96 starts a byte off: within the content, in order
    beyond = bytearray(members[items])
    beyond[16 * 96 + 8:16 * 96 + 16] = (10**12).to_bytes(8, "little")  # item 96 ends past the content
    target = Offloader(f"sqlite:///{tmp_path / 'target.db'}")
    cases = {"shifted.tar": (members, shifted, rf"{items} no longer matches its sha256 in the manifest"),
             "beyond.tar": (members, beyond, rf"{items} no longer matches its sha256 in the manifest"),
             "old-beyond.tar": (undigested, beyond, rf"{items} is damaged: it holds item ranges its content "
                                                    r"\([\d,]+ bytes\) cannot have")}
    for name, (base, index, message) in cases.items():
        _write_tar(tmp_path / name, {**base, items: bytes(index)})
        with pytest.raises(InvalidArgument, match=rf"is damaged \({message}.*\); nothing was imported"):
            target.import_archive(tmp_path / name)
        assert target.list()[0] == [] and target.store.total_bytes() == 0, name
    target.import_archive(whole)
    page = target.fetch_slice(aid, unit="items", offset=96, limit=1)
    assert json.loads(page["content"]) == [doc[96]]
    source.close()
    target.close()


def test_an_import_racing_gc_never_stores_a_content_as_nothing(tmp_path, sqlite_url, monkeypatch):
    """gc, run after every write transaction of the import, expires the archive's first artifact (past its
    TTL) and with it, once nothing else pointed at it, the content the import was still adding rows to."""
    import contextlib
    import datetime as dt

    import sqlalchemy as sa

    from offload.store import Store

    data = "".join(f"{i} a line of the shared result\n" for i in range(40_000)).encode()
    source = Offloader(sqlite_url)
    ids = [source.put(data, tool="grep").artifact_id for _ in range(4)]
    with source.store.engine.begin() as conn:  # the first one exported is past its TTL
        conn.execute(sa.text("UPDATE artifacts SET expires_at = :t WHERE id = :i"),
                     {"t": dt.datetime(2000, 1, 1), "i": ids[0]})
    source.export_archive(tmp_path / "a.tar")
    target = Offloader(f"sqlite:///{tmp_path / 'target.db'}")
    collector = Offloader(f"sqlite:///{tmp_path / 'target.db'}")
    collector.store  # opened before the import's writes are watched
    write, collecting = Store._write, []

    @contextlib.contextmanager
    def write_then_gc(self):
        with write(self) as conn:
            yield conn
        if self is target.store and not collecting:
            collecting.append(True)
            try:
                collector.gc()
            finally:
                collecting.clear()

    monkeypatch.setattr(Store, "_write", write_then_gc)
    target.import_archive(tmp_path / "a.tar")
    monkeypatch.setattr(Store, "_write", write)
    collector.gc()
    for artifact_id in ids[1:]:
        assert b"".join(target.iter_raw(artifact_id)) == data
    assert target.verify() == []
    for off in (source, target, collector):
        off.close()


def test_an_import_beside_another_of_the_same_archive_skips_what_the_other_stored(tmp_path, sqlite_url,
                                                                                    monkeypatch):
    """Two imports of one archive at once: each looks for an id, then inserts it, and the other may have
    stored it in between (a raw IntegrityError). Here every first look misses, as if the other import had
    stored the row just after it."""
    from offload.store import archive

    source = Offloader(sqlite_url)
    refs = [source.process("bash", f"{i}\n" * 100_000) for i in range(2)]
    shared = source.process("bash", "0\n" * 100_000)  # a second artifact of a content
    source.fetch_slice(refs[0].artifact_id)
    source.delete(refs[1].artifact_id)  # a tombstone
    source.export_archive(tmp_path / "a.tar")
    target = Offloader(f"sqlite:///{tmp_path / 't.db'}")
    first = target.import_archive(tmp_path / "a.tar")["imported"]
    assert first == {"artifacts": 3, "extracts": 1, "contents": 1, "skipped": 0, "skipped_elsewhere": {}}

    looked: set = set()
    real = archive._exists

    def late(store, table, key):
        if (table.name, key) not in looked:
            looked.add((table.name, key))
            return False  # the other import's row is not there yet
        return real(store, table, key)

    monkeypatch.setattr(archive, "_exists", late)
    again = target.import_archive(tmp_path / "a.tar")["imported"]
    assert again["artifacts"] == again["extracts"] == 0 and again["skipped"] == 3, again
    assert target.get(shared.artifact_id)["bytes"] == 200_000
    assert len(target.extracts()) == 1 and target.store.total_bytes() == 200_000


def test_an_exported_archive_is_readable_by_its_owner_only(tmp_path, sqlite_url):
    import os
    import stat

    source = Offloader(sqlite_url)
    source.process("bash", "secret\n" * 100_000)
    before = os.umask(0o022)  # the usual: files the umask leaves 0644
    try:
        source.export_archive(tmp_path / "a.tar")  # it was 0644: any user could read every result in it
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "a.tar").stat().st_mode) == 0o600
    assert Offloader(f"sqlite:///{tmp_path / 't.db'}").import_archive(tmp_path / "a.tar")["imported"]["artifacts"] == 1


def test_an_import_into_another_namespace_of_the_same_store_says_what_it_did_not_copy(tmp_path, sqlite_url):
    # it said "11 already present" of artifacts the target namespace did not have
    source = Offloader(sqlite_url)
    ref = source.process("bash", "x\n" * 100_000)
    source.export_archive(tmp_path / "a.tar")
    result = source.for_namespace("other").import_archive(tmp_path / "a.tar")["imported"]
    assert result["artifacts"] == 0 and result["skipped"] == 1 and result["skipped_elsewhere"] == {"": 1}
    assert source.get(ref.artifact_id)["namespace"] == ""
    from typer.testing import CliRunner

    from offload.cli import app

    out = CliRunner().invoke(app, ["--url", sqlite_url, "-n", "other", "import", str(tmp_path / "a.tar")])
    assert out.exit_code == 0 and "1 in namespace '' of this store, not copied" in out.stderr

