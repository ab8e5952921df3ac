"""Tool schemas as OpenAI's strict function calling takes them (`strict=True` in the OpenAI adapter).

Strict mode makes the model's arguments match the schema by construction, and it takes a subset of JSON
Schema: every object closed (`additionalProperties: false`) and every property required. An argument the
model may leave out is then one it may give as null, so each argument that was optional becomes nullable,
and a tool pack reads null as the argument's default (the companion tools, and a user's tool whose
signature gives one: `ToolPack._prepare`); a field inside an argument (a nested model's) stays as it is,
now required. `oneOf` (pydantic's discriminated unions) becomes `anyOf`,
which strict mode takes, and an `allOf` of one schema is that schema. An object that takes keys of
its own choosing (`**kwargs`, a `dict[str, int]` argument) cannot be closed without refusing what
the tool takes, nor can an argument of any value (no annotation) be typed: each is an error naming the
tool and where, never a schema that says something else.
"""

from __future__ import annotations

import copy
from typing import Any

_NULL = {"type": "null"}
_TYPED = {"type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const"}  # a schema that says what it takes


def strict_parameters(schema: dict[str, Any], tool: str) -> dict[str, Any]:
    """A strict copy of a tool's argument schema; ValueError when strict mode cannot say what it takes."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError(f"tool {tool!r}: OpenAI's strict mode needs the arguments to be one object, not "
                         f"{schema!r}; pass strict=False")
    out = copy.deepcopy(schema)
    out["type"] = "object"
    _strict(out, tool, "arguments", root=True)
    return out


def _strict(node: Any, tool: str, where: str, *, root: bool = False) -> None:
    if not isinstance(node, dict):
        return
    for key in ("$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            _strict(sub, tool, f"{key}/{name}")
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf") + node.get("anyOf", [])
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1 and isinstance(node["allOf"][0], dict):
        only = node.pop("allOf")[0]
        node.update({key: value for key, value in only.items() if key not in node})
    for option in node.get("anyOf", []) + node.get("allOf", []):
        _strict(option, tool, where)
    if _is_object(node):
        _close(node, tool, where, nullable=root)
    if isinstance(node.get("items"), dict):
        _strict(_typed(node["items"], tool, f"{where}[]"), tool, f"{where}[]")
    if "default" in node and node["default"] is None:  # nullable now; strict mode's own reading of it
        del node["default"]


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _close(node: dict[str, Any], tool: str, where: str, *, nullable: bool) -> None:
    """Close an object and require all its properties; with `nullable` (the arguments themselves), an
    optional one also takes null. Inside an argument, an optional property is required as it is: the
    tool pack reads a null argument as its default, not a null inside one (a nested model's field)."""
    extra = node.get("additionalProperties")
    properties = node.setdefault("properties", {})
    if extra not in (None, False) or (extra is None and not properties):
        raise ValueError(f"tool {tool!r}: {where} takes keys of its own choosing (**kwargs, or a dict "
                         "argument), which OpenAI's strict mode cannot express; name its keys, or pass "
                         "strict=False")
    node["additionalProperties"] = False
    required = set(node.get("required", []))
    for name, prop in properties.items():
        _strict(_typed(prop, tool, f"{where}.{name}"), tool, f"{where}.{name}")
        if nullable and name not in required:
            properties[name] = _nullable(prop)
    node["required"] = list(properties)


def _typed(prop: Any, tool: str, where: str) -> Any:
    if not isinstance(prop, dict) or not _TYPED.intersection(prop):
        raise ValueError(f"tool {tool!r}: {where} takes any value (no type: an argument or a list without an "
                         "annotation of what it holds), and OpenAI's strict mode needs a type for each; "
                         "annotate it, or pass strict=False")
    return prop


def _nullable(prop: Any) -> Any:
    """`prop`, or a schema that also takes null: how strict mode says an argument may be left out."""
    if takes_null(prop):
        return prop
    if "$ref" in prop or "const" in prop or "allOf" in prop:
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
