"""The two kinds of upstream MCP server the proxy relays to: a child process over stdio, or a URL.

Over stdio the proxy reads the child's newline-delimited JSON-RPC itself (asyncio pipes, unbounded
lines) and hands each raw line on; it never goes through an SDK transport that would re-validate a
50 MB message. Over streamable HTTP it uses the `mcp` SDK's client transport (sessions, SSE, resumption)
and stamps the per-request headers the SDK's session would have stamped. Both report their end with a
sentence the client can be shown (exit code and the last lines the server wrote to stderr).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shlex
import signal
import sys
from typing import Any, Awaitable, Callable

log = logging.getLogger("offload")

Deliver = Callable[[bytes | None, Any], Awaitable[None]]  # (raw line ending in \n, or None with the parsed message)
Closed = Callable[[str], Awaitable[None]]  # a sentence saying why the upstream is gone

_READ_SIZE = 1 << 20
_STDERR_TAIL = 8  # lines of the upstream's stderr quoted when it dies
_GRACE = 2.0  # seconds an upstream gets to exit after its stdin closes, then after SIGTERM


class UpstreamGone(Exception):
    """Writing to the upstream failed because it is no longer there.

    Its text names the cause, never blank (asyncio's BrokenPipeError() and anyio's ClosedResourceError()
    have no words of their own); `ended` is how the upstream ended (exit code, last stderr lines) when it is
    known to have exited, the same sentence the reader reports at its end.
    """

    def __init__(self, cause: str, ended: str | None = None):
        super().__init__(cause)
        self.ended = ended


def _cause(exc: BaseException) -> str:
    """An exception as "Type: words", or its type alone when it has no words."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _read_lines(stream: asyncio.StreamReader, deliver: Deliver) -> None:
    """Deliver each non-blank line of `stream` until EOF, whatever its length, with its newline.

    A line longer than one read grows in one bytearray and is delivered as it is (orjson parses a
    bytearray): a 50 MB line costs 50 MB plus the growth margin, where StreamReader.readline holds its
    buffer, a slice of it and the returned copy at once, and a list of pieces fragments the heap. The
    reader keeps no line after its delivery (the relay keeps one under 1 MiB while it may send it unchanged).
    A last line without its newline gets one: the relay may write the line on as it is, and the next
    message would join it. A CRLF ending is kept (JSON allows the CR; the MCP SDKs accept it).
    """
    pending: bytearray | None = None
    while chunk := await stream.read(_READ_SIZE):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if pending is not None:
                pending += memoryview(chunk)[start:end + 1]
                line, pending = pending, None
            else:
                line = chunk[start:end + 1] if start or end + 1 < len(chunk) else chunk
            if not line.isspace():  # (strip() would copy a 50 MB line)
                await deliver(line, None)
            del line
            start = end + 1
        if start < len(chunk):
            if pending is None:
                pending = bytearray()
            pending += memoryview(chunk)[start:]
    if pending and not pending.isspace():  # a last message without its newline
        pending += b"\n"  # in place: the bytearray has room, or grows without a copy of the line
        await deliver(pending, None)


class StdioUpstream:
    """An MCP server started as a child process; its stderr is passed through to ours."""

    def __init__(self, command: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None):
        if not command:
            raise ValueError("no upstream command: put it after --, e.g. offload proxy -- mcp-server-git")
        self.command = command
        self.label = shlex.join(command)
        self.cwd, self.env = cwd, env
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._tasks: list[asyncio.Task] = []
        self._stderr: asyncio.Task | None = None
        self._write_lock = asyncio.Lock()
        self.negotiated: str | None = None  # the handshake's protocol version (set by the relay; unused here)

    async def start(self, deliver: Deliver, closed: Closed) -> None:
        """Start the child (OSError when it cannot be started) and begin reading it."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=self.cwd,
            env={**os.environ, **self.env} if self.env else None,
            start_new_session=True)  # its own process group, so stopping it stops what it started (npx → node)
        self._stderr = asyncio.create_task(self._pass_stderr())
        self._tasks = [asyncio.create_task(self._read(deliver, closed)), self._stderr]

    async def _read(self, deliver: Deliver, closed: Closed) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            await _read_lines(self.proc.stdout, deliver)
        except (ConnectionError, OSError) as exc:
            log.warning("offload proxy: reading the upstream failed: %s", exc)
        await closed(self.describe_exit(await self._exit_code()))

    async def _exit_code(self) -> int | None:
        """The child's exit code, after its stderr has ended (its last words, for the error message); None
        if it is still running a moment later. A pipe can break a little before the exit is seen."""
        assert self.proc is not None
        if self._stderr is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stderr), 1.0)
        with contextlib.suppress(asyncio.TimeoutError):
            return await asyncio.wait_for(self.proc.wait(), 1.0)
        return None

    async def _gone(self, cause: str) -> UpstreamGone:
        code = await self._exit_code()
        return UpstreamGone(cause, None if code is None else self.describe_exit(code))

    def describe_exit(self, code: int | None) -> str:
        if code is None:
            how = "closed its output"
        elif code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            how = f"was killed by {name}"
        else:
            how = f"exited with code {code}"
        tail = "\n".join(self.stderr_tail)
        return f"the upstream MCP server ({self.label}) {how}" + (f"; its last stderr lines:\n{tail}" if tail else "")

    async def _pass_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        out = sys.stderr.buffer
        while line := await self.proc.stderr.readline():
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip()[:500])
            try:
                out.write(line)
                out.flush()
            except (OSError, ValueError):  # our own stderr is gone: keep the tail, drop the rest
                pass

    async def send(self, data: bytes, message: Any = None) -> None:
        if self.proc is None or self.proc.stdin is None:
            raise UpstreamGone("the upstream is not running")
        if self.proc.returncode is not None:  # exited, and the reader has not reported it yet
            raise await self._gone("the upstream has exited")
        async with self._write_lock:  # one message at a time: a big one must not interleave with another
            try:
                self.proc.stdin.write(data)
                if not data.endswith(b"\n"):  # written apart: `data + b"\n"` would copy a big message
                    self.proc.stdin.write(b"\n")
                await self.proc.stdin.drain()
            except (ConnectionError, OSError) as exc:
                raise await self._gone(_cause(exc)) from exc

    def tools_listed(self, tools: list[dict[str, Any]]) -> None:
        """Nothing to learn over stdio (HTTP needs the x-mcp-header annotations)."""

    async def close(self) -> None:
        """Close its stdin, then SIGTERM, then SIGKILL its process group, each after a grace period."""
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    proc.stdin.close()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, sig)
                try:
                    await asyncio.wait_for(proc.wait(), _GRACE)
                    break
                except asyncio.TimeoutError:
                    continue
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class HttpUpstream:
    """A streamable-HTTP MCP server, through the SDK's client transport (needs `offload[mcp]`)."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = 120.0):
        self.url = url
        self.label = url
        self.headers = headers or {}
        self.timeout = timeout
        self.negotiated: str | None = None  # the legacy handshake's version, set by the relay
        self._header_maps: dict[str, dict[tuple[str, ...], str]] = {}
        self._write: Any = None
        self._task: asyncio.Task | None = None

    async def start(self, deliver: Deliver, closed: Closed) -> None:
        try:
            import httpx2  # noqa: F401 - the SDK's HTTP client
            from mcp.client.streamable_http import streamable_http_client  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError("--upstream-url needs the MCP SDK: pip install 'offload[mcp]'") from exc
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(deliver, closed, ready))
        await ready

    async def _run(self, deliver: Deliver, closed: Closed, ready: asyncio.Future) -> None:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        reason = f"the upstream MCP server ({self.url}) closed the connection"
        try:
            client = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(self.timeout, read=None))
            async with client, streamable_http_client(self.url, http_client=client,
                                                      max_sse_event_size=None) as (read, write):
                self._write = write
                ready.set_result(None)
                async for item in read:
                    if isinstance(item, Exception):
                        log.warning("offload proxy: upstream transport error: %s", item)
                        continue
                    message = item.message.model_dump(mode="json", by_alias=True, exclude_unset=True)
                    await deliver(None, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the upstream; the client is told
            reason = f"the upstream MCP server ({self.url}) failed: {_cause(_innermost(exc))}"
            log.warning("offload proxy: %s", reason)
        finally:
            self._write = None
            if not ready.done():
                ready.set_result(None)
        await closed(reason)

    async def send(self, data: bytes, message: Any = None) -> None:
        import mcp_types as types
        import orjson
        from mcp.shared.message import ClientMessageMetadata, SessionMessage

        if self._write is None:
            raise UpstreamGone("the upstream connection is closed")
        if message is None:
            message = orjson.loads(data)
        parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        try:
            await self._write.send(SessionMessage(parsed, metadata=ClientMessageMetadata(
                headers=self._headers(message))))
        except Exception as exc:  # noqa: BLE001 - anyio's closed/broken stream errors
            raise UpstreamGone(_cause(exc)) from exc

    def _headers(self, message: dict[str, Any]) -> dict[str, str]:
        """The routing headers the SDK's own session stamps on each request (see mcp.client.session)."""
        from mcp_types import PROTOCOL_VERSION_META_KEY
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS
        from mcp.shared.inbound import (MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER,
                                        NAME_BEARING_METHODS, encode_header_value, mcp_param_headers)

        method = message.get("method")
        if method is None or method == "initialize":
            return {}
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        version = meta.get(PROTOCOL_VERSION_META_KEY) or self.negotiated
        headers: dict[str, str] = {MCP_PROTOCOL_VERSION_HEADER: version} if version else {}
        if version in MODERN_PROTOCOL_VERSIONS and "id" in message:
            headers[MCP_METHOD_HEADER] = method
            key = NAME_BEARING_METHODS.get(method)
            if key is not None and isinstance(params.get(key), str):
                headers[MCP_NAME_HEADER] = encode_header_value(params[key])
            if method == "tools/call" and params.get("name") in self._header_maps:
                headers.update(mcp_param_headers(self._header_maps[params["name"]], params.get("arguments") or {}))
        return headers

    def tools_listed(self, tools: list[dict[str, Any]]) -> None:
        from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("inputSchema"), dict):
                schema = tool["inputSchema"]
                if find_invalid_x_mcp_header(schema) is None:
                    self._header_maps[tool["name"]] = x_mcp_header_map(schema)

    def describe_exit(self, code: int | None = None) -> str:
        return f"the upstream MCP server ({self.url}) is unreachable"

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _innermost(exc: BaseException) -> BaseException:
    """The error inside the task groups an exception was raised through: "ExceptionGroup: unhandled
    errors in a TaskGroup (1 sub-exception)" named no cause; "ConnectError: All connection attempts
    failed" does."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc

