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

from ..content.shape import MAIN_VISITS, MAX_DEPTH, array_is_main, jmespath_path
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
_BOM = b"\xef\xbb\xbf"
_EMPTY = re.compile(rb"[ \t\r\n]*")
# an object's key, raw: keys are compared as written (a key escaped two ways is not caught)
_KEY_AFTER = re.compile(rb'[ \t\r\n]*"((?:[^"\\]|\\.)*)"')
_KEYS_CHECKED = 50_000  # keys read to rule out duplicates; a document with more is not indexed


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


def index_fault(blob: bytes, size: int, items: int | None) -> str | None:
    """What makes `blob` (an item index's packed pairs) no index of a content of `size` bytes with `items`
    items (None: any number), or None: items must lie within the content, in order. A changed offset
    served one item's bytes for another's."""
    if len(blob) % 16:
        return f"its {len(blob):,} bytes are no whole number of (start, end) pairs"
    pairs = unpack_block(blob)
    if items is not None and len(pairs) != items:
        return f"it holds {len(pairs):,} items where {items:,} were indexed"
    starts, ends = pairs[:, 0], pairs[:, 1]
    if (starts < 0).any() or (ends < starts).any() or (ends > size).any() or (np.diff(starts) < 0).any():
        return f"it holds item ranges its content ({size:,} bytes) cannot have"
    return None


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


def _shallow_structure(data: bytes, max_depth: int, *, through_objects: bool = False
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions, bytes and depth-before of structural chars outside strings with depth <= max_depth.

    Per 16 MB block: one `bytes.translate` keeps the structural bytes (zero elsewhere), the escaped
    ones are dropped with a mask, string state is the parity of a running count of quotes and depth a
    running sum, both in int32 (int64 sums are many times slower; measured per 10 MB of JSON).

    `through_objects` keeps only what `find_main` looks at: the chars of containers reached through
    objects alone, and the commas and closing bracket directly inside such an array (its item
    boundaries), not what its items hold. Two more running sums tell them: the arrays open, and the
    region of the outermost array each char lies in (see `_depth_limits`).
    """
    in_string = 0
    depth = 0
    arrays = region = 0  # open arrays, and the region mark of an outermost one (carried across blocks)
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
        if through_objects:
            # `quoted` is done with: its memory, already paged in, holds the depth limit of every char
            limits, item_openers, arrays, region = _depth_limits(vals, opens, closes, depth_before, arrays, region,
                                                                 max_depth, quoted)
            keep = depth_before <= limits
            keep[item_openers] = False
            keep &= outside
        else:
            keep = outside & (depth_before <= max_depth)
        # one index for the three outputs: 3x faster than filtering each by a mask, twice
        kept = np.flatnonzero(keep)
        out_pos.append(pos[kept] + lo)
        out_val.append(vals[kept])
        out_depth.append(depth_before[kept].astype(np.int64))
    if not out_pos:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0, dtype=np.uint8), empty
    return np.concatenate(out_pos), np.concatenate(out_val), np.concatenate(out_depth)


def _depth_limits(vals: np.ndarray, opens: np.ndarray, closes: np.ndarray, depth_before: np.ndarray, arrays: int,
                  region: int, max_depth: int, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """One block's depth limit per char for `_shallow_structure(through_objects=True)`, the brackets that
    open an item of an outermost array, and the two counts carried to the next block.

    The limit is `max_depth`, except in an outermost array (one reached through objects alone) at
    depth D: D + 1 there, which keeps its commas and its "]" and none of what its items hold (the
    items' own opening brackets, at D + 1 too, are returned apart). The arrays open change only at
    brackets, a few in ten structural chars, so they are summed over the brackets alone; a region's
    limit is spread over its chars by one running sum, in place in `scratch` (fresh arrays here cost
    more in page faults than in arithmetic: 18 ms a 10 MB document, against 5).
    """
    brackets = np.flatnonzero(opens | closes)
    kind, opening = vals[brackets], opens[brackets]
    step = opening.view(np.int8) * 2 - 1  # +1 opens, -1 closes
    array_step = step * (kind == 0x5B) + step * (kind == 0x5D)
    arrays_after = np.cumsum(array_step, dtype=np.int32)
    arrays_after += arrays
    arrays_before = arrays_after - array_step
    first = brackets[(array_step == 1) & (arrays_before == 0)] + 1  # an outermost "[" itself lies outside
    after = brackets[(array_step == -1) & (arrays_after == 0)] + 1  # its "]" (at depth D + 1) inside
    rise = depth_before[first - 1] + 1 - max_depth
    marks = scratch
    marks.fill(0)
    marks[0] = region
    marks[first[first < len(marks)]] += rise[first < len(marks)]
    fall = depth_before[after - 1] - max_depth
    marks[after[after < len(marks)]] -= fall[after < len(marks)]
    region += int(rise.sum() - fall.sum())
    np.cumsum(marks, out=marks)
    marks += max_depth
    return marks, brackets[opening & (arrays_before > 0)], int(arrays_after[-1]) if len(brackets) else arrays, region


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
    """Index the main array, the one `find_main` chooses and the reference names: the top-level array,
    else the array that rule finds through the objects, from the bytes alone.

    Returns None when the main collection is an object (a map), when the document has no array or is not
    well-formed enough to index, and when its keys are too many to check for duplicates (a parsed
    document keeps the last of duplicate keys, the bytes have them all): the caller then pages items
    from the parsed document instead, and no count is stored for an array the reference does not name.
    """
    start = _EMPTY.match(data, len(_BOM) if data.startswith(_BOM) else 0).end()
    first = data[start:start + 1]
    try:
        if first == b"[":
            # the items sit at depth 1: what lies deeper (the fields of every item) is not kept
            pos, vals, depth = _shallow_structure(data, 1)
            starts, ends = _items_between(pos, vals, depth, data, 0, 1)
            return ItemIndex("", starts, ends)
        if first != b"{":
            return None
        # containers down to MAX_DEPTH + 1 levels are candidates; their items' boundaries lie one deeper
        pos, vals, depth = _shallow_structure(data, MAX_DEPTH + 2, through_objects=True)
        found = _main_array(data, pos, vals, depth)
        if found is None:
            return None
        keys, open_i = found
        starts, ends = _items_between(pos, vals, depth, data, open_i, int(depth[open_i]) + 1)
        return ItemIndex(jmespath_path(keys), starts, ends)
    except ValueError:
        return None


def _main_array(data: bytes, pos: np.ndarray, vals: np.ndarray, depth: np.ndarray) -> tuple[list[str], int] | None:
    """`find_main`'s rule on the structure of an object document: the key path of the main array and the
    index of its "[" among the structural chars, or None (see `json_item_index`).

    Every container is keyed by (depth, position), which sorts them breadth first in document order,
    the order the rule visits them in: openers and closers pair up by that key, entries are the commas
    one level down between them, and a container's parent is the last container one level up before it.
    """
    width = len(data) + 1
    is_open = ((vals == 0x7B) | (vals == 0x5B)) & (depth <= MAX_DEPTH + 1)  # deeper ones are never candidates
    is_close = ((vals == 0x7D) | (vals == 0x5D)) & (depth <= MAX_DEPTH + 2)
    open_key = depth[is_open] * width + pos[is_open]
    order = np.argsort(open_key, kind="stable")
    open_key, open_at = open_key[order], np.flatnonzero(is_open)[order]
    level, is_array = depth[open_at], vals[open_at] == 0x5B
    close_key = np.sort((depth[is_close] - 1) * width + pos[is_close])
    if (len(close_key) != len(open_key) or len(open_key) == 0 or open_key[0] != pos[0]
            or np.any(close_key // width != level) or np.any(close_key <= open_key)):
        raise ValueError("unbalanced brackets")
    comma = vals == 0x2C
    comma_key = np.sort((depth[comma] - 1) * width + pos[comma])
    commas = np.searchsorted(comma_key, close_key) - np.searchsorted(comma_key, open_key)
    parent = np.searchsorted(open_key, (level - 1) * width + pos[open_at], side="right") - 1
    parent[0] = -1

    is_object = ~is_array
    visit = np.flatnonzero(is_object & (level <= MAX_DEPTH))[:MAIN_VISITS]  # breadth first: in key order
    visited = np.zeros(len(open_key), dtype=bool)
    visited[visit] = True
    seen = np.flatnonzero(np.concatenate(([False], visited[parent[1:]])))  # entries of visited objects
    objects = np.concatenate(([0], seen[is_object[seen] & (level[seen] <= MAX_DEPTH)]))
    arrays = seen[is_array[seen]]
    if len(arrays) == 0:
        return None
    # A container's entries are its commas plus one, unless nothing stands between its brackets.
    sizes = commas + 1
    candidates = np.concatenate((objects, arrays))
    for i in candidates[commas[candidates] == 0].tolist():
        if _EMPTY.fullmatch(data, int(pos[open_at[i]]) + 1, int(close_key[i] % width)):
            sizes[i] = 0
    best = int(arrays[np.argmax(sizes[arrays])])  # argmax: the first of equal ones
    best_object = int(objects[np.argmax(sizes[objects])])
    if not array_is_main(int(sizes[best]), int(sizes[best_object])):
        return None
    # Only a visited object with a container among its entries can hide a repeated key that matters: one
    # that holds scalars only is merely smaller parsed, and a smaller object leaves the array main.
    if _duplicate_keys(data, np.intersect1d(visit, parent[1:]), open_at, pos, comma_key, open_key, close_key, width):
        return None
    chain = []
    node = best
    while node > 0:
        key = _key_before(data, int(pos[open_at[node]]))
        if key is None:
            raise ValueError("no key before a container")
        chain.append(key)
        node = int(parent[node])
    return chain[::-1], int(open_at[best])


def _duplicate_keys(data: bytes, looked: np.ndarray, open_at: np.ndarray, pos: np.ndarray,
                    comma_key: np.ndarray, open_key: np.ndarray, close_key: np.ndarray, width: int) -> bool:
    """Whether an object of `looked` holds a key twice, or they hold too many keys to check (True then too).

    The parsed document keeps the last value of a key given twice, at the first one's place: the rule
    applied to the bytes could then find another array than `find_main` does.
    """
    first = np.searchsorted(comma_key, open_key[looked])
    last = np.searchsorted(comma_key, close_key[looked])
    if int((last - first).sum()) + len(looked) > _KEYS_CHECKED:
        return True
    for i, lo, hi in zip(looked.tolist(), first.tolist(), last.tolist()):
        if lo == hi:
            continue  # one entry or none: no key can repeat
        entries = [int(pos[open_at[i]])] + (comma_key[lo:hi] % width).tolist()
        keys = [_KEY_AFTER.match(data, at + 1) for at in entries]
        # a key is compared as it reads: "\u0075sers" is "users" (escapes are rare: decode only those)
        names = {_key_name(found.group(1)) for found in keys if found}
        if len(names) < len(keys):
            return True
    return False


def _key_name(raw: bytes) -> bytes | str:
    if b"\\" not in raw:
        return raw.decode("utf-8", "replace")
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")


def ndjson_item_index(data: bytes) -> ItemIndex:
    """Rows of NDJSON: every line with something on it."""
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([len(_BOM) if data.startswith(_BOM) else 0], newlines + 1)).astype(np.int64)
    ends = np.concatenate((newlines, [len(data)])).astype(np.int64)
    length = ends - starts
    nonblank = length > 0
    # a line that is only "\r" (CRLF files) or spaces is not a row
    short = nonblank & (length <= 2)
    for i in np.flatnonzero(short):
        if not data[starts[i] : ends[i]].strip(_WS):
            nonblank[i] = False
    return ItemIndex("", starts[nonblank], ends[nonblank])


def nul_item_index(data: bytes) -> ItemIndex:
    """Entries of NUL-separated output (`find -print0`, `git ls-files -z`): the bytes between NULs, kept
    whole (a name may hold spaces or a newline). A final NUL ends the last entry; it opens no new one."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nuls = np.flatnonzero(buf == 0)
    starts = np.concatenate(([0], nuls + 1)).astype(np.int64)
    ends = np.concatenate((nuls, [len(data)])).astype(np.int64)
    if starts[-1] == len(data):
        starts, ends = starts[:-1], ends[:-1]
    return ItemIndex("", starts, ends)
