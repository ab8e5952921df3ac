"""`offload mcp` through the official MCP SDK's client: in process, over stdio with the server in its own
process (`python -m offload mcp`), and over streamable HTTP with its Host / Origin / token guards."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time

import anyio
import httpx2
import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from offload import InvalidArgument, Offloader
from offload.adapters.mcp_server import HttpGuard, build_server, check_http_options
from offload.tools.schemas import OUTPUT_SCHEMAS, TOOLS

TOKEN = "t0ken-for-tests-0123456789"
LOG = "".join(f"2026-12-01T10:{i // 60 % 60:02d}:{i % 60:02d} worker-{i % 7} handled request {i} in {i % 97} ms\n"
              for i in range(4000))


def offload_cli(*args: str, url: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offload", "--url", url, *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


def assert_listed_as_declared(tools) -> None:
    by_name = {tool.name: tool for tool in tools}
    assert sorted(by_name) == ["fetch_slice", "query_artifact"]
    for name, tool in by_name.items():
        assert tool.input_schema == TOOLS[name]["input_schema"]
        assert tool.output_schema == OUTPUT_SCHEMAS[name]
        assert tool.description == TOOLS[name]["description"]


# -- in process -------------------------------------------------------------------------------------


def test_results_carry_text_and_structured_content_matching_the_output_schema(sqlite_url):
    with Offloader(sqlite_url) as off:
        doc = {"items": [{"id": i, "status": "error" if i % 40 == 0 else "ok", "note": "x" * 40} for i in range(3000)]}
        aid = off.put(doc, tool="api").artifact_id

        async def session():
            async with Client(build_server(off)) as client:
                assert_listed_as_declared((await client.list_tools()).tools)
                calls = {
                    "page": ("fetch_slice", {"artifact_id": aid, "unit": "items", "path": "items", "limit": 2}),
                    "inline": ("query_artifact", {"artifact_id": aid, "jmespath": "items[?status=='error'].id"}),
                    "derived": ("query_artifact", {"artifact_id": aid, "jmespath": "items"}),
                    "error": ("fetch_slice", {"artifact_id": aid, "unit": "pages"}),
                }
                return {key: await client.call_tool(name, args) for key, (name, args) in calls.items()}

        results = anyio.run(session)
    for key in ("page", "inline", "derived"):
        result = results[key]
        name = "fetch_slice" if key == "page" else "query_artifact"
        assert not result.is_error
        jsonschema.validate(result.structured_content, OUTPUT_SCHEMAS[name])  # the client checked it too
        assert result.content[0].type == "text" and result.content[0].text
    assert json.loads(results["page"].structured_content["content"])[1]["id"] == 1
    assert results["page"].structured_content["next"] == {"artifact_id": aid, "unit": "items", "offset": 2,
                                                          "limit": 2, "path": "items"}
    assert results["inline"].structured_content["result"] == list(range(0, 3000, 40))
    derived = results["derived"].structured_content
    assert derived["derived_from"] == aid and derived["artifact_id"] != aid
    assert results["derived"].content[0].text.startswith("[offload] The result of `query_artifact`")
    # an error carries no structuredContent: clients check it against the outputSchema, which is a page's
    assert results["error"].is_error and results["error"].structured_content is None
    assert results["error"].content[0].text.startswith("Error: ")


# -- over stdio, the server in its own process ------------------------------------------------------


def test_results_nested_hundreds_of_levels_deep_are_answered(sqlite_url):
    """Documents are queried up to 1,024 levels deep. A result 500 deep ran out of stack copying it out of
    the cache (an internal error to the model); over MCP one 300 deep failed the call ("Internal server
    error": the SDK writes no JSON deeper than ~250 levels), so its structured result is its JSON text."""
    with Offloader(sqlite_url) as off:
        ids = {depth: off.put("[" * depth + "1" + "]" * depth, tool="api").artifact_id for depth in (300, 600, 1024)}

        async def session():
            async with Client(build_server(off)) as client:
                for depth, aid in ids.items():
                    got = await client.call_tool("query_artifact", {"artifact_id": aid, "jmespath": "[0]"})
                    assert not got.is_error, (depth, got.content[0].text)
                    structured = got.structured_content
                    assert structured["result"] == "[" * (depth - 1) + "1" + "]" * (depth - 1)
                    assert "given as its JSON text" in structured["note"]
                    assert got.content[0].text.count("[") >= depth
                shallow = off.put([[[i]] for i in range(3000)], tool="api").artifact_id
                got = await client.call_tool("query_artifact", {"artifact_id": shallow, "jmespath": "[0]"})
                assert got.structured_content["result"] == [[0]] and "note" not in got.structured_content

        anyio.run(session)


def test_a_client_lists_the_tools_and_pages_through_an_artifact_the_cli_stored(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    log = tmp_path / "service.log"
    log.write_text(LOG)
    put = offload_cli("put", str(log), "--tool", "grep", "--json", url=url, check=True)
    aid = json.loads(put.stdout)["artifact_id"]
    server = StdioServerParameters(command=sys.executable, args=["-m", "offload", "mcp"], cwd=str(tmp_path),
                                   env={**os.environ, "OFFLOAD_URL": url})

    async def session():
        async with Client(stdio_client(server, errlog=sys.stderr), read_timeout_seconds=60) as client:
            assert_listed_as_declared((await client.list_tools()).tools)
            pages, args = [], {"artifact_id": aid}
            while args is not None:
                result = await client.call_tool("fetch_slice", args)
                assert not result.is_error, result.content[0].text
                pages.append(result.structured_content)
                args = result.structured_content["next"]
            hits = await client.call_tool("query_artifact", {"artifact_id": aid, "grep": "request 3999 "})
            return pages, hits

    pages, hits = anyio.run(session)
    assert len(pages) > 3  # the budget cut it into pages, each saying where the next starts
    assert [p["offset"] for p in pages[1:]] == [p["offset"] + p["returned"] for p in pages[:-1]]
    assert "\n".join(p["content"] for p in pages) + "\n" == LOG
    assert pages[-1]["next_offset"] is None and pages[-1]["total"] == 4000
    assert hits.structured_content["result"] == [f"3999: {LOG.splitlines()[-1]}"]


def test_over_stdio_every_line_the_sdk_cannot_read_is_answered(sqlite_url):
    """The SDK's stdio transport drops such a line without an answer: a client waiting on its id hangs."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    lines = [json.dumps(init).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "query_artifact", '
             b'"arguments": {"artifact_id": "art_x", "grep": "\\ud800"}}}',
             b"not json", b"\xff\xfe{}", b"[1, 2]", b'{"jsonrpc": "2.0", "id": "seven", "method": 5}',
             b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\udc00"}}',  # no answer
             # ids the SDK reads as a notification's extra field (and answers nothing)
             b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', b'{"jsonrpc": "2.0", "id": null, "method": "ping"}',
             b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', b'{"jsonrpc": "2.0", "id": 5}',
             b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}']
    # stdin stays open until the last answer is in, as a client keeps it (at end of input the SDK may
    # stop before it answers a request still being handled)
    server = subprocess.Popen([sys.executable, "-m", "offload", "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OFFLOAD_URL": sqlite_url})
    answers = []
    try:
        server.stdin.write(b"\n".join(lines) + b"\n")
        server.stdin.flush()
        deadline, pending = time.monotonic() + 120, b""
        while not answers or answers[-1].get("id") != 2:
            ready, _, _ = select.select([server.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no answer to tools/list within 120 s; got {answers}"
            data = os.read(server.stdout.fileno(), 1 << 16)  # the pipe itself: no buffer select cannot see
            assert data, f"the server ended before answering tools/list; got {answers}"
            *complete, pending = (pending + data).split(b"\n")
            answers += [json.loads(line) for line in complete if line.strip()]
    finally:
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (0, None), (1, -32602), (None, -32700), (None, -32700), (None, -32600), ("seven", -32600),
        (None, -32600), (None, -32600), (None, -32600), (5, -32600), (2, None)]
    assert "lone surrogate" in answers[1]["error"]["message"]
    assert "not UTF-8" in answers[3]["error"]["message"]
    assert sorted(tool["name"] for tool in answers[-1]["result"]["tools"]) == ["fetch_slice", "query_artifact"]


def test_over_stdio_requests_sent_just_before_the_end_of_input_are_answered(sqlite_url):
    """The SDK stops serving at the end of input, answered or not: `printf REQUESTS | offload mcp` lost
    the answers still being worked on (every run, with three tools/list requests)."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    lines = [json.dumps(init).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    lines += [b'{"jsonrpc": "2.0", "id": %d, "method": "tools/list"}' % i for i in range(1, 6)]
    lines += [b'{"jsonrpc": "2.0", "id": "q", "method": "tools/call", "params": {"name": "fetch_slice", '
              b'"arguments": {"artifact_id": "art_nope"}}}']
    for _ in range(3):
        done = subprocess.run([sys.executable, "-m", "offload", "mcp"], input=b"\n".join(lines) + b"\n",
                              capture_output=True, timeout=120, env={**os.environ, "OFFLOAD_URL": sqlite_url})
        assert sorted(str(json.loads(line)["id"]) for line in done.stdout.splitlines()) == [
            "0", "1", "2", "3", "4", "5", "q"], done.stdout


# -- over streamable HTTP ---------------------------------------------------------------------------


def test_off_loopback_it_refuses_to_start_without_a_token(sqlite_url):
    with pytest.raises(InvalidArgument, match="without a token"):
        check_http_options("0.0.0.0", None)
    with pytest.raises(InvalidArgument, match="without a token"):
        check_http_options("mcp.example.internal", None)
    with pytest.raises(InvalidArgument, match="at least 16 characters"):
        check_http_options("127.0.0.1", "short")
    check_http_options("::1", None)
    check_http_options("0.0.0.0", TOKEN)
    from typer.testing import CliRunner

    from offload.cli import app

    out = CliRunner().invoke(app, ["--url", sqlite_url, "mcp", "--http", "--host", "0.0.0.0"])  # nothing bound
    assert out.exit_code == 2 and "refusing to serve MCP over HTTP on 0.0.0.0 without a token" in out.output


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"reached the MCP app"})


def _guarded(method: str, guard: HttpGuard, base: str, **kwargs) -> httpx2.Response:
    async def go():
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=guard), base_url=base) as client:
            return await client.request(method, "/mcp", **kwargs)

    return anyio.run(go)


def test_on_loopback_host_and_origin_are_checked_against_dns_rebinding():
    guard = HttpGuard(_ok, host="127.0.0.1", port=8765, token=None, allowed_origins=["https://app.example"])
    base = "http://127.0.0.1:8765"
    assert _guarded("POST", guard, base).status_code == 200
    assert _guarded("POST", guard, "http://localhost:8765").status_code == 200
    assert _guarded("POST", guard, base, headers={"Origin": "http://localhost:8765"}).status_code == 200
    assert _guarded("POST", guard, base, headers={"Origin": "https://app.example"}).status_code == 200
    rebound = _guarded("POST", guard, base, headers={"Host": "attacker.example:8765"})
    assert rebound.status_code == 421 and rebound.json()["error"] == "invalid_host"
    assert _guarded("GET", guard, base, headers={"Host": "127.0.0.1:9999"}).status_code == 421
    page = _guarded("POST", guard, base, headers={"Origin": "http://attacker.example"})
    assert page.status_code == 403 and page.json()["error"] == "invalid_origin"


def test_the_token_is_required_when_set():
    guard = HttpGuard(_ok, host="0.0.0.0", port=8765, token=TOKEN)
    base = "http://mcp.example.internal:8765"  # off loopback any host name may reach it: the token guards it
    missing = _guarded("POST", guard, base)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert _guarded("POST", guard, base, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    assert _guarded("POST", guard, base, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert _guarded("POST", guard, base, headers={"Authorization": f"Bearer {TOKEN}",
                                                  "Origin": "http://attacker.example"}).status_code == 403


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server(tmp_path):
    """`offload mcp --http` in its own process on a loopback port, with a token; stopped afterwards."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Offloader(url) as off:
        aid = off.put(LOG, tool="grep").artifact_id
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "offload", "--url", url, "mcp", "--http", "--port", str(port)],
                            env={**os.environ, "OFFLOAD_MCP_TOKEN": TOKEN}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until it listens (or has died)
            assert proc.poll() is None, proc.stderr.read()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP HTTP server did not start listening within 60 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", aid
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()


def test_a_client_over_http_with_the_token_reads_an_artifact(http_server):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    endpoint, aid = http_server

    async def session():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(endpoint, http_client=http)) as client:
            assert_listed_as_declared((await client.list_tools()).tools)
            return await client.call_tool("fetch_slice", {"artifact_id": aid, "offset": -1})

    last = anyio.run(session)
    assert last.structured_content["content"] == LOG.splitlines()[-1]

    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx2.post(endpoint, json=request, headers=headers).status_code == 401
    rebound = httpx2.post(endpoint, json=request, headers={**headers, "Authorization": f"Bearer {TOKEN}",
                                                            "Host": "attacker.example"})
    assert rebound.status_code == 421


def test_over_http_a_request_the_sdk_would_misread_is_answered(http_server):
    """An id of null, 1.5 or an object makes the SDK read a request as a notification: 202 and no answer."""
    endpoint, _ = http_server
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}",
               "Content-Type": "application/json"}
    for body in (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', b'{"jsonrpc": "2.0", "id": 1.5, '
                 b'"method": "ping"}', b'{"jsonrpc": "2.0", "id": 5}', b"not json", b'{"a": "\\ud800"'):
        answer = httpx2.post(endpoint, content=body, headers=headers)
        assert answer.status_code == 400, (body, answer.status_code, answer.text)
        error = answer.json()["error"]
        assert error["code"] in (-32600, -32700) and error["message"].startswith("offload mcp: "), body
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    ok = httpx2.post(endpoint, json=init, headers=headers)  # a readable body still reaches the SDK whole
    assert ok.status_code == 200 and "offload" in ok.text, ok.text
