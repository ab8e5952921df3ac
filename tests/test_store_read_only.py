"""A SQLite store its user cannot write (a 0444 file, a 0555 folder): read without being migrated, and a
write refused with an error that names the file and says it is read-only.

Each case runs offload in a subprocess as a user the permission bits bind. Under root (CI containers) that
is root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, dropped from the subprocess's bounding set before
it starts offload: root then obeys the bits like anyone (it still owns the files, so 0444 is read-only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from offload import Offloader

# Drops the two capabilities that let root ignore permission bits, then runs argv[1:] (PR_CAPBSET_DROP = 24).
BOUND_BY_BITS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, capability, 0, 0, 0) != 0:
        sys.exit(f"prctl: {os.strerror(ctypes.get_errno())}")
os.execv(sys.argv[1], sys.argv[1:])
"""

LINES = "".join(f"line {i:05d} of a stored result\n" for i in range(3000))


def as_plain_user(command: list[str]) -> list[str]:
    return [sys.executable, "-c", BOUND_BY_BITS, *command] if os.geteuid() == 0 else command


def offload(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(as_plain_user([sys.executable, "-m", "offload", "--url", url, *args]),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def frozen():
    """Call with a folder to make it and its files read-only; they are made writable again after the test."""
    made: list = []

    def freeze(folder, *, files: int = 0o444, itself: int = 0o555) -> None:
        for path in folder.iterdir():
            os.chmod(path, files)
        os.chmod(folder, itself)
        made.append(folder)
        probe = subprocess.run(as_plain_user([sys.executable, "-c", f"open({str(folder / 'store.db')!r}, 'ab')"]),
                               capture_output=True, text=True)
        if probe.returncode == 0 or "prctl" in probe.stderr:
            pytest.skip("the permission bits cannot be made to bind this user here "
                        f"(root that cannot drop CAP_DAC_OVERRIDE?): {probe.stderr.strip()[-200:]}")

    yield freeze
    for folder in made:
        os.chmod(folder, 0o700)
        for path in folder.iterdir():
            os.chmod(path, 0o600)


def stored(folder) -> tuple[str, str]:
    url = f"sqlite:///{folder / 'store.db'}"
    with Offloader(url) as off:
        ref = off.process("read_file", LINES)
    return url, ref.artifact_id


@pytest.mark.parametrize("folder_mode", [0o555, 0o755], ids=["read-only-folder", "writable-folder"])
def test_a_read_only_store_is_read_and_a_write_says_it_is_read_only(tmp_path, frozen, folder_mode):
    folder = tmp_path / "store"
    folder.mkdir()
    url, artifact_id = stored(folder)
    before = sorted(os.listdir(folder))
    frozen(folder, itself=folder_mode)

    listed = offload(url, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [item["id"] for item in json.loads(listed.stdout)["items"]] == [artifact_id]
    cat = offload(url, "cat", artifact_id)
    assert cat.returncode == 0 and cat.stdout == LINES, cat.stderr
    for command in (["show", artifact_id], ["stats"], ["slice", artifact_id, "--offset", "-1", "--json"]):
        shown = offload(url, *command)
        assert shown.returncode == 0, (command, shown.stderr)
    got = subprocess.run(as_plain_user([sys.executable, "-c", textwrap.dedent(f"""
        from offload import Offloader
        with Offloader({url!r}) as off:
            print(off.get({artifact_id!r})["bytes"], off.fetch_slice({artifact_id!r}, offset=2, limit=1)["content"])
    """)]), capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stdout == f"{len(LINES)} line 00002 of a stored result\n", got.stderr

    (tmp_path / "more.txt").write_text(LINES)
    for command in (["put", str(tmp_path / "more.txt"), "--tool", "t"], ["pin", artifact_id], ["rm", artifact_id]):
        refused = offload(url, *command)
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert f"{folder / 'store.db'} is read-only" in refused.stderr, (command, refused.stderr)
    assert sorted(os.listdir(folder)) == before  # nothing written beside it either (no -wal, no -shm)


def test_a_read_only_store_with_a_live_log_is_read_with_what_the_log_holds(tmp_path, frozen):
    """A writer still has it open (its -wal holds a commit not yet in the file): read through the log,
    never as if the file alone were the store."""
    folder = tmp_path / "store"
    folder.mkdir()
    url, first = stored(folder)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from offload import Offloader
        off = Offloader({url!r})
        print(off.process("read_file", "another " + {LINES!r}).artifact_id, flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        second = holder.stdout.readline().strip()
        assert (folder / "store.db-wal").exists()
        frozen(folder, files=0o400, itself=0o555)
        os.chmod(folder / "store.db-shm", 0o600)  # a reader needs the writer's shared memory
        listed = offload(url, "ls", "--json")
    finally:
        holder.communicate("", timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert sorted(item["id"] for item in json.loads(listed.stdout)["items"]) == sorted([first, second])


def older_schema(folder) -> None:
    import sqlite3

    from offload.store.engines import alembic_config, head_revision
    from alembic.script import ScriptDirectory

    previous = ScriptDirectory.from_config(alembic_config()).get_revision(head_revision()).down_revision
    with sqlite3.connect(folder / "store.db") as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (previous,))
    db.close()


def log_without_its_shared_memory(folder) -> None:
    """A writer that died with a commit only its -wal holds; its -shm file is gone."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from offload import Offloader
        Offloader({str(folder / 'store.db')!r}).process("read_file", "more " + {LINES!r})
        os._exit(0)
    """)], check=True)
    os.remove(folder / "store.db-shm")


@pytest.mark.parametrize("make, why", [(older_schema, "cannot be migrated to this offload's schema"),
                                       (log_without_its_shared_memory, "needs a -shm file")],
                         ids=["older-schema", "log-without-shm"])
def test_a_read_only_store_that_cannot_be_read_as_it_is_says_why_and_what_to_do(tmp_path, frozen, make, why):
    folder = tmp_path / "store"
    folder.mkdir()
    url, _ = stored(folder)
    make(folder)
    before = {name: (folder / name).read_bytes() for name in os.listdir(folder)}
    frozen(folder)
    listed = offload(url, "ls")
    assert listed.returncode == 2, listed.stdout
    assert f"{folder / 'store.db'} is read-only" in listed.stderr and why in listed.stderr, listed.stderr
    assert "point --url (or OFFLOAD_URL) at the copy" in listed.stderr
    assert {name: (folder / name).read_bytes() for name in os.listdir(folder)} == before
