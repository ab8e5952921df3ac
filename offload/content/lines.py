"""Line-oriented previews (text, logs, shell output, CSV rows) within a token budget.

They work on the raw bytes: lines are counted with `bytes.count` and the head and tail found by
slicing, so a 100 MB result costs a few C passes and never a split into a list of lines. Every count
in a preview is exact; line numbers are 0-based, as `fetch_slice(unit="lines")` reads them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from offload.content.errorlines import (ERROR_LINES, WORD_END, WORD_START, error_entry, error_grep, error_lines,
                                        plain, with_edges)
from offload.tokens import count_each

__all__ = ["LINES", "LineView", "Lines", "Unit", "clip_to_budget", "describe_omitted", "fill", "head_pools", "line_count",
           "nul_separated", "text_preview", "whole_text"]

Count = Callable[[str], int]
Unit = tuple[str, str]  # what a line is called, one and many: ("line", "lines"), ("entry", "entries")
LINES: Unit = ("line", "lines")

MAX_HEAD_LINES = 2000
# The tail is worth a large share when its last lines say how things ended.
_ENDINGS = (WORD_START + r"(?:errors?|exceptions?|traceback|fail(?:ed|ures?|s)?|fatal|panic(?:ked)?|abort(?:ed)?"
            r"|segmentation fault|core dumped|killed|timed out|exit(?:ed)?(?: with)? (?:code|status)|exit code"
            r"|returned non-zero)" + WORD_END)
_TAIL_PARTS = (  # the words one of its matches must hold, and a case-sensitive part of _TAIL_MATTERS
    (("Error", "Exception"), r"[A-Za-z](?:Error|Exception)" + WORD_END),
    (("passed", "failed", "error", "skipped", "warning", "test"),
     r"\b\d+ (?:passed|failed|errors?|skipped|warnings?|tests?)\b"),
    (("total", "summary", "result", "finished", "done"), r"^\s*(?:total|summary|result|results|finished|done)\b.*[:=]"),
    (("BUILD ",), r"\bBUILD (?:FAILED|SUCCESS(?:FUL)?)\b"),
    (("]", "}"), r"^\s*[\]}]\s*,?\s*$"),
)
_TAIL_MATTERS = re.compile("|".join([f"(?i:{_ENDINGS})", *(part for _, part in _TAIL_PARTS)]), re.M)
# The same search in parts, for ASCII text: each part runs only where its words are (a `in` test costs
# microseconds; the whole expression, every branch tried at every character, 0.3-0.5 ms on the 20 last
# lines of a log, a tenth of a 1 MB put's preview), and the case-blind part runs case-sensitively on
# the lowercased text, which for ASCII is the same match.
_ENDING_WORDS = ("error", "exception", "traceback", "fail", "fatal", "panic", "abort", "segmentation fault",
                 "core dumped", "killed", "timed out", "exit", "returned non-zero")
_ENDINGS_LOWER = re.compile(_ENDINGS)
_TAIL_SEARCHES = tuple((words, re.compile(part, re.M)) for words, part in _TAIL_PARTS)

def tail_matters(text: str) -> bool:
    """Whether the last lines `text` say how things ended (`_TAIL_MATTERS` finds something in them)."""
    text = plain(text)
    if not text.isascii():
        return _TAIL_MATTERS.search(text) is not None
    lowered = text.lower()
    if any(word in lowered for word in _ENDING_WORDS) and _ENDINGS_LOWER.search(lowered):
        return True
    return any(any(word in text for word in words) and part.search(text) for words, part in _TAIL_SEARCHES)


@dataclass
class LineView:
    text: str
    truncated: bool
    omitted: str
    extra: dict = field(default_factory=dict)
    per_file: Any = None  # grep: the match counts per file, for the next call on the same data


def nul_separated(data: bytes) -> bool:
    """Whether NUL bytes, not newlines, separate the entries (`find -print0`, `xargs -0`, `git ls-files -z`)."""
    return data.count(b"\x00") > data.count(b"\n")


def line_count(data: bytes) -> int:
    """Lines as fetch_slice counts them: a final line without a newline still counts."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


@dataclass
class _Line:
    number: int
    start: int
    end: int  # excludes the newline and a CR before it
    text: str = ""
    head_chars: int = 0  # characters shown from the start of a cut line
    tail_chars: int = 0  # characters shown from its end (the last line of the content keeps both ends)
    cut_chars: int = 0  # characters of the line left out of `text`
    count: Count | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def cost(self) -> int:
        """Tokens of `text` and its newline, counted when first asked: a preview reads more lines than it
        can show (counting them all was a third of a 1 MB log's preview)."""
        return self.count(self.text) + 1


class Lines:
    """Lines of a buffer found by slicing, decoded and cut to `line_cap` characters on demand."""

    def __init__(self, data: bytes, count: Count, line_cap: int, total: int | None = None):
        self.data, self.count, self.line_cap = data, count, line_cap
        self.total = line_count(data) if total is None else total

    def head(self, limit_lines: int, limit_chars: int) -> list[_Line]:
        found, position, chars = [], 0, 0
        while len(found) < min(limit_lines, self.total) and chars <= limit_chars:
            newline = self.data.find(b"\n", position)
            end = len(self.data) if newline == -1 else newline
            found.append(self.line(len(found), position, end))
            chars += min(end - position, self.line_cap)
            position = end + 1
        return found

    def tail(self, limit_lines: int, limit_chars: int) -> list[_Line]:
        """Up to `limit_lines` last lines, in order."""
        found: list[_Line] = []
        end = len(self.data) - (1 if self.data.endswith(b"\n") else 0)
        number, chars = self.total - 1, 0
        while number >= 0 and len(found) < limit_lines and chars <= limit_chars:
            start = self.data.rfind(b"\n", 0, end) + 1
            found.append(self.line(number, start, end))
            chars += min(end - start, self.line_cap)
            end, number = start - 1, number - 1
        found.reverse()
        return found

    def line(self, number: int, start: int, end: int) -> _Line:
        if end > start and self.data[end - 1] == 13:  # the CR of a CRLF: not shown, still counted in bytes
            end -= 1
        line = _Line(number, start, end, count=self.count)
        raw = self.data[start:end]
        if len(raw) <= self.line_cap:
            line.text = raw.decode("utf-8", "replace")
        elif number == self.total - 1:
            # the content's last line keeps its end too ("... exit code 1", a summary), as `fit` cuts it
            full = raw.decode("utf-8", "replace")
            if len(full) > self.line_cap:
                tail = self.line_cap // 3
                head = self.line_cap - tail
                line.text = f"{full[:head]}…[+{len(full) - self.line_cap:,} chars]…{full[-tail:]}"
                line.head_chars, line.tail_chars, line.cut_chars = head, tail, len(full) - self.line_cap
            else:
                line.text = full
        else:
            # The first cap characters take at most 4 bytes each; the whole line is decoded only to
            # count exactly what the cut leaves out.
            head = raw[: self.line_cap * 4].decode("utf-8", "replace")[: self.line_cap]
            full_length = len(raw.decode("utf-8", "replace"))
            line.text, line.head_chars, line.cut_chars = head, len(head), full_length - len(head)
            if line.cut_chars:
                line.text += f"…[+{line.cut_chars:,} chars]"
        return line

    def fit(self, line: _Line, tokens: int, both_ends: bool) -> _Line | None:
        """`line` cut by characters to cost at most `tokens`; None when not even a few characters fit."""
        full = self.data[line.start:line.end].decode("utf-8", "replace")

        def render(kept: int) -> _Line:
            if kept >= len(full):
                text, head, tail = full, 0, 0
            else:
                tail = kept // 3 if both_ends else 0
                head = kept - tail
                text = full[:head] + f"…[+{len(full) - kept:,} chars]" + ("…" + full[-tail:] if tail else "")
            return _Line(line.number, line.start, line.end, text, head, tail, len(full) - kept if head else 0,
                         self.count)

        low, high = 0, min(len(full), max(0, tokens) * 16)
        while low < high:
            middle = (low + high + 1) // 2
            if render(middle).cost <= tokens:
                low = middle
            else:
                high = middle - 1
        # a few characters of a line say nothing of it (a derived grep's `6812: big.c…[+66 chars]…type]`):
        # at least 32 of them, or a third of the line
        return render(low) if low >= 8 and (low >= 32 or 3 * low >= len(full)) else None


Cutter = Callable[[_Line, int], "_Line | None"]


def fill(lines: list[_Line], budget: int, cut: Cutter | None = None) -> tuple[list[_Line], int]:
    """The lines that fit in order; a first line too long for the whole budget is cut to fit."""
    taken, used = [], 0
    for index, line in enumerate(lines):
        if "cost" not in line.__dict__:
            _cost_ahead(lines, index)
        if used + line.cost > budget:
            if not taken and cut is not None:
                fitted = cut(line, budget)
                if fitted is not None:
                    taken.append(fitted)
                    used += fitted.cost
            break
        taken.append(line)
        used += line.cost
    return taken, used


def head_pools(lines: Lines, limit_lines: int, budget: int) -> Iterator[list[_Line]]:
    """The head's candidate lines: those of budget * 3 characters first (dense text fits fewer, and
    building a line costs about what pricing it does), then all of budget * 8 for a caller whose head
    took every one of the first. Either gives the same preview, since `fill` takes lines in order."""
    pool = lines.head(limit_lines, budget * 3)
    yield pool
    if len(pool) < min(limit_lines, lines.total):
        yield lines.head(limit_lines, budget * 8)


_AHEAD = 32  # lines priced at once: what a few hundred tokens of budget take, at ~3 µs a line, not ~10


def _cost_ahead(lines: list[_Line], index: int) -> None:
    """Count the next lines' `cost` together (`count_each`): the lines a preview takes are priced
    together, a few more than it can show at most."""
    count = lines[index].count
    ahead = [line for line in lines[index:index + _AHEAD] if "cost" not in line.__dict__ and line.count is count]
    for line, tokens in zip(ahead, count_each(count, [line.text for line in ahead])):
        line.__dict__["cost"] = tokens + 1  # as the cached property would have it


def fill_reversed(lines: list[_Line], budget: int, cut: Cutter | None = None) -> tuple[list[_Line], int]:
    taken, used = fill(lines[::-1], budget, cut)
    return taken[::-1], used


def _line_cap(budget: int) -> int:
    return max(160, budget * 2 // 3)


def text_preview(data: bytes, budget: int, count: Count, *, tail_lines: int | None = None,
                 scan_errors: bool = True, line_cap: int | None = None, total: int | None = None,
                 unit: Unit = LINES, records: bool = False, tail_first: bool = False) -> LineView:
    """Head, then the tail when it matters, with exact counts of what lies between.

    `tail_lines` fixes how many last lines to show (CSV shows one); None decides from the content.
    `total` is the line count when the caller knows it. `unit` names the lines in what the preview
    says it leaves out, for content whose lines are something else (NUL-separated entries). `records`:
    the lines are a CSV's, whose quoted fields may span lines; the head and tail keep whole records.
    `tail_first`: the tail matters whatever it says (the stdout of a command that failed: its last
    lines are where it stopped).
    """
    total = line_count(data) if total is None else total
    whole = whole_text(data, budget, count)
    if whole is not None:
        return LineView(whole, False, "", {"lines": total})
    lines = Lines(data, count, line_cap or _line_cap(budget), total)
    if total == 1:  # one long line: its start and its end, as much as the budget allows
        only = lines.fit(lines.line(0, 0, len(data)), budget, both_ends=True)
        return _assemble(data, budget, count, [only] if only else [], [], total, [], [], True, unit)
    marker_cost = count(f"… [{total:,} {unit[1]} omitted: {total:,}–{total:,}] …") + 1
    last = lines.tail(60, budget * 8)
    matters = tail_first or tail_matters("\n".join(line.text for line in last[-20:]))
    if tail_lines is None:
        tail_share, tail_cap = (0.55, 60) if matters else (0.15, 5)
    else:
        tail_share, tail_cap = 0.5, tail_lines
    error_reserve = min(budget // 5, 400) if scan_errors else 0

    def head_cut(line: _Line, tokens: int) -> _Line | None:
        return lines.fit(line, tokens, both_ends=False)

    def tail_cut(line: _Line, tokens: int) -> _Line | None:
        return lines.fit(line, tokens, both_ends=line.number == total - 1)

    # The last line whole ("exit code 1", a summary) when the tail matters, even when its share of a
    # small budget is less: the head and the error lines give way to it.
    final = last[-1].cost if matters and last and last[-1].number == total - 1 else 0
    final = final if final <= budget - marker_cost - 2 else 0

    ran_out = False  # whether the head took every line of its pool, in either allocation

    def allocate(reserve: int) -> tuple[list[_Line], list[_Line]]:
        nonlocal ran_out
        body = budget - marker_cost - reserve
        tail_budget = max(int(body * tail_share), final)
        tail, tail_used = fill_reversed(last[-tail_cap:] if tail_cap else [], tail_budget, tail_cut)
        head_pool = [line for line in head if not tail or line.number < tail[0].number]
        shown_head, head_used = fill(head_pool, body - tail_used, head_cut)
        ran_out = ran_out or len(shown_head) == len(head_pool)
        if len(shown_head) == len(head_pool) and tail_cap:
            # The head ran out of lines: the rest of the budget goes to the tail.
            after = shown_head[-1].number if shown_head else -1
            tail, _ = fill_reversed([line for line in last if line.number > after], body - head_used, tail_cut)
        return shown_head, tail

    for head in head_pools(lines, MAX_HEAD_LINES, budget):
        ran_out = False
        shown_head, tail = allocate(error_reserve)
        errors: list[str] = []
        error_numbers: list[int] = []
        complete = True
        gap = _gap(shown_head, tail, total)
        if scan_errors and gap:
            found, complete = error_lines(data, _gap_bytes(data, shown_head, tail), gap, ERROR_LINES)
            error_numbers = [number for number, _ in found]
            errors = [error_entry(number, text) for number, text in found]
        if error_reserve:
            # Give what the error lines did not use back to the head and the tail; a listed line that
            # they now show is no longer omitted, so it leaves the list.
            header = f"; {unit[1]} among them that report errors (first {len(errors)}; grep below for more):"
            block = "\n".join(errors + [header])
            scanned = (_gap_bytes(data, shown_head, tail), gap) if gap else None
            # past its first line, the list is given at most a third of the budget (`_assemble` lists
            # what fits): given what it needed, in `git log --stat` (messages that say "error") it left
            # no tail line, and at 300 tokens no line of the text at all
            room = max(error_reserve, budget // 3, count("\n".join(errors[:1] + [header])) + 2)
            shown_head, tail = allocate(min(count(block) + 2, room) if errors else 0)
            gap = _gap(shown_head, tail, total)
            kept = [i for i, number in enumerate(error_numbers) if gap and gap[0] <= number <= gap[1]]
            errors, error_numbers = [errors[i] for i in kept], [error_numbers[i] for i in kept]
            if scan_errors and gap and scanned:
                # lines the head or the tail shows no longer are omitted now: searched too, or an error
                # on one went unlisted beside "all 3" (line 7 of a log whose head gave way to the list)
                errors, error_numbers, complete = with_edges(
                    data, _gap_bytes(data, shown_head, tail), scanned, gap, errors, error_numbers, complete)
        if not ran_out:
            break
    if records:
        shown_head, tail = _whole_records(data, shown_head, tail)
    return _assemble(data, budget, count, shown_head, tail, total, errors, error_numbers, complete, unit)


def _whole_records(data: bytes, head: list[_Line], tail: list[_Line]) -> tuple[list[_Line], list[_Line]]:
    """`head` and `tail` without the lines that would split a record whose quoted field spans lines:
    the head ends after a line with an even count of quotes before its end, the tail starts at one with
    an even count after its start (the whole text has an even count: quotes quote). A head that ended
    in `15,name15,"multi` and a tail that began with `line, comment 2999",4498.5` read as broken rows."""
    while head and data.count(b'"', 0, head[-1].end) % 2:
        head = head[:-1]
    while tail and data.count(b'"', tail[0].start) % 2:
        tail = tail[1:]
    return head, tail


def whole_text(data: bytes, budget: int, count: Count) -> str | None:
    if len(data) > budget * 12:
        return None
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    return text if count(text) <= budget else None


def _gap(head: list[_Line], tail: list[_Line], total: int) -> tuple[int, int] | None:
    first = head[-1].number + 1 if head else 0
    last = tail[0].number - 1 if tail else total - 1
    return (first, last) if last >= first else None


def _gap_bytes(data: bytes, head: list[_Line], tail: list[_Line]) -> tuple[int, int]:
    """Byte offsets of the omitted lines: from after the last head line's newline to the first tail line."""
    start = data.find(b"\n", head[-1].end) + 1 if head else 0
    end = tail[0].start if tail else len(data)
    return start, end


def _assemble(data: bytes, budget: int, count: Count, head: list[_Line], tail: list[_Line], total: int,
              errors: list[str], error_numbers: list[int], complete: bool, unit: Unit = LINES) -> LineView:
    while True:
        gap = _gap(head, tail, total)
        parts = [line.text for line in head]
        if gap:
            first, last = gap
            n = last - first + 1
            if errors:
                which = f"all {len(errors)}" if complete else f"first {len(errors)}; grep below for more"
                parts.append(f"… [{n:,} {unit[n != 1]} omitted: {first:,}–{last:,};"
                             f" {unit[1]} among them that report errors ({which}):] …")
                parts.extend(errors)
            else:
                parts.append(f"… [{n:,} {unit[n != 1]} omitted: {first:,}–{last:,}] …")
        parts.extend(line.text for line in tail)
        text = "\n".join(parts)
        if count(text) <= budget:
            break
        if errors:
            errors = errors[:-1]
            complete = False
        elif head and (len(head) >= len(tail) or not tail):
            head = head[:-1]
        elif tail:
            tail = tail[1:]
        else:
            text = clip_to_budget(text, budget, count, whole_lines=True)
            break
    omitted = describe_omitted(data, head, tail, total, unit)
    extra: dict = {"lines": total}
    if error_numbers:
        extra["error_lines"] = error_numbers[: len(errors)]
    if errors and not complete:
        extra["error_grep"] = error_grep(errors)
    return LineView(text, bool(omitted), omitted, extra)


def describe_omitted(data: bytes, head: list[_Line], tail: list[_Line], total: int, unit: Unit = LINES) -> str:
    parts = []
    gap = _gap(head, tail, total)
    if gap:
        first, last = gap
        start, end = _gap_bytes(data, head, tail)
        n = last - first + 1
        parts.append(f"{unit[1]} {first:,}–{last:,} ({n:,} {unit[n != 1]}, {end - start:,} bytes) not shown")
    cut = [line for line in head + tail if line.cut_chars]
    if len(cut) == 1 and cut[0].tail_chars:
        line = cut[0]
        first = line.head_chars
        parts.append(f"{unit[0]} {line.number:,}: chars {first:,}–{first + line.cut_chars - 1:,}"
                     f" ({line.cut_chars:,} chars) not shown")
    elif len(cut) == 1:
        line = cut[0]
        parts.append(f"{unit[0]} {line.number:,} cut after {line.head_chars:,} chars ({line.cut_chars:,} chars not shown)")
    elif cut:
        chars = sum(line.cut_chars for line in cut)
        parts.append(f"{len(cut):,} long {unit[1]} cut ({chars:,} chars not shown)")
    return "; ".join(parts)


def clip_to_budget(text: str, budget: int, count: Count, *, whole_lines: bool = False) -> str:
    """The longest prefix within budget: the last resort for budgets too small for any layout.

    `whole_lines` (previews): it ends at a line's end instead when that keeps a third of it or more (a
    JSON skeleton cut mid-marker read `…[+`). Slice pages keep the longest prefix: the next page
    starts where it ends.
    """
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    if whole_lines and low < len(text):
        line_end = text.rfind("\n", 0, low)
        if line_end >= low // 3:
            return text[:line_end]
    return text[:low]
