"""The query engines behind `query_artifact`: pure functions over content already loaded (a parsed
document; an iterable of lines, in grep.py; a DuckDB table, in sql.py), independent of the store. Errors
are written for the model: what went wrong, where, and an expression that would work. Also a
memory-bounded LRU cache for parsed documents and SQL tables.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import OrderedDict
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.functions
import jmespath.visitor

from offload.errors import InvalidArgument, QueryError, ResultTooLarge
from offload.jsontext import within
from offload.tools.grep import TOO_DEEP as _TOO_DEEP, GrepPage, grep_lines  # grep: its own module, re-exported

__all__ = [
    "BoundedCache",
    "GrepPage",
    "detached",
    "grep_lines",
    "jmespath_example",
    "quoted_field_note",
    "run_jmespath",
]


# -- JMESPath ---------------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")




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
    except TypeError as exc:  # the library's own: contains(title, "crash") tests `None in str`
        raise QueryError(_message(doc, expression, f"{exc} (a key the document does not hold, or a \"quoted\" "
                                                   "name, reads as null)", None, failed=True)) from exc
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
    shared): what is handed out of a cached document, so that editing it never changes the cache.

    One loop over a stack, not a recursion per level: documents are parsed for queries up to 1,024 levels
    deep, and a recursive copy of one 500 deep ran out of stack (as fast either way: 0.27 s for 100,000
    small objects)."""
    if isinstance(value, dict):
        root: Any = {}
    elif isinstance(value, list):
        root = []
    else:
        return value
    stack = [(value, root)]
    push = stack.append
    while stack:
        source, copy = stack.pop()
        pairs = source.items() if type(copy) is dict else enumerate(source)
        if type(copy) is list:
            copy.extend([None] * len(source))
        for key, item in pairs:
            if isinstance(item, dict):
                child: Any = {}
                push((item, child))
            elif isinstance(item, list):
                child = []
                push((item, child))
            else:
                child = item
            copy[key] = child
    return root


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
        missing = " (a key the document does not hold reads as null)" if exc.actual_type == "null" else ""
        return f"{exc.function_name}() needs {expected}, got {exc.actual_type}{missing}", None
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
    # a well-formed expression that failed on this document's values is not an invalid one
    return _message(doc, expression, reason, position, failed=isinstance(exc, jmespath.exceptions.JMESPathTypeError))


def _message(doc: Any, expression: str, reason: str, position: int | None, *, failed: bool) -> str:
    shown = expression.replace("\n", " ")
    if position is not None and 0 <= position <= len(shown):
        where = f" at column {position + 1}\n  {shown}\n  {' ' * position}^"
    else:
        where = f"\n  {shown}"
    return (
        f"{'JMESPath failed on this document' if failed else 'Invalid JMESPath expression'}: {reason}{where}\n"
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
        # the string field of fewest values among the first items (`state`, not a title unique to each):
        # a filter a model would write
        sample = [item for item in array[:50] if isinstance(item, dict)]
        fields = [(len({str(item.get(key)) for item in sample}), position, key, value)
                  for position, (key, value) in enumerate(first.items())
                  if isinstance(value, str) and 0 < len(value) <= 40 and "\n" not in value]
        if fields:
            _, _, key, value = min(fields)
            literal = value.replace("\\", "\\\\").replace("'", "\\'")
            candidates.append(f"{prefix}[?{_quote_key(key)}=='{literal}'] | [:5]")
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


# A double-quoted string in an expression, and the comparison operators beside which it is a value
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_COMPARES = ("==", "!=", "<=", ">=", "<", ">")


def quoted_field_note(doc: Any, expression: str) -> str | None:
    """The same expression with each double-quoted name it compares that no item has written as a JMESPath
    string, with what that returns, when that is not empty or nothing. `[?state=="open"]` compares `state`
    with a field named `open` (none): it returned [] and said nothing of why, and `[?state!="open"]` every
    item. A quoted name the items have (`[?"state"=='open']`, `"my-key"`) is a field, as written."""
    if '"' not in expression:
        return None
    _, array = _main_array(doc)
    keys = {key for item in (array or [])[:50] if isinstance(item, dict) for key in item}

    def literal(match: re.Match) -> str:
        before, after = expression[:match.start()].rstrip(), expression[match.end():].lstrip()
        compared = before.endswith(_COMPARES) or after.startswith(_COMPARES)
        name = match.group(1)
        if not compared or name in keys:
            return match.group(0)
        return "'" + name.replace("'", "\\'") + "'"

    fixed = _QUOTED.sub(literal, expression)
    if fixed == expression:
        return None
    try:
        found = run_jmespath(doc, fixed)
    except QueryError:  # ResultTooLarge among them
        return None
    if found is None or found == [] or found == 0:
        return None
    shown = json.dumps(found, ensure_ascii=False)
    size = f"{len(found):,} results" if isinstance(found, list) else shown if len(shown) <= 60 else "a result"
    return (f'In JMESPath a double-quoted "name" is a field, not a string; with strings in single quotes, '
            f"{fixed} returns {size}")
