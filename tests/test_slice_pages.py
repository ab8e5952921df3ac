"""Following fetch_slice's `next` reads every unit exactly once: byte pages of text never split a
character, a cut line or item is read to its end and paging returns to lines or items, limit=0 is
refused, and the CLI's next hint is the response's `next`. Real SQLite stores, real tokenizer."""

from __future__ import annotations

import base64
import json
import random
import shlex

import orjson
import pytest
from typer.testing import CliRunner

from offload import Offloader
from offload.cli import app
from offload.errors import InvalidArgument
from offload.store.chunking import CHUNK_SIZE

MULTIBYTE = "aZ \t\né日🎉ü語\u00a0"  # 1-, 2-, 3- and 4-byte characters and newlines


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


def follow(off: Offloader, pages: int = 2_000, **call) -> list[dict]:
    """The pages from `call` on, following next to the end (or for `pages` pages)."""
    got = []
    while call is not None and len(got) < pages:
        got.append(off.fetch_slice(**call))
        call = got[-1]["next"]
    assert call is None or len(got) == pages
    return got


def within_budget(off: Offloader, pages: list[dict], real_count) -> None:
    worst = max(real_count(orjson.dumps(p).decode()) for p in pages)
    assert worst <= off.settings.slice_tokens


def page_bytes(page: dict) -> bytes:
    content = page["content"]
    data = base64.b64decode(content) if page["encoding"] == "base64" else content.encode("utf-8")
    assert len(data) == page["returned"]
    return data


def random_text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(MULTIBYTE) for _ in range(size))


# -- bytes of text --------------------------------------------------------------------------------


def test_byte_pages_of_text_reassemble_the_stored_bytes_exactly(off, real_count):
    rng = random.Random(7)
    # a little more than one chunk, multibyte characters everywhere, so pages and chunks cut near them
    text = random_text(rng, CHUNK_SIZE // 2 + 60_000)
    data = text.encode("utf-8")
    assert len(data) > CHUNK_SIZE
    ref = off.put(data, tool="read")
    pages = follow(off, artifact_id=ref.artifact_id, unit="bytes")
    assert b"".join(page_bytes(p) for p in pages) == data
    assert all(p["encoding"] == "utf-8" and "\ufffd" not in p["content"] for p in pages)
    assert [p["offset"] for p in pages[1:]] == [p["next_offset"] for p in pages[:-1]]
    within_budget(off, pages, real_count)
    # small random limits from random offsets, around the chunk boundary too: every page is whole characters
    for start in [rng.randrange(len(data)) for _ in range(20)] + [CHUNK_SIZE - 2, CHUNK_SIZE + 1]:
        page = off.fetch_slice(ref.artifact_id, unit="bytes", offset=start, limit=rng.randrange(1, 9))
        assert page["offset"] <= start < page["offset"] + 4
        assert data[page["offset"] : page["offset"] + page["returned"]] == page["content"].encode("utf-8")
    across = follow(off, 60, artifact_id=ref.artifact_id, unit="bytes", offset=CHUNK_SIZE - 50, limit=5)
    start = across[0]["offset"]
    assert b"".join(page_bytes(p) for p in across) == data[start : across[-1]["next_offset"]]


def test_an_offset_inside_a_character_starts_the_page_at_its_first_byte(off):
    data = ("é日🎉x\n" * 3000).encode()
    ref = off.put(data, tool="read")
    page = off.fetch_slice(ref.artifact_id, unit="bytes", offset=1, limit=10)
    assert (page["offset"], page["returned"], page["content"]) == (0, 10, "é日🎉x")
    assert "byte 1 is inside a character" in page["note"] and page["next"]["offset"] == 10
    # a limit smaller than the character there still makes progress: one whole character
    emoji = data.index("🎉".encode())
    page = off.fetch_slice(ref.artifact_id, unit="bytes", offset=emoji, limit=1)
    assert (page["content"], page["returned"], page["next_offset"]) == ("🎉", 4, emoji + 4)


def test_bytes_that_are_not_utf8_come_back_base64_and_nothing_is_replaced(off, real_count):
    rng = random.Random(11)
    parts = []
    for _ in range(400):
        parts.append(random_text(rng, rng.randrange(1, 300)).encode())
        parts.append(rng.choice([b"\xff", b"\xc3", b"\xe6\x97", b"\x80\x80", b"\xf0\x9f\x8e"]))
    data = b"".join(parts)
    ref = off.put(data, tool="read")
    assert ref.kind != "binary"
    pages = follow(off, artifact_id=ref.artifact_id, unit="bytes", limit=500)
    assert b"".join(page_bytes(p) for p in pages) == data
    assert {p["encoding"] for p in pages} == {"utf-8", "base64"}
    assert all("\ufffd" not in p["content"] for p in pages if p["encoding"] == "utf-8")
    assert all("not valid UTF-8" in p["note"] for p in pages if p["encoding"] == "base64")
    within_budget(off, pages, real_count)


# -- limit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["lines", "chars", "bytes", "items"])
def test_limit_zero_is_an_error_naming_the_argument(off, unit):
    ref = off.put(orjson.dumps([{"i": i} for i in range(100)]), tool="api")
    with pytest.raises(InvalidArgument, match="limit must be at least 1; omit it"):
        off.fetch_slice(ref.artifact_id, unit=unit, offset=10, limit=0)


# -- a cut line, a cut item --------------------------------------------------------------------------


def reassemble_lines(pages: list[dict]) -> str:
    """The text as following next read it: whole lines end with their newline, a cut line's head and
    its rest in chars are joined, and the newline after that rest is implied by the return to lines."""
    out = []
    for p in pages:
        if p["unit"] == "lines":
            out.append(p["content"] + ("\n" if p["returned"] else ""))
        else:
            out.append(p["content"] + ("\n" if p["next"] and p["next"]["unit"] == "lines" else ""))
    return "".join(out)


def test_a_line_longer_than_a_chunk_is_counted_exactly_and_paging_returns_to_lines(off, real_count):
    long_line = "".join(f"{i:06d}é" for i in range(170_000))  # 1.36 MB: its end lies in the second chunk
    text = "short\n" + long_line + "\nnext line\nthird\n"
    ref = off.put(text.encode(), tool="read")
    first = off.fetch_slice(ref.artifact_id, offset=1)
    assert first["returned"] == 0 and long_line.startswith(first["content"])
    assert f"line 1 has {len(long_line):,} characters" in first["cut"]
    assert first["next"]["unit"] == "chars"
    assert first["next"]["offset"] + first["next"]["limit"] == len("short\n") + len(long_line)
    pages = follow(off, artifact_id=ref.artifact_id)
    assert [p["unit"] for p in pages][-1] == "lines" and "chars" in {p["unit"] for p in pages}
    assert pages[-1]["content"] == "next line\nthird" and pages[-1]["offset"] == 2
    assert reassemble_lines(pages) == text
    within_budget(off, pages, real_count)


def test_chars_pages_of_random_text_reassemble_exactly(off):
    rng = random.Random(3)
    text = random_text(rng, 300_000) + "\n"
    ref = off.put(text.encode(), tool="read")
    pages = follow(off, artifact_id=ref.artifact_id, unit="chars", limit=997)
    assert reassemble_lines(pages) == text


def reassemble_items(pages: list[dict]) -> list:
    items, pending = [], None
    for p in pages:
        if p["unit"] == "items" and "cut" not in p:
            items.extend(json.loads(p["content"]))
        else:
            pending = p["content"] if p["unit"] == "items" else pending + p["content"]
            if p["next"] is None or p["next"]["unit"] == "items":
                items.append(json.loads(pending))
    return items


@pytest.mark.parametrize("layout", ["compact", "pretty", "ndjson"])
def test_an_item_bigger_than_a_page_is_read_to_its_end_then_paging_returns_to_items(off, real_count, layout):
    array = [{"id": i, "blob": "é日x🎉" * 8_000} if i in (3, 9) else {"id": i} for i in range(12)]
    data = {"compact": orjson.dumps(array), "pretty": json.dumps(array, indent=2, ensure_ascii=False).encode(),
            "ndjson": b"\n".join(orjson.dumps(x) for x in array) + b"\n"}[layout]
    ref = off.put(data, tool="api")
    cut = off.fetch_slice(ref.artifact_id, unit="items", offset=3)
    assert cut["returned"] == 0 and cut["next"]["unit"] == "bytes"
    rest, call = [], cut["next"]
    while call["unit"] == "bytes":
        rest.append(off.fetch_slice(**call))
        call = rest[-1]["next"]
    assert call == {"artifact_id": ref.artifact_id, "unit": "items", "offset": 4}
    item = (cut["content"] + "".join(p["content"] for p in rest)).strip()
    assert json.loads(item) == array[3]
    assert f"item 3 is {len(item.encode()):,} bytes of JSON" in cut["cut"]  # exact, as stored
    pages = follow(off, artifact_id=ref.artifact_id, unit="items")
    assert reassemble_items(pages) == array
    back = [p["next"] for p in pages if p["unit"] == "bytes" and p["next"] and p["next"]["unit"] == "items"]
    assert [n["offset"] for n in back] == [4, 10]
    within_budget(off, pages, real_count)


def test_items_of_a_binary_artifact_advise_bytes(off):
    ref = off.put(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 400, tool="screenshot")
    with pytest.raises(InvalidArgument, match='unit="bytes"') as error:
        off.fetch_slice(ref.artifact_id, unit="items")
    assert "lines" not in str(error.value)


# -- the command line --------------------------------------------------------------------------------

runner = CliRunner()


def cli(url: str, *args: str):
    return runner.invoke(app, ["--url", url, *args])


def test_cli_slice_next_hint_is_the_next_call_path_included(sqlite_url, tmp_path):
    doc = tmp_path / "two.json"
    doc.write_bytes(orjson.dumps({"events": [{"e": i} for i in range(300)], "users": [{"u": i} for i in range(100)]}))
    artifact_id = json.loads(cli(sqlite_url, "put", str(doc), "--tool", "api", "--json").stdout)["artifact_id"]
    first = cli(sqlite_url, "slice", artifact_id, "--unit", "items", "--path", "users", "--limit", "2")
    assert first.exit_code == 0 and json.loads(first.stdout) == [{"u": 0}, {"u": 1}]
    hint = first.stderr.split("— next: ", 1)[1].strip()
    second = cli(sqlite_url, *shlex.split(hint)[1:])  # the hint, as a shell would run it
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout) == [{"u": 2}, {"u": 3}] and "of 100" in second.stderr


def test_cli_rerun_of_an_unknown_extract_says_so(sqlite_url):
    result = cli(sqlite_url, "rerun", "--extract", "nope")
    assert result.exit_code == 1 and "No extract 'nope'" in result.stderr


def test_cli_pin_checks_every_id_before_pinning_any(sqlite_url):
    with Offloader(sqlite_url) as off:
        good = off.put("x\n" * 100_000, tool="read").artifact_id
    result = cli(sqlite_url, "pin", good, "art_unknown00000000")
    assert result.exit_code == 1
    with Offloader(sqlite_url) as off:
        assert not off.get(good)["pinned"]
    assert cli(sqlite_url, "pin", good).exit_code == 0
    assert cli(sqlite_url, "unpin", good, "art_unknown00000000").exit_code == 1
    with Offloader(sqlite_url) as off:
        assert off.get(good)["pinned"]
