"""grep over an artifact's lines, for `query_artifact`: every line scanned so the count is exact, only the
page's matches (with their context) kept, the whole scan within a deadline.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import regex

from offload.errors import InvalidArgument, QueryError, QueryTimeout

__all__ = ["GREP_EXAMPLE", "TOO_DEEP", "GrepPage", "grep_lines", "match_span"]

TOO_DEEP = ("The {} is nested too deeply for its parser (thousands of parentheses or operators): write it "
            "with fewer levels, or take the part you need in several calls.")

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


# A pattern no longer than this, with no repetition (* + ? {n,m}), cannot backtrack without end: each
# place it is tried costs at most its length. Such a pattern (a literal, "ms$", "ERROR|FATAL") is searched
# without regex's per-call timeout, which cost 2.5 of the 3 µs a matching line took; the deadline is
# still checked between blocks of lines.
_BOUNDED_LENGTH = 100


@functools.lru_cache(maxsize=128)
def _bounded(pattern: str) -> bool:
    """Whether `pattern` has no repetition (see _BOUNDED_LENGTH): none outside a [set], none escaped.
    An inline group such as (?i) counts as repetition, which only costs the fast path."""
    if len(pattern) > _BOUNDED_LENGTH:
        return False
    position, in_set = 0, False
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            position += 2
            continue
        if in_set:
            in_set = char != "]"
        elif char == "[":
            in_set = True
            position += 1
            if pattern[position:position + 1] == "^":
                position += 1
            if pattern[position:position + 1] == "]":  # a ] first in a set is itself
                position += 1
            continue
        elif char in "*+?{":
            return False
        position += 1
    return True


@functools.lru_cache(maxsize=128)
def _compile_regex(pattern: str, ignore_case: bool) -> tuple[Any, Any | None]:
    flags = regex.IGNORECASE if ignore_case else 0
    line_pattern = regex.compile(pattern, flags)
    block_pattern = None if _LINE_SENSITIVE.search(pattern) else regex.compile(pattern, flags | regex.MULTILINE)
    return line_pattern, block_pattern


_SPACED = re.compile(r"([\"\]}\d]|true|false|null)([:,]) +")  # `"id": 7`, `1, 2`, `"a", "b"`


def unspaced(pattern: str) -> str | None:
    """`pattern` without the spaces after the `:` and `,` that follow a JSON value or key (`"id": 7` ->
    `"id":7`), or None when it has none: the preview shows JSON spaced, compact JSON has no spaces."""
    plain = _SPACED.sub(r"\1\2", pattern)
    return plain if plain != pattern else None


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
        raise QueryError(TOO_DEEP.format("regular expression")) from None

    deadline = _Deadline(time.monotonic() + timeout, guarded=not _bounded(pattern))
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
        so_far = f"grep stopped after {timeout:g} s at line {base:,} ({scan.total:,} matching lines so far)"
        many = ("every line is read to count the matches exactly, and this artifact has more lines than that "
                "time allows: narrow the pattern to the lines you need, or query a derived artifact")
        if deadline.guarded:  # the pattern may backtrack, or the artifact be that big
            raise QueryTimeout(
                f"{so_far}: the pattern may be too slow — nested repetition like (a+)+ or (a|aa)+ backtracks "
                f"without end; use a simpler pattern: literal text, [^ ]* instead of .*, no repeated groups, e.g. "
                f"{GREP_EXAMPLE!r}. Or {many}.") from None
        raise QueryTimeout(f"{so_far}: {many}.") from None
    return scan.page()


def match_span(pattern: str, line: str, *, ignore_case: bool = False, timeout: float = 0.5) -> tuple[int, int] | None:
    """Where `pattern` (already known to compile) first matches in `line`, as grep_lines matched it;
    None if it does not, or not within `timeout` seconds (a cut line then shows its start)."""
    try:
        found = _compile_regex(pattern, ignore_case)[0].search(line, timeout=timeout)
    except (TimeoutError, regex.error, RecursionError):
        return None
    return found.span() if found is not None else None


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


@dataclass
class _Deadline:
    at: float  # time.monotonic()
    guarded: bool  # each search gets the time left (a pattern that may backtrack without end)


def _remaining(deadline: _Deadline) -> float:
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise _OutOfTime
    return left


def _search(pattern: Any, text: str, pos: int, deadline: _Deadline) -> Any:
    if not deadline.guarded:
        return pattern.search(text, pos)
    try:
        return pattern.search(text, pos, timeout=_remaining(deadline))
    except TimeoutError:  # raised by `regex` when the search itself runs out of time
        raise _OutOfTime from None


def _match_each(block: list[str], line_pattern: Any, deadline: _Deadline) -> list[int]:
    return [index for index, line in enumerate(block) if _search(line_pattern, line, 0, deadline) is not None]


def _match_block(block: list[str], block_pattern: Any, line_pattern: Any, deadline: _Deadline) -> list[int]:
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
    """The index of the line holding `position` (a newline belongs to the line it ends), at `hint` or
    after: most often `hint` itself (the next match is on the next line), else found by C's bisect (a
    binary search in Python cost half of a grep of 1.5 million matching lines)."""
    if starts[hint + 1] > position:
        return hint
    return min(bisect.bisect_right(starts, position, hint) - 1, len(starts) - 2)


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
