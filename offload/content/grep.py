"""grep output (`path:line:text`) within a token budget: whole match lines, then exact match counts
per file for every file, so the model sees where the matches are before it asks for more.
"""

from __future__ import annotations

import re
from collections import Counter

from offload.content.lines import (Count, LineView, Lines, clip_to_budget, describe_omitted, fill, head_pools,
                                   line_count, whole_text)

__all__ = ["grep_preview"]

TOP_FILES = 20  # files listed by name in the extra facts; the rest are summed
# A numbered line's path runs to the first `:digits:`, so a path may hold colons ("src/a:b.py:12:…"):
# segments without colons, each after the first only if its colon does not start `:digits:`
# (possessive: nothing to backtrack, as fast as stopping at the first colon). Without line numbers
# the path can only end at its first colon.
_PATH_TO_NUMBER = rb"((?:[A-Za-z]:)?[^:\n]++(?::(?!\d+:)[^:\n]*+)*+)"
_NUMBERED_PATH = _PATH_TO_NUMBER + rb":\d+:"
_GREP_NUMBERED = re.compile(rb"\n" + _NUMBERED_PATH)
_LINE_NUMBERED = re.compile(_NUMBERED_PATH)
_LINE_PLAIN = re.compile(rb"((?:[A-Za-z]:)?[^:\n]+):")
# The same, at every line start of a buffer: for output whose files take turns line by line
_EVERY_NUMBERED = re.compile(rb"^" + _NUMBERED_PATH, re.M)
_EVERY_PLAIN = re.compile(rb"^((?:[A-Za-z]:)?[^:\n]+):", re.M)
_NUMBERED_SAMPLE = 16384  # bytes read to tell `path:line:text` from `path:text` (~140 lines of grep output)
_SHORT_RUNS = 64, 8  # after this many runs averaging fewer lines than this, count line by line in C


def grep_preview(data: bytes, budget: int, count: Count, *, max_lines: int = 200,
                 line_cap: int | None = None, total: int | None = None, per_file: Counter | None = None) -> LineView:
    """Whole match lines (at most `max_lines`, long ones cut), then exact match counts per file.

    `total` (the line count) and `per_file` (the view's `per_file` from an earlier call on the same
    data) save passes over the whole content when the caller has them.
    """
    total = line_count(data) if total is None else total
    per_file = _matches_per_file(data, total) if per_file is None else per_file
    matches = sum(per_file.values())
    ranked = [(path.decode("utf-8", "replace"), n) for path, n in per_file.most_common()]
    extra = {
        "lines": total,
        "matches": matches,
        "files": len(per_file),
        "matches_per_file": dict(ranked[:TOP_FILES]),
        "other_files": max(0, len(ranked) - TOP_FILES),
        "other_matches": sum(n for _, n in ranked[TOP_FILES:]),
    }
    whole = whole_text(data, budget, count) if total <= max_lines else None
    if whole is not None:
        return LineView(whole, False, "", extra, per_file)
    summary = _fit_summary(ranked, matches, min(budget // 3, 500), count)
    lines = Lines(data, count, line_cap or max(160, min(400, budget // 2)), total)
    marker_cost = count(f"… [{total:,} lines omitted: {total:,}–{total:,}] …") + 1
    room = budget - count("\n".join(summary)) - marker_cost - 1
    for pool in head_pools(lines, max_lines, budget):
        head, _ = fill(pool, room)
        if len(head) < len(pool):
            break
    while True:
        parts = [line.text for line in head]
        if head and head[-1].number < total - 1 or not head:
            first, n = len(head), total - len(head)
            parts.append(f"… [{n:,} line{'s' if n != 1 else ''} omitted: {first:,}–{total - 1:,}] …")
        text = "\n".join(parts + summary)
        if count(text) <= budget:
            break
        if head:
            head = head[:-1]
        else:
            text = clip_to_budget(text, budget, count, whole_lines=True)
            break
    omitted = describe_omitted(data, head, [], total)
    return LineView(text, bool(omitted), omitted, extra, per_file)


def _matches_per_file(data: bytes, total: int | None = None) -> Counter:
    """Match lines per file, exactly, for every file; `path:line:text`, else `path:text`.

    grep prints a file's matches together, so the work is per run of lines with one path prefix:
    the run's end is found by galloping probes and its lines carrying the prefix are counted with
    `bytes.count` (see `_checked` for why that count is trusted). Output whose files take turns (runs
    of a line or two) would cost a Python loop per line: once that shows, one regular-expression pass
    counts the rest. `total` is the line count (`line_count`), when the caller has it.
    """
    sample = b"\n" + data[:_NUMBERED_SAMPLE]
    # grep -C prints context lines (`path-12-…`) around each match: one line in ten may be a match. And
    # grep -n's numbers rise within a file: `path:12:30:00 ERROR …` (plain grep of timestamped lines) or
    # `path:… host:8080: …` read as numbered made 216 files of 3 (see `_rising_reading`).
    numbered = (len(_GREP_NUMBERED.findall(sample)) >= max(1, 0.05 * sample.count(b"\n"))
                and _rising_reading(sample[1:data.rfind(b"\n", 0, _NUMBERED_SAMPLE) + 1].split(b"\n")) is not None)
    if not numbered:
        counted = _counted(data, total)
        if counted is not None:
            return counted
    line_pattern = _LINE_NUMBERED if numbered else _LINE_PLAIN
    runs: list[tuple[bytes, int, int, int]] = []  # path, start, end, lines carrying the path
    skipped = 0  # lines that name no file
    position, size = 0, len(data)
    while position < size:
        if len(runs) + skipped == _SHORT_RUNS[0]:
            before = data.count(b"\n", 0, position)  # `position` starts a line: the lines before it
            if before < _SHORT_RUNS[0] * _SHORT_RUNS[1]:
                counts = _checked(data, runs, skipped, before, line_pattern, numbered)
                # ^ matches at `position` in MULTILINE mode
                counts.update((_EVERY_NUMBERED if numbered else _EVERY_PLAIN).findall(data, position))
                return counts
        line_end = data.find(b"\n", position)
        line_end = size if line_end == -1 else line_end
        match = line_pattern.match(data, position, line_end)
        if match is None:
            skipped += 1
            position = line_end + 1
            continue
        prefix = match.group(1) + b":"
        end = _run_end(data, line_end + 1, prefix)
        runs.append((match.group(1), position, end, 1 + data.count(b"\n" + prefix, position, end)))
        position = end
    return _checked(data, runs, skipped, line_count(data) if total is None else total, line_pattern, numbered)


_COUNT_LINE = re.compile(rb"^((?:[A-Za-z]:)?[^:\n]+(?::[^:\n]+)*):(\d{1,18})\r?$", re.M)


def _counted(data: bytes, total: int | None) -> Counter | None:
    """The matches per file of `grep -c` (or `rg -c`) output, `path:count` on every line, from its
    counts; None for any other output. Read as match lines, it was one match in each of 3,000 files
    where there were 17,995 in 2,769 (files with none are listed with 0)."""
    if not _COUNT_LINE.match(data, 0, data.find(b"\n") if b"\n" in data else len(data)):
        return None
    found = _COUNT_LINE.findall(data)
    if len(found) != (line_count(data) if total is None else total):
        return None
    counts: Counter = Counter()
    for path, number in found:
        if int(number):
            counts[path] += int(number)
    return counts


def _checked(data: bytes, runs: list[tuple[bytes, int, int, int]], skipped: int, lines: int,
             line_pattern: re.Pattern, numbered: bool) -> Counter:
    """The per-file counts of `runs`, which with the `skipped` lines cover the first `lines` lines.

    The galloping probes do not look at every line of a run, so a run's count is only the lines that
    carry its prefix: at most its lines. When those counts and the skipped lines add up to all the
    lines, every run is whole, and one sum checks them all (counting each run's lines as well took
    twice the time: 14 ms for 10 MB). Otherwise each run is checked, and one that fails is counted
    line by line. A numbered run must also rise: its path may hold ":12:" itself (a timestamp in a
    file name), and then the path cut at its first colon runs over many files (see `_rising_paths`).
    """
    counts: Counter = Counter()
    every_run_whole = skipped + sum(prefixed for *_, prefixed in runs) == lines
    for path, start, end, prefixed in runs:
        whole = every_run_whole or prefixed == data.count(b"\n", start, end) + (end == len(data) and data[-1:] != b"\n")
        if numbered and not _may_rise(data, path, start, end, prefixed):
            counts.update(_rising_paths(data[start:end].split(b"\n")))
        elif whole:
            counts[path] += prefixed
        else:
            for line in data[start:end].split(b"\n"):
                found = line_pattern.match(line)
                if found:
                    counts[found.group(1)] += 1
    return counts


_NUMBER = re.compile(rb"\d+(?=:)")
_NUMBERED_AT = re.compile(rb"(?=:(\d+):)")  # every place a `:line:` may follow the path, overlapping ones too


def _may_rise(data: bytes, path: bytes, start: int, end: int, prefixed: int) -> bool:
    """Whether the line numbers of a run of `prefixed` lines of one file can rise from its first line to
    its last: they must grow by at least one a line. Two probes, whatever the run's length."""
    if prefixed < 2:
        return True
    last = data.rfind(b"\n", start, end - 1) + 1
    first_number = _NUMBER.match(data, start + len(path) + 1)
    last_number = _NUMBER.match(data, last + len(path) + 1) if data.startswith(path + b":", last) else None
    if first_number is None or last_number is None:
        return True  # not numbered lines after all: nothing to tell
    return int(last_number.group()) - int(first_number.group()) >= prefixed - 1


def _rising_paths(lines: list[bytes]) -> Counter:
    """Match lines per file where a path may hold `:digits:`: the reading `_rising_reading` takes, or
    when none rises, the first (grep's own reading of an ordinary path)."""
    read = _rising_reading(lines)
    return Counter(path for path, _ in (read if read is not None else _readings(lines)[0]))


def _readings(lines: list[bytes]) -> list[list[tuple[bytes, int]]]:
    """(path, line number) of each numbered line, for each place in a line where a `:line:` may follow
    the path: the first, the second, … (a line with fewer places keeps its last)."""
    numbered = []
    for line in lines:
        places = [(found.start(), int(found.group(1))) for found in _NUMBERED_AT.finditer(line) if found.start()]
        if places:
            numbered.append((line, places))
    return [[(line[: places[min(choice, len(places) - 1)][0]], places[min(choice, len(places) - 1)][1])
             for line, places in numbered]
            for choice in range(max((len(places) for _, places in numbered), default=1))]


def _rising_reading(lines: list[bytes]) -> list[tuple[bytes, int]] | None:
    """Of the readings of `lines` (`_readings`), the first that makes each file's line numbers rise from
    one of its lines to the next, as grep -n's do; the first reading when no file has two lines (nothing
    to tell); None when files do and no reading rises: not grep -n output.

    A reading that makes every line a file of its own rises for want of any two lines to compare: sorted
    output of timestamped lines, cut at the time's `:42:`, was 1,998 files of one match each instead of 3."""
    # the first reading, as grep's own: one anchored match a line (all of them cost 0.35 ms a sample)
    first = [(found.group(1), int(found.group(2))) for found in map(_FIRST_READING.match, lines) if found]
    rises, compared = _rises(first)
    if rises:
        return first
    readings = _readings(lines)
    for read in readings[1:]:
        rises, pairs = _rises(read)
        compared = compared or pairs
        if rises:
            return read
    return None if compared else readings[0]


_FIRST_READING = re.compile(_PATH_TO_NUMBER + rb":(\d+):")  # _LINE_NUMBERED, its number captured too


def _rises(read: list[tuple[bytes, int]]) -> tuple[bool, bool]:
    """(whether each file's numbers rise from one of its lines to the next, whether any file has two)."""
    last: dict[bytes, int] = {}  # each file's number on its line before (files may take turns)
    pairs = False
    for path, number in read:
        before = last.get(path)
        if before is not None:
            pairs = True
            if number <= before:
                return False, True
        last[path] = number
    return pairs, pairs


def _run_end(data: bytes, start: int, prefix: bytes) -> int:
    """The start of the first line at or after `start` that does not begin with `prefix` (or the end)."""
    size = len(data)
    if start >= size or not data.startswith(prefix, start):
        return min(start, size)
    good, step = start, 256
    while True:
        probe = good + step
        if probe >= size:
            bad = size
            break
        line_start = data.rfind(b"\n", good, probe) + 1
        if line_start > good and not data.startswith(prefix, line_start):
            bad = line_start
            break
        good = max(good, line_start)
        step *= 2
    while True:
        first_newline = data.find(b"\n", good, bad)
        if first_newline == -1 or first_newline + 1 >= bad:
            return bad
        newline = data.find(b"\n", (good + bad) // 2, bad - 1)
        if newline == -1:
            newline = data.rfind(b"\n", good, (good + bad) // 2)
        line_start = newline + 1
        if data.startswith(prefix, line_start):
            good = line_start
        else:
            bad = line_start


def _fit_summary(ranked: list[tuple[str, int]], matches: int, budget: int, count: Count) -> list[str]:
    if not ranked:
        return []
    # Paths under one long directory are listed relative to it: the same facts in fewer tokens.
    common = _common_directory([path for path, _ in ranked])
    where = f" under {common}" if common else ""
    head = (f"… {matches:,} matching line{'s' if matches != 1 else ''} in {len(ranked):,}"
            f" file{'s' if len(ranked) != 1 else ''}{where}")
    for shown in (10, 6, 3, 1):
        rest = ranked[shown:]
        other = sum(n for _, n in rest)
        width = len(f"{max(ranked[0][1], other):,}")
        lines = [head + "; per file, most first:"]
        lines += [f"…   {n:>{width},}  {path[len(common):]}" for path, n in ranked[:shown]]
        if rest:
            lines.append(f"…   {other:>{width},}  in {len(rest):,} other file{'s' if len(rest) != 1 else ''}")
        if count("\n".join(lines)) <= budget:
            return lines
    return [head]


def _common_directory(paths: list[str]) -> str:
    """The longest directory prefix (ending with a slash) shared by every path, if worth stripping."""
    first, last = min(paths), max(paths)  # the common prefix of all is that of the extremes
    length = 0
    while length < min(len(first), len(last)) and first[length] == last[length]:
        length += 1
    prefix = first[:length]
    cut = max(prefix.rfind("/"), prefix.rfind("\\"))
    return prefix[: cut + 1] if cut >= 10 else ""
