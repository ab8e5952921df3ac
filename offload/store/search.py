"""The listing's text filter, and the column it reads a call's args from.

Args are stored as JSON, so a LIKE over that column matched its syntax: text=" or { or : found every
artifact that had args. `args_text` holds their keys and values as text instead, written beside the JSON
when the artifact is, so that the filter stays one LIKE per column in the database on every backend.
"""

from __future__ import annotations

from typing import Any, Iterator

import sqlalchemy as sa

from ..errors import InvalidArgument
from ..jsontext import dumps, loads
from .models import artifacts
from .records import column_text

# Between two keys or values in args_text. A search holds none (see _aliased), so no match can run from
# one key or value into the next.
SEPARATOR = "\x1f"  # the unit separator


def args_text(args: str | None) -> str | None:
    """The keys and values of the JSON `args`, each as text, in document order between SEPARATORs:
    strings decoded (a quote, a line break or é is itself, not its JSON escape), numbers, true, false and
    null as JSON writes them, and no JSON syntax. Args that do not parse (a row written by hand, or
    nested deeper than Python's parser goes) are their text as it is."""
    if args is None:
        return None
    try:
        value = loads(args)
    except (ValueError, RecursionError):
        return _aliased(column_text(args))
    return SEPARATOR.join(_aliased(column_text(term)) for term in _terms(value))


def _terms(value: Any) -> Iterator[str]:
    """Every key and scalar of `value`, depth first, without recursion (args may nest thousands deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in reversed(item.items()):
                stack += (inner, str(key))  # the key comes off first, as a string term
        elif isinstance(item, list):
            stack.extend(reversed(item))
        else:
            yield item if isinstance(item, str) else dumps(item).decode()


def _aliased(text: str) -> str:
    """`text` with SEPARATOR written as the four characters \\x1f, in a key or value and in a search alike,
    as column_text writes NUL (which PostgreSQL refuses) as \\x00."""
    return text.replace(SEPARATOR, "\\x1f")


MAX_TEXT = 1000  # characters of a listing's `text`: far more than any name, id or argument one looks for


def text_filter(text: str) -> sa.ColumnElement[bool]:
    """Artifacts whose tool, args, session or id holds `text` (as column_text writes it): a plain
    substring, % and _ in it being themselves, not LIKE wildcards.

    Args are matched in `args_text`, never across two of their keys or values. Exact, but for two
    aliases: in args, U+001F and NUL are found as (and by) their escapes \\x1f and \\x00, and a lone
    surrogate as its \\udXXX escape (it is so written in every column). Case follows the backend's LIKE:
    SQLite ignores the case of ASCII letters, DuckDB and PostgreSQL do not. Not meta, whose keys
    ("notes", ...) every row holds, so that text=notes matched every artifact.
    """
    if len(text) > MAX_TEXT:  # SQLite refuses a LIKE pattern over 50,000 bytes ("too complex"): a store error
        raise InvalidArgument(f"the text to find may be up to {MAX_TEXT:,} characters (got {len(text):,})")
    a = artifacts.c
    return sa.or_(a.tool.contains(text, autoescape=True), a.args_text.contains(_aliased(text), autoescape=True),
                  a.session.contains(text, autoescape=True), a.id.contains(text, autoescape=True))
