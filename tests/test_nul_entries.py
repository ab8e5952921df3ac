"""NUL-separated output (`find -print0`, `git ls-files -z`) is a list of entries, not one long line: the
reference counts and offers entries, fetch_slice pages them whole as JSON strings, and grep matches them
one by one, numbered as those pages number them — on every backend, with names that hold spaces, a
newline, bytes that are not UTF-8, or more than a page."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from counting import o200k

from offload import InvalidArgument, Offloader

ODD_NAMES = [b"with space", b"trailing space ", b"new\nline", b"not utf8 \xff\xfe", b"caf\xc3\xa9"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A real directory whose file names a find -print0 lists, odd ones included."""
    root = tmp_path / "tree"
    for i in range(60):
        sub = root / f"pkg{i:02d}" / "module"
        sub.mkdir(parents=True)
        for j in range(8):
            (sub / f"file_{j}.py").write_text("x")
    for name in ODD_NAMES:
        (Path(os.fsdecode(bytes(root) + b"/" + name))).write_text("x")
    (Path(os.fsdecode(bytes(root) + b"/" + b"L" * 250))).write_text("x")  # near NAME_MAX: a long entry
    return root


def _find(root: Path) -> bytes:
    return subprocess.run(["find", str(root), "-print0"], capture_output=True, check=True).stdout


def _all_pages(off: Offloader, call: dict) -> list[dict]:
    pages = []
    while call:
        pages.append(off.fetch_slice(**call))
        call = pages[-1]["next"]
    return pages


def test_find_print0_becomes_entries_the_model_can_page_and_grep(off, tree):
    data = _find(tree)
    names = data.split(b"\x00")[:-1]
    ref = off.process("shell", data)
    assert ref.items == len(names) and ref.to_dict()["items"] == len(names)
    text = ref.render()
    assert f"{len(names):,} entries" in text
    assert f'fetch_slice(artifact_id="{ref.artifact_id}", unit="items", offset=0, limit=100) pages the entries' in text
    assert "pages lines" not in text  # the whole output is one line: line pages would be cut chars
    assert o200k(text) <= 800

    pages = _all_pages(off, {"artifact_id": ref.artifact_id, "unit": "items", "offset": 0, "limit": 100})
    got = [entry for page in pages for entry in json.loads(page["content"])]
    assert len(got) == len(names) and all(page["total"] == len(names) for page in pages)
    for name, entry in zip(names, got):  # whole, spaces and newline kept; only bad UTF-8 replaced
        assert entry == name.decode("utf-8", "replace")
    bad = [i for i, name in enumerate(names) if b"\xff" in name]
    noted = [page.get("note", "") for page in pages if page.get("note")]
    assert len(noted) == 1 and f"entry {bad[0]:,} holds bytes that are not valid UTF-8" in noted[0]
    assert off.fetch_slice(ref.artifact_id, unit="bytes", offset=sum(len(n) + 1 for n in names[: bad[0]]),
                           limit=len(names[bad[0]]))["encoding"] in ("utf-8", "base64")

    newline = next(i for i, name in enumerate(names) if name.endswith(b"new\nline"))
    found = off.query_artifact(ref.artifact_id, grep=r"new.line$")
    assert found["count"] == 1 and found["result"] == [f"{newline}: {names[newline].decode()}".replace("\n", "\u2424")]
    assert "NUL-separated entries" in found["note"]
    from offload.tools.schemas import render_query

    assert found["note"] in render_query(found)  # the text form the model reads says it too
    spaced = off.query_artifact(ref.artifact_id, grep="space $")
    assert spaced["result"] == [f"{names.index(bytes(tree) + b'/trailing space ')}: {os.fsdecode(tree)}/trailing space "]
    py = off.query_artifact(ref.artifact_id, grep=r"file_3\.py$", limit=1000)
    assert py["count"] == 60 == sum(1 for n in names if n.endswith(b"file_3.py"))
    for line in py["result"]:  # each number is the entry's item offset
        number, name = line.split(": ", 1)
        assert json.loads(off.fetch_slice(ref.artifact_id, unit="items", offset=int(number), limit=1)["content"]) == [name]


def test_the_preview_counts_entries_and_bytes_exactly_with_a_newline_inside_one(sqlite_url, tree):
    # sorted (`sort -z`, as a pipeline would), the odd names come first: into the shown head
    data = subprocess.run(["sort", "-z"], input=_find(tree), capture_output=True, check=True).stdout
    names = data.split(b"\x00")[:-1]
    ref = Offloader(sqlite_url).process("find", data)
    shown = ref.preview.splitlines()
    assert f"{os.fsdecode(tree)}/new\u2424line" in shown
    marker = re.search(r"\[([\d,]+) entries omitted: ([\d,]+)–([\d,]+)\]", ref.preview)
    first, last = (int(marker[k].replace(",", "")) for k in (2, 3))
    for line, name in zip(shown[:first], names[:first], strict=True):
        name = name.decode("utf-8", "replace").replace("\n", "\u2424")
        cut = re.fullmatch(r"(.*)…\[\+([\d,]+) chars\]", line)  # a long entry's head, the rest counted
        assert line == name or (cut and name.startswith(cut[1]) and len(cut[1]) + int(cut[2]) == len(name))
    said = re.search(r"entries ([\d,]+)–([\d,]+) \(([\d,]+) entries, ([\d,]+) bytes\) not shown", ref.omitted)
    assert (int(said[1]), int(said[2].replace(",", ""))) == (first, last)
    assert int(said[4].replace(",", "")) == sum(len(n) + 1 for n in names[first : last + 1])  # names and NULs


def test_an_entry_larger_than_a_page_is_read_whole_through_the_cut_then_entries_go_on(off):
    long_name = ("/very/deep/" + "segment-%04d/" * 600 % tuple(range(600)) + "leaf.txt").encode()
    data = b"\x00".join([b"./a", long_name, b"./b"]) + b"\x00"
    ref = off.put(data, tool="shell")  # small enough to pass through: stored as `offload put` does
    assert ref.items == 3
    pages = _all_pages(off, {"artifact_id": ref.artifact_id, "unit": "items", "offset": 1})
    assert "entry 1 is" in pages[0]["cut"] and pages[0]["next"]["unit"] == "bytes"
    assert "".join(page["content"] for page in pages[:-1]).encode() == long_name
    assert pages[-1]["unit"] == "items" and json.loads(pages[-1]["content"]) == ["./b"]


def test_entry_paging_refuses_a_path_and_text_without_entries_refuses_items(off):
    ref = off.process("shell", b"\x00".join(b"./file%d" % i for i in range(3000)) + b"\x00")
    with pytest.raises(InvalidArgument, match="path does not apply to entries"):
        off.fetch_slice(ref.artifact_id, unit="items", path="data")
    log = ("2024-01-01 boot\x00\n" + "\n".join(f"line {i} of a log" for i in range(3000))).encode()
    plain = off.process("shell", log)  # one stray NUL: lines, not entries
    assert plain.items is None and 'unit="items"' not in plain.render()
    with pytest.raises(InvalidArgument, match='NUL-separated entries .* is text without them. Use unit="lines"'):
        off.fetch_slice(plain.artifact_id, unit="items")
    grep = off.query_artifact(plain.artifact_id, grep="line 2999 ")
    assert grep["result"] == ["3000: line 2999 of a log"]  # line 0 is the boot line and "note" not in grep
    assert off.fetch_slice(ref.artifact_id, unit="bytes", limit=20)["content"] == "./file0\x00./file1\x00./fi"


def test_git_ls_files_z_from_a_real_repository(sqlite_url, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for i in range(400):
        (repo / f"src_{i:03d}.txt").write_text(str(i))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    data = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    off = Offloader(sqlite_url)
    ref = off.put(data, tool="shell")
    assert ref.items == 400 and b"".join(off.iter_raw(ref.artifact_id)) == data
    last = off.fetch_slice(ref.artifact_id, unit="items", offset=-2)
    assert json.loads(last["content"]) == ["src_398.txt", "src_399.txt"] and last["next"] is None
