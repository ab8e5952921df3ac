"""`offload mcp`: fetch_slice and query_artifact for any MCP client, over stdio or streamable HTTP.

Built on the official `mcp` SDK's low-level Server, so each tool declares exactly offload's JSON Schemas
(input and output) and every call goes through the same dispatch as the other adapters: text content
plus structuredContent matching the outputSchema. Over HTTP a non-loopback address needs a token, and a
loopback one checks Host and Origin, so a web page cannot reach the store through DNS rebinding.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import sys
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import InvalidArgument
from ..tools.schemas import mcp_structured
from .toolpack import ToolPack

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from ..offloader import Offloader

INSTRUCTIONS = ("offload stores tool results too large for the context and shows a reference naming an "
                "artifact id (art_…). Read any part with fetch_slice (pages of lines, chars, bytes or JSON items; "
                "offset=-40 reads the end) and extract with query_artifact (JMESPath, grep, SQL).")
MIN_TOKEN_CHARS = 16
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def build_server(off: "Offloader", *, session: str | None = None) -> "Server":
    """An MCP server (not yet running) serving the companion tools of `off`."""
    from importlib.metadata import PackageNotFoundError, version

    from mcp import types
    from mcp.server.lowlevel import Server

    pack = ToolPack(off, session=session)
    listed = [types.Tool(name=t.name, description=t.description, input_schema=t.parameters,
                         output_schema=t.output_schema,
                         annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                                           idempotent_hint=True, open_world_hint=False))
              for t in pack]
    schemas = {t.name: t.parameters for t in pack}

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        out = await pack.acall(params.name, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text=out.text)],
                                    structured_content=mcp_structured(out), is_error=out.is_error)

    try:
        offload_version = version("offload")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        offload_version = "0"
    return Server("offload", version=offload_version, instructions=INSTRUCTIONS,
                  get_tool_input_schema=schemas.get, on_list_tools=list_tools, on_call_tool=call_tool)


# -- running ----------------------------------------------------------------------------------------


def serve(off: "Offloader", *, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
          token: str | None = None, allowed_origins: Iterable[str] = ()) -> None:
    """The body of `offload mcp`: serve over stdio until the client closes it, or over HTTP until stopped."""
    if http:
        check_http_options(host, token)  # before anything is imported or opened
    try:
        import anyio
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the MCP SDK is not installed: pip install 'offload[mcp]'") from exc
    server = build_server(off)
    if not http:
        anyio.run(_serve_stdio, server)
        return
    import uvicorn

    app = HttpGuard(server.streamable_http_app(streamable_http_path="/mcp", host=host),
                    host=host, port=port, token=token, allowed_origins=allowed_origins)
    shown = f"[{host}]" if ":" in host else host
    print(f"offload MCP server: http://{shown}:{port}/mcp" + (" (bearer token required)" if token else ""),
          file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")).run()


async def _serve_stdio(server: "Server", stdin: Any = None) -> None:
    from mcp.server.stdio import stdio_server

    lines = _StdinLines(stdin if stdin is not None else sys.stdin.buffer)
    async with stdio_server(stdin=lines) as (read, write):
        lines.answer_with(write)
        await server.run(read, _Answering(write, lines), server.create_initialization_options())


class _Answering:
    """The server's write stream, telling `_StdinLines` which requests have their answer."""

    def __init__(self, stream: Any, lines: "_StdinLines"):
        self._stream, self._lines = stream, lines

    async def send(self, item: Any) -> None:
        from mcp import types

        await self._stream.send(item)
        if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)):
            self._lines.awaiting.discard(item.message.id)

    async def __aenter__(self) -> "_Answering":
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _StdinLines:
    """stdin's lines for the SDK's stdio transport, as far as it can read them. A line it cannot read
    (not UTF-8, not JSON, JSON holding a lone surrogate escape, which pydantic refuses) it drops without
    an answer, so the client waits for one forever; such a line is answered here instead, with the error
    a JSON-RPC peer expects and the request's id when the line has one (over HTTP, `HttpGuard` does the
    same for a request's body)."""

    def __init__(self, stdin: Any):
        import anyio

        self._stdin = anyio.wrap_file(stdin)
        self._write: Any = None
        self._ready = anyio.Event()
        self.awaiting: set[Any] = set()  # ids of requests handed on and not answered yet

    def answer_with(self, write: Any) -> None:
        self._write = write
        self._ready.set()

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        from mcp.shared.message import SessionMessage

        import anyio

        async for raw in self._stdin:
            if not raw.strip():
                continue
            readable, answer = unreadable_line(raw)
            if readable is not None:
                message = json.loads(readable)
                if isinstance(message, dict) and "method" in message and "id" in message:
                    self.awaiting.add(message["id"])
                elif isinstance(message, dict) and message.get("method") == "notifications/cancelled":
                    self.awaiting.discard((message.get("params") or {}).get("requestId"))  # gets no answer
                yield readable
            elif answer is not None:
                await self._ready.wait()
                await self._write.send(SessionMessage(answer))
        # At the end of input the SDK stops serving, answered or not: `echo request | offload mcp` got
        # nothing. The input ends once every request handed on has its answer (or after _LAST_ANSWERS).
        with anyio.move_on_after(_LAST_ANSWERS):
            while self.awaiting:
                await anyio.sleep(0.01)


_LAST_ANSWERS = 600.0  # seconds the requests still being handled at the end of input may take


def unreadable_line(raw: bytes, over: str = "stdio") -> tuple[str | None, Any]:
    """(the line, or HTTP body, as text, None) when the SDK reads it; else (None, the JSON-RPC error that
    answers it, or None for a notification or response, which get no answer)."""
    framing = "one message per line" if over == "stdio" else "one message per request"
    from mcp import types
    from pydantic import ValidationError

    def error(request_id: Any, code: int, message: str) -> Any:
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            request_id = None
        return None, types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                        error=types.ErrorData(code=code, message="offload mcp: " + message))

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error(None, types.PARSE_ERROR, f"the message is not UTF-8 (byte {exc.start:,}); JSON-RPC over "
                                              f"{over} is UTF-8 JSON, {framing}")
    bad_id = ("not a valid JSON-RPC request: its id must be a string or an integer (a notification has no "
              "id at all)")
    try:
        read = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        pass
    else:
        # a notification type takes extra fields, so a request whose id is null, 1.5 or an object
        # reads as a notification, which nothing answers
        if isinstance(read, types.JSONRPCNotification) and "id" in (message := json.loads(text)):
            return error(None, types.INVALID_REQUEST, bad_id)
        return text, None
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return error(None, types.PARSE_ERROR, f"the message is not JSON; JSON-RPC over {over} is UTF-8 JSON, "
                                              f"{framing}")
    if not isinstance(message, dict):
        return error(None, types.INVALID_REQUEST, "a JSON-RPC message must be an object (batches are not "
                                                  "supported since MCP 2025-06-18)")
    if "method" not in message and "result" not in message and "error" not in message:
        return error(message.get("id"), types.INVALID_REQUEST, "not a JSON-RPC message: a request needs a "
                                                              "method, a response a result or an error")
    if "method" not in message or "id" not in message:
        return None, None  # a notification or a response the SDK cannot read: nothing may answer it
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return error(message["id"], types.INVALID_PARAMS,
                     "the request holds a lone surrogate escape (such as \\ud800 with no pair), which the MCP "
                     "SDK cannot read. Send the text without it; to match such text, use a regular expression "
                     "or JMESPath that does not spell it out.")
    return error(message["id"], types.INVALID_REQUEST, "not a valid JSON-RPC request (it needs \"jsonrpc\": "
                                                       "\"2.0\", a string or integer id and a string method)")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # any other name may resolve anywhere


def check_http_options(host: str, token: str | None) -> None:
    """Refuse what would expose the store: no token off loopback, or a token too short to be one."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidArgument(f"the MCP token must be at least {MIN_TOKEN_CHARS} characters; make one with "
                              "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if token is None and not is_loopback(host):
        raise InvalidArgument(
            f"refusing to serve MCP over HTTP on {host} without a token: anyone who can reach that address "
            "could read every stored artifact. Pass --token (or set OFFLOAD_MCP_TOKEN), or bind to 127.0.0.1.")


class HttpGuard:
    """ASGI middleware in front of the MCP app: Host and Origin checks, then the bearer token.

    On loopback the Host header must name a loopback address at this port (a DNS-rebinding page sends its
    own host name), and a browser's Origin must be a loopback one or one allowed explicitly. Off loopback
    the token is what guards the store; an Origin header must still be allowed.
    """

    def __init__(self, app: Any, *, host: str, port: int, token: str | None,
                 allowed_origins: Iterable[str] = ()):
        self.app = app
        self.token = token.encode() if token is not None else None
        self.loopback = is_loopback(host)
        bound = f"[{host.strip('[]')}]" if ":" in host else host
        names = {*_LOOPBACK_NAMES, bound.lower()} if self.loopback else set()
        self.hosts = {f"{name}:{port}" for name in names} | (set(names) if port == 80 else set())
        self.origins = ({f"{scheme}://{name}:{port}" for name in names for scheme in ("http", "https")}
                        | {origin.rstrip("/").lower() for origin in allowed_origins})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
            refusal = self.check(headers)
            if refusal is not None:
                await _refuse(send, *refusal)
                return
            if scope["method"] == "POST":
                receive = await self._answered(receive, send)
                if receive is None:
                    return
        await self.app(scope, receive, send)

    @staticmethod
    async def _answered(receive: Any, send: Any) -> Any:
        """The request's body read whole: None when it was answered here (a message the SDK would
        misread: a request with an id of null, 1.5 or an object reads as a notification and gets a 202
        and no answer), else a `receive` that hands the body on."""
        body, first = b"", None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # the client went away: the app sees it
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if first is None and body.strip():
            _, answer = unreadable_line(body, over="HTTP")
            if answer is not None:
                payload = answer.model_dump_json(by_alias=True, exclude_unset=True).encode()
                await send({"type": "http.response.start", "status": 400, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
                await send({"type": "http.response.body", "body": payload})
                return None
        handed = False

        async def replay() -> dict:
            nonlocal handed
            if handed:
                return await receive()
            handed = True
            return first if first is not None else {"type": "http.request", "body": body, "more_body": False}

        return replay

    def check(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """(status, error code, message) when the request must be refused, else None."""
        if self.loopback and headers.get("host", "").lower() not in self.hosts:
            return 421, "invalid_host", (f"Host {headers.get('host', '')!r} is not this loopback server "
                                         f"({', '.join(sorted(self.hosts))})")
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self.origins:
            return 403, "invalid_origin", f"Origin {origin!r} is not allowed (offload mcp --allow-origin adds one)"
        if self.token is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                return 401, "unauthorized", "send the token as 'Authorization: Bearer <token>'"
        return None


async def _refuse(send: Any, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": code, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="offload"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
