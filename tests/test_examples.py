"""The examples in examples/ run and end with the right answer, so they never rot.

Each runs as `python examples/NAME.py` would run it (as __main__, with its own temporary store), in this
process so the SDKs are imported once; mcp_client.py still starts `offload mcp` as a separate process.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = ["openai_chat.py", "openai_responses.py", "openai_agents.py", "anthropic_messages.py",
           "langchain_agent.py", "mcp_client.py"]
ANSWER = ("answer: The link step failed (log line 20000): [20000] FATAL ld: undefined reference to `inflateEnd' in "
          "libpack.a(zip.o) — and the log ends: [20001] build 1432 failed: exit status 2")


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")) == sorted(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_goes_from_tool_to_reference_to_query_and_slice_to_answer(script, monkeypatch, capfd):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as running the script puts its folder first
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    lines = capfd.readouterr().out.splitlines()
    assert any(line.startswith("← [offload] The result of `build_log` was too large") for line in lines), lines
    assert any(line.startswith("→ query_artifact(") for line in lines), lines
    assert any(line.startswith("→ fetch_slice(") for line in lines), lines
    assert lines[-1] == ANSWER
