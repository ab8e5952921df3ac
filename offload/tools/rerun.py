"""Offline rerun of logged extracts: re-execute each against the stored artifact and compare hashes.

No agent and no network: the extract log holds every argument (and the page budget used), the store
holds the bytes. A result changes when the query engines now behave differently or when the stored
bytes were altered underneath; either way the report says which extract and how.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import OffloadError
from .slicing import SliceRequest, content_digest

if TYPE_CHECKING:
    from ..offloader import Offloader

QUERY_ARGS = ("jmespath", "grep", "sql", "offset", "limit", "context")


def rerun(off: "Offloader", **filters: Any) -> list[dict[str, Any]]:
    results = []
    for extract in off.extracts(**filters):
        args = dict(extract["args"])
        budget = args.pop("_budget", None)
        entry = {"extract_id": extract["id"], "artifact_id": extract["artifact_id"], "kind": extract["op"],
                 "expression": extract["expression"]}
        try:
            row = off.store.get(extract["artifact_id"], off.namespace, touch=False)
            if extract["op"] == "slice":
                slicer = off.slicer if budget in (None, off.slicer.budget) else off.make_slicer(budget)
                response = slicer.slice(row, SliceRequest(**{k: args[k] for k in
                                                             ("artifact_id", "offset", "limit", "unit", "path")}))
                sha, _size = content_digest(response)
            else:
                runner = off.queries if budget in (None, off.queries.budget) else off.make_queries(budget)
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
