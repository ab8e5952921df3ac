"""The two companion tools as a model sees them: JSON Schemas, descriptions, and one dispatcher.

Defined once here; the OpenAI / Anthropic / LangChain / MCP adapters only translate these shapes.
`dispatch()` takes a tool name and JSON arguments and returns text for the model plus the structured
result; it never raises for a bad call — the model gets an error it can act on instead.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ArtifactNotFound, OffloadError
from ..jsontext import standard_text

if TYPE_CHECKING:
    from ..offloader import Offloader

log = logging.getLogger("offload")

FETCH_SLICE_DESCRIPTION = """\
Read a bounded page of a stored tool result (an artifact) by its id, as named in an [offload] reference.
Units: "lines" (default; 0-based line numbers, the same as query_artifact grep shows), "chars", "bytes",
or "items" (whole elements of a JSON array — the document's main array by default, or the array at a
JMESPath `path`; NDJSON rows, and the entries of NUL-separated output such as find -print0 as JSON strings,
are items). Bytes of binary data come back base64; bytes of text come back as
text, except bytes that are not valid UTF-8: those come back on their own, base64, and the page says so.
A negative offset counts from the end: offset=-40 reads the last 40 lines, where logs keep their errors
(the page ends at the end: if they do not all fit, the last that do, and a note gives the call for the rest).
The page always fits a token budget: if `limit` units would not fit, fewer come back. Every response says
`returned`, `total` and `next` — the exact arguments of the following call (null at the end). A single line
or item longer than the budget comes back cut; `next` reads its rest (in chars or bytes, with a `path` that
marks it as that rest: pass it as given), then returns to lines or items.
Example: fetch_slice(artifact_id="art_k3j2h5g6f7d8s9a0", offset=-40)"""

QUERY_ARTIFACT_DESCRIPTION = """\
Extract exactly what you need from a stored tool result (an artifact), with exactly one of:
- jmespath: a JMESPath expression over a JSON document (NDJSON: over the array of rows), e.g.
  "items[?status=='error'].{id: id, msg: message}" or "length(items)";
- grep: a regular expression over the lines of a text artifact; matches come back as "N: text" with 0-based
  line numbers (fetch_slice offsets; NUL-separated output: its entries, numbered as items), `context` lines
  around each as "N- text", the total match count in `count`, paged by offset/limit (offset=-5: the last
  5 matches);
- sql: one DuckDB SELECT over tabular data (a JSON array of objects, NDJSON rows, CSV/TSV) seen as a table
  named `artifact`, e.g. "SELECT status, count(*) FROM artifact GROUP BY 1". Read-only, time-limited.
A result that fits the budget comes back inline with `count`, `next_offset` and `next`; a larger one is
stored as a new artifact and you get its reference (sizes, preview, hints) to page or query further.
Example: query_artifact(artifact_id="art_k3j2h5g6f7d8s9a0", grep="Traceback|Error", context=3)"""

_ID = {"type": "string", "pattern": "^art_[a-z0-9]+$",
       "description": "The artifact id from an [offload] reference, like art_k3j2h5g6f7d8s9a0."}

FETCH_SLICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact_id": _ID,
        "offset": {"type": ["integer", "null"], "default": 0,
                   "description": "0-based start in `unit`s; negative counts from the end (-40: the last 40); "
                                  "null: 0."},
        "limit": {"type": ["integer", "null"], "minimum": 1, "default": None,
                  "description": "How many units (1 or more); null for as many as fit the page budget."},
        "unit": {"type": ["string", "null"], "enum": ["lines", "chars", "bytes", "items", None], "default": "lines",
                 "description": "lines, chars, bytes (binary as base64), or items of a JSON array / NDJSON rows / "
                                "NUL-separated entries; null: lines."},
        "path": {"type": ["string", "null"], "default": None,
                 "description": "With unit=items: JMESPath of the array to page (default: the main array). "
                                "With chars or bytes: only as a cut's next gives it (the rest of a cut line or item)."},
    },
    "required": ["artifact_id"],
    "additionalProperties": False,
}

QUERY_ARTIFACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact_id": _ID,
        "jmespath": {"type": ["string", "null"], "default": None,
                     "description": "JMESPath over a JSON / NDJSON artifact, e.g. items[?status=='error'].id"},
        "grep": {"type": ["string", "null"], "default": None,
                 "description": "Regular expression over the artifact's lines, e.g. Traceback|ERROR"},
        "sql": {"type": ["string", "null"], "default": None,
                "description": "One DuckDB SELECT over the table `artifact` (JSON array of objects, NDJSON, CSV)."},
        "offset": {"type": ["integer", "null"], "default": 0,
                   "description": "First result (match, row or array element) to return; negative for grep "
                                  "counts from the end; null: 0."},
        "limit": {"type": ["integer", "null"], "minimum": 1, "default": None,
                  "description": "How many results (1 or more); null for all (stored as a new artifact if too "
                                 "big)."},
        "context": {"type": ["integer", "null"], "minimum": 0, "maximum": 50, "default": 0,
                    "description": "grep only: lines of context before and after each match; null: 0."},
    },
    "required": ["artifact_id"],
    "additionalProperties": False,
}

TOOLS: dict[str, dict[str, Any]] = {
    "fetch_slice": {"name": "fetch_slice", "description": FETCH_SLICE_DESCRIPTION, "input_schema": FETCH_SLICE_SCHEMA},
    "query_artifact": {"name": "query_artifact", "description": QUERY_ARTIFACT_DESCRIPTION,
                       "input_schema": QUERY_ARTIFACT_SCHEMA},
}


@dataclass
class ToolOutput:
    text: str  # what the model reads
    structured: dict[str, Any]  # the same as JSON (structuredContent, function output)
    is_error: bool = False


def dispatch(off: "Offloader", name: str, arguments: dict[str, Any] | str | None,
             *, session: str | None = None) -> ToolOutput:
    """Run a companion tool by name with the model's JSON arguments; errors become model-readable text."""
    args = arguments_object(arguments)
    if isinstance(args, str):
        return error_output(f"The arguments of {name} are not a JSON object ({args}). Example: "
                      '{"artifact_id": "art_…", "offset": 0}', "invalid_argument")
    if not isinstance(name, str) or name not in TOOLS:
        return error_output(f"Unknown tool {name!r}; offload provides fetch_slice and query_artifact.", "unknown_tool")
    args = _as_meant(TOOLS[name]["input_schema"]["properties"], args)
    allowed = set(TOOLS[name]["input_schema"]["properties"])
    unknown = set(args) - allowed
    if unknown or "artifact_id" not in args:
        problem = f"unknown argument(s) {sorted(unknown)}" if unknown else "artifact_id is required"
        return error_output(f"{name}: {problem}. It takes {', '.join(sorted(allowed))}.", "invalid_argument")
    try:
        if name == "fetch_slice":
            result = off.fetch_slice(session=session, **args)
            return ToolOutput(render_slice(result), result)
        result = off.query_artifact(session=session, **args)
        return ToolOutput(render_query(result), _structured(result))
    except OffloadError as exc:
        return offload_error_output(exc)
    except TypeError as exc:
        return error_output(f"{name}: {exc}", "invalid_argument")
    except Exception as exc:  # noqa: BLE001 - a tool call never fails because offload failed
        log.exception("offload %s failed", name)
        return error_output(f"{name} failed inside offload ({type(exc).__name__}: {exc}); the stored artifact is "
                      "unchanged. Try a smaller request.", "internal_error")


# The deepest result the structured form carries as JSON values. MCP's SDK (pydantic) refuses to write
# JSON more than ~250 levels deep, and orjson 255: a query result 300 deep failed the whole call with
# "Internal server error", though documents are queried up to 1,024 levels deep.
STRUCTURED_DEPTH = 200


def _structured(result: dict[str, Any]) -> dict[str, Any]:
    """The query result's structured form: itself, or, when its result is nested deeper than
    STRUCTURED_DEPTH, with that result as its JSON text (the text form shows the same JSON)."""
    if "result" not in result or not _deeper_than(result["result"], STRUCTURED_DEPTH):
        return result
    note = (f"result is nested more than {STRUCTURED_DEPTH} levels deep, deeper than JSON writers go, so it is "
            "given as its JSON text")
    return {**result, "result": standard_text(result["result"]),
            "note": f"{result['note']}; {note}" if result.get("note") else note}


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether lists and dicts nest in `value` more than `depth` levels deep (a loop, not a recursion)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            if level >= depth:
                return True
            stack.extend((inner, level + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return False


_ID = re.compile(r"art_[a-z0-9]{16}", re.I)
_INTEGER = re.compile(r"\s*[+-]?\d{1,19}\s*")


def _as_meant(properties: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """A model's arguments as it meant them, where that is not in doubt: null is the default (as if left
    out: models fill every field, `"offset": null` was refused), an integer written as a string is the
    integer (`"-40"`, as pydantic reads a user tool's), and an id keeps no spaces, quotes or capitals
    around its letters (`" art_…"` was "not found")."""
    meant = {key: value for key, value in args.items() if value is not None}
    for key, value in meant.items():
        kind = properties.get(key, {}).get("type")
        integer = "integer" in (kind if isinstance(kind, list) else [kind])
        if integer and isinstance(value, str) and _INTEGER.fullmatch(value):
            meant[key] = int(value)
    given = meant.get("artifact_id")
    if isinstance(given, str) and _ID.fullmatch(plain := given.strip().strip("\"'`")):
        meant["artifact_id"] = plain.lower()
    return meant


def arguments_object(arguments: Any) -> dict[str, Any] | str:
    """A tool call's arguments (a JSON object, its text, or None) as a dict with string keys, or what is
    wrong with them: `5`, `[{}]` and 50,000 nested brackets are not an object (`null` is no arguments)."""
    try:
        value = json.loads(arguments or "{}") if isinstance(arguments, (str, bytes, bytearray)) else arguments
    except RecursionError:
        return "nested too deep"
    except ValueError as exc:  # JSONDecodeError and bytes that are not UTF-8
        return str(exc)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return f"got {type(value).__name__}"
    value = dict(value)
    if not all(isinstance(key, str) for key in value):
        return "its keys must be strings"
    return value


# The most characters of an error the model reads. Messages quote what the model sent (an expression, an
# id, an argument's name), and a 100,000-character SQL statement came back whole: 12,578 tokens of error.
ERROR_CHARS = 2000


def bounded_message(message: str) -> str:
    """`message` cut to ERROR_CHARS in the middle: its start says what is wrong, its end what to do."""
    if len(message) <= ERROR_CHARS:
        return message
    omitted = len(message) - ERROR_CHARS
    return (f"{message[:ERROR_CHARS * 2 // 3]} … [{omitted:,} characters of this message not shown] … "
            f"{message[-ERROR_CHARS // 3:]}")


def offload_error_output(exc: OffloadError) -> ToolOutput:
    """An OffloadError as the model reads it: an unknown artifact id says what ids look like, not the CLI's
    and the API's listings, which are not the model's to call."""
    if isinstance(exc, ArtifactNotFound):
        return error_output(f"No artifact {exc.artifact_id!r}. Artifact ids are 'art_' and 16 letters and digits, "
                            "exactly as a reference in this conversation names them.", exc.code)
    return error_output(exc.model_message(), exc.code)


def error_output(message: str, code: str) -> ToolOutput:
    """The model-readable result of a call that failed: the message (bounded) and its error code."""
    message = bounded_message(message)
    return ToolOutput(f"Error: {message}", {"error": code, "message": message}, is_error=True)


def mcp_structured(out: ToolOutput) -> dict[str, Any] | None:
    """The structuredContent of an MCP result: none for an error. A client checks any structuredContent
    against the tool's outputSchema, which describes a page or a query result: the official TypeScript
    client threw on `{"error", "message"}` (-32602), and the model never saw the message."""
    return None if out.is_error else out.structured


def render_slice(page: dict[str, Any]) -> str:
    unit = page["unit"]
    end = page["offset"] + page["returned"] - 1
    span = (f"{unit} {page['offset']:,}–{end:,} of {page['total']:,}" if page["returned"]
            else f"no whole {unit} (offset {page['offset']:,} of {page['total']:,})")
    footer = [f"[{page['artifact_id']}: {span}"]
    if page.get("note"):  # a moved start, or bytes that are not UTF-8 and come back base64
        footer.append(page["note"])
    elif page.get("encoding") == "base64":
        footer.append("the content is base64")
    if page.get("cut"):
        footer.append(page["cut"])
    footer.append("next: " + _call("fetch_slice", page["next"]) if page["next"] else "end reached")
    return f"{page['content']}\n" + "; ".join(footer) + "]"


_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_item(value: Any) -> str:
    """One element of a result as JSON text. A lone surrogate (a JavaScript string cut inside an emoji)
    is written as its escape, as JSON allows: text holding it raw cannot be sent as UTF-8. An element
    nested deeper than the encoder goes (documents are queried up to 1,024 levels) is written by
    `jsontext.standard_text`, the same text at any depth."""
    try:
        text = _encode(value)
    except RecursionError:
        text = standard_text(value)
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def render_query(result: dict[str, Any], pieces: list[str] | None = None) -> str:
    """The text the model reads. JSON is written as the structured form is (one array element per line),
    so that the text and the JSON that the query budget measures are about the same size. `pieces`: the
    result's elements already encoded, for a caller measuring many prefixes of one page."""
    if "result" not in result:  # stored as a derived artifact: its reference is the answer
        return result.get("text") or json.dumps(result)
    value = result["result"]
    if result["kind"] == "grep":
        body = "\n".join(value) if value else "(no match)" if not result["count"] else "(none at this offset)"
    elif isinstance(value, list) and value:
        body = "[\n" + ",\n".join(pieces if pieces is not None else map(encode_item, value)) + "\n]"
    else:
        body = encode_item(value)
    notes = [f"{result['count']:,} result(s)"]
    if isinstance(value, list) and not value and result["count"]:  # "(no match)" beside 50,000 of them
        notes.append(f"none at this offset: the {result['count']:,} are at offsets 0–{result['count'] - 1:,}")
    if result.get("note"):  # what grep's numbers count, or how SQL's table was read
        notes.append(result["note"])
    if result.get("cut"):
        notes.append(result["cut"])
    if result.get("next"):
        notes.append(f"next: {_call('query_artifact', result['next'])}")
    return f"{body}\n[{result['kind']} {result['expression']!r}: {'; '.join(notes)}]"


def _call(name: str, args: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items() if v is not None)
    return f"{name}({inner})"


# -- what the two tools return (structured results: MCP outputSchema, function outputs) ------------

_NEXT = {"type": ["object", "null"], "description": "The exact arguments of the following call; null at the end."}

FETCH_SLICE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact_id": {"type": "string"},
        "unit": {"type": "string", "enum": ["lines", "chars", "bytes", "items"]},
        "offset": {"type": "integer", "description": "First unit returned (0-based, from the start)."},
        "limit": {"type": ["integer", "null"]},
        "returned": {"type": "integer", "description": "How many units this page holds."},
        "total": {"type": "integer", "description": "How many units the artifact holds."},
        "next_offset": {"type": ["integer", "null"]},
        "next": _NEXT,
        "content": {"type": "string", "description": "The page (bytes: base64; items: a JSON array)."},
        "cut": {"type": "string", "description": "Present when one unit was too big for the page and was cut."},
        "note": {"type": "string", "description": "Present when the page moved its start, holds bytes that are "
                                                  "not UTF-8, or entries shown with U+FFFD."},
    },
    "required": ["artifact_id", "unit", "offset", "limit", "returned", "total", "next_offset", "next", "content"],
}

QUERY_ARTIFACT_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Inline: the result with count and paging. Too big for the budget: the reference of the "
                   "derived artifact that holds it (derived_from names the queried one), with its text.",
    "properties": {
        "artifact_id": {"type": "string", "description": "The queried artifact, or the derived one."},
        "kind": {"type": "string"},
        "expression": {"type": "string"},
        "result": {"description": "The query's result (inline form)."},
        "count": {"type": "integer", "description": "Matches, rows or elements in the whole result."},
        "next_offset": {"type": ["integer", "null"]},
        "next": _NEXT,
        "cut": {"type": "string", "description": "Present when a result was too big for the page: what was cut "
                                                 "or left out, and the exact call that gets it whole."},
        "note": {"type": "string", "description": "Present when grep matched NUL-separated entries, not lines, or "
                                                  "matched no JSON spaced as the preview spaces it (it names the "
                                                  "compact pattern that matches), or "
                                                  "when SQL renamed names differing only in case or read ragged CSV "
                                                  "lines (a derived result's text ends with it; this copy may "
                                                  "give way to fit, named in left_out)."},
        "derived_from": {"type": "string"},
        "text": {"type": "string", "description": "The derived artifact's reference as the model reads it."},
        "left_out": {"type": "object", "description": "Present when members of this JSON gave way to fit the budget: which (fields), and why (the text form states them)."},
    },
    "required": ["artifact_id", "kind", "count"],
    "anyOf": [{"required": ["result", "expression", "next_offset", "next"]},
              {"required": ["derived_from", "text"]}],
}

OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {"fetch_slice": FETCH_SLICE_OUTPUT_SCHEMA,
                                             "query_artifact": QUERY_ARTIFACT_OUTPUT_SCHEMA}
