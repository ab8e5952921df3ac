"""What the store hands out besides rows: the facts of stored content, a gc's report, ids, times and
cursors; and rows as callers see them (`public_row`, `public_extract`), args as the store keeps them."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import InvalidArgument
from ..jsontext import dumps, loads
from ..utf8 import carriable, encodable


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def new_id(prefix: str) -> str:
    return prefix + base64.b32encode(secrets.token_bytes(10)).decode().lower()


@dataclass(frozen=True)
class ContentInfo:
    sha256: str
    bytes: int
    chars: int
    lines: int
    chunk_count: int
    items: int | None
    items_path: str | None


@dataclass
class GcReport:
    expired: int = 0
    evicted: int = 0
    contents_removed: int = 0
    bytes_freed: int = 0
    total_bytes: int = 0
    staying_bytes: int = 0  # what no eviction frees: pinned artifacts' content, a write's own, content being written

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def unbindable_id(value: str) -> bool:
    """An id no row holds and the drivers cannot bind: one with a lone surrogate (from a JSON escape).
    Looked for, it is not found, as any other unknown id."""
    return not value.isascii() and not encodable(value)


def column_text(value: str | None) -> str | None:
    """A tool name or session id as every backend's text column takes it (a lone surrogate as its
    escape, NUL, which PostgreSQL refuses, as \\x00): written so, and looked for so."""
    if value is None:
        return None
    return carriable(str(value)).replace("\x00", "\\x00")


MAX_PAGE = 100_000  # rows a listing returns at most at once (a page, not the whole store in memory)


def page_limit(limit: int) -> int:
    """`limit` as a listing takes it, else InvalidArgument: a bound the drivers can bind (a 64-bit
    integer and beyond was a traceback: OverflowError on SQLite, "bigint out of range" on PostgreSQL)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be an integer from 1 to {MAX_PAGE:,} (got {limit!r}); "
                              "follow next_cursor for more")
    return limit


def encode_cursor(created: dt.datetime, artifact_id: str) -> str:
    """A page's continuation, as listings hand it out: where the last row was, in creation order."""
    raw = orjson.dumps([created.isoformat(), artifact_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, str]:
    try:
        created, artifact_id = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return dt.datetime.fromisoformat(created), str(artifact_id)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"invalid cursor {cursor!r}: pass the next_cursor of a previous listing") from exc


def public_row(row: dict[str, Any]) -> dict[str, Any]:
    """An artifact row as callers see it: JSON columns decoded, times in ISO 8601."""
    out = {str(key): value for key, value in row.items()}  # plain str keys (SQLAlchemy gives str subclasses)
    for key in ("args", "meta"):
        out[key] = loads(out[key]) if out.get(key) else None  # orjson refuses lone surrogate escapes
    out.pop("reference", None)
    out.pop("args_text", None)  # the store's search column, derived from args
    for key in ("created_at", "accessed_at", "expires_at", "ended_at"):
        if out.get(key) is not None:
            out[key] = out[key].isoformat() + "Z"
    return out


def public_extract(row: dict[str, Any]) -> dict[str, Any]:
    """An extract-log row as callers see it: its args decoded, its time in ISO 8601."""
    out = {str(key): value for key, value in row.items()}
    out["args"] = loads(out["args"])  # exactly, lone surrogates too (orjson refuses their escapes)
    out["created_at"] = out["created_at"].isoformat() + "Z"
    return out


def args_json(args: Any) -> str:
    """The call's args as JSON for the store: exactly, else (a cycle, an object no encoder takes) their
    repr as one JSON string. A result is never refused for its arguments."""
    try:
        return dumps(args, non_str_keys=True).decode()
    except (TypeError, ValueError, RecursionError):
        try:
            text = repr(args)
        except Exception:  # noqa: BLE001 - a repr that raises still leaves the result stored
            text = f"<{type(args).__qualname__}: not representable>"
        return dumps({"repr": text}).decode()
