"""The ToolPack and the OpenAI / Anthropic / LangChain adapters, through each SDK's own types (no network).

Requests go through the real SDK clients to an in-process stand-in of the API (an httpx2 MockTransport),
so each SDK serializes our tool definitions and results and parses the model's replies itself.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import pathlib
import subprocess
import sys

import httpx2
import pytest
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from offload import Offloader
from offload.adapters import ToolPack
from offload.tools.schemas import TOOLS

BIG_LOG = "".join(f"{i:05d} step {i} ok\n" for i in range(6000)) + "99999 FATAL disk full on /dev/sda1\n"


def build_log(build: str, tail: int = 0) -> str:
    """Read the log of a CI build."""
    return BIG_LOG if tail == 0 else "\n".join(BIG_LOG.splitlines()[-tail:])


def count_lines(text: str) -> int:
    """Count the lines of a text."""
    return len(text.splitlines())


def sum_values(values: list[int]) -> int:
    """Add numbers up."""
    return sum(values)


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


@pytest.fixture
def pack(off):
    return ToolPack(off, [build_log], session="s1")


# -- the pack itself --------------------------------------------------------------------------------


def test_pack_lists_user_tools_then_companions_with_schemas(pack):
    assert [t.name for t in pack] == ["build_log", "fetch_slice", "query_artifact"]
    tool = pack.get("build_log")
    assert tool.description == "Read the log of a CI build."
    assert tool.parameters["required"] == ["build"]
    assert tool.parameters["properties"]["tail"] == {"type": "integer", "default": 0}
    assert tool.parameters["additionalProperties"] is False
    assert pack.get("fetch_slice").parameters is TOOLS["fetch_slice"]["input_schema"]
    assert pack.get("fetch_slice").output_schema["required"][:2] == ["artifact_id", "unit"]
    with pytest.raises(ValueError, match="already"):
        pack.add(build_log)


def test_a_references_json_fits_the_budget_its_text_fits(off):
    """The JSON of a reference (function output, MCP structuredContent) holds more than its text: every
    file's match count with its full path, each hint's result. It fits the same budget, what gave way
    named in left_out; the text keeps everything, and `show --json` every field."""
    import sysconfig

    from offload.reference import CONTRACT_FIELDS
    from offload.tokens import exact_tokenizer

    o200k, cl100k = exact_tokenizer("o200k_base"), exact_tokenizer("cl100k_base")

    def grep_stdlib(pattern: str) -> str:
        return subprocess.run(["grep", "-rn", pattern, sysconfig.get_paths()["stdlib"]],
                              capture_output=True, text=True).stdout

    pack = ToolPack(off, [grep_stdlib])
    out = pack.call("grep_stdlib", {"pattern": "def __init__"})
    measured = json.dumps(out.structured, ensure_ascii=False)
    full = {k: v for k, v in off.reference(out.structured["artifact_id"]).items() if k != "text"}
    assert max(o200k(measured), cl100k(measured)) <= 800
    assert max(o200k(json.dumps(full, ensure_ascii=False)), cl100k(json.dumps(full, ensure_ascii=False))) > 800
    assert set(CONTRACT_FIELDS) <= set(out.structured)
    left_out = out.structured["left_out"]
    assert left_out["fields"][0] == "extra" and "text form" in left_out["why"]
    assert all(name not in out.structured or out.structured[name] in (None, [], "") for name in left_out["fields"])
    assert out.structured["bytes"] == full["bytes"] and out.structured["lines"] == full["lines"]
    assert out.structured["preview"] == full["preview"]  # the per-file counts gave way, not the preview
    assert max(o200k(out.text), cl100k(out.text)) <= 800


def test_a_coloured_logs_json_form_keeps_a_preview_cut_from_both_ends(off, real_count):
    """An ESC is six characters in JSON: the structured form of a coloured build log was over its budget
    with the preview its text fitted, and gave the whole preview away (170 tokens of a 720 budget)."""
    esc = "\x1b"
    lines = [f"{esc}[32m✓{esc}[0m compiled m{i}.ts" for i in range(2000)]
    lines[1200] = f"{esc}[31mERROR{esc}[0m in src/app.ts:12:5"
    ref = off.process("build", "\n".join(lines) + "\n")
    form = off.structured(ref)
    assert "preview (cut)" in form["left_out"]["fields"] and form["truncated"]
    shown = form["preview"].splitlines()
    assert shown[0] == lines[0] and shown[-1] == lines[-1] and "ERROR" in form["preview"]
    assert "lines of the preview cut here to fit this form" in form["preview"]
    assert real_count(json.dumps(form, ensure_ascii=False, separators=(",", ":"))) <= off.settings.reference_tokens


def test_small_results_pass_through_and_big_ones_become_references(pack, off):
    small = pack.call("build_log", {"build": "7", "tail": 1})
    assert small.text == "99999 FATAL disk full on /dev/sda1" and not small.is_error

    big = pack.call("build_log", '{"build": "7"}')
    aid = big.structured["artifact_id"]
    assert big.text.startswith("[offload] The result of `build_log` was too large") and aid in big.text
    stored = off.get(aid)
    assert stored["session"] == "s1" and stored["args"] == {"build": "7"}  # the model's arguments, as given

    hits = pack.call("query_artifact", {"artifact_id": aid, "grep": "FATAL"})
    assert "6000: 99999 FATAL disk full" in hits.text and hits.structured["count"] == 1
    page = pack.call("fetch_slice", {"artifact_id": aid, "offset": -1})
    assert page.structured["content"] == "99999 FATAL disk full on /dev/sda1"


def test_a_repeated_identical_call_names_the_earlier_result(pack, off):
    first = pack.call("build_log", {"build": "7"}).structured["artifact_id"]
    again = pack.call("build_log", {"build": "7"})
    assert again.structured["same_as"] == first
    assert f"Same result as {first}" in again.text
    assert "same_as" not in pack.call("build_log", {"build": "8"}).structured  # other arguments
    assert "same_as" not in pack.call("build_log", {"build": "7"}, session="s2").structured  # other session
    off.delete(first)
    off.delete(again.structured["artifact_id"])
    assert "same_as" not in pack.call("build_log", {"build": "7"}).structured  # nothing stored any more


def test_repeated_calls_are_found_on_every_backend(store_url):
    with Offloader(store_url, ttl_days=1) as off:
        first = off.process("grep", BIG_LOG, args={"pattern": "x", "path": "."}, session="c")
        again = off.process("grep", BIG_LOG, args={"path": ".", "pattern": "x"}, session="c")  # same args
        assert first.same_as is None and again.same_as == first.artifact_id
        assert off.process("grep", BIG_LOG, args={"pattern": "x", "path": "."}).same_as is None  # no session
        assert off.process("grep", BIG_LOG + "more\n", args={"pattern": "x", "path": "."},
                           session="c").same_as is None  # another result
        assert off.reference(again.artifact_id)["same_as"] == first.artifact_id  # what the model saw


def test_bad_calls_come_back_as_errors_the_model_can_act_on(pack):
    unknown = pack.call("rm_rf", {})
    assert unknown.is_error and "build_log, fetch_slice, query_artifact" in unknown.text
    missing = pack.call("build_log", {})
    assert missing.is_error and "build: Field required" in missing.text
    extra = pack.call("build_log", {"build": "1", "color": "red"})
    assert extra.is_error and "color" in extra.text
    not_json = pack.call("build_log", "{build")
    assert not_json.is_error and not_json.structured["error"] == "invalid_argument"
    bad_id = pack.call("fetch_slice", {"artifact_id": "art_doesnotexist"})
    assert bad_id.is_error and bad_id.structured["error"] == "not_found"
    # arguments that are JSON but no object, or too deep to read, and tool names that are no string:
    # each an error result (they raised TypeError, RecursionError or "unhashable type")
    for name in ("build_log", "fetch_slice", "query_artifact"):
        for arguments in ("5", "[{}]", '[{"a": 1, "b": 2}]', "[" * 50_000, b"\xff", {1: 2}):
            out = pack.call(name, arguments)
            assert out.is_error and out.structured["error"] == "invalid_argument", (name, arguments, out.text)
            assert "JSON object" in out.text
    assert pack.call("fetch_slice", "5").text.endswith('Example: {"artifact_id": "art_…", "offset": 0}')
    assert "artifact_id is required" in pack.call("fetch_slice", "null").text  # null: no arguments
    for name in (["grep"], None, 5):
        out = pack.call(name, {})
        assert out.is_error and out.structured["error"] == "unknown_tool"
    for artifact_id in (["art_abc"], {"id": "art_abc"}, 5):  # a raw SQLAlchemy binding error before
        out = pack.call("fetch_slice", {"artifact_id": artifact_id})
        assert out.is_error and out.structured["error"] == "invalid_argument"
        assert out.text == f"Error: artifact_id must be a string like art_…, not {type(artifact_id).__name__}"


def test_a_null_for_an_argument_with_a_default_is_that_default(off):
    """Models send null for an argument they leave out: `path: str = "."` given null was an error, while
    the companion tools read null as the default. A null the signature takes stays a null."""
    def find(pattern: str, path: str = ".", depth: int | None = 3) -> str:
        """Find."""
        return f"{pattern} in {path} to {depth}"

    pack = ToolPack(off, [find])
    assert pack.call("find", {"pattern": "x", "path": None}).text == "x in . to 3"
    assert pack.call("find", {"pattern": "x", "depth": None}).text == "x in . to None"
    missing = pack.call("find", {"pattern": None})
    assert missing.is_error and "pattern: Input should be a valid string" in missing.text


def test_errors_quote_the_models_arguments_within_a_bound(off):
    # a 100,000-character statement or id came back whole in the error: 12,000-25,000 tokens of it
    aid = off.put([{"a": i} for i in range(3000)], tool="api").artifact_id
    pack = ToolPack(off)
    for name, arguments in [
            ("query_artifact", {"artifact_id": aid, "sql": "SELECT " + "x" * 100_000 + " FROM artifact"}),
            ("query_artifact", {"artifact_id": aid, "jmespath": "[?" + "a" * 100_000}),
            ("query_artifact", {"artifact_id": aid, "grep": "(" + "a" * 100_000}),
            ("fetch_slice", {"artifact_id": "art_" + "a" * 200_000}),
            ("fetch_slice", {"artifact_id": aid, "y" * 100_000: 1})]:
        out = pack.call(name, arguments)
        assert out.is_error and len(out.text) < 2_100, (name, len(out.text))
        assert "characters of this message not shown" in out.text
        assert out.structured["message"] in out.text
    short = pack.call("query_artifact", {"artifact_id": aid, "jmespath": "[?"})
    assert short.is_error and "not shown" not in short.text


def test_an_id_holding_a_lone_surrogate_is_not_found(off):
    out = ToolPack(off).call("fetch_slice", {"artifact_id": "art_\ud83d"})  # an internal UnicodeEncodeError before
    assert out.is_error and out.structured["error"] == "not_found", out.text


def test_every_lookup_by_an_id_holding_a_lone_surrogate_finds_nothing(off):
    """The extract log and the context guard's liveness check bound the id raw: a UnicodeEncodeError
    (`offload extracts --artifact $'art_\\x80'` ended in a traceback)."""
    ref = off.process("grep", "x\n" * 20_000)
    off.fetch_slice(ref.artifact_id)
    for lone in ("art_\udc80", "ext_\ud83d"):
        assert off.extracts(artifact_id=lone) == [] and off.extracts(extract_id=lone) == []
        assert off.rerun(artifact_id=lone) == [] and off.rerun(extract_id=lone) == []
    assert off.store.live_ids([ref.artifact_id, "art_\udc80"], off.namespace) == {ref.artifact_id}
    assert len(off.extracts(artifact_id=ref.artifact_id)) == 1  # the log itself is as it was


def test_a_failing_tool_is_an_error_result_unless_told_to_raise(off):
    def flaky(path: str) -> str:
        """Fail."""
        raise FileNotFoundError(path)

    out = ToolPack(off, [flaky]).call("flaky", {"path": "/nope"})
    assert out.is_error and out.text == "Error: the tool flaky failed: FileNotFoundError: /nope"
    with pytest.raises(FileNotFoundError):
        ToolPack(off, [flaky], catch_errors=False).call("flaky", {"path": "/nope"})


def test_tools_the_apis_would_refuse_are_refused_when_added(off):
    """`<lambda>`, "my search tool!" and 100-character names were added, and failed only at the model's
    API; a partial or a callable object raised AttributeError; a generator's repr reached the model."""
    import functools

    def rows():
        yield "a\n"

    async def arows():
        yield "a\n"

    cases = [(lambda: ToolPack(off, [lambda x: x]), ValueError, "<lambda>"),
             (lambda: ToolPack(off).add(count_lines, name="my search tool!"), ValueError, "letters, digits"),
             (lambda: ToolPack(off).add(count_lines, name="t" * 65), ValueError, "1-64"),
             (lambda: ToolPack(off, [functools.partial(count_lines, "x")]), ValueError, "name="),
             (lambda: ToolPack(off, [rows]), TypeError, "generator function"),
             (lambda: ToolPack(off, [arows]), TypeError, "generator function"),
             (lambda: off.tool(rows), TypeError, "generator function")]
    for make, error, says in cases:
        with pytest.raises(error, match=says):
            make()
    pack = ToolPack(off)
    pack.add(functools.partial(count_lines), name="count-lines_2")
    assert "count-lines_2" in pack and pack.call("count-lines_2", {"text": "a\nb\n"}).text == "2"


def test_each_listing_of_the_tools_has_schemas_of_its_own(off):
    from offload.adapters.openai import chat_tools
    from offload.tools import schemas

    listed = chat_tools(ToolPack(off))[-2]["function"]["parameters"]
    assert listed == schemas.FETCH_SLICE_SCHEMA and listed is not schemas.FETCH_SLICE_SCHEMA
    listed["required"] = list(listed["properties"])  # made strict in place, by the developer
    assert schemas.FETCH_SLICE_SCHEMA["required"] == ["artifact_id"]
    assert chat_tools(ToolPack(off))[-2]["function"]["parameters"]["required"] == ["artifact_id"]


def test_a_decorated_method_stores_its_arguments_not_its_instance(off):
    class Repo:
        @off.tool
        def log(self, n: int) -> str:
            return "commit\n" * n

        @classmethod
        @off.tool
        def make(cls, n: int) -> str:
            return "x\n" * n

    # was {"self": "<…Repo object at 0x…>", "n": 100000}
    assert off.get(Repo().log(100_000).artifact_id)["args"] == {"n": 100_000}
    assert off.get(Repo.make(n=100_000).artifact_id)["args"] == {"n": 100_000}


def test_parallel_async_tool_calls_run_together(off):
    from offload.adapters.anthropic import arun_tool_uses
    from offload.adapters.openai import arun_chat_tool_calls, arun_responses_tool_calls

    running, most = 0, 0

    async def wait(n: int) -> str:
        """Wait."""
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.2)
        running -= 1
        return f"done {n}"

    pack = ToolPack(off, [wait])
    chat = {"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function",
                                                  "function": {"name": "wait", "arguments": json.dumps({"n": i})}}
                                                 for i in range(3)]}
    responses = [{"type": "function_call", "call_id": f"c{i}", "name": "wait", "arguments": json.dumps({"n": i})}
                 for i in range(3)]
    uses = {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "wait", "input": {"n": i}}
                                             for i in range(3)]}
    def block_text(m: dict) -> str:
        return m["content"][0]["text"] if isinstance(m["content"], list) else m["content"]

    for run, message, text in ((arun_chat_tool_calls, chat, lambda m: m["content"]),
                               (arun_responses_tool_calls, responses, lambda m: m["output"]),
                               (arun_tool_uses, uses, block_text)):
        most = 0
        out = asyncio.run(run(pack, message))
        assert most == 3, run.__name__  # one after another, three 1 s tools took 3 s
        assert [text(m) for m in out] == ["done 0", "done 1", "done 2"]  # in the order asked


def test_async_tools_run_from_call_and_acall(off):
    async def fetch(url: str) -> dict:
        """Fetch a JSON API."""
        await asyncio.sleep(0)
        return {"url": url, "items": [{"id": i, "status": "ok" if i % 50 else "error"} for i in range(3000)]}

    pack = ToolPack(off, [fetch], session="s")
    out = pack.call("fetch", {"url": "https://example.test/api"})
    assert out.structured["kind"] == "json" and out.structured["items"] == 3000
    out = asyncio.run(pack.acall("fetch", {"url": "https://example.test/api"}))
    assert out.structured["same_as"]
    small = asyncio.run(pack.acall("fetch_slice", {"artifact_id": out.structured["artifact_id"], "limit": 1,
                                                   "unit": "items", "path": "items"}))
    assert json.loads(small.structured["content"]) == [{"id": 0, "status": "error"}]

    async def sync_call_inside_a_loop():
        return pack.call("fetch", {"url": "https://example.test/api"})

    with pytest.raises(RuntimeError, match="acall"):
        asyncio.run(sync_call_inside_a_loop())


def test_shell_and_object_results_render_for_the_model(off):
    def run(cmd: str) -> dict:
        """Run a command."""
        return {"stdout": "done\n", "stderr": "warning: slow\n", "exit_code": 1}

    def stats() -> dict:
        """Small stats."""
        return {"ok": 3}

    pack = ToolPack(off, [run, stats])
    out = pack.call("run", {"cmd": "make"})
    assert out.text == "done\n\n[stderr]\nwarning: slow\n\n[exit code 1]"
    assert out.structured == {"stdout": "done\n", "stderr": "warning: slow\n", "exit_code": 1}
    assert pack.call("stats", {}).structured == {"result": {"ok": 3}}


def test_small_results_no_json_reads_reach_the_model_whole(off):
    """A small cycle, an integer of 5,000 digits and a few bytes that are not UTF-8 fit, so they are not
    stored; the first two made the call raise, the bytes reached the model as U+FFFD, unsaid."""
    def cycle() -> dict:
        """A cycle."""
        d = {"a": 1}
        d["self"] = d
        return d

    def huge() -> dict:
        """A big number."""
        return {"n": 10**5000}

    def png() -> bytes:
        """Bytes."""
        return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"

    pack = ToolPack(off, [cycle, huge, png])
    out = pack.call("cycle", {})
    assert not out.is_error and out.text == "{'a': 1, 'self': {...}}"
    out = pack.call("huge", {})
    assert not out.is_error and out.text == '{"n": 1' + "0" * 5000 + "}"  # exactly, as stored ones are
    out = pack.call("png", {})
    assert not out.is_error and "\ufffd" not in out.text and out.structured["kind"] == "binary"
    assert b"".join(off.iter_raw(out.structured["artifact_id"])) == png()


# -- artifact:// arguments --------------------------------------------------------------------------


@pytest.fixture
def stored(off):
    doc = {"items": [{"id": i, "level": "error" if i % 100 == 0 else "info"} for i in range(2000)]}
    return {"log": off.put(BIG_LOG, tool="build_log").artifact_id, "doc": off.put(doc, tool="api").artifact_id}


def test_artifact_arguments_are_off_by_default(off, stored):
    out = ToolPack(off, [count_lines]).call("count_lines", {"text": f"artifact://{stored['log']}"})
    assert out.text == "1"  # the literal string: nothing was resolved


def test_artifact_arguments_resolve_whole_content_and_jmespath_parts(off, stored):
    pack = ToolPack(off)
    pack.add(count_lines, artifact_args=True)
    pack.add(sum_values, artifact_args=True)
    assert "artifact://<id>" in pack.get("count_lines").description
    assert pack.call("count_lines", {"text": f"artifact://{stored['log']}"}).text == "6001"
    # a JSON part: text for a string argument, the value itself for a JSON-typed one
    assert pack.call("count_lines", {"text": f"artifact://{stored['doc']}#items[?level=='error'].id"}).text == "1"
    total = pack.call("sum_values", {"values": f"artifact://{stored['doc']}#items[?level=='error'].id"})
    assert total.text == str(sum(range(0, 2000, 100)))
    bad = pack.call("sum_values", {"values": f"artifact://{stored['doc']}#items[?"})
    assert bad.is_error and bad.structured["error"] == "invalid_query"
    # an unknown id: what ids look like, not `offload ls`, which the model cannot run
    unknown = pack.call("count_lines", {"text": "artifact://art_aaaaaaaaaaaaaaaa"})
    assert unknown.is_error and "Artifact ids are 'art_' and 16 letters" in unknown.text
    assert "offload ls" not in unknown.text


def test_artifact_arguments_are_size_limited_and_namespace_checked(off, sqlite_url, stored):
    ran = []

    def consume(text: str) -> str:
        """Consume text."""
        ran.append(text)
        return "ok"

    pack = ToolPack(off)
    pack.add(consume, artifact_args=True, max_artifact_bytes=10_000)
    out = pack.call("consume", {"text": f"artifact://{stored['log']}"})
    assert out.is_error and out.structured["error"] == "too_large" and "at most 10,000 bytes" in out.text
    assert pack.call("consume", {"text": f"artifact://{stored['doc']}#items[0]"}).text == "ok"
    assert ran == ['{"id":0,"level":"error"}']

    with Offloader(sqlite_url, namespace="other-team") as other:
        foreign = ToolPack(other)
        foreign.add(consume, artifact_args=True)
        out = foreign.call("consume", {"text": f"artifact://{stored['log']}"})
    assert out.is_error and out.structured["error"] == "not_found"
    assert len(ran) == 1


# -- OpenAI -----------------------------------------------------------------------------------------


def capture(answer):
    """An httpx2 transport standing in for the API: records each request body, answers with `answer(body)`."""
    seen = []

    def handle(request):
        body = json.loads(request.content)
        seen.append(body)
        return httpx2.Response(200, json=answer(body))

    return httpx2.MockTransport(handle), seen


def chat_reply(tool_calls):
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": tool_calls}}]}


def test_openai_chat_tools_and_tool_messages(pack):
    from openai import OpenAI
    from openai.types.chat import ChatCompletionToolMessageParam, ChatCompletionToolParam

    from offload.adapters.openai import chat_tools, run_chat_tool_calls

    calls = [{"id": "call_a", "type": "function", "function": {"name": "build_log", "arguments": '{"build": "9"}'}},
             {"id": "call_b", "type": "function", "function": {"name": "fetch_slice", "arguments": "{}"}}]
    transport, seen = capture(lambda body: chat_reply(calls))
    client = OpenAI(api_key="k", base_url="http://api.invalid/v1", http_client=httpx2.Client(transport=transport))
    tools = chat_tools(pack)
    for tool in tools:
        TypeAdapter(ChatCompletionToolParam).validate_python(tool)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools)
    assert seen[0]["tools"][1]["function"]["parameters"] == TOOLS["fetch_slice"]["input_schema"]

    messages = run_chat_tool_calls(pack, reply.choices[0].message)
    for message in messages:
        TypeAdapter(ChatCompletionToolMessageParam).validate_python(message)
    assert [m["tool_call_id"] for m in messages] == ["call_a", "call_b"]
    assert messages[0]["content"].startswith("[offload]")
    assert messages[1]["content"].startswith("Error: fetch_slice: artifact_id is required")
    whole = run_chat_tool_calls(pack, reply)  # the whole completion works too
    assert [m["tool_call_id"] for m in whole] == ["call_a", "call_b"] and "Same result as" in whole[0]["content"]

    # the SDK sends the assistant message and our tool messages back as they are
    client.chat.completions.create(model="m", tools=tools, messages=[
        {"role": "user", "content": "hi"}, reply.choices[0].message.model_dump(exclude_none=True), *messages])
    assert [m["role"] for m in seen[1]["messages"]] == ["user", "assistant", "tool", "tool"]


def test_openai_responses_tools_and_function_call_outputs(pack):
    from openai import OpenAI
    from openai.types.responses import FunctionToolParam, ResponseInputItemParam

    from offload.adapters.openai import arun_responses_tool_calls, responses_tools, run_responses_tool_calls

    output = [{"type": "reasoning", "id": "rs_1", "summary": []},
              {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "build_log",
               "arguments": '{"build": "3"}', "status": "completed"}]
    transport, seen = capture(lambda body: {"id": "r1", "object": "response", "created_at": 0, "model": "m",
                                            "status": "completed", "output": output, "tools": [],
                                            "parallel_tool_calls": True, "tool_choice": "auto"})
    client = OpenAI(api_key="k", base_url="http://api.invalid/v1", http_client=httpx2.Client(transport=transport))
    tools = responses_tools(pack)
    for tool in tools:
        TypeAdapter(FunctionToolParam).validate_python(tool)
    response = client.responses.create(model="m", input="hi", tools=tools)
    assert seen[0]["tools"][2]["name"] == "query_artifact"

    items = run_responses_tool_calls(pack, response)
    assert len(items) == 1 and items[0]["call_id"] == "call_1" and items[0]["type"] == "function_call_output"
    TypeAdapter(ResponseInputItemParam).validate_python(items[0])
    aid = json.loads(json.dumps(items[0]))["output"].split(" as ", 1)[1].split(" ", 1)[0]
    assert aid.startswith("art_")
    again = asyncio.run(arun_responses_tool_calls(pack, response.output))
    assert f"Same result as {aid}" in again[0]["output"]


def test_openai_agents_function_tools(pack):
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from offload.adapters.openai import agents_tools

    tools = agents_tools(pack)
    assert all(isinstance(t, FunctionTool) for t in tools)
    assert [t.name for t in tools] == ["build_log", "fetch_slice", "query_artifact"]
    assert tools[1].params_json_schema == TOOLS["fetch_slice"]["input_schema"] and not tools[1].strict_json_schema

    def context(name, arguments):
        return ToolContext(context=None, tool_name=name, tool_call_id="call_1", tool_arguments=arguments)

    text = asyncio.run(tools[0].on_invoke_tool(context("build_log", '{"build": "1"}'), '{"build": "1"}'))
    aid = text.split(" as ", 1)[1].split(" ", 1)[0]
    args = json.dumps({"artifact_id": aid, "offset": -1})
    page = asyncio.run(tools[1].on_invoke_tool(context("fetch_slice", args), args))
    assert page.startswith("99999 FATAL disk full on /dev/sda1\n[")


class Window(BaseModel):
    start: int
    end: int | None = None


class Circle(BaseModel):
    kind: Literal["circle"] = "circle"
    radius: float = 1.0


class Square(BaseModel):
    kind: Literal["square"] = "square"
    side: float


def search_logs(pattern: str, path: str = ".", max_count: int | None = None, tags: list[str] = (),
                order: Literal["newest", "oldest"] = "newest", window: Window | None = None,
                shape: Annotated[Circle | Square, Field(discriminator="kind")] = Circle()) -> dict:
    """Search the logs."""
    return {"pattern": pattern, "path": path, "max_count": max_count, "tags": list(tags), "order": order,
            "window": window and window.model_dump(), "shape": shape.model_dump()}


def _objects(schema):
    """Every object schema in `schema`, nested ones and definitions too."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


def test_strict_tools_require_every_argument_and_read_null_as_its_default(off):
    """OpenAI's strict mode takes every object closed and every property required: an argument the model
    may leave out is one it may give as null, and null runs the tool with the argument's default."""
    import jsonschema
    from agents.strict_schema import ensure_strict_json_schema
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam

    from offload.adapters.openai import agents_tools, chat_tools, responses_tools

    pack = ToolPack(off, [search_logs, build_log])
    chat, responses, agents = chat_tools(pack, strict=True), responses_tools(pack, strict=True), agents_tools(
        pack, strict=True)
    assert [t["function"]["strict"] for t in chat] == [True] * 4 and [t["strict"] for t in responses] == [True] * 4
    assert all(t.strict_json_schema for t in agents)
    assert responses_tools(pack)[0]["strict"] is False and "strict" not in chat_tools(pack)[0]["function"]
    for tool in chat:
        TypeAdapter(ChatCompletionToolParam).validate_python(tool)
    for tool, agent_tool in zip(responses, agents):
        TypeAdapter(FunctionToolParam).validate_python(tool)
        schema = tool["parameters"]
        # the Agents SDK's own strict conversion (FunctionTool runs it) changes nothing of ours
        assert ensure_strict_json_schema(json.loads(json.dumps(schema))) == schema
        assert agent_tool.params_json_schema == schema
        for node in _objects(schema):
            assert node["additionalProperties"] is False and node["required"] == list(node["properties"]), node
        assert "oneOf" not in json.dumps(schema)
    assert chat[0]["function"]["parameters"] == responses[0]["parameters"]

    schema = responses[0]["parameters"]
    nulls = {"pattern": "x", "path": None, "max_count": None, "tags": None, "order": None, "window": None,
             "shape": None}
    jsonschema.validate(nulls, schema)  # what a strict model may send
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**nulls, "pattern": None}, schema)  # a required argument takes no null
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"pattern": "x"}, schema)  # every argument is given
    out = pack.call("search_logs", nulls)
    assert not out.is_error, out.text
    assert out.structured["result"] == {"pattern": "x", "path": ".", "max_count": None, "tags": [],
                                        "order": "newest", "window": None, "shape": {"kind": "circle", "radius": 1.0}}
    given = {**nulls, "window": {"start": 3, "end": None}, "shape": {"kind": "square", "side": 2.0}}
    jsonschema.validate(given, schema)
    with pytest.raises(jsonschema.ValidationError):  # inside an argument, an optional field is required as it is
        jsonschema.validate({**nulls, "shape": {"kind": None, "radius": 2.0}}, schema)
    assert pack.call("search_logs", given).structured["result"]["window"] == {"start": 3, "end": None}
    # the companion tools read their nulls as their defaults already
    fetch = responses[2]["parameters"]
    assert fetch["required"] == ["artifact_id", "offset", "limit", "unit", "path"]
    ref = off.put(BIG_LOG, tool="build_log")
    args = {"artifact_id": ref.artifact_id, "offset": None, "limit": None, "unit": None, "path": None}
    jsonschema.validate(args, fetch)
    assert pack.call("fetch_slice", args).text.startswith("00000 step 0 ok")


def test_strict_tools_refuse_what_strict_mode_cannot_say(off):
    """An object of keys the tool chooses, or an argument of any value, has no strict schema that takes
    what the tool takes: an error names the tool and the argument, and strict=False still lists it."""
    from offload.adapters.openai import chat_tools, responses_tools

    def tag(name: str, **labels: str) -> str:
        """Tag."""

    def count(values: dict[str, int]) -> int:
        """Count."""

    def echo(value, times: int = 1) -> str:
        """Echo."""

    def first(values: list) -> str:
        """First."""

    def maybe(value: object | None = None) -> str:
        """Maybe."""

    def pair(point: tuple[int, str]) -> str:
        """Pair."""

    for fn, where in ((tag, "arguments takes keys"), (count, "arguments.values takes keys"),
                      (echo, "arguments.value takes any value"), (first, r"arguments.values\[\] takes any value"),
                      (maybe, "arguments.value takes any value"), (pair, "arguments.point uses 'prefixItems'")):
        pack = ToolPack(off, [fn], companions=False)
        with pytest.raises(ValueError, match=f"tool '{fn.__name__}': {where}"):
            responses_tools(pack, strict=True)
        assert chat_tools(pack)[0]["function"]["name"] == fn.__name__
    union = ToolPack(off, companions=False)
    union.add(lambda **kw: "", name="either", parameters={"anyOf": [{"type": "object", "properties": {}}]})
    with pytest.raises(ValueError, match="tool 'either': OpenAI's strict mode needs the arguments to be one object"):
        responses_tools(union, strict=True)


def rename(name: Annotated[str, Field(min_length=2, max_length=8)], tags: set[str] = frozenset(),
           where: pathlib.Path = pathlib.Path("."), when: datetime.date | None = None) -> str:
    """Rename."""
    return name


def test_strict_tools_leave_out_the_constraints_strict_mode_does_not_take(off):
    """minLength, maxLength, uniqueItems and a format of its own are left out of a strict schema; the
    signature still checks them when the tool is called. A tool of no arguments is one closed object."""
    from offload.adapters.openai import responses_tools

    pack = ToolPack(off, [rename], companions=False)
    pack.add(lambda: "now", name="now", parameters={"type": "object", "properties": {}})
    props = responses_tools(pack, strict=True)[0]["parameters"]["properties"]
    assert props["name"] == {"type": "string"}
    assert props["tags"] == {"default": [], "items": {"type": "string"}, "type": ["array", "null"]}
    assert props["where"] == {"default": ".", "type": ["string", "null"]}
    assert props["when"]["anyOf"][0] == {"format": "date", "type": "string"}  # a format strict mode takes
    assert responses_tools(pack, strict=True)[1]["parameters"] == {
        "type": "object", "properties": {}, "additionalProperties": False, "required": []}
    out = pack.call("rename", {"name": "x", "tags": None, "where": None, "when": None})
    assert out.is_error and "at least 2 characters" in out.text


def test_a_tool_with_its_own_schema_reads_null_for_an_argument_it_does_not_require_as_left_out(off):
    seen = []

    def lookup(key, limit=10, note=None):
        seen.append((key, limit, note))
        return "ok"

    pack = ToolPack(off, companions=False)
    pack.add(lookup, parameters={"type": "object", "properties": {
        "key": {"type": "string"}, "limit": {"type": "integer"}, "note": {"type": ["string", "null"]}},
        "required": ["key"], "additionalProperties": False})
    assert pack.call("lookup", {"key": "a", "limit": None, "note": None}).text == "ok"
    assert seen == [("a", 10, None)]  # limit's null is its default; note takes null, and gets it
    pack.add(lookup, name="lookup_artifacts", parameters=pack.get("lookup").parameters, artifact_args=True)
    assert pack.call("lookup_artifacts", {"key": "b", "limit": None}).text == "ok"
    assert seen[-1] == ("b", 10, None)
    from offload.adapters.openai import responses_tools
    strict = responses_tools(pack, strict=True)[0]["parameters"]["properties"]
    assert strict["limit"] == {"type": ["integer", "null"]} and strict["note"] == {"type": ["string", "null"]}


# -- Anthropic --------------------------------------------------------------------------------------


def test_anthropic_tools_and_tool_result_blocks(pack):
    from anthropic import Anthropic
    from anthropic.types import ToolParam, ToolResultBlockParam

    from offload.adapters.anthropic import arun_tool_uses, tool_result_message, tools

    content = [{"type": "text", "text": "Let me look."},
               {"type": "tool_use", "id": "toolu_1", "name": "build_log", "input": {"build": "5"}},
               {"type": "tool_use", "id": "toolu_2", "name": "query_artifact",
                "input": {"artifact_id": "art_zzzzzzzzzzzzzzzz", "grep": "x"}}]
    transport, seen = capture(lambda body: {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}})
    client = Anthropic(api_key="k", base_url="http://api.invalid", http_client=httpx2.Client(transport=transport))
    definitions = tools(pack)
    for tool in definitions:
        TypeAdapter(ToolParam).validate_python(tool)
    message = client.messages.create(model="m", max_tokens=100, tools=definitions,
                                      messages=[{"role": "user", "content": "why?"}])
    assert seen[0]["tools"][0]["input_schema"]["required"] == ["build"]

    reply = tool_result_message(pack, message)
    blocks = reply["content"]
    for block in blocks:
        TypeAdapter(ToolResultBlockParam).validate_python(block)
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2"]
    assert blocks[0]["content"].startswith("[offload]") and "is_error" not in blocks[0]
    assert blocks[1]["is_error"] is True and "No artifact 'art_zzzzzzzzzzzzzzzz'" in blocks[1]["content"]
    again = asyncio.run(arun_tool_uses(pack, message.content))
    assert "Same result as" in again[0]["content"]

    client.messages.create(model="m", max_tokens=100, tools=definitions, messages=[
        {"role": "user", "content": "why?"}, {"role": "assistant", "content": message.content}, reply])
    assert seen[1]["messages"][2]["content"][1]["tool_use_id"] == "toolu_2"


# -- LangChain: the standard tool tests of langchain-tests ------------------------------------------

_LANGCHAIN: dict = {}


def langchain_setup() -> dict:
    """One store for the standard test classes (they build their tool from a class property)."""
    if not _LANGCHAIN:
        import tempfile

        from offload.adapters.langchain import tools

        folder = tempfile.mkdtemp(prefix="offload-langchain-")
        off = Offloader(f"sqlite:///{folder}/store.db")
        pack = ToolPack(off, [build_log], session="lc")
        _LANGCHAIN.update(folder=folder, off=off, tools={t.name: t for t in tools(pack)},
                          artifact_id=off.put(BIG_LOG, tool="build_log").artifact_id)
    return _LANGCHAIN


@pytest.fixture(scope="module", autouse=True)
def _langchain_cleanup():
    yield
    if _LANGCHAIN:
        import shutil

        _LANGCHAIN["off"].close()
        shutil.rmtree(_LANGCHAIN["folder"], ignore_errors=True)
        _LANGCHAIN.clear()


try:
    from langchain_tests.integration_tests import ToolsIntegrationTests
    from langchain_tests.unit_tests import ToolsUnitTests
except ImportError:  # pragma: no cover - the test extra installs it
    ToolsIntegrationTests = ToolsUnitTests = object


class _Standard:
    name = ""

    @property
    def tool_constructor(self):
        return langchain_setup()["tools"][self.name]

    @property
    def tool_invoke_params_example(self) -> dict:
        aid = langchain_setup()["artifact_id"]
        return {"fetch_slice": {"artifact_id": aid, "offset": -3},
                "query_artifact": {"artifact_id": aid, "grep": "FATAL", "context": 1},
                "build_log": {"build": "12", "tail": 2}}[self.name]


class _Integration(_Standard, ToolsIntegrationTests):
    pytestmark = pytest.mark.anyio  # runs the async standard tests (anyio's plugin; no override allowed)


class TestFetchSliceUnit(_Standard, ToolsUnitTests):
    name = "fetch_slice"


class TestFetchSliceIntegration(_Integration):
    name = "fetch_slice"


class TestQueryArtifactUnit(_Standard, ToolsUnitTests):
    name = "query_artifact"


class TestQueryArtifactIntegration(_Integration):
    name = "query_artifact"


class TestUserToolUnit(_Standard, ToolsUnitTests):
    name = "build_log"


class TestUserToolIntegration(_Integration):
    name = "build_log"


def test_langchain_tool_messages_carry_text_and_the_structured_result(pack):
    from langchain_core.messages import ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from offload.adapters.langchain import tools

    by_name = {t.name: t for t in tools(pack)}
    assert convert_to_openai_tool(by_name["query_artifact"])["function"]["parameters"] == \
        TOOLS["query_artifact"]["input_schema"]
    message = by_name["build_log"].invoke({"name": "build_log", "args": {"build": "2"}, "id": "c1",
                                           "type": "tool_call"})
    assert isinstance(message, ToolMessage) and message.content.startswith("[offload]")
    aid = message.artifact["artifact_id"]
    page = asyncio.run(by_name["fetch_slice"].ainvoke({"name": "fetch_slice", "id": "c2", "type": "tool_call",
                                                       "args": {"artifact_id": aid, "offset": -1}}))
    assert page.artifact["content"] == "99999 FATAL disk full on /dev/sda1" and page.status == "success"
    failed = by_name["fetch_slice"].invoke({"name": "fetch_slice", "id": "c3", "type": "tool_call",
                                            "args": {"artifact_id": aid, "unit": "pages"}})
    assert failed.status == "error" and failed.content.startswith("Error:")


def test_langchain_passes_arguments_named_as_its_own_parameters(off):
    # StructuredTool's `_run` takes config and run_manager: LangChain wrote its own values over a model's
    # arguments of those names (or "Field required" when required), and `self` raised out of invoke
    from offload.adapters.langchain import tools

    def echo(config: str, run_manager: str = "-", self: str = "-", callbacks: str = "-") -> str:
        """Say what came."""
        return f"{config} {run_manager} {self} {callbacks}"

    tool = {t.name: t for t in tools(ToolPack(off, [echo]))}["echo"]
    call = {"name": "echo", "id": "c1", "type": "tool_call",
            "args": {"config": "C", "run_manager": "R", "self": "S", "callbacks": "K"}}
    assert tool.invoke(call).content == "C R S K"
    assert asyncio.run(tool.ainvoke({**call, "args": {"config": "C", "self": "S"}})).content == "C - S -"
    missing = tool.invoke({**call, "args": {"self": "S"}})
    assert missing.status == "error" and "config" in missing.content


# -- packaging --------------------------------------------------------------------------------------


def test_the_core_imports_no_agent_sdk():
    code = ("import sys, offload, offload.offloader, offload.cli, offload.adapters, offload.adapters.openai, "
            "offload.adapters.anthropic, offload.adapters.mcp_server\n"
            "sdks = ('openai', 'anthropic', 'langchain_core', 'mcp', 'agents')\n"
            "loaded = sorted(m for m in sdks if m in sys.modules)\n"
            "print(loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
