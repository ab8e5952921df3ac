"""Facts about a CSV/TSV result: its columns, their types and null counts, and the exact row count.

Rows are counted exactly (a quoted field may span lines, so rows are not lines); types are inferred
from the first rows when the table is big, and the shape says how many. Null counts are exact up to
EXACT_NULLS_CHARS of text (a full parse, ~50 ms a MB); above, they come from the same first rows and
say so.
"""

from __future__ import annotations

import csv
import io
import re
from itertools import islice, zip_longest

import numpy as np

__all__ = ["describe_table"]

TYPE_SAMPLE = 2000
EXACT_NULLS_CHARS = 1 << 20
_NULL_BLOCK = 10_000  # rows turned into columns at a time
MAX_COLUMNS = 50
_NULLS = frozenset({"", "null", "NULL", "Null", "None", "NA", "N/A", "n/a", "NaN", "nan"})
_PATTERNS = (
    ("integer", re.compile(r"[+-]?\d+")),
    ("float", re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|Infinity)")),
    ("bool", re.compile(r"(?i:true|false)")),
    ("date", re.compile(r"\d{4}-\d{2}-\d{2}")),
    ("datetime", re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")),
)
# A column of integers and floats is a float column; of dates and datetimes, a datetime column.
_WIDER = {frozenset({"integer", "float"}): "float", frozenset({"date", "datetime"}): "datetime"}


def describe_table(data: bytes, text: str, delimiter: str) -> dict:
    """The table's shape: {"type": "table", "rows", "delimiter", "columns": {name: {type, nulls}}}."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, [])
    sample = [row for row in islice(reader, TYPE_SAMPLE + 1) if row]
    sampled = len(sample) > TYPE_SAMPLE
    sample = sample[:TYPE_SAMPLE]
    rows = _row_count(data, text, delimiter)
    names = _unique(header)
    width = min(len(names), MAX_COLUMNS)
    nulls = _null_counts(text, delimiter, width) if sampled and len(text) <= EXACT_NULLS_CHARS else None
    columns: dict[str, dict] = {}
    for index, name in enumerate(names[:width]):
        values = [row[index] if index < len(row) else "" for row in sample]
        columns[name] = column = _column(values)
        if nulls is not None:
            column.pop("nulls", None)
            if nulls[index]:
                column["nulls"] = nulls[index]
        elif sampled and "nulls" in column:
            column["nulls_from"] = "sample"
    shape: dict = {"type": "table", "rows": rows, "delimiter": delimiter, "columns": columns}
    if len(names) > MAX_COLUMNS:
        shape["more_columns"] = len(names) - MAX_COLUMNS
    if sampled:
        shape["sampled"] = TYPE_SAMPLE
    return shape


def _null_counts(text: str, delimiter: str, width: int) -> list[int]:
    """Null values in each of the first `width` columns over every row (a missing field is a null)."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    next(reader, None)
    counts = [0] * width
    while rows := list(islice(reader, _NULL_BLOCK)):
        block = [row for row in rows if row]  # a blank line is no row
        if not block:
            continue
        # a block's columns at once, and each counted by C built-ins: no Python call per value
        for index, column in zip(range(width), zip_longest(*block, fillvalue="")):
            counts[index] += sum(map(_NULLS.__contains__, map(str.strip, column)))
        for index in range(max(map(len, block)), width):  # columns no row of the block reaches
            counts[index] += len(block)
    return counts


def _row_count(data: bytes, text: str, delimiter: str) -> int:
    """Data rows, exactly: records after the header, blank lines not counted (as csv.reader does)."""
    if '"' in text:
        return max(0, sum(1 for row in csv.reader(io.StringIO(text), delimiter=delimiter) if row) - 1)
    # No quotes: a record is a non-blank line, counted with a C-speed pass instead of a parse.
    buffer = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buffer == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    if data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    lengths = ends - starts
    blank = (lengths == 0) | ((lengths == 1) & (buffer[np.minimum(starts, len(data) - 1)] == 13))
    return max(0, int(len(starts) - np.count_nonzero(blank)) - 1)


def _unique(header: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for position, name in enumerate(header):
        name = name.strip() or f"column_{position}"
        if name in seen:
            seen[name] += 1
            name = f"{name} ({seen[name]})"
        else:
            seen[name] = 1
        names.append(name)
    return names


def _column(values: list[str]) -> dict:
    nulls = sum(1 for value in values if value.strip() in _NULLS)
    present = [value.strip() for value in values if value.strip() not in _NULLS]
    kinds = set()
    for value in present:
        kind = next((name for name, pattern in _PATTERNS if pattern.fullmatch(value)), "string")
        kinds.add(kind)
        if kind == "string":
            break
    if not kinds:
        column_type = "null"
    elif len(kinds) == 1:
        column_type = kinds.pop()
    else:
        column_type = _WIDER.get(frozenset(kinds), "string")
    column = {"type": column_type}
    if nulls:
        column["nulls"] = nulls
    return column
