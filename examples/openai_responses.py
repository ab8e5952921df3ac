"""An agent loop on the OpenAI Responses API with offload attached (runs offline: a scripted stand-in model).

tool → reference → query_artifact / fetch_slice → answer. With a real model, drop `http_client=` and the
base URL, and set OPENAI_API_KEY.
"""

import tempfile

import httpx2
from openai import OpenAI

from _scripted import QUESTION, build_log, responses_transport, show
from offload import Offloader
from offload.adapters import ToolPack
from offload.adapters.openai import responses_tools, run_responses_tool_calls


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        pack = ToolPack(off, [build_log], session="responses-example")
        return loop(pack)


def loop(pack: ToolPack) -> str:
    client = OpenAI(api_key="scripted", base_url="http://model.invalid/v1",
                    http_client=httpx2.Client(transport=responses_transport()))
    items: list = [{"role": "user", "content": QUESTION}]
    while True:
        response = client.responses.create(model="gpt-x", input=items, tools=responses_tools(pack))
        outputs = run_responses_tool_calls(pack, response)  # one function_call_output per function_call
        if not outputs:
            print("answer:", response.output_text)
            return response.output_text
        calls = [item for item in response.output if item.type == "function_call"]
        for call, output in zip(calls, outputs):
            show("→", f"{call.name}({call.arguments})")
            show("←", output["output"])
        items += [*response.output, *outputs]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
