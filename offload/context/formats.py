"""The message shapes the context guard fits: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages.

Each format answers the same few questions about one message (a plain dict shaped like the SDK's
params): its role in a group, the tool calls it makes, the tool results it carries and where their
content sits, and how to rebuild it with new result content. The guard looks at messages only this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYSTEM, USER, ASSISTANT, RESULT = "system", "user", "assistant", "result"

TEXT_BLOCKS = frozenset({"text", "input_text", "output_text"})
IMAGE_BLOCKS = frozenset({"image", "image_url", "input_image", "computer_screenshot"})
MEDIA_BLOCKS = IMAGE_BLOCKS | {"document", "input_file", "file", "input_audio", "audio"}


@dataclass(frozen=True)
class Call:
    call_id: str
    tool: str
    args: Any  # the call's arguments as given (a JSON string for OpenAI, an object for Anthropic)


@dataclass(frozen=True)
class Slot:
    """Where one tool result's content sits in a message."""

    call_id: str | None
    content: Any  # str, a list of blocks, or something the guard keeps as it is (None, a screenshot dict)
    block: int | None  # the tool_result block's position in an Anthropic message; None: the message itself


class Format:
    """What the guard needs to know about one API's messages."""

    name = ""
    text_type = "text"  # the type of a text block inside a tool result's content list

    def role(self, msg: dict) -> str:
        raise NotImplementedError

    def calls(self, msg: dict) -> list[Call]:
        raise NotImplementedError

    def results(self, msg: dict) -> list[Slot]:
        raise NotImplementedError

    def with_results(self, msg: dict, contents: dict[int, Any]) -> dict:
        """A copy of `msg` whose result slots (by position in `results(msg)`) hold new content."""
        raise NotImplementedError

    def note(self, text: str) -> dict:
        """A message the guard inserts in place of a dropped span."""
        return {"role": "user", "content": text}

    def text_block(self, text: str) -> dict:
        return {"type": self.text_type, "text": text}


class OpenAIChat(Format):
    """Chat Completions: `tool_calls` on assistant messages, one `role: tool` message per result."""

    name = "openai"

    def role(self, msg: dict) -> str:
        role = msg.get("role")
        if role in ("system", "developer"):
            return SYSTEM
        if role in ("tool", "function"):  # "function": the legacy form, answered right after its call
            return RESULT
        return ASSISTANT if role == "assistant" else USER

    def calls(self, msg: dict) -> list[Call]:
        if msg.get("role") != "assistant":
            return []
        out = []
        for call in msg.get("tool_calls") or ():
            function = call.get("function") or {}
            out.append(Call(call.get("id"), function.get("name") or call.get("type") or "tool",
                            function.get("arguments")))
        return out

    def results(self, msg: dict) -> list[Slot]:
        if msg.get("role") not in ("tool", "function"):
            return []
        return [Slot(msg.get("tool_call_id"), msg.get("content"), None)]

    def with_results(self, msg: dict, contents: dict[int, Any]) -> dict:
        return {**msg, "content": contents[0]} if 0 in contents else msg


class OpenAIResponses(Format):
    """Responses API input items: messages, `function_call` / `function_call_output` items (by `call_id`),
    reasoning items, and the other `*_call` / `*_call_output` pairs (custom tools, local shell, computer)."""

    name = "openai-responses"
    text_type = "input_text"

    def role(self, msg: dict) -> str:
        kind = msg.get("type")
        if kind in (None, "message"):
            role = msg.get("role")
            if role in ("system", "developer"):
                return SYSTEM
            return ASSISTANT if role == "assistant" else USER
        if kind.endswith("_call_output") or kind == "mcp_approval_response":
            return RESULT
        return ASSISTANT  # reasoning, *_call, and items the model produced

    def calls(self, msg: dict) -> list[Call]:
        kind = msg.get("type") or ""
        if kind.endswith("_call") and msg.get("call_id"):
            return [Call(msg["call_id"], msg.get("name") or kind, msg.get("arguments", msg.get("input")))]
        if kind == "mcp_approval_request" and msg.get("id"):
            return [Call(msg["id"], msg.get("name") or kind, msg.get("arguments"))]
        return []

    def results(self, msg: dict) -> list[Slot]:
        kind = msg.get("type") or ""
        if kind.endswith("_call_output"):
            return [Slot(msg.get("call_id"), msg.get("output"), None)]
        if kind == "mcp_approval_response":
            return [Slot(msg.get("approval_request_id"), None, None)]
        return []

    def with_results(self, msg: dict, contents: dict[int, Any]) -> dict:
        return {**msg, "output": contents[0]} if 0 in contents else msg


class Anthropic(Format):
    """Messages API: `tool_use` blocks in assistant messages; their `tool_result` blocks, in the user
    message that follows, carry str or block content (text, image, document)."""

    name = "anthropic"

    def role(self, msg: dict) -> str:
        role = msg.get("role")
        if role == "assistant":
            return ASSISTANT
        if role == "system":  # some harnesses keep the system prompt at the head of the list
            return SYSTEM
        return RESULT if self.results(msg) else USER

    def calls(self, msg: dict) -> list[Call]:
        content = msg.get("content")
        if msg.get("role") != "assistant" or not isinstance(content, list):
            return []
        return [Call(b.get("id"), b.get("name") or "tool", b.get("input"))
                for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]

    def results(self, msg: dict) -> list[Slot]:
        content = msg.get("content")
        if msg.get("role") != "user" or not isinstance(content, list):
            return []
        return [Slot(b.get("tool_use_id"), b.get("content"), i)
                for i, b in enumerate(content) if isinstance(b, dict) and b.get("type") == "tool_result"]

    def with_results(self, msg: dict, contents: dict[int, Any]) -> dict:
        if not contents:
            return msg
        blocks = list(msg["content"])
        for position, slot in enumerate(self.results(msg)):
            if position in contents:
                blocks[slot.block] = {**blocks[slot.block], "content": contents[position]}
        return {**msg, "content": blocks}


FORMATS: dict[str, Format] = {f.name: f for f in (OpenAIChat(), OpenAIResponses(), Anthropic())}
