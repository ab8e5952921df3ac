"""Turn whatever a tool returned into bytes to measure and store, remembering its shape.

A shell result (a dict with stdout/stderr/exit_code, a CompletedProcess, or a (stdout, stderr, code)
tuple) keeps its parts apart: stdout is the artifact, stderr and the exit code travel beside it.
Objects are stored as their JSON text; str as UTF-8; bytes as they are.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Any

from .jsontext import dumps


@dataclass
class Payload:
    data: bytes  # what is measured and stored (stdout for a shell result)
    text: str | None  # the same as text, when it came as text (saves a decode)
    is_object: bool = False  # came as a JSON-able object
    stderr: bytes | None = None
    exit_code: int | None = None

    @property
    def is_shell(self) -> bool:
        return self.exit_code is not None or self.stderr is not None


def _encode(text: str) -> bytes:
    """UTF-8; lone surrogates U+DC80–U+DCFF are bytes a decoder escaped (os.fsdecode, subprocess with
    errors="surrogateescape"), so they turn back into those very bytes. Other lone surrogates cannot
    be anything's original bytes; they are kept as their 3-byte forms."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="surrogatepass")


def _as_bytes(value: Any) -> tuple[bytes, str | None]:
    if value is None:
        return b"", ""
    if isinstance(value, str):
        return _encode(value), value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None
    return dumps(value, non_str_keys=True), None  # exact, also beyond orjson (see jsontext)


def _exit_code(code: Any) -> int | None:
    """An exit code as a number: an int, a whole float or a string of digits. Anything else (1.5,
    "segfault") is None: the result is then not read as a shell result, and is stored whole as JSON."""
    if isinstance(code, bool):
        return None
    if isinstance(code, int):
        return code
    if isinstance(code, float) and code.is_integer():
        return int(code)
    if isinstance(code, str) and re.fullmatch(r"[+-]?\d{1,18}", code.strip()):
        return int(code)
    return None


def _shell_parts(result: Any) -> tuple[Any, Any, Any] | None:
    if isinstance(result, subprocess.CompletedProcess):
        return result.stdout, result.stderr, result.returncode
    if isinstance(result, dict) and "stdout" in result and ({"stderr", "exit_code", "returncode"} & result.keys()):
        code = result.get("exit_code", result.get("returncode"))
        if code is not None and _exit_code(code) is None:
            return None
        if set(result) <= {"stdout", "stderr", "exit_code", "returncode"}:
            return result.get("stdout"), result.get("stderr"), _exit_code(code) if code is not None else None
    if (isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], (str, bytes, type(None)))
            and isinstance(result[1], (str, bytes, type(None))) and isinstance(result[2], int)):
        return result
    return None


def to_payload(result: Any) -> Payload:
    shell = _shell_parts(result)
    if shell is not None:
        stdout, stderr, code = shell
        data, text = _as_bytes(stdout)
        err, _ = _as_bytes(stderr)
        return Payload(data, text, stderr=err, exit_code=code)
    if isinstance(result, (str, bytes, bytearray, memoryview)):
        data, text = _as_bytes(result)
        return Payload(data, text)
    data, _ = _as_bytes(result)
    return Payload(data, None, is_object=True)


def cheap_fits(payload: Payload, limit: int) -> bool:
    """True when the result surely fits without estimating: a token is at least one UTF-8 byte."""
    size = len(payload.data) + len(payload.stderr or b"")
    return size <= limit
