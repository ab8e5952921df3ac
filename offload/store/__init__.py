"""The artifact store: content in chunks, artifacts per call, the extract log."""

from .engines import open_engine, resolve_url
from .records import ContentInfo, GcReport, new_id, utcnow
from .store import Store

__all__ = ["ContentInfo", "GcReport", "Store", "new_id", "open_engine", "resolve_url", "utcnow"]
