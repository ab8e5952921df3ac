"""The tool pack: offload's two companion tools plus the user's own tools, wrapped by an Offloader.

Framework-neutral: `call()` / `acall()` take a tool name and the model's JSON arguments and return a
`ToolOutput` (the text the model reads, the same facts as JSON). The OpenAI, Anthropic, LangChain and MCP
adapters only translate these definitions and outputs into their SDK's shapes.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
import logging
import re
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..errors import OffloadError, TooLarge
from ..jsontext import dumps, loads
from ..reference import Reference
from ..results import refuse_generator, to_payload
from ..tools.schemas import (OUTPUT_SCHEMAS, TOOLS, ToolOutput, arguments_object, bounded_message, dispatch,
                             error_output, offload_error_output)
from ..utf8 import invalid_bytes
from .strict import takes_null

if TYPE_CHECKING:
    from ..offloader import Offloader

log = logging.getLogger("offload")

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI's and Anthropic's APIs accept
ARTIFACT_URI = re.compile(r"artifact://(art_[a-z0-9]+)(?:#(.+))?", re.S)
DEFAULT_ARTIFACT_BYTES = 10 * 1024**2  # what one call of a tool may receive through artifact:// arguments
_JSON_TYPES = {"object", "array", "integer", "number", "boolean"}


@dataclass(frozen=True)
class PackTool:
    """One tool as every adapter sees it: a name, a description and a JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] | None = None  # None: a companion tool, run by offload's dispatch()
    artifact_args: bool = False  # resolve artifact://<id>[#jmespath] arguments before the tool runs
    max_artifact_bytes: int = DEFAULT_ARTIFACT_BYTES
    validator: type[BaseModel] | None = field(default=None, repr=False, compare=False)

    @property
    def is_companion(self) -> bool:
        return self.fn is None

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the structured result (the companion tools'; a user tool's result is its own)."""
        return OUTPUT_SCHEMAS.get(self.name) if self.is_companion else None


class ToolPack:
    """The companion tools and the user's tools, each result going through `off.process()`.

    >>> pack = ToolPack(off, [grep], session="conversation-1")          # doctest: +SKIP
    >>> pack.call("grep", '{"pattern": "TODO", "path": "."}').text      # doctest: +SKIP

    `catch_errors`: an exception raised by a user's tool becomes an error result the model can read
    (and a warning in the log) instead of ending the agent loop; set it False to let it propagate.
    """

    def __init__(self, off: "Offloader", tools: Iterable[Callable[..., Any]] = (), *, session: str | None = None,
                 companions: bool = True, catch_errors: bool = True):
        self.off = off
        self.session = session
        self.catch_errors = catch_errors
        self._user: dict[str, PackTool] = {}
        self._companions = {name: PackTool(name, spec["description"], spec["input_schema"])
                            for name, spec in TOOLS.items()} if companions else {}
        for fn in tools:
            self.add(fn)

    # -- the tools --------------------------------------------------------------------------

    def add(self, fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
            parameters: dict[str, Any] | None = None, artifact_args: bool = False,
            max_artifact_bytes: int = DEFAULT_ARTIFACT_BYTES):
        """Add a sync or async tool function; usable as a decorator. The function itself is unchanged.

        Its name, docstring and signature are the tool's name, description and JSON Schema unless given.
        `artifact_args=True` lets the model pass any argument as `artifact://<id>` (the stored content)
        or `artifact://<id>#<jmespath>` (a part of a stored JSON result), at most `max_artifact_bytes`
        per call, from this offloader's namespace only.
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = name or getattr(func, "__name__", None)
            if tool_name is None:  # a functools.partial, a callable object
                raise ValueError(f"{func!r} has no __name__: give the tool a name (add(fn, name=...))")
            if not TOOL_NAME.fullmatch(tool_name):
                raise ValueError(f"tool name {tool_name!r}: OpenAI and Anthropic accept 1-64 letters, digits, '_' "
                                 "and '-'; give another (add(fn, name=...))")
            if tool_name in self._companions or tool_name in self._user:
                raise ValueError(f"a tool named {tool_name!r} is already in this pack")
            refuse_generator(func, tool_name)
            schema, validator = ((parameters, None) if parameters is not None
                                 else _signature_schema(func, tool_name))
            text = description or inspect.getdoc(func) or tool_name
            if artifact_args:
                text += (f"\n\nAny argument may be given as artifact://<id> (a stored result, whole; at most "
                         f"{max_artifact_bytes:,} bytes in all) or artifact://<id>#<jmespath> (part of a stored "
                         "JSON result) instead of its value, so a large result need not be copied.")
            self._user[tool_name] = PackTool(tool_name, text, schema, func, artifact_args, max_artifact_bytes,
                                             validator)
            return func

        return register(fn) if fn is not None else register

    @property
    def tools(self) -> list[PackTool]:
        """The user's tools in the order added, then fetch_slice and query_artifact, each with a schema of
        its own: one made strict in place changed it for every pack in the process (they were shared)."""
        return [dataclasses.replace(tool, parameters=copy.deepcopy(tool.parameters))
                for tool in (*self._user.values(), *self._companions.values())]

    def get(self, name: str) -> PackTool | None:
        if not isinstance(name, str):  # a model's call may name its tool with anything
            return None
        return self._user.get(name) or self._companions.get(name)

    def __iter__(self) -> Iterator[PackTool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self._user) + len(self._companions)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    # -- calling them -----------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any] | str | None, *, session: str | None = None) -> ToolOutput:
        """Run a tool with the model's arguments (a JSON object or its text). Never raises for a bad call."""
        session = self.session if session is None else session
        tool = self.get(name)
        if tool is None:
            return self._unknown(name)
        if tool.is_companion:
            return dispatch(self.off, name, arguments, session=session)
        prepared = self._prepare(tool, arguments)
        if isinstance(prepared, ToolOutput):
            return prepared
        raw, kwargs = prepared
        if inspect.iscoroutinefunction(tool.fn) and _loop_running():  # a developer's mistake: not the model's
            raise RuntimeError(f"{tool.name} is async and an event loop is running here: use `await pack.acall()`")
        try:
            result = tool.fn(**kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
        except Exception as exc:  # noqa: BLE001 - see catch_errors
            return self._failed(tool, exc)
        return self._output(tool, result, raw, session)

    async def acall(self, name: str, arguments: dict[str, Any] | str | None, *,
                    session: str | None = None) -> ToolOutput:
        """`call()` for event loops: async tools are awaited, the rest (and the store) run in a thread."""
        session = self.session if session is None else session
        tool = self.get(name)
        if tool is None:
            return self._unknown(name)
        if tool.is_companion:
            return await asyncio.to_thread(dispatch, self.off, name, arguments, session=session)
        prepared = await asyncio.to_thread(self._prepare, tool, arguments)
        if isinstance(prepared, ToolOutput):
            return prepared
        raw, kwargs = prepared
        try:
            if inspect.iscoroutinefunction(tool.fn):
                result = await tool.fn(**kwargs)
            else:
                result = await asyncio.to_thread(tool.fn, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
        except Exception as exc:  # noqa: BLE001 - see catch_errors
            return self._failed(tool, exc)
        return await asyncio.to_thread(self._output, tool, result, raw, session)

    def _unknown(self, name: str) -> ToolOutput:
        known = ", ".join(t.name for t in self.tools)
        return error_output(f"Unknown tool {name!r}; the tools are: {known}.", "unknown_tool")

    def _prepare(self, tool: PackTool, arguments: Any) -> tuple[dict[str, Any], dict[str, Any]] | ToolOutput:
        """The model's arguments as given (kept with the result) and as the function gets them."""
        raw = arguments_object(arguments)
        if isinstance(raw, str):
            return error_output(f"The arguments of {tool.name} must be a JSON object ({raw}).", "invalid_argument")
        kwargs = raw if tool.validator is not None else _nulls_left_out(tool.parameters, raw)
        if tool.artifact_args:
            try:
                kwargs = self._resolve(tool, kwargs)
            except OffloadError as exc:
                return offload_error_output(exc)
        if tool.validator is not None:
            try:
                model = _validated(tool.validator, kwargs)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                                     for e in exc.errors(include_url=False))
                return error_output(f"{tool.name}: {problems}. Its arguments: {json.dumps(tool.parameters)}",
                              "invalid_argument")
            kwargs = {**{key: getattr(model, key) for key in type(model).model_fields}, **(model.model_extra or {})}
        return raw, kwargs

    def _output(self, tool: PackTool, result: Any, raw: dict[str, Any], session: str | None) -> ToolOutput:
        if not isinstance(result, Reference):  # a tool already wrapped with @off.tool comes back processed
            result = self.off.process(tool.name, result, args=raw, session=session)
        if isinstance(result, (bytes, bytearray, memoryview)) and invalid_bytes(bytes(result)):
            # it fits, but the model reads text: decoded, its bytes would reach it altered, unsaid
            try:
                result = self.off.put(bytes(result), tool=tool.name, args=raw, session=session)
            except Exception as exc:  # noqa: BLE001 - fail open, as `process` does
                log.exception("offload could not store the binary result of %s", tool.name)
                result = self.off.references.unstored(tool.name, bytes(result), exc, None)
        return as_output(result, self.off)

    def _failed(self, tool: PackTool, exc: Exception) -> ToolOutput:
        if not self.catch_errors:
            raise exc
        log.warning("tool %s raised %s", tool.name, type(exc).__name__, exc_info=exc)
        message = bounded_message(f"{type(exc).__name__}: {exc}")
        return ToolOutput(f"Error: the tool {tool.name} failed: {message}",
                          {"error": "tool_error", "message": message}, is_error=True)

    # -- artifact:// arguments --------------------------------------------------------------

    def _resolve(self, tool: PackTool, args: dict[str, Any]) -> dict[str, Any]:
        """Each argument written as artifact://<id>[#jmespath] replaced by what it names."""
        properties = tool.parameters.get("properties", {}) if isinstance(tool.parameters, dict) else {}
        left = tool.max_artifact_bytes
        out = dict(args)
        for key, value in args.items():
            match = ARTIFACT_URI.fullmatch(value) if isinstance(value, str) else None
            if match is None:
                continue
            out[key], size = self._artifact_value(tool, match[1], match[2], left, _wants_json(properties.get(key)))
            left -= size
        return out

    def _artifact_value(self, tool: PackTool, artifact_id: str, expression: str | None, left: int,
                        as_json: bool) -> tuple[Any, int]:
        from ..tools.engines import detached, run_jmespath

        off = self.off
        row = off.store.get(artifact_id, off.namespace)  # NotFound for other namespaces, Expired for ended ones
        uri = f"artifact://{artifact_id}" + (f"#{expression}" if expression else "")
        if expression is None:
            if row["bytes"] > left:
                raise _too_large(tool, uri, row["bytes"], left)
            if as_json and row["kind"] in ("json", "ndjson"):
                # never the query cache's document itself: the tool may edit its argument in place
                return off.queries.parsed_copy(row), row["bytes"]
            data = b"".join(off.iter_raw(artifact_id))
            return (data if row["kind"] == "binary" else data.decode("utf-8", errors="replace")), len(data)
        value = run_jmespath(off.queries.document(row), expression)
        text = value if isinstance(value, str) else dumps(value).decode()
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > left:
            raise _too_large(tool, uri, size, left)
        # a copy of the part handed out (its size is bounded above), so that the tool cannot edit the cache
        return (detached(value) if as_json or isinstance(value, str) else text), size


def as_output(result: Any, off: "Offloader | None" = None) -> ToolOutput:
    """A processed tool result (unchanged, or a Reference) as text for the model and as JSON; with `off`,
    a Reference's JSON within the budget its text fits (`Offloader.structured`), else all of it."""
    if isinstance(result, Reference):
        structured = off.structured(result) if off is not None else result.to_dict()
        return ToolOutput(result.render(), structured, is_error=False)
    if result is None:
        return ToolOutput("(no output)", {"result": None})
    if isinstance(result, str):
        return ToolOutput(result, {"result": result})
    try:
        payload = to_payload(result)
    except Exception:  # noqa: BLE001 - not JSON-able (a cycle, a custom object): its repr, as `process` measured it
        text = repr(result)
        return ToolOutput(text, {"result": text})
    if payload.is_shell:
        stdout = payload.data.decode("utf-8", errors="replace")
        stderr = (payload.stderr or b"").decode("utf-8", errors="replace")
        fields = payload.fields or {}
        text = stdout + (f"\n[stderr]\n{stderr}" if stderr else "") + (
            f"\n[exit code {payload.exit_code}]" if payload.exit_code is not None else "") + (
            f"\n[other fields] {dumps(fields).decode()}" if fields else "")
        return ToolOutput(text, {"stdout": stdout, "stderr": stderr, "exit_code": payload.exit_code, **fields})
    if isinstance(result, (bytes, bytearray, memoryview)):
        text = bytes(result).decode("utf-8", errors="replace")
        return ToolOutput(text, {"result": text})
    text = payload.data.decode("utf-8", errors="replace")
    try:
        structured = loads(payload.data)  # exactly: lone surrogates, big integers
    except ValueError:  # an integer of more digits than Python reads from text (sys.get_int_max_str_digits)
        structured = text
    return ToolOutput(text, {"result": structured})


def _too_large(tool: PackTool, uri: str, size: int, left: int) -> TooLarge:
    return TooLarge(f"{uri} is {size:,} bytes; {tool.name} takes at most {tool.max_artifact_bytes:,} bytes of "
                    f"artifacts per call ({max(left, 0):,} left). Pass a part of it (artifact://<id>#<jmespath>), "
                    "or narrow it with query_artifact first.")


def _wants_json(prop: Any) -> bool:
    """True when an argument's schema asks for a JSON value (object, array, number...) and not text."""
    if not isinstance(prop, dict):
        return False
    types: set[str] = set()
    for option in [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]:
        kind = option.get("type") if isinstance(option, dict) else None
        types.update([kind] if isinstance(kind, str) else kind or [])
    types.discard("null")
    return bool(types) and "string" not in types and types <= _JSON_TYPES


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _signature_schema(fn: Callable[..., Any], label: str) -> tuple[dict[str, Any], type[BaseModel]]:
    """The JSON Schema of a function's arguments, and a model that validates them (from its type hints)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward references: the annotations as written
        hints = getattr(fn, "__annotations__", {})
    fields: dict[str, Any] = {}
    extra = "forbid"
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ValueError(f"{label}: positional-only argument {param.name!r} cannot be passed by name")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    model = create_model(f"{label}_arguments",
                         __config__=ConfigDict(extra=extra, arbitrary_types_allowed=True), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    if extra == "forbid":
        schema["additionalProperties"] = False
    return schema, model


def _nulls_left_out(schema: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a tool with a schema of its own (`add(parameters=...)`) without the nulls its
    schema does not take for an argument it does not require: null is how a model leaves one out (strict
    function calling makes every argument required and the optional ones nullable), and the function's
    default then applies, as `_validated` reads null for a tool whose signature is its schema."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or None not in kwargs.values():
        return kwargs
    required = set(schema.get("required") or ())
    return {key: value for key, value in kwargs.items()
            if value is not None or key in required or key not in properties or takes_null(properties[key])}


def _validated(validator: type[BaseModel], kwargs: dict[str, Any]) -> BaseModel:
    """The arguments as the tool's signature reads them; a null for one that has a default and takes no
    null is that default, as the companion tools read null (`path: str = "."` given null was an error,
    and models send null for an argument they mean to leave out)."""
    try:
        return validator.model_validate(kwargs)
    except ValidationError as exc:
        fields = validator.model_fields
        defaulted = {key for key, value in kwargs.items()
                     if value is None and key in fields and not fields[key].is_required()}
        unset = defaulted & {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        if not unset:
            raise
        return validator.model_validate({key: value for key, value in kwargs.items() if key not in unset})
