"""query_artifact: JMESPath, grep and SQL over one stored artifact, computed without side effects.

`QueryRunner.compute()` returns an Outcome: either an inline result that fits the budget, or the full
result's bytes for the caller to store as a derived artifact. Keeping the computation pure is what lets
`offload rerun` re-execute a logged extract and compare hashes without storing or logging anything.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..content import parse_json
from ..content.detect import sniff_delimiter
from ..content.preview import NEWLINE_SHOWN
from ..content.shape import find_main
from ..errors import InvalidArgument, QueryError, QueryTimeout, ResultTooLarge
from ..jsontext import dumps, standard_text
from ..store import Store
from ..tokens import surely_over
from .engines import BoundedCache, detached, grep_lines, jmespath_example, quoted_field_note, run_jmespath
from .grep import match_span, unspaced
from .schemas import encode_item, render_query
from .pages import absolute, nul_entries, validate
from ..utf8 import encodable

if TYPE_CHECKING:
    from .sql import SqlTable

TABULAR = ("json", "ndjson", "csv")
ENTRIES_NOTE = ("the lines are the NUL-separated entries, numbered as fetch_slice(unit=\"items\") numbers them; "
                "a newline inside one is shown as \u2424")


@dataclass
class Outcome:
    op: str  # jmespath | grep | sql
    expression: str
    inline: dict[str, Any] | None = None  # the response when it fits
    derived: bytes | None = None  # the full result to store when it does not
    derived_kind: str = "json"
    count: int = 0
    # said beside a derived result: how the artifact became SQL's table (renamed keys, ragged lines), or
    # that a string was stored as its text
    note: str | None = None

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


def _derived_value(expression: str, result: Any, count: int) -> Outcome:
    """A JMESPath result too big to return, to store: a string as its text, so that its lines page and
    grep (a web page's `body`, stored as one JSON string, was one line of `\n` escapes); anything else,
    and a string that UTF-8 cannot hold (a lone surrogate), as JSON."""
    if isinstance(result, str):
        try:
            text = result.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return Outcome("jmespath", expression, derived=text, derived_kind="text", count=count,
                           note="The result is a string: stored as its text, not as a JSON string, so its lines "
                                "page and grep.")
    return Outcome("jmespath", expression, derived=dumps(result), count=count)


def canonical(value: Any) -> bytes:
    return dumps(value, sort_keys=True)


class QueryRunner:
    def __init__(self, store: Store, count: Callable[[str], int], budget: int, *, cache_bytes: int,
                 timeout: float, result_bytes: int = 64 * 1024**2):
        self.store, self.count, self.budget, self.timeout = store, count, budget, timeout
        self.result_bytes = result_bytes  # the largest SQL result stored as a derived artifact
        self.cache = BoundedCache(cache_bytes)

    # -- cached parsed forms ----------------------------------------------------------------

    def raw(self, row: dict) -> bytes:
        return b"".join(self.store.iter_bytes(row["sha256"]))

    def document(self, row: dict) -> Any:
        """The parsed JSON document (NDJSON: the list of rows), cached by content hash. Shared: read it,
        never edit it, and hand out copies (`detached`) or `parsed_copy`."""
        key = ("doc", row["sha256"])
        doc = self.cache.get(key)
        if doc is None:
            doc = self.parsed_copy(row)
            self.cache.put(key, doc, row["bytes"] * 4)  # parsed objects weigh several times their text
        return doc

    def parsed_copy(self, row: dict) -> Any:
        """The document parsed afresh, owned by the caller (for a whole document, parsing is ~3x faster
        than copying the cached one)."""
        if row["kind"] not in ("json", "ndjson"):
            raise InvalidArgument(
                f"{row['id']} is {row['kind']}, not JSON: JMESPath needs a JSON or NDJSON artifact. "
                + _instead(row["kind"], "sql=\"SELECT … FROM artifact\"" if row["kind"] == "csv" else None))
        data = self.raw(row)
        try:
            return (parse_json(data) if row["kind"] == "json"
                    else [parse_json(line) for line in data.splitlines() if line.strip()])
        except ValueError as exc:
            raise QueryError(f"{row['id']} could not be parsed as JSON: {exc}") from exc

    def items_of(self, row: dict, path: str | None) -> list[Any]:
        """The array `path` leads to; without a path, the main array the reference named (find_main)."""
        doc = self.document(row)
        if path is None:
            return _main_array(row, doc, "{id} has no main array to page: its main value (`{path}`) is {what}. "
                                         "Give path= the JMESPath of an array, or query it with jmespath, e.g. "
                                         "{example!r}.")
        value = doc if path in ("", "@") else run_jmespath(doc, path)
        if not isinstance(value, list):
            raise InvalidArgument(f"path {path!r} does not lead to an array in {row['id']} (it is "
                                  f"{_json_kind(value)}); try the path of an array, e.g. "
                                  f"{jmespath_example(doc)!r}.")
        return value

    def table(self, row: dict) -> "SqlTable":
        if row["kind"] not in TABULAR:
            raise InvalidArgument(
                f"SQL needs a tabular artifact (JSON array of objects, NDJSON, CSV/TSV); {row['id']} is "
                f"{row['kind']}. " + _instead(row["kind"]))
        key = ("sql", row["sha256"])
        table = self.cache.get(key)
        if table is None:
            data = self.raw(row)
            try:
                table = self._load_table(row, data)
            except QueryError as exc:
                if "surrogate" not in str(exc):
                    raise
                raise QueryError(f"SQL cannot read {row['id']}: it holds a string with a lone surrogate (a \\ud83d "
                                 "escape: a JavaScript string cut inside an emoji), which DuckDB refuses. Query it "
                                 "with jmespath instead, which reads such strings exactly.") from exc
            self.cache.put(key, table, max(getattr(table, "memory_bytes", 0), len(data)))
        return table

    def _load_table(self, row: dict, data: bytes) -> SqlTable:
        from .sql import SqlTable  # DuckDB loads on the first SQL query only

        if row["kind"] == "csv":
            # the delimiter detection found and the shape names (`;` and `|` too): found again from the
            # bytes alone, as the table is cached by them
            tsv = row["content_type"] == "text/tab-separated-values"
            delimiter = sniff_delimiter(data) or ("\t" if tsv else ",")
            return SqlTable.from_csv(data, delimiter=delimiter)
        if row["kind"] == "ndjson":
            return SqlTable.from_rows_ndjson(data)
        doc = self.document(row)
        main = _main_array(row, doc, "SQL reads the main array of a JSON artifact as its table, and {id} has none: "
                                     "its main value (`{path}`) is {what}. Query it with jmespath instead, e.g. "
                                     "query_artifact(artifact_id=\"{id}\", jmespath={example_json}).")
        return SqlTable.from_json_array(main)  # the main array the reference named

    # -- the three kinds of query -----------------------------------------------------------

    def compute(self, row: dict, *, jmespath: str | None = None, grep: str | None = None, sql: str | None = None,
                offset: int = 0, limit: int | None = None, context: int = 0) -> Outcome:
        given = [name for name, v in (("jmespath", jmespath), ("grep", grep), ("sql", sql)) if v is not None]
        if len(given) != 1:
            raise InvalidArgument("give exactly one of jmespath, grep or sql, e.g. "
                                  "query_artifact(artifact_id, grep=\"error\").")
        expression = {"jmespath": jmespath, "grep": grep, "sql": sql}[given[0]]
        if not isinstance(expression, str):
            raise InvalidArgument(f"{given[0]} must be a string (got {type(expression).__name__}), e.g. "
                                  "query_artifact(artifact_id, grep=\"error\").")
        if grep == "":  # it matches every line: a copy of the whole artifact, stored again as a derived one
            raise InvalidArgument("grep is empty, which matches every line: give a regex (e.g. grep=\"error\"), or "
                                  "page the whole artifact with fetch_slice.")
        if sql is not None and not encodable(sql):  # DuckDB takes UTF-8 only (jmespath and grep take them)
            raise InvalidArgument("sql holds a lone surrogate (an escape such as \\ud800 with no pair), which "
                                  "DuckDB cannot read: match around it (LIKE 'a%b'), or use jmespath, which can.")
        if type(limit) is int and limit == 0:  # an empty page whose `next` would be this same call again
            raise InvalidArgument("limit must be at least 1 (got 0); omit it (null) for the whole result, "
                                  "or use offset to skip results.")
        validate("lines", offset, limit)
        if not isinstance(context, int) or context < 0 or context > 50:
            raise InvalidArgument(f"context must be an integer from 0 to 50 (got {context!r}).")
        if context and grep is None:  # said, not ignored: the model would think it got the lines around
            raise InvalidArgument(f"context is the lines around each grep match; {given[0]} has none: omit it.")
        if jmespath is not None:
            return self._jmespath(row, jmespath, offset, limit)
        if grep is not None:
            return self._grep(row, grep, offset, limit, context)
        return self._sql(row, sql, offset, limit)

    def _fits(self, response: dict, pieces: list[str] | None = None) -> bool:
        """Whether what the model reads fits the budget: the rendered text (OpenAI, Anthropic, MCP content)
        and the structured JSON (MCP structuredContent, HTTP), each counted whole with its envelope."""
        text = render_query(response, pieces)
        if surely_over(len(text.encode("utf-8", "surrogatepass")), self.budget) or self.count(text) > self.budget:
            return False
        try:
            structured = json.dumps(response, ensure_ascii=False, default=str)
        except RecursionError:  # a result nested deeper than the encoder goes: the same text, by a loop
            structured = standard_text(response)
        return self.count(structured) <= self.budget

    def _response(self, row: dict, op: str, expression: str, result: Any, count: int, next_offset: int | None,
                  args: dict, cut: str | None = None, note: str | None = None) -> dict:
        nxt = None
        if next_offset is not None:
            # the exact following call: the same arguments, with defaults (no limit, no context) left out
            given = {k: v for k, v in args.items() if v is not None and not (k == "context" and v == 0)}
            nxt = {"artifact_id": row["id"], op: expression, **given, "offset": next_offset}
        response = {"artifact_id": row["id"], "kind": op, "expression": expression, "result": result,
                    "count": count, "next_offset": next_offset, "next": nxt}
        if cut is not None:
            response["cut"] = cut
        if note:
            response["note"] = note
        return response

    def _inline(self, response: dict) -> Outcome:
        return Outcome(response["kind"], response["expression"], inline=response, count=response["count"])

    def _too_small(self, op: str) -> QueryError:
        return QueryError(f"The query budget ({self.budget:,} tokens) cannot hold even an empty page of this "
                          f"{op} result with its expression; shorten the expression or raise query_tokens.")

    def _page(self, row: dict, op: str, expression: str, page: list[Any], start: int, total: int, args: dict,
              whole: Callable[[], Outcome] | None, note: str | None = None) -> Outcome:
        """A page of a list result (elements start… of total): inline when it fits; else the derived whole
        result when the whole was asked for (`whole`), else the longest prefix that fits, `next` just past it."""

        def respond(n: int, cut: str | None = None) -> dict:
            end = start + n
            return self._response(row, op, expression, page[:n], total, end if end < total else None, args, cut,
                                  note)

        bound = self._bound(len(dumps(item)) for item in page)
        pieces = [encode_item(item) for item in page[:bound]]  # encoded once for every prefix measured
        if bound == len(page) and self._fits(respond(len(page)), pieces):
            return self._inline(respond(len(page)))
        if whole is not None:
            return whole()
        keep = _fit_prefix(bound, lambda n: self._fits(respond(n), pieces[:n]))
        if keep:
            return self._inline(respond(keep))
        return self._inline(self._left_out(row, op, expression, page[0], start, respond))

    def _bound(self, sizes: Iterable[int]) -> int:
        """How many leading elements may fit at all: past this many their bytes alone surely exceed the
        budget, so a page of 100,000 rows is never rendered and counted whole."""
        fitting, used = 0, 0
        for size in sizes:
            used += size
            if surely_over(used, self.budget):
                break
            fitting += 1
        return fitting

    def _left_out(self, row: dict, op: str, expression: str, element: Any, index: int,
                  respond: Callable[..., dict]) -> dict:
        """A page whose first element alone is over the budget: that element is left out (a JSON value cut
        short would be wrong data), `next` goes on after it, and `cut` names the call that stores it whole
        as its own artifact (to read with fetch_slice)."""
        if op == "jmespath":
            alone = {"artifact_id": row["id"], "jmespath": f"({expression})[{index}]"}
        else:
            alone = {"artifact_id": row["id"], "sql": f"SELECT * FROM (\n{_unterminated(expression)}\n) "
                                                      f"LIMIT 1 OFFSET {index}"}
        size = len(dumps(element))
        cut = (f"result {index:,} alone ({size:,} bytes of JSON) is more than this page's budget of "
               f"{self.budget:,} tokens, so it is not shown; query_artifact("
               + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in alone.items())
               + ") stores it whole as a new artifact; next continues after it")
        response = respond(1, cut)
        response["result"] = []
        if not self._fits(response):
            raise self._too_small(op)
        return response

    def _jmespath(self, row: dict, expression: str, offset: int, limit: int | None) -> Outcome:
        doc = self.document(row)
        result = run_jmespath(doc, expression, self.result_bytes)
        note = quoted_field_note(doc, expression)
        if isinstance(result, list):
            total = len(result)
            start = absolute(offset, total)
            page = result[start:total if limit is None else start + limit]
            outcome = self._page(row, "jmespath", expression, page, start, total, {"limit": limit}, whole=(
                lambda: Outcome("jmespath", expression, derived=dumps(result), count=total))
                if limit is None and start == 0 else None, note=note)
        else:
            count = 0 if result is None else 1
            response = self._response(row, "jmespath", expression, result, count, None, {}, note=note)
            if not self._fits(response):
                return _derived_value(expression, result, count)
            outcome = self._inline(response)
        if outcome.inline is not None:
            # the result shares objects with the cached document: hand out a copy of the page only, so that
            # a caller editing its answer cannot change what later queries see
            outcome.inline["result"] = detached(outcome.inline["result"])
        return outcome

    def _lines(self, row: dict, entries: bool = False) -> Iterator[str]:
        """The lines of the content, as the preview shows them (without the CR of a CRLF ending: `ok$`
        matched none of 20,000 lines ending in "ok\r\n"), or its NUL-separated entries (a newline inside
        one shown as ␤). A CR just before a block's end is kept in `carry` until the LF comes."""
        carry, sep = "", "\x00" if entries else "\n"
        for data in self.store.iter_bytes(row["sha256"]):
            text = carry + data.decode("utf-8", errors="replace")
            if not entries and "\r" in text:
                text = text.replace("\r\n", "\n")
            parts = text.split(sep)
            carry = parts.pop()
            yield from (part.replace("\n", NEWLINE_SHOWN) for part in parts) if entries else parts
        if carry:
            yield carry.replace("\n", NEWLINE_SHOWN) if entries else carry

    def _grep(self, row: dict, pattern: str, offset: int, limit: int | None, context: int) -> Outcome:
        if row["kind"] == "binary":
            raise InvalidArgument(f"{row['id']} is binary data; grep searches text. Use fetch_slice(unit=\"bytes\").")
        entries = nul_entries(row)  # grep matches entries, not the one line they make
        page = grep_lines(self._lines(row, entries), pattern, offset=offset, limit=limit, context=context,
                          timeout=self.timeout)
        args = {"limit": limit, "context": context}
        note = ENTRIES_NOTE if entries else self._unspaced_note(row, pattern) if not page.total else None
        if page.total and row["kind"] in ("json", "ndjson") and row["lines"] <= 1:
            # a count of matching lines, of one line: a web page in a JSON string matched "1 result", not 387
            note = ("The document is one line of JSON, so a match is all of it: take a part with jmespath "
                    "(a string comes back as its text, and its lines grep and page)")

        def respond(n: int, lines: list[str] | None = None, cut: str | None = None) -> dict:
            end = page.offset + n
            if lines is None:
                lines = _grep_text(_first_matches(page.matches, n, context))
            response = self._response(row, "grep", pattern, lines, page.total, end if end < page.total else None,
                                      args, cut, note)
            return response

        bound = self._bound(len(entry["text"]) for entry in page.matches if entry["match"])
        if bound == page.returned and self._fits(respond(page.returned)):
            return self._inline(respond(page.returned))
        if limit is None and page.offset == 0:
            lines = _grep_text(page.matches)
            return Outcome("grep", pattern, derived=("\n".join(lines) + "\n").encode(), derived_kind="text",
                           count=page.total)
        # an explicit page too big for the budget: fewer matches, and say where to continue
        keep = _fit_prefix(bound, lambda n: self._fits(respond(n)))
        if keep:
            return self._inline(respond(keep))
        return self._inline(self._cut_lines(row, pattern, _first_matches(page.matches, 1, context), respond, entries))

    def _cut_lines(self, row: dict, pattern: str, entries: list[dict], respond: Callable[..., dict],
                   nul: bool = False) -> dict:
        """One match (with its context) over the budget: its lines are cut to the longest length that
        fits, each cut line saying so; `cut` names them and the fetch_slice call that reads one whole
        (`nul`: the lines are NUL-separated entries, read whole as items)."""
        longest = max(len(entry["text"]) for entry in entries)
        noun, unit = ("entr", 'unit="items", ') if nul else ("line", "")
        # a match line is cut around its match, which may lie past any start that fits (minified JSON)
        spans = {entry["line"]: match_span(pattern, entry["text"]) for entry in entries if entry["match"]}

        def shown_part(entry: dict, width: int) -> str:
            text, span = entry["text"], spans.get(entry["line"])
            start = 0 if span is None or span[1] <= width else max(0, min(span[0] - width // 4, len(text) - width))
            part = text[start:start + width]
            before = f"…[cut: {start:,} characters before] " if start else ""
            after = len(text) - start - len(part)
            return before + part + (f" …[cut: {after:,} more characters]" if after else "")

        def attempt(width: int) -> dict:
            shown = [{**entry, "text": shown_part(entry, width)} if len(entry["text"]) > width else entry
                     for entry in entries]
            cut_at = [entry["line"] for entry in entries if len(entry["text"]) > width]
            first = cut_at[0]
            many = len(cut_at) > 1
            cut = (f"{noun}{('ies' if many else 'y') if nul else ('s' if many else '')} "
                   f"{', '.join(f'{n:,}' for n in cut_at)} "
                   f"{'are' if many else 'is'} longer than this page's budget allows and "
                   f"{'are' if many else 'is'} cut to {width:,} characters (a match line around its match); "
                   f"fetch_slice(artifact_id=\"{row['id']}\", {unit}offset={first}, limit=1) reads "
                   f"{noun}{'y' if nul else ''} {first:,} whole, page by page")
            return respond(1, _grep_text(shown), cut)

        if not self._fits(attempt(0)):
            raise self._too_small("grep")
        return attempt(_fit_prefix(longest - 1, lambda width: self._fits(attempt(width))))

    def _unspaced_note(self, row: dict, pattern: str) -> str | None:
        """For a pattern that matched nothing in JSON, spaced as the preview shows JSON (`"id": 7`): the
        same pattern without the spaces after `:` and `,`, when it matches, since compact JSON (an API's,
        or a Python object's as offload stores it) has none."""
        plain = unspaced(pattern) if row["kind"] in ("json", "ndjson") else None
        if plain is None:
            return None
        try:
            found = grep_lines(self._lines(row), plain, limit=0, timeout=self.timeout).total
        except (QueryError, QueryTimeout):
            return None
        if not found:
            return None
        call = f'query_artifact(artifact_id="{row["id"]}", grep={json.dumps(plain, ensure_ascii=False)})'
        return (f"the stored JSON has no space after \":\" or \",\" where the preview shows one; without them the "
                f"pattern matches {found:,} line{'s' if found != 1 else ''}: {call}")

    def _sql(self, row: dict, sql: str, offset: int, limit: int | None) -> Outcome:
        if offset < 0:
            raise InvalidArgument("SQL results page forward only: use offset >= 0, or ORDER BY … DESC.")
        table = self.table(row)
        note = " ".join(table.notes) or None  # how the data became the table: renamed keys, ragged lines
        deadline = time.monotonic() + self.timeout  # the whole answer, not only DuckDB's part of it
        result = table.execute(sql, timeout=self.timeout, deadline=deadline)
        rows: list[dict] = []
        # every row as NDJSON, once the whole result is known not to fit inline: one buffer, because
        # orjson's small outputs each keep a 4 KiB allocation (3,000,000 rows held 12 GB as a list)
        spill: bytearray | None = None
        full = False  # the page holds all it can show: the rest of the rows is only counted
        page_bytes = measured = measured_bytes = 0
        total = 0
        args = {"limit": limit}
        try:
            for batch in result.iter_batches(_FIRST_BATCH):
                if time.monotonic() > deadline:
                    raise self._sql_timeout(total)
                if measured:  # about _BATCH_BYTES a batch from now on, as the rows measured so far
                    result.batch_size = max(1, min(_MOST_ROWS, _BATCH_BYTES * measured // measured_bytes))
                if full or total + len(batch) <= offset:
                    total += len(batch)  # counted to the end, so `count` is exact even for a page
                    continue
                for item in result.as_dicts(batch):
                    total += 1
                    if spill is not None:
                        before = len(spill)
                        spill += dumps(item)
                        spill += b"\n"
                        measured, measured_bytes = measured + 1, measured_bytes + len(spill) - before
                        if len(spill) > self.result_bytes:  # checked at each row: a row may be a MB
                            raise self._sql_too_large(total, len(spill))
                    elif total > offset and not full:
                        rows.append(item)
                        size = len(dumps(item)) + 1
                        page_bytes += size  # rows of a MB each: 200 of them are not held to see
                        measured, measured_bytes = measured + 1, measured_bytes + size
                        if limit is not None and len(rows) >= limit:
                            full = True
                        # the count so far is a lower bound: a page over the budget now stays over it
                        elif (len(rows) % 200 == 0 or surely_over(page_bytes, self.budget)) and not self._fits(
                                self._response(row, "sql", sql, rows, total, None, args, note=note)):
                            if limit is None and offset == 0:  # the whole result was asked for: store it
                                spill, rows = bytearray(_ndjson(rows)), []
                            else:  # _page shows the prefix that fits
                                full = True
        except QueryTimeout:
            if not total:  # DuckDB's own limit, before any row: its message says why a query is slow
                raise
            raise self._sql_timeout(total) from None
        finally:
            result.close()
        if spill is not None:
            return Outcome("sql", sql, derived=bytes(spill), derived_kind="ndjson", count=total, note=note)
        return self._page(row, "sql", sql, rows, offset, total, args, whole=(
            lambda: Outcome("sql", sql, derived=_ndjson(rows), derived_kind="ndjson", count=total, note=note))
            if limit is None and offset == 0 else None, note=note)

    def _sql_timeout(self, total: int) -> QueryTimeout:
        from .sql import SQL_EXAMPLE  # loaded already: the query has run

        return QueryTimeout(
            f"The query stopped after {self.timeout:g} s with {total:,} rows read: its whole result takes too "
            f"long to read (and to count). Aggregate (e.g. {SQL_EXAMPLE}), filter with WHERE, or end the SQL "
            "with LIMIT.")

    def _sql_too_large(self, total: int, size: int) -> ResultTooLarge:
        from .sql import SQL_EXAMPLE

        return ResultTooLarge(
            f"The query's result is more than {self.result_bytes:,} bytes of NDJSON ({size:,} bytes in its "
            f"first {total:,} rows), more than a query may store, so nothing was stored. Aggregate (e.g. "
            f"{SQL_EXAMPLE}), filter with WHERE, select fewer columns, end the SQL with LIMIT, or read a page "
            "with limit=.")


# Rows fetched from DuckDB at a time: few at first, then about _BATCH_BYTES of JSON (a batch of 1,000 rows
# of a MB each is a GB of Python strings, counted or not).
_FIRST_BATCH, _MOST_ROWS, _BATCH_BYTES = 8, 1000, 4 << 20


def _ndjson(rows: list[dict]) -> bytes:
    return b"".join(dumps(r) + b"\n" for r in rows)


def _instead(kind: str, also: str | None = None) -> str:
    """What reads an artifact a JMESPath or SQL query cannot: grep for text, byte pages for binary."""
    if kind == "binary":
        return "It is binary: read it with fetch_slice(unit=\"bytes\") (base64)."
    return "Use grep=\"regex\" to search its lines" + (f", or {also}." if also else ".")


def _fit_prefix(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n <= most with fits(n) (fits is monotone: fewer elements never fit worse)."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_matches(matches: list[dict], n: int, context: int) -> list[dict]:
    """The entries of a grep page up to its n-th match and the context after it. The context before
    match n + 1 is left to the page that shows that match: a page never ends with context of nothing."""
    seen, last = 0, 0
    out = []
    for entry in matches:
        if entry["match"]:
            if seen == n:
                break
            seen, last = seen + 1, entry["line"]
        elif seen == n and entry["line"] > last + context:
            break
        out.append(entry)
    return out


def _unterminated(sql: str) -> str:
    """`sql` without the semicolons that end it and the comments after them, so that it nests as a
    subquery (the closing parenthesis goes on a line of its own, after any comment left inside). DuckDB's
    tokenizer, which skips comments and string literals, tells which semicolons end the statement."""
    import duckdb  # loaded already: the query it wraps has run

    tokens = duckdb.tokenize(sql)
    end = len(sql)
    while tokens and sql[tokens[-1][0]] == ";":
        end = tokens.pop()[0]
    return sql[:end].strip()


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


def _main_array(row: dict, doc: Any, refusal: str) -> list[Any]:
    """The main array of a parsed JSON artifact (the one its reference named: `find_main`), else
    InvalidArgument with `refusal`, formatted with the artifact's `id`, the main value's `path`, `what`
    it is, and an `example` JMESPath (`example_json`: as JSON) that runs on it."""
    main = find_main(doc)
    if isinstance(main.value, list):
        return main.value
    what = f"an object of {len(main.value):,} keys" if isinstance(main.value, dict) else _json_kind(main.value)
    example = jmespath_example(doc)
    raise InvalidArgument(refusal.format(id=row["id"], path=main.path, what=what, example=example,
                                         example_json=json.dumps(example)))


def _json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words (not Python's NoneType or str)."""
    if value is None:
        return "null (nothing is there)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"an object of {len(value):,} keys" if isinstance(value, dict) else "an array"

