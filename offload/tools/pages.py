"""What a page of a stored artifact is asked with and built from, for fetch_slice and query_artifact:
the request and its checks, the rest of a cut line or item (`Resume`), the page being filled, and the
digest the extract log keeps of it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..content.lines import clip_to_budget
from ..errors import InvalidArgument

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
    if limit == 0:  # a page of nothing would name itself as the next call: a client following next would loop
        raise InvalidArgument("limit must be at least 1; omit it (null) for a page that fits the budget.")


_RESUME = re.compile(r"rest of (line|item) (\d+), then \1s(?: limit=(\d+))?(?: path=(.*))?", re.DOTALL)


@dataclass(frozen=True)
class Resume:
    """The rest of a cut line (read in chars) or item (in bytes), then back to lines or items.

    A cut writes it as the `path` of the `next` it emits ("rest of line 12, then lines limit=3"), so only
    a call a cut produced returns to lines or items, with the caller's own limit and path; a chars or
    bytes page that merely ends where a line or item ends stays in its unit (it cannot tell the two apart
    from where it ends)."""

    unit: str  # lines | items: where paging returns
    index: int  # the cut line or item
    limit: int | None  # the limit and path of the call that was cut, for the call after the rest
    path: str | None

    @classmethod
    def of(cls, req: SliceRequest) -> Resume:
        """The rest a chars or bytes call's `path` names; an error for any path a cut did not write."""
        found = _RESUME.fullmatch(req.path or "")
        if found is None or found.group(1) != {"chars": "line", "bytes": "item"}[req.unit]:
            raise InvalidArgument(
                f"path {req.path!r} does not go with unit=\"{req.unit}\": path is the JMESPath of the array to page "
                "with unit=\"items\", and with chars or bytes only continues a cut line or item exactly as a cut's "
                f"next wrote it (e.g. \"rest of line 12, then lines\"). Omit path to read plain {req.unit}.")
        limit, path = found.group(3), found.group(4)
        return cls(found.group(1) + "s", int(found.group(2)), None if limit is None else int(limit), path)

    @property
    def marker(self) -> str:
        return (f"rest of {self.unit[:-1]} {self.index}, then {self.unit}"
                + (f" limit={self.limit}" if self.limit is not None else "")
                + (f" path={self.path}" if self.path is not None else ""))

    def back(self, resp: dict, total: int) -> None:
        """Point the page's `next` at the unit after the cut one, with the cut call's limit and path."""
        following = self.index + 1
        resp["next_offset"] = following if following < total else None
        resp["next"] = None if following >= total else {
            key: value for key, value in (("artifact_id", resp["artifact_id"]), ("unit", self.unit),
                                          ("offset", following), ("limit", self.limit), ("path", self.path))
            if value is not None}


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


def nul_entries(row: dict) -> bool:
    """Whether an artifact's items are the entries of NUL-separated output (`find -print0`): text whose
    entries were indexed at ingest (`offload.store.chunking.nul_item_index`)."""
    return row["kind"] in ("text", "shell") and row.get("items") is not None


def fit_chars(text: str, budget: int, count: Callable[[str], int]) -> int:
    """The longest prefix length of `text` within `budget` tokens, at least one character (progress)."""
    return max(len(clip_to_budget(text, budget, count)), 1) if text else 0


def content_digest(page: dict[str, Any]) -> tuple[str, int]:
    """(sha256, bytes) of a page's content: what the extract log records and rerun compares."""
    content = page["content"].encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(content).hexdigest(), len(content)


def absolute(offset: int, total: int) -> int:
    """A negative offset counts from the end (-40: the last 40), and never before the start."""
    return max(total + offset, 0) if offset < 0 else offset
