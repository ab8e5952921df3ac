"""The shape of a parsed JSON document: keys, types, array lengths, and the values of low-cardinality
string fields, bounded in size so a 50 MB document describes itself in a few hundred bytes.

Big arrays are sampled (and say so); the value counts of the main array's fields are then recounted
exactly over every item at C speed, because "error (31)" is only worth showing if it is true.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from dataclasses import dataclass
from itertools import chain, islice, repeat
from typing import Any

__all__ = ["MAIN_VISITS", "MAX_DEPTH", "MainCollection", "array_is_main", "describe_json", "find_main", "jmespath_path",
           "render_shape"]

MAX_DEPTH = 6  # levels described; deeper values only get their type
MAX_KEYS = 25  # keys listed per object, then "more_keys"
TRACKED_KEYS = 200  # distinct keys followed per object slot (maps keyed by ids stop growing here)
SAMPLE = 2000  # items looked at in one big array: the first half, then evenly spaced
NESTED_SAMPLE = 20  # items looked at in each array nested inside sampled items
MAX_VALUES = 12  # a string field with at most this many distinct values lists them
VALUE_CHARS = 40
KEY_CHARS = 100  # a key name longer than this is shortened in the shape (and so never used in a hint)
KEYS_READ = 1000  # keys read per object; a map with a million keys is not walked whole
MAX_NODES = 300  # nodes emitted in one shape dict
MAX_VISITS = 200_000  # values looked at in one document, whatever its nesting
MAIN_VISITS = 5000  # objects looked into when looking for the main collection
EXACT_FIELDS = 6  # main-array fields whose value counts are recounted over every item
EXACT_RANGES = 2  # main-array numeric fields whose min and max are recomputed over every item
_IDENTIFIER_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENTIFIER_CHARS = _IDENTIFIER_START | frozenset("0123456789")


@dataclass
class MainCollection:
    """The biggest array (or map-like object) reachable from the root through object keys."""

    keys: list[str]  # path from the root; [] for the root itself
    value: list | dict

    @property
    def path(self) -> str:
        return jmespath_path(self.keys)


def jmespath_path(keys: list[str]) -> str:
    """A JMESPath expression for a chain of object keys, quoting keys that are not identifiers."""
    if not keys:
        return "@"
    return ".".join(jmespath_identifier(key) for key in keys)


def jmespath_identifier(key: str) -> str:
    if key and key[0] in _IDENTIFIER_START and all(c in _IDENTIFIER_CHARS for c in key):
        return key
    return json.dumps(key, ensure_ascii=False)


def find_main(doc: Any) -> MainCollection:
    """The container whose entries the preview lists: the largest array, else the largest object.

    Only object keys are followed, so the path is a plain key chain (`data.items`) the model can query.
    Objects are looked into breadth first, in document order (at most MAIN_VISITS of them, MAX_DEPTH
    levels down), and of equal arrays the first found wins: a rule that depends only on the order of
    the bytes, so the store's item index (`offload.store.chunking.json_item_index`) applies the same
    rule to the bytes and counts the items of the very array the reference names.
    """
    if not isinstance(doc, dict):
        return MainCollection([], doc)
    best_array: tuple[int, list[str], list] | None = None
    best_object: tuple[int, list[str], dict] = (len(doc), [], doc)
    queue: deque[tuple[dict, list[str]]] = deque([(doc, [])])
    visited = 0
    while queue and visited < MAIN_VISITS:
        node, keys = queue.popleft()
        visited += 1
        for key, value in node.items():
            if isinstance(value, list):
                # the longest array wins; of equal ones the first found, which is the shallowest
                if best_array is None or len(value) > best_array[0]:
                    best_array = (len(value), keys + [key], value)
            elif isinstance(value, dict) and len(keys) < MAX_DEPTH:
                if len(value) > best_object[0]:
                    best_object = (len(value), keys + [key], value)
                queue.append((value, keys + [key]))
    if best_array is not None and array_is_main(best_array[0], best_object[0]):
        return MainCollection(best_array[1], best_array[2])
    return MainCollection(best_object[1], best_object[2])


def array_is_main(array_items: int, object_keys: int) -> bool:
    """Whether the longest array, rather than the largest object, is the main collection.

    An object holding many more keys than the longest array has items is a map (a lockfile's
    "packages"): its entries are what the reader wants listed.
    """
    return (array_items >= 2 and array_items * 2 >= object_keys) or object_keys < 2


def sample_indices(length: int, cap: int) -> range | list[int]:
    """All indices, or the first cap/2 and cap/2 more evenly spaced over the rest."""
    if length <= cap:
        return range(length)
    half = cap // 2
    step = (length - half) / (cap - half)
    return list(range(half)) + [half + int(i * step) for i in range(cap - half)]


_KINDS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array",
          type(None): "null"}


def _by_kind(values: list) -> dict[str, list]:
    """`values` grouped by their JSON kind, in the order the kinds first appear."""
    types = dict.fromkeys(map(type, values))
    kinds = {t: _KINDS.get(t) or _kind(next(v for v in values if type(v) is t)) for t in types}
    if len(set(kinds.values())) == 1:
        return {next(iter(kinds.values())): values}
    groups: dict[str, list] = {}
    for kind in kinds.values():
        if kind not in groups:
            of_kind = {t for t, k in kinds.items() if k == kind}
            groups[kind] = [v for v in values if type(v) in of_kind]
    return groups


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


class _Slot:
    """Everything seen at one place of the document (one key, or the items of one array)."""

    __slots__ = ("types", "objects", "keys", "overflow_keys", "arrays", "length_min", "length_max",
                 "element", "elements_total", "elements_seen", "strings", "string_count", "minimum",
                 "maximum", "depth_limited", "exact_values", "exact_range", "unread_keys")

    def __init__(self) -> None:
        self.types: Counter = Counter()
        self.objects = 0
        self.keys: dict[str, _Slot] = {}
        self.overflow_keys: set[str] = set()
        self.arrays = 0
        self.length_min = self.length_max = 0
        self.element: _Slot | None = None
        self.elements_total = self.elements_seen = 0
        self.strings: dict[str, int] | None = {}
        self.string_count = 0
        self.minimum = self.maximum = None
        self.depth_limited = False
        self.exact_values: dict[str, int] | None = None
        self.exact_range = False
        self.unread_keys = 0  # keys past the first KEYS_READ of the largest object, never looked at

    def add(self, values: list, depth: int, repeated: bool, work: list[int]) -> None:
        """Record `values`, everything found at this place: one value at the root, one per item of the
        arrays above it otherwise. `repeated` when this place is inside an array of several items;
        `work` is the number of values still to visit in the whole document (arrays stop being read
        at 0).

        The values are taken a column at a time (each key of the objects, then the elements of the
        arrays) and counted by C built-ins: a 2,000-item sample costs a few calls per field instead
        of a Python call per value (1 MB of API JSON: 35 ms -> 3 ms).
        """
        work[0] -= len(values)
        by_kind = _by_kind(values)
        for kind, group in by_kind.items():
            self.types[kind] += len(group)
        if "object" in by_kind:
            self._add_objects(by_kind["object"], depth, repeated, work)
        if "array" in by_kind:
            self._add_arrays(by_kind["array"], depth, repeated, work)
        strings = by_kind.get("string")
        if strings:
            self.string_count += len(strings)
            if self.strings is not None:
                if max(map(len, strings)) > VALUE_CHARS:
                    self.strings = None
                else:
                    counts = Counter(strings)
                    if len(counts) > MAX_VALUES:
                        self.strings = None
                    else:
                        self.strings.update((value, self.strings.get(value, 0) + n) for value, n in counts.items())
                        if len(self.strings) > MAX_VALUES:
                            self.strings = None
        numbers = by_kind.get("integer", []) + [x for x in by_kind.get("number", ()) if math.isfinite(x)]
        if numbers:  # NaN and ±inf make no range
            low, high = min(numbers), max(numbers)
            self.minimum = low if self.minimum is None else min(self.minimum, low)
            self.maximum = high if self.maximum is None else max(self.maximum, high)

    def _add_objects(self, objects: list[dict], depth: int, repeated: bool, work: list[int]) -> None:
        self.objects += len(objects)
        if depth >= MAX_DEPTH:
            self.depth_limited = True
            return
        widest = max(map(len, objects))
        if widest > KEYS_READ:
            self.unread_keys = max(self.unread_keys, widest - KEYS_READ)
            objects = [o if len(o) <= KEYS_READ else dict(islice(o.items(), KEYS_READ)) for o in objects]
        # every key in the order it first appears, as reading the objects one by one would find them
        for key in dict.fromkeys(chain.from_iterable(objects)):
            child = self.keys.get(key)
            if child is None:
                if len(self.keys) >= TRACKED_KEYS:
                    self.overflow_keys.add(key)
                    continue
                child = self.keys[key] = _Slot()
            if sum(map(dict.__contains__, objects, repeat(key))) == len(objects):
                column = list(map(dict.__getitem__, objects, repeat(key)))
            else:
                column = [o[key] for o in objects if key in o]
            child.add(column, depth + 1, repeated, work)

    def _add_arrays(self, arrays: list[list], depth: int, repeated: bool, work: list[int]) -> None:
        lengths = list(map(len, arrays))
        longest = max(lengths)
        self.length_min = min(lengths) if self.arrays == 0 else min(self.length_min, *lengths)
        self.length_max = max(self.length_max, longest)
        self.arrays += len(arrays)
        if depth >= MAX_DEPTH:
            self.depth_limited = self.depth_limited or longest > 0
            return
        cap = NESTED_SAMPLE if repeated else SAMPLE
        total = sum(lengths)
        elements: list = []
        if longest <= cap and total < work[0]:  # every element, in one C call (thousands of short arrays)
            elements = list(chain.from_iterable(arrays))
        else:
            for value, length in zip(arrays, lengths):
                if work[0] - len(elements) <= 0:
                    break
                if length <= cap:
                    elements.extend(value)
                else:
                    elements.extend(value[index] for index in sample_indices(length, cap))
        self.elements_total += total
        self.elements_seen += len(elements)
        if longest and self.element is None:
            self.element = _Slot()
        if elements:
            self.element.add(elements, depth + 1, repeated or longest > 1, work)

    def to_dict(self, budget: list[int], sampled: bool) -> dict:
        budget[0] -= 1
        kinds = [kind for kind, _ in self.types.most_common()]
        shape: dict[str, Any] = {"type": "|".join(kinds)}
        if self.objects:
            self._describe_keys(shape, budget, sampled)
        if self.arrays:
            if self.arrays == 1:
                shape["length"] = self.length_max
            else:
                shape["min_length"], shape["max_length"] = self.length_min, self.length_max
            is_sampled = self.elements_seen < self.elements_total
            if is_sampled:
                shape["sampled"] = self.elements_seen
            if self.element is not None and budget[0] > 0:
                shape["items"] = self.element.to_dict(budget, sampled or is_sampled)
        values = self._values()
        if values is not None:
            shape["values"] = values
            if sampled and self.exact_values is None:
                shape["values_from"] = "sample"
        if self.minimum is not None and self.minimum != self.maximum:
            shape["min"], shape["max"] = self.minimum, self.maximum
            if sampled and not self.exact_range:
                shape["range_from"] = "sample"
        if self.depth_limited:
            shape["depth_limit"] = True
        return shape

    def _describe_keys(self, shape: dict, budget: list[int], sampled: bool) -> None:
        described: dict[str, Any] = {}
        for key, child in self.keys.items():
            if len(described) >= MAX_KEYS or budget[0] <= 0:
                break
            entry = child.to_dict(budget, sampled)
            present = sum(child.types.values())
            if present < self.objects:
                entry["optional"] = True
            name = key if len(key) <= KEY_CHARS else f"{key[:KEY_CHARS]}…[+{len(key) - KEY_CHARS:,} chars]"
            described[name] = entry
        if described or not self.depth_limited:
            shape["keys"] = described
        more = len(self.keys) + len(self.overflow_keys) + self.unread_keys - len(described)
        if more:
            shape["more_keys"] = more

    def _values(self) -> dict[str, int] | None:
        if self.exact_values is not None:
            return self.exact_values or None
        if not self.strings or self.string_count < 4:
            return None
        if len(self.strings) > max(1, min(MAX_VALUES, self.string_count // 2)):
            return None
        return dict(sorted(self.strings.items(), key=lambda pair: -pair[1]))


def describe_json(doc: Any, main: MainCollection | None = None) -> dict:
    """A bounded, JSON-serializable shape of `doc`; the main array's value counts are exact."""
    main = main or find_main(doc)
    root = _Slot()
    root.add([doc], 0, False, [MAX_VISITS])
    if isinstance(main.value, list) and len(main.value) > SAMPLE:
        slot = root
        for key in main.keys:
            slot = slot.keys.get(key) if slot is not None else None
        if slot is not None and slot.element is not None:
            _recount_values(slot.element, main.value)
    return root.to_dict([MAX_NODES], False)


def _recount_values(element: _Slot, items: list) -> None:
    """Replace sampled value counts (and a couple of numeric ranges) with figures over every item.

    Each column is read with `map(dict.get, ...)` and summed up by C built-ins (Counter, min, max,
    filter): no Python bytecode per item, which matters at a million items.
    """
    if not element.keys:  # an array of numbers or strings: the items are the column
        _recount_column(element, items, ranged=element.minimum is not None)
        return
    valued = [key for key, child in element.keys.items() if child._values() is not None][:EXACT_FIELDS]
    ranged = [key for key, child in element.keys.items() if child.minimum is not None][:EXACT_RANGES]
    for key in valued + ranged:
        try:
            column = list(map(dict.get, items, repeat(key)))
        except TypeError:  # an item that is not an object: keep the sample's figures
            return
        _recount_column(element.keys[key], column, ranged=key in ranged)


def _recount_column(child: _Slot, column: list, ranged: bool) -> None:
    """A field's range (`ranged`) or its value counts from every item's value, `column`."""
    if ranged:
        numbers = _finite_numbers(column)
        if numbers:
            child.minimum, child.maximum, child.exact_range = min(numbers), max(numbers), True
        return
    if child._values() is None:
        return
    try:
        counts = Counter(column)
    except TypeError:  # an unhashable value (a list or an object) in that field
        return
    strings = {value: n for value, n in counts.most_common() if isinstance(value, str)}
    long_value = any(len(value) > VALUE_CHARS for value in strings)
    low_cardinality = len(strings) <= MAX_VALUES and not long_value
    child.exact_values = strings if low_cardinality else {}


def _finite_numbers(column: list) -> list:
    """The integers (not booleans) and finite floats of `column`."""
    kinds = set(map(type, column))
    if kinds <= {int}:
        return column
    if kinds <= {int, float}:
        try:
            return list(filter(math.isfinite, column))
        except OverflowError:  # an integer too large for a float: sort it out one by one
            pass
    return [value for value in column if type(value) is int or (type(value) is float and math.isfinite(value))]


def render_shape(shape: dict | None, width: int = 200, max_lines: int = 40, *, compact: bool = False) -> str:
    """A few lines for the model, one per field of the main objects, e.g.

        data.items: array[357,728] of objects (sampled 2,000):
          id: integer 0–357,727
          status: "ok"(343,426)|"error"(14,302)

    `compact`: the fields of an array's objects side by side, each its type and low-cardinality values
    alone (`user: {…5 keys}`, no ranges), for a reference whose full shape does not fit beside an item: a
    GitHub-like issue list's 15 lines (~330 tokens) gave way whole, and no reference named its `labels`.
    """
    if not shape:
        return ""
    if shape.get("type") == "table":
        return _render_table(shape, width)
    lines: list[str] = []
    _render_node(shape, "", "", lines, width, compact=compact)
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [f"… {len(lines) - max_lines + 1:,} more lines"]
    return "\n".join(lines)


def _render_node(shape: dict, path: str, indent: str, lines: list[str], width: int, depth: int = 0,
                 compact: bool = False) -> None:
    """Objects reached through objects are flattened into dotted paths; arrays of objects list their keys."""
    kind = shape.get("type", "")
    label = f"{indent}{path}: " if path else indent
    if kind == "object" and shape.get("keys") and depth < 3:
        for key, child in shape["keys"].items():
            name = jmespath_identifier(key) + ("?" if child.get("optional") else "")
            _render_node(child, f"{path}.{name}" if path else name, indent, lines, width, depth + 1, compact)
        if shape.get("more_keys"):
            lines.append(f"{label}… +{shape['more_keys']:,} more keys")
        return
    items = shape.get("items") or {}
    if kind == "array" and items.get("type") == "object" and items.get("keys"):
        facts = [f"{len(items['keys']) + items.get('more_keys', 0):,} keys"]
        if "sampled" in shape:
            facts.append(f"sampled {shape['sampled']:,}")
        size = f"{shape['length']:,}" if "length" in shape else f"{shape.get('min_length', 0):,}–{shape.get('max_length', 0):,}"
        lines.append(f"{label}array[{size}] of objects ({', '.join(facts)}):")
        if compact:
            parts = [f"{jmespath_identifier(key)}{'?' if child.get('optional') else ''}: {_brief(child)}"
                     for key, child in items["keys"].items()]
            parts += [f"… +{items['more_keys']:,} more keys"] if items.get("more_keys") else []
            line = indent + " "
            for part in parts:
                if len(line) + len(part) + 2 > width and line.strip():
                    lines.append(line.rstrip(","))
                    line = indent + " "
                line += f" {part},"
            lines.append(line.rstrip(","))
            return
        for key, child in items["keys"].items():
            name = jmespath_identifier(key) + ("?" if child.get("optional") else "")
            lines.append(_fit_line(f"{indent}  {name}: ", child, width))
        if items.get("more_keys"):
            lines.append(f"{indent}  … +{items['more_keys']:,} more keys")
        return
    lines.append(_fit_line(label, shape, width) if not compact else f"{label}{_brief(shape)}")


def _brief(shape: dict) -> str:
    """A field in the compact shape: its kind, with its values when they are few, nested objects and
    arrays by their size alone."""
    if "values" in shape and len(shape["values"]) <= 5:
        return _inline(shape, 0)
    kinds = shape.get("type", "?").split("|")
    if "keys" in shape or "more_keys" in shape:
        kinds[kinds.index("object") if "object" in kinds else 0] = (
            f"{{…{len(shape.get('keys', {})) + shape.get('more_keys', 0):,} keys}}")
    if "length" in shape or "min_length" in shape:
        size = f"{shape['length']:,}" if "length" in shape else f"{shape['min_length']:,}–{shape['max_length']:,}"
        kinds[kinds.index("array") if "array" in kinds else 0] = f"array[{size}]"
    return "|".join(kinds)


def _fit_line(prefix: str, shape: dict, width: int) -> str:
    for depth in (3, 2, 1, 0):
        line = prefix + _inline(shape, depth)
        if len(line) <= width:
            return line
    return line[: width - 1] + "…"


def _inline(shape: dict, depth: int) -> str:
    kind = shape.get("type", "?")
    if "values" in shape:
        values = "|".join(f"{_quote(value)}({count:,})" for value, count in shape["values"].items())
        others = [k for k in kind.split("|") if k != "string"]
        text = "|".join([values] + others)
        return text + (" (in sample)" if shape.get("values_from") == "sample" else "")
    if "keys" in shape or "more_keys" in shape:
        keys = shape.get("keys", {})
        if depth <= 0 or not keys:
            inner = f"{{…{len(keys) + shape.get('more_keys', 0):,} keys}}"
        else:
            parts = [
                f"{jmespath_identifier(key)}{'?' if child.get('optional') else ''}: {_inline(child, depth - 1)}"
                for key, child in keys.items()
            ]
            if shape.get("more_keys"):
                parts.append(f"…+{shape['more_keys']:,} keys")
            inner = "{" + ", ".join(parts) + "}"
        others = [k for k in kind.split("|") if k != "object"]
        return "|".join([inner] + others)
    if "length" in shape or "min_length" in shape:
        size = (f"{shape['length']:,}" if "length" in shape
                else f"{shape['min_length']:,}–{shape['max_length']:,}")
        text = f"array[{size}]"
        if "items" in shape:
            text += " of " + (_inline(shape["items"], depth - 1) if depth > 0 else shape["items"].get("type", "?"))
        if "sampled" in shape:
            text += f" (sampled {shape['sampled']:,})"
        others = [k for k in kind.split("|") if k != "array"]
        return "|".join([text] + others)
    if "min" in shape:
        sample = " (in sample)" if shape.get("range_from") == "sample" else ""
        return f"{kind} {_number(shape['min'])}–{_number(shape['max'])}{sample}"
    return kind


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.6g}"


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


_SQL_TYPES = {"integer": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE", "datetime": "TIMESTAMP",
              "time": "TIME"}


def _render_table(shape: dict, width: int) -> str:
    columns = shape.get("columns", {})
    delimiter = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe", "│": "│"}.get(shape.get("delimiter"), "?")
    quoting = ", quotes as plain text" if shape.get("quoting") == "none" else ""
    if shape.get("framed"):  # a table drawn for people: SQL reads its cells trimmed, as the shape does
        delimiter = "box-drawn │" if shape.get("delimiter") == "│" else "pipe"
        quoting = "; rule lines are not rows, cells are trimmed"
    if comments := shape.get("comment_lines"):
        quoting += f"; {comments:,} # comment line{'s' if comments > 1 else ''} before it, not rows"
    header = ("header row" if shape.get("header", True)
              else "no header row: its first line is a row, columns named as SQL names them")
    head = (f"table: {shape.get('rows', 0):,} rows × {len(columns):,} columns ({delimiter}-separated, {header}"
            f"{quoting})")
    if shape.get("sampled"):
        head += f"; types from the first {shape['sampled']:,} rows"
    parts = []
    for name, column in columns.items():
        sample = " in sample" if column.get("nulls_from") == "sample" else ""
        # nulls are empty fields (SQL's NULLs); null-like text such as "NA" is counted apart, as SQL reads it
        counts = [f"{column['nulls']:,} null"] if column.get("nulls") else []
        counts += [f"{n:,} text {_quote(text)}" for text, n in list(column.get("null_like", {}).items())[:2]]
        if values := column.get("values"):
            quoted = '"' + name.replace('"', '""') + '"'
            counts[-1] += (f"; the rest {values}: TRY_CAST({quoted} AS {_SQL_TYPES.get(values, values.upper())}) "
                           "reads them so, the text as NULL")
        nulls = f" ({', '.join(counts)}{sample})" if counts else ""
        parts.append(f"{name}: {column['type']}{nulls}")
    lines, line = [head], "columns:"
    for part in parts:
        if len(line) + len(part) + 2 > width:
            lines.append(line.rstrip(","))
            line = " "
        line += f" {part},"
    lines.append(line.rstrip(","))
    if ragged := shape.get("ragged"):
        lines.append(_render_ragged(ragged, len(columns) + shape.get("more_columns", 0), shape.get("sampled"),
                                    "header's" if shape.get("header", True) else "first row's"))
    return "\n".join(lines)


def _render_ragged(ragged: dict, width: int, sampled: int | None, whose: str = "header's") -> str:
    """Records whose field count is not the header's: SQL reads the extra fields as more columns, which
    the columns line does not name, and the missing ones as NULL. Counted over every row, or over the
    first `sampled` ones (rows further on may have more fields, and SQL more columns)."""
    parts = []
    if ragged.get("longer"):
        extra = [_quote(name) for name in ragged.get("extra_names", [])]
        count = ragged.get("extra_columns", 0)
        named = ", ".join(extra) if count <= len(extra) else f"{count:,} more columns, {' … '.join(extra)}"
        parts.append(f"{ragged['longer']:,} rows have more fields than the {whose} {width:,} "
                     f"(SQL reads the extra ones as {named})")
    if ragged.get("shorter"):
        parts.append(f"{ragged['shorter']:,} rows have fewer (SQL reads the missing ones as NULL)")
    where = f" in the first {sampled:,} rows" if ragged.get("from") == "sample" and sampled else ""
    return f"ragged{where}: " + "; ".join(parts)
