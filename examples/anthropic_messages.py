"""An agent loop on the Anthropic Messages API with offload attached (runs offline: a scripted stand-in model).

tool → reference → query_artifact / fetch_slice → answer. With a real model, drop `http_client=` and the
base URL, and set ANTHROPIC_API_KEY.
"""

import tempfile

import httpx2
from anthropic import Anthropic

from _scripted import QUESTION, anthropic_transport, build_log, show
from offload import Offloader
from offload.adapters import ToolPack
from offload.adapters.anthropic import run_tool_uses, tools


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        pack = ToolPack(off, [build_log], session="anthropic-example")
        return loop(pack)


def loop(pack: ToolPack) -> str:
    client = Anthropic(api_key="scripted", base_url="http://model.invalid",
                       http_client=httpx2.Client(transport=anthropic_transport()))
    messages: list = [{"role": "user", "content": QUESTION}]
    while True:
        message = client.messages.create(model="claude-x", max_tokens=1024, messages=messages, tools=tools(pack))
        if message.stop_reason != "tool_use":
            answer = "".join(block.text for block in message.content if block.type == "text")
            print("answer:", answer)
            return answer
        messages.append({"role": "assistant", "content": message.content})
        results = run_tool_uses(pack, message)  # one tool_result block per tool_use block
        for use, result in zip((b for b in message.content if b.type == "tool_use"), results):
            show("→", f"{use.name}({use.input})")
            show("←", result["content"])
        messages.append({"role": "user", "content": results})


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
