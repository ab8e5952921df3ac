"""The preview of a stored result: what the model reads instead of the whole, within a token budget.

One entry point, `build_preview`, picks the layout for the detected kind and returns the text with
an exact account of what it leaves out, plus the shape and the verified JMESPath hints for JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from offload.content.binary import describe_binary
from offload.content.detect import Detected, repeated_keys
from offload.content.hints import build_hints
from offload.content.jsonview import render_json
from offload.content.grep import grep_preview
from offload.content.lines import LineView, clip_to_budget, nul_separated, text_preview
from offload.content.shape import MainCollection, describe_json, find_main
from offload.content.table import describe_table
from offload.jsontext import dumps

__all__ = ["NUL_SHOWN", "Preview", "build_preview"]

NUL_SHOWN = "\u2400"  # ␀, SYMBOL FOR NULL: how a NUL byte of text is shown
NEWLINE_SHOWN = "\u2424"  # ␤, SYMBOL FOR NEWLINE: a newline inside a NUL-separated entry (a file name)
# one byte, as a newline is: what the preview counts for one inside an entry (the first the content lacks)
_STAND_INS = (b"\x1f", b"\x1e", b"\x1d", b"\x1c", b"\x1b", b"\x1a", b"\x19", b"\x18")


@dataclass
class Preview:
    text: str  # what the model sees, within the budget
    truncated: bool  # anything of the content is left out of `text`
    omitted: str  # exactly what was left out; "" when nothing
    shape: dict | None = None
    hints: list[str] = field(default_factory=list)  # JMESPath expressions, each executed before listed
    # kind-specific facts: grep counts per file, CSV columns, JSON items and "hint_results" (an exact
    # summary per hint, such as "12,258 items", when one is known)
    extra: dict = field(default_factory=dict)
    # JSON and NDJSON: entries (items, keys, rows) of the main collection shown, and how many it has
    entries_shown: int | None = None
    entries: int | None = None


def build_preview(detected: Detected, data: bytes, budget: int, count: Callable[[str], int], *,
                  max_lines: int = 200) -> Preview:
    """The preview of `data` in at most `budget` tokens as `count` measures them.

    `max_lines` bounds the match lines a grep preview shows.
    """
    budget = max(0, budget)
    if not data:
        preview = Preview("[empty: 0 bytes]", False, "")
    elif detected.kind == "binary":
        preview = _binary(detected, data)
    elif data.isspace():
        lines, size = detected.lines, len(data)
        counted = f"{lines:,} line{'' if lines == 1 else 's'}, {size:,} byte{'' if size == 1 else 's'}"
        if size <= 64:  # whole, as a literal: a 9-byte stderr of blank lines was stored as an artifact of its own
            preview = Preview(f"[only whitespace, {counted}: {json.dumps(data.decode('ascii'))}]",
                              False, "", extra={"lines": lines})
        else:
            preview = Preview(f"[only whitespace: {counted}]", True, f"all of it ({counted}) whitespace, not shown",
                              extra={"lines": lines})
    elif detected.kind == "json" and isinstance(detected.doc, (dict, list)):
        preview = _json(detected, data, budget, count)
    elif detected.kind == "ndjson" and isinstance(detected.doc, list):
        preview = _ndjson(detected, data, budget, count)
    elif detected.kind == "csv" and detected.delimiter and detected.text is not None:
        preview = _csv(detected, data, budget, count)
    elif detected.kind == "grep":
        per_file = detected.memo.get("matches_per_file")
        view = grep_preview(data, budget, count, max_lines=max_lines, total=detected.lines, per_file=per_file)
        detected.memo["matches_per_file"] = view.per_file
        preview = _from_lines(view)
    else:  # text, shell output, and JSON that does not parse
        preview = _text(detected, data, budget, count)
    if "\x00" in preview.text:  # a stray NUL, which some readers drop or choke on, made visible
        preview.text = preview.text.replace("\x00", NUL_SHOWN)
    return _within(preview, budget, count)


def _from_lines(view: LineView, **fields) -> Preview:
    return Preview(view.text, view.truncated, view.omitted, extra=view.extra, **fields)


def _text(detected: Detected, data: bytes, budget: int, count: Callable[[str], int]) -> Preview:
    """Lines; entries that NUL bytes separate are shown one per line and counted as entries."""
    if b"\x00" not in data or not nul_separated(data):
        return _from_lines(text_preview(data, budget, count, total=detected.lines,
                                        tail_first=detected.memo.get("failed", False)))
    # An entry a line: a newline inside one (a file name may hold it) is counted as a one-byte stand-in,
    # so every line is an entry and the byte counts stay exact, and shown as ␤.
    stand_in = next((b for b in _STAND_INS if b not in data), None) if b"\n" in data else None
    lines = (data.replace(b"\n", stand_in) if stand_in else data).replace(b"\x00", b"\n")
    # names (of files, mostly): one holding "error" reports nothing, so no error scan
    view = text_preview(lines, budget, count, scan_errors=False, unit=("entry", "entries"))
    text = view.text.replace(stand_in.decode(), NEWLINE_SHOWN) if stand_in else view.text
    entries = view.extra["lines"]
    extra = {"lines": detected.lines, "items": entries, "nul_separated_entries": entries}
    return Preview(text, view.truncated, view.omitted, extra=extra)


def _binary(detected: Detected, data: bytes) -> Preview:
    found = describe_binary(data, detected.content_type)
    facts = dict(found.facts)
    details = []
    if "width" in facts:
        details.append(f"{facts['width']:,}×{facts['height']:,} px")
    if "version" in facts:
        details.append(f"version {facts['version']}")
    described = found.description + (f" ({', '.join(details)})" if details else "")
    text = f"[binary data: {described}; {len(data):,} bytes; content not shown]"
    extra = {"detected": found.description, "bytes": len(data), **facts}
    return Preview(text, True, f"all {len(data):,} bytes of binary content not shown", extra=extra)


def _structure(detected: Detected, main: MainCollection) -> tuple[dict, dict[str, str | None]]:
    """The shape and the verified hints, computed once per result (each pass visits every item)."""
    if "shape" not in detected.memo:
        shape = describe_json(detected.doc, main)
        detected.memo["shape"] = shape, build_hints(detected.doc, main, shape)
    return detected.memo["shape"]


def _json(detected: Detected, data: bytes, budget: int, count: Callable[[str], int]) -> Preview:
    doc = detected.doc
    main = find_main(doc)
    shape, hint_results = _structure(detected, main)
    hints = list(hint_results)
    extra: dict = {"hint_results": {hint: result for hint, result in hint_results.items() if result}}
    if isinstance(main.value, list):
        extra.update(items=len(main.value), items_path=main.path)
    else:
        extra.update(keys=len(main.value), keys_path=main.path)
    if isinstance(doc, dict):
        extra["top_level_keys"] = len(doc)
    raw = _raw_if_fits(data, budget, count)
    if raw is not None:
        return Preview(raw, False, "", shape, hints, extra)
    view = render_json(doc, main, budget, count)
    parts = []
    if view.omitted_entries:
        first = view.shown_first
        last = view.total - (2 if view.shown_last else 1)
        where = main.path if main.keys else f"the top-level {'array' if isinstance(doc, list) else 'object'}"
        unit = "items" if isinstance(main.value, list) else "keys"
        label = "items" if unit == "items" else "entries"
        parts.append(f"{label} {first:,}–{last:,} of {where} ({view.omitted_entries:,} of {view.total:,}"
                     f" {unit}) not shown")
    parts += view.cuts.describe()
    if not parts:  # the parsed document fits where its bytes did not: whitespace, or keys given twice
        parts = _shadowed(data, doc)
    omitted = "; ".join(parts)
    return Preview(view.text, bool(omitted), omitted, shape, hints, extra,
                   view.total - view.omitted_entries, view.total)


def _shadowed(data: bytes, doc: Any) -> list[str]:
    """What the parsed document leaves out of its bytes, said when the preview shows it whole: the values
    of keys given twice in an object, of which a parser keeps the last (see `repeated_keys`)."""
    repeated = repeated_keys(data)
    if repeated is None:  # too big to read again: a parsed document far smaller than its text may hide them
        dense, parsed = len(data.translate(None, b" \t\r\n")), len(dumps(doc))
        if dense <= 2 * parsed + 1024:
            return []
        return [f"the parsed document is {parsed:,} bytes as compact JSON, its text {dense:,} without whitespace: "
                "it may give keys more than once in an object, and a parser keeps only the last value; all of "
                "the text is stored (fetch_slice pages it by lines or bytes, grep searches it)"]
    if not repeated:
        return []
    names = ", ".join(f'"{key}"' for key in repeated)
    return [f"the earlier values of {names}, which an object of the document gives more than once: a parser "
            "keeps only the last, and that is what this preview, the shape, the hints and JMESPath and SQL "
            "see; the earlier ones are in the stored text (fetch_slice pages it by lines or bytes, grep "
            "searches it)"]


def _ndjson(detected: Detected, data: bytes, budget: int, count: Callable[[str], int]) -> Preview:
    rows = detected.doc
    main = MainCollection([], rows)
    shape, hint_results = _structure(detected, main)
    hints = list(hint_results)
    lines = detected.lines
    extra = {"rows": len(rows), "items": len(rows), "lines": lines,
             "hint_results": {hint: result for hint, result in hint_results.items() if result}}
    raw = _raw_if_fits(data, budget, count)
    if raw is not None:
        return Preview(raw, False, "", shape, hints, extra)
    # Without blank lines row n is line n, and the marker can give lines fetch_slice understands.
    unit = "lines" if lines == len(rows) else "rows"
    view = render_json(rows, main, budget, count, rows=unit)
    parts = []
    if view.omitted_entries:
        first = view.shown_first
        last = view.total - (2 if view.shown_last else 1)
        parts.append(f"rows {first:,}–{last:,} ({view.omitted_entries:,} of {view.total:,} rows"
                     f"{'; the same line numbers' if unit == 'lines' else ''}) not shown")
    parts += view.cuts.describe()
    omitted = "; ".join(parts)
    return Preview(view.text, bool(omitted), omitted, shape, hints, extra,
                   view.total - view.omitted_entries, view.total)


def _csv(detected: Detected, data: bytes, budget: int, count: Callable[[str], int]) -> Preview:
    if "table" not in detected.memo:  # the same for every budget the preview is fitted to: read once
        detected.memo["table"] = describe_table(data, detected.text, detected.delimiter)
    shape = detected.memo["table"]
    extra = {
        "columns": list(shape["columns"]),
        "types": {name: column["type"] for name, column in shape["columns"].items()},
        "rows": shape["rows"],
        "delimiter": detected.delimiter,
    }
    quoted = shape.get("quoting") != "none" and not shape.get("framed") and b'"' in data  # a record may span lines
    # the last record; of a table drawn for people, also its footer and the blank line psql ends with
    # (its one tail line was that blank line: no row, no "(3,215 rows)")
    tail = 3 if shape.get("framed") else 1
    view = text_preview(data, budget, count, tail_lines=tail, scan_errors=False, total=detected.lines,
                        records=quoted)
    extra["lines"] = view.extra["lines"]
    return Preview(view.text, view.truncated, view.omitted, shape, [], extra)


def _raw_if_fits(data: bytes, budget: int, count: Callable[[str], int]) -> str | None:
    if len(data) > budget * 12:
        return None
    text = data.decode("utf-8", "replace").strip()
    return text if count(text) <= budget else None


def _within(preview: Preview, budget: int, count: Callable[[str], int]) -> Preview:
    """The last guard of the budget promise, for budgets too small for any layout."""
    if count(preview.text) <= budget:
        return preview
    text = preview.text
    preview.text = clip_to_budget(text, budget, count, whole_lines=True)
    low = len(preview.text)
    preview.truncated = True
    note = f"preview cut to {low:,} of {len(text):,} chars to fit {budget:,} tokens"
    preview.omitted = f"{preview.omitted}; {note}" if preview.omitted else note
    return preview
