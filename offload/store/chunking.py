"""Cut content into bounded chunks with byte, character and line offsets, and index JSON array items.

Chunks end on a newline when one is near the size limit, else on a UTF-8 character boundary, so each
chunk decodes on its own and a slice in any unit reads only the chunks that hold it. The item index
records where each item of a JSON document's main array (or each NDJSON row) starts and ends, found
with vectorised passes over the bytes (numpy), never a Python loop per byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Iterable, Iterator

import numpy as np
import orjson

from ..utf8 import char_boundary, utf8_facts

CHUNK_SIZE = 1 << 20  # 1 MiB: one primary-key read per chunk, small enough to slice from memory


@dataclass(frozen=True)
class Chunk:
    seq: int
    byte_start: int
    char_start: int
    line_start: int  # number of b"\n" before this chunk: the 0-based line its first byte belongs to
    data: bytes | memoryview  # chunk_bytes lends a view of the caller's bytes: no second copy in memory
    chars: int  # characters as UTF-8 decoding with replacement counts them
    newlines: int
    bad: int = 0  # bytes of invalid UTF-8 (each run of them decodes to one U+FFFD)


def _cut_point(buf: bytes | memoryview, start: int, size: int) -> int:
    """End of the chunk starting at `start`: after a newline near the limit, else on a char boundary."""
    end = start + size
    if end >= len(buf):
        return len(buf)
    window = bytes(buf[start + size // 2 : end])
    nl = window.rfind(b"\n")
    if nl >= 0:
        return start + size // 2 + nl + 1
    cut = char_boundary(buf, end)  # no newline in the second half
    return cut if cut > start else end


def chunk_bytes(data: bytes, size: int = CHUNK_SIZE, start_seq: int = 0,
                byte_start: int = 0, char_start: int = 0, line_start: int = 0) -> Iterator[Chunk]:
    """Split `data` into chunks; the offsets continue from the given starts (for streamed input)."""
    view = memoryview(data)
    pos = 0
    seq = start_seq
    while pos < len(data):
        end = _cut_point(view, pos, size)
        piece = view[pos:end]
        chars, bad = utf8_facts(bytes(piece))  # a 1 MiB copy that lives for this line only
        newlines = count_newlines(piece)
        yield Chunk(seq, byte_start, char_start, line_start, piece, chars, newlines, bad)
        seq += 1
        byte_start += len(piece)
        char_start += chars
        line_start += newlines
        pos = end


def count_newlines(piece: bytes | memoryview) -> int:
    """b"\\n" in `piece`: numpy compares with SIMD and without the GIL, 3x faster than bytes.count."""
    return int(np.count_nonzero(np.frombuffer(piece, dtype=np.uint8) == 10))


def chunk_stream(blocks: Iterable[bytes], size: int = CHUNK_SIZE) -> Iterator[Chunk]:
    """Chunk a stream of byte blocks without holding more than about two chunks in memory."""
    pending = b""
    seq = byte_start = char_start = line_start = 0
    for block in blocks:
        pending += block
        # walk a view and cut the remainder once per block: re-slicing `pending` after every chunk
        # copied the rest of a large block each time (quadratic: 1.4 s for one 50 MB block)
        view, pos = memoryview(pending), 0
        while len(pending) - pos >= 2 * size:
            end = _cut_point(view, pos, size)
            for chunk in chunk_bytes(view[pos:end], size, seq, byte_start, char_start, line_start):
                yield replace(chunk, data=bytes(chunk.data))  # `pending` is about to be replaced
                seq, byte_start = chunk.seq + 1, chunk.byte_start + len(chunk.data)
                char_start, line_start = chunk.char_start + chunk.chars, chunk.line_start + chunk.newlines
            pos = end
        view.release()
        pending = pending[pos:] if pos else pending
    for chunk in chunk_bytes(pending, size, seq, byte_start, char_start, line_start):
        yield replace(chunk, data=bytes(chunk.data))


def count_lines(total_bytes: int, newlines: int, ends_with_newline: bool) -> int:
    """Lines as a reader counts them: a last line without its newline still counts."""
    if total_bytes == 0:
        return 0
    return newlines + (0 if ends_with_newline else 1)


# ---------------------------------------------------------------------------------------------
# Item index: byte ranges of the items of the main JSON array, or of NDJSON rows.

_BLOCK = 16 << 20
ITEMS_PER_BLOCK = 65536
_STRUCTURAL = bytes(c if c in b'"\\[]{},' else 0 for c in range(256))  # a translate table
_WS = b" \t\r\n"


@dataclass
class ItemIndex:
    """Byte ranges of items: item i is data[starts[i]:ends[i]] (surrounding whitespace included)."""

    path: str  # JMESPath of the indexed array: "" for a top-level array or NDJSON rows
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """Packed int64 (start, end) pairs, ITEMS_PER_BLOCK items per block, for storage."""
        pairs = np.stack([self.starts, self.ends], axis=1).astype("<i8")
        for block, first in enumerate(range(0, len(pairs), ITEMS_PER_BLOCK)):
            yield block, pairs[first : first + ITEMS_PER_BLOCK].tobytes()


def unpack_block(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<i8").reshape(-1, 2)


def escape_safe_blocks(data: bytes | bytearray, size: int = _BLOCK) -> Iterator[tuple[int, int]]:
    """Block boundaries that never split a run of backslashes (so escapes resolve inside a block)."""
    start = 0
    while start < len(data):
        end = min(start + size, len(data))
        while end < len(data) and data[end - 1] == 0x5C:
            end += 1
        yield start, end
        start = end


def escaping_backslashes(bpos: np.ndarray) -> np.ndarray:
    """Of sorted backslash positions, those that escape the byte after them: the last backslash of
    each run of odd length (in a run of even length they escape each other)."""
    breaks = np.flatnonzero(np.diff(bpos) != 1) + 1
    run_start = np.concatenate(([0], breaks))
    run_end = np.concatenate((breaks, [len(bpos)]))
    return bpos[run_end[(run_end - run_start) % 2 == 1] - 1]


def _shallow_structure(data: bytes, max_depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions, bytes and depth-before of structural chars outside strings with depth <= max_depth.

    Per 16 MB block: one `bytes.translate` keeps the structural bytes (zero elsewhere), the escaped
    ones are dropped with a mask, string state is the parity of a running count of quotes and depth a
    running sum, both in int32 (int64 sums are many times slower; measured per 10 MB of JSON).
    """
    in_string = 0
    depth = 0
    out_pos, out_val, out_depth = [], [], []
    for lo, hi in escape_safe_blocks(data):
        codes = np.frombuffer(data[lo:hi].translate(_STRUCTURAL), dtype=np.uint8)
        pos = np.flatnonzero(codes != 0)  # 4x faster than on the uint8 codes themselves
        if len(pos) == 0:
            continue
        vals = codes[pos]
        bs = vals == 0x5C
        if bs.any():
            # the character right after an odd-length run of backslashes is escaped
            escaped = np.zeros(hi - lo + 1, dtype=bool)
            escaped[escaping_backslashes(pos[bs]) + 1] = True
            keep = ~bs & ~escaped[pos]
            pos, vals = pos[keep], vals[keep]
            if len(pos) == 0:
                continue  # a block inside one string, of escaped quotes and backslashes only
        quotes = vals == 0x22
        # quotes so far, this one included: a char that is not a quote is outside every string when
        # the count (with the state carried in) is even (an int32 cumsum: 2.5x faster than an XOR
        # accumulate in uint8)
        quoted = np.cumsum(quotes, dtype=np.int32)
        if in_string:
            quoted += 1
        outside = (quoted & 1) == 0
        outside &= ~quotes
        in_string = int(quoted[-1]) & 1
        # +1 for an opening bracket, -1 for a closing one: compares, 8x faster than a table lookup
        opens = vals == 0x5B
        opens |= vals == 0x7B
        closes = vals == 0x5D
        closes |= vals == 0x7D
        opens &= outside  # brackets inside strings do not nest
        closes &= outside
        delta = opens.view(np.int8) - closes.view(np.int8)
        depth_before = np.cumsum(delta, dtype=np.int32)  # without dtype: int64, 25x slower
        depth_before += depth
        depth_before -= delta
        depth = int(depth_before[-1] + delta[-1])
        # one index for the three outputs: 3x faster than filtering each by a mask, twice
        kept = np.flatnonzero(outside & (depth_before <= max_depth))
        out_pos.append(pos[kept] + lo)
        out_val.append(vals[kept])
        out_depth.append(depth_before[kept].astype(np.int64))
    if not out_pos:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0, dtype=np.uint8), empty
    return np.concatenate(out_pos), np.concatenate(out_val), np.concatenate(out_depth)


def _items_between(pos: np.ndarray, vals: np.ndarray, depth: np.ndarray, data: bytes,
                   open_i: int, level: int) -> tuple[np.ndarray, np.ndarray]:
    """Items of the array whose "[" is entry open_i and whose items sit at depth `level`."""
    after = slice(open_i + 1, None)
    d, v, p = depth[after], vals[after], pos[after]
    close_rel = np.flatnonzero((d == level) & (v == ord("]")))
    if len(close_rel) == 0:
        raise ValueError("unterminated array")
    close = close_rel[0]
    commas = p[:close][(d[:close] == level) & (v[:close] == ord(","))]
    open_pos, close_pos = int(pos[open_i]), int(p[close])
    if len(commas) == 0 and not data[open_pos + 1 : close_pos].strip(_WS):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([open_pos + 1], commas + 1)).astype(np.int64)
    ends = np.concatenate((commas, [close_pos])).astype(np.int64)
    return starts, ends


def _key_before(data: bytes, bracket: int) -> str | None:
    """The object key whose value opens at `bracket` ("key": [ ...), read backwards."""
    i = bracket - 1
    while i >= 0 and data[i] in _WS:
        i -= 1
    if i < 0 or data[i] != ord(":"):
        return None
    i -= 1
    while i >= 0 and data[i] in _WS:
        i -= 1
    if i < 0 or data[i] != ord('"'):
        return None
    end = i
    i -= 1
    while i >= 0 and not (data[i] == ord('"') and data[i - 1] != 0x5C):
        i -= 1
    try:
        return orjson.loads(data[i : end + 1])
    except orjson.JSONDecodeError:
        return None


def json_item_index(data: bytes) -> ItemIndex | None:
    """Index the main array: the top-level array, else the largest array directly under the top object.

    Returns None when the document has no such array or is not well-formed enough to index (the caller
    then pages items from the parsed document instead).
    """
    first = data.lstrip(_WS)[:1]
    if first not in (b"[", b"{"):
        return None
    try:
        if first == b"[":
            # the items sit at depth 1: what lies deeper (the fields of every item) is not kept
            pos, vals, depth = _shallow_structure(data, 1)
            starts, ends = _items_between(pos, vals, depth, data, 0, 1)
            return ItemIndex("", starts, ends)
        pos, vals, depth = _shallow_structure(data, 2)
        best: ItemIndex | None = None
        for open_i in np.flatnonzero((depth == 1) & (vals == ord("["))):
            key = _key_before(data, int(pos[open_i]))
            if key is None:
                continue
            starts, ends = _items_between(pos, vals, depth, data, int(open_i), 2)
            if best is None or len(starts) > len(best):
                best = ItemIndex(jmespath_key(key), starts, ends)
        return best
    except ValueError:
        return None


def jmespath_key(key: str) -> str:
    """A key as a JMESPath identifier, quoted when it is not a bare identifier."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return key
    return json.dumps(key, ensure_ascii=False)


def ndjson_item_index(data: bytes) -> ItemIndex:
    """Rows of NDJSON: every line with something on it."""
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], newlines + 1)).astype(np.int64)
    ends = np.concatenate((newlines, [len(data)])).astype(np.int64)
    length = ends - starts
    nonblank = length > 0
    # a line that is only "\r" (CRLF files) or spaces is not a row
    short = nonblank & (length <= 2)
    for i in np.flatnonzero(short):
        if not data[starts[i] : ends[i]].strip(_WS):
            nonblank[i] = False
    return ItemIndex("", starts[nonblank], ends[nonblank])
