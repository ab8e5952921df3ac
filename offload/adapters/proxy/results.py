"""What the proxy changes in an upstream's messages: tool results over budget, and the tool listing.

A `tools/call` result keeps its shape; only its oversized parts are replaced. Each text item or embedded
resource over the tool's budget becomes a text item holding the reference; when those and the items that
passed are over it together, all the texts are stored as one artifact; an oversized `structuredContent`
becomes the reference's structured form (one copy stored when it duplicates an offloaded text, as the
spec has servers do). The listing gains fetch_slice and query_artifact, and each declared outputSchema
also admits that form.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from ...content import gc_paused
from ...jsontext import dumps
from ...jsontext import loads
from .lean import LentText, restore
from ...reference import Reference
from ...results import json_text, to_payload
from ...tools.schemas import OUTPUT_SCHEMAS, TOOLS

if TYPE_CHECKING:
    from ...offloader import Offloader


LOCAL_TOOLS = tuple(TOOLS)  # fetch_slice, query_artifact: answered by the proxy itself

# The structured form of a Reference (Reference.to_dict()) as an outputSchema branch. Loose on purpose:
# it must admit every reference (an unstored one has no artifact_id) and nothing a tool would return.
REFERENCE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "offload reference",
    "description": "The result was too large for the context and was stored whole by offload: its sizes, a "
                   "preview, and the artifact id to read with fetch_slice and query_artifact.",
    "properties": {
        "artifact_id": {"type": ["string", "null"], "description": "art_…; null when it could not be stored."},
        "tool": {"type": "string"},
        "kind": {"type": "string"},
        "content_type": {"type": "string"},
        "bytes": {"type": "integer"},
        "lines": {"type": "integer"},
        "tokens": {"type": "integer"},
        "preview": {"type": "string"},
        "truncated": {"type": "boolean"},
        "hints": {"type": "array", "items": {"type": "string"}},
        "stored": {"type": "boolean"},
        "left_out": {"type": "object", "description": "Present when members of this JSON gave way to fit the budget: which (fields), and why (the text form states them)."},
    },
    "required": ["artifact_id", "tool", "kind", "bytes", "preview", "truncated"],
}

_HOISTED = ("$schema", "$id", "$defs", "definitions")  # must stay at the root for $ref to resolve
_MOVED_TO = "/anyOf/0"  # where the rest of a widened schema goes

# Where a $ref can sit (drafts 4 to 2020-12): keywords whose value is a subschema or a list of them, and
# keywords whose value maps names to subschemas. Other values (const, enum, default, examples) are data.
_SUBSCHEMA_KEYWORDS = frozenset({
    "additionalItems", "additionalProperties", "allOf", "anyOf", "contains", "contentSchema", "else", "if",
    "items", "not", "oneOf", "prefixItems", "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties"})
_SUBSCHEMA_MAPS = frozenset({"$defs", "definitions", "dependencies", "dependentSchemas", "patternProperties",
                             "properties"})


def widen_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or a reference: an anyOf whose root keeps the keywords that `$ref`s resolve against.

    The rest of the schema moves to anyOf/0, so a `$ref` pointing into it by JSON pointer (zod-to-json-schema,
    behind the TypeScript SDK, writes `#/properties/a` for a reused sub-schema) is pointed there too.
    """
    base = schema.get("$id") if isinstance(schema.get("$id"), str) else ""
    moved = _with_refs_moved({key: value for key, value in schema.items() if key != "$id"}, base)
    root = {key: schema[key] if key == "$id" else moved[key] for key in _HOISTED if key in schema}
    inner = {key: value for key, value in moved.items() if key not in _HOISTED}
    return {**root, "type": "object", "anyOf": [inner, REFERENCE_OUTPUT_SCHEMA]}


def _with_refs_moved(schema: Any, base: str) -> Any:
    """`schema` (a copy where anything changed) with its `$ref`s into the moved part of the root pointed
    under anyOf/0. A subschema with its own `$id` is a document of its own: its `#/…` refs stay."""
    if not isinstance(schema, dict) or (isinstance(schema.get("$id"), str) and not schema["$id"].startswith("#")):
        return schema
    moved = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            value = _moved_ref(value, base)
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            value = {name: _with_refs_moved(sub, base) for name, sub in value.items()}
        elif key in _SUBSCHEMA_KEYWORDS:
            value = ([_with_refs_moved(sub, base) for sub in value] if isinstance(value, list)
                     else _with_refs_moved(value, base))
        moved[key] = value
    return moved


def _moved_ref(ref: str, base: str) -> str:
    """`ref` pointed under anyOf/0 when it is a JSON pointer into the root document, outside the hoisted
    keywords; anything else (an anchor, another document, `#/$defs/…`) is returned as it is."""
    uri, _, pointer = ref.partition("#")
    if uri not in ("", base) or (pointer and not pointer.startswith("/")):
        return ref
    if urllib.parse.unquote(pointer.split("/", 2)[1] if pointer else "") in _HOISTED:
        return ref
    return f"{uri}#{_MOVED_TO}{pointer}"


def local_tool_definitions() -> list[dict[str, Any]]:
    """fetch_slice and query_artifact as MCP tools/list entries, from offload's one definition of them."""
    return [{"name": name, "description": spec["description"], "inputSchema": spec["input_schema"],
             "outputSchema": OUTPUT_SCHEMAS[name],
             "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                             "openWorldHint": False}}
            for name, spec in TOOLS.items()]


def patch_tool_listing(result: dict[str, Any], *, first_page: bool) -> tuple[dict[str, Any], list[str]]:
    """The upstream's tools/list result with output schemas widened and the local tools added (to the first
    page). Returns it and the names of upstream tools the local ones shadow."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result, []
    shadowed = [t.get("name") for t in tools if isinstance(t, dict) and t.get("name") in LOCAL_TOOLS]
    listed = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("name") in LOCAL_TOOLS:
            continue
        schema = tool.get("outputSchema")
        listed.append({**tool, "outputSchema": widen_output_schema(schema)} if isinstance(schema, dict) else tool)
    if first_page:
        listed.extend(local_tool_definitions())
    return {**result, "tools": listed}, shadowed


# -- tool results ------------------------------------------------------------------------------


@dataclass
class _Stored:
    original: bytes  # what was stored (kept only while this result is being rewritten)
    ref: Reference
    base64: bytes | None = None  # an embedded resource's blob as it came (what was stored is its bytes)


_TAKE_OUT = 1 << 20  # characters: a text this long leaves the parsed message while it is stored
_SURROGATE_FORM = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")  # U+D800–U+DFFF as "surrogatepass" writes it


def offload_call_result(off: "Offloader", tool: str, result: dict[str, Any], *, args: dict | None = None,
                        session: str | None = None) -> dict[str, Any] | None:
    """The result with its oversized parts replaced by references, or None when nothing was over budget.

    Runs in a worker thread (it stores megabytes). It borrows `result`: a big text is taken out of it
    while it is measured and stored as bytes, so the parsed message, its UTF-8 bytes and the store's own
    working copy are never all in memory at once; what was not replaced is put back before it returns.
    """
    content = result.get("content")
    items = content if isinstance(content, list) else []
    new_items: list[Any] = list(items)
    stored: list[_Stored] = []
    originals: dict[int, str] = {}  # what was stored of each text item, by its index
    blobs: set[int] = set()  # the items that were bytes, now a reference each
    changed = False

    for index, item in enumerate(items):
        with _borrowed(item) as payload:
            if payload is None:
                continue
            out = off.process(tool, payload.value, args=args, session=session)
            if out is payload.value:
                continue
            payload.replaced = True
            new_items[index] = _text_item(item, _rendered(out), payload.label)
            if isinstance(out, Reference) and payload.is_text:
                value = payload.value
                original = payload.original or (value if isinstance(value, bytes) else _utf8(value))
                stored.append(_Stored(original, out))
                # bytes as a str that `process` stores as those bytes again (see `results.json_text`)
                originals[index] = _labelled(payload.label, value.decode("utf-8", "surrogateescape")
                                             if isinstance(value, bytes) else value)
            elif isinstance(out, Reference):  # a blob, which the structured form may repeat as it came
                holder, key, _ = _holder(item)
                stored.append(_Stored(b"", out, base64=_utf8(holder[key])))
                blobs.add(index)
            changed = True

    # Items over the budget together, as they would now be shown (texts that fit one by one, or a
    # reference each: 100 items of 4,250 tokens came to 51,102 tokens of references): all the texts
    # become one artifact, joined by blank lines (a blob's reference stays its own). Those stored one by
    # one stay, as any artifact does until gc: a repeated result reuses its artifact, which an earlier
    # reference may name.
    shown = [i for i, item in enumerate(new_items) if isinstance(_text_of(item), str)]
    texts = [i for i in shown if i not in blobs]
    if len(texts) > 1 and not off.passing.fits(tool, to_payload("\n\n".join(_text_of(new_items[i]) for i in shown))):
        joined = "\n\n".join(originals.get(i) or _labelled(_holder(items[i])[2], json_text(_text_of(items[i])))
                              for i in texts)
        out = off.process(tool, joined, args=args, session=session)
        new_items[texts[0]] = _text_item(items[texts[0]], _rendered(out), None)
        for i in texts[1:]:
            new_items[i] = None
        new_items = [item for item in new_items if item is not None]
        if isinstance(out, Reference):
            stored = [entry for entry in stored if entry.base64 is not None] + [_Stored(_utf8(joined), out)]
        changed = True

    structured = result.get("structuredContent")
    new_structured = structured
    if structured is not None:
        shared = _shared_reference(structured, stored)
        if shared is not None:
            new_structured = off.structured(shared)
        else:
            structured = new_structured = restore(structured)
            out = off.process(tool, structured, args=args, session=session)
            if out is not structured:
                new_structured = off.structured(out) if isinstance(out, Reference) else {"offload": _rendered(out)}
        changed = changed or new_structured is not structured

    if not changed:
        return None
    rewritten = {**result, "content": new_items} if isinstance(content, list) else dict(result)
    if structured is not None:
        rewritten["structuredContent"] = new_structured
    return rewritten


def unprocessed_call_result(off: "Offloader", tool: str, result: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The result when offloading it failed: the call still answers, within budget and its outputSchema.

    Its texts and embedded resources become one bounded preview plainly marked NOT stored (images, audio
    and resource links pass as always). A `structuredContent` that surely fits stays; a bigger one becomes
    the preview's structured form, which the widened outputSchema admits.
    """
    content = result.get("content") if isinstance(result.get("content"), list) else []
    passed = [item for item in content if _passes(item)]
    shown = "\n\n".join(_shown_text(item) for item in content if not _passes(item))
    preview = off.references.unstored(tool, shown, exc)
    out = {**result, "content": [{"type": "text", "text": _rendered(preview)}, *passed]}
    structured = result.get("structuredContent")
    if structured is not None and len(dumps(structured)) > off.settings.limit_for(tool):  # a token is >= a byte
        out["structuredContent"] = off.structured(preview) if isinstance(preview, Reference) else {
            "artifact_id": None, "tool": tool, "kind": "text", "bytes": len(shown.encode("utf-8", "surrogatepass")),
            "preview": "", "truncated": True, "stored": False}
    return out


def _passes(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") not in ("text", "resource")


def _shown_text(item: Any) -> str:
    """A content item as the unprocessed result's preview shows it: its text, or what a blob is."""
    holder, key, label = _holder(item)
    if holder is None:
        return f"[a {item.get('type') if isinstance(item, dict) else type(item).__name__} item]"
    text = holder[key] if key == "text" else f"[{len(holder[key]):,} characters of base64]"
    return f"{label}:\n{text}" if label else text


@dataclass
class _Payload:
    value: str | bytes  # what offload measures and stores
    label: str | None  # names an embedded resource
    is_text: bool
    replaced: bool = False
    original: bytes | None = None  # the text as it came (surrogatepass), when `value` is not it


def _escaped(text: str, label: str | None) -> _Payload:
    """A text as it came in JSON, whose lone surrogates are escapes there (a JavaScript string cut inside
    an emoji): stored with each as its escape, six characters (see `results.json_text`)."""
    value = json_text(text)
    return _Payload(value, label, is_text=True, original=None if value is text else _utf8(text))


@contextlib.contextmanager
def _borrowed(item: Any) -> Iterator[_Payload | None]:
    """The storable payload of a content item: its text, or an embedded resource's text or bytes.

    A long text is lent as UTF-8 bytes and its str is dropped from the item meanwhile; it is put back
    (decoded) unless the caller marked the payload replaced. Base64 blobs are lent decoded.
    """
    holder, key, label = _holder(item)
    if holder is None:
        yield None
        return
    value = holder[key]
    if key == "blob":
        try:  # a blob of 1 MiB or more was parsed lean: its base64 is the LentText's bytes
            data = base64.b64decode(value.data if isinstance(value, LentText) else value, validate=True)
        except (binascii.Error, ValueError):
            yield None
            return
        yield _Payload(data, label, is_text=False)
        return
    if isinstance(value, LentText):  # parsed lean: the bytes never were a str
        data = value.data
        if b"\xed" in data and _SURROGATE_FORM.search(data):  # a lone surrogate escape's 3-byte form, no UTF-8:
            yield _escaped(data.decode("utf-8", "surrogatepass"), label)  # stored as its escape
            return
    elif len(value) < _TAKE_OUT:
        yield _escaped(value, label)
        return
    else:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: lend the str itself, it could not come back exactly
            yield _escaped(value, label)
            return
    payload = _Payload(data, label, is_text=True)
    holder[key] = None
    del value
    try:
        yield payload
    finally:
        if not payload.replaced:
            holder[key] = data.decode("utf-8", "surrogatepass")


def _holder(item: Any) -> tuple[dict | None, str, str | None]:
    """(the dict holding the item's storable value, its key, a label), or (None, "", None)."""
    if not isinstance(item, dict):
        return None, "", None
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return item, "text", None
    resource = item.get("resource")
    if kind == "resource" and isinstance(resource, dict):
        label = f"Embedded resource {resource.get('uri', '?')}" + (
            f" ({resource['mimeType']})" if resource.get("mimeType") else "")
        for key in ("text", "blob"):
            if isinstance(resource.get(key), str):
                return resource, key, label
    return None, "", None  # images, audio, resource links: not text the budget is about


def _text_of(item: Any) -> str | None:
    holder, key, _ = _holder(item)
    return holder[key] if holder is not None and key == "text" else None


def _text_item(original: dict[str, Any], text: str, label: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "text", "text": f"{label}:\n{text}" if label else text}
    if "annotations" in original:
        item["annotations"] = original["annotations"]
    return item


def _labelled(label: str | None, text: str) -> str:
    """An item's text as the artifact of several holds it: an embedded resource's under its label."""
    return f"{label}:\n{text}" if label else text


def _rendered(out: Any) -> str:
    return out.render() if isinstance(out, Reference) else str(out)


def _shared_reference(structured: Any, stored: list[_Stored]) -> Reference | None:
    """The reference of an offloaded text that `structured` merely repeats, so it is not stored twice.

    Two forms occur: the text is the structured value's JSON serialization (what the spec asks servers to
    send beside structured content), or the structured value wraps the very text in a field (the reference
    filesystem server's {"content": text}). Anything else is stored as its own artifact.
    """
    for entry in stored:
        if entry.ref.stored and entry.base64 is None and isinstance(structured, dict) and any(
                _same_text(value, entry.original) for value in structured.values() if isinstance(value, str)):
            return entry.ref
    for entry in stored:  # a blob that the structured form holds, with little else (the content items again)
        if entry.ref.stored and entry.base64 is not None and _holds(structured, entry.base64) and \
                len(dumps(restore(structured))) <= len(entry.base64) + _AROUND_BLOB:
            return entry.ref
    size = None
    for entry in stored:
        if entry.ref.stored and entry.ref.kind == "json":
            size = len(dumps(structured)) if size is None else size
            if size * 2 >= len(entry.original) and _parses_to(entry.original, structured):
                return entry.ref
    return None


_AROUND_BLOB = 16 << 10  # bytes of JSON a structured form may hold besides a blob it repeats


def _holds(value: Any, text: bytes) -> bool:
    """Whether a string of `value`, at any depth, is `text` (UTF-8)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) == len(text) or isinstance(item, LentText):
                if _utf8(item) == text:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _utf8(value: str) -> bytes:
    return value.data if isinstance(value, LentText) else value.encode("utf-8", "surrogatepass")


def _same_text(value: str, original: bytes) -> bool:
    if isinstance(value, LentText):
        return value.data == original
    return len(value) <= len(original) <= 4 * len(value) and _utf8(value) == original


def _parses_to(text: bytes, value: Any) -> bool:
    with gc_paused():  # a parse allocating millions of containers runs 3-5x faster without the collector
        try:
            return loads(text) == value
        except ValueError:
            return False

