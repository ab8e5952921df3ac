"""A scripted MCP server (mcp 2.x MCPServer) for the proxy tests: the cases a real server shows rarely.

Run as `python tests/proxy_upstream.py` (stdio) or `python tests/proxy_upstream.py --http PORT`. Its tools
return big structured output (with an outputSchema), big embedded resources, several parts, progress,
log messages and a list-changed notification; one crashes the server, one hangs until cancelled.
`python tests/proxy_upstream.py --raw-lines` is a server that frames its lines itself (see raw_lines);
`python tests/proxy_upstream.py --no-tools` one without tools (see no_tools),
`python tests/proxy_upstream.py --deaf FILE` one that never reads and exits when FILE appears (see deaf).
"""

from __future__ import annotations

import json
import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import EmbeddedResource, TextContent, TextResourceContents
from pydantic import BaseModel

server = MCPServer("scripted-upstream", instructions="A scripted server for offload's proxy tests.")


class Record(BaseModel):
    id: int
    status: str
    message: str


class Records(BaseModel):
    total: int
    items: list[Record]


def record(i: int) -> Record:
    return Record(id=i, status="error" if i % 1000 == 7 else "ok", message=f"event {i} " + "m" * (i % 40))


def line(i: int) -> str:
    return f"{i:07d} " + "abcdefghij" * (1 + i % 7)


@server.tool(description="Return n records as structured output.")
def records(n: int) -> Records:
    return Records(total=n, items=[record(i) for i in range(n)])


class Point(BaseModel):
    x: int
    y: int


class Segment(BaseModel):
    start: Point
    end: Point


@server.tool(description="Return a segment from the origin to (n, n) as structured output.")
def segment(n: int) -> Segment:
    return Segment(start=Point(x=0, y=0), end=Point(x=n, y=n))


# zod-to-json-schema (behind the TypeScript SDK) points a reused sub-schema at its first use, which pydantic
# cannot write: the published schema is set by hand (the SDK advertises it as it is).
server._tool_manager.get_tool("segment").fn_metadata.output_schema = {
    "type": "object", "required": ["start", "end"],
    "properties": {"start": {"type": "object", "required": ["x", "y"],
                             "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}},
                   "end": {"$ref": "#/properties/start"}}}


@server.tool(description="Return n numbered lines of text.", structured_output=False)
def lines(n: int) -> str:
    return "\n".join(line(i) for i in range(n))


@server.tool(description="Return an embedded text resource of n lines.", structured_output=False)
def embedded(n: int) -> list[EmbeddedResource]:
    text = "\n".join(line(i) for i in range(n))
    return [EmbeddedResource(type="resource", resource=TextResourceContents(
        uri="file:///data/big.txt", mime_type="text/plain", text=text))]


@server.tool(description="Return `count` text parts of n lines each.", structured_output=False)
def parts(count: int, n: int) -> list[TextContent]:
    return [TextContent(type="text", text="\n".join(f"part {p} " + line(i) for i in range(n))) for p in range(count)]


@server.tool(description="Report progress `steps` times, pausing `pause` seconds between.", structured_output=False)
async def slow(steps: int, pause: float, ctx: Context) -> str:
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await anyio.sleep(pause)
    return f"done after {steps} steps"


@server.tool(description="Send a log message, then answer.", structured_output=False)
async def chatty(ctx: Context) -> str:
    await ctx.info("hello from upstream")
    return "said hello"


@server.tool(description="Add a tool and tell the client the list changed.", structured_output=False)
async def grow(ctx: Context) -> str:
    server.add_tool(lambda: "new", name="new_tool", description="Added at run time.", structured_output=False)
    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@server.tool(description="Ask the client for its roots (a server-to-client request).", structured_output=False)
async def roots(ctx: Context) -> str:
    listed = await ctx.request_context.session.list_roots()
    return " ".join(str(root.uri) for root in listed.roots)


@server.tool(description="Fail with an error result.", structured_output=False)
def fail() -> str:
    raise ToolError("this tool always fails")


@server.tool(description="Crash the whole server.", structured_output=False)
def crash() -> str:
    print("fatal: simulated crash", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool(description="Never answer (until cancelled).", structured_output=False)
async def hang() -> str:
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        if os.environ.get("PROXY_UPSTREAM_EVENTS"):  # where the test looks for it
            with open(os.environ["PROXY_UPSTREAM_EVENTS"], "a") as events:
                events.write("hang was cancelled\n")
        raise
    return "unreachable"


def tricky_line(i: int) -> str:
    return f'{i:06d} "quoted" back\\slash path/to/file\ttab caf\u00e9 \U0001F600 sep\u2028 nul\x00 end'


@server.tool(description="Return n lines that JSON must escape: quotes, backslashes, emoji, controls.",
             structured_output=False)
def tricky(n: int) -> str:
    return "\n".join(tricky_line(i) for i in range(n))


@server.resource("data://big", mime_type="text/plain")
def big_resource() -> str:
    return "\n".join(line(i) for i in range(50_000))


@server.prompt(description="Greet someone.")
def greet(name: str) -> str:
    return f"Hello, {name}!"


def raw_lines() -> None:
    """Write JSON-RPC lines the way some servers do: ending in CRLF, a log message before each answer, and
    the answer to the first tools/call without its newline, just before exiting."""
    def send(message: dict, end: bytes = b"\r\n") -> None:
        sys.stdout.buffer.write(json.dumps(message).encode() + end)
        sys.stdout.buffer.flush()

    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" not in request:
            continue
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": f"answering {request['method']}"}})
        if request["method"] == "tools/call":
            send({"jsonrpc": "2.0", "id": request["id"],
                  "result": {"content": [{"type": "text", "text": "last words " * 25}]}}, end=b"")
            return
        result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw-lines", "version": "1"}} if request["method"] == "initialize" else {}
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def no_tools() -> None:
    """A server with prompts only: its handshake names no tools capability, and tools/list is a method
    it does not have (-32601), as a prompts-only server answers."""
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "id" not in request:
            continue
        if request["method"] == "initialize":
            answer = {"result": {"protocolVersion": request["params"]["protocolVersion"],
                                 "capabilities": {"prompts": {}}, "serverInfo": {"name": "no-tools", "version": "1"}}}
        elif request["method"] == "tools/list":
            answer = {"error": {"code": -32601, "message": "Method not found: tools/list"}}
        else:
            answer = {"result": {}}
        sys.stdout.buffer.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], **answer}).encode() + b"\n")
        sys.stdout.buffer.flush()


def deaf(trigger: str) -> None:
    """Never read stdin; once the file `trigger` exists, say why on stderr and exit with code 3. The test
    creates it while the proxy is stuck writing a request the full pipe has no room for."""
    while not os.path.exists(trigger):
        time.sleep(0.01)
    print("fatal: deaf server leaving", file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--raw-lines":
        raw_lines()
    elif len(sys.argv) > 1 and sys.argv[1] == "--no-tools":
        no_tools()
    elif len(sys.argv) > 2 and sys.argv[1] == "--deaf":
        deaf(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--http":
        anyio.run(lambda: server.run_streamable_http_async(port=int(sys.argv[2])))
    else:
        anyio.run(server.run_stdio_async)
