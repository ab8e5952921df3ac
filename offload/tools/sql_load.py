"""How an artifact becomes the SQL table `artifact` (tools/sql.py): its bytes written to a private
folder and read by DuckDB, CSV with the rules its shape is read with (content/table.py), JSON with keys
that differ only in case renamed, since DuckDB's names ignore case. Each returns the notes that a query's
result carries: which column holds which key, which lines were ragged.
"""

from __future__ import annotations

import csv
import os
import re
from itertools import islice
from typing import Any

import duckdb
import orjson

from offload.content import parse_json
from offload.content.table import QUOTE, Layout, column_names, extra_names, read_layout, records, row_names
from offload.errors import QueryError
from offload.jsontext import dumps

__all__ = ["fill_csv", "fill_json"]


def _write(folder: str, name: str, data: bytes) -> str:
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return path


def _read_json(conn: duckdb.DuckDBPyConnection, path: str, fmt: str, size: int) -> None:
    # sample_size=-1 infers the schema from every row: with the default sample a field that first
    # appears after row 20,480 is silently missing from the table.
    most = 16 * 1024 * 1024
    while True:
        try:
            conn.execute(
                "CREATE TABLE artifact AS SELECT * FROM read_json(?, format := ?, sample_size := -1, "
                "maximum_object_size := ?)",
                [path, fmt, most],
            )
            return
        except duckdb.InvalidInputException as exc:
            # One row is bigger than the parse buffer: retry once with room for the whole input.
            if "maximum_object_size" not in str(exc) or most > size:
                raise
            most = size + 1


def fill_json(conn: duckdb.DuckDBPyConnection, folder: str, data: bytes, fmt: str,
              items: list[Any] | None) -> list[str]:
    """JSON rows as the table, each key a column. DuckDB's names ignore case: it names a second key
    differing only in case `name_1`, and `name` then reads the column of `Name` (nested, it fails). Such
    keys are renamed first (`_case_renames`), and the note says which column holds which key."""
    try:
        _read_rows(conn, folder, data, fmt, items)
        failed = None
        if not _renamed_by_duckdb([name for (name,) in conn.execute("SELECT column_name FROM "
                                                                    "(DESCRIBE artifact)").fetchall()]):
            return []
    except duckdb.NotImplementedException as exc:  # "Duplicate name "x" in struct": nested keys
        if "Duplicate name" not in str(exc):
            raise
        failed = exc
    if items is None:
        items = _rows(data, fmt)
    renames = _case_renames(items)
    if not renames:
        if failed is not None:
            raise failed
        return []
    conn.execute("DROP TABLE IF EXISTS artifact")
    renamed = dumps([_renamed(item, (), renames) for item in items])
    _read_json(conn, _write(folder, "renamed.json", renamed), "array", len(renamed))
    return [_renames_note(renames)]


def _rows(data: bytes, fmt: str) -> list[Any]:
    """The document's rows, parsed: its main array, or its NDJSON lines."""
    return parse_json(data) if fmt == "array" else [parse_json(line) for line in data.splitlines() if line.strip()]


def _read_rows(conn: duckdb.DuckDBPyConnection, folder: str, data: bytes, fmt: str, items: list[Any] | None) -> None:
    """The document as the table, or its rows as objects when DuckDB calls it malformed (`_read_scalars`)."""
    try:
        _read_json(conn, _write(folder, "artifact.json", data), fmt, len(data))
    except duckdb.InvalidInputException as exc:
        if "Malformed JSON" not in str(exc) or not _read_scalars(conn, folder, data, fmt, items):
            raise


def _read_scalars(conn: duckdb.DuckDBPyConnection, folder: str, data: bytes, fmt: str,
                  items: list[Any] | None) -> bool:
    """Rows that are no objects, as objects of one key, `json`, the column DuckDB names them: its reader
    calls a valid document malformed when a row is an integer beyond 64 bits ([10**40, 1]: "Malformed
    JSON at byte 42"), which it reads inside an object (as a DOUBLE). False when some row is an object."""
    if items is None:
        try:
            items = _rows(data, fmt)
        except ValueError:  # malformed indeed: DuckDB's error says where
            return False
    if not isinstance(items, list) or any(isinstance(item, dict) for item in items):
        return False
    wrapped = dumps([{"json": item} for item in items])
    _read_json(conn, _write(folder, "scalars.json", wrapped), "array", len(wrapped))
    return True


_SUFFIXED = re.compile(r"(.+)_\d+")


def _renamed_by_duckdb(columns: list[str]) -> bool:
    """Whether DuckDB may have renamed a key (to `name_1` beside `Name`): a cheap test on the columns,
    true for every table it renamed in, so that the exact one (`_case_renames`) runs only then."""
    lowered = {name.lower() for name in columns}
    return any((match := _SUFFIXED.fullmatch(name)) and match[1].lower() in lowered for name in columns)


Scope = tuple[str, ...]  # the keys leading to an object ("[]" for an array's elements); () for the rows


def _case_renames(items: list[Any]) -> dict[Scope, dict[str, str]]:
    """For each object scope (the rows, or a key's objects, which DuckDB gives one struct type), the keys
    to rename: every one of keys equal but for case, the n-th found becoming `key_n` (the next free
    number when a key of the scope has that name in any case). None keeps its name, so that a query naming
    one fails, the note saying which is which, instead of reading another key's values."""
    scopes: dict[Scope, dict[str, None]] = {}
    stack: list[tuple[Any, Scope]] = [(item, ()) for item in reversed(items) if isinstance(item, (dict, list))]
    while stack:  # a loop, not a recursion: documents are queried up to 1,024 levels deep
        value, scope = stack.pop()
        if isinstance(value, dict):
            keys = scopes.setdefault(scope, {})
            for key, item in value.items():
                keys[key] = None
                if isinstance(item, (dict, list)):
                    stack.append((item, (*scope, key)))
        else:
            inner = (*scope, "[]")
            # in reverse, so that elements are visited in order: the n-th key found is `key_n`
            stack.extend((item, inner) for item in reversed(value) if isinstance(item, (dict, list)))
    renames: dict[Scope, dict[str, str]] = {}
    for scope, keys in scopes.items():
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(key.lower(), []).append(key)
        taken = set(groups)
        for group in groups.values():
            if len(group) == 1:
                continue
            for n, key in enumerate(group, 1):
                while f"{key}_{n}".lower() in taken:
                    n += 1
                renames.setdefault(scope, {})[key] = name = f"{key}_{n}"
                taken.add(name.lower())
    return renames


def _renamed(value: Any, scope: Scope, renames: dict[Scope, dict[str, str]]) -> Any:
    """`value` with the keys `renames` names renamed, at every depth; a copy (the value may be cached).
    One loop over a stack, as `engines.detached`, which this is with the renames."""
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack = [(value, root, scope)]
    while stack:
        source, copy, where = stack.pop()
        if type(copy) is dict:
            names = renames.get(where, {})
            pairs = ((names.get(key, key), key, item) for key, item in source.items())
        else:
            copy.extend([None] * len(source))
            pairs = ((at, "[]", item) for at, item in enumerate(source))
        for slot, key, item in pairs:
            if isinstance(item, (dict, list)):
                child: Any = {} if isinstance(item, dict) else []
                stack.append((item, child, (*where, key)))
            else:
                child = item
            copy[slot] = child
    return root


def _renames_note(renames: dict[Scope, dict[str, str]]) -> str:
    pairs = [(".".join((*scope, name)).replace(".[]", "[]"), key)
             for scope, names in renames.items() for key, name in names.items()]
    shown = "; ".join(f"{orjson.dumps(column).decode()} holds the key {orjson.dumps(key).decode()}"
                      for column, key in pairs[:8])
    more = f"; and {len(pairs) - 8:,} more" if len(pairs) > 8 else ""
    return f"SQL names ignore case, so keys differing only in case are renamed: {shown}{more}."


def fill_csv(conn: duckdb.DuckDBPyConnection, folder: str, data: bytes, delimiter: str,
             header: bool) -> list[str]:
    """CSV as the table, read as its shape reads it (`read_layout`, `records`, `column_names`). DuckDB
    reads the bytes itself when its reading cannot differ (no quote beside a space, which it would trim)
    and it finds the shape's rows; otherwise Python's csv reads them and DuckDB gets them back rectangular,
    a ragged record's extra fields in extra columns and its missing ones NULL, which a note names."""
    text = data.decode("utf-8", "replace")
    try:
        layout = read_layout(data, text, delimiter)
        first = next(records(text, layout), (0, []))[1]
    except csv.Error as exc:
        raise _unreadable(exc) from exc
    # a table without a header row (`Layout.header`) is read as one, its columns named column0…
    expected = layout.rows + (1 if layout.header and not header and first else 0)
    header = header and layout.header
    names = column_names(first) if header else row_names(len(first))
    path = _write(folder, "artifact.csv", data)
    # DuckDB reads the bytes itself unless it would read other rows: a framed table's, a footer (a row to
    # it), a quote beside a space
    if not layout.framed and not layout.footer and (not layout.quote or QUOTE not in text or not _spaced_quote(text)):
        try:
            _read_csv(conn, path, delimiter, layout.quote, header, names, layout.comments)
            columns = conn.execute("SELECT count(*) FROM (DESCRIBE artifact)").fetchone()[0]
            if conn.execute("SELECT count(*) FROM artifact").fetchone()[0] == expected and columns == len(names):
                return _names_note(first, names if header else None)
        except duckdb.OutOfMemoryException:
            raise
        except duckdb.Error:
            pass  # a ragged record, a blank-looking line, bytes not UTF-8…: read by Python instead
        conn.execute("DROP TABLE IF EXISTS artifact")
    try:
        names, notes = _rectangular(folder, text, layout, header, first)
    except csv.Error as exc:
        raise _unreadable(exc) from exc
    _read_csv(conn, os.path.join(folder, "rectangular.csv"), ",", QUOTE, False, names)
    if "\ufffd" in text and not _utf8(data):
        notes.append("Bytes that are not UTF-8 are read as U+FFFD (the stored bytes are unchanged).")
    return _names_note(first, names if header else None) + notes


def _spaced_quote(text: str) -> bool:
    """Whether a quote may have a space between it and a field's edge, which DuckDB trims and Python's
    csv keeps (with the quotes): a space beside any quote, a cheap test that may say yes for nothing."""
    return ' "' in text or '" ' in text


def _read_csv(conn: duckdb.DuckDBPyConnection, path: str, delimiter: str, quote: str, header: bool,
              names: list[str] | None, skip: int = 0) -> None:
    # Every choice given, none sniffed but the types: no comment lines (DuckDB's sniffer may take `#…`
    # lines for comments and drop them), no rows skipped but a preamble of comments (`Layout.comments`).
    options = {"delim": delimiter, "quote": quote, "escape": quote, "header": header, "comment": "",
               "skip": skip}
    if names is not None:
        options["names"] = names
    named = "".join(f", {key} := ?" for key in options)
    conn.execute(f"CREATE TABLE artifact AS SELECT * FROM read_csv(?, sample_size := -1{named})",
                 [path, *options.values()])


def _rectangular(folder: str, text: str, layout: Layout, header: bool,
                 first: list[str]) -> tuple[list[str], list[str]]:
    """Write every record, in `folder`/rectangular.csv, as wide as the widest (the header left out); the
    columns' names and the note on ragged records."""
    width = len(first)
    widest, longer, shorter = width, [0, []], [0, []]
    rows = records(text, layout)
    if header:
        next(rows, None)
    for line, row in rows:
        if len(row) != width:
            ragged = longer if len(row) > width else shorter
            ragged[0] += 1
            if len(ragged[1]) < 5:
                ragged[1].append(line)
            widest = max(widest, len(row))
    if header:
        names = column_names(first)  # the shape's, and past them names no header name takes in any case
        names += extra_names(names, widest)
    else:
        names = row_names(widest)
    with open(os.path.join(folder, "rectangular.csv"), "x", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, quoting=csv.QUOTE_ALL, lineterminator="\n")  # an empty field: NULL
        rows = records(text, layout)
        if header:
            next(rows, None)
        pad = [""] * widest
        while block := list(islice(rows, 10_000)):
            writer.writerows(row + pad[len(row):] for _, row in block)
    notes, whose = [], "header's" if header else "first row's"
    if longer[0]:
        extra = [orjson.dumps(name).decode() for name in names[width:]]
        columns = (f"column {extra[0]}" if len(extra) == 1
                   else f"columns {', '.join(extra) if len(extra) <= 4 else f'{extra[0]} … {extra[-1]}'}")
        notes.append(f"{_lines(longer)} more fields than the {whose} {width:,}: the extra ones are in "
                     f"{columns} (NULL in the other rows).")
    if shorter[0]:
        notes.append(f"{_lines(shorter)} fewer fields than the {whose} {width:,}: the missing ones are NULL.")
    if notes:
        notes[-1] += (" Lines are numbered as fetch_slice and grep number them (0-based): "
                      "fetch_slice(offset=LINE, limit=1) reads one.")
    return names, notes


def _lines(ragged: list) -> str:
    count, lines = ragged
    shown = ", ".join(f"{line:,}" for line in lines)
    if count == 1:
        return f"1 record (line {shown}) has"
    more = f" and {count - len(lines):,} more" if count > len(lines) else ""
    return f"{count:,} records (lines {shown}{more}) have"


def _names_note(header: list[str], names: list[str] | None) -> list[str]:
    """The note on columns whose name is not their header field's (a repeated name, or one differing
    from another only in case, is suffixed: SQL names ignore case)."""
    if names is None:
        return []
    renamed = [(name, field) for field, name in zip(header, names) if field.strip() and name != field.strip()
               and name != field.lstrip("\ufeff").strip()]
    if not renamed:
        return []
    shown = "; ".join(f"{orjson.dumps(name).decode()} is the header's {orjson.dumps(field).decode()}"
                      for name, field in renamed[:8])
    more = f"; and {len(renamed) - 8:,} more" if len(renamed) > 8 else ""
    return [f"SQL names ignore case, so header names that repeat, in any case, are told apart as the shape "
            f"names them: {shown}{more}."]


def _utf8(data: bytes) -> bool:
    if data.isascii():  # most tables: no copy
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _unreadable(exc: csv.Error) -> QueryError:
    return QueryError(f"The artifact could not be read as CSV for SQL ({exc}). Look at its lines with grep or "
                      "fetch_slice, or query it with grep instead.")
