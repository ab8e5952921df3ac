"""A scripted stand-in for the model, so every example runs offline (and in the tests) with no API key.

It plays the part a real model plays in these loops: call the user's tool; given an [offload] reference,
grep the stored result for the error; read the last lines; answer. The `*_transport()` functions answer
the SDKs' HTTP requests the way the real APIs would, so each SDK builds and parses every object itself;
only the network is missing.
"""

from __future__ import annotations

import json
import re
from typing import Any

QUESTION = "Why did build 1432 fail?"
ARTIFACT_ID = re.compile(r"\bart_[a-z0-9]{8,}\b")


def build_log(build: str) -> str:
    """Read the whole log of a CI build (the user's own tool: its result is about 1 MB)."""
    lines = [f"[{i:05d}] cc -O2 -c src/module_{i % 97}/file_{i}.c -o build/file_{i}.o ... ok" for i in range(20_000)]
    lines[12_345] = "[12345] WARNING: -fno-common is deprecated"
    lines.append("[20000] FATAL ld: undefined reference to `inflateEnd' in libpack.a(zip.o)")
    lines.append(f"[20001] build {build} failed: exit status 2")
    return "\n".join(lines) + "\n"


def next_step(results: list[str]) -> dict[str, Any]:
    """What the model does next, given the tool results so far: {"tool", "arguments"} or {"answer"}."""
    if not results:
        return {"tool": "build_log", "arguments": {"build": "1432"}}
    found = ARTIFACT_ID.search(results[0])
    if found is None:  # the result came back whole: nothing to page
        return {"answer": results[0].strip().splitlines()[-1]}
    if len(results) == 1:
        return {"tool": "query_artifact", "arguments": {"artifact_id": found[0], "grep": "FATAL|ERROR"}}
    if len(results) == 2:
        return {"tool": "fetch_slice", "arguments": {"artifact_id": found[0], "offset": -2}}
    error = next(line for line in results[1].splitlines() if "FATAL" in line)
    last = results[2].splitlines()[-2]  # the page ends with its own footer line
    return {"answer": f"The link step failed (log line {error.split(':', 1)[0]}): {error.split(': ', 1)[1]} "
                      f"— and the log ends: {last}"}


# -- the APIs' wire format --------------------------------------------------------------------------


def chat_completions_transport():
    """POST /chat/completions: tool results are the `tool` messages."""

    def answer(body: dict) -> dict:
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        step = next_step(results)
        message: dict[str, Any] = {"role": "assistant", "content": step.get("answer")}
        if "tool" in step:
            message["tool_calls"] = [{"id": f"call_{len(results)}", "type": "function", "function": {
                "name": step["tool"], "arguments": json.dumps(step["arguments"])}}]
        return {"id": f"chatcmpl-{len(results)}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if "tool" in step else "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    return _transport(answer)


def responses_transport():
    """POST /responses: tool results are the `function_call_output` input items."""

    def answer(body: dict) -> dict:
        items = body["input"] if isinstance(body["input"], list) else []
        results = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        step = next_step(results)
        if "tool" in step:
            output = [{"type": "function_call", "id": f"fc_{len(results)}", "call_id": f"call_{len(results)}",
                       "name": step["tool"], "arguments": json.dumps(step["arguments"]), "status": "completed"}]
        else:
            output = [{"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": step["answer"], "annotations": []}]}]
        return {"id": f"resp_{len(results)}", "object": "response", "created_at": 0, "model": body["model"],
                "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                "tools": [], "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
                                       "input_tokens_details": {"cached_tokens": 0},
                                       "output_tokens_details": {"reasoning_tokens": 0}}}

    return _transport(answer)


def anthropic_transport():
    """POST /v1/messages: tool results are the `tool_result` blocks of user messages."""

    def answer(body: dict) -> dict:
        results = [block["content"] for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                   for block in m["content"] if block.get("type") == "tool_result"]
        step = next_step(results)
        if "tool" in step:
            content = [{"type": "tool_use", "id": f"toolu_{len(results)}", "name": step["tool"],
                        "input": step["arguments"]}]
        else:
            content = [{"type": "text", "text": step["answer"]}]
        return {"id": f"msg_{len(results)}", "type": "message", "role": "assistant", "model": body["model"],
                "content": content, "stop_reason": "tool_use" if "tool" in step else "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}

    return _transport(answer)


def _transport(answer):
    import httpx2  # what the openai and anthropic SDKs use

    def handle(request):
        return httpx2.Response(200, json=answer(json.loads(request.content)))

    return httpx2.MockTransport(handle)


def show(direction: str, text: str, width: int = 160) -> None:
    """One line of the transcript: what the model called, and the first line of what it got back."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    print(f"{direction} {first[:width]}{'…' if len(first) > width else ''}")
