"""Decide what a tool result is (JSON, NDJSON, CSV, grep output, text or binary) from its bytes.

The kind chooses the preview and the query tools, so a wrong guess costs the model dearly: detection
is conservative (text is the safe default) and every doubt becomes a note the model reads.
"""

from __future__ import annotations

import csv
import gc
import json
import re
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import orjson

from offload.content.binary import CONTROL_BYTES, sniff_binary
from offload.content.lines import nul_separated
from offload.content.table import (BOX, FRAMED_BY, comment_lines, first_row_is_data, irregular_frame, is_rule,
                                   plausible_header)
from offload.jsontext import may_hold_big_integers
from offload.reference import EMPTY_NOTE
from offload.utf8 import invalid_bytes

__all__ = ["Detected", "InvalidJSON", "detect", "gc_paused", "parse_json", "pause_gc", "resume_gc", "GREP_TOOLS",
           "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 1024  # orjson's fixed limit; json.loads gives up sooner (the recursion limit)
GREP_TOOLS = frozenset(
    {"grep", "rg", "ripgrep", "search_code", "code_search", "search_files", "git_grep", "ag", "ack",
     "find_in_files", "grep_search"}
)

_BOM = b"\xef\xbb\xbf"
_SAMPLE = 65536
_LEADING_WS = re.compile(rb"[ \t\r\n]*")
# grep -n output; without a grep-like tool name the path must look like one (no spaces, a dot or a
# slash) so that timestamps ("12:00:01 …") and access logs are not taken for matches.
# A path is a run of characters that are no space or colon, holding a separator: written as the part
# before its first separator, that separator, then the rest, so that a line of 65,536 dots with no colon
# fails at once (`[^\s:]*[./\\][^\s:]*` tried every dot as the separator: 54 s on that line)
# `git grep -n X REV` writes the revision first ("HEAD:src/a.py:12:…"): a run with no space or colon
# before the path, taken whole or not at all (possessive), as the preview's counts take the two as one path.
_PATH = rb"(?:[A-Za-z]:)?[^\s:./\\]*[./\\][^\s:]*"
_REV = rb"(?:[^\s:]++:)?"
_GREP_N_STRICT = re.compile(_REV + _PATH + rb":\d+[:-]")
_GREP_N = re.compile(rb"(?:[A-Za-z]:)?[^:\n]++(?::(?!\d+[:-])[^:\n]*+)*+:\d+[:-]")  # a path may hold colons
_GREP_CONTEXT = re.compile(_REV + _PATH + rb"?-\d+-|--$")
_GREP_PLAIN = re.compile(_PATH + rb":")
_CSV_DELIMITERS = ("\t", ",", ";", "|", BOX)


class InvalidJSON(ValueError):
    """Why a document does not parse, and at which byte."""

    def __init__(self, reason: str, byte: int = 0, too_deep: bool = False):
        self.reason, self.byte, self.too_deep = reason, byte, too_deep
        super().__init__(reason if too_deep else f"{reason} at byte {byte:,}")


_TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH:,} levels: not parsed for queries"


class Detected:
    """What a result is, with what was learnt finding out (the parsed document, notes for the model).

    `text` is decoded from the bytes on first use, and `lines` counted on first use (or given by a
    caller that already knows): most previews read a head and a tail, and a 100 MB result decoded
    whole is a string of up to 400 MB. `memo` keeps facts about the whole content that a preview
    computes once and reuses while it is fitted to its budget (match counts per file, say).
    """

    def __init__(self, kind: str, content_type: str, text: str | None = None, doc: Any = None,
                 notes: list[str] | None = None, delimiter: str | None = None, *, data: bytes | None = None,
                 lines: int | None = None):
        self.kind = kind  # json | ndjson | csv | grep | text | binary ("shell" is decided by the caller)
        self.content_type = content_type
        self.doc = doc
        self.notes = notes if notes is not None else []
        self.delimiter = delimiter
        self.memo: dict[str, Any] = {}
        self._text, self._data, self._lines = text, data, lines

    @property
    def text(self) -> str | None:
        """The content decoded (invalid bytes replaced by U+FFFD); None for binary content."""
        if self._text is None and self._data is not None:
            self._text = self._data.decode("utf-8", "replace")
        return self._text

    @property
    def lines(self) -> int:
        """Lines as fetch_slice counts them (a last line without a newline counts)."""
        if self._lines is None:
            data = self._data if self._data is not None else (self._text or "").encode("utf-8", "replace")
            self._lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        return self._lines

    def __repr__(self) -> str:
        return f"Detected({self.kind!r}, {self.content_type!r}, notes={self.notes!r})"


def parse_json(data: bytes) -> Any:
    """Parse a JSON document fast (orjson, gc paused), accepting NaN/Infinity like Python's json.

    Raises InvalidJSON (a ValueError) with a message fit for the model: what is wrong and at which byte.
    """
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    # Parsing allocates millions of objects; the cyclic GC would rescan them all repeatedly (1.4 s -> 0.3 s).
    with gc_paused():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            if "depth" in error.msg:
                raise InvalidJSON(_TOO_DEEP, too_deep=True) from None
            first_error = error
        else:
            if not may_hold_big_integers(data):
                return doc
            try:  # orjson reads an integer beyond 64 bits as the nearest float: 10**21 + 1 became 1e21
                return json.loads(data.decode("utf-8"))
            except (RecursionError, ValueError):  # deeper than json.loads goes: orjson's reading it is
                return doc
        # what orjson refuses and Python's json reads: NaN and Infinity, lone surrogate escapes ("\ud83d"),
        # numbers beyond a double (1e400, which Python reads as inf)
        if (b"NaN" in data or b"Infinity" in data or _SURROGATE_ESCAPE.search(data)
                or "infinity when parsed" in first_error.msg):
            try:
                return json.loads(data.decode("utf-8"))
            except RecursionError:
                raise InvalidJSON(_TOO_DEEP, too_deep=True) from None
            except ValueError:
                pass
        raise InvalidJSON(first_error.msg, _byte_offset(data, first_error.pos)) from None


# Bytes up to which `repeated_keys` reads a document again to find keys given twice (a Python parse with a
# hook per object: ~0.1 s a MB).
REPEATS_CHECKED = 16 << 20


def repeated_keys(data: bytes) -> list[str] | None:
    """The keys some object of the JSON document `data` gives more than once (each once, in the order
    met; at most 10), or None when the document is too big (REPEATS_CHECKED) or too deep to read again.

    Every JSON parser keeps one value of such a key, the last; the bytes hold them all. So the parsed
    document can be a small part of its bytes: `{"items": [5,000 items], "items": []}` parses to
    `{"items": []}`, which a preview would show whole, as if that were all there is.
    """
    if len(data) > REPEATS_CHECKED:
        return None
    found: dict[str, None] = {}

    def pairs_of(pairs: list[tuple[str, Any]]) -> dict:
        if len(pairs) > 1:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and len(found) < 10:
                    found[key] = None
                seen.add(key)
        return dict(pairs)

    try:
        json.loads(data.removeprefix(_BOM), object_pairs_hook=pairs_of)
    except (RecursionError, ValueError):
        return None
    return list(found)


_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


# The collector stays off while any thread is inside `gc_paused` or holds a pause (`pause_gc`), and
# comes back on when the last one leaves, if it was on when the first came: a thread leaving first
# must not turn it on while another still holds millions of young containers (a collection would walk
# them all, seconds at 100 MB).
_pauses = 0
_resume = False
_pause_lock = threading.Lock()


def pause_gc() -> None:
    """Hold a pause of the cyclic collector; `resume_gc` gives it back (from any thread)."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1


def resume_gc() -> None:
    global _pauses
    with _pause_lock:
        _pauses -= 1
        if _pauses == 0 and _resume:
            gc.enable()


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a block that builds (or holds) millions of JSON containers.

    A parsed document is acyclic and freed by reference counting; with the collector on, every
    collection walks all its containers again (seconds at 100 MB). Nested and concurrent use is fine.
    """
    pause_gc()
    try:
        yield
    finally:
        resume_gc()


def _byte_offset(data: bytes, char_pos: int) -> int:
    # orjson reports positions in characters; the store and fetch_slice speak bytes.
    if data.isascii():
        return char_pos
    return len(data.decode("utf-8", "replace")[:char_pos].encode("utf-8"))


def detect(data: bytes, tool: str | None = None, *, bad_bytes: int | None = None,
           lines: int | None = None) -> Detected:
    """Classify a result; never raises on any input.

    A caller that has already counted the invalid UTF-8 bytes or the lines (the offloader, while
    chunking) passes them so that they are not counted again.
    """
    if not data:
        return Detected("text", "text/plain", "", notes=[EMPTY_NOTE], lines=0)
    binary = sniff_binary(data)
    if binary is not None:
        return Detected("binary", binary.content_type, None, notes=[f"binary data: {binary.description}"],
                        data=None, lines=lines)

    notes: list[str] = []
    if bad_bytes is None:
        bad_bytes = invalid_bytes(data)
    if bad_bytes and not _mostly_text(data):
        return Detected("binary", "application/octet-stream", None, lines=lines,
                        notes=["binary data: not text (control bytes or invalid UTF-8), format unknown"])
    facts = {"data": data, "lines": lines}  # the text is decoded from them when a preview asks
    if bad_bytes:
        notes.append(f"invalid UTF-8: {bad_bytes:,} byte{'s' if bad_bytes != 1 else ''} replaced by U+FFFD"
                     " in the preview (the stored bytes are unchanged)")
    if data.startswith(_BOM):
        notes.append("starts with a UTF-8 byte order mark")
    if _mostly_crlf(data):
        notes.append("Windows (CRLF) line endings; the preview and grep show lines without the CR, "
                     "fetch_slice pages keep it")
    if b"\x00" in data:
        notes.append(_nul_note(data))
    if data.isspace():
        line_breaks = data.count(b"\n")
        notes.append(f"only whitespace ({line_breaks:,} line break{'' if line_breaks == 1 else 's'})")
        return Detected("text", "text/plain", notes=notes, **facts)

    start = _LEADING_WS.match(data, len(_BOM) if data.startswith(_BOM) else 0).end()
    if not bad_bytes and data[start:start + 1] in (b"{", b"["):  # JSON is UTF-8 or it is not JSON
        found = _detect_json(data, start, facts, notes)
        if found is not None:
            return found
    if _looks_like_grep(data, _is_grep_tool(tool)):
        return Detected("grep", "text/plain", notes=notes, **facts)
    delimiter = sniff_delimiter(data)
    if delimiter in FRAMED_BY and (why := irregular_frame(data, delimiter)):
        notes.append(f"a table drawn for people, read as text: {why}")
        delimiter = None
    if delimiter is not None:
        content_type = "text/tab-separated-values" if delimiter == "\t" else "text/csv"
        return Detected("csv", content_type, notes=notes, delimiter=delimiter, **facts)
    return Detected("text", _text_content_type(data, start), notes=notes, **facts)


def _mostly_text(data: bytes) -> bool:
    """Whether content with invalid UTF-8 is still text: few replacements and control bytes at its start."""
    sample = data[:_SAMPLE]
    decoded_sample = sample.decode("utf-8", "replace")
    replaced = decoded_sample.count("\ufffd")
    controls = len(sample) - len(sample.translate(None, CONTROL_BYTES))
    return replaced <= 0.1 * len(decoded_sample) and controls <= 0.1 * len(sample)


def _nul_note(data: bytes) -> str:
    """What the preview does with the NUL bytes of text (`sniff_binary` let them pass as text)."""
    if nul_separated(data):
        entries = data.count(b"\x00") + (not data.endswith(b"\x00"))
        return (f"NUL-separated (as `find -print0` writes): {entries:,} entries, shown one per line in the"
                " preview (a newline inside one as \u2424); the stored bytes keep the NULs")
    nuls = data.count(b"\x00")
    return f"{nuls:,} NUL byte{'s' if nuls != 1 else ''}, shown as \u2400 in the preview (the stored bytes keep them)"


def _mostly_crlf(data: bytes) -> bool:
    head = data[:_SAMPLE]
    line_feeds = head.count(b"\n")
    return line_feeds > 0 and head.count(b"\r\n") * 2 > line_feeds


def _detect_json(data: bytes, start: int, facts: dict, notes: list[str]) -> Detected | None:
    """JSON or NDJSON; text with a note when it looks like JSON but fails; None when it is not JSON."""
    try:
        return Detected("json", "application/json", doc=parse_json(data), notes=notes, **facts)
    except InvalidJSON as error:
        failure = error
    if failure.too_deep:
        notes.append(str(failure))
        return Detected("text", "text/plain", notes=notes, **facts)
    rows = _parse_ndjson(data, start, notes)
    if rows is not None:
        return Detected("ndjson", "application/x-ndjson", doc=rows, notes=notes, **facts)
    if any(note.startswith("looks like NDJSON") for note in notes):
        return Detected("text", "text/plain", notes=notes, **facts)
    # A log line such as "[2024-01-02] …" fails within a few bytes; a cut or broken document
    # fails late or at the very end: only then is "looks like JSON" a fair remark.
    if failure.byte >= 64 or failure.byte >= len(data.rstrip()):
        notes.append(f"looks like JSON but does not parse: {failure}")
        return Detected("text", "text/plain", notes=notes, **facts)
    return None


def _parse_ndjson(data: bytes, start: int, notes: list[str]) -> list | None:
    first_end = data.find(b"\n", start)
    if first_end == -1:
        return None
    try:
        orjson.loads(data[start:first_end])
    except orjson.JSONDecodeError:
        return None
    body = data.removeprefix(_BOM)  # a BOM is no part of row 0 (it had made the whole text)
    lines = [line for line in body.split(b"\n") if line.strip()]
    if len(lines) < 2:
        return None
    with gc_paused():
        # One C-speed parse of all rows; only a failure pays for a row-by-row search of the culprit.
        try:
            rows = orjson.loads(b"[" + b",".join(lines) + b"]")
            if len(rows) == len(lines):
                return rows
        except orjson.JSONDecodeError:
            pass
        line_number = 0
        for raw_line in body.split(b"\n"):
            if raw_line.strip():
                try:
                    orjson.loads(raw_line)
                except orjson.JSONDecodeError as error:
                    reason = "nested too deep" if "depth" in error.msg else error.msg
                    notes.append(f"looks like NDJSON but line {line_number:,} does not parse: {reason}")
                    return None
            line_number += 1
        notes.append("looks like NDJSON but a line holds more than one JSON value")
        return None


def _is_grep_tool(tool: str | None) -> bool:
    if not tool:
        return False
    name = re.split(r"[./:]|__", tool.lower())[-1]
    return name in GREP_TOOLS or name.endswith("grep")


def _sample_lines(data: bytes, limit: int = 200) -> list[bytes]:
    # split off at most twice the lines wanted (blank ones are dropped): the rest of the sample stays whole
    lines = data[:_SAMPLE].split(b"\n", 2 * limit)
    if (len(lines) > 2 * limit or len(data) > _SAMPLE) and len(lines) > 1:
        lines.pop()  # the rest of the sample, or its last line, which may be cut
    return [line.rstrip(b"\r") for line in lines if line.strip()][:limit]


def _looks_like_grep(data: bytes, grep_tool: bool) -> bool:
    lines = _sample_lines(data)
    if not lines:
        return False
    numbered = _GREP_N if grep_tool else _GREP_N_STRICT
    others = [line for line in lines if not numbered.match(line)]
    matches = len(lines) - len(others)
    context = sum(1 for line in others if _GREP_CONTEXT.match(line))
    # With context lines (-C) a match may be one line in ten.
    if matches >= 0.08 * len(lines) and matches + context >= 0.8 * len(lines):
        return True
    return grep_tool and sum(1 for line in lines if _GREP_PLAIN.match(line)) >= 0.8 * len(lines)


def sniff_delimiter(data: bytes) -> str | None:
    """The delimiter when the first lines form a consistent table with a plausible header."""
    head = data[: 4 * _SAMPLE].decode("utf-8", "replace")  # at least _SAMPLE characters when there are
    # split off at most twice the lines wanted, as `_sample_lines` does (the whole sample is ~700 lines
    # of a log, each stripped: a third of detecting 1 MB of text)
    sample = head[:_SAMPLE].split("\n", 200)
    if (len(sample) > 200 or len(head) > _SAMPLE) and len(sample) > 1:
        sample.pop()  # the rest of the sample, or its last line, which may be cut
    lines = [line.rstrip("\r") for line in sample if line.strip()][:100]
    if len(lines) < 2:
        return None
    for delimiter in _CSV_DELIMITERS:
        if delimiter in FRAMED_BY:  # a pipe table's rule lines (`+----+`, `|---|`, `├──┼──┤`) are not rows
            lines = [line for line in lines if not is_rule(line)] or lines
        table = lines[comment_lines(lines, delimiter):] if lines[0].startswith("#") else lines
        if len(table) < 2 or delimiter not in table[0]:
            continue
        try:
            rows = list(csv.reader(table, delimiter=delimiter))
        except csv.Error:
            continue
        header = rows[0]
        width = len(header)
        headerless = not plausible_header(header) and first_row_is_data(rows) and not _rival(table, delimiter)
        if width < 2 or not plausible_header(header) and not headerless:
            continue
        if delimiter == "," and _commas_are_thousands(table):
            continue
        # A quoted field may span lines, so rows can be fewer than lines; the widths must agree.
        consistent = sum(1 for row in rows[1:] if len(row) == width)
        if consistent >= max(1, 0.9 * (len(rows) - 1)):
            return delimiter
    return None


def _rival(lines: list[str], delimiter: str) -> bool:
    """Whether another delimiter stands as often in every one of `lines`: a table without a header, split
    at the wrong one (`12,5;3,7;abc`, decimal commas between semicolons, read as comma-separated)."""
    return any(other != delimiter and len({line.count(other) for line in lines}) == 1 and other in lines[0]
               for other in _CSV_DELIMITERS)


_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")


def _commas_are_thousands(lines: list[str]) -> bool:
    """True when most lines' commas all sit inside numbers ("5,218 bytes"): prose or a log, not a table."""
    inside = sum(1 for line in lines if line.count(",") == len(_THOUSANDS.findall(line)))
    return inside >= 0.8 * len(lines)


def _text_content_type(data: bytes, start: int) -> str:
    head = data[start:start + 256].lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "text/html"
    if head.startswith(b"<?xml"):
        return "application/xml"
    return "text/plain"
