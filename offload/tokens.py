"""Token counts for tool results: a fast conservative estimate, or a real tokenizer when given one.

Every tool result passes through the estimate, so it uses one bytes.translate and a few numpy passes,
no per-character Python. Calibrated against o200k_base and cl100k_base (benchmarks/token_calibration.py),
it stays above 90% of both on the content offload sees and is typically 15-40% above.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .utf8 import char_boundary, pieces

KINDS = ("json", "ndjson", "csv", "grep", "shell", "text", "binary")

# How the estimate works. A BPE tokenizer first cuts text into pieces -- a word with one leading space
# or punctuation mark, up to 3 digits, a punctuation run, a whitespace run -- and a common piece is one
# token. So the estimate charges every run of one character class, a little per letter (rare words
# split), more per digit, a lower-to-upper letter change (camelCase, base64), and a price per character
# for non-ASCII scripts, which both tokenizers cover worse than English (cl100k much worse). Each
# character becomes a one-byte code that is its own weight in 1/_UNIT token. The weights come from a
# linear program over the calibration corpora, rounded up. One model serves every text kind: a JSON or
# CSV result is priced by the digits, runs and scripts it holds, so a mislabelled result stays safe.
# Outside the guarantee (measured in the benchmark's "out" rows): lists of rare names and the Latin-script
# languages cl100k splits finely (Basque, Welsh, Finnish...: down to 0.75 of cl100k, 0.80 of o200k),
# dense runs of rare symbols, two classes taking turns character by character ("!a!a", "é é "), long
# runs of one class and random letter strings in texts over 256 KiB (see _LONG_EXTRA, _PER_CONSONANTS),
# and random characters of other kinds, which tokenize byte by byte.
_UNIT = 64
_PER_RUN = 0.63
_PER_CASE_BREAK = 1.55
_ASCII_CODES = {"space": 4, "lower": 6, "upper": 15, "punct": 14, "newline": 28, "digit": 38}
# The upper-case code is the only odd one and no code equals upper + (upper - lower), so a step of
# exactly +/-(upper - lower) between neighbouring codes is always a letter changing case.
_CASE_STEP = _ASCII_CODES["upper"] - _ASCII_CODES["lower"]
# The characters tables and separators are drawn with each have a code of their own, about a punctuation
# mark's, and no long-run extra (below): a run of one of them is one or two tokens for up to 100 of them
# in both tokenizers ("-" * 100: 2 and 2, "=" * 100: 2 and 3), so priced as punctuation the rule lines of
# a MySQL client's table (`+-----+----…`, one run of 1,400 characters) came to 735 tokens where they
# are 90, and a table's preview showed no header or row. Codes of their own also make a mix of them
# (`=-=-`, `-->`) one run each, not one long run at a punctuation run's lower price. Like every code but
# upper-case letters', they are even and none is upper + _CASE_STEP: a case break stays one.
_RULE_CODES = {"-": 12, "=": 10, "_": 18, "~": 8, "*": 22, "#": 26}
# Non-ASCII by UTF-8 lead byte (a character's first byte tells its block): tokens per character.
_NON_ASCII_WEIGHT = [
    (0xC2, 0xC2, 1.0, "Latin-1 signs: NBSP £ © ° ± « »"),
    (0xC3, 0xC3, 0.5, "Latin-1 letters: é à ü ñ ç, and × ÷"),
    (0xC4, 0xC9, 1.5, "Latin Extended: ą ł č ő ş ț ..."),
    (0xCA, 0xCF, 1.0, "IPA, combining marks, Greek"),
    (0xD0, 0xD3, 0.625, "Cyrillic"),
    (0xD4, 0xD6, 1.8125, "Armenian"),
    (0xD7, 0xD7, 1.15625, "Hebrew"),
    (0xD8, 0xDB, 0.9375, "Arabic"),
    (0xDC, 0xDF, 1.8125, "Syriac, Thaana, N'Ko"),
    (0xE0, 0xE0, 2.5625, "Indic scripts, Thai, Lao, Tibetan"),
    (0xE1, 0xE1, 2.625, "Georgian, Myanmar, Ethiopic, Khmer, Vietnamese letters"),
    (0xE2, 0xE2, 1.3125, "typographic punctuation, arrows, math, box drawing, dingbats"),
    (0xE3, 0xE3, 1.0, "CJK punctuation, kana"),
    (0xE4, 0xE9, 1.25, "CJK ideographs"),
    (0xEA, 0xED, 1.1875, "Hangul syllables"),
    (0xEE, 0xEE, 3.0, "private use (icon fonts)"),
    (0xEF, 0xEF, 1.5625, "private use, fullwidth forms, U+FFFD"),
    (0xF0, 0xF4, 3.0, "emoji and other characters beyond U+FFFF"),
]
# Long runs of one class. A run is priced as a word, but a long run of one class is not one: "[[[[",
# "abab…", "DDDD", "éééé" tokenize at 1-2 characters a token, 2-5x what the run's characters cost.
# So every character of a run of _LONG_RUN or more (of _LONG_WORD or more letters: a long word costs
# less) pays the extra that brings it to what those runs measure (0.5 a character for ASCII, 1.0 for
# Latin-1 letters), plus 5%. Letters repeating in a pattern ("xyxy") shorter than that stay under.
# Long separators ("-----", "=====") tokenize cheaply and are overcounted; that is safe. Scripts
# written without spaces (CJK) are runs of one class by nature, and their price per character covers
# them already.
# Looking for them, and for rare letter sequences (below), about doubles the estimate's time (1.8 -> 3.5
# ms a MB here). Every estimate pays it: each may decide what reaches the model (a result under a large
# budget, a message the context guard counts); a big stored result's figure, which is only shown, is
# estimated from a sample instead (`estimate_sampled`), and the sample pays it too.
_LONG_RUN, _LONG_WORD = 9, 17
# Rare letter sequences. Words are priced as words, but a string of random lowercase letters is not one:
# ids ("art_3nyb25vg7z3en6hc", pod and temp-file names), hashes in base32, shuffled text tokenize at 2-3
# letters a token, where a word costs ~1 token (estimate: 0.57 of cl100k on random lowercase "words",
# 0.74 on base32 ids). What sets them apart is cheap to see: three lowercase consonants in a row, which
# English has seldom ("str", "ght") and random letters in half their places (20 consonants of 26). Each
# such window pays _PER_CONSONANTS: 0.99 and 0.96 with it, for prose and code 2-4% more (legal prose is
# 1.62x o200k), JSON 1%, `ls -l` and `df` listings 15%: all safe. The extra passes (a translate, two
# numpy passes) cost ~0.8 ms a MB.
_PER_CONSONANTS = 0.8
_CONSONANTS = bytes(1 if chr(byte) in "bcdfghjklmnpqrstvwxz" else 0 for byte in range(256))  # a translate table
_THREE = b"\x01\x01\x01"
_TRIPLED_RUNS = re.compile(rb"([bcdfghjklmnpqrstvwxz])\1{2,}")
_LONG_EXTRA = {"punct": 0.525 - 14 / 64, "lower": 0.525 - 6 / 64, "upper": 0.525 - 15 / 64,
               "latin-1 letters": 1.05 - 32 / 64}
# Binary is never tokenized: it is priced as its base64 text would be (measured 0.91-0.96 per byte).
_BINARY_PER_BYTE = 1.0
_CHUNK = 1 << 16  # characters of a str per pass: arrays stay in cache, and a uint32 sum cannot overflow
_BYTES = 1 << 18  # bytes per pass over UTF-8: fewer numpy calls; a uint32 sum of 2**18 codes cannot overflow


def _code_table() -> bytes:
    table = bytearray(256)
    for byte in range(128):
        char = chr(byte)
        kind = ("lower" if char.islower() else "upper" if char.isupper() else "digit" if char.isdigit()
                else "space" if char in " \t" else "newline" if char in "\r\n\v\f" else "punct")
        table[byte] = _ASCII_CODES[kind]
    for char, code in _RULE_CODES.items():
        table[ord(char)] = code
    for byte in (0xC0, 0xC1, *range(0xF5, 0x100)):  # never produced by str.encode
        table[byte] = _ASCII_CODES["punct"]
    for first, last, per_char, _ in _NON_ASCII_WEIGHT:
        table[first:last + 1] = bytes([2 * round(per_char * _UNIT / 2)]) * (last + 1 - first)
    return bytes(table)


_CODES = _code_table()
_PUNCT, _LOWER, _UPPER = _ASCII_CODES["punct"], _ASCII_CODES["lower"], _ASCII_CODES["upper"]
_LATIN1_LETTERS = _CODES[0xC3]
_EXTRA_OF = {_PUNCT: _LONG_EXTRA["punct"], _LOWER: _LONG_EXTRA["lower"], _UPPER: _LONG_EXTRA["upper"],
             _LATIN1_LETTERS: _LONG_EXTRA["latin-1 letters"]}
_EXTRA_TABLE = np.zeros(256)
_EXTRA_TABLE[list(_EXTRA_OF)] = list(_EXTRA_OF.values())
_LONG_OF = {code: _LONG_WORD if code in (_LOWER, _UPPER) else _LONG_RUN for code in _EXTRA_OF}
_LONG_RUNS = re.compile(b"|".join(re.escape(bytes([code])) + b"{%d,}" % n for code, n in _LONG_OF.items()))
_LONG_NEEDLES = tuple(bytes([code]) * n for code, n in _LONG_OF.items())
# The most bytes one estimated token can stand for: the cheapest character, a space, costs 4/_UNIT of a
# token, and every other costs more per UTF-8 byte. A text longer than this many bytes per token of a
# limit is surely over it, without estimating (`surely_over`).
MAX_BYTES_PER_TOKEN = _UNIT // min(code for byte, code in enumerate(_CODES) if code and byte < 0x80)
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # deleted, so that every character leaves one code


# A run of the box-drawing line `─` (U+2500) is priced as its first two and `-`s for the rest: the rule lines
# of a table drawn with it (`sqlite3 -box`, psql's unicode style) tokenize 2–4 of them a token ("─" * 100: 7
# and 13 tokens), and priced 1.3 each, as typographic punctuation, a 34-character rule line was 47 tokens
# for 16 and 17. The first two keep their price: between spaces a run costs cl100k 3–6 tokens whatever its
# length (" ──── " 5), which `-`s alone underprice.
_BOX_RUN = "─".encode() * 3
_BOX_RUN_TAIL = re.compile(b"(?<=" + re.escape(_BOX_RUN[:6]) + b")" + re.escape(_BOX_RUN[:3]))


def _coded(encoded: bytes) -> bytes:
    """A code a character (see _code_table); a box line run's third and later `─` that of `-`."""
    if b"\xe2" in encoded and _BOX_RUN in encoded:  # a byte's memchr first: 0.03 ms a MB, the run's 0.3-0.5
        encoded = _BOX_RUN_TAIL.sub(b"-", encoded)
    return encoded.translate(_CODES, _CONTINUATION_BYTES)


def _estimate_piece(encoded: bytes) -> float:
    """The estimate of UTF-8 bytes (a character split at either end still counts once, by its lead byte),
    with the extra of long runs and of rare letter sequences."""
    rare = _PER_CONSONANTS * _consonant_windows(encoded)
    if len(encoded) < _SHORT:
        return _estimate_short(_coded(encoded)) + rare
    codes = np.frombuffer(_coded(encoded), np.uint8)
    steps = codes[1:] - codes[:-1]  # uint8: wraps around, which the case test below allows for
    case_breaks = np.count_nonzero(steps == _CASE_STEP)
    runs = 1 + np.count_nonzero(steps) - case_breaks - np.count_nonzero(steps == 256 - _CASE_STEP)
    return (int(codes.sum(dtype=np.uint32)) / _UNIT + _PER_RUN * runs + _PER_CASE_BREAK * case_breaks
            + _long_runs(codes, steps) + rare)


def _consonant_windows(encoded: bytes) -> int:
    """Places where three lowercase consonants stand in a row (see _PER_CONSONANTS), other than three of
    one letter ("xxx", "qqqq…": a long run, priced as one, and BPE has tokens for such runs: "x" * 1000
    is 125 tokens, and was estimated 1,326 with them): the 1s of the consonant mask ANDed with itself
    shifted by one and two bytes, on a big integer or in numpy."""
    mask = encoded.translate(_CONSONANTS)
    if _THREE not in mask:
        return 0
    if len(mask) < _SHORT:
        bits = int.from_bytes(mask, "big")
        windows = (bits & bits >> 8 & bits >> 16).bit_count()
        # rare in short texts; one search of a regular expression costs a third of twenty `in` tests
        if _TRIPLED_RUNS.search(encoded) is not None:
            windows -= sum(match.end() - match.start() - 2 for match in _TRIPLED_RUNS.finditer(encoded))
        return windows
    return int(np.count_nonzero(_rare_triples(np.frombuffer(mask, np.uint8), np.frombuffer(encoded, np.uint8))))


def _rare_triples(ones: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Where the consonant mask `ones` (of the bytes `raw`) starts three consonants that are not three
    of one letter: a boolean array 2 shorter than `raw`, true there."""
    triples = ones[:-1] & ones[1:]
    np.bitwise_and(triples[:-1], ones[2:], out=triples[:-1])  # in place: 10x faster than a third array
    triples = triples[:-1]
    same = raw[1:] == raw[:-1]
    same = same[:-1] & same[1:]  # raw[i] == raw[i + 1] == raw[i + 2]
    # a triple, and not three of one letter: 1 > 0 (a masked assignment `triples[same] = 0` took twice
    # as long as the rest of this function)
    return np.greater(triples, same.view(np.uint8), out=same)


def _long_runs(codes: np.ndarray, steps: np.ndarray) -> float:
    """The extra of long runs (see _LONG_EXTRA). A window of _LONG_RUN equal codes is found by ANDing
    shifted copies of "equal to the next"; two such windows _LONG_WORD - _LONG_RUN apart make one of
    _LONG_WORD."""
    same = steps == 0
    for shift in (1, 2, 4):  # windows of 2, 3, 5, then 9 equal codes
        same = same[shift:] & same[:-shift]
    if not same.any():
        return 0.0
    at = np.flatnonzero(same)  # few, and mostly indentation and long words, which pay nothing here
    code = codes[at]
    marks = at[(code == _PUNCT) | (code == _LATIN1_LETTERS)]
    letters = at[(code == _LOWER) | (code == _UPPER)]
    reach = _LONG_WORD - _LONG_RUN
    letters = letters[letters + reach < len(same)]
    return _run_extra(codes, marks, _LONG_RUN) + _run_extra(codes, letters[same[letters + reach]], _LONG_WORD)


def _run_extra(codes: np.ndarray, windows: np.ndarray, length: int) -> float:
    """The extra of the runs that hold `windows` (their starts, in order) of `length` equal codes: a
    run of R codes holds R - length + 1 windows, consecutive, and pays for all R codes."""
    if not len(windows):
        return 0.0
    firsts = windows[np.diff(windows, prepend=-2) != 1]
    return float(_EXTRA_TABLE[codes[windows]].sum() + (length - 1) * _EXTRA_TABLE[codes[firsts]].sum())


def _long_runs_short(codes: bytes) -> float:
    """`_long_runs` of a short text's codes, found by one regular expression (a Python loop over its
    runs cost more than the rest of the estimate: lines of indented code have long runs of spaces)."""
    return sum((match.end() - match.start()) * _EXTRA_OF[codes[match.start()]]
               for match in _LONG_RUNS.finditer(codes))


_SHORT = 2048  # bytes: below this, C built-ins on bytes beat numpy's per-call cost (previews count line by line)
_CASE_UP = bytes([_ASCII_CODES["lower"], _ASCII_CODES["upper"]])
_CASE_DOWN = _CASE_UP[::-1]
_LONG_EQUAL = bytes(_LONG_RUN - 1)  # that many equal neighbours in a row: a run of _LONG_RUN codes


def _estimate_short(codes: bytes) -> float:
    """`_estimate_piece` of a short text's codes, the same figure without numpy.

    A run is a group of equal codes: every code but the first starts one unless it equals the code
    before it, and the equal neighbours are the zero bytes of the codes XORed with themselves shifted
    by one, done on two big integers (C loops: 5-20x faster than itertools.groupby on preview lines).
    A step of exactly +/-(upper - lower) is only ever a letter changing case (see _ASCII_CODES), so
    those are the two-code patterns lower-upper and upper-lower, which cannot overlap themselves and
    are counted by `bytes.count`.
    """
    up, down = codes.count(_CASE_UP), codes.count(_CASE_DOWN)
    size = len(codes)
    runs, extra = size, 0.0
    if size > 1:
        changes = int.from_bytes(codes[1:], "big") ^ int.from_bytes(codes[:-1], "big")
        equal = changes.to_bytes(size - 1, "big")  # a zero byte: a code equal to the one before it
        runs -= equal.count(0)
        if _LONG_EQUAL in equal and any(needle in codes for needle in _LONG_NEEDLES):
            extra = _long_runs_short(codes)  # rare: the equal neighbours are mostly indentation
    return _short_figure(sum(codes), runs, up, down, extra)


def _short_figure(code_sum: int, runs: int, up: int, down: int, extra: float) -> float:
    """A short text's estimate from its counts (`_estimate_short`, `estimate_each`: one formula, so the
    two give the same figures)."""
    return code_sum / _UNIT + _PER_RUN * (max(1, runs) - up - down) + _PER_CASE_BREAK * up + extra


def estimate_tokens(text: str | bytes, kind: str = "text") -> int:
    """A conservative token count: >= 90% of o200k_base and cl100k_base (less 2 tokens on tiny texts).

    `bytes` count as UTF-8 decoding with replacement reads them (invalid bytes become U+FFFD), except
    for kind "binary", which is priced from its length as if sent base64-encoded: one token per byte.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown content kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind == "binary":
        size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
        return round(size * _BINARY_PER_BYTE)
    if isinstance(text, str):
        total = sum(_estimate_piece(text[start:start + _CHUNK].encode("utf-8", "surrogatepass"))
                    for start in range(0, len(text), _CHUNK))
    else:
        total = sum(_estimate_utf8(_valid_utf8(piece)) for piece in pieces(bytes(text)))
    return _rounded(total)


def estimate_each(texts: Sequence[str]) -> list[int]:
    """`estimate_tokens(text)` of each text, the same figures, the short ones (preview lines) priced
    together: one text at a time cost 10-13 µs a line of grep output or log, nearly all of it calls,
    and a preview prices a hundred lines or more.

    The short texts' UTF-8 and their codes are joined with a zero byte, which is no code and no
    consonant (byte 0 itself is coded as punctuation: the codes are joined, not the bytes), so no run,
    case break, long run or consonant window spans two texts; each text's counts are sums over its
    span (with the zero bytes after it, which add nothing), and its figure `_short_figure` of them.
    """
    estimates = [0] * len(texts)
    short, encoded = [], []
    for index, text in enumerate(texts):
        piece = text.encode("utf-8", "surrogatepass")
        if len(piece) >= _SHORT:
            estimates[index] = estimate_tokens(text)
        elif piece:
            short.append(index)
            encoded.append(piece)
    if not short:
        return estimates
    # a zero byte after the last text too: every text's span of steps, and of windows, is then not empty
    coded = [_coded(piece) for piece in encoded]  # a code a character, never 0
    codes_bytes = b"\x00".join(coded) + b"\x00"
    codes = np.frombuffer(codes_bytes, np.uint8)
    lengths = [len(piece) for piece in coded]
    starts = np.cumsum([0] + [length + 1 for length in lengths[:-1]])
    steps = codes[1:] - codes[:-1]  # a step into or out of a zero byte is never 0 or a case break
    marks = np.stack([steps == 0, steps == _CASE_STEP, steps == 256 - _CASE_STEP]).view(np.uint8)
    equal, up, down = np.add.reduceat(marks, starts, axis=1, dtype=np.int64).tolist()
    code_sums = np.add.reduceat(codes, starts, dtype=np.int64).tolist()
    extras = [0.0] * len(short)
    if any(needle in codes_bytes for needle in _LONG_NEEDLES):  # rare: as `_estimate_short` finds them
        for match in _LONG_RUNS.finditer(codes_bytes):
            at = int(np.searchsorted(starts, match.start(), "right")) - 1
            extras[at] += (match.end() - match.start()) * _EXTRA_OF[codes_bytes[match.start()]]
    windows = [0] * len(short)
    joined = b"\x00".join(encoded) + b"\x00\x00"
    mask = joined.translate(_CONSONANTS)
    if _THREE in mask:
        triples = _rare_triples(np.frombuffer(mask, np.uint8), np.frombuffer(joined, np.uint8))
        byte_starts = np.cumsum([0] + [len(piece) + 1 for piece in encoded[:-1]])
        windows = np.add.reduceat(triples.view(np.uint8), byte_starts, dtype=np.int64).tolist()
    for index, size, code_sum, same, ups, downs, extra, rare in zip(
            short, lengths, code_sums, equal, up, down, extras, windows):
        estimates[index] = _rounded(_short_figure(code_sum, size - same, ups, downs, extra) + _PER_CONSONANTS * rare)
    return estimates


def estimate_chunks(chunks: Iterable[Any]) -> int:
    """`estimate_tokens` of stored chunks (`.data` and `.bad`, the count of invalid UTF-8 bytes) without
    decoding the valid ones: the offloader has already checked every chunk while cutting it."""
    return _rounded(sum(_estimate_utf8(chunk.data if not chunk.bad else _valid_utf8(bytes(chunk.data)))
                        for chunk in chunks))


# Sampled estimates. The token figure of a stored result is only shown (whether a result fits is decided
# before, on the whole of a far smaller text: see `surely_over`), yet estimating all of it took 3.5 ms a
# MB here, longer than writing the MB to disk and the largest part of storing a big result. So a result
# of more than SAMPLE_ABOVE bytes is estimated from _SAMPLES windows of _WINDOW bytes, one in the middle
# of each of as many equal strata, priced as the whole would be. The stratified figure is raised by two
# standard errors (adjacent strata compared in pairs, which overstates the error), rounded up to 3
# significant digits, and labelled as sampled wherever it is shown.
SAMPLE_ABOVE = 1 << 19
_SAMPLES, _WINDOW = 64, 4096
# Windows priced together. All 64 at once made temporaries of 256 KiB that, in a process whose malloc
# had not yet raised its thresholds, were fresh pages each call (1 MB of grep output: 2.7-3.0 ms, against
# 1.3 for the same call later in a process that had freed bigger buffers); halves of 128 KiB cost
# 1.5 ms either way, and quarters more numpy calls than they saved.
_BATCH = 32


def estimate_sampled(data: bytes | memoryview) -> int:
    """A conservative estimate of `estimate_tokens(data)` from a stratified sample of 256 KiB."""
    view = memoryview(data)
    size = len(view)
    if size <= _SAMPLES * _WINDOW:
        return estimate_tokens(bytes(view))
    stratum = size / _SAMPLES
    windows = []
    for i in range(_SAMPLES):
        start = char_boundary(view, int(i * stratum + (stratum - _WINDOW) / 2))
        windows.append(_valid_utf8(bytes(view[start:char_boundary(view, start + _WINDOW)])))
    sizes = np.array([len(window) for window in windows])
    batches = [_window_estimates(windows[at:at + _BATCH]) for at in range(0, _SAMPLES, _BATCH)]
    estimates = np.concatenate([batch[0] for batch in batches])
    long_runs = sum(batch[1] for batch in batches)
    rates = estimates / sizes
    total = stratum * float(rates.sum()) + long_runs * size / sizes.sum()
    spread = float(np.square(stratum * (rates[0::2] - rates[1::2])).sum())
    total += 2 * math.sqrt(spread * (1 - sizes.sum() / size))
    step = 10 ** max(0, len(str(int(total))) - 3)
    return int(-(-total // step) * step)


def _window_estimates(windows: list[bytes]) -> tuple[np.ndarray, float]:
    """`_estimate_piece` of each window (of at most 65,535 bytes) less the extra of long runs, and that
    extra for all of them: one set of numpy passes over every window (a pass per window cost more in
    numpy calls than in work). Long runs are few and the same in every part of a text, so they are
    not attributed to windows."""
    parts = [_coded(window) for window in windows]
    starts = np.cumsum([0] + [len(part) for part in parts[:-1]])
    codes = np.frombuffer(b"".join(parts), np.uint8)
    steps = codes[1:] - codes[:-1]
    steps[starts[1:] - 1] = 0  # the step from one window into the next is neither a run nor a case break

    def per_window(marks: np.ndarray, at: np.ndarray = starts) -> np.ndarray:
        # uint16 from a uint8 view: no cast of every element
        return np.add.reduceat(marks.view(np.uint8), at, dtype=np.uint16).astype(np.int64)

    case_breaks = per_window(steps == _CASE_STEP)
    changes = per_window(steps != 0) - per_window(steps == 256 - _CASE_STEP) - case_breaks
    # rare letter sequences: windows joined by a byte that is no consonant, so none spans two of them
    joined = b"\x00".join(windows)
    triples = _rare_triples(np.frombuffer(joined.translate(_CONSONANTS), np.uint8), np.frombuffer(joined, np.uint8))
    consonants = per_window(triples, np.cumsum([0] + [len(window) + 1 for window in windows[:-1]]))
    steps[starts[1:] - 1] = 1  # for long runs, a window's end ends its run
    return (np.add.reduceat(codes, starts, dtype=np.uint32) / _UNIT + _PER_RUN * (1 + changes)
            + _PER_CASE_BREAK * case_breaks + _PER_CONSONANTS * consonants), _long_runs(codes, steps)


def _rounded(total: float) -> int:
    return int(total) + 2 if total else 0  # round up, plus a token of slack that only matters for short texts


def _estimate_utf8(encoded: bytes | memoryview) -> float:
    """`_estimate_piece` over `encoded` in pieces of _BYTES (a chunk's view is copied a piece at a time)."""
    return sum(_estimate_piece(bytes(encoded[start:start + _BYTES]))
               for start in range(0, len(encoded), _BYTES))


def _valid_utf8(piece: bytes) -> bytes:
    """`piece` as valid UTF-8: itself, or re-encoded from its decoding with replacement characters."""
    if piece.isascii():
        return piece
    try:
        piece.decode("utf-8")
        return piece
    except UnicodeDecodeError:
        return piece.decode("utf-8", "replace").encode("utf-8")


# bpe_openai refuses 1,000,000 characters or 200,000 tokens in one call; 40,000 characters stay under
# both even at 4 tokens per character.
_EXACT_PIECE = 40_000


@functools.lru_cache(maxsize=None)
def exact_tokenizer(name: str = "o200k_base") -> Callable[[str], int] | None:
    """A function counting tokens with the real `name` encoding, or None if bpe-openai is not installed."""
    try:
        import bpe_openai
    except ImportError:
        return None
    if name not in bpe_openai.list_encoding_names():
        raise ValueError(f"unknown encoding {name!r}; bpe-openai has {', '.join(bpe_openai.list_encoding_names())}")
    encode = bpe_openai.get_encoding(name).encode_ordinary

    def count(text: str) -> int:
        total, start = 0, 0
        while start < len(text):
            end = _piece_end(text, start)
            total += len(encode(text[start:end]))
            start = end
        return total

    return count


def _piece_end(text: str, start: int) -> int:
    """Where to end a piece of text so that counting pieces separately gives the same total.

    The tokenizers never join a newline with a following character that is neither whitespace nor
    "/", nor a non-space character with a following space. Text with neither (minified JSON, base64)
    is cut anywhere, which can add a token per cut.
    """
    end = start + _EXACT_PIECE
    if end >= len(text):
        return len(text)
    low = start + _EXACT_PIECE // 2
    newline = text.rfind("\n", low, end)
    while newline >= 0 and (text[newline + 1].isspace() or text[newline + 1] == "/"):
        newline = text.rfind("\n", low, newline)
    if newline >= 0:
        return newline + 1
    space = text.rfind(" ", low, end)
    while space >= 0 and text[space - 1].isspace():
        space = text.rfind(" ", low, space)
    return space if space >= 0 else end


def count_each(count: Callable[[str], int], texts: Sequence[str]) -> list[int]:
    """`[count(text) for text in texts]`: priced together (`estimate_each`) when `count` is the
    estimate, a TokenCounter's own `count` without a tokenizer; one by one otherwise."""
    owner = getattr(count, "__self__", None)
    if isinstance(owner, TokenCounter) and not owner.exact and getattr(count, "__func__", None) is TokenCounter.count:
        return estimate_each(texts)
    return [count(text) for text in texts]


def surely_over(size: int, limit: int) -> bool:
    """True when any text of `size` UTF-8 bytes estimates to more than `limit` tokens."""
    return size > MAX_BYTES_PER_TOKEN * limit


def utf8_size(text: str) -> int:
    """UTF-8 bytes of `text` (a lone surrogate as its 3 bytes): the most tokens a real tokenizer can
    count in it, since each of their tokens stands for one byte or more."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class TokenCounter:
    """Counts tokens: a real tokenizer when given/available, else the heuristic."""

    def __init__(self, tokenizer: Callable[[str], int] | str | None = None):
        if isinstance(tokenizer, str):
            name, tokenizer = tokenizer, exact_tokenizer(tokenizer)
            if tokenizer is None:
                raise ImportError(f"counting with {name!r} needs bpe-openai: pip install 'offload[tokenizer]'")
        self._tokenizer = tokenizer
        self.exact: bool = tokenizer is not None

    def count_stored(self, data: bytes, chunks: list[Any], kind: str = "text") -> tuple[int, bool]:
        """(tokens, sampled) of content about to be stored, cut into `chunks`: the estimate from the
        chunks (see `estimate_chunks`), or from a sample over SAMPLE_ABOVE bytes (`estimate_sampled`);
        a real tokenizer always counts all of it."""
        if self._tokenizer is not None or kind == "binary":
            return self.count(data, kind), False
        if len(data) > SAMPLE_ABOVE:
            return estimate_sampled(data), True
        return estimate_chunks(chunks), False

    def count(self, text: str | bytes, kind: str = "text") -> int:
        """Tokens in `text`; binary content is always estimated, never tokenized."""
        if self._tokenizer is None or kind == "binary":
            return estimate_tokens(text, kind)
        if kind not in KINDS:
            raise ValueError(f"unknown content kind {kind!r}; expected one of {', '.join(KINDS)}")
        if not isinstance(text, str):
            text = bytes(text).decode("utf-8", errors="replace")
        return self._tokenizer(text)
