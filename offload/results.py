"""Turn whatever a tool returned into bytes to measure and store, remembering its shape.

A shell result (a dict with stdout/stderr/exit_code, a CompletedProcess, or a (stdout, stderr, code)
tuple) keeps its parts apart: stdout is the artifact, stderr and the exit code travel beside it.
Objects are stored as their JSON text; str as UTF-8; bytes as they are.
"""

from __future__ import annotations

import inspect
import re
import subprocess
from dataclasses import dataclass
from typing import Any, Callable

from .jsontext import dumps


@dataclass
class Payload:
    data: bytes  # what is measured and stored (stdout for a shell result)
    text: str | None  # the same as text, when it came as text (saves a decode)
    is_object: bool = False  # came as a JSON-able object
    stderr: bytes | None = None
    exit_code: int | None = None
    fields: dict | None = None  # a shell dict's other keys ({"duration_ms": 12}), shown beside the exit code
    stream: str | None = None  # what a shell dict called its stdout, when not `stdout` ("output")

    @property
    def is_shell(self) -> bool:
        return self.exit_code is not None or self.stderr is not None


def _encode(text: str) -> bytes:
    """UTF-8; lone surrogates U+DC80–U+DCFF are bytes a decoder escaped (os.fsdecode, subprocess with
    errors="surrogateescape"), so they turn back into those very bytes. Other lone surrogates cannot be
    anything's original bytes (a JSON escape such as \\ud83d: a JavaScript string cut inside an emoji):
    each is stored as that escape, six characters, as JSON results and the store's text columns keep them.
    Their 3-byte forms were no UTF-8: read back as three U+FFFD, counted as three characters."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    escaped = _NOT_BYTES.sub(_escape, text)
    return escaped.encode("utf-8", errors="surrogateescape")


_NOT_BYTES = re.compile("[\ud800-\udc7f\udd00-\udfff]")  # lone surrogates no decoder made of a byte
_BYTE_SURROGATES = re.compile("[\udc80-\udcff]")  # the ones `_encode` reads as the bytes a decoder escaped


def _escape(found: re.Match) -> str:
    return f"\\u{ord(found.group()):04x}"


def json_text(text: str) -> str:
    """A text that came as JSON (an MCP server's), for `Offloader.process`: its lone surrogates
    U+DC80–U+DCFF as their escapes (`\\udc80`, six characters), which `_encode` would store as the bytes
    a Python decoder escaped, and no JSON text means; `text` itself when it has none. `_encode` stores
    the other lone surrogates as escapes itself."""
    if text.isascii() or not _BYTE_SURROGATES.search(text):
        return text
    return _BYTE_SURROGATES.sub(_escape, text)


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


_CODE_KEYS = {"exit_code", "returncode"}
SHELL_FIELDS_BYTES = 1024  # a shell dict's other keys, as JSON, shown whole beside the exit code up to this


def _shell_parts(result: Any) -> tuple[Any, Any, Any, dict | None, str] | None:
    """(stdout, stderr, exit code, other fields, what the stdout is called) of a shell result, else None.

    A dict is one with `stdout` and a `stderr` or an exit code, or with `output` (text: the combined
    stream some harnesses return) and an exit code. Stored as a JSON document instead, its output was
    cut to ~250 characters in the middle of the shape, and the error at its end went unseen."""
    if isinstance(result, subprocess.CompletedProcess):
        return result.stdout, result.stderr, result.returncode, None, "stdout"
    if isinstance(result, dict):
        if "stdout" in result and ({"stderr"} | _CODE_KEYS) & result.keys():
            stream = "stdout"
        elif (_CODE_KEYS & result.keys() and "output" in result
              and isinstance(result["output"], (str, bytes, type(None)))):
            stream = "output"
        else:
            return None
        code = result.get("exit_code", result.get("returncode"))
        if (code is not None or stream == "output") and _exit_code(code) is None:
            return None
        fields = _shell_fields(result, stream)
        if fields is not None:
            return (result.get(stream), result.get("stderr"), _exit_code(code) if code is not None else None, fields,
                    stream)
    if (isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], (str, bytes, type(None)))
            and isinstance(result[1], (str, bytes, type(None))) and isinstance(result[2], int)):
        return (*result, None, "stdout")
    return None


def _shell_fields(result: dict, stream: str) -> dict | None:
    """A shell dict's keys besides its stdout (or output), stderr and the exit code (`duration_ms`,
    `timed_out`, `cwd`): {} when there are none, None when they are more than SHELL_FIELDS_BYTES of JSON
    (or not JSON-able), which leaves the whole dict a JSON document. Before, any other key did: stdout
    and stderr were then cut as two strings of the document, and an error at the end of stderr went unseen."""
    fields = {key: value for key, value in result.items() if key not in {stream, "stderr", *_CODE_KEYS}}
    if not fields:
        return fields
    if not all(isinstance(key, str) for key in fields):
        return None
    try:
        return fields if len(dumps(fields)) <= SHELL_FIELDS_BYTES else None
    except Exception:  # noqa: BLE001 - not JSON-able: the document's own path says why
        return None


def to_payload(result: Any) -> Payload:
    shell = _shell_parts(result)
    if shell is not None:
        stdout, stderr, code, fields, stream = shell
        data, text = _as_bytes(stdout)
        err, _ = _as_bytes(stderr)
        return Payload(data, text, stderr=err, exit_code=code, fields=fields or None,
                       stream=None if stream == "stdout" else stream)
    if isinstance(result, (str, bytes, bytearray, memoryview)):
        data, text = _as_bytes(result)
        return Payload(data, text)
    data, _ = _as_bytes(result)
    return Payload(data, None, is_object=True)


def cheap_fits(payload: Payload, limit: int) -> bool:
    """True when a result that is not a shell's (`PassThrough._shell_fits` holds stdout and stderr each to
    its own limit) surely fits without estimating: a token is at least one UTF-8 byte of what the model
    reads (an object's JSON text, or `sent_bytes` of a text)."""
    if len(payload.data) > limit:
        return False
    if payload.is_object:  # its text is its JSON, and so is its structured form
        return True
    return sent_bytes(payload.data, payload.text is None) <= limit


# Bytes a JSON string writes escaped: `"`, `\` and the control characters with a short escape take two
# bytes (\n), the other control characters six (\u001b).
_SHORT_ESCAPES = b'"\\\n\t\r\b\f'
_LONG_ESCAPES = bytes(byte for byte in range(0x20) if byte not in _SHORT_ESCAPES)
_NOT_ESCAPED = bytes(byte for byte in range(256) if byte not in _SHORT_ESCAPES + _LONG_ESCAPES)
_NOT_LONG = bytes(byte for byte in range(256) if byte not in _LONG_ESCAPES)


def sent_bytes(data: bytes, decoded: bool = False) -> int:
    """The most UTF-8 bytes `data` takes as a passed-through result reaches the model: as text, or as
    the JSON string its structured form holds (`{"result": …}`), escapes and quotes included; `decoded`
    (bytes, read as text): each byte that is not UTF-8 is U+FFFD, three bytes."""
    size = len(data) * (3 if decoded and not data.isascii() else 1)  # a bound: finding which is not worth it
    escaped = data.translate(None, _NOT_ESCAPED)
    return size + 2 + len(escaped) + 4 * len(escaped.translate(None, _NOT_LONG))


def refuse_generator(fn: Callable, name: str) -> None:
    """A generator's values are not one result: offload would have stored the generator's repr (and a
    tool pack handed the model `"<generator object …>"`). How to join them is the tool's to say."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"tool {name!r} is a generator function: offload budgets one result per call. Return "
                        "its values collected instead (''.join(...) for text, list(...) for items).")
