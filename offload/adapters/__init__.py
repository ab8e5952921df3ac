"""Attach offload to agents: a framework-neutral ToolPack, and thin adapters for each SDK.

`offload.adapters.openai`, `.anthropic`, `.langchain` and `.mcp_server` each import their SDK only when
used (install the extra: `offload[openai]`, `offload[anthropic]`, `offload[langchain]`, `offload[mcp]`).
"""

from __future__ import annotations

from .toolpack import ARTIFACT_URI, PackTool, ToolPack, as_output

__all__ = ["ARTIFACT_URI", "PackTool", "ToolPack", "as_output"]
