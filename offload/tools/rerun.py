"""Offline rerun of logged extracts: re-execute each against the stored artifact and compare hashes.

No agent and no network: the extract log holds every argument (and the page budget used), the store
holds the bytes. A result changes when the query engines now behave differently or when the stored
bytes were altered underneath; either way the report says which extract and how.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import OffloadError
from ..tokens import TokenCounter
from .pages import SliceRequest, content_digest

if TYPE_CHECKING:
    from ..offloader import Offloader

QUERY_ARGS = ("jmespath", "grep", "sql", "offset", "limit", "context")


def rerun(off: "Offloader", **filters: Any) -> list[dict[str, Any]]:
    results = []
    made: dict[tuple, Any] = {}  # one slicer or query runner (and its cache) per logged budget and count

    def engine(current: Any, make: Callable[..., Any], budget: int | None, tokenizer: str | None) -> Any:
        budget = budget or current.budget
        if budget == current.budget and tokenizer == off.settings.tokenizer:
            return current
        key = (make, budget, tokenizer)
        if key not in made:
            made[key] = make(budget, None if tokenizer == off.settings.tokenizer else _counter(tokenizer))
        return made[key]

    for extract in off.extracts(**filters):
        args = dict(extract["args"])
        budget = args.pop("_budget", None)
        tokenizer = args.pop("_tokenizer", None)  # None: the heuristic (and every extract logged before it)
        entry = {"extract_id": extract["id"], "artifact_id": extract["artifact_id"], "kind": extract["op"],
                 "expression": extract["expression"]}
        try:
            row = off.store.get(extract["artifact_id"], off.namespace, touch=False)
            if extract["op"] == "slice":
                slicer = engine(off.slicer, off.make_slicer, budget, tokenizer)
                response = slicer.slice(row, SliceRequest(**{k: args[k] for k in
                                                             ("artifact_id", "offset", "limit", "unit", "path")}))
                sha, _size = content_digest(response)
            else:
                runner = engine(off.queries, off.make_queries, budget, tokenizer)
                sha = runner.compute(row, **{k: args.get(k) for k in QUERY_ARGS if k in args}).result_sha256
        except OffloadError as exc:
            results.append({**entry, "status": "failed", "detail": exc.model_message()})
            continue
        except Exception as exc:  # noqa: BLE001 - a diagnostic run reports every failure and goes on
            results.append({**entry, "status": "failed", "detail": f"{type(exc).__name__}: {exc}"})
            continue
        if sha == extract["result_sha256"]:
            results.append({**entry, "status": "unchanged", "detail": None})
        else:
            results.append({**entry, "status": "changed",
                            "detail": f"result sha256 was {extract['result_sha256'][:16]}…, now {sha[:16]}…"})
    return results


class _NoTokenizer(OffloadError):
    code = "no_tokenizer"


def _counter(tokenizer: str | None) -> TokenCounter:
    """The counter the extract was logged with (its pages were cut by its count)."""
    try:
        return TokenCounter(tokenizer)
    except ImportError:
        raise _NoTokenizer(f"logged while counting tokens with {tokenizer}, which is not installed here: "
                           "pip install 'offload[tokenizer]' to rerun it") from None
