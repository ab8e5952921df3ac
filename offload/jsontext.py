"""JSON text of values that came from tool results, read and written exactly: orjson, and the standard
library where orjson is not exact.

orjson refuses to write integers beyond 64 bits (token amounts in wei, 128-bit ids) and strings holding
lone surrogates (a JavaScript string cut inside an emoji), refuses to read such surrogate escapes, and
reads such integers as the nearest float (10**21 + 1 became 1e21). All are valid JSON and reach offload
in real results, so every document is read with `loads` (or `content.parse_json`, which uses
`may_hold_big_integers`) and every value written back out (a stored object, a query result, a
reference's shape) goes through `dumps`.
"""

from __future__ import annotations

import decimal
import itertools
import json
import json.encoder
import math
from typing import Any, Callable

import numpy as np
import orjson

from .utf8 import carriable

__all__ = ["dumps", "loads", "may_hold_big_integers", "within"]


def dumps(value: Any, *, sort_keys: bool = False, indent: bool = False, non_str_keys: bool = False) -> bytes:
    """`value` as UTF-8 JSON text; other types as `plain` makes them. NaN and infinities become null, as
    orjson writes them. Raises ValueError for a value that holds itself (a cycle), and TypeError for
    a key that is no str, int, float, bool or None unless `non_str_keys` (then it is written as its
    str())."""
    option = ((orjson.OPT_SORT_KEYS if sort_keys else 0) | (orjson.OPT_INDENT_2 if indent else 0)
              | (orjson.OPT_NON_STR_KEYS if non_str_keys else 0) | orjson.OPT_SERIALIZE_NUMPY)
    try:
        return orjson.dumps(value, default=plain, option=option)
    except TypeError:
        pass
    layout = {"sort_keys": sort_keys, "indent": 2 if indent else None, "non_str_keys": non_str_keys}
    text = _standard(value, ensure_ascii=False, **layout)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # a lone surrogate, which only a string can hold: written as its \ud83d escape, which JSON allows,
        # and the rest as UTF-8 still (escaped too, CJK and emoji no longer matched a grep of the text)
        return carriable(text).encode("utf-8")


def plain(value: Any) -> Any:
    """What a value JSON has no type for is written as, whole: str() of a numpy array of 100,000 numbers
    is "[    0     1     2 ... 99997 99998 99999]", which cut the result without a word. So a value
    that lists itself (`tolist`: numpy arrays and scalars orjson does not write, pandas Series, torch
    tensors), a set, a pydantic model (`model_dump`) or a table (`to_dict`: a pandas DataFrame) is written
    as its contents; anything else as its str()."""
    if isinstance(value, (set, frozenset)):
        return list(value)
    for method, arguments in (("tolist", {}), ("model_dump", {"mode": "json"}), ("to_dict", {})):
        convert = getattr(value, method, None)
        if callable(convert) and not isinstance(value, type):
            try:
                made = convert(**arguments)
            except Exception:  # noqa: BLE001 - a method of that name that means something else
                continue
            if type(made) is not type(value):
                return made
    return str(value)


def standard_text(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, default=plain)` at any depth (NaN and infinities as null)."""
    return _standard(value, ensure_ascii=False, sort_keys=False, indent=None, non_str_keys=False)


def _standard(value: Any, *, ensure_ascii: bool, sort_keys: bool, indent: int | None, non_str_keys: bool) -> str:
    """The standard library's JSON text of `value`, or `_dumps_deep`'s where that encoder gives up:
    deeper than it goes (orjson stops at 255 levels), an integer of more than 4,300 digits, or (with
    `non_str_keys`) a key neither encoder takes."""
    try:
        return json.dumps(_finite(value), default=plain, ensure_ascii=ensure_ascii, sort_keys=sort_keys, indent=indent)
    except (RecursionError, ValueError, TypeError):
        return _dumps_deep(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, indent=indent,
                           non_str_keys=non_str_keys)


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as None, so that both writers give the same, valid JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _dumps_deep(value: Any, *, sort_keys: bool, indent: int | None, ensure_ascii: bool,
                non_str_keys: bool) -> str:
    """What `json.dumps(_finite(value), default=plain, ...)` writes, at any depth and for integers of any
    size: one loop over a stack of open containers instead of a recursion per level (tool results
    nested thousands deep are real: a parser's syntax tree, a linked list as JSON)."""
    string = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    item_separator = "," if indent is not None else ", "
    pieces: list[str] = []
    stack: list[list[Any]] = []  # [items iterator, closing bracket, id, items written so far, is a dict]
    open_ids: set[int] = set()

    def key_text(key: Any) -> str:
        if isinstance(key, str):
            return key
        if isinstance(key, float):  # as the standard library writes float keys
            return float.__repr__(key) if math.isfinite(key) else "NaN" if key != key else f"{'-' * (key < 0)}Infinity"
        if key is None or isinstance(key, (bool, int)):
            return _scalar(key, string)
        if non_str_keys:
            return str(key)
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")

    def write(item: Any) -> None:
        text = _scalar(item, string)
        if text is not None:
            pieces.append(text)
            return
        if isinstance(item, dict):
            pairs = item.items()
            if sort_keys:
                try:  # as the standard library sorts: by the keys themselves
                    pairs = sorted(pairs, key=lambda pair: pair[0])
                except TypeError:  # keys of types that do not compare: by their text
                    pairs = sorted(pairs, key=lambda pair: key_text(pair[0]))
            items = ((key_text(key), val) for key, val in pairs)
            opening, closing = "{", "}"
        elif isinstance(item, (list, tuple)):
            items, opening, closing = iter(item), "[", "]"
        else:
            made = plain(item)
            if isinstance(made, str):
                pieces.append(string(made))
            else:
                write(made)
            return
        if id(item) in open_ids:
            raise ValueError("Circular reference detected")
        open_ids.add(id(item))
        pieces.append(opening)
        stack.append([items, closing, id(item), 0, closing == "}"])

    write(value)
    while stack:
        frame = stack[-1]
        item = next(frame[0], _END)
        if item is _END:
            stack.pop()
            open_ids.discard(frame[2])
            if frame[3] and indent is not None:
                pieces.append("\n" + " " * (indent * len(stack)))
            pieces.append(frame[1])
            continue
        if frame[3]:
            pieces.append(item_separator)
        if indent is not None:
            pieces.append("\n" + " " * (indent * len(stack)))
        frame[3] += 1
        if frame[4]:
            key, item = item
            pieces.append(string(key) + ": ")
        write(item)
    return "".join(pieces)


_END = object()


def _scalar(value: Any, string: Callable[[str], str]) -> str | None:
    """The JSON text of a str, number, bool or None, else None."""
    if isinstance(value, str):
        return string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        try:
            return int.__repr__(value)
        except ValueError:  # more digits than int-to-str allows (4,300): decimal converts without a limit
            return str(decimal.Decimal(value))
    if isinstance(value, float):
        return float.__repr__(value) if math.isfinite(value) else "null"
    return None


# A value's sharing is looked for among its first _PROBE containers, visited widest first, and among the
# first and last _ENDS children of each: a result built of repeated references (JMESPath's
# `[@, @] | [@, @] | …`: 78 characters wrote 73 MB, a few stages more took more memory than the machine
# has) repeats them near its top. A value whose containers are distinct there holds its own weight: its JSON text is
# about what it already takes in memory. (One built to hide a repeat past that can still be big: see
# the README on untrusted callers.)
_PROBE, _ENDS = 4096, 64


def within(value: Any, most: int) -> bool:
    """Whether the JSON text of `value` is at most about `most` bytes, decided without writing it when
    the value shares containers (so that writing it cannot take all the memory there is)."""
    return _distinct(value) or _expanded_size(value, most) <= most


def _children(item: Any) -> Any:
    if isinstance(item, dict):
        if len(item) <= 2 * _ENDS:
            return item.values()
        return itertools.chain(itertools.islice(item.values(), _ENDS), itertools.islice(reversed(item.values()), _ENDS))
    if isinstance(item, (list, tuple)):
        return item if len(item) <= 2 * _ENDS else itertools.chain(item[:_ENDS], item[-_ENDS:])
    return ()


def _distinct(value: Any) -> bool:
    """True when no container repeats among the first ones of `value` (see _PROBE)."""
    seen: set[int] = set()
    queue = [value]
    for item in queue:  # grows while it is read: a breadth-first walk
        for child in _children(item):
            if isinstance(child, (dict, list, tuple)):
                if id(child) in seen:
                    return False
                if len(seen) >= _PROBE:
                    return True
                seen.add(id(child))
                queue.append(child)
    return True


def _expanded_size(value: Any, most: int) -> int:
    """The length of `value`'s compact JSON text, each shared container counted as often as it is
    written and measured once (a part whose containers are distinct is measured by writing it);
    stops past `most` (returning more)."""
    if not isinstance(value, (dict, list, tuple)):
        return len(dumps(value))
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, children_done = stack.pop()
        if id(item) in sizes:
            continue
        if not children_done and _distinct(item):
            sizes[id(item)] = len(dumps(item))
        elif not children_done:
            stack.append((item, True))
            stack.extend((child, False) for child in (item.values() if isinstance(item, dict) else item)
                         if isinstance(child, (dict, list, tuple)) and id(child) not in sizes)
            continue
        else:
            children = list(item.values()) if isinstance(item, dict) else item
            size = 2 + max(len(children) - 1, 0)  # brackets and commas
            if isinstance(item, dict):
                size += sum(len(dumps(key)) + 1 for key in item)
            for child in children:
                size += sizes[id(child)] if isinstance(child, (dict, list, tuple)) else len(dumps(child))
            sizes[id(item)] = size
        if sizes[id(item)] > most:
            return sizes[id(item)]
    return sizes[id(value)]


def loads(data: bytes | bytearray | str) -> Any:
    """The value of the JSON text `data`, exactly (see the module's docstring). Raises ValueError."""
    if not isinstance(data, str) and may_hold_big_integers(data):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # lone surrogate escapes; what is not JSON raises here too


_BIG = 19  # digits: the fewest of an integer orjson reads as a float (beyond int64 and uint64)
_EIGHT_DIGITS = 0x0101010101010101  # eight bytes of 1, as one uint64
_SCAN = 4 << 20  # bytes a pass: the mask and its temporaries stay a few MB whatever the document's size


def may_hold_big_integers(data: bytes | bytearray | memoryview) -> bool:
    """True when `data` has a run of 19 or more digits (an integer orjson may read as a float).

    Such a run holds a whole 8-byte-aligned block of digits; the blocks are found with numpy (a digit
    mask seen as uint64: ~0.3 ms a MB, without the GIL), and only around the few found is the run
    measured. A run inside a string, or a float's long mantissa, also answers True: the document is
    then read by the exact parser, which is only slower.
    """
    codes = np.frombuffer(data, np.uint8)
    for start in range(0, len(codes), _SCAN):
        if _big_run(codes[start:start + _SCAN + _BIG - 1]):  # a run starting in this pass ends in it
            return True
    return False


def _big_run(codes: np.ndarray) -> bool:
    mask = np.subtract(codes, 48, dtype=np.uint8)
    digits = mask.view(np.bool_)
    np.less(mask, 10, out=digits)
    whole = len(digits) // 8 * 8
    blocks = np.flatnonzero(digits[:whole].view(np.uint64) == _EIGHT_DIGITS)
    if not len(blocks):
        return False
    reach = _BIG - 8  # digits a run needs beside its block, before and after it together
    padded = np.concatenate([np.zeros(reach, np.bool_), digits, np.zeros(reach, np.bool_)])
    starts = blocks * 8  # in `padded`, `reach` bytes before each block
    before = padded[starts[:, None] + np.arange(reach - 1, -1, -1)]  # nearest first
    after = padded[starts[:, None] + np.arange(reach + 8, 2 * reach + 8)]
    run = 8 + np.cumprod(before, axis=1).sum(axis=1) + np.cumprod(after, axis=1).sum(axis=1)
    return bool((run >= _BIG).any())
