"""What the store hands out besides rows: the facts of stored content, a gc's report, ids, times and cursors."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from dataclasses import dataclass

import orjson

from ..errors import InvalidArgument
from ..utf8 import carriable


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


def column_text(value: str | None) -> str | None:
    """A tool name or session id as every backend's text column takes it (a lone surrogate as its
    escape, NUL, which PostgreSQL refuses, as \\x00): written so, and looked for so."""
    if value is None:
        return None
    return carriable(str(value)).replace("\x00", "\\x00")


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
