"""fetch_slice: a bounded page of a stored artifact, by lines, chars, bytes or JSON items.

Reads only the chunks that hold the page (the chunk table records each chunk's first byte, char and
line; the item index records each item's byte range). A page never exceeds its token budget: fewer
units come back and `next` says where to continue. A line or item larger than the budget comes back
cut, and `next` reads the rest of it in chars (a line) or bytes (an item), then returns to lines or
items, so following `next` visits every byte once. A slice is never itself offloaded.
"""

from __future__ import annotations

import base64
import bisect
import json
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import InvalidArgument, StoreError
from ..jsontext import dumps
from ..store import Store
from ..store.chunking import ITEMS_PER_BLOCK
from ..tokens import MAX_BYTES_PER_TOKEN
from ..utf8 import char_at, char_start, invalid_prefix, mixed_prefix
from .pages import DEFAULT_LIMITS, Page, Resume, SliceRequest, absolute, fit_chars, nul_entries, validate
from .schemas import _call, render_slice

class Slicer:
    """fetch_slice over one store; `count` is the token counter, `budget` the page budget in tokens."""

    def __init__(self, store: Store, count: Callable[[str], int], budget: int,
                 items_of: Callable[[dict, str | None], list[Any]], held: Callable[..., int]):
        self.store, self.count, self.budget = store, count, budget
        self.items_of = items_of  # (artifact row, path) -> the parsed array, when no stored index fits
        # `held(text, estimate)`: a whole page's tokens as held to the budget (by the real tokenizers too,
        # when the page could be over by them: `referencing.Measure.within`)
        self.held = held

    def slice(self, row: dict, req: SliceRequest) -> dict[str, Any]:
        """The page as the model reads it within the budget: built for what the budget leaves its content,
        then measured whole (the rendered text every adapter sends, and the JSON form) and built again
        smaller by what it is over. Content is counted as the JSON form carries it (escaped) and the
        envelope is reserved, so the first build nearly always fits."""
        validate(req.unit, req.offset, req.limit)
        info = self.store.content(row["sha256"])
        resume = self._resume(row, info, req)
        envelope = self._envelope(row, req)
        budget = self.budget - envelope
        for _attempt in range(8):
            page = self._page(row, info, req, resume, budget)
            over, tokens = self._overrun(page)
            if over <= 0:
                break
            # smaller by what it is over, from what it holds: a last page holds less than its budget
            budget = min(budget, tokens - envelope) - over
        return page

    def _resume(self, row: dict, info, req: SliceRequest) -> Resume | None:
        if req.unit == "items" or req.path is None:
            return None
        if req.unit == "lines":
            raise InvalidArgument('path applies to unit="items" (a JMESPath to the array to page), or continues a '
                                  "cut line or item as a cut's next names it; not to lines.")
        resume = Resume.of(req)
        if resume.unit == "items" and info.items is None:
            raise InvalidArgument(f"path {req.path!r} continues an item, but {row['id']} has no stored items; "
                                  'omit path to read plain bytes.')
        return resume

    def _envelope(self, row: dict, req: SliceRequest) -> int:
        """Tokens a page takes besides its content (fields, footer, the next call), numbers as long as any."""
        big = 10**12
        nxt = {"artifact_id": row["id"], "unit": req.unit, "offset": big, "limit": req.limit, "path": req.path}
        page = {"artifact_id": row["id"], "unit": req.unit, "offset": big, "limit": req.limit, "returned": big,
                "total": big, "next_offset": big, "next": nxt, "content": "", "encoding": "base64"}
        return max(self.count(render_slice(page)), self.count(json.dumps(page, ensure_ascii=False)))

    def _overrun(self, page: dict[str, Any]) -> tuple[int, int]:
        """(tokens the page is over its budget, tokens it takes), of the larger of its two forms, in the
        units it is built in (`count`'s). A page within the budget by the count is then held to it
        (`held`): over by the real tokenizers (dense CJK, combining marks), it is over by what that is
        in the count's units, scaled by how much the count undercounted it."""
        forms = (render_slice(page), json.dumps(page, ensure_ascii=False))
        estimates = [self.count(form) for form in forms]
        tokens = max(estimates)
        if tokens > self.budget:
            return tokens - self.budget, tokens
        held = max(self.held(form, estimate) for form, estimate in zip(forms, estimates))
        if held <= self.budget:
            return 0, tokens
        return -(-(held - self.budget) * tokens // held) + 1, tokens

    def cost(self, text: str) -> int:
        """Tokens of `text` as the JSON form carries it (escaped: ESC is the six characters \\u001b, a quote
        two), which is what bounds a page: the rendered text carries the same text unescaped."""
        return self.count(json.dumps(text, ensure_ascii=False)[1:-1])

    @staticmethod
    def _most(budget: int) -> int:
        """Bytes (or characters, each at least a byte) a page of `budget` tokens can hold at most: so a
        huge limit reads what a page can show, not the artifact."""
        return MAX_BYTES_PER_TOKEN * max(budget, 1)

    def _page(self, row: dict, info, req: SliceRequest, resume: Resume | None, budget: int) -> dict[str, Any]:
        if req.unit == "items":
            return self._items(row, info, req, budget)
        if req.unit != "bytes" and row["kind"] == "binary":
            raise InvalidArgument(f"{row['id']} is binary data ({row['content_type']}); use unit=\"bytes\".")
        total = {"lines": info.lines, "chars": info.chars, "bytes": info.bytes}[req.unit]
        start = absolute(req.offset, total)
        limit = req.limit if req.limit is not None else DEFAULT_LIMITS[req.unit]
        if req.unit == "lines" and req.limit is None and req.offset < 0:
            limit = max(total - start, 1)  # "the last 500": to the end, as offset=-40 is "the last 40" (`_tail`)
        if req.unit == "lines":
            page = self._lines(row, info, req, start, limit, total, budget)
            if req.offset < 0 and start + limit >= total and page["next_offset"] is not None and "cut" not in page:
                page = self._tail(row, info, req, page, total, budget)
            return page
        if req.unit == "chars":
            return self._chars(row, info, req, start, limit, total, resume, budget)
        if row["kind"] == "binary":
            return self._binary_bytes(row, req, start, limit, total, budget)
        return self._text_bytes(row, info, req, start, limit, total, resume, budget)

    # -- lines ------------------------------------------------------------------------------

    def _newline_ending(self, sha: str, line: int) -> tuple[dict[str, int], bytes, int | None]:
        """(chunk meta, chunk bytes, byte position in it) of the newline that ends 0-based `line`.

        That chunk is the last one with fewer newlines before it than line + 1; the position is None
        when the line runs to the end of the artifact without a newline."""
        seq = self.store.chunk_at(sha, "lines", line)
        meta, data = next(self.store.iter_chunks(sha, seq, seq))
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        nth = line - meta["line_start"]
        return meta, data, (int(newlines[nth]) if 0 <= nth < len(newlines) else None)

    def _line_start(self, sha: str, line: int) -> tuple[int, int]:
        """(chunk seq, byte position in that chunk) where 0-based `line` starts."""
        if line == 0:
            return 0, 0
        meta, _data, pos = self._newline_ending(sha, line - 1)
        if pos is None:
            raise StoreError(f"stored content {sha[:16]}… no longer matches its line index; run `offload verify`")
        return meta["seq"], pos + 1

    def _line_end_char(self, sha: str, line: int, total_chars: int) -> int:
        """Char offset where `line` ends (its newline, or the end): read from one chunk, whatever its length."""
        meta, data, pos = self._newline_ending(sha, line)
        if pos is None:
            return total_chars
        return meta["char_start"] + len(data[:pos].decode("utf-8", errors="replace"))

    def _iter_text_from(self, sha: str, seq: int, pos: int) -> Iterator[tuple[int, str]]:
        """(global char offset, text) pieces from byte `pos` of chunk `seq` to the end."""
        for meta, data in self.store.iter_chunks(sha, seq):
            head = data[:pos].decode("utf-8", errors="replace") if pos else ""
            yield meta["char_start"] + len(head), data[pos:].decode("utf-8", errors="replace")
            pos = 0

    def _lines(self, row: dict, info, req: SliceRequest, start: int, limit: int, total: int,
               budget: int) -> dict[str, Any]:
        page = Page(budget, limit, self.cost)
        if start >= total:
            return self._response(row, req, start, limit, [], total, None)
        seq, pos = self._line_start(row["sha256"], start)
        carry = ""
        carry_char = None
        for char_offset, text in self._iter_text_from(row["sha256"], seq, pos):
            if carry_char is None:
                carry_char = char_offset
            lines = (carry + text).split("\n")
            carry = lines.pop()  # the last piece may continue in the next chunk
            for line in lines:
                if page.full:
                    break
                if not page.add(line):
                    return self._cut_or_stop(row, info, req, start, limit, page, total, line, carry_char)
                carry_char += len(line) + 1
            if page.full:
                break
            if carry and self.count(carry) > budget - page.used:
                # a line longer than what is left of the budget: stop reading its further chunks
                return self._cut_or_stop(row, info, req, start, limit, page, total, carry, carry_char, whole=False)
        else:
            if carry and not page.full and not page.add(carry):
                return self._cut_or_stop(row, info, req, start, limit, page, total, carry, carry_char)
        returned = len(page.parts)
        nxt = start + returned if start + returned < total else None
        return self._response(row, req, start, limit, page.parts, total, nxt)

    def _tail(self, row: dict, info, req: SliceRequest, page: dict[str, Any], total: int,
              budget: int) -> dict[str, Any]:
        """The last lines that fit, for a negative offset whose lines did not all fit: such a page is
        asked for its end (a log's last lines, where it says how it ended), and a page of its first
        lines had left out the last ones. Each try starts where the lines of the one before would end
        the page, until they reach the end; the lines asked for before them are named, with the call."""
        asked = page["offset"]
        for _attempt in range(6):
            later = total - page["returned"]
            if not page["returned"] or later <= page["offset"]:
                break
            tail = self._lines(row, info, req, later, total - later, total, budget)
            if "cut" in tail or not tail["returned"]:
                break
            page = tail
            if tail["next_offset"] is None:
                break
        start = page["offset"]
        if start > asked:
            before = {"artifact_id": row["id"], "offset": asked, "limit": start - asked}
            page["note"] = (f"the last {page['returned']:,} of the {total - asked:,} lines asked for are what fits "
                            f"the page; the {start - asked:,} before them: {_call('fetch_slice', before)}")
        return page

    def _cut_or_stop(self, row, info, req, start, limit, page: Page, total, line: str, line_char: int,
                     whole: bool = True) -> dict[str, Any]:
        """The page so far when it holds whole lines; else the head of the one line that does not fit.

        `line` is that line's text as far as it was read (all of it when `whole`); a longer line's exact
        length comes from the chunk that holds its end, not from reading the chunks in between."""
        if page.parts:  # budget reached at a line boundary
            return self._response(row, req, start, limit, page.parts, total, start + len(page.parts))
        length = len(line) if whole else self._line_end_char(row["sha256"], start, info.chars) - line_char

        def says(keep: int) -> str:
            return (f"line {start:,} has {length:,} characters, more than a page's budget; characters "
                    f"0–{keep - 1:,} of it are shown, and next reads the rest in chars, then returns to lines")

        room = page.budget - self.cost(says(length))
        keep = fit_chars(line[: self._most(room)], room, self.cost)
        resp = self._response(row, req, start, limit, [], total, line_char + keep)
        resp["content"], resp["cut"] = line[:keep], says(keep)
        resp["next"] = {"artifact_id": row["id"], "unit": "chars", "offset": line_char + keep,
                        "limit": length - keep, "path": Resume("lines", start, req.limit, None).marker}
        return resp

    # -- chars ------------------------------------------------------------------------------

    def _read_chars(self, sha: str, start: int, count: int) -> tuple[str, int]:
        """Up to `count` characters from `start`, and the 0-based line that `start` is in."""
        pieces: list[str] = []
        got, line = 0, 0
        for meta, data in self.store.iter_chunks(sha, self.store.chunk_at(sha, "chars", start)):
            text = data.decode("utf-8", errors="replace")
            lo = max(start - meta["char_start"], 0)
            if not pieces:
                line = meta["line_start"] + text.count("\n", 0, lo)
            pieces.append(text[lo : lo + count - got])
            got += len(pieces[-1])
            if got >= count:
                break
        return "".join(pieces), line

    def _chars(self, row: dict, info, req: SliceRequest, start: int, limit: int, total: int,
               resume: Resume | None, budget: int) -> dict[str, Any]:
        want = min(limit, total - start, self._most(budget)) if start < total else 0
        text, line = self._read_chars(row["sha256"], start, want + 1) if want else ("", 0)
        text, after = text[:want], text[want:]
        line_end = None
        if resume is not None and want:
            line_end = self._rest_of_line(row, info, resume, start, line, text, after)
            text = text[: line_end - start]
        keep = len(text) if self.cost(text) <= budget else fit_chars(text, budget, self.cost)
        end = start + keep
        resp = self._response(row, req, start, limit, [], total, end if end < total else None)
        resp["content"], resp["returned"] = text[:keep], keep
        if line_end is not None and end < line_end:
            resp["next"]["limit"] = line_end - end  # still the exact rest of the line
        elif line_end is not None:  # the newline after the rest is the one that ends the line
            resume.back(resp, info.lines)
        return resp

    def _rest_of_line(self, row: dict, info, resume: Resume, start: int, line: int, text: str, after: str) -> int:
        """Char offset where the cut line being continued ends; `text` was read from `start`."""
        if line != resume.index:
            raise InvalidArgument(f"path {resume.marker!r} continues line {resume.index:,}, but char {start:,} is in "
                                  f"line {line:,}; follow next as given, or omit path to read plain chars.")
        newline = text.find("\n")
        if newline >= 0:
            return start + newline
        if after in ("", "\n"):
            return start + len(text)
        return self._line_end_char(row["sha256"], line, info.chars)

    # -- bytes ------------------------------------------------------------------------------

    def _binary_bytes(self, row: dict, req: SliceRequest, start: int, limit: int, total: int,
                      budget: int) -> dict[str, Any]:
        end = min(start + limit, start + self._most(budget), total)
        data = self.store.read_range(row["sha256"], start, end) if end > start else b""
        keep = self._fit_base64(data, budget)
        stop = start + keep
        resp = self._response(row, req, start, limit, [], total, stop if stop < total else None)
        resp["content"], resp["returned"], resp["encoding"] = _base64(data[:keep]), keep, "base64"
        return resp

    def _fit_base64(self, data: bytes, budget: int) -> int:
        """How many bytes of `data` fit `budget` tokens as base64 (at least one: progress)."""
        keep = len(data)
        while keep > 1 and self.count(_base64(data[:keep])) > budget:
            keep = max(keep * budget // max(self.count(_base64(data[:keep])), 1) - 1, 1)
        return keep

    def _text_bytes(self, row: dict, info, req: SliceRequest, start: int, limit: int, total: int,
                    resume: Resume | None, budget: int) -> dict[str, Any]:
        """Bytes of text, as text: the page starts and ends between characters (never less than one).

        An offset inside a character starts the page at that character's first byte (the response's
        offset says so). Bytes that are no valid UTF-8 come back base64, in a page of their own, with the
        few valid ones among them (`mixed_prefix`)."""
        if start >= total:
            resp = self._response(row, req, start, limit, [], total, None)
            resp["encoding"] = "utf-8"
            return resp
        span = min(limit, self._most(budget))
        lo = max(start - 3, 0)  # 3 bytes either side: enough to see the characters around both ends
        window = self.store.read_range(row["sha256"], lo, min(start + span + 4, total))
        first = lo + char_start(window, start - lo)
        wanted_end = min(first + span, total)
        item_end = self._rest_of_item(row, info, resume, first) if resume is not None else None
        if item_end is not None:
            wanted_end = min(wanted_end, item_end)
        stop = lo + char_start(window, wanted_end - lo)
        if stop <= first:  # the limit is smaller than the character there: a page holds at least one
            stop = first + char_at(window, first - lo)
        page = window[first - lo : stop - lo]
        bad = mixed_prefix(page)
        among = " (or stand among such bytes)" if bad and bad > invalid_prefix(page) else ""

        def says(stop: int) -> str | None:
            notes = []
            if first < start:
                notes.append(f"byte {start:,} is inside a character: the page starts at its first byte, {first:,}")
            if bad:
                notes.append(f"bytes {first:,}–{stop - 1:,} are not valid UTF-8{among}, so they come back base64")
            return "; ".join(notes) or None

        room = budget - self.cost(says(wanted_end) or "")  # the note travels with the page
        if bad:
            keep = self._fit_base64(page[:bad], room)
            content, encoding = _base64(page[:keep]), "base64"
        else:
            try:
                text = page.decode("utf-8")
            except UnicodeDecodeError as exc:  # text up to the first byte that is no valid UTF-8
                text = page[: exc.start].decode("utf-8")
            if self.cost(text) > room:
                text = text[: fit_chars(text, room, self.cost)]
            content, encoding = text, "utf-8"
            keep = len(text.encode("utf-8"))
        stop = first + keep
        resp = self._response(row, req, first, limit, [], total, stop if stop < total else None)
        resp["content"], resp["returned"], resp["encoding"] = content, keep, encoding
        if note := says(stop):
            resp["note"] = note
        if item_end is not None and stop < item_end:
            resp["next"]["limit"] = item_end - stop  # still the exact rest of the item
        elif item_end is not None:
            resume.back(resp, info.items)
        return resp

    def _rest_of_item(self, row: dict, info, resume: Resume, first: int) -> int:
        """Byte offset where the cut item being continued ends (its stored range's end)."""
        found = self._item_containing(row["sha256"], info.items, first)
        if found is None or found[0] != resume.index:
            raise InvalidArgument(f"path {resume.marker!r} continues item {resume.index:,}, but byte {first:,} is not "
                                  "inside it; follow next as given, or omit path to read plain bytes.")
        return found[2]

    def _item_containing(self, sha: str, items: int, byte: int) -> tuple[int, int, int] | None:
        """(item, start, end) of the indexed item whose byte range holds `byte`: a search over the index
        blocks (one read each), never a scan of the document."""
        low, high = 0, (items - 1) // ITEMS_PER_BLOCK
        while low < high:
            middle = (low + high + 1) // 2
            if self.store.item_ranges(sha, middle * ITEMS_PER_BLOCK, middle * ITEMS_PER_BLOCK + 1)[0][0] <= byte:
                low = middle
            else:
                high = middle - 1
        base = low * ITEMS_PER_BLOCK
        ranges = self.store.item_ranges(sha, base, min(base + ITEMS_PER_BLOCK, items))
        k = bisect.bisect_right([s for s, _e in ranges], byte) - 1
        if k < 0 or not ranges[k][0] <= byte < ranges[k][1]:
            return None
        return base + k, ranges[k][0], ranges[k][1]

    # -- items ------------------------------------------------------------------------------

    def _items(self, row: dict, info, req: SliceRequest, budget: int) -> dict[str, Any]:
        entries = nul_entries(row)  # paged as JSON strings
        indexed = info.items is not None and (req.path in (None, info.items_path) or
                                             (req.path in ("", "@") and info.items_path == ""))
        not_utf8: list[int] = []  # entries shown with U+FFFD for bytes that are not UTF-8
        if indexed:
            total = info.items
            fetch = lambda a, b: self._indexed_items(row["sha256"], a, b, not_utf8 if entries else None)  # noqa: E731
        else:
            if row["kind"] not in ("json", "ndjson"):
                instead = '"bytes" (binary comes back base64)' if row["kind"] == "binary" else '"lines" (or "chars")'
                raise InvalidArgument(
                    f"unit=\"items\" needs a JSON array, NDJSON rows or NUL-separated entries (`find -print0`)"
                    f"{'; path does not apply to entries' if entries else ''}; {row['id']} is {row['kind']}"
                    f"{'' if entries else ' without them'}. Use unit={instead} instead.")
            array = self.items_of(row, req.path)
            total = len(array)
            fetch = lambda a, b: [(dumps(x).decode(), None) for x in array[a:b]]  # noqa: E731
        start = absolute(req.offset, total)
        limit = req.limit if req.limit is not None else DEFAULT_LIMITS["items"]
        page = Page(budget, limit, self.cost)
        pos = start
        batch = 64
        while pos < total and not page.full:
            for text, span in fetch(pos, min(pos + batch, total, start + limit)):
                if not page.add(text):
                    if not page.parts:
                        return self._big_item(row, req, start, limit, total, text, span, budget, entries)
                    return self._noted(self._response(row, req, start, limit, page.parts, total, pos, items=True),
                                       not_utf8, pos)
                pos += 1
        nxt = pos if pos < total else None
        return self._noted(self._response(row, req, start, limit, page.parts, total, nxt, items=True), not_utf8, pos)

    def _noted(self, resp: dict[str, Any], not_utf8: list[int], end: int) -> dict[str, Any]:
        """A page of entries says which of them hold bytes that are not UTF-8 (shown as U+FFFD)."""
        shown = [n for n in not_utf8 if n < end]
        if shown:
            listed = ", ".join(f"{n:,}" for n in shown[:5]) + (f" and {len(shown) - 5:,} more" if len(shown) > 5 else "")
            resp["note"] = (f"entr{'ies' if len(shown) > 1 else 'y'} {listed} hold{'' if len(shown) > 1 else 's'} "
                            "bytes that are not valid UTF-8, shown as U+FFFD; unit=\"bytes\" reads them exactly")
        return resp

    def _indexed_items(self, sha: str, first: int, last: int,
                       not_utf8: list[int] | None = None) -> list[tuple[str, tuple[int, int]]]:
        """Items first..last-1 as (JSON text, its byte range without the whitespace around it): one
        ranged read for the whole span, then cut locally. With `not_utf8` (a list the numbers of entries
        with invalid UTF-8 are added to), the items are NUL-separated entries: each whole, a JSON string."""
        ranges = self.store.item_ranges(sha, first, last)
        if not ranges:
            return []
        base = ranges[0][0]
        # a page of huge items must not read megabytes it cannot show: stop the span at ~4 MiB
        keep = next((i for i, (_s, e) in enumerate(ranges) if i and e - base > 4 << 20), len(ranges))
        ranges = ranges[:keep]
        span = self.store.read_range(sha, base, ranges[-1][1])
        items = []
        for number, (s, e) in enumerate(ranges, first):
            raw = span[s - base : e - base]
            if not_utf8 is not None:  # an entry: spaces are part of a name
                try:
                    name = raw.decode("utf-8")
                except UnicodeDecodeError:
                    name = raw.decode("utf-8", errors="replace")
                    not_utf8.append(number)
                items.append((dumps(name).decode(), (s, e)))
                continue
            lead = len(raw) - len(raw.lstrip())
            items.append((raw.strip().decode("utf-8", errors="replace"), (s + lead, e)))
        return items

    def _big_item(self, row, req, start, limit, total, text: str, span: tuple[int, int] | None,
                  budget: int, entry: bool = False) -> dict[str, Any]:
        """The head of an item larger than a page. A stored item's rest is read by `next` in bytes (its
        exact range), then paging returns to items; an item of an array found by a JMESPath `path` has no
        stored range, so the cut says how to query into it and `next` goes on with the following item.
        An entry (NUL-separated) is shown as its own text, not a JSON string, up to its first byte that
        is not UTF-8: the rest in bytes goes on from exactly there."""
        if entry:
            raw = self.store.read_range(row["sha256"], *span)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                text = raw[: exc.start].decode("utf-8")
        size = len(text.encode("utf-8")) if not entry else span[1] - span[0]
        if entry:
            def says(keep: int) -> str:
                return (f"entry {start:,} is {size:,} bytes (bytes {span[0]:,}–{span[1] - 1:,} of the artifact), "
                        f"more than a page's budget; its first {len(text[:keep].encode()):,} bytes are shown as "
                        "text, and next reads the rest in bytes, then returns to entries")
        elif span is None:
            def says(keep: int) -> str:
                return (f"item {start:,} is {len(text):,} characters of JSON, more than a page's budget; its first "
                        f"{keep:,} characters are shown. Use query_artifact with a JMESPath to take parts of it; "
                        f"next goes on with item {start + 1:,}")
        else:
            def says(keep: int) -> str:
                return (f"item {start:,} is {size:,} bytes of JSON (bytes {span[0]:,}–{span[0] + size - 1:,} of the "
                        f"artifact), more than a page's budget; its first {len(text[:keep].encode()):,} bytes are "
                        "shown, and next reads the rest in bytes, then returns to items")
        room = budget - self.cost(says(len(text)))
        keep = fit_chars(text[: self._most(room)], room, self.cost)
        resp = self._response(row, req, start, limit, [], total, start + 1 if start + 1 < total else None,
                              items=True)
        resp["content"], resp["cut"] = text[:keep], says(keep)
        if span is not None:
            rest = span[0] + len(text[:keep].encode("utf-8"))
            resp["next_offset"] = rest
            resp["next"] = {"artifact_id": row["id"], "unit": "bytes", "offset": rest, "limit": span[1] - rest,
                            "path": Resume("items", start, req.limit, req.path).marker}
        return resp

    # -- the response -----------------------------------------------------------------------

    def _response(self, row: dict, req: SliceRequest, start: int, limit: int, parts: list[str], total: int,
                  next_offset: int | None, *, items: bool = False) -> dict[str, Any]:
        content = ("[\n" + ",\n".join(parts) + "\n]" if parts else "[]") if items else "\n".join(parts)
        nxt = None
        if next_offset is not None:
            nxt = {"artifact_id": row["id"], "unit": req.unit, "offset": next_offset, "limit": req.limit}
            if req.path is not None:
                nxt["path"] = req.path
            nxt = {k: v for k, v in nxt.items() if v is not None}
        resp = {"artifact_id": row["id"], "unit": req.unit, "offset": start, "limit": req.limit,
                "returned": len(parts), "total": total, "next_offset": next_offset, "next": nxt,
                "content": content}
        if start >= total > 0:  # the page is empty because of where it was asked for: say so
            resp["note"] = (f"offset {start:,} is past the end: the artifact has {total:,} {req.unit}; a negative "
                            "offset counts from the end (offset=-40: the last 40)")
        return resp


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode()
