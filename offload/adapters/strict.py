"""Tool schemas as OpenAI's strict function calling takes them (`strict=True` in the OpenAI adapter).

Strict mode makes the model's arguments match the schema by construction, and it takes a subset of JSON
Schema: every object closed (`additionalProperties: false`) and every property required. An argument the
model may leave out is then one it may give as null, so each argument that was optional and takes no
null becomes nullable, and a tool pack reads null as its default (the companion tools, and a user's
tool: `ToolPack._prepare`); an argument whose type takes null already gets null as itself. A field
inside an argument (a nested model's) stays as it is, now required. `oneOf` (pydantic's discriminated
unions) becomes `anyOf`, and an `allOf` of one schema is that schema. Constraints strict mode does not
take (`minLength`, `maxLength`, `uniqueItems`, a `format` other than its own) are left out of the
schema: a tool whose signature is its schema still checks them when it is called, and says what was
wrong. What strict mode cannot say without refusing what the tool takes, or taking what it refuses, is
an error naming the tool and where: an object of keys of its own choosing (`**kwargs`, a dict
argument), a value of any type (no annotation), a tuple's items by position, `not`, `allOf` of several.
"""

from __future__ import annotations

import copy
from typing import Any

_NULL = {"type": "null"}
_TYPED = {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"}  # a schema that says what it takes
_LEFT_OUT = ("minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties")
# the formats strict mode takes (platform.openai.com, structured outputs: supported schemas)
_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}


def strict_parameters(schema: dict[str, Any], tool: str) -> dict[str, Any]:
    """A strict copy of a tool's argument schema; ValueError when strict mode cannot say what it takes."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object" or any(
            key in schema for key in ("anyOf", "oneOf", "allOf", "$ref")):
        raise ValueError(f"tool {tool!r}: OpenAI's strict mode needs the arguments to be one object with its "
                         f"properties, not {str(schema)[:200]}; pass strict=False")
    out = copy.deepcopy(schema)
    out["type"] = "object"
    out.setdefault("properties", {})
    _strict(out, tool, "arguments", root=True)
    return out


def _strict(node: Any, tool: str, where: str, *, root: bool = False) -> None:
    if not isinstance(node, dict):
        return
    for key in ("$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            _strict(sub, tool, f"{key}/{name}")
    for key in ("not", "prefixItems", "patternProperties", "if", "dependentSchemas"):
        if key in node:
            raise ValueError(f"tool {tool!r}: {where} uses {key!r}, which OpenAI's strict mode does not take "
                             "(a tuple's items by position, for one); use a list or a model, or pass strict=False")
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf") + node.get("anyOf", [])
    if "allOf" in node:
        if len(node["allOf"]) != 1 or not isinstance(node["allOf"][0], dict):
            raise ValueError(f"tool {tool!r}: {where} is an allOf of several schemas, which OpenAI's strict mode "
                             "does not take; merge them, or pass strict=False")
        only = node.pop("allOf")[0]
        node.update({key: value for key, value in only.items() if key not in node})
    for option in node.get("anyOf", []):
        _strict(_typed(option, tool, where), tool, where)
    for key in _LEFT_OUT:
        node.pop(key, None)
    if "format" in node and node["format"] not in _FORMATS:
        del node["format"]
    if _is_object(node):
        _close(node, tool, where, nullable=root)
    if _is_array(node):
        if not isinstance(node.get("items"), dict):
            raise ValueError(f"tool {tool!r}: {where} is a list of any values (no item type, or items by "
                             "position), and OpenAI's strict mode needs its items typed; annotate it "
                             "(list[str]), or pass strict=False")
        _strict(_typed(node["items"], tool, f"{where}[]"), tool, f"{where}[]")
    if "default" in node and node["default"] is None:  # nullable now; strict mode's own reading of it
        del node["default"]


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _is_array(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind) or "items" in node


def _close(node: dict[str, Any], tool: str, where: str, *, nullable: bool) -> None:
    """Close an object and require all its properties; with `nullable` (the arguments themselves), an
    optional one that takes no null also takes it. Inside an argument, an optional property is required
    as it is: the tool pack reads a null argument as its default, not a null inside one."""
    extra = node.get("additionalProperties")
    if extra not in (None, False) or (extra is None and "properties" not in node):
        raise ValueError(f"tool {tool!r}: {where} takes keys of its own choosing (**kwargs, or a dict "
                         "argument), which OpenAI's strict mode cannot express; name its keys, or pass "
                         "strict=False")
    node["additionalProperties"] = False
    properties = node["properties"]
    required = set(node.get("required", []))
    for name, prop in properties.items():
        _strict(_typed(prop, tool, f"{where}.{name}"), tool, f"{where}.{name}")
        if nullable and name not in required:
            properties[name] = _nullable(prop)
    node["required"] = list(properties)


def _typed(prop: Any, tool: str, where: str) -> Any:
    """`prop`, when it says what it takes: not {} (any value), nor a union with such a member."""
    options = prop.get("anyOf", []) + prop.get("oneOf", []) if isinstance(prop, dict) else []
    if not isinstance(prop, dict) or not _TYPED.intersection(prop) or any(
            not isinstance(option, dict) or not _TYPED.intersection(option) for option in options):
        raise ValueError(f"tool {tool!r}: {where} takes any value (no type: Any, object, or an argument "
                         "without an annotation), and OpenAI's strict mode needs a type for each; annotate "
                         "it, or pass strict=False")
    return prop


def _nullable(prop: Any) -> Any:
    """`prop`, or a schema that also takes null: how strict mode says an argument may be left out."""
    if takes_null(prop):
        return prop
    if "$ref" in prop or "const" in prop:
        inner = {key: value for key, value in prop.items() if key not in ("description", "default", "title")}
        outer = {key: value for key, value in prop.items() if key in ("description", "default", "title")}
        return {"anyOf": [inner, _NULL], **outer}
    prop = dict(prop)
    if "anyOf" in prop:
        prop["anyOf"] = [*prop["anyOf"], _NULL]
    elif isinstance(prop.get("type"), str):
        prop["type"] = [prop["type"], "null"]
    elif isinstance(prop.get("type"), list):
        prop["type"] = [*prop["type"], "null"]
    if isinstance(prop.get("enum"), list):
        prop["enum"] = [*prop["enum"], None]
    return prop


def takes_null(prop: Any) -> bool:
    """Whether a property's schema takes null (one that says nothing of what it takes does)."""
    if not isinstance(prop, dict) or not _TYPED.intersection(prop):
        return True
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if isinstance(prop.get("enum"), list) and None in prop["enum"] and "type" not in prop:
        return True
    return any(isinstance(option, dict) and takes_null(option) for option in prop.get("anyOf", []) + prop.get("oneOf", []))
