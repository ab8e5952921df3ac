"""Show a parsed JSON document within a token budget as balanced, valid-looking JSON.

The path to the main collection is laid out one key per line, its first items (and its last) one per
line in compact form, and everything else compact. Long strings are shortened inside their quotes
("…[+N chars]") and deep values collapsed ("{…[12 keys]}"), so no structure is ever cut in half.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from offload.content.shape import MainCollection

__all__ = ["Limits", "Cuts", "compact", "render_json"]

MAX_FIRST_ITEMS = 30
_PLACEHOLDER = "\x00items\x00"


@dataclass(frozen=True)
class Limits:
    string: int  # characters kept of a string value
    keys: int  # keys shown per object
    items: int  # items shown per nested array
    depth: int  # nesting levels shown inside an entry before a container is collapsed


LEVELS = (
    Limits(240, 25, 8, 4),
    Limits(100, 12, 5, 2),
    Limits(50, 8, 3, 1),
    Limits(24, 5, 2, 1),
    Limits(12, 3, 1, 0),
)
# One key of the first entry, when not even one entry fits at the last level (`render_json`): a derived SQL
# result's text, in the ~420 tokens its JSON leaves, showed no row of 5 keys where one of 1 key fits
_THINNEST = Limits(12, 1, 1, 0)


@dataclass
class Cuts:
    """What rendering left out of the values it did show; every field is an exact count."""

    strings: int = 0
    string_chars: int = 0
    keys: int = 0
    items: int = 0
    collapsed: int = 0
    frame_keys: int = 0  # keys of the objects around the main collection not listed

    def add(self, other: Cuts) -> None:
        self.strings += other.strings
        self.string_chars += other.string_chars
        self.keys += other.keys
        self.items += other.items
        self.collapsed += other.collapsed
        self.frame_keys += other.frame_keys

    def describe(self) -> list[str]:
        parts = []
        if self.strings:
            parts.append(f"{self.strings:,} long string{_s(self.strings)} shortened "
                         f"({self.string_chars:,} chars not shown)")
        if self.keys or self.items:
            hidden = [f"{self.keys:,} key{_s(self.keys)}" if self.keys else "",
                      f"{self.items:,} nested item{_s(self.items)}" if self.items else ""]
            parts.append(" and ".join(p for p in hidden if p) + " of shown values not listed")
        if self.collapsed:
            parts.append(f"{self.collapsed:,} deeper value{_s(self.collapsed)} collapsed")
        if self.frame_keys:
            parts.append(f"{self.frame_keys:,} other key{_s(self.frame_keys)} of the enclosing objects not listed")
        return parts


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def compact(value: Any, limits: Limits, cuts: Cuts, depth: int = 0) -> str:
    """One-line JSON for `value` within `limits`, counting in `cuts` everything it leaves out."""
    if isinstance(value, str):
        return _string(value, limits.string, cuts)
    if isinstance(value, dict):
        if not value:
            return "{}"
        if depth > limits.depth:
            cuts.collapsed += 1
            return f"{{…[{len(value):,} key{_s(len(value))}]}}"
        parts = []
        for key, item in value.items():
            if len(parts) == limits.keys:
                break
            parts.append(f"{_string(str(key), limits.string, cuts)}: {compact(item, limits, cuts, depth + 1)}")
        if len(value) > limits.keys:
            cuts.keys += len(value) - limits.keys
            parts.append(f"…[+{len(value) - limits.keys:,} key{_s(len(value) - limits.keys)}]")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth > limits.depth:
            cuts.collapsed += 1
            return f"[…[{len(value):,} item{_s(len(value))}]]"
        parts = [compact(item, limits, cuts, depth + 1) for item in value[: limits.items]]
        if len(value) > limits.items:
            cuts.items += len(value) - limits.items
            parts.append(f"…[+{len(value) - limits.items:,} item{_s(len(value) - limits.items)}]")
        return "[" + ", ".join(parts) + "]"
    return _scalar(value)


# A string is only shortened when that saves more than its marker ("…[+12 chars]") costs to show.
_WORTH_CUTTING = 16


def _string(text: str, limit: int, cuts: Cuts) -> str:
    if len(text) <= limit + _WORTH_CUTTING:
        return _quoted(text)
    cuts.strings += 1
    cuts.string_chars += len(text) - limit
    return _quoted(text[:limit])[:-1] + f"…[+{len(text) - limit:,} chars]\""


def _quoted(text: str) -> str:
    try:
        return orjson.dumps(text).decode()
    except orjson.JSONEncodeError:  # a lone surrogate from a "\ud800" escape
        return json.dumps(text)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"  # orjson would write null: the preview must show what the document holds
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    return str(value)


@dataclass
class JsonView:
    text: str
    shown_first: int  # entries (items, keys or rows) shown from the start
    shown_last: bool  # the last entry is shown after the marker
    total: int
    cuts: Cuts  # what was left out of the shown values, the frame around them included

    @property
    def omitted_entries(self) -> int:
        return self.total - self.shown_first - (1 if self.shown_last else 0)


def render_json(doc: Any, main: MainCollection, budget: int, count: Callable[[str], int],
                *, rows: str = "") -> JsonView:
    """The preview text of a document; `rows` ("rows" or "lines") lays NDJSON rows out bare, one per line.

    The frame (the keys around the main collection) may take half the budget; when that leaves no room
    for a single entry, the first entry matters more than the frame's other keys: the frame is
    tightened to what the first entry, at the tightest limits, leaves; when even that shows none, the
    first entry is shown with one key (`_THINNEST`).
    """
    view = _render(doc, main, budget, count, rows, budget // 2)
    if view.shown_first or not main.value:
        return view
    frame_limit = budget // 2
    if not rows:
        first = _first_entries(main.value)[0]
        entry = compact(first[1] if isinstance(main.value, dict) else first, LEVELS[-1], Cuts())
        room = budget - _marker_reserve(main, count) - count(entry) - 8  # 8: the entry's indent, key and comma
        if room > 0:
            tighter = _render(doc, main, budget, count, rows, room)
            if tighter.shown_first:
                return tighter
            frame_limit = room
    thinnest = _render(doc, main, budget, count, rows, frame_limit, thinnest=True)  # one key of the first entry
    return thinnest if thinnest.shown_first else view


def _render(doc: Any, main: MainCollection, budget: int, count: Callable[[str], int], rows: str,
            frame_limit: int, thinnest: bool = False) -> JsonView:
    frame_cuts = Cuts()
    if rows:
        before, after, indent = [], [], ""
    else:
        before, after = _fit_frame(doc, main, frame_limit, count, frame_cuts)
        closing = after[0]
        indent = " " * (len(closing) - len(closing.lstrip(" ")) + 2)
    frame_text = "\n".join(before + after)
    remaining = budget - (count(frame_text) if frame_text else 0) - _marker_reserve(main, count)
    entries = _first_entries(main.value)
    total = len(main.value)
    limits = _item_limits(main.value, entries, remaining, count)
    is_map = isinstance(main.value, dict)

    def line(entry: Any, cuts: Cuts) -> str:
        if is_map:
            key, value = entry
            return f"{indent}{_string(str(key), limits.string, cuts)}: {compact(value, limits, cuts)}"
        return indent + compact(entry, limits, cuts)

    last_line, last_cuts, used = "", Cuts(), 0
    if total > len(entries):
        last_line = line(_last_entry(main.value), last_cuts)
        used = count(last_line) + 1
        if used * 3 > remaining:  # the first items matter more than the last one
            last_line, last_cuts, used = "", Cuts(), 0
    lines: list[str] = []
    line_cuts: list[Cuts] = []
    if thinnest:
        limits = _THINNEST  # `line` reads them
    for entry in entries:
        entry_cuts = Cuts()
        text = line(entry, entry_cuts)
        cost = count(text) + 1
        if used + cost > remaining:
            break
        lines.append(text)
        line_cuts.append(entry_cuts)
        used += cost
    while True:
        cuts = Cuts()
        for part in line_cuts[: len(lines)] + ([last_cuts] if last_line else []) + [frame_cuts]:
            cuts.add(part)
        view = _assemble(before, after, lines, last_line, main, total, indent, rows, cuts)
        if count(view.text) <= budget or (not lines and not last_line):
            return view
        if lines:
            lines.pop()
        else:
            last_line = ""


def _first_entries(value: list | dict) -> list:
    if isinstance(value, dict):
        entries = []
        for pair in value.items():
            if len(entries) == MAX_FIRST_ITEMS:
                break
            entries.append(pair)
        return entries
    return value[:MAX_FIRST_ITEMS]


def _last_entry(value: list | dict) -> Any:
    if isinstance(value, dict):
        key = next(reversed(value))
        return key, value[key]
    return value[-1]


def _item_limits(value: list | dict, entries: list, remaining: int, count: Callable[[str], int]) -> Limits:
    """The loosest limits at which the first entry leaves room for a few more."""
    if not entries:
        return LEVELS[0]
    first = entries[0][1] if isinstance(value, dict) else entries[0]
    wanted = min(len(value), max(3, min(8, remaining // 80)))  # a small budget: fewer, fuller entries
    for limits in LEVELS:
        if count(compact(first, limits, Cuts())) * wanted <= remaining:
            return limits
    return LEVELS[-1]


def _marker_reserve(main: MainCollection, count: Callable[[str], int]) -> int:
    size = len(main.value)
    return count(f"… [{size:,} items omitted: {main.path}[{size}:{size}]] …") + 2


def _assemble(before: list[str], after: list[str], lines: list[str], last_line: str, main: MainCollection,
              total: int, indent: str, rows: str, cuts: Cuts) -> JsonView:
    shown_last = bool(last_line)
    first_omitted, last_omitted = len(lines), total - (2 if shown_last else 1)
    body = [(text, False) for text in lines]
    if last_omitted >= first_omitted:
        body.append((indent + _marker(main, first_omitted, last_omitted, rows), True))
    if shown_last:
        body.append((last_line, False))
    if not rows:
        # A comma only where another entry follows, so that without its marker lines the text parses.
        last_entry = max((i for i, (_, marker) in enumerate(body) if not marker), default=-1)
        body = [(text + ("," if not marker and position < last_entry else ""), marker)
                for position, (text, marker) in enumerate(body)]
    text = "\n".join(before + [text for text, _ in body] + after)
    return JsonView(text, len(lines), shown_last, total, cuts)


def _marker(main: MainCollection, first: int, last: int, rows: str) -> str:
    n = last - first + 1
    if rows:
        return f"… [{n:,} row{_s(n)} omitted: {rows} {first:,}–{last:,}] …"
    if isinstance(main.value, dict):
        return f"… [{n:,} key{_s(n)} omitted: entries {first:,}–{last:,} of {main.path}] …"
    path = "" if main.path == "@" else main.path
    return f"… [{n:,} item{_s(n)} omitted: {path}[{first}:{last + 1}]] …"


def _fit_frame(doc: Any, main: MainCollection, limit: int, count: Callable[[str], int],
               cuts: Cuts) -> tuple[list[str], list[str]]:
    """The document around the main collection, tightened until it takes at most `limit` tokens."""
    # Looser limits first, then fewer sibling keys; the last attempt stands even if it is too big.
    for cap, limits in [(cap, limits) for cap in (25, 10, 4, 0) for limits in LEVELS[1:]]:
        attempt = Cuts()
        frame = _frame(doc, main.keys, "", limits, cap, attempt)
        index = frame.index(_PLACEHOLDER)
        before, after = frame[:index], frame[index + 1:]
        if count("\n".join(before + after)) <= limit:
            break
    cuts.add(attempt)
    return before, after


def _frame(node: Any, keys: list[str], indent: str, limits: Limits, cap: int, cuts: Cuts) -> list[str]:
    """Lines of `node` with the child at `keys` expanded; the main collection is a placeholder line."""
    if not keys:
        opening, closing = ("{", "}") if isinstance(node, dict) else ("[", "]")
        return [opening, _PLACEHOLDER, indent + closing]
    pad = indent + "  "
    entries: list[list[str]] = []
    shown, path_seen = 0, False
    for key, value in node.items():
        if path_seen and shown >= cap:
            break
        if key == keys[0]:
            path_seen = True
            inner = _frame(value, keys[1:], pad, limits, cap, cuts)
            entries.append([f"{pad}{_quoted(key)}: {inner[0]}"] + inner[1:])
        elif shown < cap:
            shown += 1
            entries.append([f"{pad}{_string(str(key), limits.string, cuts)}: {compact(value, limits, cuts, 1)}"])
    hidden = len(node) - 1 - shown
    cuts.frame_keys += hidden
    lines = ["{"]
    for position, entry in enumerate(entries):
        if position < len(entries) - 1:
            entry = entry[:-1] + [entry[-1] + ","]
        lines.extend(entry)
    if hidden:
        lines.append(f"{pad}…[+{hidden:,} keys]")
    lines.append(indent + "}")
    return lines
