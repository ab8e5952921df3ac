"""A LangChain tool-calling loop with offload attached (runs offline: a scripted stand-in chat model).

tool → reference → query_artifact / fetch_slice → answer. With a real model, use any chat model that
supports `bind_tools` (ChatOpenAI, ChatAnthropic, ...) in place of ScriptedChatModel.
"""

import tempfile
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from _scripted import QUESTION, build_log, next_step, show
from offload import Offloader
from offload.adapters import ToolPack
from offload.adapters.langchain import tools


class ScriptedChatModel(BaseChatModel):
    """The stand-in model: decides from the ToolMessages so far (see _scripted.next_step)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self  # the script knows the tools' names already

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        results = [m.content for m in messages if isinstance(m, ToolMessage)]
        step = next_step(results)
        if "tool" in step:
            reply = AIMessage(content="", tool_calls=[{"name": step["tool"], "args": step["arguments"],
                                                       "id": f"call_{len(results)}", "type": "tool_call"}])
        else:
            reply = AIMessage(content=step["answer"])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        pack = ToolPack(off, [build_log], session="langchain-example")
        return loop(pack)


def loop(pack: ToolPack) -> str:
    by_name = {tool.name: tool for tool in tools(pack)}
    model = ScriptedChatModel().bind_tools(list(by_name.values()))
    messages: list = [HumanMessage(QUESTION)]
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            print("answer:", reply.content)
            return reply.content
        for call in reply.tool_calls:
            result = by_name[call["name"]].invoke(call)  # a ToolMessage; .artifact holds the structured result
            show("→", f"{call['name']}({call['args']})")
            show("←", result.content)
            messages.append(result)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
