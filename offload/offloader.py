"""The Offloader: the one entry object. It owns the settings, the store and the companion tools.

`process()` is the hot path: a result that fits its tool's budget comes back unchanged after a cheap
check; a larger one is stored whole and replaced by a Reference. It fails open: when storing fails,
the caller still gets a bounded preview that says it was not stored and why.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import inspect
import logging
import threading
import time
from typing import Any, Callable, Iterator

import orjson

from .content import build_preview, detect, render_shape
from .errors import QuotaExceeded, StoreError
from .reference import Reference
from .results import Payload, cheap_fits, to_payload
from .settings import Settings
from .store import Store, new_id, open_engine, utcnow
from .store.chunking import count_lines, json_item_index, ndjson_item_index
from .tokens import TokenCounter
from .tools.query import QueryRunner
from .tools.slicing import SliceRequest, Slicer

log = logging.getLogger("offload")

_MIN_PREVIEW = 40  # tokens: below this a preview says nothing useful


class Offloader:
    """Stores oversized tool results and serves slices and queries of them.

    >>> off = Offloader("sqlite:///tmp/offload.db")          # doctest: +SKIP
    >>> out = off.process("grep", huge_text)                  # doctest: +SKIP
    >>> print(out)  # a Reference when huge_text was over the grep budget, else huge_text itself
    """

    def __init__(self, url: str | None = None, *, namespace: str | None = None, **settings: Any):
        given = {k: v for k, v in {"url": url, "namespace": namespace, **settings}.items() if v is not None}
        self.settings = Settings(**given)
        self.namespace = self.settings.namespace
        self.counter = TokenCounter(self.settings.tokenizer)
        self._store: Store | None = None
        self._store_lock = threading.Lock()
        self._slicer: Slicer | None = None
        self._queries: QueryRunner | None = None

    # -- the store --------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store, opened (and migrated) on first use so pass-through calls never touch it."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    engine = open_engine(self.settings.url, busy_timeout=self.settings.busy_timeout)
                    self._store = Store(engine, quota_bytes=self.settings.quota_bytes)
        return self._store

    def close(self) -> None:
        self._slicer = self._queries = None
        if self._store is not None:
            self._store.engine.dispose()
            self._store = None

    def __enter__(self) -> "Offloader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the offload path -------------------------------------------------------------------

    def process(self, tool: str, result: Any, *, args: dict | None = None, session: str | None = None) -> Any:
        """Return `result` unchanged when it fits `tool`'s budget, else store it and return a Reference."""
        if result is None:
            return None
        try:
            payload = to_payload(result)
            if self._fits(tool, payload):
                return result
        except Exception:  # noqa: BLE001 - measuring must never fail a tool call; store it instead
            log.exception("offload could not measure the result of %s", tool)
            payload = None
        try:
            return self._offload(tool, payload if payload is not None else to_payload(repr(result)),
                                 args=args, session=session)
        except Exception as exc:  # noqa: BLE001 - fail open: a tool call never fails because offload did
            log.exception("offload failed on the result of %s; returning an unstored preview", tool)
            return self._unstored(tool, result, exc)

    def put(self, data: Any, *, tool: str, args: dict | None = None, session: str | None = None) -> Reference:
        """Store `data` whatever its size (the CLI's `put`) and return the reference the model would get."""
        return self._offload(tool, to_payload(data), args=args, session=session, fail_open=False)

    def _fits(self, tool: str, payload: Payload) -> bool:
        key = self.settings.budget_key(tool)
        limit = self.settings.limit(key)
        if payload.is_shell:
            err_limit = self.settings.limit("shell_stderr") if key == "shell" else limit
            if len(payload.data) <= limit and len(payload.stderr or b"") <= err_limit:
                return True
            out_ok = self.counter.count(payload.text or payload.data, "text") <= limit
            return out_ok and self.counter.count(payload.stderr or b"", "text") <= err_limit
        if cheap_fits(payload, limit):
            return True
        kind = "json" if payload.is_object else "text"
        return self.counter.count(payload.text if payload.text is not None else payload.data, kind) <= limit

    def _offload(self, tool: str, payload: Payload, *, args: dict | None, session: str | None,
                 fail_open: bool = True, parent_id: str | None = None) -> Reference:
        budget = self.settings.reference_tokens
        target = budget if self.counter.exact else int(budget * 0.9)  # the estimate may undercount by 10%
        stderr_ref = None
        stderr_share = 0
        if payload.is_shell and payload.stderr:
            stderr_share = min(self.counter.count(payload.stderr, "text") + 10, target // 2)
        ref, detected, sha = self._reference(tool, payload.data, target - stderr_share, payload)
        if payload.is_shell:
            ref.kind, ref.exit_code = "shell", payload.exit_code
            if payload.stderr:
                stderr_ref = self._stderr_preview(tool, payload.stderr, stderr_share)
                ref.stderr, ref.stderr_bytes = stderr_ref.preview, stderr_ref.bytes
                ref.stderr_truncated = stderr_ref.truncated
        row = self._row(ref, tool, args, session, payload)
        row["parent_id"] = parent_id
        try:
            if stderr_ref is not None and stderr_ref.truncated:
                stderr_ref.artifact_id = ref.stderr_artifact_id = new_id("art_")
                self._store_artifact(stderr_ref, self._row(stderr_ref, tool + ":stderr", args, session, None),
                                     payload.stderr, None)
                row = {**self._row(ref, tool, args, session, payload), "parent_id": parent_id}
            self._store_artifact(ref, row, payload.data, detected)
        except Exception as exc:  # noqa: BLE001 - any store failure fails open
            if not fail_open:
                raise
            log.warning("offload could not store the result of %s: %s", tool, exc)
            ref.stored, ref.error, ref.artifact_id = False, _reason(exc), None
            ref.stderr_artifact_id = None
        return ref

    def _reference(self, tool: str, data: bytes, target: int, payload: Payload | None):
        """Build the reference for `data`, its preview sized so the whole text fits `target` tokens."""
        detected = detect(data, tool)
        text = detected.text if detected.text is not None else (payload.text if payload else None)
        sha = hashlib.sha256(data).hexdigest()
        chars = len(text) if text is not None else len(data.decode("utf-8", errors="replace"))
        ref = Reference(
            artifact_id=new_id("art_"), tool=tool, kind=detected.kind, content_type=detected.content_type,
            bytes=len(data), chars=chars, lines=count_lines(len(data), data.count(b"\n"), data.endswith(b"\n")),
            items=None, tokens=self.counter.count(text if text is not None else data, detected.kind),
            sha256=sha, preview="", truncated=True, notes=list(detected.notes), tokens_exact=self.counter.exact)
        preview_budget = max(target - self.counter.count(ref.render()) - 30, _MIN_PREVIEW)
        for _attempt in range(4):
            preview = build_preview(detected, data, preview_budget, self.counter.count)
            ref.preview, ref.truncated, ref.omitted = preview.text, preview.truncated, preview.omitted
            ref.shape, ref.extra = preview.shape, dict(preview.extra)
            ref.shape_text = render_shape(preview.shape) if preview.shape else ""
            ref.items = preview.extra.get("items")
            ref.items_path = preview.extra.get("items_path")
            results = preview.extra.pop("hint_results", {}) if isinstance(preview.extra, dict) else {}
            ref.hints = [{"jmespath": h, "result": results.get(h)} for h in preview.hints]
            over = self.counter.count(ref.render()) - target
            if over <= 0:
                break
            preview_budget = max(preview_budget - over - 20, _MIN_PREVIEW)
            if preview_budget == _MIN_PREVIEW and _attempt >= 2:
                ref.shape_text, ref.hints = "", ref.hints[:2]
        return ref, detected, sha

    def _stderr_preview(self, tool: str, stderr: bytes, share: int) -> Reference:
        detected = detect(stderr, None)
        preview = build_preview(detected, stderr, max(share, _MIN_PREVIEW), self.counter.count)
        text = detected.text or ""
        return Reference(
            artifact_id=None, tool=tool + ":stderr", kind=detected.kind, content_type=detected.content_type,
            bytes=len(stderr), chars=len(text), lines=count_lines(len(stderr), stderr.count(b"\n"),
                                                                  stderr.endswith(b"\n")),
            items=None, tokens=self.counter.count(text, "text"), sha256=hashlib.sha256(stderr).hexdigest(),
            preview=preview.text, truncated=preview.truncated, omitted=preview.omitted,
            tokens_exact=self.counter.exact)

    def _row(self, ref: Reference, tool: str, args: dict | None, session: str | None,
             payload: Payload | None) -> dict[str, Any]:
        ttl = self.settings.ttl_days
        meta = {"notes": ref.notes}
        if payload is not None and payload.is_shell:
            meta.update(exit_code=payload.exit_code, stderr_bytes=len(payload.stderr or b""),
                        stderr_artifact_id=ref.stderr_artifact_id, stderr=ref.stderr)
        return {
            "id": ref.artifact_id, "namespace": self.namespace, "session": session, "tool": tool,
            "args": orjson.dumps(args, default=str).decode() if args is not None else None,
            "kind": ref.kind, "content_type": ref.content_type, "tokens": ref.tokens,
            "shown_tokens": self.counter.count(ref.render()), "reference": orjson.dumps(ref.to_dict()).decode(),
            "meta": orjson.dumps(meta, default=str).decode(),
            "expires_at": utcnow() + dt.timedelta(days=ttl) if ttl else None,
        }

    def _store_artifact(self, ref: Reference, row: dict, data: bytes, detected) -> None:
        index = None
        if detected is not None and detected.kind == "json" and detected.doc is not None:
            index = json_item_index(data)
        elif detected is not None and detected.kind == "ndjson":
            index = ndjson_item_index(data)
        try:
            self.store.put(row, data, ref.sha256, item_index=index)
        except QuotaExceeded:
            self.store.gc()  # expired and least recently used first; then one more try
            self.store.put(row, data, ref.sha256, item_index=index)

    def _unstored(self, tool: str, result: Any, exc: Exception) -> Reference | Any:
        """Last resort when even building a reference failed: a plain bounded head+tail of the text."""
        try:
            text = result if isinstance(result, str) else (
                bytes(result).decode("utf-8", errors="replace") if isinstance(result, (bytes, bytearray))
                else repr(result))
            keep = max(self.settings.reference_tokens, 200) * 2  # characters: conservative for any text
            head, tail = text[: keep // 2], text[-keep // 2 :] if len(text) > keep else ""
            cut = f"\n… [{len(text) - keep:,} characters not shown] …\n" if tail else ""
            return (f"[offload] The result of `{tool}` was too large for the context and could NOT be stored "
                    f"({_reason(exc)}). Showing its first and last characters; the rest is not retrievable.\n"
                    f"{head}{cut}{tail}")
        except Exception:  # noqa: BLE001 - truly the last resort
            return f"[offload] The result of `{tool}` could not be processed ({_reason(exc)})."

    # -- decorator --------------------------------------------------------------------------

    def tool(self, func: Callable | None = None, *, name: str | None = None, session: str | None = None):
        """Wrap a sync or async tool function so its results go through `process()`.

        >>> @off.tool                     # doctest: +SKIP
        ... def grep(pattern: str, path: str) -> str: ...
        """

        def decorate(fn: Callable) -> Callable:
            tool_name = name or fn.__name__
            signature = inspect.signature(fn)

            def call_args(args, kwargs) -> dict:
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    return dict(bound.arguments)
                except TypeError:
                    return {"args": list(args), "kwargs": kwargs}

            if inspect.iscoroutinefunction(fn):
                @functools.wraps(fn)
                async def async_wrapper(*args, **kwargs):
                    import asyncio

                    result = await fn(*args, **kwargs)
                    # storing megabytes must not block the event loop
                    return await asyncio.to_thread(self.process, tool_name, result,
                                                   args=call_args(args, kwargs), session=session)
                return async_wrapper

            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return self.process(tool_name, fn(*args, **kwargs), args=call_args(args, kwargs), session=session)
            return wrapper

        return decorate(func) if func is not None else decorate

    # -- the companion tools ----------------------------------------------------------------

    @property
    def slicer(self) -> "Slicer":
        if self._slicer is None:
            self._slicer = Slicer(self.store, self.counter.count, self._page_budget(self.settings.slice_tokens),
                                  self.queries.items_of)
        return self._slicer

    @property
    def queries(self) -> "QueryRunner":
        if self._queries is None:
            self._queries = QueryRunner(self.store, self.counter.count,
                                        self._page_budget(self.settings.query_tokens),
                                        cache_bytes=self.settings.cache_bytes, timeout=self.settings.query_timeout)
        return self._queries

    def _page_budget(self, tokens: int) -> int:
        # the page's text plus its JSON envelope must fit; the heuristic may undercount by 10%
        return int(tokens * (1.0 if self.counter.exact else 0.9)) - 60

    def fetch_slice(self, artifact_id: str, offset: int = 0, limit: int | None = None, unit: str = "lines",
                    path: str | None = None, *, session: str | None = None) -> dict[str, Any]:
        """A bounded page of a stored artifact (see offload.tools.schemas for the model-facing contract)."""
        started = time.perf_counter()
        args = {"artifact_id": artifact_id, "offset": offset, "limit": limit, "unit": unit, "path": path,
                "_budget": self.slicer.budget}
        row = self.store.get(artifact_id, self.namespace)
        response = self.slicer.slice(row, SliceRequest(artifact_id, offset, limit, unit, path))
        content = response["content"].encode("utf-8", errors="surrogatepass")
        self._log_extract(row, "slice", path, args, hashlib.sha256(content).hexdigest(), len(content), None,
                          started, session)
        return response

    def query_artifact(self, artifact_id: str, jmespath: str | None = None, grep: str | None = None,
                       sql: str | None = None, offset: int = 0, limit: int | None = None, context: int = 0,
                       *, session: str | None = None) -> dict[str, Any]:
        """Extract from a stored artifact; a result too big for the budget becomes a derived artifact."""
        started = time.perf_counter()
        args = {"artifact_id": artifact_id, "jmespath": jmespath, "grep": grep, "sql": sql, "offset": offset,
                "limit": limit, "context": context, "_budget": self.queries.budget}
        row = self.store.get(artifact_id, self.namespace)
        outcome = self.queries.compute(row, jmespath=jmespath, grep=grep, sql=sql, offset=offset, limit=limit,
                                       context=context)
        derived_id = None
        if outcome.inline is not None:
            response = outcome.inline
        else:
            ref = self._offload("query_artifact", Payload(outcome.derived, None), session=session,
                                args={k: v for k, v in args.items() if v is not None and k != "_budget"},
                                fail_open=False,
                                parent_id=artifact_id)
            derived_id = ref.artifact_id
            response = {**ref.to_dict(), "derived_from": artifact_id, "expression": outcome.expression,
                        "count": outcome.count, "text": ref.render()}
        self._log_extract(row, outcome.op, outcome.expression, args, outcome.result_sha256, outcome.result_bytes,
                          derived_id, started, session)
        return response

    def _log_extract(self, row: dict, op: str, expression: str | None, args: dict, sha: str, size: int,
                     derived_id: str | None, started: float, session: str | None) -> None:
        try:
            self.store.log_extract({
                "artifact_id": row["id"], "namespace": self.namespace, "session": session, "op": op,
                "expression": expression, "args": orjson.dumps(args).decode(), "result_sha256": sha,
                "result_bytes": size, "result_artifact_id": derived_id,
                "duration_ms": (time.perf_counter() - started) * 1000})
        except StoreError as exc:  # the answer matters more than its log line
            log.warning("could not log an extract of %s: %s", row["id"], exc)

    def extracts(self, **filters: Any) -> list[dict[str, Any]]:
        rows = self.store.list_extracts(self.namespace, **filters)
        for r in rows:
            r["args"] = orjson.loads(r["args"])
            r["created_at"] = r["created_at"].isoformat() + "Z"
        return rows

    def rerun(self, **filters: Any) -> list[dict[str, Any]]:
        """Re-execute logged extracts offline; each unchanged / changed / failed (see tools/rerun.py)."""
        from .tools.rerun import rerun

        return rerun(self, **filters)

    # -- browsing the store -----------------------------------------------------------------

    def get(self, artifact_id: str) -> dict[str, Any]:
        """The artifact's metadata (NotFound / Expired when it is not there for this namespace)."""
        return _public(self.store.get(artifact_id, self.namespace))

    def reference(self, artifact_id: str) -> dict[str, Any]:
        """The reference exactly as the model saw it: its dict and its text."""
        row = self.store.get(artifact_id, self.namespace)
        return orjson.loads(row["reference"]) if row["reference"] else {}

    def iter_raw(self, artifact_id: str) -> Iterator[bytes]:
        row = self.store.get(artifact_id, self.namespace)
        return self.store.iter_bytes(row["sha256"])

    def list(self, **filters: Any) -> tuple[list[dict[str, Any]], str | None]:
        rows, cursor = self.store.list(self.namespace, **filters)
        return [_public(r) for r in rows], cursor

    def delete(self, artifact_id: str) -> None:
        self.store.delete(artifact_id, self.namespace)

    def pin(self, artifact_id: str, pinned: bool = True) -> None:
        self.store.set_pinned(artifact_id, self.namespace, pinned)

    def gc(self, **kwargs: Any):
        return self.store.gc(**kwargs)

    def verify(self) -> list[dict[str, Any]]:
        return self.store.verify()


def _public(row: dict[str, Any]) -> dict[str, Any]:
    """An artifact row as callers see it: JSON columns decoded, times in ISO 8601."""
    out = dict(row)
    for key in ("args", "meta"):
        out[key] = orjson.loads(out[key]) if out.get(key) else None
    out.pop("reference", None)
    for key in ("created_at", "accessed_at", "expires_at", "ended_at"):
        if out.get(key) is not None:
            out[key] = out[key].isoformat() + "Z"
    return out


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, StoreError):
        return text
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        return "the disk is full"
    return f"{type(exc).__name__}: {text}"[:300]
