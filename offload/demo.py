"""`offload demo`: two real oversized tool calls on this machine, offloaded, then a slice and a query.

A grep over the Python standard library (what an agent's search tool returns when it walks a big
tree) and a JSON listing of the installed packages (a typical API dump). Everything runs on the
default embedded store, so what the demo stores can be browsed afterwards with `offload ls`.
"""

from __future__ import annotations

import importlib.metadata
import re
import sysconfig
from pathlib import Path
from typing import Callable

from .offloader import Offloader


def grep_stdlib(pattern: str = r"\bdef \w+\(self") -> str:
    """`grep -rn PATTERN` over the standard library, in grep's own output format."""
    root = Path(sysconfig.get_paths()["stdlib"])
    regex = re.compile(pattern)
    out = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                out.append(f"{path}:{number}:{line}")
    return "\n".join(out) + "\n"


def installed_packages() -> list[dict]:
    """What `pip list --format json` would say, with more of each package's metadata."""
    packages = []
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        packages.append({
            "name": meta["Name"], "version": dist.version, "summary": meta.get("Summary") or "",
            "license": (meta.get("License-Expression") or meta.get("License") or "")[:80],
            "requires_python": meta.get("Requires-Python") or "",
            "requires": sorted(dist.requires or []), "files": len(dist.files or []),
            "kind": "stdlib-backport" if (meta["Name"] or "").lower() in ("typing-extensions", "tomli") else
            ("binary" if any(str(f).endswith((".so", ".pyd")) for f in (dist.files or [])) else "pure"),
        })
    return sorted(packages, key=lambda p: (p["name"] or "").lower())


def run(off: Offloader, echo: Callable[[str], None] = print) -> dict:
    """Run the demo; returns the ids it stored (the tests use them)."""
    rule = "─" * 78
    echo(f"Store: {off.store.engine.url.render_as_string(hide_password=True)}")
    grep_out = grep_stdlib()
    echo(f"\n{rule}\n1. A grep over the Python standard library returned {len(grep_out.encode()):,} bytes "
         f"({grep_out.count(chr(10)):,} lines, ~{off.counter.count(grep_out):,} tokens). The model gets:\n{rule}")
    ref = off.process("grep", grep_out, args={"pattern": r"\bdef \w+\(self", "path": "stdlib"}, session="demo")
    echo(str(ref))
    shown = off.counter.count(str(ref))
    echo(f"{rule}\n   → {shown:,} tokens instead of ~{off.counter.count(grep_out):,}.")

    echo(f"\n{rule}\n2. The model reads the end of it with fetch_slice(offset=-5):\n{rule}")
    page = off.fetch_slice(ref.artifact_id, offset=-5, session="demo")
    echo(page["content"])
    echo(f"   (lines {page['offset']:,}–{page['total'] - 1:,} of {page['total']:,})")

    echo(f"\n{rule}\n3. ...and searches it with query_artifact(grep=\"def __init__\", limit=5):\n{rule}")
    hits = off.query_artifact(ref.artifact_id, grep=r"def __init__\(self", limit=5, session="demo")
    echo("\n".join(hits["result"]))
    echo(f"   ({hits['count']:,} matching lines in all; next_offset={hits['next_offset']})")

    packages = installed_packages()
    while len(packages) < 2000:  # a small environment: repeat the listing so it is really oversized
        packages = packages + [dict(p, name=f"{p['name']}-copy{len(packages)}") for p in packages[:500]]
    pref = off.process("pip_list", packages, args={"format": "json"}, session="demo")
    raw = off.counter.count(str(packages))
    echo(f"\n{rule}\n4. A JSON listing of {len(packages):,} installed packages (~{raw:,} tokens). The model gets:"
         f"\n{rule}\n{pref}")
    if pref.hints:
        expression = pref.hints[-1]["jmespath"]
        echo(f"\n{rule}\n5. One of its verified hints, run: query_artifact(jmespath={expression!r}):\n{rule}")
        result = off.query_artifact(pref.artifact_id, jmespath=expression, limit=5, session="demo")
        echo(str(result.get("result", result.get("text")))[:1500])
    echo(f"\n{rule}\nBrowse what was stored: `offload ls`, `offload show {ref.artifact_id}`, "
         f"`offload cat {ref.artifact_id} | head`, `offload extracts`, `offload rerun`.")
    return {"grep": ref.artifact_id, "packages": pref.artifact_id}
