"""Lines that report errors: found in the part of a text a preview leaves out, for it to list by number,
and the grep that finds more of them. Keywords are found with C-speed `find` on lowercased bytes and
passed over by the bytes beside them (`_stands_alone`); only candidate lines are decoded and searched.
"""

from __future__ import annotations

import re

__all__ = ["ERROR_LINES", "WORD_END", "WORD_START", "error_entry", "error_grep", "error_lines", "plain",
           "with_edges"]

ERROR_LINES = 5
# The error scan reads a first part of this size, then parts twice as large up to _SCAN_CHUNK: every
# keyword is looked for in the whole part, and a keyword the log never says costs a pass over it, so a
# log whose first errors come early is not read to its end for the keywords it lacks.
_FIRST_SCAN = 64 << 10
_SCAN_CHUNK = 8 << 20
_MAX_ERROR_CANDIDATES = 5000

# A word of its own, not part of a name: `libgpg-error.so` in `ls` output, `-Werror` and `on-failure`,
# a file's (`LogException.php`, rustdoc's `macro.panic!.html`) or a path's (`…/std/io/error`, which `find`
# lists by the thousand), nor an option's name (a kernel's `panic=1`, a mount's `errors=remount-ro`: three
# of those were a kernel log's five error lines, beside its oops and OOM kill)
WORD_START, WORD_END = r"(?<![\w/.-])", r"(?![\w/=-]|!?\.\w)"

_ERROR_WORDS = (b"error", b"exception", b"traceback", b"fatal", b"panic", b"fail")
# npm's `npm ERR!`, looked for only in npm's output (its first 64 KiB say `npm `): each word costs a pass
# over a text that lacks it, 0.3-0.6 ms a MB
_NPM_WORDS = (*_ERROR_WORDS, b"err!")
_ERROR_LINE = re.compile(
    r"(?i:" + WORD_START + r"(?:errors?|fatal|panic(?:ked)?|fail(?:ed|ure|ures|s)?|exceptions?|traceback)"
    + WORD_END + r")|[A-Za-z](?:Error|Exception)" + WORD_END
    + "|" + WORD_START + "ERR!"  # npm's `npm ERR! code ERESOLVE`
)
# Terminal colour and cursor codes (CSI, OSC): `\x1b[31mERROR` holds no word "ERROR" for `\b` to find.
_ANSI = re.compile(r"\x1b(?:\[[0-9;:?<=>]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?)")
_NOT_AN_ERROR = re.compile(
    r"(?i)\b(?:0|no|zero|without)\s+(?:errors?|failures?|failed|exceptions?)\b"
    r"|\b(?:errors?|failures?|failed)\s*[:=]\s*0\b"
    # a compiler's advice under its error (rustc's `help: … and panic if the value doesn't fit`)
    r"|^\s*(?:= )?(?:help|note|hint):.*"
)


def plain(text: str) -> str:
    """`text` without terminal escape codes (see _ANSI), for the searches that read words."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def _clip_chars(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"…[+{len(text) - limit:,} chars]"


def error_entry(number: int, text: str) -> str:
    """An error line of the omitted part as its list shows it: its number, then its text (160 characters)."""
    return f"… {number:,}: {_clip_chars(text, 160)}"


def error_lines(data: bytes, span: tuple[int, int], gap: tuple[int, int],
                limit: int) -> tuple[list[tuple[int, str]], bool]:
    """The first lines of data[start:end] that report an error, and whether the whole span was searched.

    Keywords are found with C-speed `find` on a lowercased part (see _FIRST_SCAN); only candidate lines
    are decoded and checked with a regular expression (which rejects "0 errors", "error_count" and the
    like).
    """
    start, end = span
    words = _NPM_WORDS if data.find(b"npm ", 0, 1 << 16) != -1 else _ERROR_WORDS
    found: list[tuple[int, str]] = []
    # Line numbers are counted only up to each line found, so a clean 100 MB log costs no counting.
    number, counted_to = gap[0], start
    candidates = 0
    position, size = start, _FIRST_SCAN
    while position < end:
        chunk_end = min(end, position + size)
        size = min(2 * size, _SCAN_CHUNK)
        if chunk_end < end:
            newline = data.find(b"\n", chunk_end, end)
            chunk_end = end if newline == -1 else newline + 1
        lowered = data[position:chunk_end].lower()  # ASCII letters only, as the keywords are
        next_hit = {word: lowered.find(word) for word in words}
        coloured = b"\x1b" in lowered  # a colour code's `m` stands before a word: no test by its neighbours
        while True:
            live = [(hit, word) for word, hit in next_hit.items() if hit != -1]
            if not live:
                break
            hit, word = min(live)
            if not coloured and not _stands_alone(data, position, lowered, hit, len(word)):
                next_hit[word] = lowered.find(word, hit + 1)  # part of a name: not a candidate
                continue
            line_start = lowered.rfind(b"\n", 0, hit) + 1
            line_end = lowered.find(b"\n", hit)
            line_end = len(lowered) if line_end == -1 else line_end
            candidates += 1
            text = data[position + line_start:position + line_end].decode("utf-8", "replace").rstrip("\r")
            if _ERROR_LINE.search(_NOT_AN_ERROR.sub("", plain(text))):
                number += data.count(b"\n", counted_to, position + line_start)
                counted_to = position + line_start
                found.append((number, text))
                if len(found) >= limit:
                    return found, False
            if candidates >= _MAX_ERROR_CANDIDATES:
                return found, False
            for word, at in next_hit.items():
                if at != -1 and at <= line_end:
                    next_hit[word] = lowered.find(word, line_end + 1)
        position = chunk_end
    return found, True


_BEFORE_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_/.-")  # of lowered bytes, as WORD_START
_AFTER_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_/=-")  # as WORD_END
_WORDISH = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_")


def _stands_alone(data: bytes, base: int, lowered: bytes, hit: int, size: int) -> bool:
    """Whether the keyword at `hit` of `lowered` (data[base:…] lowercased) may be a word of its own, by
    the bytes beside it, as WORD_START and WORD_END judge them: a cheap test before a line is decoded
    and searched, which never rejects what they would take. A kernel log's 15,000 `errors=remount-ro`
    and `rx_errors=0` were candidates each, and the search stopped at its candidate limit before the
    segfault and the I/O errors further on."""
    if hit and lowered[hit - 1] in _BEFORE_WORD:
        # a class name's ending (ValueError, IOException): a letter, then the word's capital
        before = data[base + hit - 1]
        if not ((97 <= before <= 122 or 65 <= before <= 90) and 65 <= data[base + hit] <= 90):
            return False
    end, length = hit + size, len(lowered)
    while end < length and 97 <= lowered[end] <= 122:  # the word's ending: errors, failed, panicked
        end += 1
    if end >= length:
        return True
    if lowered[end] in _AFTER_WORD:
        return False
    dot = end + (lowered[end] == 33)  # `!.`: rustdoc's macro.panic!.html
    return not (dot + 1 < length and lowered[dot] == 46 and lowered[dot + 1] in _WORDISH)


def with_edges(data: bytes, span: tuple[int, int], scanned: tuple[tuple[int, int], tuple[int, int]],
                gap: tuple[int, int], errors: list[str], numbers: list[int],
                complete: bool) -> tuple[list[str], list[int], bool]:
    """The error lines of the omitted `span` (bytes; its lines `gap`), given those found in the part of
    it `scanned` searched (bytes, lines): the parts before and after that are searched, and what they
    hold is listed in line order."""
    (start, end), (_, last) = scanned
    before: list[tuple[int, str]] = []
    after: list[tuple[int, str]] = []
    if span[0] < start:
        before, whole = error_lines(data, (span[0], start), gap, ERROR_LINES)
        complete = complete and whole
    if span[1] > end:
        after, whole = error_lines(data, (end, span[1]), (last + 1, gap[1]), ERROR_LINES)
        complete = complete and whole
    found = [(number, error_entry(number, text)) for number, text in before]
    found += zip(numbers, errors)
    found += [(number, error_entry(number, text)) for number, text in after]
    if len(found) > ERROR_LINES:
        found, complete = found[:ERROR_LINES], False
    return [text for _, text in found], [number for number, _ in found], complete


def error_grep(lines: list[str]) -> str:
    """A grep pattern for more of a list of error lines that stopped at its first few: the words that made
    those lines errors, as they are written, each a word of its own (`\\bERROR\\b|Error\\b`: a class
    name's ending). The reference's next calls offer it in place of a bare "regex": "first 4" of 2,857
    ERROR lines said nothing of how to find the others. Without the word bounds, `error` matched 9,999
    lines of a kernel log for its 4 errors (`errors=remount-ro`, `rx_errors=0`); a word the first lines
    do not say (a later `panicked`) it does not find."""
    words: list[str] = []
    for line in lines:
        found = _ERROR_LINE.search(_NOT_AN_ERROR.sub("", plain(line)))
        if not found:
            continue
        word = found.group(0)
        if word[1:].startswith(("Error", "Exception")) and word[0].isalpha():  # "eError" of ValueError
            word = word[1:] + r"\b"
        else:  # a word's end is no word bound after a `!` (npm's ERR!)
            word = rf"\b{re.escape(word)}" + (r"\b" if word[-1].isalnum() else "")
        if word not in words:
            words.append(word)
    return "|".join(words[:4]) or r"(?i)\b(?:error|exception|traceback|fatal|panic|fail)"  # its word cut off
