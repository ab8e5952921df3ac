"""The README's promises: its library example runs, and .ci/run runs exactly its test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_library_example_runs(tmp_path):
    example = next(block for block in re.findall(r"```python\n(.*?)```", README, re.S) if "@off.tool" in block)
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OFFLOAD_URL": f"sqlite:///{tmp_path / 's.db'}"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "stored whole as art_" in out.stdout and "'error'" in out.stdout


def test_ci_runs_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
