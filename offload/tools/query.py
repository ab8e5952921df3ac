"""query_artifact: JMESPath, grep and SQL over one stored artifact, computed without side effects.

`QueryRunner.compute()` returns an Outcome: either an inline result that fits the budget, or the full
result's bytes for the caller to store as a derived artifact. Keeping the computation pure is what lets
`offload rerun` re-execute a logged extract and compare hashes without storing or logging anything.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import orjson

from ..content import parse_json
from ..errors import InvalidArgument, QueryError
from ..store import Store
from .engines import BoundedCache, grep_lines, jmespath_example, run_jmespath
from .slicing import _absolute, validate

if TYPE_CHECKING:
    from .sql import SqlTable

TABULAR = ("json", "ndjson", "csv")


@dataclass
class Outcome:
    op: str  # jmespath | grep | sql
    expression: str
    inline: dict[str, Any] | None = None  # the response when it fits
    derived: bytes | None = None  # the full result to store when it does not
    derived_kind: str = "json"
    count: int = 0

    @functools.cached_property
    def _result(self) -> bytes:
        """The full result as bytes: what was (or would be) stored, or the inline result's canonical JSON."""
        return self.derived if self.derived is not None else canonical(self.inline["result"])

    @property
    def result_sha256(self) -> str:
        return hashlib.sha256(self._result).hexdigest()

    @property
    def result_bytes(self) -> int:
        return len(self._result)


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


class QueryRunner:
    def __init__(self, store: Store, count: Callable[[str], int], budget: int, *, cache_bytes: int,
                 timeout: float):
        self.store, self.count, self.budget, self.timeout = store, count, budget, timeout
        self.cache = BoundedCache(cache_bytes)

    # -- cached parsed forms ----------------------------------------------------------------

    def raw(self, row: dict) -> bytes:
        return b"".join(self.store.iter_bytes(row["sha256"]))

    def document(self, row: dict) -> Any:
        """The parsed JSON document (NDJSON: the list of rows), cached by content hash."""
        if row["kind"] not in ("json", "ndjson"):
            raise InvalidArgument(
                f"{row['id']} is {row['kind']}, not JSON: JMESPath needs a JSON or NDJSON artifact. "
                "Use grep=\"regex\" to search its lines" + (", or sql=\"SELECT … FROM artifact\"."
                                                           if row["kind"] == "csv" else "."))
        key = ("doc", row["sha256"])
        doc = self.cache.get(key)
        if doc is None:
            data = self.raw(row)
            try:
                doc = (parse_json(data) if row["kind"] == "json"
                       else [parse_json(line) for line in data.splitlines() if line.strip()])
            except ValueError as exc:
                raise QueryError(f"{row['id']} could not be parsed as JSON: {exc}") from exc
            self.cache.put(key, doc, len(data) * 4)  # parsed objects weigh several times their text
        return doc

    def items_of(self, row: dict, path: str | None) -> list[Any]:
        doc = self.document(row)
        if path in (None, "", "@"):
            value = doc
        else:
            value = run_jmespath(doc, path)
        if not isinstance(value, list):
            raise InvalidArgument(f"path {path!r} does not lead to an array in {row['id']} (it is "
                                  f"{type(value).__name__}); try the path of an array, e.g. "
                                  f"{jmespath_example(doc)!r}.")
        return value

    def table(self, row: dict) -> "SqlTable":
        if row["kind"] not in TABULAR:
            raise InvalidArgument(
                f"SQL needs a tabular artifact (JSON array of objects, NDJSON, CSV/TSV); {row['id']} is "
                f"{row['kind']}. Use grep=\"regex\" to search its lines.")
        key = ("sql", row["sha256"])
        table = self.cache.get(key)
        if table is None:
            from .sql import SqlTable  # DuckDB loads on the first SQL query only

            data = self.raw(row)
            if row["kind"] == "csv":
                delimiter = "\t" if row["content_type"] == "text/tab-separated-values" else ","
                table = SqlTable.from_csv(data, delimiter=delimiter)
            elif row["kind"] == "ndjson":
                table = SqlTable.from_rows_ndjson(data)
            else:
                items = self.items_of(row, None) if data.lstrip()[:1] == b"[" else self._main_array(row)
                table = SqlTable.from_json_array(items)
            self.cache.put(key, table, max(getattr(table, "memory_bytes", 0), len(data)))
        return table

    def _main_array(self, row: dict) -> list[Any]:
        info = self.store.content(row["sha256"])
        if info.items_path:
            return self.items_of(row, info.items_path)
        raise InvalidArgument(f"{row['id']} is a JSON object without a main array to query as a table; use "
                              "jmespath instead.")

    # -- the three kinds of query -----------------------------------------------------------

    def compute(self, row: dict, *, jmespath: str | None = None, grep: str | None = None, sql: str | None = None,
                offset: int = 0, limit: int | None = None, context: int = 0) -> Outcome:
        given = [name for name, v in (("jmespath", jmespath), ("grep", grep), ("sql", sql)) if v is not None]
        if len(given) != 1:
            raise InvalidArgument("give exactly one of jmespath, grep or sql, e.g. "
                                  "query_artifact(artifact_id, grep=\"error\").")
        validate("lines", offset, limit)
        if not isinstance(context, int) or context < 0 or context > 50:
            raise InvalidArgument(f"context must be an integer from 0 to 50 (got {context!r}).")
        if jmespath is not None:
            return self._jmespath(row, jmespath, offset, limit)
        if grep is not None:
            return self._grep(row, grep, offset, limit, context)
        return self._sql(row, sql, offset, limit)

    def _fits(self, value: Any) -> bool:
        return self.count(orjson.dumps(value, default=str).decode()) <= self.budget

    def _inline(self, row: dict, op: str, expression: str, result: Any, count: int, next_offset: int | None,
                args: dict) -> Outcome:
        nxt = None
        if next_offset is not None:
            nxt = {"artifact_id": row["id"], op: expression, **{k: v for k, v in args.items() if v},
                   "offset": next_offset}
        return Outcome(op, expression, inline={
            "artifact_id": row["id"], "kind": op, "expression": expression, "result": result, "count": count,
            "next_offset": next_offset, "next": nxt}, count=count)

    def _page(self, row, op, expression, items: list[Any], offset: int, limit: int | None, args: dict,
              derived_kind: str, render: Callable[[list[Any]], bytes]) -> Outcome:
        """Page a list result: inline when it fits, else cut to the budget (limit given) or derived."""
        total = len(items)
        start = _absolute(offset, total)
        stop = total if limit is None else min(start + limit, total)
        page = items[start:stop]
        if self._fits(page):
            return self._inline(row, op, expression, page, total, stop if stop < total else None, args)
        if limit is None and start == 0:
            return Outcome(op, expression, derived=render(items), derived_kind=derived_kind, count=total)
        keep = _fit_prefix(page, self._fits)
        if keep == 0:
            return Outcome(op, expression, derived=render(page[:1]), derived_kind=derived_kind, count=total)
        return self._inline(row, op, expression, page[:keep], total, start + keep, args)

    def _jmespath(self, row: dict, expression: str, offset: int, limit: int | None) -> Outcome:
        result = run_jmespath(self.document(row), expression)
        if isinstance(result, list):
            return self._page(row, "jmespath", expression, result, offset, limit, {"limit": limit}, "json",
                              lambda items: orjson.dumps(items, default=str))
        count = 0 if result is None else 1
        if self._fits(result):
            return self._inline(row, "jmespath", expression, result, count, None, {})
        return Outcome("jmespath", expression, derived=orjson.dumps(result, default=str), count=count)

    def _lines(self, row: dict) -> Iterator[str]:
        carry = ""
        for data in self.store.iter_bytes(row["sha256"]):
            parts = (carry + data.decode("utf-8", errors="replace")).split("\n")
            carry = parts.pop()
            yield from parts
        if carry:
            yield carry

    def _grep(self, row: dict, pattern: str, offset: int, limit: int | None, context: int) -> Outcome:
        if row["kind"] == "binary":
            raise InvalidArgument(f"{row['id']} is binary data; grep searches text. Use fetch_slice(unit=\"bytes\").")
        page = grep_lines(self._lines(row), pattern, offset=offset, limit=limit, context=context,
                          timeout=self.timeout)
        lines = _grep_text(page.matches)
        args = {"limit": limit, "context": context}
        if self._fits(lines):
            nxt = page.next_offset
            return self._inline(row, "grep", pattern, lines, page.total, nxt, args)
        if limit is None and page.offset == 0:
            return Outcome("grep", pattern, derived=("\n".join(lines) + "\n").encode(), derived_kind="text",
                           count=page.total)
        # an explicit page too big for the budget: fewer matches, and say where to continue
        keep = _fit_prefix(list(range(page.returned)), lambda n: self._fits(_grep_text(
            _first_matches(page.matches, len(n)))))
        kept = _first_matches(page.matches, max(keep, 1))
        nxt = page.offset + max(keep, 1)
        return self._inline(row, "grep", pattern, _grep_text(kept), page.total,
                            nxt if nxt < page.total else None, args)

    def _sql(self, row: dict, sql: str, offset: int, limit: int | None) -> Outcome:
        if offset < 0:
            raise InvalidArgument("SQL results page forward only: use offset >= 0, or ORDER BY … DESC.")
        table = self.table(row)
        result = table.execute(sql, timeout=self.timeout)
        rows: list[dict] = []
        spill: list[bytes] | None = None  # every row, once the whole result is known not to fit inline
        total = 0
        try:
            for item in result.iter_rows():
                total += 1  # counted to the end, so `count` is exact even for a page
                if spill is not None:
                    spill.append(orjson.dumps(item, default=str))
                elif total > offset and (limit is None or len(rows) < limit):
                    rows.append(item)
                    if limit is None and offset == 0 and len(rows) % 200 == 0 and not self._fits(rows):
                        spill = [orjson.dumps(r, default=str) for r in rows]
        finally:
            result.close()
        if spill is not None:
            return Outcome("sql", sql, derived=b"\n".join(spill) + b"\n", derived_kind="ndjson", count=total)
        end = offset + len(rows)
        if self._fits(rows):
            return self._inline(row, "sql", sql, rows, total, end if end < total else None, {"limit": limit})
        if limit is None and offset == 0:
            return Outcome("sql", sql, derived=b"\n".join(orjson.dumps(r, default=str) for r in rows) + b"\n",
                           derived_kind="ndjson", count=total)
        keep = max(_fit_prefix(rows, self._fits), 1)
        return self._inline(row, "sql", sql, rows[:keep], total, offset + keep, {"limit": limit})


def _fit_prefix(items: list[Any], fits: Callable[[list[Any]], bool]) -> int:
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(items[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_matches(matches: list[dict], n: int) -> list[dict]:
    """The entries of a grep page up to and including the context of its n-th match."""
    seen = 0
    out = []
    for entry in matches:
        if entry["match"]:
            if seen == n:
                break
            seen += 1
        out.append(entry)
    return out


def _grep_text(matches: list[dict]) -> list[str]:
    """Lines as grep -n prints them: "12: text" for a match, "13- text" for context, "--" between groups."""
    lines: list[str] = []
    previous = None
    all_matches = all(entry["match"] for entry in matches)  # no context asked: no group separators
    for entry in matches:
        if previous is not None and entry["line"] != previous + 1 and not all_matches:
            lines.append("--")
        lines.append(f"{entry['line']}{':' if entry['match'] else '-'} {entry['text']}")
        previous = entry["line"]
    return lines
