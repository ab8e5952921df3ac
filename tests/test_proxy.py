"""`offload proxy` end to end: the `mcp` SDK's client over stdio, the proxy in its own process, real upstreams.

The third-party upstreams are `mcp-server-git` from PyPI and, when OFFLOAD_TEST_FS_SERVER names it (.ci/run
installs it), the npm reference filesystem server, both unmodified, over a temporary repository holding a
~6 MB file; `tests/proxy_upstream.py` scripts the cases a real server shows rarely (structured output,
crash, hang, progress, logging, list changes, server-to-client requests). Each test opens as few sessions
as it can: a session costs two processes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import jsonschema
import orjson
import pytest

mcp = pytest.importorskip("mcp")
from mcp.client.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import ListRootsResult, Root  # noqa: E402

from offload import Offloader  # noqa: E402
from offload.adapters.mcp_proxy import budget_settings  # noqa: E402
from offload.adapters.proxy import REFERENCE_OUTPUT_SCHEMA, Relay, widen_output_schema  # noqa: E402
from offload.adapters.proxy import relay as relay_module  # noqa: E402
from offload.settings import Settings  # noqa: E402

SCRIPTED = [sys.executable, str(Path(__file__).with_name("proxy_upstream.py"))]
GIT_SERVER = shutil.which("mcp-server-git") or str(Path(sys.executable).with_name("mcp-server-git"))
needs_git_server = pytest.mark.skipif(not Path(GIT_SERVER).exists(), reason="mcp-server-git is not installed "
                                                                            "(pip install -e '.[test]')")


def big_line(i: int) -> str:
    return f"row {i:06d} status={'ERROR' if i % 5000 == 4321 else 'ok'} payload=" + "q" * (20 + i % 50)


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> Path:
    """A repository whose one commit adds a ~6 MB file of 100,000 distinct lines."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "big.txt").write_text("".join(big_line(i) + "\n" for i in range(100_000)))
    (repo / "small.txt").write_text("hello\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "add files"], check=True)
    return repo


def proxy_command(store: str, upstream: list[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "offload", "--url", store, "proxy", *options, "--", *upstream]


@contextlib.asynccontextmanager
async def session(command: list[str], *, mode: str = "auto", env: dict[str, str] | None = None, **callbacks):
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with Client(params, mode=mode, **callbacks) as client:
        yield client


def run(fn, *args):
    return anyio.run(fn, *args)


def artifact_id(text: str) -> str:
    return text.split("stored whole as ", 1)[1].split(" ", 1)[0]


# -- the third-party server --------------------------------------------------------------------------


@needs_git_server
def test_git_server_result_becomes_a_reference_and_comes_back_exactly(git_repo, sqlite_url, real_count):
    original = (git_repo / "big.txt").read_text().splitlines()

    async def scenario():
        async with session([GIT_SERVER]) as direct:
            upstream_tools = (await direct.list_tools()).tools
            direct_log = await direct.call_tool("git_log", {"repo_path": str(git_repo)})
            with pytest.raises(MCPError) as direct_error:
                await direct.call_tool("no_such_tool", {})
        async with session(proxy_command(sqlite_url, [GIT_SERVER])) as client:
            proxied_tools = (await client.list_tools()).tools
            started = time.perf_counter()
            shown = await client.call_tool("git_show", {"repo_path": str(git_repo), "revision": "HEAD:big.txt"})
            elapsed = time.perf_counter() - started
            aid = artifact_id(shown.content[0].text)
            middle = await client.call_tool("fetch_slice", {"artifact_id": aid, "offset": 54_321, "limit": 5})
            tail = await client.call_tool("fetch_slice", {"artifact_id": aid, "offset": -3})
            found = await client.call_tool("query_artifact", {"artifact_id": aid, "grep": "status=ERROR"})
            small = await client.call_tool("git_log", {"repo_path": str(git_repo)})
            with pytest.raises(MCPError) as proxied_error:
                await client.call_tool("no_such_tool", {})
        return (upstream_tools, direct_log, direct_error.value, proxied_tools, shown, elapsed, middle, tail, found,
                small, proxied_error.value)

    (upstream_tools, direct_log, direct_error, proxied_tools, shown, elapsed, middle, tail, found, small,
     proxied_error) = run(scenario)

    # the listing is the upstream's, plus the two tools (mcp-server-git declares no output schemas)
    assert [t.model_dump() for t in proxied_tools[:-2]] == [t.model_dump() for t in upstream_tools]
    assert [t.name for t in proxied_tools[-2:]] == ["fetch_slice", "query_artifact"]

    # ~6 MB reached the client as one reference well under 1,000 tokens
    assert len(shown.content) == 1 and not shown.is_error
    assert real_count(shown.content[0].text) < 1000
    assert "100,000 lines" in shown.content[0].text
    assert elapsed < 30

    # the exact original lines, through the same connection
    assert middle.structured_content["content"].splitlines() == original[54_321:54_326]
    assert tail.structured_content["content"].splitlines() == original[-3:]
    assert tail.structured_content["next"] is None
    expected = [f"{i}: {original[i]}" for i in range(len(original)) if "status=ERROR" in original[i]]
    assert found.structured_content["result"] == expected and found.structured_content["count"] == 20

    # small results and upstream errors pass through unchanged
    assert small.model_dump() == direct_log.model_dump()
    assert (proxied_error.code, proxied_error.message) == (direct_error.code, direct_error.message)


@needs_git_server
def test_budget_options_let_a_tool_through_whole(git_repo, sqlite_url):
    async def scenario():
        command = proxy_command(sqlite_url, [GIT_SERVER], "--limit", "git_s*=5000000", "--alias", "git_log=read")
        async with session(command, mode="legacy") as client:
            return await client.call_tool("git_show", {"repo_path": str(git_repo), "revision": "HEAD:big.txt"})

    whole = run(scenario)
    assert whole.content[0].text == (git_repo / "big.txt").read_text()


def test_budget_settings_merge_names_globs_and_aliases():
    merged = budget_settings(Settings(limits={"read": 9000}), ["git_show=1200", "git_*=300"], ["fetch=read"])
    settings = Settings(**merged)
    assert settings.limit_for("git_show") == 1200
    assert settings.limit_for("git_log") == 300  # the glob
    assert settings.limit_for("fetch") == 9000  # the alias, onto the configured read budget
    assert settings.limit_for("other") == settings.limit("default")


# -- the scripted server -----------------------------------------------------------------------------


def test_structured_output_is_widened_and_a_validating_client_accepts_the_reference(sqlite_url, real_count):
    async def scenario():
        async with session(SCRIPTED) as direct:
            upstream_tools = {t.name: t for t in (await direct.list_tools()).tools}
        async with session(proxy_command(sqlite_url, SCRIPTED)) as client:  # mcp 2.x validates structuredContent
            tools = {t.name: t for t in (await client.list_tools()).tools}
            small = await client.call_tool("records", {"n": 3})
            segment = await client.call_tool("segment", {"n": 2})  # its schema has a #/properties/… $ref
            big = await client.call_tool("records", {"n": 40_000})
            aid = big.structured_content["artifact_id"]
            errors = await client.call_tool("query_artifact",
                                            {"artifact_id": aid, "jmespath": "items[?status=='error'].id"})
            item = await client.call_tool("fetch_slice", {"artifact_id": aid, "unit": "items", "offset": 12345,
                                                          "limit": 1})
        return upstream_tools, tools, small, segment, big, errors, item

    upstream_tools, tools, small, segment, big, errors, item = run(scenario)
    original = upstream_tools["records"].output_schema
    widened = tools["records"].output_schema
    assert widened == widen_output_schema(original) and widened["anyOf"][1] == REFERENCE_OUTPUT_SCHEMA
    for name, tool in upstream_tools.items():  # everything else about every tool is unchanged
        assert tools[name].model_dump(exclude={"output_schema"}) == tool.model_dump(exclude={"output_schema"})
    assert small.structured_content == {"total": 3, "items": small.structured_content["items"]}
    assert segment.structured_content == {"start": {"x": 0, "y": 0}, "end": {"x": 2, "y": 2}}

    jsonschema.validate(big.structured_content, widened)
    assert real_count(big.content[0].text) < 1000
    assert big.structured_content["artifact_id"] == artifact_id(big.content[0].text)
    assert errors.structured_content["result"] == [i for i in range(40_000) if i % 1000 == 7]
    assert json.loads(item.structured_content["content"]) == [
        {"id": 12345, "status": "ok", "message": "event 12345 " + "m" * (12345 % 40)}]
    # the text and the structured copy of the same result were stored once, as one artifact
    with Offloader(sqlite_url) as off:
        assert [row["tool"] for row in off.list()[0]] == ["records"]


def test_everything_else_passes_through_both_ways(sqlite_url, tmp_path):
    """Resources, prompts, logging, progress, list-changed, server-to-client requests, error results,
    embedded resources, parts."""
    logs, messages, progress = [], [], []

    async def on_roots(context):
        return ListRootsResult(roots=[Root(uri="file:///work/a"), Root(uri="file:///work/b")])

    async def on_log(params):
        logs.append(params.data)

    async def on_message(message):
        messages.append(message)

    async def on_progress(done, total, text):
        progress.append((done, total, text))

    async def scenario():
        async with session(proxy_command(sqlite_url, SCRIPTED), mode="legacy", logging_callback=on_log,
                           message_handler=on_message, list_roots_callback=on_roots) as client:
            resource = await client.read_resource("data://big")
            prompt = await client.get_prompt("greet", {"name": "Ann"})
            chatty = await client.call_tool("chatty", {})
            slow = await client.call_tool("slow", {"steps": 3, "pause": 0.05}, progress_callback=on_progress)
            failed = await client.call_tool("fail", {})
            asked = await client.call_tool("roots", {})
            grown = await client.call_tool("grow", {})
            with anyio.fail_after(10):
                while not any(getattr(m, "method", "") == "notifications/tools/list_changed" for m in messages):
                    await anyio.sleep(0.05)
            new_tools = [t.name for t in (await client.list_tools()).tools]
            embedded = await client.call_tool("embedded", {"n": 40_000})
            parts = await client.call_tool("parts", {"count": 5, "n": 100})  # each fits; together they do not
            joined = await client.call_tool("fetch_slice", {"artifact_id": artifact_id(parts.content[0].text),
                                                            "offset": 99, "limit": 3})
        return resource, prompt, chatty, slow, failed, asked, grown, new_tools, embedded, parts, joined

    resource, prompt, chatty, slow, failed, asked, grown, new_tools, embedded, parts, joined = run(scenario)
    assert len(resource.contents[0].text) > 2_000_000  # resources are not tool results: unchanged
    assert prompt.messages[0].content.text == "Hello, Ann!"
    assert chatty.content[0].text == "said hello" and logs == ["hello from upstream"]
    assert slow.content[0].text == "done after 3 steps" and [p[0] for p in progress] == [1, 2, 3]
    assert failed.is_error and "always fails" in failed.content[0].text
    assert asked.content[0].text == "file:///work/a file:///work/b"
    assert grown.content[0].text == "grown" and "new_tool" in new_tools and new_tools[-2:] == ["fetch_slice",
                                                                                             "query_artifact"]
    assert embedded.content[0].text.startswith("Embedded resource file:///data/big.txt (text/plain):\n[offload]")
    assert len(parts.content) == 1 and "504 lines" in parts.content[0].text  # five parts, stored as one
    assert joined.structured_content["content"].splitlines() == [
        f"part 0 {'0000099 ' + 'abcdefghij' * (1 + 99 % 7)}", "", f"part 1 {'0000000 ' + 'abcdefghij'}"]


def test_upstream_crash_answers_at_once_and_stored_results_stay_readable(sqlite_url):
    async def scenario():
        async with session(proxy_command(sqlite_url, SCRIPTED)) as client:
            stored = await client.call_tool("lines", {"n": 20_000})
            started = time.perf_counter()
            with pytest.raises(MCPError) as crashed:
                await client.call_tool("crash", {})
            waited = time.perf_counter() - started
            with pytest.raises(MCPError) as after:
                await client.call_tool("lines", {"n": 1})
            page = await client.call_tool("fetch_slice", {"artifact_id": artifact_id(stored.content[0].text),
                                                          "offset": -1})
            listed = await client.list_tools()  # answered by the proxy (a 2026-07-28 listing lacked its fields)
        return crashed.value, waited, after.value, page, listed

    crashed, waited, after, page, listed = run(scenario)
    assert sorted(tool.name for tool in listed.tools) == ["fetch_slice", "query_artifact"]
    assert crashed.code == -32000 and waited < 5
    assert "exited with code 3" in crashed.message and "fatal: simulated crash" in crashed.message
    assert "tools/call crash" in crashed.message
    assert after.code == -32000 and "tools/call lines" in after.message
    assert page.structured_content["content"] == "0019999 " + "abcdefghij" * (1 + 19999 % 7)


def test_an_upstream_without_tools_gets_the_proxys_own_listed(sqlite_url):
    # the proxy says the server has tools (its own two), yet forwarded tools/list: "Method not found"
    async def scenario():
        async with session(proxy_command(sqlite_url, [*SCRIPTED, "--no-tools"])) as client:
            return await client.list_tools()

    assert sorted(tool.name for tool in run(scenario).tools) == ["fetch_slice", "query_artifact"]


@pytest.mark.parametrize("options", [[], ["--limit", "t=200"]], ids=["within-budget", "checked-against-budget"])
def test_each_message_reaches_the_client_on_its_own_line_whatever_the_upstream_ends_lines_with(sqlite_url, options):
    """An upstream that ends its lines in CRLF and exits after an answer without a newline: that answer must
    not be glued to the next message (the client would drop both), nor any line get a second newline (the
    Python SDK reports a blank line as a parse error). Through both paths that write the upstream's line as
    it is: a result whose size shows it fits, and one checked against the budget first (--limit)."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    requests = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t", "arguments": {}}},
                {"jsonrpc": "2.0", "id": 3, "method": "ping"}]  # answered after the upstream has gone

    def parsed(line: bytes) -> dict | None:
        try:
            return json.loads(line)
        except ValueError:
            return None  # two messages in one line, or a blank line

    proxy = subprocess.Popen(proxy_command(sqlite_url, [*SCRIPTED, "--raw-lines"], *options),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stuck = threading.Timer(60, proxy.kill)  # a lost answer would leave the read below waiting
    stuck.start()
    try:
        proxy.stdin.write(b"".join(orjson.dumps(request) + b"\n" for request in requests))
        proxy.stdin.flush()
        lines = []
        while line := proxy.stdout.readline():
            lines.append(line)
            message = parsed(line)
            if message is None or message.get("id") == 3:
                break
        proxy.stdin.close()  # the client leaves: whatever the proxy writes after is read too
        lines += proxy.stdout.read().splitlines(keepends=True)
        proxy.wait(30)
    finally:
        stuck.cancel()
        proxy.kill()

    messages = [parsed(line) for line in lines]
    assert None not in messages and all(line.endswith(b"\n") for line in lines), lines
    assert sorted(message["id"] for message in messages if "id" in message) == [0, 1, 2, 3]
    answer = next(message for message in messages if message.get("id") == 2)
    assert answer["result"]["content"] == [{"type": "text", "text": "last words " * 25}]  # 275 bytes, ~60 tokens
    logged = [line for line in lines if b"notifications/message" in line]
    assert len(logged) == 3 and all(line.endswith(b"}\r\n") for line in logged)  # passed on byte for byte


def test_upstream_hang_times_out_and_the_call_is_cancelled(sqlite_url, tmp_path):
    events = tmp_path / "events.txt"
    events.touch()

    async def scenario():
        async with session(proxy_command(sqlite_url, SCRIPTED, "--timeout", "1.5"),
                           env={"PROXY_UPSTREAM_EVENTS": str(events)}) as client:
            started = time.perf_counter()
            with pytest.raises(MCPError) as hung:
                await client.call_tool("hang", {})
            waited = time.perf_counter() - started
            alive = await client.call_tool("lines", {"n": 2})  # the upstream itself still answers
            with anyio.move_on_after(0.5):  # the client gives up on its own: its cancellation passes through
                await client.call_tool("hang", {})
            with anyio.fail_after(10):
                while events.read_text().count("hang was cancelled") < 2:
                    await anyio.sleep(0.05)
            still = await client.call_tool("lines", {"n": 1})
        return hung.value, waited, alive, still

    hung, waited, alive, still = run(scenario)
    assert hung.code == -32001 and "--timeout" in hung.message and "tools/call hang" in hung.message
    assert 1.4 < waited < 5
    assert alive.content[0].text.startswith("0000000 ") and still.content[0].text == "0000000 abcdefghij"


def test_a_big_text_that_json_escapes_is_stored_byte_for_byte(sqlite_url):
    """A multi-MB line goes through the lean parse (its text never becomes a str in the proxy): quotes,
    backslashes, a tab, NUL, emoji and U+2028 must come out of the store exactly as the upstream sent them."""
    sys.path.insert(0, str(Path(__file__).parent))
    from proxy_upstream import tricky_line

    async def scenario():
        async with session(proxy_command(sqlite_url, SCRIPTED)) as client:
            return await client.call_tool("tricky", {"n": 40_000})

    result = run(scenario)
    expected = "\n".join(tricky_line(i) for i in range(40_000)).encode()
    assert len(expected) > 2 * (1 << 20)  # over LEND_AT: the lean path
    with Offloader(sqlite_url) as off:
        stored = b"".join(off.iter_raw(artifact_id(result.content[0].text)))
    assert stored == expected


def test_lean_parse_equals_json_and_lends_utf8(monkeypatch):
    from offload.adapters.proxy import lean

    monkeypatch.setattr(lean, "LEND_AT", 8)
    texts = ["short", "a long plain text", 'quote " and \\ backslash \\\\" done', "emoji \U0001F600 é \u2028",
             "slash / \b\f\n\r\t \x01 controls", "ends with a backslash \\", '\\"\\\\"' * 5, "lone \ud83d surrogate"]
    dumpers = [lambda v: json.dumps(v).encode(), lambda v: json.dumps(v).replace("/", "\\/").encode(),
               lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")]
    for text in texts:
        for dump in dumpers:
            raw = dump({"id": 1, "result": {"content": [{"type": "text", "text": text}],
                                            "structuredContent": {"k": text, "n": [1, 2.5, None, True, 10**21 + 1]}}})
            parsed = lean.parse_lean(raw)
            assert lean.restore(parsed) == json.loads(raw)
            value = parsed["result"]["content"][0]["text"]
            assert isinstance(value, lean.LentText) == (len(text.encode("utf-8", "surrogatepass")) >= 8 or
                                                        len(json.dumps(text)) - 2 >= 8)
            if isinstance(value, lean.LentText):
                assert value.data == text.encode("utf-8", "surrogatepass")
    with pytest.raises(ValueError):
        lean.parse_lean(b'{"id": 1, "text": "' + b"x" * 20 + b'"')


def test_a_lone_surrogate_escape_in_a_big_upstream_text_is_stored_as_the_escape(sqlite_url):
    # a line parsed lean lent the text's 3-byte surrogate form: stored as no UTF-8, previewed as ���
    from offload.adapters.proxy import lean
    from offload.adapters.proxy.results import offload_call_result

    text = "\ud83d" + "abc\n" * 300_000  # lent: over LEND_AT
    raw = json.dumps({"id": 1, "result": {"content": [{"type": "text", "text": text}]}}).encode()
    parsed = lean.parse_lean(raw)["result"]
    assert isinstance(parsed["content"][0]["text"], lean.LentText)
    with Offloader(sqlite_url) as off:
        out = offload_call_result(off, "t", parsed)
        assert "\\ud83dabc\nabc" in out["content"][0]["text"] and "\ufffd" not in out["content"][0]["text"]
        (row,) = off.list()[0]
        assert b"".join(off.iter_raw(row["id"])) == b"\\ud83d" + b"abc\n" * 300_000 and row["chars"] == 1_200_006


@pytest.mark.parametrize("repeat", [3_000, 300_000], ids=["parsed", "lent"])
def test_a_low_surrogate_escape_in_an_upstream_text_is_stored_as_the_escape_not_a_byte(sqlite_url, repeat):
    # U+DC80–U+DCFF in a str passed to Offloader.process stand for the bytes a Python decoder escaped;
    # in an upstream's JSON they are escapes like any other, and were stored as the byte 0x80
    from offload.adapters.proxy import lean
    from offload.adapters.proxy.results import offload_call_result

    text = "\udc80" + "abc\n" * repeat
    raw = json.dumps({"id": 1, "result": {"content": [{"type": "text", "text": text}],
                                          "structuredContent": {"content": text}}}).encode()
    with Offloader(sqlite_url) as off:
        out = offload_call_result(off, "t", lean.parse_lean(raw)["result"])
        (row,) = off.list()[0]  # the structured form repeats the text: one artifact
        assert b"".join(off.iter_raw(row["id"])) == b"\\udc80" + b"abc\n" * repeat
        assert out["structuredContent"]["artifact_id"] == row["id"]


def test_store_failure_gives_a_bounded_preview_marked_not_stored(tmp_path, real_count):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the store's folder should be")

    async def scenario():
        async with session(proxy_command(f"sqlite:///{blocked}/store.db", SCRIPTED)) as client:
            return await client.call_tool("lines", {"n": 50_000})

    result = run(scenario)
    text = result.content[0].text
    assert "could NOT be stored" in text and real_count(text) < 1000
    assert text.count("\n") < 200


def test_streamable_http_upstream(sqlite_url, real_count):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*SCRIPTED, "--http", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert time.monotonic() < deadline and server.poll() is None, "the HTTP upstream did not start"
            time.sleep(0.1)

        async def scenario():
            command = [sys.executable, "-m", "offload", "--url", sqlite_url, "proxy", "--upstream-url",
                       f"http://127.0.0.1:{port}/mcp"]
            async with session(command) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                shown = await client.call_tool("lines", {"n": 30_000})
                page = await client.call_tool("fetch_slice", {"artifact_id": artifact_id(shown.content[0].text),
                                                              "offset": 29_998})
                small = await client.call_tool("lines", {"n": 2})
            return names, shown, page, small

        names, shown, page, small = run(scenario)
    finally:
        server.terminate()
        server.wait(10)
    assert names[-2:] == ["fetch_slice", "query_artifact"] and "hang" in names
    assert real_count(shown.content[0].text) < 1000
    assert page.structured_content["content"].splitlines() == [
        "0029998 " + "abcdefghij" * (1 + 29998 % 7), "0029999 " + "abcdefghij" * (1 + 29999 % 7)]
    assert small.content[0].text == "0000000 abcdefghij\n0000001 abcdefghijabcdefghij"


def test_cli_refuses_a_missing_or_double_upstream(tmp_path):
    from typer.testing import CliRunner

    from offload.cli import app

    runner = CliRunner()
    store = f"sqlite:///{tmp_path / 's.db'}"
    for extra in ([], ["--upstream-url", "http://127.0.0.1:9/mcp", "--", "true"]):
        done = runner.invoke(app, ["--url", store, "proxy", *extra])
        assert done.exit_code == 2 and "either as a command after --" in done.output
    done = runner.invoke(app, ["--url", store, "proxy", "--limit", "git_show=lots", "--", "true"])
    assert done.exit_code == 2 and "whole number of tokens" in done.output
    done = runner.invoke(app, ["--url", store, "proxy", "--", "/no/such/server"])
    assert done.exit_code == 2 and "could not start the upstream MCP server (/no/such/server)" in done.output
    for timeout in ("nan", "-1", "inf"):  # nan was taken, and then timed every request out in a second
        done = runner.invoke(app, ["--url", store, "proxy", "--timeout", timeout, "--", "true"])
        assert done.exit_code == 2 and "--timeout must be 0 (no timeout) or a number of seconds" in done.output


def test_widened_schema_keeps_refs_resolvable():
    original = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "$defs": {"Item": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                "properties": {"item": {"$ref": "#/$defs/Item"}}, "required": ["item"]}
    widened = widen_output_schema(original)
    jsonschema.Draft202012Validator.check_schema(widened)
    jsonschema.validate({"item": {"x": 1}}, widened)
    reference = {"artifact_id": None, "tool": "t", "kind": "text", "bytes": 9, "preview": "", "truncated": True}
    jsonschema.validate(reference, widened)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"item": {"x": "not a number"}}, widened)


def test_widened_schema_keeps_every_local_pointer_resolvable():
    """zod-to-json-schema (behind the TypeScript SDK) points a reused sub-schema at its first use
    (#/properties/…); each $ref into the schema must still resolve once it is moved under anyOf."""
    point = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    original = {
        "type": "object", "required": ["start"],
        "properties": {
            "start": point,
            "end": {"$ref": "#/properties/start"},
            "default": {"type": "array", "items": {"$ref": "#/properties/start/properties/x"}},  # named like a keyword
            "tree": {"$ref": "#/$defs/Node"},
            "marker": {"const": {"$ref": "#/properties/start"}},  # data, not a reference: unchanged
        },
        "$defs": {"Node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                                                            "whole": {"$ref": "#"}, "at": {"$ref": "#/properties/end"}}}},
    }
    widened = widen_output_schema(original)
    assert widened["$defs"]["Node"]["properties"]["at"] == {"$ref": "#/anyOf/0/properties/end"}
    reference = {"artifact_id": None, "tool": "t", "kind": "text", "bytes": 9, "preview": "", "truncated": True}
    valid = {"start": {"x": 1}, "end": {"x": 2}, "default": [3], "marker": {"$ref": "#/properties/start"},
             "tree": {"kids": [{"at": {"x": 4}, "whole": {"start": {"x": 5}}}]}}
    invalid = [{**valid, "end": {"x": "two"}}, {**valid, "default": ["three"]},
               {**valid, "tree": {"kids": [{"at": {"x": "four"}}]}}, {**valid, "tree": {"whole": {"end": {}}}}]
    for validator in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator):
        validator.check_schema(widened)
        assert validator(original).is_valid(valid)
        assert validator(widened).is_valid(valid) and validator(widened).is_valid(reference)
        assert not any(validator(widened).is_valid(instance) for instance in invalid)


# -- the relay in-process: the upstream's exact lines ---------------------------------------------------


class LineUpstream:
    """The relay's upstream interface with nothing behind it: the test hands the relay each line."""

    label = "in-process upstream"
    negotiated = None

    async def start(self, deliver, closed) -> None:
        pass

    async def send(self, data, message=None) -> None:
        pass

    def tools_listed(self, tools) -> None:
        pass

    async def close(self) -> None:
        pass


def upstream_line(request_id: int, result: bytes) -> bytes:
    return b'{"jsonrpc": "2.0", "id": %d, "result": %s}\n' % (request_id, result)


def relayed(store_url: str, tool: str, results: list[bytes]) -> list[bytes]:
    """What the client receives when each of `results` (JSON text) answers a call of `tool`, in turn."""
    async def scenario():
        written: list[bytes] = []
        with Offloader(store_url) as off:
            relay = Relay(off, LineUpstream(), written.append, timeout=None)
            await relay.start()
            for request_id, result in enumerate(results, 1):
                await relay.from_client(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                                      "params": {"name": tool, "arguments": {}}}) + b"\n")
                await relay.from_upstream(upstream_line(request_id, result), None)
            await relay.close()  # waits for the answers being prepared
        return written

    return run(scenario)


def test_many_items_each_over_budget_become_one_reference_within_it(sqlite_url, real_count):
    """Each text item over the budget became a reference of its own: 100 of them came to 51,102 tokens
    against the tool's 4,000. Their texts become one artifact instead; a blob stays its own."""
    texts = ["".join(f"item {k} line {j}: {'lorem ipsum dolor ' * 3}\n" for j in range(300)) for k in range(60)]
    blob = base64.b64encode(random.Random(1).randbytes(300_000)).decode()
    content = [{"type": "text", "text": text} for text in texts[:30]]
    content.append({"type": "resource",
                    "resource": {"uri": "file:///r.txt", "mimeType": "text/plain", "text": texts[30]}})
    content.append({"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream",
                                                     "blob": blob}})
    content += [{"type": "text", "text": text} for text in texts[31:]]
    [line] = relayed(sqlite_url, "t", [json.dumps({"content": content}).encode()])
    items = json.loads(line)["result"]["content"]
    assert len(items) == 2 and sum(real_count(item["text"]) for item in items) <= 4000
    assert items[1]["text"].startswith("Embedded resource file:///b.bin (application/octet-stream):\n[offload]")
    with Offloader(sqlite_url) as off:
        stored = b"".join(off.iter_raw(artifact_id(items[0]["text"]))).decode()
        assert b"".join(off.iter_raw(artifact_id(items[1]["text"]))) == base64.b64decode(blob)
    labelled = "Embedded resource file:///r.txt (text/plain):\n" + texts[30]
    assert stored == "\n\n".join(texts[:30] + [labelled] + texts[31:])


def test_an_upstream_that_exits_while_a_request_is_written_is_named_with_its_exit_and_stderr(sqlite_url, tmp_path):
    """The first request to meet a dead upstream was answered "... is not accepting input ()." (asyncio's
    BrokenPipeError() for a write cut short has no words); later ones named the exit code. Both do now."""
    from offload.adapters.proxy import StdioUpstream

    trigger = tmp_path / "exit-now"

    def call(request_id: int, text: str) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                             "params": {"name": "echo", "arguments": {"text": text}}}) + b"\n"

    async def scenario():
        written: list[bytes] = []
        with Offloader(sqlite_url) as off:
            upstream = StdioUpstream([*SCRIPTED, "--deaf", str(trigger)])
            relay = Relay(off, upstream, written.append, timeout=None)
            await relay.start()
            sending = asyncio.create_task(relay.from_client(call(1, "x" * (1 << 20))))  # more than a pipe holds
            with anyio.fail_after(10):
                while upstream.proc.stdin.transport.get_write_buffer_size() == 0:
                    await asyncio.sleep(0.01)
                trigger.touch()  # the upstream exits while the proxy waits to write the rest
                await sending
            first = [orjson.loads(line) for line in written]
            await relay.from_client(call(2, "y"))
            await relay.close()
        return first, [orjson.loads(line) for line in written]

    first, answers = run(scenario)
    assert [answer["id"] for answer in answers] == [1, 2]  # each answered once
    assert answers[:1] == first  # the first at once, not when the reader saw the end
    for answer in answers:
        message = answer["error"]["message"]
        assert "tools/call echo" in message and "exited with code 3" in message, message
        assert "fatal: deaf server leaving" in message and "()" not in message, message


def test_a_closed_http_upstream_stream_is_named_by_its_error_type(sqlite_url):
    """anyio's ClosedResourceError has no words: the answer read "is not accepting input ()"."""
    from offload.adapters.proxy import HttpUpstream

    async def scenario():
        written: list[bytes] = []
        upstream = HttpUpstream("http://127.0.0.1:9/mcp")
        upstream._write, _ = anyio.create_memory_object_stream(1)  # the SDK's write stream, once it has closed
        await upstream._write.aclose()
        with Offloader(sqlite_url) as off:
            await Relay(off, upstream, written.append, timeout=None).from_client(
                b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        return [orjson.loads(line) for line in written]

    [answer] = run(scenario)
    assert answer["id"] == 1 and "is not accepting input (ClosedResourceError)." in answer["error"]["message"]


def test_the_upstream_reader_delivers_each_line_with_its_newline():
    """The relay may write an upstream's line on as it is: a last one without its newline gets one (in a
    big line's own buffer), a CRLF line is delivered as it came."""
    from offload.adapters.proxy.upstream import _read_lines

    async def delivered(data: bytes) -> list[bytes]:
        stream, lines = asyncio.StreamReader(), []
        stream.feed_data(data)
        stream.feed_eof()

        async def deliver(raw, message):
            lines.append(bytes(raw))

        await _read_lines(stream, deliver)
        return lines

    big = b'{"id": 3, "result": "' + b"x" * (3 << 20) + b'"}'  # longer than one read
    assert run(delivered, b'{"id": 1}\r\n\n{"id": 2}') == [b'{"id": 1}\r\n', b'{"id": 2}\n']
    assert run(delivered, big) == [big + b"\n"]


def test_the_client_writer_ends_each_message_with_exactly_one_newline():
    """Whatever path hands a message on without its newline, it must not join the next one on the client's
    line; one that has its newline (CRLF included) is written as it is."""
    out = io.BytesIO()
    writer = relay_module.StdoutWriter(out)
    for message in (b'{"id": 1}', b'{"id": 2}\r\n', b'{"id": 3}\n', b'{"id": 4}'):
        writer(message)
    writer.close()
    assert out.getvalue() == b'{"id": 1}\n{"id": 2}\r\n{"id": 3}\n{"id": 4}\n'


def test_results_orjson_cannot_read_exactly_are_answered_exactly(sqlite_url):
    """Lone surrogate escapes (a JavaScript string cut inside an emoji) and integers beyond 64 bits: a
    result within budget comes back as the upstream's own line, and one that is offloaded keeps them."""
    big_numbers = {"balance": 10**21 + 1, "id": 2**64 + 1}
    fits = [json.dumps({"content": [{"type": "text", "text": "a\ud800b " * 1000}]}),  # over the fast path
            json.dumps({"content": [{"type": "text", "text": "balance " + "pad " * 2000}],
                        "structuredContent": big_numbers})]
    offloaded = [json.dumps({"content": [{"type": "text", "text": "pad " * 20_000}, {"type": "text", "text": "ok \ud83d"}],
                             "structuredContent": big_numbers})]
    lines = relayed(sqlite_url, "t", [text.encode() for text in fits + offloaded])
    lines.sort(key=lambda line: json.loads(line)["id"])  # each answer is prepared in a task of its own
    assert lines[:2] == [upstream_line(i, text.encode()) for i, text in enumerate(fits, 1)]
    result = json.loads(lines[2])["result"]
    assert "stored whole as" in result["content"][0]["text"] and result["content"][1]["text"] == "ok \ud83d"
    assert result["structuredContent"] == big_numbers and len(lines) == 3


def test_an_offload_failure_still_answers_once_within_budget_and_schema(sqlite_url, monkeypatch, real_count):
    """The request has left the pending list when its result is offloaded: whatever fails then, the relay
    itself must answer it, once, without flooding the context or breaking the outputSchema promise."""
    schema = {"type": "object", "properties": {"rows": {"type": "array"}}, "required": ["rows"]}
    rows = [{"id": i, "note": "é " + "x" * (i % 30)} for i in range(5000)]
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    result = json.dumps({"content": [{"type": "text", "text": json.dumps(rows)}, {"type": "text", "text": "cut \ud83d"},
                                     image], "structuredContent": {"rows": rows}}).encode()
    small = json.dumps({"content": [{"type": "text", "text": "pad " * 2000}]}).encode()

    def fails(*args, **kwargs):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(relay_module, "offload_call_result", fails)
    answers = relayed(sqlite_url, "t", [result])
    assert len(answers) == 1
    answer = json.loads(answers[0])["result"]
    jsonschema.validate(answer["structuredContent"], widen_output_schema(schema))
    assert real_count(json.dumps(answer)) < 4000 and answer["content"][1] == image
    assert "could NOT be stored (RuntimeError: simulated failure)" in answer["content"][0]["text"]
    monkeypatch.setattr(relay_module, "unprocessed_call_result", fails, raising=False)  # even the fallback fails
    assert relayed(sqlite_url, "t", [small]) == [upstream_line(1, small)]


def test_an_embedded_blob_of_a_mebibyte_or_more_becomes_a_reference(sqlite_url, real_count):
    data = bytes(range(256)) * 4500  # its base64 is over 1 MiB: the line is parsed lean
    blob = {"uri": "file:///x.bin", "mimeType": "application/octet-stream", "blob": base64.b64encode(data).decode()}
    [line] = relayed(sqlite_url, "t", [json.dumps({"content": [{"type": "resource", "resource": blob}]}).encode()])
    text = json.loads(line)["result"]["content"][0]["text"]
    assert text.startswith("Embedded resource file:///x.bin (application/octet-stream):\n[offload]")
    assert real_count(text) < 1000
    with Offloader(sqlite_url) as off:
        assert b"".join(off.iter_raw(artifact_id(text))) == data


FS_SERVER = os.environ.get("OFFLOAD_TEST_FS_SERVER")  # .ci/run installs the npm reference filesystem server


@pytest.mark.skipif(not FS_SERVER, reason="set OFFLOAD_TEST_FS_SERVER to the npm filesystem server's bin "
                                          "(npm install @modelcontextprotocol/server-filesystem)")
def test_npm_filesystem_server_structured_text_is_stored_once(git_repo, sqlite_url, real_count):
    """The reference filesystem server sends a file's text twice (content and structuredContent, with an
    outputSchema): the proxy stores it once and the validating client accepts the reference for both."""
    upstream = [FS_SERVER, str(git_repo)]
    original = (git_repo / "big.txt").read_text().splitlines()

    async def scenario():
        async with session(upstream) as direct:
            upstream_tools = {t.name: t for t in (await direct.list_tools()).tools}
        async with session(proxy_command(sqlite_url, upstream)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            read = await client.call_tool("read_text_file", {"path": str(git_repo / "big.txt")})
            aid = read.structured_content["artifact_id"]
            page = await client.call_tool("fetch_slice", {"artifact_id": aid, "offset": 77_777, "limit": 2})
        return upstream_tools, tools, read, page

    upstream_tools, tools, read, page = run(scenario)
    for name, tool in upstream_tools.items():
        expected = widen_output_schema(tool.output_schema) if tool.output_schema else None
        assert tools[name].output_schema == expected
        assert tools[name].model_dump(exclude={"output_schema"}) == tool.model_dump(exclude={"output_schema"})
    assert real_count(read.content[0].text) < 1000
    assert read.structured_content["artifact_id"] == artifact_id(read.content[0].text)
    assert page.structured_content["content"].splitlines() == original[77_777:77_779]
    with Offloader(sqlite_url) as off:
        assert len(off.list()[0]) == 1


@pytest.mark.skipif(not FS_SERVER, reason="set OFFLOAD_TEST_FS_SERVER to the npm filesystem server's bin "
                    "(.ci/run installs it)")
def test_npm_filesystem_server_media_blob_is_stored_once(tmp_path, sqlite_url):
    """read_media_file sends a file's base64 twice, as an embedded resource and in structuredContent's
    copy of the content list: it was stored twice, as the bytes and as their base64 JSON, and the text and
    the structured form named different artifacts."""
    blob = random.Random(5).randbytes(2_000_000)
    (tmp_path / "blob.bin").write_bytes(blob)

    async def scenario():
        async with session(proxy_command(sqlite_url, [FS_SERVER, str(tmp_path)])) as client:
            return await client.call_tool("read_media_file", {"path": str(tmp_path / "blob.bin")})

    read = run(scenario)
    assert read.structured_content["artifact_id"] == artifact_id(read.content[0].text)
    with Offloader(sqlite_url) as off:
        (only,) = off.list()[0]
        assert only["kind"] == "binary" and b"".join(off.iter_raw(only["id"])) == blob


_TS_CLIENT = """
import {{ Client }} from {client};
import {{ StdioClientTransport }} from {stdio};
const [command, ...args] = JSON.parse(process.argv[2]);
const calls = JSON.parse(process.argv[3]);
const client = new Client({{name: "ts", version: "1"}});
await client.connect(new StdioClientTransport({{command, args, stderr: "ignore"}}));
await client.listTools();  // the client keeps each tool's outputSchema, and checks results against it
const out = [];
for (const [name, args] of calls) {{
  try {{
    const r = await client.callTool({{name, arguments: args}});
    out.push({{isError: !!r.isError, text: r.content[0].text}});
  }}
  catch (e) {{ out.push({{thrown: e.message}}); }}
}}
console.log(JSON.stringify(out));
await client.close();
"""


@pytest.mark.skipif(not FS_SERVER, reason="set OFFLOAD_TEST_FS_SERVER to the npm filesystem server's bin "
                    "(.ci/run installs it; the official TypeScript MCP client comes with it)")
@pytest.mark.parametrize("serve", ["mcp", "proxy"])
def test_the_official_typescript_client_shows_errors_and_pages(tmp_path, sqlite_url, serve):
    """That client checks a result's structuredContent against the tool's outputSchema, an error's too:
    `{"error", "message"}` made it throw (-32602), and the model never saw what was wrong."""
    sdk = Path(FS_SERVER).parent.parent / "@modelcontextprotocol" / "sdk" / "dist" / "esm"  # node_modules/.bin/…
    script = tmp_path / "client.mjs"
    script.write_text(_TS_CLIENT.format(client=json.dumps(str(sdk / "client" / "index.js")),
                                        stdio=json.dumps(str(sdk / "client" / "stdio.js"))))
    with Offloader(sqlite_url) as off:
        aid = off.put("".join(f"line {i}\n" for i in range(50_000)), tool="shell").artifact_id
        doc = off.put({"items": [{"id": i} for i in range(5000)]}, tool="api").artifact_id
    command = ([sys.executable, "-m", "offload", "--url", sqlite_url, "mcp"] if serve == "mcp"
               else proxy_command(sqlite_url, [FS_SERVER, str(tmp_path)]))
    calls = [("fetch_slice", {"artifact_id": aid, "offset": -2}), ("fetch_slice", {"artifact_id": aid, "limit": 0}),
             ("fetch_slice", {"artifact_id": "art_doesnotexist00"}),
             ("query_artifact", {"artifact_id": doc, "jmespath": "items[?"})]
    done = subprocess.run(["node", str(script), json.dumps(command), json.dumps(calls)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OFFLOAD_CONFIG": os.devnull})
    assert done.returncode == 0, done.stderr
    page, zero, unknown, bad = json.loads(done.stdout)
    assert page == {"isError": False, "text": page["text"]} and page["text"].startswith("line 49998\nline 49999\n")
    assert zero == {"isError": True, "text": zero["text"]} and "limit must be at least 1" in zero["text"]
    assert unknown["isError"] and "No artifact 'art_doesnotexist00'" in unknown["text"]
    assert bad["isError"] and "Invalid JMESPath" in bad["text"]


def test_an_unreachable_http_upstream_is_named_with_its_cause(sqlite_url):
    """The error named only "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)"."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "offload", "--url", sqlite_url, "proxy", "--upstream-url",
                             f"http://127.0.0.1:{port}/mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        proc.stdin.write(json.dumps(initialize).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    message = answer["error"]["message"]
    assert "ConnectError" in message and "ExceptionGroup" not in message, message
