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

import json
from typing import Any

import numpy as np
import orjson

__all__ = ["dumps", "loads", "may_hold_big_integers"]


def dumps(value: Any, *, sort_keys: bool = False, indent: bool = False, non_str_keys: bool = False) -> bytes:
    """`value` as UTF-8 JSON text; unknown types as their str(). NaN and infinities become null, as
    orjson writes them."""
    option = ((orjson.OPT_SORT_KEYS if sort_keys else 0) | (orjson.OPT_INDENT_2 if indent else 0)
              | (orjson.OPT_NON_STR_KEYS if non_str_keys else 0))
    try:
        return orjson.dumps(value, default=str, option=option)
    except TypeError:
        pass
    text = json.dumps(_finite(value), default=str, sort_keys=sort_keys, indent=2 if indent else None,
                      ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: written as a \ud83d escape, which JSON allows
        return json.dumps(_finite(value), default=str, sort_keys=sort_keys, indent=2 if indent else None).encode()


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as None, so that both writers give the same, valid JSON."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


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
