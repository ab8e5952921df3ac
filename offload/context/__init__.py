"""The context budget guard: `Offloader.fit_context` fits a conversation to the model's window before each
LLM call, and stores whatever leaves the context so it can be fetched back (see guard.py)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from .formats import FORMATS
from .guard import ContextGuard
from .measure import is_offload_text
from .report import Action, ContextReport, FittedContext

if TYPE_CHECKING:
    from ..offloader import Offloader

__all__ = ["FORMATS", "Action", "ContextGuard", "ContextReport", "FittedContext", "guard_for", "is_offload_text"]

_GUARDS: "weakref.WeakKeyDictionary[Offloader, ContextGuard]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def guard_for(off: "Offloader") -> ContextGuard:
    """The Offloader's guard, made on first use: its caches live as long as the Offloader."""
    with _LOCK:
        guard = _GUARDS.get(off)
        if guard is None:
            guard = _GUARDS[off] = ContextGuard(off)
        return guard
