"""JMESPath hints for a parsed document, derived from its shape and executed before they are shown.

A hint the model copies must work: one that raises or finds nothing is dropped. Field names that are
not JMESPath identifiers are quoted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jmespath.exceptions import JMESPathError

from offload.content.shape import MainCollection, jmespath_identifier
from offload.errors import QueryError
from offload.tools.engines import run_jmespath
from offload.utf8 import encodable

__all__ = ["build_hints"]

PAGE = 20
MAX_HINTS = 4
# Above this many items a hint that works item by item is run on the items up to and including the
# first that satisfies it: the same answer to "does it run, is it non-empty", without a 0.5 s jmespath
# pass over 357,728 items (a filter or a projection acts on each item alone and cannot raise here).
FULL_CHECK_ITEMS = 2_000  # the shape counts values exactly above its 2,000-item sample
_PREFIX_ITEMS = 1000
_PREFERRED_FIELDS = ("id", "name", "title", "key", "path", "file", "url", "status", "state", "type",
                     "level", "email", "login", "slug", "label", "message", "created_at", "date")
# Fields whose rare values are what a reader looks for first ("error" among "ok").
_STATUS_FIELDS = frozenset({"status", "state", "level", "severity", "kind", "type", "result", "outcome",
                            "conclusion", "category", "phase", "health"})
_SCALARS = frozenset({"string", "integer", "number", "boolean"})


@dataclass
class _Candidate:
    expression: str
    check_items: list | None = None  # run on these items in place of the main array; None: the document
    known_result: str | None = None  # the exact summary when the check does not see the whole array


def build_hints(doc: Any, main: MainCollection, shape: dict | None) -> dict[str, str | None]:
    """2–4 verified expressions (count, filter on a low-cardinality field, project fields, first page),
    each with an exact summary of its result ("12,258 items") or None when only a sample was seen."""
    items_shape = _items_shape(shape, main)
    candidates = _map_hints(main) if isinstance(main.value, dict) else _array_hints(main, items_shape)
    hints: dict[str, str | None] = {}
    for candidate in candidates:
        if len(hints) == MAX_HINTS:
            break
        if not encodable(candidate.expression):  # a lone surrogate in a key or value: no one could send it back
            continue
        target = doc if candidate.check_items is None else _with_items(doc, main.keys, candidate.check_items)
        found, summary = _run(candidate.expression, target)
        if found:
            hints[candidate.expression] = summary if candidate.check_items is None else candidate.known_result
    return hints


def _items_shape(shape: dict | None, main: MainCollection) -> dict:
    node = shape or {}
    for key in main.keys:
        node = node.get("keys", {}).get(key, {})
    return node.get("items", {}) if isinstance(main.value, list) else node


def _array_hints(main: MainCollection, items_shape: dict) -> list[_Candidate]:
    path = main.path
    prefix = "" if path == "@" else path
    items = main.value
    big = len(items) > FULL_CHECK_ITEMS
    head = items[:_PREFIX_ITEMS] if big else None
    candidates = [_Candidate(f"length({path})")]

    field, value = _filter_field(items_shape)
    if field is not None:
        values = items_shape["keys"][field]
        exact = None if values.get("values_from") == "sample" else _items(values["values"][value])
        check = _through_first_match(items, field, value) if big else None
        condition = f"{jmespath_identifier(field)}=={_literal(value)}"
        candidates.append(_Candidate(f"{prefix}[?{condition}]", check, exact))
    elif "values" in items_shape and len(items_shape["values"]) > 1:
        value = _rarest(items_shape["values"])
        if _literal(value):
            check = items[: items.index(value) + 1] if big and value in items else None
            candidates.append(_Candidate(f"{prefix}[?@=={_literal(value)}]", check, _items(items.count(value))))

    fields = _projection_fields(items_shape)
    if fields:
        pairs = ", ".join(f"{jmespath_identifier(f)}: {jmespath_identifier(f)}" for f in fields)
        # A projection yields one row per item that is not null, each row from its item alone: when
        # every item is an object, a first page tells whether it finds anything (a jmespath pass over
        # 2,000 items takes 30 ms), and the count is known.
        check = items[:PAGE] if set(map(type, items)) == {dict} else head
        candidates.append(_Candidate(f"{prefix}[].{{{pairs}}}", check, _items(_flattened_rows(items))))
    if len(items) > PAGE:
        # a slice projects too: the nulls among the first items yield no row
        page = items[:PAGE]
        candidates.append(_Candidate(f"{prefix}[:{PAGE}]", page, _items(PAGE - page.count(None))))
    return candidates


def _flattened_rows(items: list) -> int:
    """The rows `[]` yields: it flattens the items that are lists into their elements, then drops nulls."""
    rows = len(items) - items.count(None)
    if list in set(map(type, items)):
        rows += sum(len(item) - item.count(None) - 1 for item in items if type(item) is list)
    return rows


def _map_hints(main: MainCollection) -> list[_Candidate]:
    path = main.path
    listing = f"keys({path})[:{PAGE}]" if len(main.value) > PAGE else f"keys({path})"
    return [_Candidate(f"length(keys({path}))"), _Candidate(listing)]


def _items(n: int) -> str:
    return f"{n:,} item{'' if n == 1 else 's'}"


def _filter_field(items_shape: dict) -> tuple[str | None, str | None]:
    """The field whose rarest value makes the most telling filter (an 'error' among many 'ok')."""
    best: tuple[tuple[bool, int], str, str] | None = None
    for key, child in items_shape.get("keys", {}).items():
        values = child.get("values") or {}
        if len(values) < 2:
            continue
        value = _rarest(values)
        if not _literal(value):
            continue
        score = (key.lower() not in _STATUS_FIELDS, values[value])
        if best is None or score < best[0]:
            best = (score, key, value)
    return (best[1], best[2]) if best else (None, None)


def _rarest(values: dict[str, int]) -> str:
    return min(values, key=lambda value: (values[value], value))


def _literal(value: Any) -> str:
    """A JMESPath raw string literal, or "" for a value that would need escaping, or that holds a control
    character (a NUL or tab copied into a hint reaches the model raw, and may not survive being typed back)."""
    if not isinstance(value, str) or not value or any(c in value for c in "'\\`") or not value.isprintable():
        return ""
    return f"'{value}'"


def _projection_fields(items_shape: dict) -> list[str]:
    keys = items_shape.get("keys", {})
    if len(keys) + items_shape.get("more_keys", 0) < 3:
        return []
    scalar = [key for key, child in keys.items()
              if not child.get("optional") and set(child.get("type", "").split("|")) & _SCALARS]
    preferred = [key for name in _PREFERRED_FIELDS for key in scalar if key.lower() == name]
    chosen = list(dict.fromkeys(preferred + scalar))[:3]
    return chosen if len(chosen) >= 2 else []


def _through_first_match(items: list, field: str, value: str) -> list:
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get(field) == value:
            return items[: index + 1]
    return items[:1]


def _with_items(doc: Any, keys: list[str], items: list) -> Any:
    """A copy of `doc` whose main array is `items`; only the objects on the path are copied."""
    if not keys:
        return items
    top = dict(doc)
    node = top
    for key in keys[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    node[keys[-1]] = items
    return top


def _run(expression: str, target: Any) -> tuple[bool, str | None]:
    """Whether the expression runs and finds something, and a short summary of what it found."""
    try:
        # the query tool's engine: the same results as jmespath.search (property-tested), with compiled
        # expressions cached and a fast path for the `[?field=='value']` filters hints use
        result = run_jmespath(target, expression, most=None)  # offload's own: nothing repeats the document
    except (JMESPathError, QueryError, TypeError, ValueError):
        return False, None
    if result is None or result == [] or result == {} or result == "":
        return False, None
    # A projection whose every row is all-null finds nothing useful either.
    if isinstance(result, list) and all(
        isinstance(row, dict) and all(v is None for v in row.values()) for row in result
    ):
        return False, None
    if isinstance(result, list):
        return True, _items(len(result))
    if isinstance(result, bool) or not isinstance(result, (int, float)):
        return True, None
    return True, f"{result:,}"
