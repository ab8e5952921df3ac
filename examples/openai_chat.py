"""An agent loop on OpenAI Chat Completions with offload attached (runs offline: a scripted stand-in model).

tool → reference → query_artifact / fetch_slice → answer. With a real model, drop `http_client=` and the
base URL, and set OPENAI_API_KEY.
"""

import tempfile

import httpx2
from openai import OpenAI

from _scripted import QUESTION, build_log, chat_completions_transport, show
from offload import Offloader
from offload.adapters import ToolPack
from offload.adapters.openai import chat_tools, run_chat_tool_calls


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        pack = ToolPack(off, [build_log], session="chat-example")  # your tools, wrapped, plus the two companions
        return loop(pack)


def loop(pack: ToolPack) -> str:
    client = OpenAI(api_key="scripted", base_url="http://model.invalid/v1",
                    http_client=httpx2.Client(transport=chat_completions_transport()))
    messages = [{"role": "user", "content": QUESTION}]
    while True:
        reply = client.chat.completions.create(model="gpt-x", messages=messages, tools=chat_tools(pack))
        message = reply.choices[0].message
        if not message.tool_calls:
            print("answer:", message.content)
            return message.content
        results = run_chat_tool_calls(pack, message)  # one {"role": "tool"} message per tool call
        for call, result in zip(message.tool_calls, results):
            show("→", f"{call.function.name}({call.function.arguments})")
            show("←", result["content"])
        messages += [message, *results]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
