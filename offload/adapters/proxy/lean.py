"""Parse a large JSON-RPC message without turning its big strings into Python str objects.

A 50 MB tool result arrives as one JSON line. Parsed the usual way, its text becomes a str of up to
4 bytes per character (a single emoji widens the whole string), next to the line it came from: 5x
the payload before anything is stored. Here the long string literals are found with a few numpy
passes, unescaped straight to UTF-8 bytes, and stand in the parsed message as `LentText`: a short str
that carries the bytes. Offloading stores those bytes as they are; `restore` turns whatever is left
back into plain strings before a message is serialized again.
"""

from __future__ import annotations

import codecs
import json
import secrets
from typing import Any

import numpy as np
import orjson

from ...jsontext import loads
from ...store.chunking import escape_safe_blocks, escaping_backslashes

LEND_AT = 1 << 20  # bytes: a string literal at least this long is lent as bytes
_SCAN_BLOCK = 4 << 20  # bytes scanned per numpy pass: its arrays stay a few MB
_QUOTES_AND_BACKSLASHES = bytes(c if c in b'"\\' else 0 for c in range(256))


class LentText(str):
    """A placeholder in a parsed message for a long string, whose UTF-8 bytes are `data`."""

    data: bytes

    def __new__(cls, placeholder: str, data: bytes) -> "LentText":
        text = super().__new__(cls, placeholder)
        text.data = data
        return text


def parse_lean(raw: bytes | bytearray) -> Any:
    """`orjson.loads(raw)`, but every string literal of LEND_AT bytes or more becomes a LentText.

    Raises ValueError when `raw` is not JSON.
    """
    spans, specials = _long_strings(raw, LEND_AT)
    if not spans:
        return loads(raw)
    nonce = secrets.token_hex(8)
    view = memoryview(raw)
    parts: list[bytes] = []
    lent: dict[str, bytes] = {}
    position = 0
    for start, end in spans:  # the literal's contents: raw[start:end], between its quotes
        key = f"\x00offload-lent-{nonce}-{len(lent)}"
        parts += [bytes(view[position:start]), orjson.dumps(key)[1:-1]]
        lent[key] = _unescape(raw, view, start, end, specials)
        position = end
    parts.append(bytes(view[position:]))
    view.release()
    return _swap(loads(b"".join(parts)), lent)


def restore(value: Any) -> Any:
    """`value` with every LentText decoded back into a plain str (a new container where one changed)."""
    if isinstance(value, LentText):
        return value.data.decode("utf-8", "surrogatepass")
    if isinstance(value, dict):
        new = {key: restore(item) for key, item in value.items()}
        return new if any(new[key] is not value[key] for key in value) else value
    if isinstance(value, list):
        items = [restore(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value)) else value
    return value


def _swap(value: Any, lent: dict[str, bytes]) -> Any:
    if isinstance(value, str):
        data = lent.get(value)
        return value if data is None else LentText(value, data)
    if isinstance(value, dict):  # a key that long is absurd but legal: it becomes a str again
        return {(lent[key].decode("utf-8", "surrogatepass") if key in lent else key): _swap(item, lent)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_swap(item, lent) for item in value]
    return value


def _unescape(raw: bytes | bytearray, view: memoryview, start: int, end: int, specials: np.ndarray) -> bytes:
    """The UTF-8 bytes that the contents of a JSON string literal, raw[start:end], stand for.

    JSON's escapes are \\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uHHHH. `codecs.escape_decode` reads all
    but \\/ and \\uHHHH exactly as JSON does, straight from the line (a valid literal holds no other
    escape); `specials` says where those two start, and the line is cut there: \\/ is a solidus, and
    a run of \\uHHHH goes through the JSON parser so that surrogate pairs join.
    """
    inside = specials[(specials >= start) & (specials < end)]
    if not len(inside):
        return codecs.escape_decode(view[start:end])[0]
    parts: list[bytes] = []
    position, i = start, 0
    while i < len(inside):
        first = int(inside[i])
        parts.append(codecs.escape_decode(view[position:first])[0])
        if raw[first + 1] == 0x2F:  # "\\/"
            parts.append(b"/")
            position, i = first + 2, i + 1
            continue
        j = i
        while j + 1 < len(inside) and inside[j + 1] == inside[j] + 6 and raw[inside[j + 1] + 1] == 0x75:
            j += 1
        after = int(inside[j]) + 6
        parts.append(_json_text(bytes(raw[first:after])).encode("utf-8", "surrogatepass"))
        position, i = after, j + 1
    parts.append(codecs.escape_decode(view[position:end])[0])
    return b"".join(parts)


def _json_text(literal: bytes) -> str:
    literal = b'"' + literal + b'"'
    try:
        return orjson.loads(literal)
    except orjson.JSONDecodeError:  # a lone surrogate escape: legal JSON that orjson refuses
        return json.loads(literal)


def _long_strings(raw: bytes | bytearray, min_length: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """(start, end) of the contents of every string literal of at least `min_length` bytes, and where
    every \\uHHHH and \\/ escape starts.

    The quotes that open and close strings are the unescaped ones (not after an odd run of
    backslashes), in order; the block loop keeps the numpy arrays to a few MB whatever the size.
    """
    empty = np.zeros(0, dtype=np.int64)
    if len(raw) < min_length:
        return [], empty
    quotes, specials = [], []
    for lo, hi in escape_safe_blocks(raw, _SCAN_BLOCK):
        block = np.frombuffer(raw, dtype=np.uint8, count=hi - lo, offset=lo)
        codes = np.frombuffer(raw[lo:hi].translate(_QUOTES_AND_BACKSLASHES), dtype=np.uint8)
        pos = np.flatnonzero(codes != 0)  # 4x faster than on the uint8 codes themselves
        vals = codes[pos]
        backslash = vals == 0x5C
        if backslash.any():
            escaping = escaping_backslashes(pos[backslash])
            escaping = escaping[escaping + 1 < hi - lo]
            follows = block[escaping + 1]
            specials.append(escaping[(follows == 0x75) | (follows == 0x2F)] + lo)
            escaped = np.zeros(hi - lo + 1, dtype=bool)
            escaped[escaping + 1] = True
            pos = pos[~backslash & ~escaped[pos]]
        quotes.append(pos + lo)
    found = np.concatenate(quotes) if quotes else empty
    opening, closing = found[0::2] + 1, found[1::2]
    opening = opening[: len(closing)]
    long = (closing - opening) >= min_length
    spans = [(int(a), int(b)) for a, b in zip(opening[long], closing[long])]
    return spans, np.concatenate(specials) if specials else empty
