"""The Offloader: the one entry object. It owns the settings, the store and the companion tools.

`process()` is the hot path: a result that fits its tool's budget comes back unchanged after a cheap
check; a larger one is stored whole and replaced by a Reference. It fails open: when storing fails,
the caller still gets a bounded preview that says it was not stored and why.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import inspect
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator

from .errors import InvalidArgument, InvalidSetting, StoreError
from .jsontext import dumps, loads
from .reference import Reference
from .passthrough import PassThrough
from .results import Payload, refuse_generator, to_payload
from .settings import Settings, load_settings
from .store import Store, new_id, open_engine, utcnow
from . import workers
from .content import Detected, gc_paused, pause_gc, resume_gc
from .referencing import Measure, ReferenceBuilder, reason
from .store.chunking import chunk_bytes
from .store.records import args_json, column_text, public_extract, public_row
from .tokens import TokenCounter
from .tools.query import QueryRunner
from .tools.pages import SliceRequest, content_digest
from .tools.slicing import Slicer
from .utf8 import carriable
from .writes import ASIDE, PendingWrite

log = logging.getLogger("offload")
_UNDERCOUNT, _ENVELOPE = 0.9, 60  # a page budget: the share of its tokens the estimate may take, less this


class Offloader:
    """Stores oversized tool results and serves slices and queries of them.

    >>> off = Offloader("sqlite:///tmp/offload.db")          # doctest: +SKIP
    >>> out = off.process("grep", huge_text)                  # doctest: +SKIP
    >>> print(out)  # a Reference when huge_text was over the grep budget, else huge_text itself
    """

    def __init__(self, url: str | None = None, *, namespace: str | None = None, **settings: Any):
        unknown = sorted(set(settings) - set(Settings.model_fields))
        if unknown:  # the settings model ignores unknown keys (a config file may hold a newer one's)
            close = difflib.get_close_matches(unknown[0], Settings.model_fields, n=1)
            raise TypeError(f"Offloader() got an unknown setting {unknown[0]!r}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; the settings are {', '.join(sorted(Settings.model_fields))}")
        given = {k: v for k, v in {"url": url, "namespace": namespace, **settings}.items() if v is not None}
        self.settings = load_settings(**given)
        self.namespace = self.settings.namespace
        try:
            self.counter = TokenCounter(self.settings.tokenizer)
        except (ValueError, RuntimeError) as exc:  # an encoding bpe-openai does not have, or cannot load offline
            raise InvalidSetting(f"tokenizer (OFFLOAD_TOKENIZER) {self.settings.tokenizer!r}: "
                                 f"{str(exc).rstrip('.')}; o200k_base "
                                 "and cl100k_base work offline") from None
        self.references = ReferenceBuilder(self.counter, self.settings.reference_tokens,
                                           self.settings.grep_max_lines)
        self.passing = PassThrough(self.settings, self.counter, self.references.measure)
        self._store: Store | None = None
        self._store_lock = threading.Lock()
        self._slicer: Slicer | None = None
        self._queries: QueryRunner | None = None
        self._freeing: Future | None = None  # the last document handed to a worker to free

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
        if self._freeing is not None:
            try:
                self._freeing.result()
            except StoreError:  # a task of the process this one was forked from: nothing here to wait for
                pass
        self._slicer = self._queries = None
        if self._store is not None:
            self._store.close()
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
            try:
                payload = to_payload(result)
            except Exception:  # noqa: BLE001 - not JSON-able (a custom object, a cycle): its repr is measured
                log.warning("offload could not serialize the result of %s; measuring its repr", tool, exc_info=True)
                payload = to_payload(repr(result))
            if self.passing.fits(tool, payload):
                return result
        except Exception:  # noqa: BLE001 - measuring must never fail a tool call; store it instead
            log.exception("offload could not measure the result of %s", tool)
        try:
            return self._offload(tool, payload if payload is not None else to_payload(repr(result)),
                                 args=args, session=session)
        except Exception as exc:  # noqa: BLE001 - fail open: a tool call never fails because offload did
            log.exception("offload failed on the result of %s; returning an unstored preview", tool)
            return self.references.unstored(tool, result, exc, self._limit_or_none(tool))

    def structured(self, ref: Reference, /, **more: Any) -> dict[str, Any]:
        """`ref` as JSON for a model (MCP structuredContent, a function call's output), with `more` merged:
        within the budget its text form fits (`Reference.fitted_dict`)."""
        budget = self.references.target_for(self.settings.limit_for(ref.tool))
        return ref.fitted_dict(self.references.measure, budget, **more)

    def put(self, data: Any, *, tool: str, args: dict | None = None, session: str | None = None) -> Reference:
        """Store `data` whatever its size (the CLI's `put`) and return the reference the model would get."""
        return self._offload(tool, to_payload(data), args=args, session=session, fail_open=False)

    def fits(self, tool: str, result: Any) -> bool:
        """Whether `process(tool, result)` would return `result` as it is: it fits `tool`'s limit."""
        return self.passing.fits(tool, to_payload(result))

    def _limit_or_none(self, tool: str) -> int | None:
        try:
            return self.settings.limit_for(tool)
        except Exception:  # noqa: BLE001 - the last resort must not fail on a setting
            return None

    def _offload(self, tool: str, payload: Payload, *, args: dict | None, session: str | None,
                 fail_open: bool = True, parent_id: str | None = None, reserve: int = 0) -> Reference:
        # A parsed JSON document is millions of acyclic containers that live until the reference is
        # built; with the collector on, each collection meanwhile walks them all (1-2 s at 100 MB).
        # `_offload_paused` returns once the document is freed by reference counting, or handed to a
        # worker that frees it under a pause of its own (`_free_aside`).
        with gc_paused():
            return self._offload_paused(tool, payload, args=args, session=session, fail_open=fail_open,
                                        parent_id=parent_id, reserve=reserve)

    def _offload_paused(self, tool: str, payload: Payload, *, args: dict | None, session: str | None,
                        fail_open: bool, parent_id: str | None, reserve: int = 0) -> Reference:
        """`reserve`: tokens of the budget the reference's text leaves to what travels with it."""
        references = self.references
        target = references.target_for(self.settings.limit_for(tool))
        target -= min(reserve, target // 2)
        data = payload.data
        stored_args = args_json(args) if args is not None else None  # as the args column holds them
        stderr_ref = None
        # a large result is hashed, then written, on a worker while it is chunked and referenced here
        write = PendingWrite(self, data)
        failure: Exception | None = None
        try:
            chunks = list(chunk_bytes(data))
            write.chunks.set_result(chunks)
            ref, detected = references.analyse(tool, data, payload, chunks, write.detected.set_result)
            ref.sha256 = write.sha256()
            ref.same_as = self._same_result(tool, stored_args, session, ref.sha256)  # named before fitting: it takes room
            if payload.is_shell:
                ref.kind, ref.exit_code, ref.shell_fields = "shell", payload.exit_code, payload.fields
                ref.stream = payload.stream
                if payload.stderr:
                    stderr_ref = references.add_stderr(ref, tool, payload.stderr, target)
                    if stderr_ref.truncated:  # stored whole with the result (`PendingWrite.finish`)
                        write.companions.append((self._row(stderr_ref, tool + ":stderr", stored_args, session, None),
                                                 payload.stderr, stderr_ref.sha256))
            notes = list(ref.notes)
            references.fit(ref, detected, data, target)
            if stderr_ref is not None and ref.stderr_truncated and not ref.stderr_artifact_id:
                # a stderr short enough to travel whole, cut to fit a small reference: stored with the
                # result, so that nothing of it is lost, and the reference names it
                stderr_ref.artifact_id = ref.stderr_artifact_id = new_id("art_")
                write.companions.append((self._row(stderr_ref, tool + ":stderr", stored_args, session, None),
                                         payload.stderr, stderr_ref.sha256))
                ref.stderr, ref.stderr_truncated, ref.notes = stderr_ref.preview, stderr_ref.truncated, notes
                references.fit(ref, detected, data, target)
        except BaseException:
            write.abandon()  # the reference failed: nothing of the result stays stored
            raise
        row = self._row(ref, tool, stored_args, session, payload)
        if payload.is_shell and detected.kind in _QUERIED_AS:  # the reference is a shell's, the bytes stdout's:
            row["kind"] = detected.kind  # queried as what they are (JMESPath, SQL, items refused "shell")
        try:
            write.finish({**row, "parent_id": parent_id})
        except Exception as exc:  # noqa: BLE001 - any store failure fails open
            failure = exc
        if failure is not None:
            if not fail_open:
                raise failure
            log.warning("offload could not store the result of %s: %s", tool, failure)
            ref.stored, ref.error, ref.artifact_id = False, reason(failure), None
            ref.stderr_artifact_id = None
            if stderr_ref is not None:  # cut again for the wording that says why
                ref.stderr, ref.stderr_truncated, ref.notes = stderr_ref.preview, stderr_ref.truncated, notes
            # the header now says why it was not stored, and the next calls are gone: fit again
            references.fit(ref, detected, data, target)
        self._free_aside(detected, len(data))
        return ref

    def _free_aside(self, detected: Detected, size: int) -> None:
        """Hand a big parsed document (and what the preview kept of it) to a worker thread to free.

        Freeing millions of containers by reference counting takes a third as long as parsing them
        (10 MB of JSON: 56 ms; 100 MB: 0.48 s), and the reference does not need to wait for it: the
        tool call returns while the worker frees them. The collector stays paused until the worker is
        done (the pause is taken here, before this call's own pause ends, and given back there).
        """
        if size < ASIDE or detected.doc is None:
            return  # a small document frees in less than handing it over costs
        held = [detected.doc, detected.memo]
        detected.doc, detected.memo = None, {}
        pause_gc()
        try:
            self._freeing = workers.submit(_free, held)
        except RuntimeError:  # the interpreter is shutting down: freed here, inside the caller's pause
            resume_gc()

    def _same_result(self, tool: str, args: str | None, session: str | None, sha: str) -> str | None:
        """An earlier stored, unexpired call of `tool` in this session with the same args and result, if
        any: its reference says so, so the model queries that one instead of re-running the tool."""
        if not session or args is None:
            return None
        try:
            wanted = loads(args)  # `args` as the args column stores them
            for row in self.store.same_results(self.namespace, tool=tool, session=session, sha256=sha):
                if row["args"] is not None and loads(row["args"]) == wanted:
                    return row["id"]
        except Exception as exc:  # noqa: BLE001 - a hint is never worth failing the tool call
            log.warning("offload could not look for an earlier identical call of %s: %s", tool, exc)
        return None

    def _row(self, ref: Reference, tool: str, args: str | None, session: str | None,
             payload: Payload | None) -> dict[str, Any]:
        ttl = self.settings.ttl_days
        meta = {"notes": ref.notes}
        if payload is not None and payload.is_shell:
            meta.update(exit_code=payload.exit_code, stderr_bytes=len(payload.stderr or b""),
                        stderr_artifact_id=ref.stderr_artifact_id, stderr=ref.stderr)
            if payload.fields:
                meta["fields"] = payload.fields
        return {
            "id": ref.artifact_id, "namespace": self.namespace, "session": _session_column(session),
            "tool": column_text(tool), "args": args,  # as `args_json` wrote them
            "kind": ref.kind, "content_type": ref.content_type, "tokens": ref.tokens,
            "shown_tokens": self.counter.count(text := ref.render()),
            "reference": dumps({**ref.to_dict(), "text": text}).decode(),  # exactly what the model saw
            "meta": dumps(meta).decode(),
            "expires_at": utcnow() + dt.timedelta(days=ttl) if ttl else None,
        }

    # -- decorator --------------------------------------------------------------------------

    def tool(self, func: Callable | None = None, *, name: str | None = None, session: str | None = None):
        """Wrap a sync or async tool function so its results go through `process()`.

        >>> @off.tool                     # doctest: +SKIP
        ... def grep(pattern: str, path: str) -> str: ...
        """

        def decorate(fn: Callable) -> Callable:
            tool_name = name or fn.__name__
            refuse_generator(fn, tool_name)
            signature = inspect.signature(fn)
            # a method's self or cls is not an argument of the call: its repr (an address) was stored
            first = next(iter(signature.parameters), None)
            instance = first if first in ("self", "cls") else None

            def call_args(args, kwargs) -> dict:
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    return {key: value for key, value in bound.arguments.items() if key != instance}
                except TypeError:
                    return {"args": list(args[1:] if instance else args), "kwargs": kwargs}

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

    def make_slicer(self, budget: int, counter: TokenCounter | None = None) -> "Slicer":
        """A slicer over this store with a given page budget and token counter (rerun replays the logged
        ones: pages cut by another count are other pages)."""
        count, held = self._page_counts(budget, counter)
        return Slicer(self.store, count, budget, self.queries.items_of, held)

    def make_queries(self, budget: int, counter: TokenCounter | None = None) -> "QueryRunner":
        _count, held = self._page_counts(budget, counter)  # the runner counts whole responses only, to hold them
        return QueryRunner(self.store, held, budget, cache_bytes=self.settings.cache_bytes,
                           timeout=self.settings.query_timeout, result_bytes=self.settings.query_result_bytes)

    def _page_counts(self, budget: int, counter: TokenCounter | None) -> tuple[Callable, Callable]:
        """(count, held) for pages of `budget` (`_page_budget`): the counter's count, to build a page by,
        and the count that holds a whole page to the budget, and to the tokens it stands for by the real
        tokenizers when they are installed and the page could be over by them (`Measure.within`).
        `counter`: another than this Offloader's (rerun's, of a logged tokenizer)."""
        counter = counter or self.counter
        measure = self.references.measure if counter is self.counter else Measure(counter)
        return counter.count, measure.within(budget, round((budget + _ENVELOPE) / _UNDERCOUNT))

    def _page_budget(self, tokens: int) -> int:
        # the page's text plus its JSON envelope must fit; the heuristic may undercount by 10%
        return int(tokens * (1.0 if self.counter.exact else _UNDERCOUNT)) - _ENVELOPE

    def fetch_slice(self, artifact_id: str, offset: int = 0, limit: int | None = None, unit: str = "lines",
                    path: str | None = None, *, session: str | None = None, logged: bool = True) -> dict[str, Any]:
        """A bounded page of a stored artifact (see offload.tools.schemas for the model-facing contract).
        `logged=False` leaves it out of the extract log: an HTTP HEAD asks what a page would be, not for it."""
        started = time.perf_counter()
        _within_int64(offset=offset, limit=limit)
        args = {"artifact_id": artifact_id, "offset": offset, "limit": limit, "unit": unit, "path": path,
                "_budget": self.slicer.budget, **self._counted_by()}
        row = self.store.get(artifact_id, self.namespace)
        response = self.slicer.slice(row, SliceRequest(artifact_id, offset, limit, unit, path))
        if logged:
            sha, size = content_digest(response)
            self._log_extract(row, "slice", path, args, sha, size, None, started, session)
        return response

    def query_artifact(self, artifact_id: str, jmespath: str | None = None, grep: str | None = None,
                       sql: str | None = None, offset: int = 0, limit: int | None = None, context: int = 0,
                       *, session: str | None = None) -> dict[str, Any]:
        """Extract from a stored artifact; a result too big for the budget becomes a derived artifact."""
        started = time.perf_counter()
        _within_int64(offset=offset, limit=limit, context=context)
        args = {"artifact_id": artifact_id, "jmespath": jmespath, "grep": grep, "sql": sql, "offset": offset,
                "limit": limit, "context": context, "_budget": self.queries.budget, **self._counted_by()}
        row = self.store.get(artifact_id, self.namespace)
        outcome = self.queries.compute(row, jmespath=jmespath, grep=grep, sql=sql, offset=offset, limit=limit,
                                       context=context)
        derived_id = None
        if outcome.inline is not None:
            response = outcome.inline
        else:
            about = {"derived_from": artifact_id, "expression": outcome.expression, "count": outcome.count}
            said = f"\n{outcome.note}" if outcome.note else ""  # in the text and the JSON: room for both
            if outcome.op == "grep":  # its lines count context and `--` too: the text said no match count
                n = outcome.count
                said = (f"\nThe grep matched {n:,} line{'s' if n != 1 else ''} of {artifact_id}; each line here "
                        f"starts with its line number there (`N:` a match"
                        f"{', `N-` context, `--` between groups' if context else ''}).") + said
            if outcome.note:
                about["note"] = outcome.note
            # the response is the reference's JSON with its text inside: the text leaves room for the rest
            ref = self._offload("query_artifact", Payload(outcome.derived, None), session=session,
                                args={k: v for k, v in args.items() if v is not None and not k.startswith("_")},
                                fail_open=False, parent_id=artifact_id,
                                reserve=self._envelope(about) + (self.references.measure(said) if said else 0))
            derived_id = ref.artifact_id
            response = self.structured(ref, **about, text=ref.render() + said)
        self._log_extract(row, outcome.op, outcome.expression, args, outcome.result_sha256, outcome.result_bytes,
                          derived_id, started, session)
        return response

    def _counted_by(self) -> dict[str, str]:
        """The tokenizer pages are cut by, for the extract log, when it is not the heuristic."""
        return {"_tokenizer": self.settings.tokenizer} if self.settings.tokenizer else {}

    def _envelope(self, more: dict[str, Any]) -> int:
        """Tokens the JSON of a reference takes besides its text once everything that gives way is gone
        (`Reference.fitted_dict`): of one with the widest values, plus `more`."""
        widest = Reference(artifact_id="art_" + "x" * 16, tool="query_artifact", kind="ndjson",
                           content_type="application/x-ndjson", bytes=10**12, chars=10**12, lines=10**12,
                           items=10**12, tokens=10**12, sha256="0" * 64, preview="", truncated=True,
                           same_as="art_" + "x" * 16, tokens_sampled=True)
        emptied = widest.fitted_dict(lambda _: 1, 0, **more, text="")  # everything gives way, nothing counted
        return self.references.measure(dumps(emptied).decode())

    def _log_extract(self, row: dict, op: str, expression: str | None, args: dict, sha: str, size: int,
                     derived_id: str | None, started: float, session: str | None) -> None:
        if self.store.read_only is not None:
            return  # a read-only store is read, not logged to: the answer is what matters
        try:
            self.store.log_extract({
                "artifact_id": row["id"], "namespace": self.namespace, "session": _session_column(session), "op": op,
                "expression": carriable(expression) if expression is not None else None,  # args keep it exactly
                "args": dumps(args).decode(), "result_sha256": sha,
                "result_bytes": size, "result_artifact_id": derived_id,
                "duration_ms": (time.perf_counter() - started) * 1000})
        except Exception as exc:  # noqa: BLE001 - the answer matters more than its log line
            log.warning("could not log an extract of %s: %s", row["id"], exc)

    def extracts(self, **filters: Any) -> list[dict[str, Any]]:
        """The extract log, oldest first: `artifact_id`, `since`, `until`, `limit`, `cursor` filter it."""
        return [public_extract(r) for r in self.store.list_extracts(self.namespace, **filters)]

    def extracts_page(self, limit: int = 200, cursor: str | None = None,
                      **filters: Any) -> tuple[list[dict[str, Any]], str | None]:
        """`limit` extracts, oldest first, and the cursor that continues after them (None at the end)."""
        rows, next_cursor = self.store.page_extracts(self.namespace, limit=limit, cursor=cursor, **filters)
        return [public_extract(r) for r in rows], next_cursor

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
        return public_row(self.store.get(artifact_id, self.namespace))

    def reference(self, artifact_id: str) -> dict[str, Any]:
        """The reference exactly as the model saw it: its dict and its text."""
        row = self.store.get(artifact_id, self.namespace)
        return loads(row["reference"]) if row["reference"] else {}  # lone surrogates: as their escapes

    def iter_raw(self, artifact_id: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The stored bytes [start, end) (all of them by default), a chunk at a time."""
        row = self.store.get(artifact_id, self.namespace)
        if start == 0 and end is None:
            return self.store.iter_bytes(row["sha256"])
        return self.store.iter_range(row["sha256"], start, row["bytes"] if end is None else min(end, row["bytes"]))

    def list(self, **filters: Any) -> tuple[list[dict[str, Any]], str | None]:
        rows, cursor = self.store.list(self.namespace, **filters)
        return [public_row(r) for r in rows], cursor

    def delete(self, artifact_id: str) -> None:
        self.store.delete(artifact_id, self.namespace)

    def pin(self, artifact_id: str, pinned: bool = True) -> None:
        self.store.set_pinned(artifact_id, self.namespace, pinned)

    def gc(self, **kwargs: Any):
        return self.store.gc(**kwargs)

    def stats(self, top: int | None = None) -> dict[str, Any]:
        """Artifacts, bytes and tokens kept out of the context: in total, per tool and per session (the
        `top` groups of each that kept out most, the rest summed in `by_tool_rest` / `by_session_rest`)."""
        return self.store.stats(self.namespace, top)

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


# The kinds a shell result's stored stdout keeps as the artifact's kind: those the companion tools read
# by their structure (the hints and next calls of its reference name them), not as lines of text.
_QUERIED_AS = frozenset({"json", "ndjson", "csv", "grep"})


def _session_column(session: str | None) -> str | None:
    """A session as the store keeps it: an empty one is none (it was listed as a second "no session")."""
    return column_text(session) if session else None


def _within_int64(**numbers: Any) -> None:
    """Offsets and limits the store and the extract log can hold: a model may send 10**30."""
    for name, value in numbers.items():
        if isinstance(value, int) and not -(1 << 63) <= value < 1 << 63:
            instead = {"offset": "a negative offset counts from the end (offset=-40: the last 40)",
                       "limit": "omit limit (null) for a page that fits the budget, and follow `next`"}
            raise InvalidArgument(f"{name} {value} is out of range: no artifact is that large; "
                                  f"{instead.get(name, 'context is 0 to 50 lines')}.")


def _free(held: list) -> None:
    """Drop the last references to `held`'s contents, then give back the pause `_free_aside` took."""
    try:
        held.clear()
    finally:
        resume_gc()
