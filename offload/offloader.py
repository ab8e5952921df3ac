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
from .content.lines import clip_to_budget
from .errors import QuotaExceeded, StoreError
from .reference import Reference
from .results import Payload, cheap_fits, to_payload
from .settings import Settings
from .store import Store, new_id, open_engine, utcnow
from .store.chunking import count_lines, json_item_index, ndjson_item_index
from .tokens import TokenCounter, exact_tokenizer
from .tools.query import QueryRunner
from .tools.slicing import SliceRequest, Slicer, content_digest

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
        self._measure = _reference_counter(self.counter)
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
        payload = None
        try:
            payload = to_payload(result)
            if self._fits(tool, payload):
                return result
        except Exception:  # noqa: BLE001 - measuring must never fail a tool call; store it instead
            log.exception("offload could not measure the result of %s", tool)
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
        target = self._reference_target
        stderr_ref = None
        stderr_share = 0
        if payload.is_shell and payload.stderr:
            stderr_share = min(self.counter.count(payload.stderr, "text") + 10, target // 2)
            stderr_ref = self._stderr_preview(tool, payload.stderr, stderr_share, target // 2)
        ref, detected, sha = self._reference(tool, payload.data, payload)
        ref.same_as = self._same_result(tool, args, session, sha)  # named before fitting: it takes room
        if payload.is_shell:
            ref.kind, ref.exit_code = "shell", payload.exit_code
            if stderr_ref is not None:
                ref.stderr, ref.stderr_bytes = stderr_ref.preview, stderr_ref.bytes
                ref.stderr_truncated = stderr_ref.truncated
                if stderr_ref.truncated:  # named in the reference before it is fitted: its id takes room
                    stderr_ref.artifact_id = ref.stderr_artifact_id = new_id("art_")
        self._fit(ref, detected, payload.data, target)
        row = {**self._row(ref, tool, args, session, payload), "parent_id": parent_id}
        stored_stderr = None
        try:
            if stderr_ref is not None and stderr_ref.truncated:
                self._store_artifact(stderr_ref, self._row(stderr_ref, tool + ":stderr", args, session, None),
                                     payload.stderr, None)
                stored_stderr = stderr_ref.artifact_id
            self._store_artifact(ref, row, payload.data, detected)
        except Exception as exc:  # noqa: BLE001 - any store failure fails open
            if not fail_open:
                raise
            log.warning("offload could not store the result of %s: %s", tool, exc)
            if stored_stderr is not None:  # nothing may point at it now: do not leave it behind
                try:
                    self.store.delete(stored_stderr, self.namespace)
                except Exception:  # noqa: BLE001 - best effort; gc collects it when it expires
                    log.warning("could not remove the stderr artifact %s of an unstored result", stored_stderr)
            ref.stored, ref.error, ref.artifact_id = False, _reason(exc), None
            ref.stderr_artifact_id = None
            # the header now says why it was not stored, and the next calls are gone: fit again
            self._fit(ref, detected, payload.data, target)
        return ref

    @property
    def _reference_target(self) -> int:
        """Tokens a reference may take by the counter: the estimate may undercount by 10%."""
        budget = self.settings.reference_tokens
        return budget if self.counter.exact else int(budget * 0.9)

    def _reference(self, tool: str, data: bytes, payload: Payload | None):
        """The reference for `data` with its exact facts; its preview is filled in by `_fit`."""
        detected = detect(data, tool)
        text = detected.text if detected.text is not None else (payload.text if payload else None)
        sha = hashlib.sha256(data).hexdigest()
        chars = len(text) if text is not None else len(data.decode("utf-8", errors="replace"))
        ref = Reference(
            artifact_id=new_id("art_"), tool=tool, kind=detected.kind, content_type=detected.content_type,
            bytes=len(data), chars=chars, lines=count_lines(len(data), data.count(b"\n"), data.endswith(b"\n")),
            items=None, tokens=self.counter.count(text if text is not None else data, detected.kind),
            sha256=sha, preview="", truncated=True, notes=list(detected.notes), tokens_exact=self.counter.exact)
        return ref, detected, sha

    def _same_result(self, tool: str, args: dict | None, session: str | None, sha: str) -> str | None:
        """An earlier stored, unexpired call of `tool` in this session with the same args and result, if
        any: its reference says so, so the model queries that one instead of re-running the tool."""
        if session is None or args is None:
            return None
        try:
            wanted = orjson.loads(orjson.dumps(args, default=str))  # as the args column stores them
            for row in self.store.same_results(self.namespace, tool=tool, session=session, sha256=sha):
                if row["args"] is not None and orjson.loads(row["args"]) == wanted:
                    return row["id"]
        except Exception as exc:  # noqa: BLE001 - a hint is never worth failing the tool call
            log.warning("offload could not look for an earlier identical call of %s: %s", tool, exc)
        return None

    def _fit(self, ref: Reference, detected, data: bytes, target: int) -> None:
        """Fill in the preview, shape and hints so that the whole rendered reference fits `target` tokens.

        The preview is built in the counter's units; the whole text is checked with `_measure`, which
        also runs the real tokenizers when they are installed, since the estimate can undercount (runs
        of brackets or repeated letters). Each retry shrinks the preview by what is still over, scaled
        by how much the counter undercounted the preview; the shape, then hints, give way after that.
        """
        measure = self._measure
        ref.preview, ref.omitted, ref.shape_text, ref.hints = "", "", "", []
        preview_budget = max(target - measure(ref.render()) - 30, _MIN_PREVIEW)
        keep_shape, max_hints = True, None
        for _attempt in range(6):
            preview = build_preview(detected, data, preview_budget, self.counter.count,
                                    max_lines=self.settings.grep_max_lines)
            ref.preview, ref.truncated, ref.omitted = preview.text, preview.truncated, preview.omitted
            ref.shape, ref.extra = preview.shape, dict(preview.extra)
            ref.shape_text = render_shape(preview.shape) if preview.shape and keep_shape else ""
            ref.items = preview.extra.get("items")
            ref.items_path = preview.extra.get("items_path")
            results = ref.extra.pop("hint_results", {})
            hints = preview.hints if max_hints is None else preview.hints[:max_hints]
            ref.hints = [{"jmespath": h, "result": results.get(h)} for h in hints]
            total = measure(ref.render())
            over = total - target
            if over <= 0:
                return
            shown = measure(ref.preview)
            ratio = min(1.0, self.counter.count(ref.preview) / shown) if shown else 1.0
            wanted = int((shown - over - 20) * ratio)
            if wanted < _MIN_PREVIEW and preview_budget <= _MIN_PREVIEW:
                # the preview is as small as is useful: the shape, then the hints make room
                if keep_shape and ref.shape_text:
                    keep_shape = False
                elif len(ref.hints) > 1:
                    max_hints = len(ref.hints) - 1
            preview_budget = max(wanted, _MIN_PREVIEW)
        self._clip(ref, target)

    def _clip(self, ref: Reference, target: int) -> None:
        """Last resort: cut the preview (then the stderr preview) to what the rest of the text leaves."""
        measure = self._measure
        for field in ("preview", "stderr"):
            value = getattr(ref, field)
            over = measure(ref.render()) - target
            if over <= 0 or not value:
                return
            kept = clip_to_budget(value, max(measure(value) - over - 10, 0), measure)
            note = f"{field} cut to {len(kept):,} of {len(value):,} chars to fit the reference budget"
            setattr(ref, field, kept)
            if field == "preview":
                ref.truncated = True
                ref.omitted = f"{ref.omitted}; {note}" if ref.omitted else note
            else:
                ref.stderr_truncated = True
                ref.notes = [*ref.notes, note]

    def _stderr_preview(self, tool: str, stderr: bytes, share: int, cap: int) -> Reference:
        detected = detect(stderr, None)
        budget = max(share, _MIN_PREVIEW)
        for _attempt in range(4):
            preview = build_preview(detected, stderr, budget, self.counter.count)
            shown = self._measure(preview.text)
            if shown <= cap:
                break
            # the counter undercounted this text: scale its budget down by how much
            ratio = min(1.0, self.counter.count(preview.text) / shown) if shown else 1.0
            budget = max(int((cap - 10) * ratio), 1)
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
            "shown_tokens": self.counter.count(text := ref.render()),
            "reference": orjson.dumps({**ref.to_dict(), "text": text}).decode(),  # exactly what the model saw
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

    def _unstored(self, tool: str, result: Any, exc: Exception) -> Reference | str:
        """Last resort when even building a reference failed: a bounded head+tail, plainly NOT stored."""
        try:
            if isinstance(result, (bytes, bytearray, memoryview)):
                data = bytes(result)
            else:
                try:
                    text = result if isinstance(result, str) else repr(result)
                except Exception:  # noqa: BLE001 - an object whose repr fails still gets its reference
                    text = f"<{type(result).__qualname__} object: neither JSON nor repr() could render it>"
                data = text.encode("utf-8", errors="surrogatepass")
            text = data.decode("utf-8", errors="replace")
            target = self._reference_target
            try:
                tokens = self.counter.count(text)
            except Exception:  # noqa: BLE001 - a count is not worth failing the last resort
                tokens = len(data)
            ref = Reference(
                artifact_id=None, tool=tool, kind="text", content_type="text/plain", bytes=len(data),
                chars=len(text), lines=count_lines(len(data), data.count(b"\n"), data.endswith(b"\n")),
                items=None, tokens=tokens, sha256=hashlib.sha256(data).hexdigest(), preview="", truncated=True,
                stored=False, error=_reason(exc), tokens_exact=self.counter.exact)
            if b"\x00" in data[:8192]:
                ref.preview, ref.omitted = "[binary data: not shown]", f"all {len(data):,} bytes not shown"
                return ref
            keep = min(len(text), target * 4)
            while True:
                if keep >= len(text):
                    ref.preview, ref.truncated, ref.omitted = text, False, ""
                else:
                    head, tail = text[: keep - keep // 2], text[len(text) - keep // 2:] if keep // 2 else ""
                    gap = len(text) - len(head) - len(tail)
                    ref.preview = f"{head}\n… [{gap:,} characters not shown] …\n{tail}"
                    ref.truncated = True
                    ref.omitted = (f"characters {len(head):,}–{len(head) + gap - 1:,} ({gap:,} characters) "
                                   "not shown")
                if keep == 0 or self._measure(ref.render()) <= target:
                    return ref
                keep //= 2
        except Exception:  # noqa: BLE001 - truly the last resort
            return f"[offload] The result of `{tool}` could not be processed and was NOT stored ({_reason(exc)})."

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
            self._slicer = self.make_slicer(self._page_budget(self.settings.slice_tokens))
        return self._slicer

    @property
    def queries(self) -> "QueryRunner":
        if self._queries is None:
            self._queries = self.make_queries(self._page_budget(self.settings.query_tokens))
        return self._queries

    def make_slicer(self, budget: int) -> "Slicer":
        """A slicer over this store with a given page budget (rerun replays a logged budget)."""
        return Slicer(self.store, self.counter.count, budget, self.queries.items_of)

    def make_queries(self, budget: int) -> "QueryRunner":
        return QueryRunner(self.store, self.counter.count, budget, cache_bytes=self.settings.cache_bytes,
                           timeout=self.settings.query_timeout)

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
        sha, size = content_digest(response)
        self._log_extract(row, "slice", path, args, sha, size, None, started, session)
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
        rows = [{str(key): value for key, value in r.items()}
                for r in self.store.list_extracts(self.namespace, **filters)]
        for r in rows:
            r["args"] = orjson.loads(r["args"])
            r["created_at"] = r["created_at"].isoformat() + "Z"
        return rows

    def rerun(self, **filters: Any) -> list[dict[str, Any]]:
        """Re-execute logged extracts offline; each unchanged / changed / failed (see tools/rerun.py)."""
        from .tools.rerun import rerun

        return rerun(self, **filters)

    # -- the context budget guard -----------------------------------------------------------

    def fit_context(self, messages: list, window_tokens: int, api: str = "openai", *, budget_ratio: float = 0.75,
                    reserve_tokens: int = 0, on_report: Callable | None = None, session: str | None = None):
        """Fit a conversation to `budget_ratio` of the window before an LLM call; nothing removed is lost.

        `api`: "openai" (Chat Completions), "openai-responses" or "anthropic". Returns `.messages` (a new
        list; the caller's is never changed) and `.report`. See offload/context/ and the README.
        """
        from .context import guard_for

        return guard_for(self).fit(messages, window_tokens, api, budget_ratio=budget_ratio,
                                   reserve_tokens=reserve_tokens, on_report=on_report, session=session)

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

    def stats(self) -> dict[str, Any]:
        """Artifacts, bytes and tokens kept out of the context: in total, per tool and per session."""
        return self.store.stats(self.namespace)

    def export_archive(self, path, *, progress=None) -> dict:
        """Write this namespace's artifacts, content and extract log to a portable tar archive."""
        from .store.archive import export_archive

        return export_archive(self.store, self.namespace, path, progress=progress)

    def import_archive(self, path, *, progress=None) -> dict:
        """Load an archive written by export_archive into this namespace (idempotent)."""
        from .store.archive import import_archive

        return import_archive(self.store, path, namespace=self.namespace, progress=progress)

    def for_namespace(self, namespace: str) -> "Offloader":
        """An Offloader bound to another namespace that shares this one's store and settings."""
        if namespace == self.namespace:
            return self
        other = Offloader.__new__(Offloader)
        other.__dict__.update(self.__dict__)
        other.settings = self.settings.model_copy(update={"namespace": namespace})
        other.namespace = namespace
        other._store_lock = threading.Lock()
        _ = self.store  # open the shared store once, here
        other._store = self._store
        return other

    def verify(self) -> list[dict[str, Any]]:
        return self.store.verify()


def _public(row: dict[str, Any]) -> dict[str, Any]:
    """An artifact row as callers see it: JSON columns decoded, times in ISO 8601."""
    out = {str(key): value for key, value in row.items()}  # plain str keys (SQLAlchemy gives str subclasses)
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


def _reference_counter(counter: TokenCounter) -> Callable[[str], int]:
    """How a reference's size is checked against `reference_tokens`.

    With a configured tokenizer, that count. Otherwise the estimate, and also every real tokenizer that
    is installed (bpe-openai): the estimate can undercount repetitive text several times over (runs of
    brackets or repeated letters), and a reference is small, so checking it exactly costs well under a
    millisecond.
    """
    if counter.exact:
        return counter.count

    @functools.cache
    def installed() -> tuple[Callable[[str], int], ...]:
        # loaded on the first reference, not at construction: a tokenizer costs ~1 s and ~90 MB, and
        # pass-through calls, slices and servers never need it
        found = []
        for name in ("o200k_base", "cl100k_base"):
            try:
                tokenize = exact_tokenizer(name)
            except Exception:  # noqa: BLE001 - an optional dependency of unknown version: the estimate remains
                tokenize = None
            if tokenize is not None:
                found.append(tokenize)
        return tuple(found)

    def count(text: str) -> int:
        estimate = counter.count(text)
        try:
            return max(estimate, *(tokenize(text) for tokenize in installed()))
        except Exception:  # noqa: BLE001 - e.g. lone surrogates the tokenizer refuses
            return estimate

    return count
