"""Facts about UTF-8 bytes without decoding them whole: characters and invalid bytes, piece by piece.

A 100 MB result decoded at once costs a string of up to 400 MB and, when a few bytes are invalid, a
second and third pass to count them. Walking it in pieces cut on character boundaries costs nothing
for ASCII pieces (most logs and code) and one small decode for the others.
"""

from __future__ import annotations

from typing import Iterator

PIECE = 1 << 20
_DECODED = 1 << 16
_REPLACEMENT = "\ufffd".encode()


def char_boundary(buf: bytes | memoryview, end: int) -> int:
    """`end`, moved back over at most 3 UTF-8 continuation bytes (10xxxxxx) so no character is split.

    When `end` and the 3 bytes before it are all continuation bytes, no valid character crosses `end`
    (one has at most 3), and `end` itself is the cut: moving back 4 would split the character those
    bytes may end, and the pieces would then decode to more characters and more invalid bytes than
    the whole."""
    if end >= len(buf):
        return len(buf)
    cut = end
    while cut > end - 3 and cut > 0 and 0x80 <= buf[cut] <= 0xBF:
        cut -= 1
    return cut if cut > 0 and not 0x80 <= buf[cut] <= 0xBF else end


def pieces(data: bytes, size: int = PIECE) -> Iterator[bytes]:
    """`data` in pieces of about `size` bytes that each decode on their own."""
    view, start = memoryview(data), 0
    while start < len(data):
        end = char_boundary(view, start + size)
        if end <= start:
            end = min(len(data), start + size)
        yield bytes(view[start:end])
        start = end


def utf8_facts(piece: bytes) -> tuple[int, int]:
    """(characters, invalid bytes) of `piece` decoded as UTF-8 with replacement, without keeping the text.

    The invalid bytes are counted without a Python callback per error: every replacement re-encodes to
    3 bytes and genuine U+FFFD characters round-trip unchanged. A piece that is not all ASCII is decoded
    in parts of _DECODED bytes, cut on character boundaries (so each decodes as it would inside the
    whole): one non-ASCII character makes the whole part's text 2-4 bytes a character, and a text of a
    few MB is fresh memory from the system on every call. A 1 MiB chunk of source code with a few
    non-ASCII characters took 0.6 ms whole and 0.25 ms in parts.
    """
    if piece.isascii():
        return len(piece), 0
    if len(piece) > _DECODED:
        chars = bad = 0
        for part in pieces(piece, _DECODED):
            part_chars, part_bad = utf8_facts(part)
            chars += part_chars
            bad += part_bad
        return chars, bad
    try:
        return len(piece.decode("utf-8")), 0
    except UnicodeDecodeError:
        text = piece.decode("utf-8", "replace")
    sequences = text.count("\ufffd") - piece.count(_REPLACEMENT)
    return len(text), len(piece) - len(text.encode("utf-8")) + 3 * sequences


def invalid_bytes(data: bytes) -> int:
    """How many bytes of `data` are not valid UTF-8."""
    if data.isascii():
        return 0
    return sum(utf8_facts(piece)[1] for piece in pieces(data))


# -- UTF-8 character boundaries in a byte page --------------------------------------------------
# A byte page of text starts and ends between characters, so following `next` never splits one and the
# model never sees a U+FFFD the data does not hold. A byte that is not part of a valid character is a
# unit of its own: it is a boundary on both sides, and comes back base64 (offload.tools.slicing's
# Slicer._text_bytes).


def sequence_size(lead: int) -> int:
    """Bytes of the UTF-8 sequence a lead byte announces (1 for ASCII and for bytes no character starts with)."""
    return 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 1


def char_at(buf: bytes, pos: int) -> int:
    """Size of the valid multibyte character starting at `pos`, else 1 (ASCII, or a byte that starts none)."""
    size = sequence_size(buf[pos])
    if size > 1:
        try:
            if len(buf[pos : pos + size].decode("utf-8")) == 1:
                return size
        except UnicodeDecodeError:
            pass
    return 1


def char_start(buf: bytes, pos: int) -> int:
    """`pos`, or the first byte of the valid character that `pos` falls strictly inside."""
    for lead in range(max(pos - 3, 0), pos):
        if lead + char_at(buf, lead) > pos:
            return lead
    return pos


def invalid_prefix(buf: bytes, start: int = 0) -> int:
    """How many bytes from `start` of `buf` on belong to no valid character."""
    n = start
    while n < len(buf) and buf[n] >= 0x80 and char_at(buf, n) == 1:
        n += 1
    return n - start


# Valid bytes in a row that end a stretch of invalid UTF-8 (see `mixed_prefix`).
MIXED_RUN = 64


def mixed_prefix(buf: bytes) -> int:
    """How many bytes at the start of `buf` to send as bytes, not text: its invalid prefix, and on through
    every run of fewer than MIXED_RUN valid bytes between invalid ones. Random bytes are valid UTF-8 here
    and there (every byte below 0x80 is), and paging each run apart took 1,500 pages for 3 KB of them in
    a log. 0 when `buf` starts with a valid character."""
    end = invalid_prefix(buf)
    while 0 < end < len(buf):
        probe = buf[end:end + MIXED_RUN]
        try:
            probe.decode("utf-8")
            valid = len(probe)
        except UnicodeDecodeError as exc:
            valid = exc.start
        if valid >= MIXED_RUN - 3 or end + valid >= len(buf):  # - 3: a character cut at the probe's end
            return end
        end += valid + invalid_prefix(buf, end + valid)
    return end


def carriable(text: str) -> str:
    """`text` as UTF-8 can carry it: a lone surrogate (from a JSON escape such as "\\ud800", which
    JSON allows and UTF-8 cannot encode) becomes that escape, as six characters. Text without one is
    returned as it is."""
    return text if encodable(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def encodable(text: str) -> bool:
    """Whether `text` holds no lone surrogate (it can be sent as UTF-8 exactly as it is)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
