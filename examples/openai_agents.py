"""An OpenAI Agents SDK agent with offload attached (runs offline: a scripted stand-in model).

tool → reference → query_artifact / fetch_slice → answer. With a real model, pass no `model=` (or your
own) and set OPENAI_API_KEY.
"""

import tempfile

import httpx2
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from _scripted import QUESTION, build_log, responses_transport, show
from offload import Offloader
from offload.adapters import ToolPack
from offload.adapters.openai import agents_tools


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        pack = ToolPack(off, [build_log], session="agents-example")
        return run(pack)


def run(pack: ToolPack) -> str:
    set_tracing_disabled(True)  # offline: no trace export
    client = AsyncOpenAI(api_key="scripted", base_url="http://model.invalid/v1",
                         http_client=httpx2.AsyncClient(transport=responses_transport()))
    agent = Agent(name="build doctor", instructions="Find out why builds fail.", tools=agents_tools(pack),
                  model=OpenAIResponsesModel(model="gpt-x", openai_client=client))
    result = Runner.run_sync(agent, QUESTION)
    for item in result.new_items:
        if item.type == "tool_call_item":
            show("→", f"{item.raw_item.name}({item.raw_item.arguments})")
        elif item.type == "tool_call_output_item":
            show("←", str(item.output))
    print("answer:", result.final_output)
    return result.final_output


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
