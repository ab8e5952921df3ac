"""The context budget guard (issue 4): `fit_context` over OpenAI Chat, OpenAI Responses and Anthropic
conversations. Property tests over random conversations (long chats and single-prompt agent loops),
the strategies one by one, and a 400-message conversation of real tool results up to 2 MB.

Every check reads what left the context back from the store and compares it with the caller's messages.
"""

from __future__ import annotations

import base64
import copy
import functools
import importlib.metadata
import json
import logging
import re
import struct
import subprocess
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from offload import ContextBudgetExceeded, InvalidArgument, Offloader
from offload.context import FORMATS, guard_for

APIS = ["openai", "openai-responses", "anthropic"]
ART = re.compile(r"art_[a-z2-7]{16}")
STDLIB = Path(sysconfig.get_paths()["stdlib"])


# -- real data ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def corpus() -> str:
    """Some MB of real text: the stdlib's Python sources, one after another."""
    parts, size = [], 0
    for path in sorted(STDLIB.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(f"# ==> {path.name} <==\n{text}")
        size += len(text)
        if size > 3_000_000:
            break
    return "".join(parts)


def text_of(size: int, seed: int) -> str:
    data = corpus()
    start = (seed * 7919) % (len(data) - size) if size < len(data) else 0
    return data[start:start + size]


def png(width: int = 24, height: int = 16, shade: int = 0) -> bytes:
    """A real PNG (a gradient), made here so the test needs no image file."""
    rows = b"".join(b"\x00" + b"".join(bytes(((x * 10 + shade) % 256, (y * 15) % 256, 128)) for x in range(width))
                    for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_b64(shade: int = 0) -> str:
    return base64.b64encode(png(shade=shade)).decode()


# -- conversations, written once and rendered in each API's shape ---------------------------------

@dataclass
class Call:
    name: str
    args: dict
    result: Any  # str, or a list of ("text", str) / ("image", base64) parts


@dataclass
class Turn:
    kind: str  # "user" | "assistant" | "tools"
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    image: str | None = None  # a user message may carry an image


def render(api: str, turns: list[Turn], system: str | None = "You are a careful coding agent.",
           first_call: int = 0) -> list[dict]:
    out: list[dict] = []
    if system is not None:
        role = "developer" if api == "openai-responses" else "system"
        out.append({"role": role, "content": system})
    n = first_call
    for turn in turns:
        if turn.kind == "user":
            out.append(_user(api, turn))
        elif turn.kind == "assistant":
            out.append(_assistant_text(api, turn.text))
        else:
            ids = [f"call_{n + k}" for k in range(len(turn.calls))]
            n += len(turn.calls)
            out.extend(_tool_turn(api, turn, ids))
    return out


def _user(api: str, turn: Turn) -> dict:
    if turn.image is None:
        return {"role": "user", "content": turn.text}
    if api == "openai":
        return {"role": "user", "content": [{"type": "text", "text": turn.text}, {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{turn.image}"}}]}
    if api == "openai-responses":
        return {"role": "user", "content": [{"type": "input_text", "text": turn.text}, {
            "type": "input_image", "image_url": f"data:image/png;base64,{turn.image}"}]}
    return {"role": "user", "content": [{"type": "text", "text": turn.text}, {
        "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": turn.image}}]}


def _assistant_text(api: str, text: str) -> dict:
    if api == "openai-responses":
        return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return {"role": "assistant", "content": text}


def _result_content(api: str, result: Any) -> Any:
    if isinstance(result, str):
        return result
    if api == "openai":  # Chat Completions tool messages hold text parts only
        return [{"type": "text", "text": v} for k, v in result if k == "text"]
    if api == "openai-responses":
        return [{"type": "input_text", "text": v} if k == "text" else
                {"type": "input_image", "image_url": f"data:image/png;base64,{v}"} for k, v in result]
    return [{"type": "text", "text": v} if k == "text" else
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": v}} for k, v in result]


def _tool_turn(api: str, turn: Turn, ids: list[str]) -> list[dict]:
    calls = list(zip(ids, turn.calls))
    if api == "openai":
        return [{"role": "assistant", "content": turn.text or None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.args)}}
            for i, c in calls]}] + [{"role": "tool", "tool_call_id": i, "content": _result_content(api, c.result)}
                                    for i, c in calls]
    if api == "openai-responses":
        items: list[dict] = [{"type": "reasoning", "id": f"rs_{ids[0]}", "summary": [
            {"type": "summary_text", "text": turn.text or "Calling tools."}]}]
        items += [{"type": "function_call", "call_id": i, "name": c.name, "arguments": json.dumps(c.args)}
                  for i, c in calls]
        items += [{"type": "function_call_output", "call_id": i, "output": _result_content(api, c.result)}
                  for i, c in calls]
        return items
    blocks = ([{"type": "text", "text": turn.text}] if turn.text else []) + [
        {"type": "tool_use", "id": i, "name": c.name, "input": c.args} for i, c in calls]
    return [{"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i,
                                          "content": _result_content(api, c.result)} for i, c in calls]}]


# -- reading back what left the context --------------------------------------------------------------

def raw(off: Offloader, artifact_id: str) -> bytes:
    return b"".join(off.iter_raw(artifact_id))


def is_note(msg: dict) -> bool:
    return msg.get("role") == "user" and isinstance(msg.get("content"), str) and \
        msg["content"].startswith("[offload] Dropped to fit the context window")


def restore_text(off: Offloader, text: str, keep: set[str]) -> str:
    if text in keep or not text.startswith("[offload] "):
        return text
    return raw(off, ART.search(text).group()).decode("utf-8")


def restore_block(off: Offloader, block: Any, keep: set[str]) -> Any:
    text = block.get("text") if isinstance(block, dict) else None
    if not isinstance(text, str) or text in keep or not text.startswith("[offload] "):
        return block
    data = raw(off, ART.search(text).group())
    if " block of this result " in text:
        return json.loads(data)
    return {**block, "text": data.decode("utf-8")}


def restore(off: Offloader, api: str, messages: list[dict], keep: set[str] = frozenset()) -> list[dict]:
    """The caller's conversation again, from a fitted one: notes and placeholders read back from the store."""
    fmt = FORMATS[api]
    out = []
    for msg in messages:
        if is_note(msg):
            span = json.loads(raw(off, ART.search(msg["content"]).group()))
            out.extend(restore(off, api, span, keep))
            continue
        contents = {}
        for position, slot in enumerate(fmt.results(msg)):
            if isinstance(slot.content, str):
                contents[position] = restore_text(off, slot.content, keep)
            elif isinstance(slot.content, list):
                contents[position] = [restore_block(off, b, keep) for b in slot.content]
        out.append(fmt.with_results(msg, contents))
    return out


def side(api: str, msg: dict) -> str:
    """u: a user (or system) message, a: the assistant's side, r: a tool result."""
    kind = msg.get("type")
    if kind == "function_call_output" or msg.get("role") == "tool":
        return "r"
    if msg.get("role") == "user" and isinstance(msg.get("content"), list) and any(
            b.get("type") == "tool_result" for b in msg["content"]):
        return "r"
    if kind in ("reasoning", "function_call") or msg.get("role") == "assistant":
        return "a"
    return "u"


def groups_of(api: str, messages: list[dict]) -> list[list[int]]:
    """The groups of a well-formed conversation, written apart from the guard's own grouping."""
    groups: list[list[int]] = []
    previous = "u"
    for i, msg in enumerate(messages):
        s = side(api, msg)
        if i == 0 or s == "u" or (s == "a" and previous in ("u", "r")):
            groups.append([i])
        else:
            groups[-1].append(i)
        previous = s
    return groups


def call_ids(api: str, msg: dict) -> tuple[list[str], list[str]]:
    """(calls made, results carried) by one message."""
    fmt = FORMATS[api]
    return [c.call_id for c in fmt.calls(msg)], [s.call_id for s in fmt.results(msg)]


def check(off: Offloader, api: str, original: list[dict], fitted, keep: set[str] = frozenset()) -> list[int]:
    """Every invariant of a fit; returns the positions (in `original`) of the messages kept."""
    messages, report = fitted.messages, fitted.report
    guard = guard_for(off)
    # what the guard holds each kept message to: its estimate, or the real count when that is larger
    tokens = sum(guard.facts(m, FORMATS[api]).tokens for m in messages)
    assert sum(guard.count_message(m) for m in messages) <= tokens == report.tokens_after <= report.budget
    # the system prompt first and unchanged, the caller's last message last
    if side(api, original[0]) == "u" and original[0].get("role") in ("system", "developer"):
        assert messages[0] == original[0]
    assert not is_note(messages[-1])
    assert restore(off, api, [messages[-1]], keep) == [original[-1]]
    # no orphan call or result
    seen_calls: set[str] = set()
    answered: set[str] = set()
    for msg in messages:
        calls, results = call_ids(api, msg)
        assert set(results) <= seen_calls, f"orphan result {results}"
        seen_calls |= set(calls)
        answered |= set(results)
    assert seen_calls == answered, f"calls without their result: {seen_calls - answered}"
    # nothing lost: the fitted conversation reads back to the caller's, byte for byte
    assert restore(off, api, messages, keep) == original
    kept, j = [], 0
    for msg in messages:
        if is_note(msg):
            j += len(restore(off, api, [msg], keep))
        else:
            kept.append(j)
            j += 1
    assert j == len(original)
    # no split group; the most recent one whole
    kept_set = set(kept)
    for g in groups_of(api, original):
        assert set(g) <= kept_set or not set(g) & kept_set, f"group {g} split"
    assert groups_of(api, original)[-1][-1] in kept_set
    return kept


def artifact_count(off: Offloader) -> int:
    total, cursor = 0, None
    while True:
        rows, cursor = off.list(limit=500, cursor=cursor)
        total += len(rows)
        if cursor is None:
            return total


@pytest.fixture
def soff(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


def tools_turn(*results: Any, text: str = "") -> Turn:
    return Turn("tools", text, [Call("read_file", {"path": f"/src/{k}.py"}, r) for k, r in enumerate(results)])


# -- the strategies one by one -----------------------------------------------------------------------

@pytest.mark.parametrize("api", APIS)
def test_a_conversation_within_budget_comes_back_as_it_is(soff, api):
    original = render(api, [Turn("user", "hello"), tools_turn(text_of(3000, 1)), Turn("assistant", "done")])
    fitted = soff.fit_context(original, 128_000, api=api)
    assert fitted.messages == original and fitted.messages is not original
    assert all(a is b for a, b in zip(fitted.messages, original))
    assert not fitted.report.changed and artifact_count(soff) == 0


@pytest.mark.parametrize("api", APIS)
def test_a_result_over_the_cap_becomes_its_reference(soff, api):
    big = text_of(400_000, 2)
    original = render(api, [Turn("user", "read it"), tools_turn(big)])
    before = copy.deepcopy(original)
    fitted = soff.fit_context(original, 128_000, api=api)
    assert original == before
    check(soff, api, original, fitted)
    assert fitted.report.strategies == ["offload"]
    result = FORMATS[api].results(fitted.messages[-1])[0].content
    assert "was too large for the context and was stored whole as" in result  # the full reference
    aid = ART.search(result).group()
    page = soff.fetch_slice(aid, offset=-3)
    assert page["content"] == "\n".join(big.split("\n")[-3:])


@pytest.mark.parametrize("api", APIS)
def test_older_results_become_placeholders_oldest_first(soff, api):
    turns = [Turn("user", "look around")] + [tools_turn(text_of(6000, k)) for k in range(8)]
    original = render(api, turns)
    fitted = soff.fit_context(original, 16_000, api=api)
    check(soff, api, original, fitted)
    assert fitted.report.strategies == ["placeholder"]
    contents = [s.content for m in fitted.messages for s in FORMATS[api].results(m)]
    replaced = [c.startswith("[offload] Removed") for c in contents]
    assert replaced == sorted(replaced, reverse=True) and replaced[0] and not replaced[-1]
    assert all(len(c) < 400 and "\n" not in c for c in contents if c.startswith("[offload]"))  # one line


@pytest.mark.parametrize("api", APIS)
def test_dropped_groups_are_one_stored_span_named_by_a_note(soff, api):
    turns = [Turn("user", "the task: " + text_of(300, 3))]
    for k in range(30):
        turns += [Turn("assistant", text_of(400, k)), Turn("user", text_of(300, k + 50))]
    original = render(api, turns)
    fitted = soff.fit_context(original, 4_000, api=api)
    kept = check(soff, api, original, fitted)
    assert fitted.report.strategies == ["drop"]
    assert kept[:2] == [0, 1]  # the system prompt and the first user message stay
    notes = [m for m in fitted.messages if is_note(m)]
    assert len(notes) == 1 and fitted.messages[2] is notes[0] and "\n" not in notes[0]["content"]
    aid = ART.search(notes[0]["content"]).group()
    assert json.loads(raw(soff, aid)) == original[2:kept[2]]
    page = soff.fetch_slice(aid, unit="items", offset=0, limit=2)  # the note's own instructions work
    assert json.loads(page["content"]) == original[2:4]


def test_the_first_user_message_goes_last_and_only_when_nothing_else_makes_room(soff):
    original = render("openai", [Turn("user", text_of(9000, 4)), Turn("assistant", "ok"), Turn("user", "and?")])
    fitted = soff.fit_context(original, 4_000)
    kept = check(soff, "openai", original, fitted)
    assert kept == [0, 2, 3] and is_note(fitted.messages[1])  # the groups after it stay when they fit


@pytest.mark.parametrize("api", APIS)
def test_a_first_user_message_too_big_to_keep_takes_only_itself(soff, api):
    """When the first user message had to go, every group after it went too: the small tool turns the
    budget had room for were dropped with it."""
    turns = [Turn("user", text_of(40_000, 6))] + [tools_turn(f"result {k}: " + "ok " * 40) for k in range(3)]
    original = render(api, turns + [Turn("user", "next?")])
    fitted = soff.fit_context(original, 8_000, api=api)
    kept = check(soff, api, original, fitted)
    assert len(fitted.report.actions) == 1 and fitted.report.actions[0].strategy == "drop"
    assert fitted.report.actions[0].messages == list(range(kept[0] + 1, kept[0] + 2))  # the first user message alone
    assert len(kept) == len(original) - 1


@pytest.mark.parametrize("api", APIS)
def test_too_big_a_last_turn_is_a_clear_error_with_the_sizes(soff, api):
    original = render(api, [Turn("user", "hi"), Turn("assistant", "ok"), Turn("user", text_of(30_000, 5))])
    before = copy.deepcopy(original)
    with pytest.raises(ContextBudgetExceeded) as err:
        soff.fit_context(original, 8_000, api=api)
    assert err.value.budget == 6_000 and err.value.needed > 6_000
    assert "most recent turn" in str(err.value) and f"about {err.value.needed:,} tokens" in str(err.value)
    assert "most recent turn: about " in str(err.value)  # estimated figures say so
    assert original == before


def test_the_reports_figures_say_when_they_are_estimates(sqlite_url):
    """The guard counts with the estimate unless given a tokenizer; its summary and its error printed the
    estimate's figures as plain numbers (a system prompt of 4,011 real tokens shown as "6,711 tokens")."""
    turns = [Turn("user", "go")] + [tools_turn(text_of(20_000, k)) for k in range(3)] + [Turn("user", "next")]
    for tokenizer, labelled in ((None, True), ("o200k_base", False)):
        with Offloader(sqlite_url, tokenizer=tokenizer) as off:
            report = off.fit_context(render("openai", turns), 8_000).report
            assert report.tokens_estimated is labelled
            assert ("(estimated)" in report.summary()) is labelled and ("about" in report.summary()) is labelled
            with pytest.raises(ContextBudgetExceeded) as err:
                off.fit_context([{"role": "system", "content": "You are " * 2000}, {"role": "user", "content": "x"}],
                                3_000)
            assert ("System prompt: about " in str(err.value)) is labelled


@pytest.mark.parametrize("api", APIS)
def test_parallel_results_of_the_latest_turn_share_what_it_may_take(soff, api):
    """Four results of ~2,200 tokens answer the last turn's four calls: each is under the cap (2,400 of an
    8,000 window) but together over the budget (6,000). They become references, not an error."""
    results = [text_of(6_000, 40 + k) for k in range(4)]
    original = render(api, [Turn("user", "compare the four files"), tools_turn(*results)])
    guard = guard_for(soff)
    cap = int(8_000 * soff.settings.window_share)
    slots = [slot for m in original for slot in FORMATS[api].results(m)]
    assert len(slots) == 4 and all(soff.counter.count(s.content) < cap for s in slots)
    assert sum(guard.count_message(m) for m in original) > 6_000
    fitted = soff.fit_context(original, 8_000, api=api)
    check(soff, api, original, fitted)
    assert fitted.report.strategies == ["offload"]
    shown = [slot.content for m in fitted.messages for slot in FORMATS[api].results(m)]
    offloaded = [k for k, text in enumerate(shown) if text != results[k]]
    assert offloaded and all(shown[k].startswith("[offload] ") and ART.search(shown[k]) for k in offloaded)
    size = [soff.counter.count(text) for text in results]  # the largest give way first
    assert min(size[k] for k in offloaded) >= max([size[k] for k in range(4) if k not in offloaded], default=0)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("results, size", [(14, 12_000), (20, 3_000)])
def test_many_parallel_results_of_the_latest_turn_fit_whatever_their_size(soff, api, results, size):
    """14 results each over the cap (their references, together, are still over the budget: they become
    placeholders), or 20 small ones after a first user message that may have to give way to a note."""
    original = render(api, [Turn("user", "go"), tools_turn(*(text_of(size, 70 + k) for k in range(results)))])
    fitted = soff.fit_context(original, 12_000, api=api)
    check(soff, api, original, fitted)
    assert "offload" in fitted.report.strategies or "placeholder" in fitted.report.strategies


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_reused_call_id_labels_each_result_with_its_own_call(soff, api):
    """Some OpenAI-compatible providers number calls from call_0 in every turn: each result is the answer
    of the nearest call before it with that id, and is stored under that call's tool and args."""
    original = render(api, [Turn("user", "go")])
    for k in range(6):
        turn = render(api, [Turn("tools", "", [Call(f"tool{k}", {"r": k}, text_of(4_000, 50 + k))])], system=None)
        original += turn
    fitted = soff.fit_context(original, 6_000, api=api)
    check(soff, api, original, fitted)
    rows = soff.list(limit=50)[0]
    assert len(rows) >= 2 and len({row["tool"] for row in rows}) == len(rows)  # each its own call's
    assert all(row["args"] == {"r": int(row["tool"][4:])} for row in rows)
    for message in fitted.messages:
        for slot in FORMATS[api].results(message):
            text = slot.content if isinstance(slot.content, str) else ""
            if text.startswith("[offload] Removed"):
                aid = ART.search(text).group()
                assert f"`{soff.get(aid)['tool']}`" in text


def test_sdk_blocks_inside_a_dict_message_are_read_and_stored_as_their_dicts(soff):
    """The Anthropic docs keep the reply as {"role": "assistant", "content": message.content}: a dict
    holding the SDK's block objects. Their tool calls are seen, and a dropped span is stored as JSON
    messages, not as the objects' repr."""
    from anthropic.types import TextBlock, ToolUseBlock

    original: list[Any] = [{"role": "user", "content": "summarize the files"}]
    for k in range(24):
        original.append({"role": "assistant", "content": [
            TextBlock(type="text", text="reading"),
            ToolUseBlock(type="tool_use", id=f"toolu_{k}", name="read_file", input={"path": f"/f{k}"})]})
        original.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": text_of(3_000, 60 + k)}]})
    original.append({"role": "user", "content": "and?"})
    fitted = soff.fit_context(original, 2_500, api="anthropic")
    assert "drop" in fitted.report.strategies
    rows = soff.list(limit=100)[0]
    assert {row["tool"] for row in rows} >= {"read_file", "fit_context"}
    spans = [row for row in rows if row["tool"] == "fit_context"]
    for row in spans:
        messages = json.loads(raw(soff, row["id"]))
        blocks = [b for m in messages if m["role"] == "assistant" for b in m["content"]]
        assert blocks and all(isinstance(b, dict) and b["type"] in ("text", "tool_use") for b in blocks)
    for row in rows:
        if row["tool"] == "read_file":
            assert row["args"]["path"].startswith("/f")
    assert fitted.messages[-1] is original[-1]


def test_a_result_already_in_the_store_is_named_not_stored_again(soff):
    data = text_of(20_000, 6)
    stored = soff.put(data, tool="read_file")
    original = render("openai", [Turn("user", "x"), tools_turn(data), tools_turn("small"), Turn("user", "next")])
    count = artifact_count(soff)
    fitted = soff.fit_context(original, 8_000)
    check(soff, "openai", original, fitted)
    assert stored.artifact_id in fitted.messages[3]["content"]
    assert artifact_count(soff) == count
    assert [a.reused for a in fitted.report.actions] == [True]


def test_a_reference_in_the_input_is_never_stored_again(soff):
    data = text_of(200_000, 7)
    reference = soff.process("grep", data)
    ref = str(reference)
    original = render("openai", [Turn("user", "x"), tools_turn(ref)] + [tools_turn(text_of(9000, k)) for k in range(3)]
                      + [Turn("user", "next")])
    count = artifact_count(soff)
    roomy = soff.fit_context(original, 40_000)
    assert roomy.messages[3]["content"] == ref and artifact_count(soff) == count  # kept, when it fits
    fitted = soff.fit_context(original, 12_000)
    # the oldest result, a reference: it gives way to a placeholder naming its own artifact, stored once
    placeholder = fitted.messages[3]["content"]
    assert placeholder.startswith("[offload] Removed") and reference.artifact_id in placeholder
    assert raw(soff, reference.artifact_id) == data.encode()
    assert fitted.messages[5]["content"].startswith("[offload] Removed")
    named = {aid for action in fitted.report.actions for aid in action.artifact_ids}
    assert reference.artifact_id in named and artifact_count(soff) == count + len(named) - 1



@pytest.mark.parametrize("head", ["[offload] see art_abc123 in the log\n", "[offload] see art_abcdefghijklmnop\n"])
def test_a_result_that_only_starts_like_a_reference_is_fitted(soff, head):
    """A log or transcript read back may start with "[offload] " and name an artifact; kept as offload's
    own, a 37,000-token result was exempt from the cap and the fit failed."""
    body = head + "\n".join(f"2026-01-01 INFO step {i} ok" for i in range(2000))
    original = render("openai", [Turn("user", "read the log"), tools_turn(body)])
    fitted = soff.fit_context(original, 32_000)
    check(soff, "openai", original, fitted)
    assert fitted.report.strategies == ["offload"] and fitted.report.tokens_after < 2_000


def test_parallel_tool_use_stays_one_group(soff):
    turns = [Turn("user", "compare them")]
    turns += [tools_turn(*(text_of(2500, 10 * k + j) for j in range(3)), text="reading three") for k in range(6)]
    turns.append(Turn("user", "which is best?"))
    original = render("anthropic", turns)
    assert len(original[2]["content"]) == 4 and len(original[3]["content"]) == 3  # text + 3 tool_use; 3 results
    fitted = soff.fit_context(original, 3_000, api="anthropic")
    kept = check(soff, "anthropic", original, fitted)
    assert "drop" in fitted.report.strategies and len(kept) < len(original)


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_blocks_of_a_result_share_the_cap_in_proportion_and_images_stay_whole(soff, api):
    image = image_b64()
    result = [("text", text_of(60_000, 11)), ("text", text_of(1200, 12)), ("image", image)]
    original = render(api, [Turn("user", "look"), tools_turn(result)])
    fitted = soff.fit_context(original, 20_000, api=api)
    check(soff, api, original, fitted)
    blocks = FORMATS[api].results(fitted.messages[-1])[0].content
    assert blocks[0]["text"].startswith("[offload] ")  # the big block: over its share
    assert blocks[1] == _result_content(api, result)[1]  # the small one: within its share
    assert blocks[2] == _result_content(api, result)[2]  # the image: kept, byte for byte


def _images_kept(api: str, messages: list[dict]) -> int:
    return sum(1 for m in messages for r in FORMATS[api].results(m) if isinstance(r.content, list)
               for block in r.content if block.get("type") in ("image", "input_image"))


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_images_over_the_cap_give_way_one_at_a_time(soff, api):
    """Four screenshots in one result over its cap (2,400 tokens of an 8,000 window) all became
    placeholders, though one fits; four parallel results of one each, in Anthropic's one user message,
    all went though three fit the budget."""
    shots = [("text", "shots")] + [("image", image_b64(k)) for k in range(4)]
    one = render(api, [Turn("user", "look"), tools_turn(shots)])
    fitted = soff.fit_context(one, 8_000, api=api)
    check(soff, api, one, fitted)
    assert _images_kept(api, fitted.messages) == 1
    parallel = render(api, [Turn("user", "look"), tools_turn(*([("text", f"shot {k}"), ("image", image_b64(k))]
                                                               for k in range(4)))])
    fitted = soff.fit_context(parallel, 8_000, api=api)
    check(soff, api, parallel, fitted)
    assert _images_kept(api, fitted.messages) == 3 and fitted.report.tokens_after > 4_800


def _calls_in(text: str) -> list[tuple[str, dict]]:
    """The fetch_slice(...) and query_artifact(...) calls a text of offload's tells the model to make."""
    import ast

    found = []
    for name, args in re.findall(r"(fetch_slice|query_artifact)\(([^()]*)\)", text):
        call = ast.parse(f"f({args})", mode="eval").body
        found.append((name, {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}))
    return found


def test_the_placeholder_of_a_binary_result_tells_calls_that_run(soff):
    """A result of control characters is stored as binary data; its placeholder told lines and grep,
    which fetch_slice and query_artifact refuse for binary data."""
    import random

    rng = random.Random(0)
    control = "".join(chr(rng.randint(0, 31)) for _ in range(3000))
    original = render("openai", [Turn("user", "x"), tools_turn(control), tools_turn(text_of(8000, 5)),
                                 Turn("user", "next")])
    fitted = soff.fit_context(original, 6_000)
    check(soff, "openai", original, fitted)
    placeholder = fitted.messages[3]["content"]
    assert placeholder.startswith("[offload] Removed") and "binary data" in placeholder
    calls = _calls_in(placeholder)
    assert [name for name, _ in calls] == ["fetch_slice"] and calls[0][1]["unit"] == "bytes"
    page = soff.fetch_slice(**calls[0][1])
    assert base64.b64decode(page["content"]) == control.encode()[:256]
    for text in (m["content"] for m in fitted.messages if str(m.get("content")).startswith("[offload] Removed")):
        for name, args in _calls_in(text):  # every call a placeholder tells runs
            (soff.fetch_slice if name == "fetch_slice" else soff.query_artifact)(**{
                key: "x" if value in ("regex", "expression") else value for key, value in args.items()})


@pytest.mark.parametrize("api", ["anthropic", "openai-responses"])
def test_an_image_in_an_old_result_becomes_a_placeholder_and_reads_back(soff, api):
    turns = [Turn("user", "screens")] + [tools_turn([("text", "screenshot"), ("image", image_b64(k))])
                                         for k in range(6)] + [Turn("user", "so?")]
    original = render(api, turns)
    fitted = soff.fit_context(original, 12_000, api=api)
    check(soff, api, original, fitted)  # restore() reads each image block back as JSON and compares
    first = FORMATS[api].results(fitted.messages[3 if api == "anthropic" else 4])[0].content
    assert " block of this result " in first[1]["text"]
    assert re.search(r"\ban (image|input_image) block of this result ", first[1]["text"]), first[1]["text"]


def test_references_a_tool_pack_or_another_process_showed_become_placeholders(soff):
    """Only the references this guard had written gave way to placeholders: a tool pack's, or its own
    after a restart, were kept whole, and the fit dropped whole turns, the assistant's words with them."""
    from offload.adapters import ToolPack
    from offload.adapters.openai import run_chat_tool_calls

    def read_file(n: int) -> str:
        """Read a file."""
        return text_of(30_000, n)

    pack = ToolPack(soff, [read_file])
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    for t in range(12):
        asked = {"role": "assistant", "content": f"Finding {t}", "tool_calls": [
            {"id": f"c{t}", "type": "function", "function": {"name": "read_file", "arguments": f'{{"n": {t}}}'}}]}
        messages += [asked, *run_chat_tool_calls(pack, asked)]
    assert all(m["content"].startswith("[offload] The result of") for m in messages if m["role"] == "tool")
    fitted = soff.fit_context(messages, 8000)
    kinds = {action.strategy for action in fitted.report.actions}
    assert kinds == {"placeholder"}, fitted.report.summary()
    said = [m.get("content") for m in fitted.messages if m["role"] == "assistant"]
    assert said == [f"Finding {t}" for t in range(12)]
    # the same list fitted by another offloader of the store (a restart): the placeholders stand
    fresh = Offloader(soff.settings.url).fit_context(messages, 8000)
    assert {action.strategy for action in fresh.report.actions} == {"placeholder"}
    for m in fresh.messages:
        for aid in re.findall(r"Removed to fit.*?stored whole as (art_[a-z0-9]+)", m.get("content") or ""):
            assert soff.get(aid)["tool"] == "read_file"


def test_messages_without_a_role_are_refused_saying_what_to_do(soff):
    """LangChain's messages (a `type`, no `role`) were all read as the user's: their tool results went
    unrecognised, and the fit dropped nearly the whole conversation, its first question included."""
    from langchain_core.messages import (AIMessage, HumanMessage, SystemMessage, ToolMessage,
                                         convert_to_messages, convert_to_openai_messages)

    messages = [SystemMessage("s"), HumanMessage("go")]
    for t in range(10):
        messages += [AIMessage("", tool_calls=[{"name": "read", "args": {}, "id": f"c{t}"}]),
                     ToolMessage(text_of(3000, t), tool_call_id=f"c{t}")]
    with pytest.raises(InvalidArgument, match="convert_to_openai_messages"):
        soff.fit_context(messages, 8000)
    with pytest.raises(InvalidArgument, match="needs a string `role`.*keys content"):
        soff.fit_context([{"content": "hi"}], 8000)
    fitted = soff.fit_context(convert_to_openai_messages(messages), 8000, api="openai")  # the way it names
    back = convert_to_messages(fitted.messages)
    assert [type(m) for m in back] == [type(m) for m in messages] and back[1].content == "go"
    results = [m for m in back if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == [f"c{t}" for t in range(10)]
    assert any("stored whole as art_" in m.content for m in results) and fitted.report.tokens_after <= 6000


def test_the_report_is_logged_and_given_to_the_callback(soff, caplog):
    original = render("openai", [Turn("user", "x")] + [tools_turn(text_of(5000, k)) for k in range(6)])
    seen = []
    with caplog.at_level(logging.INFO, logger="offload.context"):
        fitted = soff.fit_context(original, 12_000, on_report=seen.append, session="s1")
    report = fitted.report
    assert seen == [report] and report.changed
    assert report.tokens_before > report.budget >= report.tokens_after
    assert report.messages_before == len(original) == report.messages_after
    assert all(a.strategy == "placeholder" and len(a.messages) == 1 for a in report.actions)
    assert [a.messages[0] for a in report.actions] == sorted(a.messages[0] for a in report.actions)
    assert report.summary() in caplog.text and report.artifact_ids[0] in report.summary()
    assert json.loads(json.dumps(report.to_dict()))["strategies"] == ["placeholder"]
    assert all(r["session"] == "s1" for r in soff.list()[0])


@pytest.mark.parametrize("api", APIS)
def test_the_steady_state_recognises_what_it_fitted_and_stores_only_what_is_new(soff, api):
    turns = [Turn("user", "go")] + [tools_turn(text_of(4000, k)) for k in range(12)]
    original = render(api, turns)
    first = soff.fit_context(original, 8_000, api=api)
    count = artifact_count(soff)
    again = soff.fit_context(first.messages, 8_000, api=api)
    assert again.messages == first.messages and not again.report.changed
    assert soff.fit_context(original, 8_000, api=api).messages == first.messages  # the same history again
    assert artifact_count(soff) == count
    new = render(api, [tools_turn(text_of(4000, 99))], system=None, first_call=100)
    nxt = soff.fit_context(first.messages + new, 8_000, api=api)
    check(soff, api, original + new, nxt)  # what the first fit removed reads back through the second
    assert artifact_count(soff) <= count + 3  # the new result, the previous last one, one span



@pytest.mark.parametrize("api", APIS)
def test_a_refit_after_the_store_lost_what_it_named_stores_it_again(soff, api):
    """The guard caches what it made of each message; a long-running agent's store may delete, evict or
    expire those artifacts meanwhile. A refit named the lost ones again (reused=False, and fetch_slice
    said "deleted"); it must store the content again and name what is there."""
    turns = [Turn("user", "the task")] + [tools_turn(text_of(6000, k)) for k in range(8)]
    turns += [Turn("assistant", text_of(2000, 40)), Turn("user", "next")]
    original = render(api, turns)
    first = soff.fit_context(original, 12_000, api=api)
    check(soff, api, original, first)
    named = {action.artifact_ids[0] for action in first.report.actions}
    assert named
    for artifact_id in named:
        soff.delete(artifact_id)
    again = soff.fit_context(original, 12_000, api=api)
    check(soff, api, original, again)  # every artifact the refit names reads back as the original
    renamed = {action.artifact_ids[0] for action in again.report.actions}
    assert renamed and not renamed & named and not any(action.reused for action in again.report.actions)
    spans = [Turn("user", "the task: " + text_of(300, 3))]
    for k in range(30):
        spans += [Turn("assistant", text_of(400, k)), Turn("user", text_of(300, k + 50))]
    chat = render(api, spans)
    dropped = soff.fit_context(chat, 4_000, api=api)
    (span_id,) = {a.artifact_ids[0] for a in dropped.report.actions}
    soff.delete(span_id)
    refit = soff.fit_context(chat, 4_000, api=api)
    check(soff, api, chat, refit)
    assert span_id not in {a.artifact_ids[0] for a in refit.report.actions}


def test_messages_as_sdk_objects_are_read_through_model_dump(soff):
    class Message:
        def __init__(self, data):
            self.data = data

        def model_dump(self, **kwargs):
            return copy.deepcopy(self.data)

    original = [Message(m) for m in render("openai", [Turn("user", "x"), tools_turn(text_of(20_000, 13)),
                                                      Turn("user", "y")])]
    fitted = soff.fit_context(original, 8_000)
    assert fitted.messages[0] is original[0] and fitted.messages[-1] is original[-1]
    assert fitted.messages[3]["content"].startswith("[offload] The result of `read_file` was too large")


def test_invalid_calls_are_refused(soff):
    with pytest.raises(InvalidArgument, match="unknown api"):
        soff.fit_context([], 1000, api="gemini")
    with pytest.raises(InvalidArgument):
        soff.fit_context([], 0)
    with pytest.raises(InvalidArgument):
        soff.fit_context([], 1000, reserve_tokens=800)
    for reserve in (-1_000_000, -1, 1.5, "10"):  # a negative reserve raised the budget past the window
        with pytest.raises(InvalidArgument, match="reserve_tokens"):
            soff.fit_context([], 1000, reserve_tokens=reserve)
    with pytest.raises(InvalidArgument):
        soff.fit_context({"role": "user"}, 1000)
    with pytest.raises(InvalidArgument, match=r"a list of messages \(got NoneType\)"):  # was a TypeError
        soff.fit_context(None, 1000)
    with pytest.raises(InvalidArgument, match=r"got True"):  # was read as a 1-token window
        soff.fit_context([], True)
    assert soff.fit_context([], 1000).messages == []


@pytest.mark.parametrize("api", APIS)
def test_every_backend(off, api):
    turns = [Turn("user", "go")] + [tools_turn(text_of(3000 + 20_000 * (k == 2), k)) for k in range(10)]
    turns += [Turn("assistant", "thinking"), Turn("user", "and now?")]
    original = render(api, turns)
    for window in (40_000, 5_000):
        check(off, api, original, off.fit_context(original, window, api=api))


# -- property tests ----------------------------------------------------------------------------------

SIZES = [0, 40, 300, 1_500, 6_000, 25_000]


@st.composite
def conversations(draw, agent_loop: bool | None = None, max_turns: int = 30, big: int = 60_000):
    loop = draw(st.booleans()) if agent_loop is None else agent_loop
    seed = draw(st.integers(0, 10_000))
    size = st.sampled_from(SIZES + [big])
    turns = [Turn("user", text_of(draw(st.sampled_from([20, 300, 3_000])), seed),
                  image=image_b64(seed % 50) if draw(st.integers(0, 9)) == 0 else None)]
    for k in range(draw(st.integers(0, max_turns))):
        kind = draw(st.sampled_from(["tools"] * 8 + ["assistant"] if loop else ["user", "assistant", "tools"]))
        if kind == "tools":
            results = []
            for j in range(draw(st.integers(1, 3))):
                if draw(st.integers(0, 7)) == 0:
                    results.append([("text", text_of(draw(size), seed + k + j)), ("image", image_b64(k % 50))])
                else:
                    results.append(text_of(draw(size), seed + 31 * k + j))
            turns.append(tools_turn(*results, text=text_of(draw(st.sampled_from([0, 80])), k)))
        elif kind == "user":
            turns.append(Turn("user", text_of(draw(st.sampled_from([10, 200, 2_000])), seed + k)))
        else:
            turns.append(Turn("assistant", text_of(draw(st.sampled_from([10, 400, 2_500])), seed + k)))
    return turns


def _property(off: Offloader, api: str, turns: list[Turn], window: int, system: bool) -> None:
    original = render(api, turns, system="Be brief. " * 20 if system else None)
    before = copy.deepcopy(original)
    try:
        fitted = off.fit_context(original, window, api=api)
    except ContextBudgetExceeded as exc:
        event("ContextBudgetExceeded")
        assert original == before
        assert exc.needed > exc.budget == int(window * 0.75)
        guard = guard_for(off)
        last = groups_of(api, original)[-1]
        head = sum(guard.count_message(m) for m in original[:1 if system else 0])
        note = guard.note_tokens(FORMATS[api]) if len(original) > len(last) + system else 0
        assert head + sum(guard.count_message(original[i]) for i in last) + note > exc.budget  # no false alarm
        return
    assert original == before
    event(" + ".join(fitted.report.strategies) or "unchanged")
    check(off, api, original, fitted)


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(turns=conversations(), window=st.sampled_from([3_000, 8_000, 32_000, 128_000]), system=st.booleans())
def test_property_random_conversations(soff, api, turns, window, system):
    _property(soff, api, turns, window, system)


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(turns=conversations(agent_loop=True, max_turns=150), window=st.sampled_from([4_000, 16_000, 128_000]),
       system=st.booleans())
def test_property_agent_loops(soff, api, turns, window, system):
    _property(soff, api, turns, window, system)


@pytest.mark.slow
@pytest.mark.parametrize("api", APIS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(turns=conversations(agent_loop=True, max_turns=250, big=300_000),
       window=st.sampled_from([4_000, 16_000, 128_000]), system=st.booleans())
def test_property_long_agent_loops_slow(soff, api, turns, window, system):
    _property(soff, api, turns, window, system)


# -- done when: 400 messages, 60 real tool results up to 2 MB ----------------------------------------

def _grep(pattern: str, size: int) -> str:
    out = subprocess.run(["grep", "-rn", "--include=*.py", "--exclude-dir=site-packages", pattern, str(STDLIB)],
                         capture_output=True).stdout
    text = out[:size].decode("utf-8", "replace").rsplit("\n", 1)[0] + "\n"
    return text.encode()[:size].decode("utf-8", "ignore")  # U+FFFD for a Latin-1 byte takes 3 bytes


@functools.lru_cache(maxsize=None)
def _packages() -> list[dict]:
    packages = [{"name": d.metadata["Name"], "version": d.version, "requires": d.requires or [],
                 "files": [{"path": str(f), "size": f.size} for f in (d.files or [])]}
                for d in importlib.metadata.distributions()]
    return sorted(packages, key=lambda p: p["name"].lower())


def _metadata_json(size: int, start: int) -> str:
    """A JSON document of installed packages with their files, about `size` bytes."""
    packages, chosen, total = _packages(), [], 0
    for k in range(len(packages)):
        package = packages[(start + k) % len(packages)]
        length = len(json.dumps(package, indent=1))
        if total + length <= size:
            chosen.append(package)
            total += length
        if total >= 0.8 * size:
            break
    while True:  # nested one level deeper, every line takes a little more
        doc = json.dumps({"count": len(chosen), "packages": chosen}, indent=1)
        if len(doc) <= size or len(chosen) == 1:
            return doc
        chosen.pop()


@functools.lru_cache(maxsize=None)
def real_results() -> list[tuple[str, dict, str]]:
    """60 real tool results from this machine, 1 KB to 2 MB: grep output, package metadata, file contents."""
    sizes = [2_000_000, 900_000, 300_000, 120_000, 40_000, 12_000, 4_000, 1_000]
    patterns = ["def ", "import", "self\\.", "return", "raise", "class ", "if __name__", "yield", "lambda", "TODO"]
    out = []
    for k in range(60):
        size = sizes[k % len(sizes)]
        if k % 3 == 0:
            pattern = patterns[k // 3 % len(patterns)]
            out.append(("grep", {"pattern": pattern, "path": str(STDLIB)}, _grep(pattern, size)))
        elif k % 3 == 1:
            out.append(("pip_inspect", {"start": k}, _metadata_json(size, k * 7)))
        else:
            out.append(("read_file", {"path": f"stdlib:{k}"},
                        text_of(size, k).encode()[:size].decode("utf-8", "ignore")))
    return out


def done_when_turns() -> list[Turn]:
    results = real_results()
    turns = [Turn("user", "Audit the standard library for error handling and report what you find.")]
    chat = 0
    for k, (name, args, result) in enumerate(results):
        turns.append(Turn("tools", f"Step {k}: running {name}.", [Call(name, args, result)]))
        for _ in range(5 if k < 38 else 4):  # talk between the calls: 400 messages in all
            chat += 1
            turns.append(Turn("assistant" if chat % 2 else "user", text_of(300 + chat * 7 % 900, chat)))
    return turns


@pytest.fixture(scope="module")
def done_when_store(tmp_path_factory):
    with Offloader(f"sqlite:///{tmp_path_factory.mktemp('ctx') / 'store.db'}") as off:
        yield off


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("window", [128_000, 6_000])
def test_done_when_400_messages_with_60_real_results_fit(done_when_store, api, window):
    off = done_when_store
    original = render(api, done_when_turns())
    if api != "openai-responses":  # Responses adds a reasoning item per tool turn
        assert len(original) == 400, len(original)
    assert sum(1 for m in original for _ in FORMATS[api].results(m)) == 60
    assert 1_900_000 <= max(len(r.encode()) for _, _, r in real_results()) <= 2_000_000
    before = copy.deepcopy(original)
    fitted = off.fit_context(original, window, api=api, session="done-when")
    assert original == before
    check(off, api, original, fitted)
    report = fitted.report
    assert report.tokens_before > 10 * report.budget >= report.tokens_after
    if window == 6_000:
        assert "drop" in report.strategies
    # the steady state: the fitted list passed back costs no storing, and comes back the same
    count = artifact_count(off)
    again = off.fit_context(fitted.messages, window, api=api)
    assert again.messages == fitted.messages and artifact_count(off) == count


def test_a_history_refitted_after_the_cache_forgot_it_is_recognised_by_hash(soff):
    original = render("openai", [Turn("user", "go")] + [tools_turn(text_of(4000, k)) for k in range(10)])
    first = soff.fit_context(original, 6_000)
    count = artifact_count(soff)
    other = render("openai", [Turn("user", "something else")])
    for _ in range(100):  # other conversations: the cache forgets this one
        soff.fit_context(other, 6_000)
    assert id(original[3]) not in guard_for(soff)._facts
    again = soff.fit_context(original, 6_000)
    check(soff, "openai", original, again)
    assert [a.artifact_ids for a in again.report.actions] == [a.artifact_ids for a in first.report.actions]
    assert all(a.reused for a in again.report.actions) and artifact_count(soff) == count


def test_a_dropped_span_with_a_lone_surrogate_stays_searchable_as_utf8(soff):
    """One lone surrogate in a dropped span had every character of it written as an ASCII escape, so
    the note's grep found nothing of CJK or emoji (26 matches without the surrogate, 0 with it)."""
    counts = []
    for suffix in ("", " \ud800"):
        messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
        for i in range(30):
            messages += [{"role": "user", "content": f"问题 {i} 中文{suffix} " * 40},
                         {"role": "assistant", "content": f"ok {i}"}]
        messages.append({"role": "user", "content": "last"})
        fitted = soff.fit_context(messages, 3000)
        (note,) = [m["content"] for m in fitted.messages if str(m["content"]).startswith("[offload] Dropped")]
        aid = ART.search(note).group()
        counts.append(soff.query_artifact(aid, grep="中文")["count"])
        check(soff, "openai", messages, fitted)  # and the span reads back exactly, surrogate and all
    assert counts[0] > 20 and counts[1] > 20  # (the spans differ by a message or so: the surrogate costs tokens)


def _log_conversation(log: str) -> list[dict]:
    return [{"role": "system", "content": "You are an SRE agent."}, {"role": "user", "content": "Why did it stop?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "app.log"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": log}]


def test_a_result_stored_before_keeps_its_reference_and_outlives_the_conversation(tmp_path, monkeypatch):
    """A second Offloader (another process, a restarted harness) fitting a result whose content was
    already stored named that artifact with a bare placeholder, the log's last line gone, at 900 of a
    96,000-token budget; and the artifact kept its old expiry, so a conversation fitted today could name
    one that expired the next minute."""
    import datetime as dt

    from offload.store.records import utcnow

    url = f"sqlite:///{tmp_path / 'store.db'}"
    log = "".join(f"2025-01-01 12:00:{i % 60:02d} INFO request {i} ok\n" for i in range(60_000))
    log += "2025-01-01 13:00:00 FATAL: too many clients\n"
    with Offloader(url) as first:
        fitted = first.fit_context(_log_conversation(log), 128_000)
        shown = fitted.messages[-1]["content"]
        assert "FATAL: too many clients" in shown
        artifact_id = ART.search(shown).group(0)
        soon = utcnow() + dt.timedelta(minutes=1)
        with first.store._write() as conn:
            from offload.store.models import artifacts
            conn.execute(artifacts.update().where(artifacts.c.id == artifact_id).values(expires_at=soon))
    with Offloader(url, ttl_days=7) as second:
        again = second.fit_context(_log_conversation(log), 128_000)
        assert again.messages[-1]["content"] == shown and again.report.actions[0].reused
        expires = dt.datetime.fromisoformat(second.get(artifact_id)["expires_at"].replace("Z", "+00:00"))
        assert expires.replace(tzinfo=None) > utcnow().replace(tzinfo=None) + dt.timedelta(days=6)


def test_the_summary_counts_results_not_messages(sqlite_url):
    """Three tool_result blocks of one Anthropic message, each offloaded, were "1 result(s)"."""
    texts = [text_of(200_000, seed) for seed in range(3)]
    messages = [{"role": "user", "content": "look at these"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}", "name": "read", "input": {}}
                                                  for k in range(3)]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": text}
                                             for k, text in enumerate(texts)]}]
    with Offloader(sqlite_url) as off:
        fitted = off.fit_context(messages, 32_000, api="anthropic")
        assert [a.results for a in fitted.report.actions] == [3]
        assert "3 result(s) offloaded to a reference" in fitted.report.summary()


def test_a_turn_over_the_budget_with_no_result_says_why(sqlite_url):
    """"Results over 2,400 tokens are already references" was said of a pasted text, and of an
    Anthropic list fitted as OpenAI's, whose 174,000-token tool_result was never read as one."""
    paste = text_of(300_000, 1)
    anthropic = [{"role": "user", "content": "go"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": paste}]}]
    with Offloader(sqlite_url) as off:
        with pytest.raises(ContextBudgetExceeded, match="holds no tool result to make a reference of"):
            off.fit_context([{"role": "user", "content": "Here is my log:\n" + paste}], 8_000)
        with pytest.raises(ContextBudgetExceeded, match='look like anthropic\'s: pass api="anthropic"'):
            off.fit_context(anthropic, 8_000)
        assert off.fit_context(anthropic, 8_000, api="anthropic").report.changed
