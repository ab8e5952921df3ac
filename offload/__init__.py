"""offload: keep oversized LLM-agent tool results out of the context window without losing them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ArtifactExpired,
    ArtifactNotFound,
    ContextBudgetExceeded,
    InvalidArgument,
    InvalidSetting,
    OffloadError,
    QueryError,
    QueryTimeout,
    StoreError,
    StoreLocked,
    StoreReadOnly,
)

if TYPE_CHECKING:
    from .offloader import Offloader
    from .reference import Reference
    from .settings import Settings

__all__ = [
    "ArtifactExpired",
    "ArtifactNotFound",
    "ContextBudgetExceeded",
    "InvalidArgument",
    "InvalidSetting",
    "OffloadError",
    "Offloader",
    "QueryError",
    "QueryTimeout",
    "Reference",
    "Settings",
    "StoreError",
    "StoreLocked",
    "StoreReadOnly",
]

_LAZY = {"Offloader": "offloader", "Reference": "reference", "Settings": "settings"}


def __getattr__(name: str) -> Any:
    # Imported on first use: `offload.store` and `offload.errors` users don't pay for the content stack.
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'offload' has no attribute {name!r}")
