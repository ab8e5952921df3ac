"""Detection of every kind, and the bad inputs that must never crash a preview nor make it lie."""

from __future__ import annotations

import codecs
import gc
import gzip
import io
import json
import os
import re
import sqlite3
import struct
import sys
import zipfile
import zlib

import jmespath
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload.content import Detected, build_preview, detect, gc_paused, parse_json, pause_gc, resume_gc

from counting import BUDGETS, COUNTERS, crude, o200k  # noqa: E402,F401


def real_png(width: int = 640, height: int = 480) -> bytes:
    """A valid PNG header (signature and IHDR chunk with its CRC)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


# -- kinds ------------------------------------------------------------------------------------------


def test_json_document():
    found = detect(b'{"items": [{"id": 1}, {"id": 2}]}')
    assert (found.kind, found.content_type) == ("json", "application/json")
    assert found.doc == {"items": [{"id": 1}, {"id": 2}]}
    assert found.notes == []


def test_ndjson_rows_with_a_blank_line_and_crlf():
    found = detect(b'{"a": 1}\r\n{"a": 2}\r\n\r\n{"a": 3}\r\n')
    assert (found.kind, found.content_type) == ("ndjson", "application/x-ndjson")
    assert found.doc == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_ndjson_with_a_broken_row_is_text_with_the_line_named():
    found = detect(b'{"a": 1}\n{"a": 2}\n{"a": \n')
    assert found.kind == "text"
    assert any(note.startswith("looks like NDJSON but line 2 does not parse") for note in found.notes)


@pytest.mark.parametrize("delimiter, content_type", [(",", "text/csv"), ("\t", "text/tab-separated-values")])
def test_csv_and_tsv(delimiter, content_type):
    rows = [["id", "name", "size"]] + [[str(i), f"file {i}.py", str(i * 10)] for i in range(50)]
    found = detect("\n".join(delimiter.join(row) for row in rows).encode())
    assert (found.kind, found.content_type, found.delimiter) == ("csv", content_type, delimiter)


def test_prose_with_commas_is_not_csv():
    prose = (b"Well, this is prose, with commas here and there.\n"
             b"Another line, but only one comma.\nNo comma at all on this one\n") * 20
    assert detect(prose).kind == "text"


def test_grep_by_content_and_by_tool_name():
    numbered = b"".join(b"src/mod%d.py:%d:    def f%d(self):\n" % (i % 7, i, i) for i in range(100))
    assert detect(numbered).kind == "grep"
    plain = b"".join(b"src/mod%d.py:    return %d\n" % (i % 7, i) for i in range(100))
    assert detect(plain).kind == "text"  # without line numbers only a grep tool's word counts
    assert detect(plain, tool="grep").kind == "grep"
    assert detect(plain, tool="mcp__files__search_code").kind == "grep"


def test_timestamped_logs_and_access_logs_are_not_grep():
    log = b"".join(b"2024-01-02 12:%02d:%02d INFO started worker %d\n" % (i % 60, i % 60, i) for i in range(100))
    access = b"".join(b'10.0.0.%d - - [02/Jan/2024:12:00:%02d +0000] "GET / HTTP/1.1" 200 512\n' % (i, i % 60)
                      for i in range(100))
    clock = b"".join(b"12:00:%02d step %d done\n" % (i % 60, i) for i in range(100))
    assert {detect(log).kind, detect(access).kind, detect(clock).kind} == {"text"}


def test_html_and_xml_are_text_with_their_types():
    assert detect(b"<!DOCTYPE html><html><body>x</body></html>").content_type == "text/html"
    assert detect(b'<?xml version="1.0"?><a/>').content_type == "application/xml"


def test_log_lines_starting_with_a_bracket_are_text_without_a_json_note():
    log = b"".join(b"[2024-01-02 12:00:%02d] worker %d ready\n" % (i % 60, i) for i in range(50))
    found = detect(log)
    assert found.kind == "text" and found.notes == []


# -- binaries -----------------------------------------------------------------------------------------


def test_png_header_then_3_mb_of_random_bytes():
    data = real_png(1024, 768) + os.urandom(3_000_000)
    found = detect(data)
    assert (found.kind, found.content_type, found.text) == ("binary", "image/png", None)
    preview = build_preview(found, data, 100, o200k)
    assert preview.extra["width"] == 1024 and preview.extra["height"] == 768
    assert preview.extra["bytes"] == len(data)
    assert "1,024×768" in preview.text and "3,000,0" in preview.text
    assert preview.truncated and preview.omitted == f"all {len(data):,} bytes of binary content not shown"


def test_random_bytes_are_binary_and_no_byte_is_shown():
    data = os.urandom(3_000_000)
    found = detect(data)
    assert (found.kind, found.content_type) == ("binary", "application/octet-stream")
    preview = build_preview(found, data, 300, o200k)
    assert preview.text.startswith("[binary data:") and preview.text.isprintable()
    assert preview.shape is None and preview.hints == []


def test_real_binary_formats(tmp_path):
    database = tmp_path / "db.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("create table t (x)")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("a.txt", "hello")
    samples = {
        "application/gzip": gzip.compress(b"hello" * 100),
        "application/zip": archive.getvalue(),
        "application/vnd.sqlite3": database.read_bytes(),
        "application/pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n",
        "image/gif": b"GIF89a\x10\x00\x20\x00" + bytes(100),
        "application/wasm": b"\x00asm\x01\x00\x00\x00",
    }
    with open(sys.executable, "rb") as executable:
        head = executable.read(4096)
    if head.startswith(b"\x7fELF"):
        samples["application/x-executable"] = head
    for content_type, data in samples.items():
        found = detect(data)
        assert (found.kind, found.content_type) == ("binary", content_type), content_type
        assert build_preview(found, data, 100, o200k).text.startswith("[binary data: ")
    assert build_preview(detect(samples["image/gif"]), samples["image/gif"], 100, o200k).extra["width"] == 16
    assert build_preview(detect(samples["application/pdf"]), samples["application/pdf"], 100,
                         o200k).extra["version"] == "1.7"


# -- bad inputs ---------------------------------------------------------------------------------------


def test_empty_bytes():
    found = detect(b"")
    assert (found.kind, found.text) == ("text", "")
    preview = build_preview(found, b"", 100, o200k)
    assert preview.text == "[empty: 0 bytes]" and not preview.truncated and preview.omitted == ""


def _replaced_bytes(data: bytes) -> int:
    """The truth, counted by a Python error handler (one call per invalid sequence)."""
    replaced = 0

    def handler(error: UnicodeDecodeError):
        nonlocal replaced
        replaced += error.end - error.start
        return "\ufffd", error.end

    codecs.register_error("test_count_replaced", handler)
    data.decode("utf-8", "test_count_replaced")
    return replaced


def test_invalid_utf8_is_text_with_the_exact_count_of_replaced_bytes():
    data = ("ligne déjà vue\n" * 2000).encode() + b"\xff\xfe bad \xe2\x82 cut\n" + "fin \ufffd ok\n".encode() * 2000
    found = detect(data)
    assert found.kind == "text"
    expected = _replaced_bytes(data)
    assert expected == 4
    assert f"invalid UTF-8: {expected:,} bytes replaced by U+FFFD in the preview" in found.notes[0]
    for count in (o200k, crude):
        preview = build_preview(found, data, 300, count)
        assert count(preview.text) <= 300


def test_json_nested_20000_deep_is_text_with_a_note_and_the_recursion_limit_is_untouched():
    limit = sys.getrecursionlimit()
    data = b"[" * 20_000 + b"]" * 20_000
    found = detect(data)
    assert found.kind == "text" and found.doc is None
    assert found.notes == ["JSON nested deeper than 1,024 levels: not parsed for queries"]
    for budget in BUDGETS:
        preview = build_preview(found, data, budget, o200k)
        assert o200k(preview.text) <= budget and preview.truncated
        assert preview.text.startswith("[[[") and preview.text.endswith("]]]")
    nested_objects = b'{"a":' * 20_000 + b"1" + b"}" * 20_000
    assert detect(nested_objects).kind == "text"
    with_nan = b'{"x": NaN, "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}"  # the json.loads fallback path
    assert "nested deeper" in detect(with_nan).notes[0]
    assert sys.getrecursionlimit() == limit


def test_truncated_json_is_text_with_the_reason_and_the_byte():
    data = orjson.dumps([{"id": i, "name": f"n{i}"} for i in range(20_000)])[:300_000]
    found = detect(data)
    assert found.kind == "text" and found.doc is None
    assert found.notes == ["looks like JSON but does not parse: unexpected end of data at byte 300,000"]
    preview = build_preview(found, data, 300, o200k)
    assert o200k(preview.text) <= 300
    assert preview.text.startswith('[{"id":0,') and preview.text.endswith(data[-20:].decode())


def test_nan_and_infinity_stay_json_and_are_shown_as_such():
    data = b'{"values": [1.5, NaN, Infinity, -Infinity], "rows": [' + b",".join(
        b'{"x": %d, "score": NaN}' % i for i in range(3000)) + b"]}"
    found = detect(data)
    assert found.kind == "json"
    assert found.doc["values"][2] == float("inf")
    preview = build_preview(found, data, 300, o200k)
    assert '"score": NaN' in preview.text
    assert o200k(preview.text) <= 300


def test_numbers_beyond_a_double_stay_json_and_are_shown_as_written():
    # orjson refuses 1e400 ("number is infinity when parsed as double") and the document became text,
    # with no note: JMESPath, SQL and item pages all refused it
    data = b'{"rows": [' + b",".join(b'{"x": 1e400, "y": -2E+999, "i": %d}' % i for i in range(3000)) + b"]}"
    found = detect(data)
    assert found.kind == "json" and found.notes == []
    assert found.doc["rows"][7] == {"x": float("inf"), "y": float("-inf"), "i": 7}
    preview = build_preview(found, data, 300, o200k)
    assert '{"x": Infinity, "y": -Infinity, "i": 0}' in preview.text and o200k(preview.text) <= 300  # as read


def test_only_newlines():
    data = b"\n" * 1_000_000
    found = detect(data)
    assert found.kind == "text"
    preview = build_preview(found, data, 100, o200k)
    assert preview.text == "[only whitespace: 1,000,000 lines, 1,000,000 bytes]"
    assert preview.extra["lines"] == 1_000_000 and preview.truncated


def test_a_short_whitespace_only_text_is_shown_whole_as_a_literal(sqlite_url):
    """A 9-byte stderr of blank lines was "[only whitespace …]", cut, so it was stored as an artifact of
    its own; up to 64 bytes it is shown whole, as a JSON string, and travels in the reference."""
    from offload import Offloader

    data = b"  \n\n \t \n "
    preview = build_preview(detect(data), data, 100, o200k)
    assert preview.text == r'[only whitespace, 4 lines, 9 bytes: "  \n\n \t \n "]' and not preview.truncated
    wide = b" " * 65
    assert build_preview(detect(wide), wide, 100, o200k).truncated
    with Offloader(sqlite_url) as off:
        out = "\n".join(f"line {i} of output with words" for i in range(5000))
        ref = off.process("shell", {"stdout": out, "stderr": data.decode(), "exit_code": 0})
        assert ref.stderr_artifact_id is None and not ref.stderr_truncated
        assert r'stderr (9 bytes):' in str(ref) and [row["tool"] for row in off.list()[0]] == ["shell"]


def test_crlf_lines_are_shown_without_cr_and_counted_exactly():
    lines = [f"row {i}: value={i * 3}" for i in range(10_000)]
    data = "\r\n".join(lines).encode() + b"\r\n"
    found = detect(data)
    assert any("CRLF" in note for note in found.notes)
    preview = build_preview(found, data, 300, o200k)
    assert "\r" not in preview.text
    found_range = re.search(r"lines ([\d,]+)–([\d,]+) \(", preview.omitted).groups()
    first, last = (int(number.replace(",", "")) for number in found_range)
    omitted_bytes = sum(len(line) + 2 for line in lines[first:last + 1])
    assert f"({last - first + 1:,} lines, {omitted_bytes:,} bytes) not shown" in preview.omitted
    assert preview.text.splitlines()[:first] == lines[:first]


def test_a_single_5_mb_line_is_cut_by_characters_with_exact_counts():
    line = "".join(f"token{i} " for i in range(700_000))[:5_000_000]
    data = line.encode()
    found = detect(data)
    for budget in BUDGETS:
        preview = build_preview(found, data, budget, o200k)
        assert o200k(preview.text) <= budget
        head, hidden, tail = re.fullmatch(r"(.*)…\[\+([\d,]+) chars\]…(.*)", preview.text, re.S).groups()
        hidden = int(hidden.replace(",", ""))
        assert line.startswith(head) and line.endswith(tail)
        assert len(head) + hidden + len(tail) == len(line)
        assert f"({hidden:,} chars) not shown" in preview.omitted


def test_a_30_mb_single_line_json_gets_its_item_count_within_budget():
    # how fast: benchmarks/ingest.py (JSON of 1-100 MB on one line), as a ratio against a parse
    rows = [{"id": i, "path": f"/srv/data/{i % 977}/part-{i}.parquet", "bytes": i * 37,
             "state": ("ok", "ok", "ok", "stale")[i % 4]} for i in range(360_000)]
    data = orjson.dumps({"files": rows})
    assert len(data) > 30_000_000 and b"\n" not in data
    found = detect(data)
    preview = build_preview(found, data, 800, o200k)
    assert found.kind == "json" and preview.extra["items"] == 360_000
    assert o200k(preview.text) <= 800


# -- parse_json -----------------------------------------------------------------------------------------


def test_parse_json_errors_name_the_byte_and_gc_is_restored():
    assert gc.isenabled()
    cut = '{"é": [1, 2,'.encode()
    with pytest.raises(ValueError, match=f"unexpected end of data at byte {len(cut)}$"):  # bytes, not chars
        parse_json(cut)
    with pytest.raises(ValueError, match="nested deeper than 1,024 levels"):
        parse_json(b"[" * 5000 + b"]" * 5000)
    assert parse_json(b"\xef\xbb\xbf[NaN]")[0] != parse_json(b"[NaN]")[0]  # NaN, through the BOM
    assert gc.isenabled()


def test_the_collector_comes_back_when_the_last_pause_ends_and_only_if_it_was_on():
    assert gc.isenabled()
    pause_gc()  # another thread's pause (a worker freeing a parsed document)
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # leaving first must not turn it on under the other
    resume_gc()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_detected_defaults():
    found = Detected("text", "text/plain", "x")
    assert found.doc is None and found.notes == [] and found.delimiter is None


# -- any input ----------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=200),
    lambda children: st.lists(children, max_size=30) | st.dictionaries(st.text(max_size=20), children, max_size=20),
    max_leaves=80,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=_json_values, budget=st.sampled_from([7, 50, 100, 300, 2000]), tool=st.sampled_from([None, "grep"]))
def test_any_json_value_previews_within_budget_with_working_hints(doc, budget, tool):
    data = json.dumps(doc).encode()
    found = detect(data, tool)
    for count in (o200k, crude):
        preview = build_preview(found, data, budget, count)
        assert count(preview.text) <= budget
        json.dumps(preview.shape)
        json.dumps(preview.extra)
        for hint in preview.hints:
            assert jmespath.search(hint, found.doc) not in (None, [], {}, "")


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=2000) | st.text(alphabet="ab:,\t\n\r\"{}[]0123456789 ./-é", max_size=2000).map(str.encode),
       budget=st.sampled_from([0, 10, 100, 300]))
def test_any_bytes_preview_within_budget(data, budget):
    preview = build_preview(detect(data, "rg"), data, budget, o200k)
    assert o200k(preview.text) <= budget
