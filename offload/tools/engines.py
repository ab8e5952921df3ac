"""The query engines behind `query_artifact`: pure functions over content already loaded (a parsed
document, an iterable of lines, a DuckDB table), independent of the store. Errors are written for the
model: what went wrong, where, and an expression that would work. Also a memory-bounded LRU cache for
parsed documents and SQL tables.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.functions
import jmespath.visitor
import regex

from offload.errors import InvalidArgument, QueryError, QueryTimeout, ResultTooLarge
from offload.jsontext import within

__all__ = [
    "BoundedCache",
    "GrepPage",
    "detached",
    "grep_lines",
    "jmespath_example",
    "run_jmespath",
]

# -- JMESPath ---------------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_TOO_DEEP = ("The {} is nested too deeply for its parser (thousands of parentheses or operators): write it "
             "with fewer levels, or take the part you need in several calls.")


@functools.lru_cache(maxsize=256)
def _compile_jmespath(expression: str) -> jmespath.parser.ParsedResult:
    return jmespath.compile(expression)


# The most bytes of JSON a JMESPath result, or a string one builds (to_string, join), may take: multiselects
# repeat references, so `[@, @] | [@, @] | …` doubles its result with every stage, and `join` or
# `to_string` turn such a result into a string that really takes that memory.
JMESPATH_MOST = 64 * 1024**2


class _BoundedFunctions(jmespath.functions.Functions):
    """JMESPath's functions, with to_string and join refusing to build a string past `most` bytes."""

    def __init__(self, most: int):
        self.most = most

    @jmespath.functions.signature({"types": []})
    def _func_to_string(self, arg: Any) -> str:
        if not isinstance(arg, str) and not within(arg, self.most):  # repeated references
            raise _too_big("to_string()", self.most)
        text = super()._func_to_string(arg)
        if len(text) > self.most:  # escapes: each stage of to_string(@) | [@, @] | … doubles them
            raise _too_big("to_string()", self.most)
        return text

    @jmespath.functions.signature({"types": ["string"]}, {"types": ["array-string"]})
    def _func_join(self, separator: str, array: list[str]) -> str:
        if sum(map(len, array)) + len(separator) * len(array) > self.most:
            raise _too_big("join()", self.most)
        return super()._func_join(separator, array)


@functools.lru_cache(maxsize=8)
def _options(most: int) -> jmespath.Options:
    return jmespath.Options(custom_functions=_BoundedFunctions(most))


def _too_big(what: str, most: int) -> ResultTooLarge:
    return ResultTooLarge(
        f"The JMESPath {what} would be more than {most:,} bytes: the expression repeats parts of the "
        "document (a multiselect such as [@, @], applied again and again). Select the parts once, or "
        "take fewer of them.")


def run_jmespath(doc: Any, expression: str, most: int | None = JMESPATH_MOST) -> Any:
    """Evaluate `expression` on `doc`; the result equals `jmespath.search(expression, doc)`, and its JSON
    takes at most about `most` bytes (None: offload's own expressions, the hints, go unchecked).

    Raises QueryError with the column of a syntax error and an example that works on this document;
    ResultTooLarge for a result (or a string it builds) past `most`.
    """
    if not isinstance(expression, str):
        raise QueryError(f"The JMESPath expression must be a string (got {type(expression).__name__}). "
                         f"Example for this document: {jmespath_example(doc)}")
    if not expression.strip():
        raise QueryError(f"The JMESPath expression is empty. Example for this document: {jmespath_example(doc)}")
    try:
        compiled = _compile_jmespath(expression)
    except jmespath.exceptions.JMESPathError as exc:
        raise QueryError(_jmespath_message(doc, expression, exc)) from exc
    except RecursionError:
        raise QueryError(_TOO_DEEP.format("JMESPath expression")) from None
    fast = _equality_filter(doc, expression)
    if fast is not _NO_FAST_PATH:
        return fast
    try:
        result = compiled.search(doc, options=_options(most) if most is not None else None)
    except jmespath.exceptions.JMESPathError as exc:  # wrong argument types, unknown function, arity
        raise QueryError(_jmespath_message(doc, expression, exc)) from exc
    except RecursionError:
        raise QueryError(_TOO_DEEP.format("JMESPath expression")) from None
    if most is not None and not within(result, most):
        raise _too_big("result", most)
    if isinstance(result, jmespath.visitor._Expression):
        raise QueryError(
            "An expression reference (&field) is only meaningful as a function argument, e.g. "
            f"sort_by(items, &id). Example for this document: {jmespath_example(doc)}"
        )
    return result


def detached(value: Any) -> Any:
    """A copy of a parsed JSON value that shares no list or dict with it (scalars are immutable and stay
    shared): what is handed out of a cached document, so that editing it never changes the cache."""
    if isinstance(value, dict):
        return {key: detached(item) for key, item in value.items()}
    if isinstance(value, list):
        return [detached(item) for item in value]
    return value


_NO_FAST_PATH = object()
# `path[?key=='text']` and `path[?key=='text'].field`: the most common filter an agent writes, which the
# jmespath interpreter walks at ~2 µs per element; a comprehension gives the identical result ~15x faster.
_EQUALITY_FILTER = re.compile(
    r"\s*(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)?\s*"
    r"\[\?\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*==\s*'(?P<literal>[^'\\]*)'\s*\]"
    r"(?:\.(?P<field>[A-Za-z_][A-Za-z0-9_]*))?\s*")


def _equality_filter(doc: Any, expression: str) -> Any:
    """The result of a plain string-equality filter (and one projected field), or _NO_FAST_PATH.

    Same semantics as jmespath: a filter over a non-array is null; elements that are not objects or whose
    key is missing never match; a string equals only a string; a projection drops null values.
    """
    match = _EQUALITY_FILTER.fullmatch(expression)
    if match is None:
        return _NO_FAST_PATH
    base = doc
    for part in (match["path"] or "").split(".") if match["path"] else ():
        base = base.get(part) if isinstance(base, dict) else None
    if not isinstance(base, list):
        return None
    key, literal = match["key"], match["literal"]
    kept = [item for item in base if type(item) is dict and item.get(key) == literal
            and type(item.get(key)) is str]
    field = match["field"]
    if field is None:
        return kept
    return [item[field] for item in kept if item.get(field) is not None]


def _jmespath_reason(exc: jmespath.exceptions.JMESPathError) -> tuple[str, int | None]:
    """What went wrong, in a short sentence that never quotes the document, and the 0-based column."""
    E = jmespath.exceptions
    if isinstance(exc, E.ArityError):
        return (f"{exc.function_name}() takes {exc.expected_arity} argument(s), got {exc.actual_arity}", None)
    if isinstance(exc, E.JMESPathTypeError):
        expected = " or ".join(exc.expected_types)
        return f"{exc.function_name}() needs {expected}, got {exc.actual_type}", None
    if isinstance(exc, E.UnknownFunctionError):
        return str(exc), None
    position = getattr(exc, "lex_position", None)
    if isinstance(exc, E.LexerError):
        return exc.message, position
    if isinstance(exc, E.IncompleteExpressionError):
        return "the expression ends too early (an unclosed [, ( or {, or nothing after an operator)", position
    if isinstance(exc, E.ParseError):
        token_type, value = getattr(exc, "token_type", None), getattr(exc, "token_value", None)
        reason = f"unexpected {str(token_type).lower()} {value!r}" if token_type else exc.msg
        if str(token_type).lower() == "number":
            reason += " (number literals go in backticks: `3`)"
        return reason, position
    return str(exc)[:300], None


def _jmespath_message(doc: Any, expression: str, exc: jmespath.exceptions.JMESPathError) -> str:
    reason, position = _jmespath_reason(exc)
    shown = expression.replace("\n", " ")
    if position is not None and 0 <= position <= len(shown):
        where = f" at column {position + 1}\n  {shown}\n  {' ' * position}^"
    else:
        where = f"\n  {shown}"
    return (
        f"Invalid JMESPath expression: {reason}{where}\n"
        f"Example for this document: {jmespath_example(doc)} "
        "(filters look like items[?status=='error'], string literals use single quotes, "
        "keys with dashes or spaces need double quotes: \"my-key\")."
    )


def jmespath_example(doc: Any) -> str:
    """A valid JMESPath expression for `doc`, preferring a filter on its main array of objects."""
    path, array = _main_array(doc)
    if array is None:
        return "keys(@)" if isinstance(doc, dict) and doc else "@"
    prefix = path or ""
    first = next((item for item in array if isinstance(item, dict)), None)
    candidates: list[str] = []
    if first is not None:
        for key, value in first.items():
            if isinstance(value, str) and 0 < len(value) <= 40 and "\n" not in value:
                literal = value.replace("\\", "\\\\").replace("'", "\\'")
                candidates.append(f"{prefix}[?{_quote_key(key)}=='{literal}'] | [:5]")
                break
    candidates += [f"{prefix}[:5]", f"length({prefix or '@'})"]
    for candidate in candidates:
        try:
            _compile_jmespath(candidate)
        except jmespath.exceptions.JMESPathError:
            continue
        return candidate
    return "@"


def _main_array(doc: Any) -> tuple[str | None, list | None]:
    """The path to the largest array at the top or up to two levels down (objects only), or (None, None)."""
    if isinstance(doc, list):
        return "", doc
    best: tuple[str | None, list | None] = (None, None)
    frontier: list[tuple[str, Any]] = [("", doc)]
    for _depth in range(3):
        next_frontier = []
        for path, node in frontier:
            if not isinstance(node, dict):
                continue
            for key, value in node.items():
                child = f"{path}.{_quote_key(key)}" if path else _quote_key(key)
                if isinstance(value, list) and (best[1] is None or len(value) > len(best[1])):
                    best = (child, value)
                elif isinstance(value, dict):
                    next_frontier.append((child, value))
        if best[1] is not None:
            return best
        frontier = next_frontier
    return best


def _quote_key(key: Any) -> str:
    key = str(key)
    if _IDENTIFIER.fullmatch(key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- grep -------------------------------------------------------------------------------------------

GREP_EXAMPLE = r"ERROR|Traceback"
_BLOCK_LINES = 4096
_BLOCK_CHARS = 1 << 20
# Constructs whose result can depend on what lies beyond a line's ends (lookarounds, string anchors,
# inline flags that may turn MULTILINE off, backtracking verbs, conditionals, \K). Without them a line
# matches alone exactly when the joined block matches inside that line, which lets one C-level search
# skip thousands of non-matching lines; with them every line is searched on its own.
_LINE_SENSITIVE = re.compile(r"\(\?(?![:>]|P<|P=|P>|<[A-Za-z_]|[aimsux]+[:)])|\(\*|\\[AZzGK]")


@dataclass
class GrepPage:
    """One page of grep matches. `matches` holds matching lines (`match: True`) and their context
    lines (`match: False`) in line order, 0-based line numbers, each line once; context never reaches
    into a match that belongs to another page. `total` is the exact number of matching lines."""

    matches: list[dict]
    total: int
    offset: int
    returned: int
    next_offset: int | None


@dataclass
class _Record:
    """A match on the page being built, with the context lines seen around it so far."""

    line: int
    text: str
    before: list[tuple[int, str, bool]]
    after: list[tuple[int, str, bool]]


@functools.lru_cache(maxsize=128)
def _compile_regex(pattern: str, ignore_case: bool) -> tuple[Any, Any | None]:
    flags = regex.IGNORECASE if ignore_case else 0
    line_pattern = regex.compile(pattern, flags)
    block_pattern = None if _LINE_SENSITIVE.search(pattern) else regex.compile(pattern, flags | regex.MULTILINE)
    return line_pattern, block_pattern


def grep_lines(
    lines: Iterable[str],
    pattern: str,
    *,
    offset: int = 0,
    limit: int | None = None,
    context: int = 0,
    ignore_case: bool = False,
    timeout: float = 2.0,
) -> GrepPage:
    """Find the lines matching the regular expression `pattern` (searched anywhere in the line).

    `lines` yields lines without their newline; line i is item i. Offset and limit count matches; a
    negative offset counts from the end (-5 = the last 5 matches). Every line is scanned so `total` is
    exact; memory stays O(page + context). The whole scan gets `timeout` seconds, in any thread.
    """
    if limit is not None and limit < 0:
        raise InvalidArgument(f"limit must be 0 or more (or omitted for all matches), not {limit}.")
    if context < 0:
        raise InvalidArgument(f"context must be 0 or more lines, not {context}.")
    try:
        line_pattern, block_pattern = _compile_regex(pattern, ignore_case)
    except regex.error as exc:
        raise QueryError(_regex_message(pattern, exc)) from exc
    except RecursionError:
        raise QueryError(_TOO_DEEP.format("regular expression")) from None

    deadline = time.monotonic() + timeout
    scan = _Scan(offset, limit, context)
    base = 0
    try:
        for block in _blocks(lines):
            _remaining(deadline)
            if block_pattern is not None:
                matched = _match_block(block, block_pattern, line_pattern, deadline)
            else:
                matched = _match_each(block, line_pattern, deadline)
            scan.feed(block, base, matched)
            base += len(block)
    except _OutOfTime:
        raise QueryTimeout(
            f"grep stopped after {timeout:g} s at line {base:,} ({scan.total:,} matching lines so far): "
            "the pattern is too slow — nested repetition like (a+)+ or (a|aa)+ backtracks without end. "
            "Use a simpler pattern: literal text, [^ ]* instead of .*, no repeated groups; e.g. "
            f"{GREP_EXAMPLE!r}."
        ) from None
    return scan.page()


def _regex_message(pattern: str, exc: regex.error) -> str:
    position = getattr(exc, "pos", None)
    where = ""
    if position is not None and 0 <= position <= len(pattern):
        shown = pattern.replace("\n", " ")
        where = f" at column {position + 1}\n  {shown}\n  {' ' * position}^"
    reason = getattr(exc, "msg", None) or str(exc)
    return (
        f"Invalid regular expression: {reason}{where}\n"
        f"Example: {GREP_EXAMPLE!r} (| separates alternatives; escape ( ) [ ] . * + ? with a backslash "
        r"to match them literally, e.g. 'f\(x\)')."
    )


def _blocks(lines: Iterable[str]):
    block: list[str] = []
    chars = 0
    for line in lines:
        block.append(line)
        chars += len(line)
        if len(block) >= _BLOCK_LINES or chars >= _BLOCK_CHARS:
            yield block
            block, chars = [], 0
    if block:
        yield block


class _OutOfTime(Exception):
    """The scan's time is up (a TimeoutError from reading `lines` is not ours, and passes through)."""


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _OutOfTime
    return left


def _search(pattern: Any, text: str, pos: int, deadline: float) -> Any:
    try:
        return pattern.search(text, pos, timeout=_remaining(deadline))
    except TimeoutError:  # raised by `regex` when the search itself runs out of time
        raise _OutOfTime from None


def _match_each(block: list[str], line_pattern: Any, deadline: float) -> list[int]:
    return [index for index, line in enumerate(block) if _search(line_pattern, line, 0, deadline) is not None]


def _match_block(block: list[str], block_pattern: Any, line_pattern: Any, deadline: float) -> list[int]:
    """Indexes of matching lines, found by searching the block joined with newlines.

    A search from a line start finds the first match at or after it. A match inside one line proves
    that line matches; a match spanning a newline proves nothing, so that line is searched alone. Lines
    the search jumps over cannot match (see _LINE_SENSITIVE). Each search resumes at the next line.
    """
    text = "\n".join(block)
    starts = [0]
    for line in block:
        starts.append(starts[-1] + len(line) + 1)
    matched: list[int] = []
    pos = 0
    index = 0
    while pos <= len(text):
        found = _search(block_pattern, text, pos, deadline)
        if found is None:
            break
        index = _line_of(starts, found.start(), index)
        line_end = starts[index + 1] - 1
        if found.end() <= line_end:
            matched.append(index)
        elif _search(line_pattern, block[index], 0, deadline) is not None:
            matched.append(index)
        pos = starts[index + 1]
        index += 1
    return matched


def _line_of(starts: list[int], position: int, hint: int) -> int:
    """The index of the line holding `position` (a newline belongs to the line it ends)."""
    low, high = hint, len(starts) - 2
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= position:
            low = middle
        else:
            high = middle - 1
    return low


class _Scan:
    """Counts every match and keeps only the page's matches with their context."""

    def __init__(self, offset: int, limit: int | None, context: int):
        self.offset = offset
        self.limit = limit
        self.context = context
        self.total = 0
        # A negative offset keeps the last |offset| matches in a bounded deque until the end is known.
        self.records: deque[_Record] | list[_Record] = deque(maxlen=-offset) if offset < 0 else []
        self.tail: deque[tuple[int, str, bool]] = deque(maxlen=context)  # lines before the next block
        self.open: list[_Record] = []  # records still collecting after-context

    def _wanted(self, index: int) -> bool:
        if self.offset < 0:
            return True
        return index >= self.offset and (self.limit is None or index < self.offset + self.limit)

    def feed(self, block: list[str], base: int, matched: list[int]) -> None:
        context = self.context
        flags = set(matched)
        if self.open and context:
            for record in self.open:
                need = context - len(record.after)
                first = record.line + 1 + len(record.after) - base
                record.after.extend(
                    (base + i, block[i], i in flags) for i in range(first, min(first + need, len(block)))
                )
            self.open = [record for record in self.open if len(record.after) < context]
        for i in matched:
            index = self.total
            self.total += 1
            if not self._wanted(index):
                continue
            before = []
            if context:
                start = i - context
                if start < 0:
                    before = list(self.tail)[start:]  # the previous blocks' last lines
                before += [(base + j, block[j], j in flags) for j in range(max(start, 0), i)]
            record = _Record(base + i, block[i], before, [])
            if context:
                record.after = [(base + j, block[j], j in flags) for j in range(i + 1, min(i + 1 + context, len(block)))]
                if len(record.after) < context:
                    self.open.append(record)
            self.records.append(record)
        if context:
            self.tail.extend((base + j, block[j], j in flags) for j in range(max(0, len(block) - context), len(block)))

    def page(self) -> GrepPage:
        records = list(self.records)
        if self.offset < 0:
            start = max(0, self.total + self.offset)
            if self.limit is not None:
                records = records[: self.limit]
        else:
            start = self.offset
        # Context stops at the nearest match outside the page, on both sides.
        low, high = -1, float("inf")
        if records:
            low = max((n for n, _, is_match in records[0].before if is_match), default=-1)
            high = min((n for n, _, is_match in records[-1].after if is_match), default=float("inf"))
        lines: dict[int, dict] = {}
        for record in records:
            for number, text, _ in itertools.chain(record.before, record.after):
                if low < number < high:
                    lines.setdefault(number, {"line": number, "text": text, "match": False})
        for record in records:
            lines[record.line] = {"line": record.line, "text": record.text, "match": True}
        returned = len(records)
        following = start + returned
        return GrepPage(
            matches=[lines[number] for number in sorted(lines)],
            total=self.total,
            offset=start,
            returned=returned,
            next_offset=following if following < self.total else None,
        )


# -- a memory-bounded cache -------------------------------------------------------------------------


class BoundedCache:
    """A thread-safe LRU cache bounded by the sizes its callers declare. Evicted values that have a
    `close()` are closed (a SqlTable defers that until its open results are done)."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise InvalidArgument(f"max_bytes must be 0 or more, not {max_bytes}.")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        """Store `value` as most recently used, then evict least recently used entries until the total
        size is at most `max_bytes`. A value larger than the whole cache is not kept (nor closed)."""
        evicted = []
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
                if old[0] is not value:
                    evicted.append(old[0])
            if size <= self.max_bytes:
                self._entries[key] = (value, size)
                self.bytes += size
            while self.bytes > self.max_bytes and self._entries:
                _, (old_value, old_size) = self._entries.popitem(last=False)
                self.bytes -= old_size
                evicted.append(old_value)
        for old_value in evicted:  # outside the lock: closing may wait for a query to finish
            close = getattr(old_value, "close", None)
            if callable(close):
                close()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Any) -> bool:
        return key in self._entries

    def clear(self) -> None:
        with self._lock:
            values = [value for value, _ in self._entries.values()]
            self._entries.clear()
            self.bytes = 0
        for value in values:
            close = getattr(value, "close", None)
            if callable(close):
                close()


def __getattr__(name: str) -> Any:
    # The SQL engine (DuckDB, ~65 MB resident) loads on first use: slicing and JMESPath never need it.
    if name in ("SQL_EXAMPLE", "SqlResult", "SqlTable"):
        from offload.tools import sql

        return getattr(sql, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
