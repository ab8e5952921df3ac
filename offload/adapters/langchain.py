"""LangChain shapes for a ToolPack: one StructuredTool per tool (`offload[langchain]`).

Each tool declares the pack's JSON Schema as it is (so a chat model sees exactly the schema the other
adapters send) and answers with content and artifact: the text the model reads, and the structured
result (a Reference's dict when the result was offloaded) on `ToolMessage.artifact` for the application.
"""

from __future__ import annotations

from typing import Any

try:
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("LangChain is not installed: pip install 'offload[langchain]'") from exc

from .toolpack import PackTool, ToolPack


def tools(pack: ToolPack, *, session: str | None = None) -> list[StructuredTool]:
    """The pack as LangChain tools: `model.bind_tools(tools(pack))`, then `tool.invoke(tool_call)`."""
    return [structured_tool(pack, t, session=session) for t in pack]


def structured_tool(pack: ToolPack, tool: PackTool, *, session: str | None = None) -> StructuredTool:
    name = tool.name

    def run(**arguments: Any) -> tuple[str, dict[str, Any]]:
        return _content_and_artifact(pack.call(name, arguments, session=session))

    async def arun(**arguments: Any) -> tuple[str, dict[str, Any]]:
        return _content_and_artifact(await pack.acall(name, arguments, session=session))

    return _PackTool(name=name, description=tool.description, args_schema=tool.parameters, func=run,
                     coroutine=arun, response_format="content_and_artifact", handle_tool_error=True)


class _PackTool(StructuredTool):
    """A StructuredTool whose arguments reach the pack whatever their names. StructuredTool's own `_run`
    takes `config` and `run_manager` for itself, and LangChain writes its values over a model's argument
    of either name (a tool's `config` came as LangChain's RunnableConfig, or "Field required"), and an
    argument named `self` was a TypeError out of `invoke`. These declare neither, so LangChain injects
    nothing, and take the tool as their first positional argument."""

    def _run(*args: Any, **arguments: Any) -> Any:  # noqa: N805 - no `self`: an argument may be named so
        return args[0].func(**arguments)

    async def _arun(*args: Any, **arguments: Any) -> Any:  # noqa: N805
        return await args[0].coroutine(**arguments)


def _content_and_artifact(out) -> tuple[str, dict[str, Any]]:
    if out.is_error:  # LangChain turns it into a ToolMessage with status="error" and this text
        raise ToolException(out.text)
    return out.text, out.structured
