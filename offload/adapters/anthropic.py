"""Anthropic Messages API shapes for a ToolPack: tool definitions, and tool_result blocks for the
tool_use blocks of an assistant message. Works on the SDK's own objects or the same as dicts; imports
no SDK itself (`offload[anthropic]` installs `anthropic` for the client)."""

from __future__ import annotations

import asyncio
from typing import Any

from ..tools.schemas import ToolOutput
from .toolpack import ToolPack


def tools(pack: ToolPack) -> list[dict[str, Any]]:
    """`tools=` for `client.messages.create()`."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in pack]


def run_tool_uses(pack: ToolPack, message: Any, *, session: str | None = None) -> list[dict[str, Any]]:
    """Run every tool_use block of an assistant Message (or of a list of content blocks) and return one
    tool_result block per call, in order: send them as the content of the next user message."""
    return [_result(block, pack.call(_get(block, "name"), _get(block, "input"), session=session))
            for block in _tool_uses(message)]


async def arun_tool_uses(pack: ToolPack, message: Any, *, session: str | None = None) -> list[dict[str, Any]]:
    """`run_tool_uses()` for event loops."""
    blocks = _tool_uses(message)  # run together, as the model asked for them
    outputs = await asyncio.gather(*(pack.acall(_get(block, "name"), _get(block, "input"), session=session)
                                     for block in blocks))
    return [_result(block, out) for block, out in zip(blocks, outputs)]


def tool_result_message(pack: ToolPack, message: Any, *, session: str | None = None) -> dict[str, Any]:
    """The whole next user message: `{"role": "user", "content": [tool_result, ...]}`."""
    return {"role": "user", "content": run_tool_uses(pack, message, session=session)}


def _tool_uses(message: Any) -> list[Any]:
    blocks = message if isinstance(message, list) else (_get(message, "content") or [])
    return [block for block in blocks if _get(block, "type") == "tool_use"]


def _result(block: Any, out: ToolOutput) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": _get(block, "id"), "content": out.text}
    if out.is_error:
        result["is_error"] = True
    return result


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
