"""fetch_slice: a bounded page of a stored artifact, by lines, chars, bytes or JSON items.

Reads only the chunks that hold the page (the chunk table records each chunk's first byte, char and
line; the item index records each item's byte range). A page never exceeds its token budget: fewer
units come back and `next` says where to continue; a single line or item larger than the budget comes
back cut by characters with `next` pointing at the rest. A slice is never itself offloaded.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..content.lines import clip_to_budget
from ..errors import InvalidArgument, StoreError
from ..store import Store

UNITS = ("lines", "chars", "bytes", "items")
DEFAULT_LIMITS = {"lines": 200, "chars": 20000, "bytes": 8192, "items": 50}


@dataclass
class SliceRequest:
    artifact_id: str
    offset: int = 0
    limit: int | None = None
    unit: str = "lines"
    path: str | None = None


def validate(unit: str, offset: Any, limit: Any) -> None:
    if unit not in UNITS:
        raise InvalidArgument(f"unit must be one of {', '.join(UNITS)} (got {unit!r}); lines is the default.")
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidArgument(f"offset must be an integer (got {offset!r}); a negative offset counts from the end.")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise InvalidArgument(f"limit must be a positive integer or null (got {limit!r}).")
    if limit is not None and limit < 0:
        raise InvalidArgument(f"limit must not be negative (got {limit}); to read the end use a negative offset, "
                              "e.g. offset=-40 for the last 40 lines.")


class Page:
    """Accumulates units until the limit or the token budget is reached."""

    def __init__(self, budget: int, limit: int, count: Callable[[str], int]):
        self.budget, self.limit, self.count = budget, limit, count
        self.parts: list[str] = []
        self.used = 0

    def add(self, text: str, separator_tokens: int = 1) -> bool:
        cost = self.count(text) + separator_tokens
        if self.parts and self.used + cost > self.budget:
            return False
        if not self.parts and cost > self.budget:
            return False
        self.parts.append(text)
        self.used += cost
        return True

    @property
    def full(self) -> bool:
        return len(self.parts) >= self.limit


def fit_chars(text: str, budget: int, count: Callable[[str], int]) -> int:
    """The longest prefix length of `text` within `budget` tokens, at least one character (progress)."""
    return max(len(clip_to_budget(text, budget, count)), 1) if text else 0


class Slicer:
    """fetch_slice over one store; `count` is the token counter, `budget` the page budget in tokens."""

    def __init__(self, store: Store, count: Callable[[str], int], budget: int,
                 items_of: Callable[[dict, str | None], list[Any]]):
        self.store, self.count, self.budget = store, count, budget
        self.items_of = items_of  # (artifact row, path) -> the parsed array, when no stored index fits

    def slice(self, row: dict, req: SliceRequest) -> dict[str, Any]:
        validate(req.unit, req.offset, req.limit)
        info = self.store.content(row["sha256"])
        if req.unit == "items":
            return self._items(row, info, req)
        if req.unit != "bytes" and row["kind"] == "binary":
            raise InvalidArgument(f"{row['id']} is binary data ({row['content_type']}); use unit=\"bytes\".")
        if req.path is not None:
            raise InvalidArgument('path applies to unit="items" only (a JMESPath to the array to page).')
        total = {"lines": info.lines, "chars": info.chars, "bytes": info.bytes}[req.unit]
        start = _absolute(req.offset, total)
        limit = req.limit if req.limit is not None else DEFAULT_LIMITS[req.unit]
        if req.unit == "lines":
            return self._lines(row, info, req, start, limit, total)
        if req.unit == "chars":
            return self._chars(row, req, start, limit, total)
        return self._bytes(row, req, start, limit, total)

    # -- lines ------------------------------------------------------------------------------

    def _line_start(self, sha: str, line: int) -> tuple[int, int]:
        """(chunk seq, byte position in that chunk) where 0-based `line` starts."""
        if line == 0:
            return 0, 0
        seq = self._last_chunk_before_line(sha, line)
        meta, data = next(self.store.iter_chunks(sha, seq, seq))
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        nth = line - meta["line_start"] - 1
        if not 0 <= nth < len(newlines):
            raise StoreError(f"stored content {sha[:16]}… no longer matches its line index; run `offload verify`")
        return seq, int(newlines[nth]) + 1

    def _last_chunk_before_line(self, sha: str, line: int) -> int:
        # the chunk holding the line-th newline: the last one with fewer newlines before it than `line`
        return self.store.chunk_at(sha, "lines", line - 1)

    def _iter_text_from(self, sha: str, seq: int, pos: int) -> Iterator[tuple[int, str]]:
        """(global char offset, text) pieces from byte `pos` of chunk `seq` to the end."""
        for meta, data in self.store.iter_chunks(sha, seq):
            head = data[:pos].decode("utf-8", errors="replace") if pos else ""
            yield meta["char_start"] + len(head), data[pos:].decode("utf-8", errors="replace")
            pos = 0

    def _lines(self, row: dict, info, req: SliceRequest, start: int, limit: int, total: int) -> dict[str, Any]:
        page = Page(self.budget, limit, self.count)
        if start >= total or limit == 0:
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
                    return self._cut_or_stop(row, req, start, limit, page, total, line, carry_char)
                carry_char += len(line) + 1
            if page.full:
                break
            if carry and self.count(carry) > self.budget - page.used:
                # a line longer than what is left of the budget: stop reading its further chunks
                return self._cut_or_stop(row, req, start, limit, page, total, carry, carry_char)
        else:
            if carry and not page.full and not page.add(carry):
                return self._cut_or_stop(row, req, start, limit, page, total, carry, carry_char)
        returned = len(page.parts)
        nxt = start + returned if start + returned < total else None
        return self._response(row, req, start, limit, page.parts, total, nxt)

    def _cut_or_stop(self, row, req, start, limit, page: Page, total, line: str, line_char: int):
        if page.parts:  # budget reached at a line boundary
            return self._response(row, req, start, limit, page.parts, total, start + len(page.parts))
        keep = fit_chars(line, self.budget, self.count)
        resp = self._response(row, req, start, limit, [], total, None)
        resp["content"] = line[:keep]
        resp["cut"] = (f"line {start} has {len(line):,} characters, more than this page's budget; "
                       f"characters 0–{keep - 1:,} of it are shown")
        resp["next_offset"] = line_char + keep
        resp["next"] = {"artifact_id": row["id"], "unit": "chars", "offset": line_char + keep,
                        "limit": len(line) - keep}
        return resp

    # -- chars and bytes --------------------------------------------------------------------

    def _chars(self, row: dict, req: SliceRequest, start: int, limit: int, total: int) -> dict[str, Any]:
        sha = row["sha256"]
        pieces: list[str] = []
        want = min(limit, total - start) if start < total else 0
        if want > 0:
            seq = self.store.chunk_at(sha, "chars", start)
            for meta, data in self.store.iter_chunks(sha, seq):
                text = data.decode("utf-8", errors="replace")
                lo = max(start - meta["char_start"], 0)
                pieces.append(text[lo : lo + want - sum(map(len, pieces))])
                if sum(map(len, pieces)) >= want:
                    break
        text = "".join(pieces)
        keep = len(text) if self.count(text) <= self.budget else fit_chars(text, self.budget, self.count)
        end = start + keep
        resp = self._response(row, req, start, limit, [], total, end if end < total else None)
        resp["content"], resp["returned"] = text[:keep], keep
        return resp

    def _bytes(self, row: dict, req: SliceRequest, start: int, limit: int, total: int) -> dict[str, Any]:
        end = min(start + limit, total)
        data = self.store.read_range(row["sha256"], start, end) if end > start else b""
        binary = row["kind"] == "binary"
        render = (lambda b: base64.b64encode(b).decode()) if binary else (
            lambda b: b.decode("utf-8", errors="replace"))
        keep = len(data)
        while keep and self.count(render(data[:keep])) > self.budget:
            keep = keep * self.budget // max(self.count(render(data[:keep])), 1) - 1
        stop = start + keep
        resp = self._response(row, req, start, limit, [], total, stop if stop < total else None)
        resp["content"], resp["returned"] = render(data[:keep]), keep
        resp["encoding"] = "base64" if binary else "utf-8"
        return resp

    # -- items ------------------------------------------------------------------------------

    def _items(self, row: dict, info, req: SliceRequest) -> dict[str, Any]:
        indexed = info.items is not None and (req.path in (None, info.items_path) or
                                             (req.path in ("", "@") and info.items_path == ""))
        if indexed:
            total = info.items
            fetch = lambda a, b: self._indexed_items(row["sha256"], a, b)  # noqa: E731
        else:
            if row["kind"] not in ("json", "ndjson"):
                raise InvalidArgument(
                    f"unit=\"items\" needs a JSON array or NDJSON rows; {row['id']} is {row['kind']}. "
                    "Use unit=\"lines\" (or \"chars\") instead.")
            array = self.items_of(row, req.path)
            total = len(array)
            import orjson

            fetch = lambda a, b: [orjson.dumps(x).decode() for x in array[a:b]]  # noqa: E731
        start = _absolute(req.offset, total)
        limit = req.limit if req.limit is not None else DEFAULT_LIMITS["items"]
        page = Page(self.budget, limit, self.count)
        pos = start
        batch = 64
        while pos < total and not page.full:
            for text in fetch(pos, min(pos + batch, total, start + limit)):
                if not page.add(text):
                    if not page.parts:
                        return self._big_item(row, req, start, limit, total, text)
                    return self._response(row, req, start, limit, page.parts, total, pos, items=True)
                pos += 1
        nxt = pos if pos < total else None
        return self._response(row, req, start, limit, page.parts, total, nxt, items=True)

    def _indexed_items(self, sha: str, first: int, last: int) -> list[str]:
        """Items first..last-1 as JSON text: one ranged read for the whole span, then cut locally."""
        ranges = self.store.item_ranges(sha, first, last)
        if not ranges:
            return []
        base = ranges[0][0]
        # a page of huge items must not read megabytes it cannot show: stop the span at ~4 MiB
        keep = next((i for i, (_s, e) in enumerate(ranges) if i and e - base > 4 << 20), len(ranges))
        ranges = ranges[:keep]
        span = self.store.read_range(sha, base, ranges[-1][1])
        return [span[s - base : e - base].decode("utf-8", errors="replace").strip() for s, e in ranges]

    def _big_item(self, row, req, start, limit, total, text: str) -> dict[str, Any]:
        keep = fit_chars(text, self.budget, self.count)
        resp = self._response(row, req, start, limit, [], total, start + 1 if start + 1 < total else None)
        resp["content"] = text[:keep]
        resp["cut"] = (f"item {start} is {len(text):,} characters of JSON, more than this page's budget; its first "
                       f"{keep:,} characters are shown. Use query_artifact with a JMESPath to take parts of it.")
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
        return {"artifact_id": row["id"], "unit": req.unit, "offset": start, "limit": req.limit,
                "returned": len(parts), "total": total, "next_offset": next_offset, "next": nxt,
                "content": content}


def content_digest(page: dict[str, Any]) -> tuple[str, int]:
    """(sha256, bytes) of a page's content: what the extract log records and rerun compares."""
    content = page["content"].encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(content).hexdigest(), len(content)


def _absolute(offset: int, total: int) -> int:
    return max(total + offset, 0) if offset < 0 else offset
