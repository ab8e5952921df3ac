"""The JSON-RPC relay between one MCP client (our stdin/stdout) and one upstream MCP server.

Every message passes through byte for byte except four: the initialize / server/discover result (the
proxy has tools even when the upstream has none), the tools/list result (local tools added, output
schemas widened), a tools/call result over its tool's budget (offloaded in a worker thread), and calls
of fetch_slice / query_artifact (answered here). The relay also answers for the upstream when it cannot:
a request it leaves unanswered past the timeout, or one it can no longer answer because it is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import orjson

from ...jsontext import dumps
from ...tools.schemas import dispatch, mcp_structured
from ...jsontext import loads
from .lean import LEND_AT, parse_lean, restore
from .results import (LOCAL_TOOLS, local_tool_definitions, offload_call_result, patch_tool_listing,
                      unprocessed_call_result)
from .upstream import UpstreamGone

if TYPE_CHECKING:
    from ...offloader import Offloader

log = logging.getLogger("offload")

CONNECTION_CLOSED = -32000  # the codes the MCP SDKs use for these two cases
REQUEST_TIMEOUT = -32001
PARSE_ERROR = -32700
INTERNAL_ERROR = -32603
NO_TIMEOUT_METHODS = frozenset({"subscriptions/listen"})  # long-lived by design
HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})
STARTUP_SECONDS = 60.0  # the handshake may wait for a slow start (npx fetching a package), whatever --timeout
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"  # a 2026-07-28 request carries it


@dataclass
class Pending:
    """A client request forwarded upstream and not answered yet."""

    method: str
    tool: str | None = None
    args: dict | None = None
    first_page: bool = True
    deadline: float | None = None
    progress_token: Any = None
    cancelled: bool = False  # by the client: a late answer is dropped
    expired: bool = False  # the client got a timeout error: a late answer is dropped

    def describe(self) -> str:
        return f"tools/call {self.tool}" if self.tool else self.method


def _key(request_id: Any) -> Any:
    return request_id if isinstance(request_id, (str, int)) else orjson.dumps(request_id)


def _line(message: Any) -> bytes:
    """A message as one line of JSON: lent strings restored, and what orjson refuses (lone surrogates,
    integers beyond 64 bits) written exactly rather than failing the answer."""
    return dumps(restore(message)) + b"\n"


def _response(request_id: Any, result: dict[str, Any]) -> bytes:
    return _line({"jsonrpc": "2.0", "id": request_id, "result": result})


def _error(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _line({"jsonrpc": "2.0", "id": request_id, "error": error})


def _is_modern(params: Any) -> bool:
    return isinstance(params, dict) and isinstance(params.get("_meta"), dict) and \
        PROTOCOL_VERSION_META_KEY in params["_meta"]


class Relay:
    """Relays one client to one upstream; `write` sends bytes to the client (thread-safe, in order)."""

    def __init__(self, off: "Offloader", upstream: Any, write: Callable[[bytes], None], *,
                 timeout: float | None = 120.0, session: str | None = None, instructions: str | None = None):
        self.off = off
        self.upstream = upstream
        self.write = write
        self.timeout = timeout
        self.session = session
        self.instructions = instructions
        self.pending: dict[Any, Pending] = {}
        self.progress: dict[Any, Any] = {}  # progress token → pending key
        self.waiting_on_client: set[Any] = set()  # upstream requests the client has not answered yet
        self.gone: str | None = None  # why the upstream is no longer there
        self._tasks: set[asyncio.Task] = set()
        self._watchdog: asyncio.Task | None = None
        self._warned_shadow = False
        self.closing = False  # the client has gone: the upstream's end is ours, not news
        self.upstream_tools = True  # whether its handshake said it has tools (else tools/list is answered here)

    async def start(self) -> None:
        await self.upstream.start(self.from_upstream, self.upstream_closed)
        if self.timeout:
            self._watchdog = asyncio.create_task(self._watch())

    async def close(self) -> None:
        """Stop the upstream and wait for answers already being prepared (a store in progress)."""
        self.closing = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        await self.upstream.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- client → upstream ------------------------------------------------------------------

    async def from_client(self, line: bytes) -> None:
        message = _parse(line, lean=False)
        if message is None:
            self.write(_error(None, PARSE_ERROR, "offload proxy: not a JSON-RPC message (not JSON)"))
            return
        if isinstance(message, list):  # a 2025-03-26 batch: relayed one message at a time
            for item in message:
                await self._client_message(None, item)
            return
        await self._client_message(line, message)

    async def _client_message(self, raw: bytes | None, message: Any) -> None:
        if not isinstance(message, dict):
            self.write(_error(None, -32600, "offload proxy: a JSON-RPC message must be an object"))
            return
        method = message.get("method")
        if method is None:  # the client's answer to an upstream request (sampling, roots, elicitation)
            self.waiting_on_client.discard(_key(message.get("id")))
            self._restart_clocks()
            await self._forward(raw, message)
            return
        params = message.get("params")
        if "id" not in message:  # a notification
            if method == "notifications/cancelled" and isinstance(params, dict):
                pending = self.pending.get(_key(params.get("requestId")))
                if pending is None:
                    return  # a local call (it cannot be stopped) or one already answered
                pending.cancelled = True
            await self._forward(raw, message)
            return
        request_id = message["id"]
        if method == "tools/call" and isinstance(params, dict) and params.get("name") in LOCAL_TOOLS:
            self._spawn(self._local_call(request_id, params))
            return
        if self.gone is not None:
            self._answer_without_upstream(request_id, method, params)
            return
        if method == "tools/list" and not self.upstream_tools:  # it would answer "method not found"
            self._list_local_tools(request_id, params)
            return
        pending = Pending(method)
        if method == "tools/call" and isinstance(params, dict):
            pending.tool = str(params.get("name"))
            pending.args = params.get("arguments") if isinstance(params.get("arguments"), dict) else None
        elif method == "tools/list":
            pending.first_page = not (isinstance(params, dict) and params.get("cursor"))
        if self.timeout and method not in NO_TIMEOUT_METHODS:
            allowed = max(self.timeout, STARTUP_SECONDS) if method in HANDSHAKE_METHODS else self.timeout
            pending.deadline = time.monotonic() + allowed
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and meta.get("progressToken") is not None:
            pending.progress_token = meta["progressToken"]
            self.progress[_key(meta["progressToken"])] = _key(request_id)
        self.pending[_key(request_id)] = pending
        await self._forward(raw, message)

    async def _forward(self, raw: bytes | None, message: Any) -> None:
        if self.gone is not None:
            return
        try:
            await self.upstream.send(raw if raw is not None else _line(message), message)
        except UpstreamGone as exc:
            log.warning("offload proxy: could not write to the upstream: %s", exc)
            if exc.ended is not None:  # it has exited: this request and all pending are told how, at once
                await self.upstream_closed(exc.ended)
                return
            # the reader sees the end too and answers what is pending; a request is answered here at once
            if "id" in message and "method" in message:
                self._settle(_key(message["id"]))
                self.write(_error(message["id"], CONNECTION_CLOSED,
                                  f"offload proxy: {message['method']} could not be sent: the upstream MCP "
                                  f"server ({self.upstream.label}) is not accepting input ({exc})."))

    async def _local_call(self, request_id: Any, params: dict[str, Any]) -> None:
        out = await asyncio.to_thread(dispatch, self.off, params["name"], params.get("arguments"),
                                      session=self.session)
        result: dict[str, Any] = {"content": [{"type": "text", "text": out.text}], "isError": out.is_error}
        if (structured := mcp_structured(out)) is not None:
            result["structuredContent"] = structured
        if _is_modern(params):
            result["resultType"] = "complete"
        self.write(_response(request_id, result))

    def _answer_without_upstream(self, request_id: Any, method: str, params: Any) -> None:
        """After the upstream is gone: what the proxy can answer itself, and a clear error for the rest."""
        if method == "ping":
            self.write(_response(request_id, {}))
        elif method == "tools/list":  # the stored artifacts stay readable
            self._list_local_tools(request_id, params)
        else:
            what = f"tools/call {params.get('name')}" if method == "tools/call" and isinstance(params, dict) else method
            self.write(_error(request_id, CONNECTION_CLOSED, self._gone_message(what), {"reason": self.gone}))

    def _list_local_tools(self, request_id: Any, params: Any) -> None:
        """tools/list answered by the proxy alone: its own two tools, with what a 2026-07-28 listing must
        carry (the SDK's client refused a bare `{"tools": …}`: cacheScope, resultType and ttlMs required)."""
        result: dict[str, Any] = {"tools": local_tool_definitions()}
        if _is_modern(params):
            result.update(ttlMs=0, cacheScope="private", resultType="complete")
        self.write(_response(request_id, result))

    def _gone_message(self, what: str) -> str:
        return (f"offload proxy: {what} cannot be answered: {self.gone}. fetch_slice and query_artifact still "
                "work on stored results; restart this MCP server to use the upstream's tools again.")

    # -- upstream → client ------------------------------------------------------------------

    async def from_upstream(self, raw: bytes | None, message: Any) -> None:
        if message is None:
            message = _parse(raw)
            if message is None:
                log.warning("offload proxy: the upstream wrote a line that is not JSON-RPC; ignored: %.200r", raw)
                return
        if isinstance(message, list):
            for item in message:
                await self.from_upstream(None, item)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            if "id" in message:  # the upstream asks the client (sampling, roots, elicitation, ping)
                self.waiting_on_client.add(_key(message["id"]))
            elif message["method"] == "notifications/progress":
                self._progressed(message.get("params"))
            self.write(raw if raw is not None else _line(message))
            return
        key = _key(message.get("id"))
        pending = self.pending.pop(key, None)
        if pending is None:
            self.write(raw if raw is not None else _line(message))
            return
        self._forget_progress(pending)
        if pending.cancelled or pending.expired:
            return  # the client has stopped waiting for it
        result = message.get("result")
        if not isinstance(result, dict):  # an error: passed through unchanged
            self.write(raw if raw is not None else _line(message))
        elif pending.method == "tools/call":
            limit = self.off.settings.limit_for(pending.tool or "")
            if raw is not None and len(raw) <= limit:  # a token is at least a byte: surely fits
                self.write(raw)
            else:  # a line parsed lean is not kept: holding it while it is stored would double the peak
                self._spawn(self._offload_result(raw if raw is not None and len(raw) < LEND_AT else None,
                                                 message, pending))
        elif pending.method == "tools/list":
            result = restore(result)
            self.upstream.tools_listed(result.get("tools") or [])
            patched, shadowed = patch_tool_listing(result, first_page=pending.first_page)
            if shadowed and not self._warned_shadow:
                self._warned_shadow = True
                log.warning("offload proxy: the upstream's own %s tool(s) are hidden by offload's", shadowed)
            self.write(_line({**message, "result": patched}))
        elif pending.method in HANDSHAKE_METHODS:
            self.write(_line({**message, "result": self._with_tools(restore(result), pending.method)}))
        else:
            self.write(raw if raw is not None else _line(message))

    def _with_tools(self, result: dict[str, Any], method: str) -> dict[str, Any]:
        """The handshake result saying the server has tools (the proxy's own, at least)."""
        if method == "initialize" and isinstance(result.get("protocolVersion"), str):
            self.upstream.negotiated = result["protocolVersion"]
        capabilities = result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {}
        self.upstream_tools = isinstance(capabilities.get("tools"), dict)
        patched = {**result, "capabilities": {**capabilities, "tools": capabilities.get("tools") or {}}}
        if self.instructions:
            given = result.get("instructions")
            patched["instructions"] = f"{given}\n\n{self.instructions}" if given else self.instructions
        return patched

    async def _offload_result(self, raw: bytes | None, message: dict[str, Any], pending: Pending) -> None:
        """Answer a tools/call whose result may be over budget, exactly once whatever fails: the request has
        left `pending`, so no clock would answer it otherwise.

        `raw` is the upstream's line when it was kept: a result left unchanged goes out as it, byte for byte.
        """
        try:
            answer = await self._prepared_answer(raw, message, pending)
        except Exception:  # noqa: BLE001 - even the fallback failed: the upstream's own answer, else an error
            log.exception("offload proxy: could not answer tools/call %s", pending.tool)
            answer = raw if raw is not None else _error(
                message.get("id"), INTERNAL_ERROR, f"offload proxy: the result of tools/call {pending.tool} could "
                "not be relayed (see the proxy's stderr). Retry, perhaps with narrower arguments.")
        if not pending.cancelled:
            self.write(answer)

    async def _prepared_answer(self, raw: bytes | None, message: dict[str, Any], pending: Pending) -> bytes:
        tool, result = pending.tool or "", message["result"]
        try:
            new = await asyncio.to_thread(offload_call_result, self.off, tool, result, args=pending.args,
                                          session=self.session)
        except Exception as exc:  # noqa: BLE001 - a call never fails because offload did; never floods either
            log.exception("offload proxy: could not process the result of %s", tool)
            new = await asyncio.to_thread(unprocessed_call_result, self.off, tool, restore(result), exc)
        if new is None and raw is not None:
            return raw
        return _line({**message, "result": new if new is not None else result})

    # -- clocks, progress, the end of the upstream ------------------------------------------

    def _progressed(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        key = self.progress.get(_key(params.get("progressToken")))
        pending = self.pending.get(key) if key is not None else None
        if pending is not None and pending.deadline is not None:
            pending.deadline = time.monotonic() + self.timeout  # progress shows it is alive: its clock restarts

    def _forget_progress(self, pending: Pending) -> None:
        if pending.progress_token is not None:
            self.progress.pop(_key(pending.progress_token), None)

    def _restart_clocks(self) -> None:
        if self.timeout:
            now = time.monotonic()
            for pending in self.pending.values():
                if pending.deadline is not None:
                    pending.deadline = max(pending.deadline, now + self.timeout)

    def _settle(self, key: Any) -> Pending | None:
        pending = self.pending.pop(key, None)
        if pending is not None:
            self._forget_progress(pending)
        return pending

    async def _watch(self) -> None:
        tick = min(1.0, max(self.timeout / 10, 0.05))
        while True:
            await asyncio.sleep(tick)
            if self.waiting_on_client:  # the upstream waits on the client (a person, perhaps): its clock stops
                self._restart_clocks()
                continue
            now = time.monotonic()
            for key, pending in list(self.pending.items()):
                if pending.deadline is None or now < pending.deadline or pending.expired or pending.cancelled:
                    continue
                pending.expired = True
                self._forget_progress(pending)
                self.write(_error(
                    _id_of(key), REQUEST_TIMEOUT,
                    f"offload proxy: {pending.describe()} got no answer from the upstream MCP server "
                    f"({self.upstream.label}) in time ({self.timeout:g} s) and was cancelled. The server may be "
                    "stuck or the work too slow: retry with smaller arguments, or raise the proxy's --timeout.",
                    {"timeout_seconds": self.timeout}))
                await self._forward(None, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                           "params": {"requestId": _id_of(key),
                                                      "reason": f"timed out after {self.timeout:g} s"}})

    async def upstream_closed(self, reason: str) -> None:
        """Answer everything still pending with the reason, at once."""
        if self.gone is not None:
            return
        self.gone = reason
        if not self.closing:
            log.warning("offload proxy: %s", reason)
        for key, pending in list(self.pending.items()):
            self._settle(key)
            if not (pending.cancelled or pending.expired):
                self.write(_error(_id_of(key), CONNECTION_CLOSED, self._gone_message(pending.describe()),
                                  {"reason": reason}))
        self.waiting_on_client.clear()


def _parse(raw: bytes, *, lean: bool = True) -> Any:
    """The message in `raw`, exactly (see lean.loads), or None when it is not JSON.

    With `lean`, a line of LEND_AT bytes or more is parsed lean: its long strings stay UTF-8 bytes (see
    lean.py).
    """
    try:
        return parse_lean(raw) if lean and len(raw) >= LEND_AT else loads(raw)
    except ValueError:
        return None


def _id_of(key: Any) -> Any:
    return orjson.loads(key) if isinstance(key, bytes) else key


# -- the client's side: our stdin and stdout ---------------------------------------------------


class StdoutWriter:
    """Writes messages to the client from one thread, in order, so a slow reader never blocks the relay.

    Each message is written as one line: one handed on without its newline (an upstream's raw line) gets
    one, or the next message would join it and the client would lose both.
    """

    def __init__(self, out: BinaryIO):
        self.out = out
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="offload-proxy-stdout", daemon=True)
        self._thread.start()

    def __call__(self, data: bytes) -> None:
        self._queue.put(data)

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            try:
                self.out.write(data)
                if not data.endswith(b"\n"):  # written apart: `data + b"\n"` would copy a 100 MB line
                    self.out.write(b"\n")
                self.out.flush()
            except (OSError, ValueError):  # the client is gone; the reader sees EOF and stops us
                return

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)


async def read_lines(fd: int, handle: Callable[[bytes], Any]) -> None:
    """Feed each line read from file descriptor `fd` (our stdin) to `handle`, until EOF.

    A thread reads the descriptor itself (os.read), not sys.stdin.buffer: a thread blocked inside a
    buffered reader holds its lock, and the interpreter aborts when it tries to close it at exit.
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes] = asyncio.Queue()

    def pump() -> None:
        pending = bytearray()
        try:
            while chunk := os.read(fd, 1 << 20):
                start = 0
                while (end := chunk.find(b"\n", start)) != -1:
                    pending += memoryview(chunk)[start:end + 1]
                    loop.call_soon_threadsafe(lines.put_nowait, bytes(pending))
                    pending.clear()
                    start = end + 1
                pending += memoryview(chunk)[start:]
        except OSError:
            pass
        if pending and not pending.isspace():
            loop.call_soon_threadsafe(lines.put_nowait, bytes(pending))
        loop.call_soon_threadsafe(lines.put_nowait, b"")

    threading.Thread(target=pump, name="offload-proxy-stdin", daemon=True).start()
    while line := await lines.get():
        if not line.isspace():
            await handle(line)


async def serve_stdio(relay: Relay, stdin_fd: int | None = None) -> None:
    """Relay our stdin to the upstream until the client closes it, then stop the upstream."""
    await relay.start()
    try:
        await read_lines(sys.stdin.fileno() if stdin_fd is None else stdin_fd, relay.from_client)
    finally:
        await relay.close()
