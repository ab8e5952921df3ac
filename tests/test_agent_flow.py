"""A scripted agent on real data: find a record in a multi-MB JSON document, read around it, find the error
at the end of a multi-MB log — through the model-facing dispatcher, every response within its budget."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from offload.tools.schemas import TOOLS, dispatch


def installed_files_document() -> dict:
    """Real data: every installed package with every file it installed (path, size, hash)."""
    packages = []
    for dist in importlib.metadata.distributions():
        files = [{"path": str(f), "size": f.size, "hash": f.hash.value if f.hash else None}
                 for f in (dist.files or [])]
        packages.append({"name": dist.metadata["Name"], "version": dist.version, "files": files})
    packages.sort(key=lambda p: p["name"].lower())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = [{"path": str(path.relative_to(stdlib)), "size": path.stat().st_size,
                "kind": "package" if path.name == "__init__.py" else path.suffix.lstrip(".") or "file",
                "head": _first_line(path)}
               for path in sorted(stdlib.rglob("*")) if path.is_file() and "site-packages" not in path.parts]
    return {"generated_by": "importlib.metadata", "count": len(packages), "packages": packages,
            "stdlib": modules}


def _first_line(path: Path) -> str:
    if path.suffix != ".py":
        return ""
    with path.open(encoding="utf-8", errors="replace") as f:
        return f.readline().strip()[:120]


def shell_session_log() -> str:
    """Real output of a shell tool call: a big listing, then an error on the last lines."""
    proc = subprocess.run("find /usr/lib /usr/share -xdev -printf '%M %u %s %p\\n' 2>/dev/null | head -n 60000; "
                          "ls -l /nonexistent/build/output.bin 2>&1; echo exit status 2",
                          shell=True, capture_output=True, text=True)
    return proc.stdout


@pytest.fixture(scope="module")
def document():
    doc = installed_files_document()
    text = json.dumps(doc, indent=2)
    assert len(text) > 2_000_000, "the test environment should hold a few MB of package metadata"
    return doc, text


def call(off, real_count, name: str, **arguments):
    out = dispatch(off, name, json.dumps(arguments), session="agent")
    assert not out.is_error, out.text
    budget = off.settings.slice_tokens if name == "fetch_slice" else off.settings.query_tokens
    assert real_count(out.text) <= budget, (name, arguments, real_count(out.text))
    assert real_count(json.dumps(out.structured)) <= budget + 200  # the JSON envelope adds a little
    return out


def test_agent_finds_reads_around_and_finds_the_error(off, real_count, document):
    doc, text = document
    ref = off.process("pip_inspect", text, session="agent")
    assert real_count(str(ref)) < 1000
    assert ref.items == len(doc["stdlib"]) and ref.lines == text.count("\n") + 1

    # 1. a record in the middle, by JMESPath
    middle_pkg = doc["packages"][len(doc["packages"]) // 2]
    target = next(f for f in middle_pkg["files"][len(middle_pkg["files"]) // 2:] if f["size"])
    expression = f"packages[?name=='{middle_pkg['name']}'].files[] | [?path=='{target['path']}']"
    found = call(off, real_count, "query_artifact", artifact_id=ref.artifact_id, jmespath=expression)
    assert found.structured["result"] == [target]

    # 2. where it is, by grep (0-based line numbers, the same as fetch_slice's)
    hits = call(off, real_count, "query_artifact", artifact_id=ref.artifact_id,
                grep=re.escape(json.dumps(target["path"])), limit=5)
    first = hits.structured["result"][0]
    line_no = int(first.split(":", 1)[0])

    # 3. read around it
    around = call(off, real_count, "fetch_slice", artifact_id=ref.artifact_id, offset=line_no - 2, limit=6)
    lines = text.split("\n")
    assert around.structured["content"].split("\n") == lines[line_no - 2 : line_no + 4]
    assert str(target["size"]) in around.structured["content"]

    # 4. a multi-MB log whose error is at the end
    log = shell_session_log()
    assert len(log) > 2_000_000
    lref = off.process("bash", {"stdout": log, "stderr": "", "exit_code": 2}, session="agent")
    assert "No such file" in str(lref)  # the tail that matters is in the reference itself
    err = call(off, real_count, "query_artifact", artifact_id=lref.artifact_id, grep="No such file|cannot access",
               offset=-1)
    log_lines = log.split("\n")
    (match,) = err.structured["result"]
    n = int(match.split(":", 1)[0])
    assert log_lines[n].startswith("ls: cannot access") and n >= len(log_lines) - 3
    end = call(off, real_count, "fetch_slice", artifact_id=lref.artifact_id, offset=-2)
    assert end.structured["content"].split("\n") == log_lines[-3:-1]

    # 5. every call is in the log, and reruns unchanged
    assert {e["op"] for e in off.extracts()} == {"jmespath", "grep", "slice"}
    assert {r["status"] for r in off.rerun()} == {"unchanged"}


def test_dispatcher_errors_are_readable_and_never_raise(off):
    ref = off.process("read", "x\n" * 50_000)
    cases = [
        ("fetch_slice", "not json", "not a JSON object"),
        ("fetch_slice", {"offset": 3}, "artifact_id is required"),
        ("fetch_slice", {"artifact_id": ref.artifact_id, "bogus": 1}, "unknown argument"),
        ("fetch_slice", {"artifact_id": ref.artifact_id, "limit": -3}, "negative"),
        ("fetch_slice", {"artifact_id": "art_nope0000000000"}, "as a reference in this conversation names"),
        ("query_artifact", {"artifact_id": ref.artifact_id, "jmespath": "a"}, "JSON"),
        ("query_artifact", {"artifact_id": ref.artifact_id, "grep": "(x"}, ""),
        ("drop_tables", {}, "Unknown tool"),
    ]
    for name, args, needle in cases:
        out = dispatch(off, name, args if isinstance(args, str) else json.dumps(args))
        assert out.is_error and out.text.startswith("Error: ") and needle in out.text, (name, args, out.text)


def test_tool_schemas_are_valid_and_describe_units():
    import jsonschema

    for tool in TOOLS.values():
        jsonschema.Draft202012Validator.check_schema(tool["input_schema"])
        assert "Example:" in tool["description"]
    assert {"lines", "chars", "bytes", "items"} <= set(TOOLS["fetch_slice"]["input_schema"]["properties"]["unit"]["enum"])
    jsonschema.validate({"artifact_id": "art_abc123", "offset": -40}, TOOLS["fetch_slice"]["input_schema"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"artifact_id": "art_abc123", "limit": -1}, TOOLS["fetch_slice"]["input_schema"])
