"""Errors under one base, each knowing its HTTP status and what the model should be told.

A developer sees the exception with its attributes; a model sees `model_message()`: one short,
actionable paragraph it can recover from (what went wrong, and the call that would work).
"""

from __future__ import annotations


class OffloadError(Exception):
    """Base of every error offload raises on purpose."""

    status: int = 400
    code: str = "offload_error"

    def model_message(self) -> str:
        return str(self)

    def to_dict(self) -> dict:
        return {"error": self.code, "message": self.model_message(), "status": self.status}


class ArtifactNotFound(OffloadError):
    status = 404
    code = "not_found"

    def __init__(self, artifact_id: str):
        self.artifact_id = artifact_id
        super().__init__(
            f"No artifact {artifact_id!r}. Artifact ids look like 'art_…' and come from a reference; "
            "list the stored ones with `offload ls` (or GET /api/artifacts)."
        )


class ArtifactExpired(OffloadError):
    status = 410
    code = "expired"

    def __init__(self, artifact_id: str, when: str | None = None, reason: str = "expired", code: str = "expired"):
        self.artifact_id = artifact_id
        self.reason = reason
        self.code = code  # expired | evicted | deleted: what ended it
        at = f" at {when}" if when else ""
        super().__init__(
            f"Artifact {artifact_id!r} {reason}{at} and is no longer available. "
            "Re-run the tool that produced it if you still need the data; `offload ls` lists what is stored."
        )


class InvalidArgument(OffloadError):
    """A caller-supplied argument that cannot work (bad unit, negative limit, bad expression...)."""

    status = 422
    code = "invalid_argument"


class InvalidSetting(InvalidArgument, ValueError):
    """A setting (code argument, OFFLOAD_* variable or config file) that cannot work."""

    code = "invalid_setting"


class QueryError(InvalidArgument):
    code = "invalid_query"


class QueryTimeout(OffloadError):
    status = 422
    code = "query_timeout"


class ResultTooLarge(QueryError):
    """A query whose whole result is more than a derived artifact may hold (`query_result_bytes`)."""

    code = "result_too_large"


class TooLarge(OffloadError):
    status = 413
    code = "too_large"


class StoreError(OffloadError):
    """The store could not be opened, written or read."""

    status = 503
    code = "store_error"


class StoreLocked(StoreError):
    code = "store_locked"


class StoreReadOnly(StoreError):
    """A store this user cannot write (its file, or the folder its side files go in): read, never changed."""

    code = "store_read_only"

    def __init__(self, path: object, cannot: str = "be written"):
        self.path = str(path)
        super().__init__(
            f"The store {path} is read-only (this user cannot write the file or its folder), so it cannot "
            f"{cannot}. Make the file and its folder writable, or copy the file (with its -wal file, if there is "
            "one) somewhere writable and point --url (or OFFLOAD_URL) at the copy."
        )


class ContentMismatch(StoreError):
    """The bytes given for a content did not hash to the sha256 they were given with (nothing was stored)."""

    code = "content_mismatch"


class QuotaExceeded(StoreError):
    status = 507
    code = "quota_exceeded"

    def __init__(self, message: str, size: int = 0):
        self.size = size  # the bytes that did not fit: what a gc must make room for
        super().__init__(message)


class ContextBudgetExceeded(OffloadError):
    status = 413
    code = "context_budget_exceeded"

    def __init__(self, needed: int, budget: int, detail: str = ""):
        self.needed = needed
        self.budget = budget
        super().__init__(
            f"The system prompt and the most recent turn need about {needed:,} tokens; the budget is {budget:,}."
            + (f" {detail}" if detail else "")
        )


class ExtractNotFound(OffloadError):
    status = 404
    code = "not_found"

    def __init__(self, extract_id: str):
        self.extract_id = extract_id
        super().__init__(f"No extract {extract_id!r}; `offload extracts` (or GET /api/extracts) lists them.")
