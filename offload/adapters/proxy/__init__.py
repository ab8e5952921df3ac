"""The MCP proxy's parts: the JSON-RPC relay, the two kinds of upstream, and what it changes in results.

`offload.adapters.mcp_proxy` puts them together for `offload proxy`; see that module and the README.
"""

from __future__ import annotations

from .relay import Relay, StdoutWriter, serve_stdio
from .results import REFERENCE_OUTPUT_SCHEMA, offload_call_result, patch_tool_listing, widen_output_schema
from .upstream import HttpUpstream, StdioUpstream, UpstreamGone

__all__ = ["HttpUpstream", "REFERENCE_OUTPUT_SCHEMA", "Relay", "StdioUpstream", "StdoutWriter", "UpstreamGone",
           "offload_call_result", "patch_tool_listing", "serve_stdio", "widen_output_schema"]
