"""An MCP client reading an offloaded result through `offload mcp` (runs offline: a scripted stand-in model).

The harness stored the big tool result (as any offload user does); the model's tools come from the
`offload mcp` server, started over stdio as an MCP client config would start it.
"""

import os
import sys
import tempfile

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from _scripted import build_log, next_step, show
from offload import Offloader


async def loop(store_url: str, reference: str) -> str:
    server = StdioServerParameters(command=sys.executable, args=["-m", "offload", "mcp"],
                                   env={**os.environ, "OFFLOAD_URL": store_url})
    async with Client(stdio_client(server, errlog=sys.stderr)) as client:  # the server's log joins ours
        listed = await client.list_tools()
        print("tools:", ", ".join(tool.name for tool in listed.tools))
        results = [reference]
        while "answer" not in (step := next_step(results)):
            result = await client.call_tool(step["tool"], step["arguments"])  # text + structuredContent
            show("→", f"{step['tool']}({step['arguments']})")
            show("←", result.content[0].text)
            results.append(result.content[0].text)
    print("answer:", step["answer"])
    return step["answer"]


def main(store_url: str) -> str:
    with Offloader(store_url) as off:
        reference = off.process("build_log", build_log("1432"), args={"build": "1432"}, session="mcp-example")
    show("←", str(reference))
    return anyio.run(loop, store_url, str(reference))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(f"sqlite:///{folder}/store.db")
