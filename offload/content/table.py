"""Facts about a CSV/TSV result: its columns, their types and null counts, and the exact row count.

Rows are counted exactly (a quoted field may span lines, so rows are not lines). Types and null counts
are over every row up to EXACT_NULLS_CHARS of text (a full parse, ~50 ms a MB); above, they come from
the first TYPE_SAMPLE rows, and the shape says so. The SQL table (tools/sql.py) reads the text with this module's rules (`read_layout`, `records`,
`column_names`), so that its rows, names and NULLs are the ones the shape states.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
from collections import Counter
from dataclasses import dataclass
from itertools import chain, islice, zip_longest
from typing import Iterable, Iterator

import numpy as np

__all__ = ["Layout", "column_names", "describe_table", "extra_names", "first_row_is_data", "irregular_frame",
           "is_rule", "plausible_header", "read_layout", "records", "row_names"]

TYPE_SAMPLE = 2000
EXACT_NULLS_CHARS = 1 << 20
_NULL_BLOCK = 10_000  # rows turned into columns at a time
MAX_COLUMNS = 50
QUOTE = '"'
# Text that often stands for a missing value. SQL reads it as text (only an empty field is NULL), so the
# shape counts it apart from the nulls, by its exact spelling.
_NULL_LIKE = frozenset({"null", "NULL", "Null", "None", "NA", "N/A", "n/a"})
# What a header's field is not: a number, a date, a time (`plausible_header`)
_NOT_A_NAME = re.compile(r"[-+]?[\d.,:eE+ -]+|\d{4}-\d{2}-\d{2}.*|\d{1,2}[:/]\d{2}.*")
# The types SQL reads (DuckDB's sniffer, over every row, with the options `tools.sql_load` gives it), as
# measured with duckdb 1.5: an integer may stand between blanks, but an unsigned one never starts with a
# 0 before another digit (`007`, a code, stays text; `-007` is a number) nor with `+`; so for floats,
# which take no blank after them; `inf` is text (a date, alone); t/f and yes/no are booleans; dates take
# one-digit months and days, and `/`. A column of integers and floats is a float column (the only
# widening: dates beside datetimes are text).
_UNSIGNED = r"(?:0|[1-9]\d*)"
_PATTERNS = (
    ("integer", re.compile(rf"[ \t]*(?:{_UNSIGNED}|-\d+|0[xX][0-9a-fA-F]+)[ \t]*", re.ASCII)),
    ("float", re.compile(rf"(?:{_UNSIGNED}(?:\.\d*)?|\.\d+|-(?:\d+(?:\.\d*)?|\.\d+))(?:[eE][+-]?\d+)?|NaN|nan",
                         re.ASCII)),
    ("bool", re.compile(r"(?i:true|false|t|f|yes|no)")),
    ("date", re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{4}/\d{1,2}/\d{1,2}", re.ASCII)),
    ("datetime", re.compile(r"\d{4}-\d{1,2}-\d{1,2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
                            re.ASCII)),
    ("time", re.compile(r"\d{2}:\d{2}:\d{2}(?:\.\d+)?", re.ASCII)),
)
_INT64 = 1 << 63  # an integer beyond 64 bits is read as a float (DOUBLE)
# What csv.reader(strict=True) says of a quote that does not quote: text after a closing one, or none.
_QUOTING_ERROR = re.compile(r"expected after '\"'|unexpected end of data")
_WIDER = {frozenset({"integer", "float"}): "float"}


# A pipe table's rule line: dashes between `|` or `+` (psql's `----+---`, Markdown's `|---|:--:|`, the
# MySQL client's `+----+------+`), and a row-count footer, psql's `(3,000 rows)` or MySQL's `3000 rows in
# set (0.01 sec)`: neither is a record.
_RULE = re.compile(r"[ \t]*[|+]?(?:[ \t]*:?-+:?[ \t]*[|+])+(?:[ \t]*:?-+:?[ \t]*)?[ \t]*")
# A table drawn with box-drawing characters (`sqlite3 -box`, `psql -P linestyle=unicode`, DuckDB's shell):
# its cells between `│`, its rules of `─` with their corners and joints
BOX = "│"
_JOINTS = "┌┬┐├┼┤└┴┘╭╮╰╯╞╪╡╒╤╕╘╧╛┏┳┓┣╋┫┗┻┛"
_BOX_RULE = re.compile(rf"[ \t]*[{_JOINTS}]?[─═━]+(?:[{_JOINTS}][─═━]*)*[ \t]*")
FRAMED_BY = ("|", BOX)  # the delimiters of tables drawn for people
_FOOTER = re.compile(r"\(\d[\d,]* rows?\)|(?:\d[\d,]* rows? in set|Empty set)(?:, \d+ warnings?)?(?: \([\d.]+ sec\))?")
_FRAME_LINES = 3  # a rule among a table's first lines makes it framed
_FRAME_HEAD = 64 * 1024  # characters (or bytes) those lines are looked for in


@dataclass(frozen=True)
class Layout:
    """How a CSV/TSV text is read, by its shape and by SQL alike."""

    delimiter: str
    quote: str  # '"': a field may be quoted (RFC 4180, "" inside); "": every " is a plain character
    rows: int  # records after the header; a blank line is no record
    # "" for CSV; a pipe table drawn for people (`is_rule`), whose rule lines and psql's footer are no
    # records and whose cells are trimmed: "inner" when only its columns are between pipes (psql),
    # "edges" when each line also starts and ends with one (Markdown, the MySQL client)
    framed: str = ""
    # a last line that counts the records before it (`psql -A`'s `(3000 rows)`): no record
    footer: bool = False
    # lines before the header, `#` comments and blank ones (`comment_lines`): no records; and how many
    # of them are comments
    comments: int = 0
    comment_count: int = 0
    # False when the first record is a row, not the header (`first_row_is_data`): its columns are named
    # column0, column1…, as SQL names them
    header: bool = True


def is_rule(line: str) -> bool:
    """Whether `line` is a pipe table's rule line (dashes between `|` or `+`, or a box's `├───┼───┤`)."""
    line = line.rstrip("\r")
    return bool(_RULE.fullmatch(line) or _BOX_RULE.fullmatch(line))


def read_layout(data: bytes, text: str, delimiter: str) -> Layout:
    """The quoting the whole text parses with, and its row count.

    Quotes quote (RFC 4180) when every quoted field of the text is well formed; when one is not (a field
    opening with a stray `"`, an inch mark, whose closing quote is not followed by a delimiter or a line
    end), every `"` is a plain character instead, as DuckDB's own sniffer would read it. Reading such a
    quote as an opening one would swallow the lines up to the next `"`, half the rows of a column of
    `"12 inch` values.
    """
    if delimiter in FRAMED_BY and (framed := _framing(text, delimiter)):
        layout = Layout(delimiter, "", 0, framed)
        return Layout(delimiter, "", max(0, sum(1 for _ in records(text, layout)) - 1), framed)
    skip = comments = 0
    if text[:_FRAME_HEAD].lstrip()[:1] == "#":
        head = text[:_FRAME_HEAD].split("\n", 64)[:64]
        skip = comment_lines(head, delimiter)
        comments = sum(1 for line in head[:skip] if line.strip())  # the skipped lines `_line_rows` counts
    if QUOTE in text:
        try:
            rows = sum(1 for row in reader(text, delimiter, QUOTE, skip) if row)
            layout = Layout(delimiter, QUOTE, max(0, rows - 1), comments=skip, comment_count=comments)
        except csv.Error as exc:
            if not _QUOTING_ERROR.search(str(exc)):
                raise  # a field over csv's size limit, say: no sign of stray quotes
            layout = Layout(delimiter, "", max(0, _line_rows(data) - comments), comments=skip, comment_count=comments)
    else:
        layout = Layout(delimiter, QUOTE, max(0, _line_rows(data) - comments), comments=skip, comment_count=comments)
    if _headerless(text, layout):
        return dataclasses.replace(layout, rows=layout.rows + 1, header=False)
    return _counted(text, layout)


def _headerless(text: str, layout: Layout) -> bool:
    """Whether the first record of `layout`'s table is a row (`first_row_is_data`), by its first 100
    records, as detection judged them."""
    head = text[:_FRAME_HEAD]
    if len(head) < len(text):
        head = head[:head.rfind("\n") + 1]  # whole lines only
    try:
        rows = [row for _, row in islice(records(head, layout), 100)]
    except csv.Error:  # a quoted field open past the sample's end
        rows = [row for _, row in islice(records(head, dataclasses.replace(layout, quote="")), 100)]
    return bool(rows) and not plausible_header(rows[0]) and first_row_is_data(rows)


def comment_lines(lines: list[str], delimiter: str) -> int:
    """How many of the first `lines` are `#` comments before a table's header (an export's preamble: `#
    exported from …`), read as text before, and the blank lines among them: none, unless the first line
    that is not blank starts with `#`. The last of
    them is the header instead when it has as many fields as the line after it (VCF's `#CHROM POS …`
    after its `##` lines); a comment in the table's body is a record, as it always was."""
    header, last_comment = 0, None  # blank lines before the header are no records either
    while header < len(lines) and (lines[header].startswith("#") or not lines[header].strip()):
        last_comment = header if lines[header].startswith("#") else last_comment
        header += 1
    if last_comment is None or header == len(lines):
        return 0
    fields = len(lines[header].split(delimiter))
    return last_comment if fields > 1 and len(lines[last_comment].split(delimiter)) == fields else header


def plausible_header(names: list[str]) -> bool:
    """Column names: short, mostly present, and neither numbers nor dates nor sentences.

    This is what keeps a log whose lines each hold one comma ("12:00:01,848 INFO …") from passing
    for a two-column table.
    """
    # pandas' to_csv names its index column "" (",a,b"), and a trailing delimiter leaves the last empty
    free = (not names[0].strip()) + (len(names) > 2 and not names[-1].strip())
    if sum(not name.strip() for name in names) > len(names) // 4 + free:
        return False
    names = [name.strip() for name in names]  # psql pads a name to its column's width
    return not any(len(name) > 64 or name.count(" ") > 4 or _NOT_A_NAME.fullmatch(name) for name in names)


def first_row_is_data(rows: list[list[str]]) -> bool:
    """Whether a table's first record, not plausibly a header (`plausible_header`), is a row: output
    written without one (`sqlite3 -csv`, `psql -At`, `mysql -N`), whose first line holds in each typed
    column a value of that column's type (`_PATTERNS`), as the rows after it do. At least three records
    of one width, none padded, and two columns of numbers, dates or times, lest a log read as a table (a
    log's `2024-05-01T10:00:00<TAB>INFO<TAB>…` has one; its error lines went unlisted as a table's);
    and not integers a header is named by, years or positions (`Country,2019,2020`, pandas' `,0,1,2`)."""
    if len(rows) < 3 or len(rows[0]) < 2 or any(len(row) != len(rows[0]) for row in rows):
        return False
    if any(cell != cell.strip() for row in rows for cell in row):
        return False  # padded: drawn for people (`psql -t`), and SQL would read the spaces as part of each cell
    firsts = []
    for index, first in enumerate(rows[0]):
        kind = _type_of(_kinds([row[index] for row in rows[1:]], set()))
        if kind in ("string", "null", "bool"):
            continue  # a name could stand above text, and a header's `t`, `f`, `yes` are names too
        if first and first not in _NULL_LIKE:
            if _type_of(_kinds([first], {kind})) != kind:  # a name above numbers: a header
                return False
            firsts.append(first)
    if len(firsts) < 2:
        return False
    numbers = [int(first) for first in firsts if re.fullmatch(r"-?\d{1,18}", first)]
    named = len(numbers) == len(firsts) and (all(1800 <= n <= 2200 for n in numbers)
                                            or numbers == list(range(numbers[0], numbers[0] + len(numbers))))
    return not named


def _counted(text: str, layout: Layout) -> Layout:
    """`layout` without its last record when that is a footer stating how many records come before it,
    exactly (`psql -A` and `psql -F`: the header, the rows, `(3000 rows)`); read as a record, it made
    3,001 rows, a column of numbers text, and "(1 null)" of every other column."""
    end = text[-4096:].rstrip()  # a footer is short: no copy of the whole text
    last = end[end.rfind("\n") + 1:].strip()
    if not layout.rows or not _FOOTER.fullmatch(last):
        return layout
    stated = re.match(r"\(?(\d[\d,]*)", last)
    if (int(stated[1].replace(",", "")) if stated else 0) != layout.rows - 1:  # "Empty set": 0
        return layout
    return dataclasses.replace(layout, rows=layout.rows - 1, footer=True)


def reader(text: str, delimiter: str, quote: str, skip: int = 0):
    """A csv.reader with a layout's rules (strict: a quoted field must end where a field ends), from
    the line after the first `skip` (a preamble of comments)."""
    stream = io.StringIO(text)
    for _ in range(skip):
        stream.readline()
    if quote:
        return csv.reader(stream, delimiter=delimiter, quotechar=quote, strict=True)
    return csv.reader(stream, delimiter=delimiter, quoting=csv.QUOTE_NONE)


def _framing(text: str, delimiter: str = "|") -> str:
    """A pipe table's `Layout.framed`: "" unless a rule line is among its first non-blank lines."""
    lines = [line for line in text[:_FRAME_HEAD].split("\n", 64)[:64] if line.strip()][:_FRAME_LINES + 1]
    if not any(map(is_rule, lines[:_FRAME_LINES])):
        return ""
    header = next((line.strip() for line in lines if not is_rule(line)), "")
    edged = header.startswith(delimiter) and header.endswith(delimiter) and len(header) > 1
    return "edges" if edged else "inner"


# psql: this cell goes on, on the next line (` +` at its end; `↵` in the unicode line style, `…` wrapped)
_CONTINUED = re.compile(r" \+(?:\||[ \t]*\r?$)|↵[ \t]*(?:│|\r?$)", re.MULTILINE)


def irregular_frame(data: bytes, delimiter: str = "|") -> str | None:
    """Why a pipe table drawn for people cannot be read as its cells, or None (also when it is no such
    table). psql marks a cell that goes on over lines with `+` and does not escape a `|` inside a cell:
    read as cells, the continuation lines were rows (467 where psql's footer said 463) and a cell holding
    `||` was split in two, silently."""
    # every pipe-separated result asks
    framed = _framing(data[:_FRAME_HEAD].decode("utf-8", "replace"), delimiter)
    if not framed:
        return None
    text = data.decode("utf-8", "replace")
    if found := _CONTINUED.search(text):
        return f"line {text.count(chr(10), 0, found.start()):,} has a cell that goes on over lines"
    width = None
    for line, row in records(text, Layout(delimiter, "", 0, framed)):
        if width is None:
            width = len(row)
        elif len(row) != width:
            return f"line {line:,} has {len(row):,} cells where its header has {width:,} (a {delimiter} inside a cell?)"
    return None


def records(text: str, layout: Layout) -> Iterator[tuple[int, list[str]]]:
    """Each record, the header first, with the 0-based line it starts on (as fetch_slice numbers lines);
    blank lines are skipped, and a framed table's rule and footer lines (`Layout.framed`), and the footer
    of one that has it (`Layout.footer`)."""
    rows = reader(text, layout.delimiter, layout.quote, layout.comments)
    line = layout.comments
    held = None  # with a footer, each record waits for the next: the last one is the footer
    for row in rows:
        if row and (not layout.framed or (row := _cells(row, layout.framed))):
            if not layout.footer:
                yield line, row
            elif held is not None:
                yield held
            held = line, row
        line = layout.comments + rows.line_num


def _cells(row: list[str], framed: str) -> list[str] | None:
    """A framed table's record: its cells trimmed, without the empty fields outside its edge pipes;
    None for a rule line or a footer. (Read without quoting, a record's fields joined are its line.)"""
    line = "|".join(row)
    if is_rule(line) or _FOOTER.fullmatch(line.strip()) or not line.strip():
        return None
    if framed == "edges":  # the field before the first pipe and the one after the last, when empty
        row = row[1:] if not row[0].strip() else row
        row = row[:-1] if row and not row[-1].strip() else row
    return [cell.strip() for cell in row]


def column_names(header: list[str]) -> list[str]:
    """The columns' names: each header field stripped (an empty one `column_N`, N its 0-based position).
    A name repeating an earlier one is suffixed ` (2)`, ` (3)`…; names equal but for case are all
    suffixed ` (1)`, ` (2)`…, because SQL names ignore case: `name` would read the column of `Name`."""
    stripped = [(name.lstrip("\ufeff") if position == 0 else name).strip() or f"column_{position}"
                for position, name in enumerate(header)]
    groups: dict[str, list[int]] = {}
    for position, name in enumerate(stripped):
        groups.setdefault(name.lower(), []).append(position)
    taken = set(groups)
    names = list(stripped)
    for positions in groups.values():
        if len(positions) == 1:
            continue
        cased = len({stripped[p] for p in positions}) > 1  # repeats keep the first as it is
        for n, position in enumerate(positions if cased else positions[1:], 1 if cased else 2):
            name = stripped[position]
            while f"{name} ({n})".lower() in taken:
                n += 1
            names[position] = f"{name} ({n})"
            taken.add(names[position].lower())
    return names


def row_names(stop: int, start: int = 0) -> list[str]:
    """The names of a table without a header row (`Layout.header`), from column `start` to `stop`:
    `column0`, `column1`…, given to SQL too (DuckDB's own from 10 columns on are `column00`…)."""
    return [f"column{i}" for i in range(start, stop)]


def extra_names(names: list[str], widest: int) -> list[str]:
    """The names SQL gives the fields a ragged record has past the header's `names`: `column_N`, N the
    0-based position, suffixed ` (2)`… where a header name takes it in any case."""
    taken = {name.lower() for name in names}
    extra = []
    for position in range(len(names), widest):
        name, n = f"column_{position}", 2
        while name.lower() in taken:
            name, n = f"column_{position} ({n})", n + 1
        extra.append(name)
        taken.add(name.lower())
    return extra


def describe_table(data: bytes, text: str, delimiter: str) -> dict:
    """The table's shape: {"type": "table", "rows", "delimiter", "columns": {name: {type, nulls}}},
    "quoting": "none" when quotes are plain characters (`read_layout`), and "ragged" when records have
    more or fewer fields than the header: SQL reads those extra fields as more columns (`extra_names`),
    which the shape would otherwise not have named."""
    layout = read_layout(data, text, delimiter)
    rows = (row for _, row in records(text, layout))
    header = next(rows, []) if layout.header else []
    sample = list(islice(rows, TYPE_SAMPLE + 1))
    sampled = len(sample) > TYPE_SAMPLE
    sample = sample[:TYPE_SAMPLE]
    if not layout.header:
        header = row_names(len(sample[0]) if sample else 0)
    names = column_names(header)
    width = min(len(names), MAX_COLUMNS)
    whole = _whole_columns(text, layout, width) if sampled and len(text) <= EXACT_NULLS_CHARS else None
    counts, ragged = whole if whole is not None else (None, _ragged(Counter(map(len, sample)), len(header)))
    columns: dict[str, dict] = {}
    for index, name in enumerate(names[:width]):
        values = [row[index] if index < len(row) else "" for row in sample]
        columns[name] = column = _column(values)
        if counts is not None:
            column.pop("nulls", None)
            column.pop("null_like", None)
            nulls, null_like, kinds = counts[index]
            column["type"] = _type_of(kinds)
            if nulls:
                column["nulls"] = nulls
            if null_like:
                column["null_like"] = dict(null_like.most_common())
        elif sampled and ("nulls" in column or "null_like" in column):
            column["nulls_from"] = "sample"
        if column.get("null_like") and column["type"] != "string":
            # SQL reads the text "NULL" as text, so the column as text: the shape says so, and of what
            # the other values are (a max() of a column shown as integers came back 'NULL')
            column["values"], column["type"] = column["type"], "string"
    shape: dict = {"type": "table", "rows": layout.rows, "delimiter": delimiter, "columns": columns}
    if not layout.header:
        shape["header"] = False
    if layout.comment_count:
        shape["comment_lines"] = layout.comment_count
    if layout.framed:
        shape["framed"] = layout.framed
    elif not layout.quote:
        shape["quoting"] = "none"
    if len(names) > MAX_COLUMNS:
        shape["more_columns"] = len(names) - MAX_COLUMNS
    if ragged:
        if "widest" in ragged:  # the names SQL gives the extra fields: all, or the first and the last
            widest = ragged.pop("widest")  # a table without a header: SQL names them as the others
            extra = extra_names(names, widest) if layout.header else row_names(widest, len(names))
            ragged["extra_columns"] = len(extra)
            ragged["extra_names"] = extra if len(extra) <= 4 else [extra[0], extra[-1]]
        if sampled and counts is None:
            ragged["from"] = "sample"
        shape["ragged"] = ragged
    if sampled and counts is None:  # types and nulls from the first rows only
        shape["sampled"] = TYPE_SAMPLE
    return shape


def _whole_columns(text: str, layout: Layout, width: int) -> tuple[list[tuple[int, Counter, set[str]]], dict]:
    """For each of the first `width` columns over every row: its nulls (empty or missing fields, what SQL
    reads as NULL), its null-like text (`_NULL_LIKE`), by spelling, and the kinds of its other values
    (`_kinds`), which SQL's type is read from over every row too: from the first TYPE_SAMPLE rows alone,
    a column whose 3,001st value was `abc` was shown as integers, and SQL read VARCHAR. Then the records
    whose field count is not the header's (`_ragged`)."""
    rows = (row for _, row in records(text, layout))
    header = next(rows, [])  # of a table without one, its first row: the width the others are held to
    if not layout.header:
        rows = chain([header], rows)
    counts = [(0, Counter(), set()) for _ in range(width)]
    lengths: Counter = Counter()
    while block := list(islice(rows, _NULL_BLOCK)):
        lengths.update(map(len, block))
        # a block's columns at once, and each counted by C built-ins: no Python call per value
        for index, column in zip(range(width), zip_longest(*block, fillvalue="")):
            nulls, null_like, kinds = counts[index]
            null_like.update(filter(_NULL_LIKE.__contains__, column))
            counts[index] = (nulls + column.count(""), null_like, _kinds(column, kinds))
        for index in range(max(map(len, block)), width):  # columns no row of the block reaches
            counts[index] = (counts[index][0] + len(block), *counts[index][1:])
    return counts, _ragged(lengths, len(header))


def _ragged(lengths: Counter, width: int) -> dict:
    """{"longer": records with more fields than the header's `width`, "widest": the most fields of one,
    "shorter": records with fewer}, each key only when there are such records; `lengths` counts the
    records of each field count."""
    ragged: dict = {}
    if longer := sum(n for length, n in lengths.items() if length > width):
        ragged["longer"] = longer
        ragged["widest"] = max(lengths)
    if shorter := sum(n for length, n in lengths.items() if length < width):
        ragged["shorter"] = shorter
    return ragged


def _line_rows(data: bytes) -> int:
    """Data rows of a text read without quoting: its non-blank lines after the header, counted with a
    C-speed pass instead of a parse."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buffer == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    if data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    lengths = ends - starts
    blank = (lengths == 0) | ((lengths == 1) & (buffer[np.minimum(starts, len(data) - 1)] == 13))
    return max(0, int(len(starts) - np.count_nonzero(blank)) - 1)


def _column(values: list[str]) -> dict:
    """A column's type and null counts from its values. The type leaves out nulls and null-like text;
    a value is read as SQL reads it (`_PATTERNS`)."""
    nulls = values.count("")
    null_like = Counter(filter(_NULL_LIKE.__contains__, values))
    column_type = _type_of(_kinds(values, set()))
    column: dict = {"type": column_type}
    if nulls:
        column["nulls"] = nulls
    if null_like:
        column["null_like"] = dict(null_like.most_common())
    return column


def _kinds(values: Iterable[str], kinds: set[str]) -> set[str]:
    """`kinds` with those of `values` (nulls and null-like text left out), each as SQL reads it. A block
    of values of the kinds already seen is told by one regular expression over them all (C speed); only
    one that is not is read value by value."""
    if "string" in kinds:
        return kinds
    present = [value for value in values if value and value not in _NULL_LIKE]
    if not present:
        return kinds
    if not kinds:  # the first values tell the kinds to look for
        _kinds_one_by_one(present[:64], kinds)
    huge = "integer" in kinds and max(map(len, present)) > 18  # perhaps beyond 64 bits: a float
    if "string" in kinds or not huge and _all_of(frozenset(kinds)).fullmatch("\x00".join(present) + "\x00"):
        return kinds
    return _kinds_one_by_one(present, kinds)


def _kinds_one_by_one(present: list[str], kinds: set[str]) -> set[str]:
    for value in dict.fromkeys(present):
        kind = next((name for name, pattern in _PATTERNS if pattern.fullmatch(value)), "string")
        if kind == "integer" and len(value) > 18 and not -_INT64 <= int(value, 16 if "x" in value.lower() else 10) < _INT64:
            kind = "float"
        kinds.add(kind)
        if kind == "string":
            break
    return kinds


@functools.lru_cache(maxsize=None)
def _all_of(kinds: frozenset[str]) -> re.Pattern:
    """Values of these kinds only, each followed by a NUL (which none of them holds). Each value with its
    NUL is an atomic group: once matched, never tried again another way, so a value of no such kind
    fails at once. Without it, a column of integers and floats that met `abc` backtracked through every
    way of reading each earlier value as either: 1.6 s for 40 values, exponential in them."""
    one = "(?:" + "|".join(pattern.pattern for name, pattern in _PATTERNS if name in kinds) + ")"
    return re.compile(f"(?>{one}\x00)*+", re.ASCII)


def _type_of(kinds: set[str]) -> str:
    if not kinds:
        return "null"
    if len(kinds) == 1:
        return next(iter(kinds))
    return _WIDER.get(frozenset(kinds), "string")
