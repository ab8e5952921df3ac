"""OpenAI shapes for a ToolPack: Chat Completions and Responses function tools, their dispatchers, and
FunctionTool objects for the OpenAI Agents SDK.

The dispatchers take the SDK's own objects (or the same as dicts) and return the messages / items to send
back. Only `agents_tools()` imports an SDK (`agents`, from the offload[openai] extra).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterator

from ..tools.schemas import ToolOutput, error_output
from .strict import strict_parameters
from .toolpack import PackTool, ToolPack

if TYPE_CHECKING:
    from agents import FunctionTool


# -- Chat Completions -------------------------------------------------------------------------------


def chat_tools(pack: ToolPack, *, strict: bool = False) -> list[dict[str, Any]]:
    """`tools=` for `client.chat.completions.create()`; `strict=True`: strict function calling, every
    schema made strict (see `offload.adapters.strict`; ValueError for a tool whose arguments it cannot
    express)."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": _parameters(t, strict),
                                              **({"strict": True} if strict else {})}}
            for t in pack]


def run_chat_tool_calls(pack: ToolPack, message: Any, *, session: str | None = None) -> list[dict[str, Any]]:
    """Run every tool call of an assistant message (a ChatCompletion, its message, or a list of tool
    calls) and return one `{"role": "tool", ...}` message per call, in order."""
    return [_tool_message(call_id, out) for call_id, out in _chat_outputs(pack, message, session)]


async def arun_chat_tool_calls(pack: ToolPack, message: Any, *, session: str | None = None) -> list[dict[str, Any]]:
    """`run_chat_tool_calls()` for event loops."""
    calls = list(_chat_calls(message))

    async def run(call_id: str, name: str | None, arguments: Any) -> ToolOutput:
        return await pack.acall(name, arguments, session=session) if name is not None else _not_a_function(call_id)

    # parallel calls run together, as the model asked for them (one after another, three 1 s tools took 3 s)
    outputs = await asyncio.gather(*(run(*call) for call in calls))
    return [_tool_message(call_id, out) for (call_id, _, _), out in zip(calls, outputs)]


def _chat_outputs(pack: ToolPack, message: Any, session: str | None) -> Iterator[tuple[str, ToolOutput]]:
    for call_id, name, arguments in _chat_calls(message):
        yield call_id, (pack.call(name, arguments, session=session) if name is not None else _not_a_function(call_id))


def _chat_calls(message: Any) -> Iterator[tuple[str, str | None, Any]]:
    """(id, function name or None for a non-function call, arguments) of each tool call."""
    if _get(message, "choices") is not None:  # a whole ChatCompletion: its first choice
        message = _get(_get(message, "choices")[0], "message")
    calls = message if isinstance(message, list) else (_get(message, "tool_calls") or [])
    for call in calls:
        function = _get(call, "function")
        if _get(call, "type", "function") == "function" and function is not None:
            yield _get(call, "id"), _get(function, "name"), _get(function, "arguments")
        else:
            yield _get(call, "id"), None, None


def _tool_message(call_id: str, out: ToolOutput) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": out.text}


# -- Responses --------------------------------------------------------------------------------------


def responses_tools(pack: ToolPack, *, strict: bool = False) -> list[dict[str, Any]]:
    """`tools=` for `client.responses.create()`, which reads a function as strict unless told: this
    says `strict` (False by default; True makes every schema strict, as `chat_tools` does)."""
    return [{"type": "function", "name": t.name, "description": t.description,
             "parameters": _parameters(t, strict), "strict": strict}
            for t in pack]


def run_responses_tool_calls(pack: ToolPack, response: Any, *, session: str | None = None) -> list[dict[str, Any]]:
    """Run every function_call item of a Response (or of a list of output items) and return one
    function_call_output item per call, in order: the next request's `input` continues with them."""
    return [_call_output(item, pack.call(_get(item, "name"), _get(item, "arguments"), session=session))
            for item in _function_calls(response)]


async def arun_responses_tool_calls(pack: ToolPack, response: Any, *,
                                    session: str | None = None) -> list[dict[str, Any]]:
    """`run_responses_tool_calls()` for event loops."""
    items = _function_calls(response)
    outputs = await asyncio.gather(*(pack.acall(_get(item, "name"), _get(item, "arguments"), session=session)
                                     for item in items))
    return [_call_output(item, out) for item, out in zip(items, outputs)]


def _function_calls(response: Any) -> list[Any]:
    items = response if isinstance(response, list) else (_get(response, "output") or [])
    return [item for item in items if _get(item, "type") == "function_call"]


def _call_output(item: Any, out: ToolOutput) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": _get(item, "call_id"), "output": out.text}


# -- the OpenAI Agents SDK --------------------------------------------------------------------------


def agents_tools(pack: ToolPack, *, session: str | None = None, strict: bool = False) -> list["FunctionTool"]:
    """The pack as Agents SDK FunctionTool objects: `Agent(tools=agents_tools(pack))`; `strict=True`
    gives them strict schemas (`strict_json_schema`), made as `chat_tools` makes them."""
    try:
        from agents import FunctionTool
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("the OpenAI Agents SDK is not installed: pip install 'offload[openai]'") from exc

    def function_tool(name: str, description: str, parameters: dict[str, Any]) -> FunctionTool:
        async def invoke(_context: Any, arguments: str) -> str:
            # an error comes back as text the model can act on; the SDK passes it on
            return (await pack.acall(name, arguments, session=session)).text

        return FunctionTool(name=name, description=description, params_json_schema=parameters,
                            on_invoke_tool=invoke, strict_json_schema=strict)

    return [function_tool(t.name, t.description, _parameters(t, strict)) for t in pack]


# -- helpers ----------------------------------------------------------------------------------------


def _parameters(tool: PackTool, strict: bool) -> dict[str, Any]:
    return strict_parameters(tool.parameters, tool.name) if strict else tool.parameters


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """A field of an SDK object or of the same as a dict."""
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _not_a_function(call_id: str) -> ToolOutput:
    return error_output(f"tool call {call_id} is not a function call; offload's tools are function tools.",
                        "invalid_argument")
